"""Reading runs back from notebooks: every field checked, every output made inert.

A recording is a file anyone may have written. It is refused before it is parsed when it
is too large, and after when it nests too deep or holds NaN; each run cell is then decoded
by :mod:`kernelgate.model.codec` (which names the run and field of anything wrong), and
what the program displayed goes through ``sanitize_outputs``.
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass, fields
from typing import Any

from kernelgate.gateway.sanitize import sanitize_outputs
from kernelgate.model.codec import (
    NotARunError,
    RecordingError,
    bad_field,
    call_from_json,
    check_output,
    decode_metadata,
    metadata_value,
    streams_and_value,
)
from kernelgate.model.result import CallRecord, RunResult
from kernelgate.model.text import strip_ansi
from kernelgate.wire.messages import CALL_MIME
from kernelgate.wire.values import MAX_DEPTH

from .cellrun import (
    REPLAY_ROLE,
    RUN_ROLE,
    SETUP_ROLE,
    is_setup_record,
    record_of_cell,
    source_digest,
)

__all__ = [
    "MAX_RECORDING_BYTES",
    "NotARunError",
    "RecordedRun",
    "RecordingError",
    "cell_to_run",
    "load_run",
    "load_runs",
    "read_notebook",
    "run_cells",
    "run_result",
]

#: Recordings larger than this are refused before they are read: a run's outputs are
#: capped far below it (Limits.max_output_bytes, max_value_bytes per call).
MAX_RECORDING_BYTES = 512 * 1024 * 1024
#: Nesting a recording may have: a value crossing the boundary nests at most MAX_DEPTH
#: levels, and the notebook around it adds a handful.
_MAX_NESTING = MAX_DEPTH + 16

HOW_TO_RECORD = (
    "record runs with kernelgate.save_run(result, path), "
    "'kernelgate run PROGRAM --record PATH', "
    "Gateway(record_to=DIR) or kernelgate.notebooks.SessionLog"
)


@dataclass(repr=False)
class RecordedRun(RunResult):
    """A :class:`~kernelgate.RunResult` read back from a notebook.

    ``source`` is the file it came from; ``run_number`` its place in a session log (1 for
    a single run); ``kernelgate_version`` the version that recorded it.
    """

    source: str = ""
    run_number: int = 1
    kernelgate_version: str = ""


def run_result(run: RunResult) -> RunResult:
    """A plain :class:`RunResult` with the same fields (drops :class:`RecordedRun` extras)."""
    names = [f.name for f in fields(RunResult)]
    return RunResult(**{n: getattr(run, n) for n in names})


# -- the file ------------------------------------------------------------------------------------


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON (numbers must be finite)")


def _with_papermill_constants(raw: bytes) -> Any:
    """The notebook, if all its NaN and Infinity are in ``metadata.papermill`` (papermill
    copies the ``-p`` parameters there as given; kernelgate reads none of it), else None."""
    try:
        nb = json.loads(raw, parse_constant=float)
        rest = {k: v for k, v in nb["metadata"].items() if k != "papermill"}
        json.dumps(dict(nb, metadata=rest), allow_nan=False)  # raises on any other NaN
    except (ValueError, RecursionError, TypeError, KeyError, AttributeError):
        return None
    return nb


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


def _read_bytes(name: str) -> bytes:
    # O_NONBLOCK: opening a FIFO for reading would wait for a writer, and nothing can
    # interrupt that (a replay cell reads its recording in a thread). Only a regular file
    # is read: a device (/dev/zero) would feed the size cap's worth before being refused.
    fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    with open(fd, "rb") as f:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise NotARunError(
                f"{name} is not a regular file (a FIFO, a device or a directory); a recording "
                f"is a notebook file: {HOW_TO_RECORD}"
            )
        os.set_blocking(fd, True)
        size = info.st_size
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
    return raw


def read_notebook(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Parse a v4 notebook as plain JSON (dict key order kept); :class:`NotARunError` if
    the file is not one, :class:`RecordingError` if it is too large or too deeply nested
    to be a recording, or holds NaN or Infinity. ``OSError`` if it cannot be read."""
    name = os.fspath(path)
    raw = _read_bytes(name)
    try:
        nb = json.loads(raw, parse_constant=_no_constant)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise NotARunError(
            f"{name} is not a notebook: it is not JSON ({exc}); {HOW_TO_RECORD}"
        ) from None
    except ValueError as exc:  # NaN, Infinity, -Infinity: papermill's metadata only
        nb = _with_papermill_constants(raw)
        if nb is None:
            raise RecordingError(
                f"{name} holds {exc}: the recording was edited or crafted"
            ) from None
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
            f"{name} is not a Jupyter notebook: it is JSON but has no 'cells' list; {HOW_TO_RECORD}"
        )
    if nb.get("nbformat") != 4:
        raise NotARunError(
            f"{name} is notebook format {nb.get('nbformat')!r}; kernelgate reads format 4 "
            "(convert it with 'jupyter nbconvert --to notebook', or re-record the run)"
        )
    return nb


