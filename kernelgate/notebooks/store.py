"""Saving runs as notebooks, atomically, and reading them back.

A write never leaves a broken file: the notebook goes to a temporary file in the same
directory, is flushed to disk (``fsync``), and only then renamed over the target
(``os.replace``), after which the directory itself is synced. A crash at any point leaves
either the old file or the new one, never a mix.
"""

from __future__ import annotations

import json
import math
import os
import secrets
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from kernelgate.gateway.sanitize import sanitize_outputs
from kernelgate.model.result import CallRecord, ErrorInfo, RunResult
from kernelgate.wire.messages import CALL_MIME
from kernelgate.wire.values import MAX_DEPTH

from ._values import restore_key_orders
from .render import FORMAT, run_notebook_dict

__all__ = [
    "NotARunError",
    "RecordingError",
    "MAX_RECORDING_BYTES",
    "RecordedRun",
    "save_run",
    "load_run",
    "atomic_write",
    "dumps_notebook",
    "read_notebook",
    "run_cells",
]

#: Bytes per ``os.write`` when writing a notebook.
_CHUNK = 1 << 16


class NotARunError(ValueError):
    """A file is not a kernelgate recording, or does not hold the run that was asked for."""


class RecordingError(NotARunError):
    """A recording is damaged or crafted: a field has the wrong type or an impossible value,
    or the file is too large or too deeply nested. The message names the run and field."""


#: Recordings larger than this are refused before they are read: a run's outputs are
#: capped far below it (Limits.max_output_bytes, max_value_bytes per call).
MAX_RECORDING_BYTES = 512 * 1024 * 1024
#: Nesting a recording may have: a value crossing the boundary nests at most MAX_DEPTH
#: levels, and the notebook around it adds a handful.
_MAX_NESTING = MAX_DEPTH + 16


@dataclass(repr=False)
class RecordedRun(RunResult):
    """A :class:`~kernelgate.RunResult` read back from a notebook.

    ``source`` is the file it came from; ``run_number`` its place in a session log (1 for
    a single run); ``kernelgate_version`` the version that recorded it.
    """

    source: str = ""
    run_number: int = 1
    kernelgate_version: str = ""


# -- writing ------------------------------------------------------------------------------


_compact = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode
#: Call arguments and answers larger than this (as compact JSON) are written on one line:
#: indenting them costs seconds for megabytes and helps no reader.
_INLINE_ABOVE = 32 * 1024


def dumps_notebook(nb: dict[str, Any]) -> bytes:
    """A notebook as UTF-8 JSON, indented like Jupyter's but keeping dict key order.

    Key order is kept because binding answers are replayed to programs that may iterate
    their dicts. Large call arguments and answers are written compactly.
    """
    token = secrets.token_hex(8)
    raw: list[str] = []

    def stash(value: Any) -> Any:
        if not isinstance(value, (dict, list)) or len(value) < 64:
            return value
        text = _compact(value)
        if len(text) < _INLINE_ABOVE:
            return value
        raw.append(text)
        return f"\x00kernelgate-{token}-{len(raw) - 1}\x00"

    cells = []
    for cell in nb.get("cells", []):
        outputs = cell.get("outputs") if isinstance(cell, dict) else None
        if isinstance(outputs, list):
            new_outputs = []
            for output in outputs:
                data = output.get("data") if isinstance(output, dict) else None
                call = data.get(CALL_MIME) if isinstance(data, dict) else None
                if isinstance(data, dict) and isinstance(call, dict):
                    call = {
                        k: stash(v) if k in ("args", "kwargs", "value") else v
                        for k, v in call.items()
                    }
                    output = {**output, "data": {**data, CALL_MIME: call}}
                new_outputs.append(output)
            cell = {**cell, "outputs": new_outputs}
        cells.append(cell)
    text = json.dumps({**nb, "cells": cells}, indent=1, ensure_ascii=False, allow_nan=False)
    for i, value in enumerate(raw):
        text = text.replace(json.dumps(f"\x00kernelgate-{token}-{i}\x00"), value, 1)
    return (text + "\n").encode()


