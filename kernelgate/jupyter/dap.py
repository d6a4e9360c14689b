"""The debugger's pure parts: cell paths, program <-> cell coordinates, and inert replies.

JupyterLab names a cell's code by a hash, as ipykernel does (``murmur2_x86`` with seed
``0xC70F6907``, the path ``<prefix><hash>.py``), and finds the cell a frame is in by hashing
each cell's source the same way. The child knows only its program (``"<program>"``, setup
cells' source then the cell's): :class:`ProgramMap` turns a cell path and line into a program
line and back.

Everything the child says reaches the front end through :func:`inert_frames`,
:func:`inert_variables` and friends: only the DAP fields JupyterLab reads, each of the type
it expects, strings with their control characters escaped and cut to a bound. A value is
always a string of text, never markup (a rich view is ``text/plain`` alone).

>>> murmur2_x86("print(1)", HASH_SEED) == murmur2_x86("print(1)", HASH_SEED)
True
>>> m = ProgramMap.of(Program("x = 1\\ny = 2"), "/tmp/p/")
>>> m.program_line(m.paths[0], 2), m.cell_line(2) == (m.paths[0], 2)
(2, True)
"""

from __future__ import annotations

import functools
import hashlib
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kernelgate.gateway.debug import MAX_BREAKPOINTS, PROGRAM_PATH

from .cells import Program
from .tracebacks import inert

__all__ = [
    "HASH_SEED",
    "PROGRAM_PATH",
    "ProgramMap",
    "cell_path",
    "clip",
    "inert_body",
    "murmur2_x86",
]

#: ipykernel's seed (``ipykernel.compiler.get_tmp_hash_seed``): JupyterLab hashes with it.
HASH_SEED = 0xC70F6907

#: Bounds on what the front end is sent of the child's text.
MAX_NAME = 200
MAX_VALUE = 1000
MAX_TYPE = 200
MAX_MESSAGE = 2000
MAX_ITEMS = 300
MAX_FRAMES = 200
#: Longer sources are not hashed as JupyterLab does (pure Python murmur2 takes about a
#: quarter of a second per MiB, on the kernel's loop): see :func:`cell_path`.
MAX_HASHED_CHARS = 1 << 18
_CUT = "... [cut]"


def murmur2_x86(data: str, seed: int) -> int:
    """MurmurHash2 (x86, 32 bits) of ``data``'s UTF-8 bytes: ipykernel's ``murmur2_x86``,
    and JupyterLab's (which encodes a lone surrogate as U+FFFD, where ipykernel fails).

    >>> murmur2_x86("", HASH_SEED) == murmur2_x86("", HASH_SEED) and murmur2_x86("a", 1) != 0
    True
    """
    m = 0x5BD1E995
    try:
        raw = data.encode("utf-8")
    except UnicodeEncodeError:
        # A lone surrogate (JSON can carry one): JupyterLab's TextEncoder makes it U+FFFD.
        fixed = data.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
        raw = fixed.encode("utf-8", "replace")
    length = len(raw)
    h = (seed ^ length) & 0xFFFFFFFF
    end = length & ~3
    for i in range(0, end, 4):
        k = raw[i] | (raw[i + 1] << 8) | (raw[i + 2] << 16) | (raw[i + 3] << 24)
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> 24
        k = (k * m) & 0xFFFFFFFF
        h = (h * m) & 0xFFFFFFFF
        h ^= k
    rest = length & 3
    if rest:
        k = 0
        if rest == 3:
            k = raw[end + 2] << 16
        if rest >= 2:
            k |= raw[end + 1] << 8
        k |= raw[end]
        h ^= k
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h


def cell_path(code: str, prefix: str) -> str:
    """The path JupyterLab gives a cell whose source is ``code`` (``prefix`` ends with a
    separator): ``<prefix><murmur2>.py``. A source of more than :data:`MAX_HASHED_CHARS`
    characters gets ``<prefix>large-<sha256>.py`` instead (quick to compute; JupyterLab does
    not find its breakpoints there, so such a cell is not debugged by line)."""
    if len(code) > MAX_HASHED_CHARS:
        digest = hashlib.sha256(code.encode("utf-8", "surrogatepass")).hexdigest()[:32]
        return f"{prefix}large-{digest}.py"
    return f"{prefix}{_murmur2_name(code)}.py"