def kernelgate_meta(obj: Any) -> dict[str, Any] | None:
    """``obj["metadata"]["kernelgate"]`` when it is an object (a cell's or an output's)."""
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    kg = meta.get("kernelgate") if isinstance(meta, dict) else None
    return kg if isinstance(kg, dict) else None


def run_meta(cell: Any) -> dict[str, Any] | None:
    """A run cell's run metadata: the run record among its outputs (a cell the kernel ran,
    saved by any front end), else the cell's own (``save_run``, ``SessionLog``).

    The record wins: every execution rewrites a cell's outputs, but no front end clears
    a cell's metadata, so a recorded cell run again in a kernel (JupyterLab, nbconvert,
    papermill) keeps the old run's metadata beside the new run's record."""
    record = record_of_cell(cell)
    if record is not None and record.get("run_id") is not None:
        return record
    meta = kernelgate_meta(cell)
    return meta if meta is not None and meta.get("run_id") is not None else None


def run_cells(nb: dict[str, Any]) -> list[dict[str, Any]]:
    """The code cells of a notebook that hold kernelgate runs, in order."""
    return [
        cell
        for cell in nb["cells"]
        if isinstance(cell, dict) and cell.get("cell_type") == "code" and run_meta(cell)
    ]


def run_number(cell: dict[str, Any], default: int) -> int:
    """A run cell's number: its place in a session log, or for a cell the kernel ran its
    execution count (the ``[N]`` the front end shows); ``default`` when neither says."""
    number = (run_meta(cell) or {}).get("run_number")
    if type(number) is int:
        return number
    count = cell.get("execution_count")
    if record_of_cell(cell) is not None and type(count) is int:
        return count
    return default


def _numbers(numbers: list[int]) -> str:
    if numbers == list(range(1, len(numbers) + 1)):
        return "1" if len(numbers) == 1 else f"1 to {len(numbers)}"
    return ", ".join(str(n) for n in numbers)


def _where(nb: dict[str, Any], cell: dict[str, Any]) -> str:
    """How to address ``cell`` other than by its number: its position and its id."""
    position = next(i for i, c in enumerate(nb["cells"]) if c is cell) + 1
    cell_id = cell.get("id")
    return f"position {position}" + (f", id {cell_id}" if isinstance(cell_id, str) else "")


def _pick(
    nb: dict[str, Any], cells: list[dict[str, Any]], cell: int | None, name: str
) -> tuple[dict[str, Any], int]:
    n = len(cells)
    numbers = [run_number(c, i + 1) for i, c in enumerate(cells)]
    if cell is None:
        if n == 1:
            return cells[0], numbers[0]
        raise NotARunError(
            f"{name} holds {n} runs; choose one by its number ({_numbers(numbers)}; -1 is "
            "the last), by its cell's id, or by its cell's position (from 1)"
        )
    if type(cell) is not int:
        raise TypeError(f"cell must be an int (a run number from 1), got {cell!r}")
    if cell > 0:
        found = [(c, number) for c, number in zip(cells, numbers, strict=True) if number == cell]
        if len(found) > 1:
            # Execution counts start again at 1 when the kernel restarts.
            places = "; ".join(_where(nb, c) for c, _ in found)
            raise NotARunError(
                f"{name}: {len(found)} cells are [{cell}] (the kernel restarted between "
                f"them): {places}. Choose one by its cell's id or by its cell's position "
                "(its place in the notebook, from 1)"
            )
        if found:
            return found[0]
    if cell < 0 and -cell <= n:
        return cells[n + cell], numbers[n + cell]
    raise NotARunError(
        f"{name} has no run {cell}: it holds runs {_numbers(numbers)} (-1 is the last)"
    )


