"""Replay cells: a cell whose first line is ``#| replay PATH [--cell N]`` runs against a
recording's answers instead of live bindings.

The cell's code runs as it is, marker line included (a comment to Python), so the cell's
lines are the program's lines and a debugger's breakpoints and frames map one to one.
Every binding call is answered from the recording (:mod:`kernelgate.notebooks.replay`):
no live call is made, and a call the recording lacks raises ``ToolError`` (``ename``
``NotRecorded``) in the program. When the run ends, the replay's report (what matched,
what differs from the recording) is shown as one more output.

A cell that holds only the marker runs the recorded program itself, after the marker
line, and hands that text back (``set_next_input`` with ``replace``) so the user gets the
program into the cell to edit, break in and run again.

>>> replay_marker("#| replay runs/session.ipynb --cell 3\\nx = await tools.search('a')")
ReplayMarker(path='runs/session.ipynb', cell=3, cell_id=None, position=None, line=1)
>>> replay_marker("x = 1") is None
True
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kernelgate.gateway.api import CodeGateway
from kernelgate.gateway.debug import RunDebugger
from kernelgate.gateway.gateway import Gateway
from kernelgate.gateway.launch import NodeUnavailable
from kernelgate.gateway.output import OutputListener
from kernelgate.gateway.plan import CallListener
from kernelgate.model.limits import Limits
from kernelgate.model.result import ErrorInfo, RunResult
from kernelgate.notebooks.cellrun import replay_output
from kernelgate.notebooks.reading import NotARunError, RecordedRun, RecordingError, load_run
from kernelgate.notebooks.replay import replay_async

__all__ = ["FORM", "ReplayMarker", "replay_body", "replay_marker", "run_replay_cell"]

#: How the marker is written; every error about a marker shows it.
FORM = "#| replay PATH [--cell N | --cell-id ID | --position K]"

# ``#| replay`` then a space or the end: ``#| replayed`` is an ordinary comment. A
# TypeScript or JavaScript cell writes it as its comment: ``//| replay``.
_MARKER = re.compile(r"#\|\s*replay(?=\s|$)(.*)", re.IGNORECASE)
_SCRIPT_MARKER = re.compile(r"//\|\s*replay(?=\s|$)(.*)", re.IGNORECASE)


@dataclass(frozen=True)
class ReplayMarker:
    """A parsed ``#| replay`` line: the recording (``path``, relative to the kernel's
    working directory), the run in it (``cell``, ``cell_id`` or ``position``, as for
    :func:`kernelgate.notebooks.load_run`), and the cell line the marker is on (from 1)."""

    path: str
    cell: int | None = None
    cell_id: str | None = None
    position: int | None = None
    line: int = 1


def _bad(what: str) -> ValueError:
    return ValueError(f"{what}; write the cell's first line as {FORM}")


def _integer(option: str, text: str | None) -> int:
    if text is None:
        raise _bad(f"#| replay: {option} needs a value")
    try:
        return int(text)
    except ValueError:
        raise _bad(f"#| replay: {option} takes a whole number, not {text!r}") from None


def replay_marker(code: str, comment: str = "#") -> ReplayMarker | None:
    """The cell's ``#| replay`` marker, or ``None`` when its first line (after blank
    lines) is not one. Raises ``ValueError`` naming the bad value and the right form for
    a marker that is malformed (no path, an unknown option, a value that is not a number,
    two ways of choosing the run).

    >>> replay_marker("#| replay 'my runs/s.ipynb' --cell-id ab12")
    ReplayMarker(path='my runs/s.ipynb', cell=None, cell_id='ab12', position=None, line=1)
    >>> replay_marker("#| replay s.ipynb --cell three")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: #| replay: --cell takes a whole number, not 'three'; write ... as #| replay PATH ...

    ``comment`` is the cell language's line comment: ``"//"`` reads ``//| replay PATH``
    (a TypeScript or JavaScript kernel's cells).

    >>> replay_marker("//| replay s.ipynb --cell 2", comment="//").cell
    2
    """
    lines = code.split("\n")
    index = next((i for i, line in enumerate(lines) if line.strip()), None)
    if index is None:
        return None
    found = (_SCRIPT_MARKER if comment == "//" else _MARKER).fullmatch(lines[index].strip())
    if found is None:
        return None
    try:
        words = shlex.split(found.group(1))
    except ValueError as exc:  # an unclosed quote
        raise _bad(f"#| replay: cannot read {found.group(1).strip()!r} ({exc})") from None
    path: str | None = None
    chosen: dict[str, Any] = {}
    i = 0
    while i < len(words):
        word = words[i]
        option, eq, inline = word.partition("=")
        if option in ("--cell", "--cell-id", "--position"):
            value = inline if eq else (words[i + 1] if i + 1 < len(words) else None)
            i += 1 if eq else 2
            if chosen:
                raise _bad(
                    f"#| replay: choose the run one way, not by {next(iter(chosen))} and {option}"
                )
            if option == "--cell-id":
                if not value:
                    raise _bad("#| replay: --cell-id needs a cell's id")
                chosen[option] = value
            else:
                chosen[option] = _integer(option, value)
            continue
        if word.startswith("-") and word != "-":
            raise _bad(f"#| replay: unknown option {word!r}")
        if path is not None:
            raise _bad(f"#| replay: one recording at a time, got {path!r} and {word!r}")
        path = word
        i += 1
    if not path:
        raise _bad("#| replay: which recording? The marker names no PATH")
    return ReplayMarker(
        path=path,
        cell=chosen.get("--cell"),
        cell_id=chosen.get("--cell-id"),
        position=chosen.get("--position"),
        line=index + 1,
    )


def replay_body(marker: ReplayMarker, code: str) -> str:
    """The cell's code after the marker line: blank (only whitespace) when the cell is to
    run the recorded program itself.

    >>> code = "#| replay a.ipynb\\n\\n"
    >>> replay_body(replay_marker(code), code).strip()
    ''
    """
    return "\n".join(code.split("\n")[marker.line :])


def _marker_in_language(code: str, marker: ReplayMarker, language: str) -> str:
    """``code`` with its marker line a comment of the recording's ``language``: a Python
    kernel's ``#| replay`` before a TypeScript program is ``//#| replay`` (``#`` is no
    comment in TypeScript), a TypeScript kernel's ``//| replay`` before a Python program
    ``#//| replay``; the line stays, so the program's lines are still the cell's.

    >>> m = replay_marker("#| replay ts.ipynb")
    >>> _marker_in_language("#| replay ts.ipynb\\nawait tools.f()", m, "typescript")
    '//#| replay ts.ipynb\\nawait tools.f()'
    >>> _marker_in_language("#| replay py.ipynb\\nx", m, "python")
    '#| replay py.ipynb\\nx'
    """
    comment = "#" if language == "python" else "//"
    lines = code.split("\n")
    line = lines[marker.line - 1]
    if line.lstrip().startswith(comment + "|"):
        return code
    indent = line[: len(line) - len(line.lstrip())]
    lines[marker.line - 1] = f"{indent}{comment}{line.lstrip()}"
    return "\n".join(lines)


def _refused(exc: BaseException, what: str) -> RunResult:
    """A replay cell that could not start: an ended run saying why, as a cell's error."""
    message = f"{what}: {exc}"
    error = ErrorInfo(type(exc).__name__, message, [f"{type(exc).__name__}: {message}"])
    return RunResult(status="exception", error=error)


