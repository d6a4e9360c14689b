"""Starting, signalling and reaping one child process and its process group."""

from __future__ import annotations

import errno
import fcntl
import os
import resource
import select
import shutil
import signal
import socket
import stat
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from kernelgate.kernels.python import LOADER, package_root
from kernelgate.kernels.python.mounts import RUN_GID, RUN_UID

__all__ = ["ChildProcess", "spawn_child", "resolve_interpreter", "make_run_dir", "remove_tree"]

_SIGNALS_TO_DEFAULT = {
    signal.SIGPIPE,
    signal.SIGXFSZ,
    signal.SIGXCPU,
    signal.SIGINT,
    signal.SIGTERM,
    signal.SIGHUP,
    signal.SIGQUIT,
    signal.SIGCHLD,
}


def resolve_interpreter(python: str | os.PathLike[str] | None) -> str:
    """An absolute path to the child interpreter (default: the host's ``sys.executable``)."""
    if python is None:
        path = sys.executable
        if not path:
            raise RuntimeError("sys.executable is empty; pass Gateway(python=...) explicitly")
        return path
    text = os.fspath(python)
    found = text if os.path.isabs(text) else shutil.which(text)
    if not found or not os.access(found, os.X_OK):
        raise ValueError(f"python={text!r} is not an executable interpreter on this machine")
    return os.path.abspath(found)


def high_fd(fd: int) -> int:
    # posix_spawn's dup2 onto the same number would keep FD_CLOEXEC set on some libcs:
    # keep our ends well above 0-3 so every dup2 is a real one.
    if fd >= 10:
        return fd
    new = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
    os.close(fd)
    return new