@functools.lru_cache(maxsize=256)  # setup cells come again in every later cell's program
def _murmur2_name(code: str) -> int:
    return murmur2_x86(code, HASH_SEED)


def tmp_prefix() -> str:
    """The kernel's cell-path prefix: ``<tempdir>/kernelgate-ipykernel_<pid>/``. Nothing is
    written there; ``ipykernel_`` in it makes JupyterLab name frames ``Cell [N]``."""
    return os.path.join(tempfile.gettempdir(), f"kernelgate-ipykernel_{os.getpid()}") + os.sep


@dataclass(frozen=True)
class _Part:
    name: str
    path: str
    source: str
    start: int  # the part's first program line
    count: int


class ProgramMap:
    """Where each line of a run's program is from: which part (setup cell or the cell, each
    named by its cell path) and which line of it."""

    def __init__(self, parts: list[_Part]) -> None:
        self.parts = parts

    @classmethod
    def of(cls, program: Program, prefix: str) -> ProgramMap:
        return cls(
            [
                _Part(name, cell_path(source, prefix), source, start, count)
                for name, source, start, count in program.segments()
            ]
        )

    @property
    def paths(self) -> list[str]:
        return [part.path for part in self.parts]

    def program_line(self, path: str, line: int) -> int | None:
        """The program line of line ``line`` of the first part at ``path`` (None: no such
        part, or the line is not in it)."""
        for part in self.parts:
            if part.path == path and 1 <= line <= part.count:
                return part.start + line - 1
        return None

    def program_breakpoints(
        self, breakpoints: Mapping[str, list[dict[str, Any]]]
    ) -> list[dict[str, Any]]:
        """Cell breakpoints (path -> ``[{line, condition?}]``) as the program's, for every
        part they fall in (a source in two parts gets them in both)."""
        out: list[dict[str, Any]] = []
        for part in self.parts:
            for bp in breakpoints.get(part.path, ()):
                line = bp["line"]
                if 1 <= line <= part.count and len(out) < MAX_BREAKPOINTS:
                    out.append({**bp, "line": part.start + line - 1})
        return out

    def cell_line(self, line: int) -> tuple[str, int] | None:
        """``(cell path, local line)`` of program line ``line`` (None: outside the program)."""
        for part in self.parts:
            if part.start <= line < part.start + part.count:
                return part.path, line - part.start + 1
        return None

    def source_of(self, path: str) -> str | None:
        for part in self.parts:
            if part.path == path:
                return part.source
        return None


# -- inert text --------------------------------------------------------------------------------


def clip(value: object, limit: int) -> str:
    """``value`` as text the front end can show: control characters escaped, at most
    ``limit`` characters (then a marker). A non-string becomes its type's name in brackets,
    never its repr (the child chose it)."""
    if not isinstance(value, str):
        return "" if value is None else f"<{type(value).__name__}>"
    text = inert(value)
    if len(text) > limit:
        text = text[: max(0, limit - len(_CUT))] + _CUT
    return text