async def _recording(marker: ReplayMarker, cwd: str | None) -> RecordedRun:
    where = os.path.join(cwd if cwd is not None else os.getcwd(), marker.path)
    # Read off the loop: a recording may be large, and the kernel's loop serves control.
    try:
        return await asyncio.to_thread(
            load_run, where, marker.cell, cell_id=marker.cell_id, position=marker.position
        )
    except OSError as exc:
        # The same class (FileNotFoundError, PermissionError, ...), with where it looked.
        raise type(exc)(
            f"cannot read the recording {marker.path!r} ({os.path.abspath(where)}): "
            f"{exc.strerror or exc}; a relative PATH is from the kernel's working directory "
            f"{os.path.abspath(cwd or os.getcwd())}"
        ) from None


def _settings(like: Gateway | None) -> dict[str, Any]:
    """What a replay's gateway takes over from the kernel's (all but bindings and limits)."""
    if like is None:
        return {}
    return {
        "sandbox": like.sandbox,
        "strict": like.strict,
        "pool_size": like.pool_size,
        "env": dict(like.env),
        "tmp_dir": like.tmp_dir,
        "read_paths": like.read_paths,
    }


async def run_replay_cell(
    marker: ReplayMarker,
    code: str,
    *,
    limits: Limits | None,
    debug: RunDebugger | None = None,
    on_output: OutputListener | None = None,
    on_call: CallListener | None = None,
    python: str | os.PathLike[str] | None = None,
    cwd: str | None = None,
    payload: list[dict[str, Any]] | None = None,
    on_gateway: Callable[[CodeGateway], Any] | None = None,
    like: Gateway | None = None,
) -> RunResult:
    """Run a replay cell: ``code`` (marker line included) against the recording's answers.

    ``limits`` are the kernel's for the cell (``None``: the replay's budget follows the
    recording, :func:`~kernelgate.notebooks.replay.replay_budget`); ``debug``,
    ``on_output`` and ``on_call`` are as for :meth:`kernelgate.Gateway.run`, and
    ``python`` an interpreter for the child. ``cwd`` is where a relative
    PATH starts (default: the kernel's working directory). ``on_gateway`` is given the
    gateway the replay runs on (not the kernel's: it has the recording's stand-ins for
    bindings) before the run starts: interrupt the cell with its ``interrupt()``. ``like``
    is the kernel's gateway: the replay's gets its sandbox level, strictness, pool size,
    environment, temporary directory and read paths (and its runtime, when the recording
    is in its language and ``python`` is not given), so a replay cell runs as isolated as
    any cell of the kernel.

    Ends with one more ``on_output``: the replay's report (role ``replay``), saying
    whether the run matched the recording and every difference if not. A cell holding
    only the marker runs the recorded program after the marker line, and appends a
    ``set_next_input`` payload (``replace: True``) with that text to ``payload``.

    For the notebook's own cells only, never a private run (a request with an owner
    secret, :mod:`.clients`): that program is whatever an agent sent, and a marker would
    let it read any recording on the kernel's host and get its answers.

    Never raises for a recording it cannot use (no such file, not a run, no such cell, a
    crafted file): the result is an ended run (status ``exception``) saying why.
    """
    try:
        recorded = await _recording(marker, cwd)
    except (OSError, NotARunError, RecordingError, TypeError) as exc:
        return _refused(exc, "#| replay")
    body = replay_body(marker, code)
    code = _marker_in_language(code, marker, recorded.language)
    if body.strip():
        program = code
    else:
        head = "\n".join(code.split("\n")[: marker.line])
        program = f"{head}\n{recorded.program}"
        body = recorded.program
        if payload is not None:
            payload.append({"source": "set_next_input", "text": program, "replace": True})
    # The kernel's runtime (its interpreter) when the recording is in its language.
    lend = python is None and like is not None and like.language == recorded.language
    try:
        report = await replay_async(
            recorded,
            program=program,
            limits=limits,
            python=python,
            runtime=like.runtime if lend and like is not None else None,
            gateway_options=_settings(like),
            debug=debug,
            on_output=on_output,
            on_call=on_call,
            on_gateway=on_gateway,
        )
    except (NotImplementedError, NodeUnavailable) as exc:  # a language it cannot run here
        return _refused(exc, "#| replay")
    # The marker line is the cell's, not the program's: the program is edited only if
    # what follows the marker differs from what was recorded (a front end's cell has no
    # final newline: that is no edit).
    edited = body.rstrip() != recorded.program.rstrip()
    report = dataclasses.replace(report, program_edited=edited)
    if on_output is not None:
        on_output(replay_output(report))
    return report.result