@dataclass
class ChildProcess:
    """A started child: its pid (also its process group), pidfd and our fd ends."""

    pid: int
    pidfd: int
    control: socket.socket  # our end of fd 3
    stdout_fd: int  # read ends of the child's fd 1 and 2
    stderr_fd: int
    returncode: int | None = None  # os.waitpid style: -N for signal N
    rusage: resource.struct_rusage | None = None  # the child and its waited descendants
    reaped: bool = False
    _closed: bool = field(default=False, repr=False)

    def signal_group(self, sig: int) -> None:
        """Send ``sig`` to the child's whole process group (ignores an empty group)."""
        try:
            os.killpg(self.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def kill(self) -> None:
        """SIGKILL the child, by pidfd: never a stranger that took over its pid."""
        if self.reaped or self._closed:
            return
        try:
            if self.pidfd >= 0:
                signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
            else:
                self.signal_group(signal.SIGKILL)
        except OSError:
            pass  # already gone

    def wait_gone(self, timeout: float) -> bool:
        """Block until the child has exited (not necessarily reaped); False on timeout."""
        if self.reaped or self.pidfd < 0 or self._closed:
            return True
        deadline = time.monotonic() + timeout
        while True:
            left = max(0.0, deadline - time.monotonic())
            readable, _, _ = select.select([self.pidfd], [], [], left)
            if readable:
                return True
            if not left:
                return False

    def try_reap(self) -> bool:
        """Reap the child if it has exited; True once it is reaped."""
        if self.reaped:
            return True
        try:
            pid, status, rusage = os.wait4(self.pid, os.WNOHANG)
        except ChildProcessError:
            # Someone else reaped it (a host-wide SIGCHLD handler): the status is lost.
            self.reaped = True
            return True
        if pid == 0 or not (os.WIFEXITED(status) or os.WIFSIGNALED(status)):
            # Not yet, or a stop of a child that made us its tracer (PTRACE_TRACEME): only
            # an ending is its status.
            return False
        self.reaped = True
        self.returncode = os.waitstatus_to_exitcode(status)
        self.rusage = rusage
        return True

    def group_alive(self) -> bool:
        """True while any non-zombie process is left in the child's process group."""
        try:
            os.killpg(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        # killpg also finds zombies that init has not reaped yet; look closer.
        return _live_members(self.pid)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.control.close()
        for fd in (self.pidfd, self.stdout_fd, self.stderr_fd):
            try:
                os.close(fd)
            except OSError:
                pass


def _live_members(pgid: int) -> bool:
    try:
        names = os.listdir("/proc")
    except OSError:
        return True
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                data = f.read()
        except OSError:
            continue
        # Fields after the parenthesised command: state ppid pgrp ...
        rest = data[data.rfind(b")") + 2 :].split()
        if len(rest) > 2 and int(rest[2]) == pgid and rest[0] not in (b"Z", b"X"):
            return True
    return False


def backoff(timeout: float = 5.0) -> Iterator[float]:
    """Sleeps for polling what takes a moment (a killed process leaving): 0.5 ms doubling
    up to 50 ms, for ``timeout`` seconds in all."""
    deadline = time.monotonic() + timeout
    delay = 0.0005
    while time.monotonic() < deadline:
        yield delay
        delay = min(delay * 2, 0.05)


def spawn_child(
    python: str, env: dict[str, str], run_dir: str, extra_args: tuple[str, ...] = ()
) -> ChildProcess:
    """Start ``python -I -c LOADER`` in a new session with fd 3 a socketpair to us."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    theirs_fd = high_fd(os.dup(theirs.fileno()))
    theirs.close()
    out_w, err_w = high_fd(out_w), high_fd(err_w)
    try:
        file_actions = [
            (os.POSIX_SPAWN_OPEN, 0, "/dev/null", os.O_RDONLY, 0),
            (os.POSIX_SPAWN_DUP2, out_w, 1),
            (os.POSIX_SPAWN_DUP2, err_w, 2),
            (os.POSIX_SPAWN_DUP2, theirs_fd, 3),
        ]
        argv = [python, "-I", *extra_args, "-c", LOADER, package_root()]
        pid = os.posix_spawn(
            python,
            argv,
            env,
            file_actions=file_actions,
            setsid=True,
            setsigmask=(),
            setsigdef=_SIGNALS_TO_DEFAULT,
        )
    except BaseException:
        ours.close()
        os.close(out_r)
        os.close(err_r)
        raise
    finally:
        for fd in (theirs_fd, out_w, err_w):
            os.close(fd)
    try:
        pidfd = os.pidfd_open(pid)
    except OSError:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        ours.close()
        os.close(out_r)
        os.close(err_r)
        raise
    ours.setblocking(False)
    os.set_blocking(out_r, False)
    os.set_blocking(err_r, False)
    return ChildProcess(pid, pidfd, ours, out_r, err_r)


def make_run_dir(base: str | None, run_id: str) -> str:
    """A fresh run directory under ``base`` (default: the host's temporary directory).

    On a root host it belongs to the run's unprivileged uid (RUN_UID: uid 0 inside the
    run's user namespace, or the uid a ``process`` level child drops to), which must be
    able to write it; the host still removes it as root.
    """
    path = tempfile.mkdtemp(prefix=f"kernelgate-{run_id}-", dir=base)
    if os.geteuid() == 0:
        try:
            os.chown(path, RUN_UID, RUN_GID)
        except OSError:
            shutil.rmtree(path, ignore_errors=True)
            raise
    return path


def remove_tree(path: str) -> None:
    """Remove a run directory, even one whose modes the program changed."""

    def onerror(func: object, p: str, exc_info: object) -> None:
        try:
            parent = os.path.dirname(p)
            os.chmod(parent, stat.S_IRWXU)
            if os.path.isdir(p) and not os.path.islink(p):
                os.chmod(p, stat.S_IRWXU)
                shutil.rmtree(p, ignore_errors=True)
            else:
                os.unlink(p)
        except OSError as e:
            if e.errno != errno.ENOENT:
                pass

    shutil.rmtree(path, onerror=onerror)