def _pick_cell(
    nb: dict[str, Any],
    cells: list[dict[str, Any]],
    cell_id: str | None,
    position: int | None,
    name: str,
) -> tuple[dict[str, Any], int]:
    """The run cell with id ``cell_id``, or at ``position`` (from 1) among all cells."""
    if cell_id is not None:
        if not isinstance(cell_id, str):
            raise TypeError(f"cell_id must be a str (a cell's id), got {cell_id!r}")
        chosen = [c for c in nb["cells"] if isinstance(c, dict) and c.get("id") == cell_id]
        what = f"cell id {cell_id!r}"
        if not chosen:
            ids = [str(c["id"]) for c in cells if isinstance(c.get("id"), str)]
            raise NotARunError(
                f"{name} has no cell with id {cell_id!r}; its runs' cell ids: "
                f"{', '.join(ids) or '(none: the notebook is older than cell ids)'}"
            )
        target = chosen[0]
    else:
        if type(position) is not int:
            raise TypeError(f"position must be an int (from 1), got {position!r}")
        total = len(nb["cells"])
        if not 1 <= position <= total:
            raise NotARunError(
                f"{name} has {total} cells; position {position} is not one of them "
                f"(positions count every cell from 1)"
            )
        target = nb["cells"][position - 1]
        what = f"the cell at position {position}"
    for i, c in enumerate(cells):
        if c is target:
            return c, run_number(c, i + 1)
    kind = target.get("cell_type") if isinstance(target, dict) else None
    if kind != "code":
        raise NotARunError(f"{name}: {what} is a {kind} cell, not a run")
    if is_setup_record(target):
        raise NotARunError(
            f"{name}: {what} is a setup cell: it did not run on its own, its code runs "
            "before every later cell (each later cell's run holds it)"
        )
    raise NotARunError(
        f"{name}: {what} holds no kernelgate run record (not run, run by another kernel, "
        "or its outputs were cleared)"
    )


# -- a run cell ----------------------------------------------------------------------------------


def _outputs_and_calls(
    cell: dict[str, Any], where: str
) -> tuple[list[dict[str, Any]], list[CallRecord]]:
    """The program's outputs (sanitized) and the calls, from a run cell's outputs."""
    raw = cell.get("outputs", [])
    if not isinstance(raw, list):
        raise bad_field(where, "outputs", raw, "a list")
    outputs: list[dict[str, Any]] = []
    calls: list[CallRecord] = []
    for n, output in enumerate(raw):
        output = check_output(output, where, f"output {n}")
        role = (kernelgate_meta(output) or {}).get("role")
        data = output.get("data")
        if role == "call" and isinstance(data, dict) and CALL_MIME in data:
            calls.append(call_from_json(data[CALL_MIME], where, len(outputs)))
        elif role not in ("timeline", RUN_ROLE, SETUP_ROLE, REPLAY_ROLE):
            outputs.append(output)
    ids = [c.id for c in calls]
    if len(set(ids)) != len(ids):
        raise RecordingError(f"{where}: two call outputs have the same call id; ids are unique")
    calls.sort(key=lambda c: c.id)
    # What the program displayed is untrusted whoever saved the file: shown, replayed or
    # re-rendered, it is only ever what sanitize_outputs leaves.
    clean = sanitize_outputs(outputs)
    if record_of_cell(cell) is not None:
        # A cell the kernel ran shows its error coloured, as IPython does; read back, it is
        # plain text, as every run's error is.
        for output in clean:
            if output["output_type"] == "error":
                output["traceback"] = [strip_ansi(line) for line in output["traceback"]]
    return clean, calls


def cell_to_run(cell: dict[str, Any], *, source: str = "", run_number: int = 1) -> RecordedRun:
    """One run cell back into a :class:`RecordedRun`: every field it reads is checked
    (:class:`RecordingError` names the run and the field), and the program's outputs are
    passed through :func:`~kernelgate.gateway.sanitize.sanitize_outputs`, so a crafted or
    edited recording can neither crash the reader nor carry active content."""
    where = f"{source} run {run_number}" if source else f"run {run_number}"
    if not isinstance(cell, dict):
        raise bad_field(where, "the cell", cell, "an object")
    raw_meta = run_meta(cell) or {}
    meta = decode_metadata(raw_meta, where)
    source_text = _source(cell, where)
    program = source_text
    if raw_meta.get("role") == RUN_ROLE:
        # A cell the kernel ran: the record holds the program that ran (setup cells, then
        # the cell), and the digest of the source it ran as.
        program = raw_meta.get("program", source_text)
        if not isinstance(program, str):
            raise bad_field(where, "metadata.kernelgate.program", program, "a string")
        if raw_meta.get("source_digest") != source_digest(source_text):
            raise NotARunError(
                f"{where}: the cell was edited after it ran: its source is not the program "
                "its outputs came from. Run the cell again to record it (or replay the "
                "recorded program with replay(run, program=...))"
            )
    outputs, calls = _outputs_and_calls(cell, where)
    if meta.calls is not None and meta.calls != len(calls):
        raise NotARunError(
            f"{where} recorded {meta.calls} binding calls but its cell holds {len(calls)} call "
            "outputs: the outputs were cleared or edited (e.g. 'Clear All Outputs' in "
            "Jupyter). Replay needs them; use an unedited copy, or record the run again"
        )
    stdout, stderr, value = streams_and_value(outputs, meta.fields["status"])
    found, recorded = metadata_value(raw_meta, where)
    if found and meta.fields["status"] == "ok":
        value = recorded
        # The cell shows the value as its repr, numbered as the cell; the run's own output
        # had its JSON too, and count 1 (every run is a program of its own).
        for n, output in enumerate(outputs):
            data = output.get("data")
            if output.get("output_type") == "execute_result" and isinstance(data, dict):
                data = {**data, "application/json": value}
                outputs[n] = {**output, "data": data, "execution_count": 1}
    return RecordedRun(
        **meta.fields,
        value=value,
        stdout=stdout,
        stderr=stderr,
        outputs=outputs,
        calls=calls,
        program=program,
        source=source,
        run_number=run_number,
        kernelgate_version=meta.version,
    )


