"""Writing runs as notebooks, atomically: :func:`save_run`, and :class:`RunDirectory`, the
recorder ``Gateway(record_to=DIR)`` makes of a directory.

A write never leaves a broken file: the notebook goes to a temporary file in the same
directory, is flushed to disk (``fsync``), and only then renamed over the target
(``os.replace``), after which the directory itself is synced. A crash at any point leaves
either the old file or the new one, never a mix. Reading runs back is
:mod:`kernelgate.notebooks.reading`.
"""

from __future__ import annotations

import json
import os
import re
import secrets
from pathlib import Path
from typing import Any

from kernelgate.model.result import RunResult
from kernelgate.wire.messages import CALL_MIME

from .render import run_notebook_dict

__all__ = [
    "RunDirectory",
    "RunNotRecorded",
    "atomic_write",
    "dumps_notebook",
    "run_file_name",
    "save_run",
    "temp_prefix",
]

#: Bytes per ``os.write`` when writing a notebook.
_CHUNK = 1 << 16


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


_NAME_BAD = re.compile(r"[^A-Za-z0-9_.-]")


def run_file_name(run_id: str) -> str:
    """The file a run gets in a directory: ``<run_id>.ipynb``, as a plain name.

    A host-made run id is one already; a RunResult read back from a recording carries the
    recording's, which may be anything: no ``/``, no leading dot (``..``, a hidden file),
    nothing empty, so it names a file in that directory and nowhere else.

    >>> run_file_name("20260101T000000-1a2b3c4d"), run_file_name("../../etc/x")
    ('20260101T000000-1a2b3c4d.ipynb', 'etc_x.ipynb')
    """
    name = _NAME_BAD.sub("_", str(run_id))[:200].lstrip("._")
    return f"{name or 'run'}.ipynb"


def save_run(result: RunResult, path: str | os.PathLike[str]) -> Path:
    """Write ``result`` as a notebook at ``path`` (atomically); return the path written.

    ``path`` may be an existing directory: the file is then ``<run_id>.ipynb`` in it
    (:func:`run_file_name`: always in it, whatever the run id).
    Missing parent directories are created.

    :func:`kernelgate.notebooks.load_run` reads it back.

    >>> import json, tempfile
    >>> from kernelgate import Gateway
    >>> r = Gateway(bindings={"add": lambda a, b: a + b}).run_sync("await tools.add(1, 2)")
    >>> p = save_run(r, tempfile.mkdtemp() + "/run.ipynb")
    >>> cell = json.loads(p.read_text())["cells"][0]
    >>> cell["source"], cell["outputs"][0]["data"]["text/plain"][:20]
    ('await tools.add(1, 2)', 'tools.add(1, 2) -> 3')
    """
    target = Path(os.fspath(path))
    if target.is_dir():
        target = target / run_file_name(result.run_id)
    target.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(target, dumps_notebook(run_notebook_dict(result)))
    return target


class RunNotRecorded(OSError):
    """A run ended but its notebook could not be written: ``result`` holds the run (it
    is not lost with the notebook), ``filename`` where the notebook was to go."""

    def __init__(self, result: RunResult, path: str, error: OSError) -> None:
        super().__init__(
            error.errno,
            f"the run ended ({result.status}) but its notebook could not be written: "
            f"{error.strerror or error}; the run's result is this error's .result",
            path,
        )
        self.result = result
        self._error = error

    def __reduce__(self) -> tuple[Any, ...]:
        # OSError pickles its (errno, strerror, filename), which this __init__ does not take.
        return type(self), (self.result, self.filename, self._error)


class RunDirectory:
    """The recorder ``Gateway(record_to=DIR)`` makes of a directory: every run it is given
    is saved as ``<run_id>.ipynb`` in it (the directory is made at the first run).

    A path that is there but is no directory is refused at once (NotADirectoryError: the
    gateway is not made) rather than at each run. A notebook that cannot be written
    raises :class:`RunNotRecorded`, an OSError that holds the run's result.

    >>> import os, tempfile
    >>> from kernelgate import Gateway
    >>> runs = RunDirectory(tempfile.mkdtemp() + "/runs")
    >>> r = Gateway().run_sync("1 + 1")
    >>> path = runs.append(r)
    >>> os.listdir(runs.directory) == [path.name] == [f"{r.run_id}.ipynb"]
    True
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = os.fspath(directory)
        if os.path.lexists(self.directory) and not os.path.isdir(self.directory):
            raise NotADirectoryError(
                f"record_to={self.directory!r} is there and is not a directory: runs are "
                "recorded as notebooks in a directory"
            )

    def append(self, result: RunResult, /) -> Path:
        """Save ``result`` in the directory; return the path written."""
        path = os.path.join(self.directory, run_file_name(result.run_id))
        try:
            os.makedirs(self.directory, exist_ok=True)
            return save_run(result, path)
        except OSError as exc:
            raise RunNotRecorded(result, path, exc) from exc

    def __repr__(self) -> str:
        return f"RunDirectory({self.directory!r})"
