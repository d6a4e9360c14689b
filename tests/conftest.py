from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Iterator
from concurrent.futures.thread import _worker as _pool_worker

import pytest

#: How long the cleanups a gateway finishes off the loop may take to end (each is bounded:
#: a cgroup's settle, 5 s; see kernelgate.gateway.teardown.off_loop).
_CLEANUP_WAIT = 15.0


def _join_cleanups() -> None:
    """Wait for the gateway's off-loop cleanup threads (``kernelgate-*``): a run cancelled
    while its child was forking gives its uid back only once its cgroup is empty, in such
    a thread. What is still open after they end is a leak."""
    deadline = time.monotonic() + _CLEANUP_WAIT
    for thread in threading.enumerate():
        if thread.name.startswith("kernelgate-") and thread is not threading.current_thread():
            thread.join(max(0.0, deadline - time.monotonic()))


def _open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


@pytest.fixture
def no_fd_leak():
    """Fail the test if it leaves file descriptors open in the test process."""
    before = _open_fds()
    yield
    _join_cleanups()
    leaked = {
        fd: os.readlink(f"/proc/self/fd/{fd}")
        for fd in _open_fds() - before
        if os.path.exists(f"/proc/self/fd/{fd}")
    }
    assert not leaked, f"file descriptors leaked: {leaked}"


#: How long the session's end waits for the threads tests left running (each should end).
_EXIT_WAIT = 60.0


def pytest_sessionfinish(session, exitstatus):
    session.config._kernelgate_exitstatus = int(exitstatus)


def pytest_unconfigure(config):
    """A thread a failed test left running (a run that never returned) fails the session;
    it must not hang its exit: the interpreter joins every non-daemon thread at exit, and
    a CI run would wait for it until its own timeout, the failure's report unseen."""
    me = threading.current_thread()
    deadline = time.monotonic() + _EXIT_WAIT
    # An executor's idle workers end at exit (concurrent.futures wakes them): not waited for.
    left = [
        t for t in threading.enumerate()
        if t is not me and not t.daemon and getattr(t, "_target", None) is not _pool_worker
    ]  # fmt: skip
    for thread in left:
        thread.join(max(0.0, deadline - time.monotonic()))
    stuck = [t.name for t in left if t.is_alive()]
    if stuck:
        print(f"\nthreads still running after the tests, not waited for: {stuck}", flush=True)
        os._exit(getattr(config, "_kernelgate_exitstatus", 0) or 1)


@pytest.fixture
def strangers() -> Iterator[list[subprocess.Popen[bytes]]]:
    """The strangers a test starts (processes given a freed pid on purpose: tests.procs.
    assert_stranger_alive), killed and reaped after it."""
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        proc.kill()
        proc.wait()