def _fsync_dir(directory: str) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some filesystems cannot sync a directory; the rename is still atomic
    finally:
        os.close(fd)


def temp_prefix(path: str | os.PathLike[str]) -> str:
    """Name prefix of the temporary files :func:`atomic_write` makes for ``path``."""
    return f".{os.path.basename(os.fspath(path))}."


def atomic_write(path: str | os.PathLike[str], data: bytes) -> None:
    """Replace ``path`` with ``data`` so that readers see the old file or the new, whole.

    >>> import tempfile, os
    >>> d = tempfile.mkdtemp()
    >>> atomic_write(os.path.join(d, "x.json"), b"{}")
    >>> open(os.path.join(d, "x.json")).read(), sorted(os.listdir(d))
    ('{}', ['x.json'])
    """
    target = os.path.abspath(os.fspath(path))
    directory = os.path.dirname(target)
    tmp = os.path.join(directory, f"{temp_prefix(target)}{secrets.token_hex(6)}.tmp")
    try:
        mode = os.stat(target).st_mode & 0o7777
    except OSError:
        mode = None
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
    try:
        try:
            if mode is not None:
                os.fchmod(fd, mode)
            view = memoryview(data)
            while view:
                written = os.write(fd, view[:_CHUNK])
                view = view[written:]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    _fsync_dir(directory)


def save_run(result: RunResult, path: str | os.PathLike[str]) -> Path:
    """Write ``result`` as a notebook at ``path`` (atomically); return the path written.

    ``path`` may be an existing directory: the file is then ``<run_id>.ipynb`` in it.
    Missing parent directories are created.

    >>> import tempfile
    >>> from kernelgate import Gateway
    >>> r = Gateway(bindings={"add": lambda a, b: a + b}).run_sync("await tools.add(1, 2)")
    >>> p = save_run(r, tempfile.mkdtemp() + "/run.ipynb")
    >>> load_run(p).calls[0].value
    3
    """
    target = Path(os.fspath(path))
    if target.is_dir():
        target = target / f"{result.run_id or 'run'}.ipynb"
    target.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(target, dumps_notebook(run_notebook_dict(result)))
    return target


# -- reading ------------------------------------------------------------------------------

_HOW_TO_RECORD = (
    "record runs with result.save(path), 'kernelgate run PROGRAM --record PATH', "
    "Gateway(record_to=DIR) or kernelgate.notebooks.SessionLog"
)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON (numbers must be finite)")