def _source(cell: dict[str, Any], where: str) -> str:
    source = cell.get("source", "")
    if isinstance(source, str):
        return source
    if not isinstance(source, list) or not all(isinstance(x, str) for x in source):
        raise bad_field(where, "source", source, "a string or a list of strings")
    return "".join(source)


def why_no_run(nb: dict[str, Any], number: int, name: str) -> str | None:
    """Why code cell ``[number]`` (its execution count) of a notebook holds no run, said
    plainly; ``None`` when no code cell has that count."""
    for cell in nb["cells"]:
        if not isinstance(cell, dict) or cell.get("execution_count") != number:
            continue
        if is_setup_record(cell):
            return (
                f"{name}: cell [{number}] is a setup cell: it did not run on its own, its "
                "code runs before every later cell (each later cell's run holds it)"
            )
        return (
            f"{name}: cell [{number}] ran but holds no kernelgate run record (run by "
            "another kernel, or its outputs were cleared)"
        )
    return None


def load_run(
    path: str | os.PathLike[str],
    cell: int | None = None,
    *,
    cell_id: str | None = None,
    position: int | None = None,
) -> RecordedRun:
    """Read a saved run (or one run of a session log) back into a :class:`RecordedRun`.

    Choose the run with one of: ``cell``, its number (a session log's "Run N", or the
    ``[N]`` a kernel cell shows; ``-1`` is the last run); ``cell_id``, the cell's id; or
    ``position``, the cell's place in the notebook counting every cell from 1. A number
    two cells share (the kernel restarted between them) is refused, naming both. Raises
    :class:`NotARunError` (a ``ValueError``) for a file or cell that is not a kernelgate
    run, saying what it is instead; ``OSError`` if it cannot be read.

    >>> import tempfile
    >>> from kernelgate import Gateway, save_run
    >>> r = Gateway().run_sync("print('hi')\\n41 + 1")
    >>> run = load_run(save_run(r, tempfile.mkdtemp() + "/run.ipynb"))
    >>> run.status, run.stdout, run.value, run.run_id == r.run_id
    ('ok', 'hi\\n', 42, True)
    """
    given = [
        k
        for k, v in (("cell", cell), ("cell_id", cell_id), ("position", position))
        if v is not None
    ]
    if len(given) > 1:
        raise TypeError(f"choose a run one way, not by {' and '.join(given)}")
    name = os.fspath(path)
    nb = read_notebook(name)
    cells = _cells_or_refuse(nb, name)
    if cell_id is not None or position is not None:
        chosen, number = _pick_cell(nb, cells, cell_id, position, name)
        return cell_to_run(chosen, source=name, run_number=number)
    try:
        chosen, number = _pick(nb, cells, cell, name)
    except NotARunError as exc:
        why = why_no_run(nb, cell, name) if type(cell) is int and cell > 0 else None
        if why is None:
            raise
        raise NotARunError(f"{why}; {exc}") from None
    return cell_to_run(chosen, source=name, run_number=number)


def load_runs(path: str | os.PathLike[str]) -> list[RecordedRun | NotARunError]:
    """Every run of a notebook, in order: each a :class:`RecordedRun`, or the
    :class:`NotARunError` that says why that run cell cannot be read back (edited after it
    ran, outputs cleared), so one bad cell does not hide the others. Raises as
    :func:`load_run` for a file that holds no run at all."""
    name = os.fspath(path)
    nb = read_notebook(name)
    cells = _cells_or_refuse(nb, name)
    runs: list[RecordedRun | NotARunError] = []
    for i, c in enumerate(cells):
        try:
            runs.append(cell_to_run(c, source=name, run_number=run_number(c, i + 1)))
        except NotARunError as exc:
            runs.append(exc)
    return runs


def _cells_or_refuse(nb: dict[str, Any], name: str) -> list[dict[str, Any]]:
    cells = run_cells(nb)
    if not cells:
        raise NotARunError(
            f"{name} is a notebook but not a kernelgate run: none of its "
            f"{len(nb['cells'])} cells carries kernelgate run metadata; {HOW_TO_RECORD}"
        )
    return cells