def _int(value: object, default: int = 0) -> int:
    """An int field the child sent (a bool, float or out-of-range number is ``default``)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**53:
        return default
    return value


def inert_frames(body: Mapping[str, Any], where: ProgramMap) -> dict[str, Any]:
    """A stackTrace body with each ``<program>`` frame at its cell's path and local line;
    frames of any other source (the child should send none) are left out."""
    frames: list[dict[str, Any]] = []
    raw = body.get("stackFrames")
    for frame in raw[:MAX_FRAMES] if isinstance(raw, list) else []:
        if not isinstance(frame, Mapping):
            continue
        source = frame.get("source")
        path = source.get("path") if isinstance(source, Mapping) else None
        line = _int(frame.get("line"))
        mapped = where.cell_line(line) if path == PROGRAM_PATH else None
        if mapped is None:
            continue
        cell, local = mapped
        frames.append(
            {
                "id": _int(frame.get("id")),
                "name": clip(frame.get("name"), MAX_NAME),
                "line": local,
                "column": max(1, _int(frame.get("column"), 1)),
                "source": {"path": cell, "name": os.path.basename(cell)},
            }
        )
    return {"stackFrames": frames, "totalFrames": len(frames)}


def inert_scopes(body: Mapping[str, Any]) -> dict[str, Any]:
    scopes = []
    raw = body.get("scopes")
    for scope in raw[:MAX_ITEMS] if isinstance(raw, list) else []:
        if isinstance(scope, Mapping):
            scopes.append(
                {
                    "name": clip(scope.get("name"), MAX_NAME),
                    "variablesReference": _int(scope.get("variablesReference")),
                    "expensive": scope.get("expensive") is True,
                }
            )
    return {"scopes": scopes}


def _variable(var: Mapping[str, Any]) -> dict[str, Any]:
    out = {
        "name": clip(var.get("name"), MAX_NAME),
        "value": clip(var.get("value"), MAX_VALUE),
        "type": clip(var.get("type"), MAX_TYPE),
        "variablesReference": _int(var.get("variablesReference")),
    }
    if isinstance(var.get("evaluateName"), str):
        out["evaluateName"] = clip(var["evaluateName"], MAX_NAME)
    return out


def inert_variables(body: Mapping[str, Any]) -> dict[str, Any]:
    raw = body.get("variables")
    items = raw[:MAX_ITEMS] if isinstance(raw, list) else []
    return {"variables": [_variable(v) for v in items if isinstance(v, Mapping)]}


def inert_evaluate(body: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "result": clip(body.get("result"), MAX_VALUE),
        "type": clip(body.get("type"), MAX_TYPE),
        "variablesReference": _int(body.get("variablesReference")),
    }


def inert_rich(body: Mapping[str, Any]) -> dict[str, Any]:
    """A richInspectVariables body: ``text/plain`` alone (never the child's HTML, images or
    scripts), cut to a bound."""
    data = body.get("data")
    text = data.get("text/plain") if isinstance(data, Mapping) else None
    shown = {"text/plain": clip(text, MAX_VALUE * 10)} if isinstance(text, str) else {}
    return {"data": shown, "metadata": {}}


def inert_event(event: Mapping[str, Any]) -> dict[str, Any] | None:
    """A run's ``stopped`` or ``continued`` event as the front end gets it (None: not one
    the front end is sent)."""
    kind = event.get("event")
    body = event.get("body")
    body = body if isinstance(body, Mapping) else {}
    if kind == "stopped":
        out: dict[str, Any] = {
            "reason": clip(body.get("reason"), 40) or "pause",
            "threadId": 1,
            "allThreadsStopped": True,
        }
        for name in ("description", "text"):
            if isinstance(body.get(name), str):
                out[name] = clip(body[name], MAX_MESSAGE)
        ids = body.get("hitBreakpointIds")
        if isinstance(ids, list):
            out["hitBreakpointIds"] = [_int(i) for i in ids[:MAX_ITEMS]]
        return {"event": "stopped", "body": out}
    if kind == "continued":
        return {"event": "continued", "body": {"threadId": 1, "allThreadsContinued": True}}
    return None


def inert_body(command: str, body: Mapping[str, Any], where: ProgramMap) -> dict[str, Any]:
    """The body of a runtime request's successful reply, as the front end gets it."""
    if command == "stackTrace":
        return inert_frames(body, where)
    if command == "scopes":
        return inert_scopes(body)
    if command in ("variables", "inspectVariables"):
        return inert_variables(body)
    if command == "evaluate":
        return inert_evaluate(body)
    if command == "richInspectVariables":
        return inert_rich(body)
    if command == "continue":
        return {"allThreadsContinued": True}
    if command == "threads":
        return {"threads": [{"id": 1, "name": "MainThread"}]}
    return {}