def _nesting(value: Any) -> int:
    """How deep ``value`` nests (iteratively: no recursion on crafted input)."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > deepest:
            deepest = depth
            if deepest > _MAX_NESTING:
                return deepest
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values() if isinstance(v, (dict, list)))
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item if isinstance(v, (dict, list)))
    return deepest


def read_notebook(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Parse a v4 notebook as plain JSON (dict key order kept); :class:`NotARunError` if
    the file is not one, :class:`RecordingError` if it is too large or too deeply nested
    to be a recording, or holds NaN or Infinity. ``OSError`` if it cannot be read."""
    name = os.fspath(path)
    with open(name, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size > MAX_RECORDING_BYTES:
            raise RecordingError(
                f"{name} is {size} bytes; recordings over {MAX_RECORDING_BYTES} bytes are "
                "refused (no run records that much)"
            )
        raw = f.read(MAX_RECORDING_BYTES + 1)
    if len(raw) > MAX_RECORDING_BYTES:
        raise RecordingError(
            f"{name} is over {MAX_RECORDING_BYTES} bytes; recordings that large are refused"
        )
    try:
        nb = json.loads(raw, parse_constant=_no_constant)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise NotARunError(
            f"{name} is not a notebook: it is not JSON ({exc}); {_HOW_TO_RECORD}"
        ) from None
    except ValueError as exc:  # NaN, Infinity, -Infinity
        raise RecordingError(f"{name} holds {exc}: the recording was edited or crafted") from None
    except RecursionError:
        raise RecordingError(
            f"{name} nests JSON deeper than this interpreter parses; recordings nest at most "
            f"{_MAX_NESTING} levels: the recording was edited or crafted"
        ) from None
    if _nesting(nb) > _MAX_NESTING:
        raise RecordingError(
            f"{name} nests JSON deeper than {_MAX_NESTING} levels (a recording's values nest "
            f"at most {MAX_DEPTH}): the recording was edited or crafted"
        )
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
        raise NotARunError(
            f"{name} is not a Jupyter notebook: it is JSON but has no 'cells' list; "
            f"{_HOW_TO_RECORD}"
        )
    if nb.get("nbformat") != 4:
        raise NotARunError(
            f"{name} is notebook format {nb.get('nbformat')!r}; kernelgate reads format 4 "
            "(convert it with 'jupyter nbconvert --to notebook', or re-record the run)"
        )
    return nb


def _kg(obj: Any) -> dict[str, Any] | None:
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    kg = meta.get("kernelgate") if isinstance(meta, dict) else None
    return kg if isinstance(kg, dict) else None


def run_cells(nb: dict[str, Any]) -> list[dict[str, Any]]:
    """The code cells of a notebook that hold kernelgate runs, in order."""
    return [
        cell
        for cell in nb["cells"]
        if isinstance(cell, dict)
        and cell.get("cell_type") == "code"
        and (_kg(cell) or {}).get("run_id") is not None
    ]


def _pick(cells: list[dict[str, Any]], cell: int | None, name: str) -> tuple[dict[str, Any], int]:
    n = len(cells)
    if cell is None:
        if n == 1:
            return cells[0], _run_number(cells[0], 1)
        raise NotARunError(
            f"{name} is a session log with {n} runs; choose one with cell=N "
            f"(--cell N), N from 1 to {n}, or -1 for the last"
        )
    if type(cell) is not int:
        raise TypeError(f"cell must be an int (a run number from 1), got {cell!r}")
    for i, c in enumerate(cells):
        if cell > 0 and _run_number(c, i + 1) == cell:
            return c, cell
    if cell < 0 and -cell <= n:
        chosen = cells[n + cell]
        return chosen, _run_number(chosen, n + cell + 1)
    runs = "1" if n == 1 else f"1 to {n}"
    raise NotARunError(f"{name} has no run {cell}: it holds runs {runs} (-1 is the last)")


def _run_number(cell: dict[str, Any], default: int) -> int:
    number = (_kg(cell) or {}).get("run_number")
    return number if type(number) is int else default


def _type_name(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _bad(where: str, field: str, value: Any, expected: str) -> RecordingError:
    shown = repr(value) if isinstance(value, (int, float, str)) else _type_name(value)
    if len(shown) > 60:
        shown = shown[:57] + "..."
    return RecordingError(
        f"{where}: {field} is {shown}; expected {expected} (the recording was edited by hand, "
        "crafted or damaged)"
    )


def _want_str(where: str, field: str, value: Any) -> str:
    if not isinstance(value, str):
        raise _bad(where, field, value, "a string")
    return value


def _want_int(where: str, field: str, value: Any, *, minimum: int | None = None) -> int:
    if type(value) is not int or (minimum is not None and value < minimum):
        raise _bad(
            where, field, value, "an integer" + (f" >= {minimum}" if minimum is not None else "")
        )
    return value


def _want_seconds(where: str, field: str, value: Any) -> float:
    if type(value) not in (int, float) or not math.isfinite(value) or value < 0:
        raise _bad(where, field, value, "a finite number of seconds >= 0")
    return float(value)


def _want_text(where: str, field: str, value: Any) -> str:
    """A notebook multiline string: a string, or a list of strings."""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(x, str) for x in value):
        return "".join(value)
    raise _bad(where, field, value, "a string or a list of strings")


def _error(data: Any, where: str = "", field: str = "error") -> ErrorInfo | None:
    if data is None:
        return None
    if not isinstance(data, dict):
        raise _bad(where, field, data, "an object with ename, evalue and traceback")
    tb = data.get("traceback", [])
    if not isinstance(tb, list) or not all(isinstance(x, str) for x in tb):
        raise _bad(where, f"{field}.traceback", tb, "a list of strings")
    return ErrorInfo(
        _want_str(where, f"{field}.ename", data.get("ename", "")),
        _want_str(where, f"{field}.evalue", data.get("evalue", "")),
        list(tb),
    )


def _key_order(where: str, field: str, value: Any) -> Any:
    if value is None:
        return None
    keys = value.get("keys") if isinstance(value, dict) else None
    if (
        not isinstance(value, dict)
        or not isinstance(value.get("at"), str)
        or not isinstance(keys, list)
        or not all(isinstance(k, list) and all(isinstance(x, str) for x in k) for k in keys)
    ):
        raise _bad(
            where, field, value, "an object with 'at' (a string) and 'keys' (lists of strings)"
        )
    return value


def call_record_from_json(data: Any, where: str, position: int) -> CallRecord:
    """Rebuild a :class:`CallRecord` from a call output's JSON (``NotARunError`` if it is not;
    :class:`RecordingError` naming the field if a field has the wrong type or value).

    ``position`` is the call's place among the outputs when the JSON does not say.
    """
    if not isinstance(data, dict):
        raise NotARunError(f"{where}: a call output's {CALL_MIME} data is not an object")
    missing = [k for k in ("id", "namespace", "name", "args", "kwargs", "ok") if k not in data]
    if missing:
        raise NotARunError(
            f"{where}: a call output lacks {', '.join(missing)} in its {CALL_MIME} data; "
            "the recording was edited by hand or is damaged"
        )
    call_id = _want_int(where, "a call's id", data["id"], minimum=0)
    call = f"call #{call_id}"
    namespace = _want_str(where, f"{call}: namespace", data["namespace"])
    name = _want_str(where, f"{call}: name", data["name"])
    args, kwargs = data["args"], data["kwargs"]
    if not isinstance(args, list) or not isinstance(kwargs, dict):
        raise NotARunError(
            f"{where}: call #{call_id} has args {type(args).__name__} and kwargs "
            f"{type(kwargs).__name__}; expected a list and an object"
        )
    ok = data["ok"]
    if not isinstance(ok, bool):
        raise _bad(where, f"{call}: ok", ok, "true or false")
    order = _key_order(where, f"{call}: key_order", data.get("key_order"))
    value = restore_key_orders(data.get("value"), order) if ok else None
    index = data.get("output_index")
    if index is not None:
        _want_int(where, f"{call}: output_index", index, minimum=0)
    error = None if ok else _error(data.get("error"), where, f"{call}: error")
    return CallRecord(
        id=call_id,
        namespace=namespace,
        name=name,
        args=args,
        kwargs=kwargs,
        ok=ok,
        value=value,
        error=error or (None if ok else ErrorInfo("", "")),
        start_s=_want_seconds(where, f"{call}: start_s", data.get("start_s", 0.0)),
        duration_s=_want_seconds(where, f"{call}: duration_s", data.get("duration_s", 0.0)),
        output_index=index if index is not None else position,
    )


#: RunResult fields cell_to_run reads itself; any other field is taken from the metadata.
_READ_HERE = frozenset(
    {
        "status",
        "value",
        "stdout",
        "stderr",
        "outputs",
        "error",
        "calls",
        "duration_s",
        "exit_code",
        "signal",
        "run_id",
        "started_at",
        "program",
        "interpreter",
        "limits",
        "bindings",
    }
)


#: Types of the RunResult fields taken from the metadata as they are.
_EXTRA_TYPES: dict[str, tuple[type, ...]] = {"isolation": (str,), "usage": (dict,), "note": (str,)}


def _output(where: str, n: int, output: Any) -> dict[str, Any]:
    if not isinstance(output, dict):
        raise _bad(where, f"output {n}", output, "an object")
    kind = output.get("output_type")
    if kind not in ("stream", "display_data", "execute_result", "error", "update_display_data"):
        raise _bad(where, f"output {n}: output_type", kind, "an nbformat v4 output type")
    if kind == "stream":
        _want_text(where, f"output {n}: text", output.get("text", ""))
    elif kind == "error":
        _error(output, where, f"output {n}")
    elif not isinstance(output.get("data", {}), dict):
        raise _bad(where, f"output {n}: data", output.get("data"), "an object")
    meta = output.get("metadata", {})
    if not isinstance(meta, dict):
        raise _bad(where, f"output {n}: metadata", meta, "an object")
    return output


def cell_to_run(cell: dict[str, Any], *, source: str = "", run_number: int = 1) -> RecordedRun:
    """One run cell back into a :class:`RecordedRun`: every field it reads is checked
    (:class:`RecordingError` names the run and the field), and the program's outputs are
    passed through :func:`~kernelgate.gateway.sanitize.sanitize_outputs`, so a crafted or
    edited recording can neither crash the reader nor carry active content."""
    where = f"{source} run {run_number}" if source else f"run {run_number}"
    if not isinstance(cell, dict):
        raise _bad(where, "the cell", cell, "an object")
    meta = _kg(cell) or {}
    fmt = meta.get("format", FORMAT)
    if type(fmt) is int and fmt > FORMAT:
        raise NotARunError(
            f"{where} was recorded in kernelgate format {fmt} by kernelgate "
            f"{meta.get('version', '?')}; this kernelgate reads format {FORMAT}: upgrade it"
        )
    _want_int(where, "metadata.kernelgate.format", fmt)
    outputs: list[dict[str, Any]] = []
    calls: list[CallRecord] = []
    raw_outputs = cell.get("outputs", [])
    if not isinstance(raw_outputs, list):
        raise _bad(where, "outputs", raw_outputs, "a list")
    for n, output in enumerate(raw_outputs):
        output = _output(where, n, output)
        role = (_kg(output) or {}).get("role")
        data = output.get("data")
        if role == "call" and isinstance(data, dict) and CALL_MIME in data:
            calls.append(call_record_from_json(data[CALL_MIME], where, len(outputs)))
        elif role == "timeline":
            continue
        else:
            outputs.append(output)
    # What the program displayed is untrusted whoever saved the file: shown, replayed or
    # re-rendered, it is only ever what sanitize_outputs leaves.
    outputs = sanitize_outputs(outputs)
    expected = meta.get("calls")
    if expected is not None:
        _want_int(where, "metadata.kernelgate.calls", expected, minimum=0)
    if type(expected) is int and expected != len(calls):
        raise NotARunError(
            f"{where} recorded {expected} binding calls but its cell holds {len(calls)} call "
            "outputs: the outputs were cleared or edited (e.g. 'Clear All Outputs' in "
            "Jupyter). Replay needs them; use an unedited copy, or record the run again"
        )
    ids = [c.id for c in calls]
    if len(set(ids)) != len(ids):
        raise RecordingError(f"{where}: two call outputs have the same call id; ids are unique")
    calls.sort(key=lambda c: c.id)
    status = _want_str(where, "metadata.kernelgate.status", meta.get("status", ""))
    value = None
    if status == "ok":
        for output in outputs:
            if output.get("output_type") == "execute_result":
                data = output.get("data")
                if isinstance(data, dict):
                    value = data.get("application/json")
    streams: dict[str, list[str]] = {"stdout": [], "stderr": []}
    for output in outputs:
        if output.get("output_type") == "stream" and output.get("name") in streams:
            streams[output["name"]].append(output.get("text", ""))
    bindings: dict[str, dict[str, str]] = {}
    entries = meta.get("bindings", [])
    if not isinstance(entries, list):
        raise _bad(where, "metadata.kernelgate.bindings", entries, "a list")
    for n, entry in enumerate(entries):
        field = f"metadata.kernelgate.bindings[{n}]"
        if not isinstance(entry, dict):
            raise _bad(where, field, entry, "an object with namespace, name and signature")
        bindings.setdefault(_want_str(where, f"{field}.namespace", entry.get("namespace")), {})[
            _want_str(where, f"{field}.name", entry.get("name"))
        ] = _want_str(where, f"{field}.signature", entry.get("signature", "(*args, **kwargs)"))
    # Shown as what the run had, never applied: replay uses the caller's limits.
    limits = meta.get("limits", {})
    if not isinstance(limits, dict):
        raise _bad(where, "metadata.kernelgate.limits", limits, "an object")
    exit_code, sig = meta.get("exit_code"), meta.get("signal")
    if exit_code is not None:
        _want_int(where, "metadata.kernelgate.exit_code", exit_code)
    if sig is not None:
        _want_int(where, "metadata.kernelgate.signal", sig)
    extra: dict[str, Any] = {}
    for f in fields(RunResult):
        if f.name in _READ_HERE or f.name not in meta:
            continue
        wanted = _EXTRA_TYPES.get(f.name)
        if wanted is not None and not isinstance(meta[f.name], wanted):
            raise _bad(where, f"metadata.kernelgate.{f.name}", meta[f.name], wanted[0].__name__)
        extra[f.name] = meta[f.name]
    return RecordedRun(
        **extra,
        status=status,
        value=value,
        stdout="".join(streams["stdout"]),
        stderr="".join(streams["stderr"]),
        outputs=outputs,
        error=_error(meta.get("error"), where, "metadata.kernelgate.error"),
        calls=calls,
        duration_s=_want_seconds(
            where, "metadata.kernelgate.duration_s", meta.get("duration_s", 0.0)
        ),
        exit_code=exit_code,
        signal=sig,
        run_id=_want_str(where, "metadata.kernelgate.run_id", meta.get("run_id", "")),
        started_at=_want_str(where, "metadata.kernelgate.started_at", meta.get("started_at", "")),
        program=_want_text(where, "source", cell.get("source", "")),
        interpreter=_want_str(
            where, "metadata.kernelgate.interpreter", meta.get("interpreter", "")
        ),
        limits=dict(limits),
        bindings=bindings,
        source=source,
        run_number=run_number,
        kernelgate_version=_want_str(where, "metadata.kernelgate.version", meta.get("version", "")),
    )


def load_run(path: str | os.PathLike[str], cell: int | None = None) -> RecordedRun:
    """Read a saved run (or run ``cell`` of a session log) back into a :class:`RecordedRun`.

    ``cell`` counts runs from 1, as a session log's "Run N" headings do; ``-1`` is the
    last. Raises :class:`NotARunError` (a ``ValueError``) for a file that is not a
    kernelgate recording, saying what it is instead; ``OSError`` if it cannot be read.

    >>> import tempfile
    >>> from kernelgate import Gateway
    >>> r = Gateway().run_sync("print('hi')\\n41 + 1")
    >>> run = load_run(r.save(tempfile.mkdtemp() + "/run.ipynb"))
    >>> run.status, run.stdout, run.value, run.run_id == r.run_id
    ('ok', 'hi\\n', 42, True)
    """
    name = os.fspath(path)
    nb = read_notebook(name)
    cells = run_cells(nb)
    if not cells:
        raise NotARunError(
            f"{name} is a notebook but not a kernelgate run: none of its "
            f"{len(nb['cells'])} cells carries kernelgate run metadata; {_HOW_TO_RECORD}"
        )
    chosen, number = _pick(cells, cell, name)
    return cell_to_run(chosen, source=name, run_number=number)


def run_result(run: RunResult) -> RunResult:
    """A plain :class:`RunResult` with the same fields (drops :class:`RecordedRun` extras)."""
    names = [f.name for f in fields(RunResult)]
    return RunResult(**{n: getattr(run, n) for n in names})
