"""A session log: one notebook holding every run of an agent session, in order."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kernelgate import __version__
from kernelgate.gateway.recording.render import notebook_dict, run_code_cell, run_header_cell
from kernelgate.gateway.recording.store import atomic_write, dumps_notebook, temp_prefix
from kernelgate.model.codec import FORMAT, NotARunError
from kernelgate.model.language import Language
from kernelgate.model.result import RunResult

from .reading import RecordedRun, cell_to_run, load_run, read_notebook, run_cells, run_number

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX
    fcntl = None  # type: ignore[assignment]

__all__ = ["SessionLog"]

_LOCKS: dict[str, threading.Lock] = {}
_LOCKS_GUARD = threading.Lock()


def _thread_lock(path: str) -> threading.Lock:
    with _LOCKS_GUARD:
        return _LOCKS.setdefault(path, threading.Lock())


@contextlib.contextmanager
def _locked(path: str) -> Iterator[None]:
    """Hold the log's lock: a thread lock in this process, ``flock`` on its directory
    across processes (so two appenders never lose each other's run)."""
    with _thread_lock(path):
        if fcntl is None:
            yield
            return
        fd = os.open(os.path.dirname(path), os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing releases the flock


class SessionLog:
    """Append each run of an agent session to one notebook, as its own cell.

    Every run gets a markdown cell (run number, status, duration, error) and a code cell
    (program, outputs, binding calls, timeline). Each append rewrites the file atomically
    (temporary file, ``fsync``, ``os.replace``): a crash mid-append leaves the log as it
    was before that append, never broken. Appends from several threads or processes to
    the same log are serialized.

    >>> import tempfile
    >>> from kernelgate import Gateway
    >>> log = SessionLog(tempfile.mkdtemp() + "/session.ipynb")
    >>> gw = Gateway()
    >>> log.append(gw.run_sync("1 + 1")), log.append(gw.run_sync("1 / 0"))
    (1, 2)
    >>> len(log), log.load(2).status
    (2, 'exception')
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        title: str = "kernelgate session log",
        timeline: bool = True,
    ) -> None:
        self.path = Path(os.path.abspath(os.fspath(path)))
        self.title = title
        self.timeline = timeline

    def __repr__(self) -> str:
        return f"SessionLog({str(self.path)!r})"

    def _new_notebook(self, language: Language) -> dict[str, Any]:
        """A log with no run yet; its kernelspec and ``language_info`` are those of
        ``language``, the first run's (a session's runs share their gateway's runtime)."""
        intro = (
            f"# {self.title}\n\n"
            "Each run below is one program an agent ran with kernelgate, in a fresh "
            "interpreter: a heading with its number, status and duration, then the "
            "program with what it printed, its binding calls (arguments, answers, "
            "timings) and a timeline of those calls.\n\n"
            f"Replay run N without the live bindings: `kernelgate replay "
            f"{self.path.name} --cell N`."
        )
        cell = {
            "cell_type": "markdown",
            "id": "session-log",
            "metadata": {"kernelgate": {"role": "session-title"}},
            "source": intro,
        }
        meta = {
            "kind": "session",
            "format": FORMAT,
            "version": __version__,
            "title": self.title,
            "runs": 0,
        }
        return notebook_dict([cell], meta, language)

    def _read(self) -> dict[str, Any] | None:
        try:
            nb = read_notebook(self.path)
        except FileNotFoundError:
            return None
        kind = (nb.get("metadata", {}).get("kernelgate") or {}).get("kind")
        if kind != "session":
            raise NotARunError(
                f"{self.path} exists and is not a kernelgate session log "
                f"(its kernelgate kind is {kind!r}); choose another path for the log"
            )
        return nb

    def _clean_stale(self) -> None:
        """Remove temporary files a crashed append left (we hold the lock: none is live)."""
        prefix = temp_prefix(self.path)
        try:
            names = os.listdir(self.path.parent)
        except OSError:
            return
        for name in names:
            if name.startswith(prefix) and name.endswith(".tmp"):
                with contextlib.suppress(OSError):
                    os.unlink(self.path.parent / name)

    def append(self, result: RunResult) -> int:
        """Add ``result`` as the next run; return its run number (1 for the first)."""
        if not isinstance(result, RunResult):
            raise TypeError(f"append() takes a RunResult, got {type(result).__name__}")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with _locked(str(self.path)):
            self._clean_stale()
            nb = self._read() or self._new_notebook(result.language)
            runs = run_cells(nb)
            number = 1 + max(
                (
                    n
                    for c in runs
                    if type(n := c["metadata"]["kernelgate"].get("run_number")) is int
                ),
                default=len(runs),
            )
            header = run_header_cell(result, number)
            code = run_code_cell(result, number, timeline=self.timeline)
            taken = {c.get("id") for c in nb["cells"] if isinstance(c, dict)}
            for cell in (header, code):
                base, k = cell["id"], 2
                while cell["id"] in taken:
                    suffix = f"-{k}"
                    cell["id"] = base[: 64 - len(suffix)] + suffix
                    k += 1
                taken.add(cell["id"])
            nb["cells"] += [header, code]
            nb["metadata"]["kernelgate"]["runs"] = len(runs) + 1
            atomic_write(self.path, dumps_notebook(nb))
        return number

    def __len__(self) -> int:
        nb = self._read()
        return 0 if nb is None else len(run_cells(nb))

    def runs(self) -> list[RecordedRun]:
        """Every run in the log, in order."""
        nb = self._read()
        if nb is None:
            return []
        return [
            cell_to_run(cell, source=str(self.path), run_number=run_number(cell, i + 1))
            for i, cell in enumerate(run_cells(nb))
        ]

    def load(self, number: int) -> RecordedRun:
        """Run ``number`` (from 1; -1 for the last)."""
        return load_run(self.path, number)
