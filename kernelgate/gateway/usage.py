"""What a run's processes used, as the host reads it from /proc: CPU time and peak memory
of a process and its reaped children, and of a whole tree.

The host is the authority on usage (docs/security.md): these figures are the host's own,
never the child's word.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from .cgroups import RunCgroup

__all__ = [
    "ProcFds",
    "descendants",
    "keep_proc_fds",
    "measure_kept",
    "measure_run",
    "measure_usage",
    "proc_usage",
]

_CLK_TCK = os.sysconf("SC_CLK_TCK")

#: fds of /proc/PID/stat and /proc/PID/status per pid, opened ahead (:func:`keep_proc_fds`).
ProcFds = dict[int, tuple[int, int]]


def _read(path: str, size: int) -> bytes | None:
    """One /proc file, whole (``size`` is more than it holds); None if gone. os.open and a
    single read: a third of the builtin open()'s cost, and this is on a run's reply path."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        return os.read(fd, size)
    except OSError:
        return None
    finally:
        os.close(fd)


def keep_proc_fds(pids: list[int], into: ProcFds) -> None:
    """Open /proc/PID/stat and status of each of ``pids`` into ``into`` (those that can
    be): a warm child's processes, while it waits, so that its run's reply reads them
    without the lookups (the fds stay the process's: gone, they read nothing)."""
    for pid in pids:
        try:
            stat = os.open(f"/proc/{pid}/stat", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            status = os.open(f"/proc/{pid}/status", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            os.close(stat)
            continue
        into[pid] = (stat, status)


def _pread(fd: int, size: int) -> bytes | None:
    try:
        return os.pread(fd, size, 0)  # offset 0: the file's text made anew (seq_file)
    except OSError:
        return None


def proc_usage(pid: int, kept: ProcFds | None = None) -> tuple[float, float, int, float] | None:
    """(user s, system s, peak RSS bytes, its own CPU s) of ``pid`` and its reaped
    children (the first three), from /proc (through its fds in ``kept``, if there)."""
    fds = kept.get(pid) if kept else None
    stat = status = None
    if fds is not None:
        stat, status = _pread(fds[0], 4096), _pread(fds[1], 65536)
    if stat is None or status is None:  # not kept; or gone, and the pid another's now
        stat = _read(f"/proc/{pid}/stat", 4096)  # about 300 bytes
        status = _read(f"/proc/{pid}/status", 65536)  # about 1.5 KiB
    if stat is None or status is None:
        return None
    return _parsed(stat, status)


def _parsed(stat: bytes, status: bytes) -> tuple[float, float, int, float] | None:
    """:func:`proc_usage`'s figures from the text of /proc/PID/stat and status."""
    fields = stat[stat.rfind(b")") + 2 :].split(None, 15)  # up to cstime
    try:
        user = (int(fields[11]) + int(fields[13])) / _CLK_TCK
        system = (int(fields[12]) + int(fields[14])) / _CLK_TCK
        own = (int(fields[11]) + int(fields[12])) / _CLK_TCK
    except (IndexError, ValueError):
        return None
    peak = 0
    at = status.find(b"\nVmHWM:")  # never the first line (Name: is)
    if at >= 0:
        words = status[at + 7 : status.find(b"\n", at + 7)].split()
        try:
            peak = int(words[0]) * 1024
        except (IndexError, ValueError):
            pass
    return user, system, peak, own


def descendants(pid: int) -> list[int]:
    """``pid`` and every process below it, from /proc/<pid>/task/*/children."""
    found: list[int] = []
    todo = [pid]
    while todo and len(found) < 4096:
        current = todo.pop()
        found.append(current)
        try:
            tasks = os.listdir(f"/proc/{current}/task")
        except OSError:
            continue
        for tid in tasks:
            try:
                with open(f"/proc/{current}/task/{tid}/children", "rb") as f:
                    todo.extend(int(p) for p in f.read().split())
            except (OSError, ValueError):
                continue
    return found


def measure_usage(
    pids: list[int], kept: ProcFds | None = None
) -> tuple[dict[str, Any] | None, float]:
    """CPU time and peak memory of ``pids`` as the host reads them from /proc (None if none
    could be read; ``kept``: fds of some, see :func:`keep_proc_fds`), and the most CPU one
    of them used on its own."""
    return _summed([proc_usage(pid, kept) for pid in pids])


def measure_run(
    root: int | None, kept: ProcFds, cgroup: RunCgroup | None
) -> tuple[dict[str, Any] | None, float]:
    """:func:`measure_usage` of a run's processes: those in its ``cgroup`` (else ``root``
    and the processes below it), reading the fds ``kept`` for them where there are some.
    ``root`` None: the run's child is gone and its pid maybe another's (reaped by the
    zygote): only what the cgroup lists is read, never a tree by that number.

    A warm child's processes had their fds kept as it parked: when the cgroup counts
    exactly that many tasks now, they are all of the run's (each is alive, in it, one task
    at least), and listing cgroup.procs (v1 builds and sorts the list at each open) is
    skipped on the way to the caller."""
    if cgroup is not None and kept and cgroup.charged() == len(kept):
        measured = measure_kept(kept)
        if measured is not None:
            return measured
    pids = cgroup.procs() if cgroup is not None else []
    if not pids and root is not None:
        pids = descendants(root)
    return measure_usage(pids, kept)


def measure_kept(kept: ProcFds) -> tuple[dict[str, Any] | None, float] | None:
    """:func:`measure_usage` of exactly the processes in ``kept``, through their kept fds
    only; None if one of them cannot be read so (it is gone: its pid may be another
    process's now, which only a fresh listing of the run's processes can tell)."""
    found = []
    for stat, status in kept.values():
        text, lines = _pread(stat, 4096), _pread(status, 65536)
        if text is None or lines is None:
            return None
        usage = _parsed(text, lines)
        if usage is None:
            return None
        found.append(usage)
    return _summed(found)


def _summed(
    found: Sequence[tuple[float, float, int, float] | None],
) -> tuple[dict[str, Any] | None, float]:
    user = system = 0.0
    peak = 0
    busiest = 0.0
    seen = False
    for one in found:
        if one is None:
            continue
        seen = True
        user += one[0]
        system += one[1]
        peak = max(peak, one[2])
        busiest = max(busiest, one[3])
    if not seen:
        return None, busiest
    usage = {
        "cpu_user_s": round(user, 6),
        "cpu_system_s": round(system, 6),
        "peak_memory_bytes": peak,
    }
    return usage, busiest
