"""A process that asyncio started and reaps, signalled and waited for by pidfd only.

asyncio's child watcher (``ThreadedChildWatcher``, the default up to Python 3.11) reaps the
process in a thread of its own and then tells the loop, with ``call_soon_threadsafe``; once
the loop has ended it never does. Until then ``Process.returncode`` is None while the pid
may already be free, and the system gives pids out again (``pid_max`` is 32,768 on many
hosts, a few minutes of a busy gateway): ``Process.kill()``, which polls and signals by
number, or an ``os.kill``/``os.waitpid`` of that number, would then reach whatever process
holds it now, another run's child among them. A pidfd names one process and never another.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import signal
import threading

__all__ = ["HelperPid"]

_GONE = -2  # reaped before a pidfd could be opened: nothing may be signalled, ever
_NO_PIDFDS = -1  # a kernel without pidfds (Linux < 5.3): asyncio's own kill, as before
_CLOSED = -3


class HelperPid:
    """A pidfd on ``proc``, taken right after it is spawned (a process cannot be reaped
    before it exits, and a helper only exits when told to or broken).

    >>> helper = HelperPid(await asyncio.create_subprocess_exec("sleep", "60"))  # doctest: +SKIP
    >>> helper.kill(); await helper.proc.wait(); helper.close()                 # doctest: +SKIP

    Every method may be called from any thread, in any order, any number of times.
    """

    __slots__ = ("_fd", "_lock", "proc")

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self._lock = threading.Lock()
        try:
            self._fd = os.pidfd_open(proc.pid)
        except OSError as exc:
            self._fd = _GONE if exc.errno == errno.ESRCH else _NO_PIDFDS

    def kill(self) -> None:
        """SIGKILL the process if it is still there; never anything else."""
        with self._lock:
            fd = self._fd
            if fd >= 0:
                with contextlib.suppress(ProcessLookupError):
                    signal.pidfd_send_signal(fd, signal.SIGKILL)
                return
        if fd == _NO_PIDFDS and self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()

    def kill_and_reap(self) -> None:
        """SIGKILL and reap the process now, blocking (its loop has ended, so asyncio can
        no longer do it; a watcher thread that reaps it first is as good)."""
        self.kill()
        with self._lock:
            if self._fd >= 0:
                # P_PIDFD waits for this process only: ECHILD if the watcher was first.
                with contextlib.suppress(ChildProcessError):
                    os.waitid(os.P_PIDFD, self._fd, os.WEXITED)
            elif self._fd == _NO_PIDFDS and self.proc.returncode is None:
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(self.proc.pid, 0)
        self.close()

    def kill_and_close(self) -> None:
        """SIGKILL the process if it is still there and close the pidfd (asyncio reaps it):
        for a helper whose owner is gone."""
        self.kill()
        self.close()

    def close(self) -> None:
        """Close the pidfd (the process is not touched)."""
        with self._lock:
            fd, self._fd = self._fd, _CLOSED
        if fd >= 0:
            os.close(fd)
