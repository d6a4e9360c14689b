"""What is running, read from /proc: the tests' one place for finding leftover processes.

Programs may run in their own pid namespace, so the pids they see are not ours: tests find
their processes by a marker in the command line, or by parentage, from the host's /proc.
A marker names the test *and this test process* (:func:`marker_for`): other kernelgate
processes on the machine (another engineer's test run of the same test, a kernel, a
``kernelgate run`` loop) never count as a test's leftovers.
"""

from __future__ import annotations

import os
import select
import shutil
import signal
import subprocess
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest


def _stat(pid: int | str) -> tuple[bytes, int] | None:
    """``(state, ppid)`` of a process, or None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    fields = data[data.rfind(b")") + 2 :].split()
    return fields[0], int(fields[1])


def _pids() -> Iterator[int]:
    return (int(name) for name in os.listdir("/proc") if name.isdigit())


def marker_for(test_name: str) -> str:
    """A command-line marker for processes a test's programs start: the test's name and
    this process's pid, so that only this test run's own processes carry it."""
    return f"kg-marker-{test_name}-{os.getpid()}"


def pid_alive(pid: int) -> bool:
    """True if ``pid`` exists and is not a zombie."""
    stat = _stat(pid)
    return stat is not None and stat[0] not in (b"Z", b"X")


def processes_with(marker: str) -> list[int]:
    """Host pids of live processes whose command line contains ``marker``."""
    found = []
    for pid in _pids():
        if pid == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read()
        except OSError:
            continue
        if marker.encode() in cmdline and pid_alive(pid):
            found.append(pid)
    return found


def live_children(pid: int) -> list[int]:
    """Live (non-zombie) processes whose parent is ``pid``."""
    return [p for p in _pids() if (s := _stat(p)) is not None and s[1] == pid and pid_alive(p)]


def descendants(pid: int) -> set[int]:
    """Every process below ``pid``."""
    children: dict[int, list[int]] = {}
    for p in _pids():
        stat = _stat(p)
        if stat is not None:
            children.setdefault(stat[1], []).append(p)
    found: set[int] = set()
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def kernelgate_command() -> list[str]:
    """The ``kernelgate`` command installed with the Python running the tests (not whatever
    ``kernelgate`` is first on PATH, which may belong to another environment)."""
    import sys
    from pathlib import Path

    script = Path(sys.executable).parent / "kernelgate"
    return [str(script)] if script.is_file() else [sys.executable, "-m", "kernelgate.cli"]


def survivors_of_a_dead_host(
    pids: Iterable[int], run_base: Path, seconds: float = 3.0
) -> list[int]:
    """The processes of ``pids`` still alive ``seconds`` after their host was killed (a
    SIGKILLed process takes a moment to go); each is then killed, and the dead host's run
    directories under ``run_base`` (what the next sweep would remove) are removed, so that a
    failing test leaves nothing behind."""
    pids = list(pids)
    deadline = time.monotonic() + seconds
    alive = pids
    while alive and time.monotonic() < deadline:
        alive = [p for p in pids if pid_alive(p)]
        time.sleep(0.01)
    for p in alive:
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass
    for name in os.listdir(run_base):
        if name.startswith("kernelgate-"):
            shutil.rmtree(run_base / name, ignore_errors=True)
    return alive


def assert_stranger_alive(proc: subprocess.Popen[bytes]) -> None:
    """``proc``, given a freed pid on purpose, was neither signalled to death nor reaped by
    anyone (the attack tests of tests/hardening/test_attack_number_reuse.py and
    tests/node/test_helper_pid_reuse.py)."""
    try:
        pidfd = os.pidfd_open(proc.pid)
    except ProcessLookupError:
        pytest.fail(f"the stranger {proc.pid} holding the freed pid was reaped")
    try:
        # A SIGKILL sent is an exit a moment later: wait for one that long.
        readable, _, _ = select.select([pidfd], [], [], 0.5)
    finally:
        os.close(pidfd)
    assert not readable, f"the stranger {proc.pid} holding the freed pid was killed"
