"""Starting, signalling and reaping one child process and its process group."""

from __future__ import annotations

import fcntl
import itertools
import logging
import os
import re
import resource
import select
import shutil
import signal
import socket
import stat
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import ClassVar

from kernelgate.kernels.python import LOADER, package_root
from kernelgate.model import removal
from kernelgate.model.constants import RUN_GID, RUN_UID
from kernelgate.model.site import SiteState

from .runids import RunIds

__all__ = [
    "ChildProcess",
    "spawn_child",
    "start_child",
    "resolve_interpreter",
    "make_run_dir",
    "remove_tree",
    "owner_prefix",
    "owner_alive",
    "sweep_run_dirs",
    "stat_fields",
]

#: What teardown and the sweep could not remove goes here (they never raise for it).
log = logging.getLogger("kernelgate.gateway")

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
    #: The run's own uid and gid on a root host (None: the host's); released by the teardown
    #: once the run's processes are gone and its directory is removed.
    ids: RunIds | None = None
    #: The host's own peak RSS (KiB) when it started the child. At exec() the kernel keeps
    #: the peak of the image the process left (the host's, which posix_spawn runs in) in
    #: its ru_maxrss: a cold child's ru_maxrss (reaped, or as it reports it) is at least
    #: this, whatever the child itself held (0: forked from a zygote, nothing inherited).
    inherited_maxrss_kib: int = 0
    #: fds of its processes' /proc stat and status, opened ahead (a warm child's, as it
    #: waits: :func:`~.usage.keep_proc_fds`); closed with the child's other fds.
    proc_fds: dict[int, tuple[int, int]] = field(default_factory=dict, repr=False)
    _closed: bool = field(default=False, repr=False)

    #: Reaped by someone else (a zygote), who reports how it ended (see :meth:`on_status`).
    reaped_by_zygote: ClassVar[bool] = False

    def on_status(self, callback: Callable[[], None]) -> None:
        """Call ``callback()`` once how the child ended can be known. A child we spawned
        ourselves can be reaped as soon as its pidfd fires: at once."""
        callback()

    def holds_pid(self) -> bool:
        """Whether the child's pid (also its process group id) still names the child or
        its group, and may be signalled or read from /proc by number.

        The kernel gives a pid out again once its process is reaped (pid_max is 32,768 on
        many machines): a ``killpg`` by that number then kills a stranger's group (another
        run's child, any daemon: each leads a session of its own). So not once the child
        is reaped (by us, or by the thread a close handed it to), nor once our ends are
        closed; and for a child the zygote reaps, not once it has exited: the zygote may
        free the number any moment after (having killed what its group held: see
        zygote._reap), before we hear of it. Unreaped and ours, the child is at worst a
        zombie, which keeps the number."""
        if self.reaped or self._closed:
            return False
        return not (self.reaped_by_zygote and self.wait_gone(0))

    def signal_group(self, sig: int) -> None:
        """Send ``sig`` to the child's whole process group (ignores an empty group), only
        while the group id is still the child's (:meth:`holds_pid`)."""
        if not self.holds_pid():
            return
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

    def kill_all(self) -> None:
        """SIGKILL the child by pidfd and its process group: a warm child's pid is known
        before it has made its own group (setsid), and a group kill then reaches nothing."""
        self.kill()
        self.signal_group(signal.SIGKILL)

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

    def abandon(self) -> None:
        """Kill and reap, waiting, a child that must not go on and has run nothing of a
        run yet (just started: its exit is a matter of microseconds), then close it."""
        self.kill()
        if not self.reaped:
            try:
                os.waitpid(self.pid, 0)
            except ChildProcessError:
                pass
            self.reaped = True
        self.close()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.control.close()
        kept, self.proc_fds = self.proc_fds, {}
        for fd in (self.pidfd, self.stdout_fd, self.stderr_fd, *itertools.chain(*kept.values())):
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
    python: str,
    env: Mapping[str, str],
    run_dir: str,
    extra_args: tuple[str, ...] = (),
    site: SiteState | None = None,
) -> ChildProcess:
    """Start ``python -I -c LOADER`` in a new session with fd 3 a socketpair to us.

    With ``site`` (what the interpreter's ``site`` module makes, probed once) the child
    starts with ``-S`` and is given it as argv[2].
    """
    if site is not None:
        argv = [python, "-I", "-S", *extra_args, "-c", LOADER, package_root(), site.to_json()]
    else:
        argv = [python, "-I", *extra_args, "-c", LOADER, package_root()]
    return start_child(python, argv, env)


def start_child(
    executable: str, argv: list[str], env: Mapping[str, str], stdin_fd: int | None = None
) -> ChildProcess:
    """Start ``argv`` (``executable``) in a new session: fd 0 ``stdin_fd`` (None:
    ``/dev/null``), fd 1 and 2 pipes to us, fd 3 a socketpair to us, signals at their
    defaults, nothing else inherited that was not inheritable (the loaders close the rest)."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    theirs_fd = high_fd(os.dup(theirs.fileno()))
    theirs.close()
    out_w, err_w = high_fd(out_w), high_fd(err_w)
    try:
        stdin: tuple[int, int, str, int, int] | tuple[int, int, int] = (
            (os.POSIX_SPAWN_OPEN, 0, "/dev/null", os.O_RDONLY, 0)
            if stdin_fd is None
            else (os.POSIX_SPAWN_DUP2, stdin_fd, 0)
        )
        file_actions = [
            stdin,
            (os.POSIX_SPAWN_DUP2, out_w, 1),
            (os.POSIX_SPAWN_DUP2, err_w, 2),
            (os.POSIX_SPAWN_DUP2, theirs_fd, 3),
        ]
        pid = os.posix_spawn(
            executable,
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
    # Read after the spawn (posix_spawn returns once the child has exec'd): the host's peak
    # only grows, so this is at least what the kernel put in the child's ru_maxrss.
    inherited = _own_peak_rss_kib()
    return ChildProcess(pid, pidfd, ours, out_r, err_r, inherited_maxrss_kib=inherited)


def _own_peak_rss_kib() -> int:
    """This process's peak RSS in KiB: VmHWM, what the kernel hands on to a child exec'd
    from our image (getrusage's figure may add the peak we inherited at our own exec)."""
    try:
        fd = os.open("/proc/self/status", os.O_RDONLY | os.O_CLOEXEC)
        try:
            status = os.read(fd, 1 << 16)
        finally:
            os.close(fd)
        for line in status.splitlines():
            if line.startswith(b"VmHWM:"):
                return int(line.split()[1])
    except (OSError, IndexError, ValueError):
        pass
    # Unreadable: our ru_maxrss, which is never below it.
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


# -- what a host owns, named so that what outlives it can be found ---------------------------
#
# Every run directory and pids cgroup a host makes is named ``kernelgate-<pid>-<start>-<ns>-...``:
# the host's pid, its start time (clock ticks after boot, /proc/<pid>/stat field 22) and the
# inode of its pid namespace. The pair (pid, start) names one process for the life of the
# machine, even after the pid is reused; the namespace says which /proc can tell. Whatever
# outlives a dead host (its zygote, a later Gateway) removes exactly the entries whose owner
# is gone, and never a live host's.

_OWNER = re.compile(r"kernelgate-(\d+)-(\d+)-(\d+)-", re.ASCII)
_owner_cache: tuple[int, str] | None = None


def stat_fields(pid: int) -> list[bytes] | None:
    """The fields of /proc/<pid>/stat after the command (state is [0]), or None if gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    return data[data.rfind(b")") + 2 :].split()


_pidns_cache: tuple[int, int] | None = None


def _pid_namespace() -> int:
    """The inode of our pid namespace (fixed for a process's life), 0 if unknown."""
    global _pidns_cache
    pid = os.getpid()
    if _pidns_cache is not None and _pidns_cache[0] == pid:
        return _pidns_cache[1]
    try:
        ns = os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        ns = 0  # our entries then carry 0, and nothing is swept (see owner_alive)
    _pidns_cache = (pid, ns)
    return ns


def owner_prefix() -> str:
    """``kernelgate-<pid>-<start>-<pidns>-``: the prefix of every name this process owns."""
    global _owner_cache
    pid = os.getpid()
    if _owner_cache is not None and _owner_cache[0] == pid:
        return _owner_cache[1]
    fields = stat_fields(pid)
    start = int(fields[19]) if fields is not None and len(fields) > 19 else 0
    prefix = f"kernelgate-{pid}-{start}-{_pid_namespace()}-"
    _owner_cache = (pid, prefix)  # per pid: a forked process owns its own names
    return prefix


def owner_alive(name: str, seen: dict[tuple[int, int], bool] | None = None) -> bool:
    """False only if ``name`` is marked (see :func:`owner_prefix`) by a process that is
    certainly gone: its pid is free, or now a different process, or a zombie. Unmarked
    names, a foreign pid namespace, or a /proc that is not ours count as alive (we
    cannot tell, so we never touch them). ``seen`` caches answers for one sweep."""
    found = _OWNER.match(name)
    if found is None:
        return True
    pid, start, ns = (int(g) for g in found.groups())
    if ns == 0 or ns != _pid_namespace() or start == 0:
        return True
    if seen is not None and (pid, start) in seen:
        return seen[(pid, start)]
    fields = stat_fields(pid)
    if fields is None:
        # A /proc of another pid namespace would not show our own pid either.
        alive = stat_fields(os.getpid()) is None
    elif len(fields) <= 19 or fields[0] in (b"Z", b"X"):
        alive = False
    else:
        alive = int(fields[19]) == start
    if seen is not None:
        seen[(pid, start)] = alive
    return alive


def sweep_run_dirs(base: str | None, timeout: float = removal.REMOVE_TIMEOUT) -> list[str]:
    """Remove the run directories under ``base`` (default: the temporary directory) whose
    owner is gone; return their names. One listdir, and a /proc read per marked entry.

    Whatever is found there was made by a program, or planted by anyone who may write
    ``base`` (``/tmp``): nothing found makes it raise, each entry that cannot be removed
    is logged and left, and the removals share one ``timeout`` (seconds). Only
    directories are entered, never through a link (see :func:`remove_tree`).
    """
    base = base or tempfile.gettempdir()
    try:
        names = os.listdir(base)
    except OSError:
        return []
    deadline = time.monotonic() + timeout
    removed = []
    seen: dict[tuple[int, int], bool] = {}
    for name in names:
        try:
            if not name.startswith("kernelgate-") or owner_alive(name, seen):
                continue
            path = os.path.join(base, name)
            if not stat.S_ISDIR(os.lstat(path).st_mode):
                continue  # we only ever made directories: never follow anything else
            left = removal.remove_tree(path, max(0.0, deadline - time.monotonic()))
        except Exception as exc:  # a crafted entry never stops a gateway
            log.warning("kernelgate: the sweep skipped %r in %r: %r", name, base, exc)
            continue
        if left:
            log.warning("kernelgate: the sweep left %s", left)
        else:
            removed.append(name)
    return removed


def make_run_dir(base: str | None, run_id: str, ids: RunIds | None = None) -> str:
    """A fresh run directory under ``base`` (default: the host's temporary directory),
    named ``kernelgate-<owner>-<run_id>-XXXXXXXX`` (see :func:`owner_prefix`), mode 0700.

    On a root host it belongs to the run's own unprivileged uid and gid (``ids``, see
    :mod:`.runids`; without them the shared RUN_UID): uid 0 inside the run's user
    namespace, or the uid a ``process`` level child drops to, which must be able to write
    it and no other run can; the host still removes it as root.
    """
    path = tempfile.mkdtemp(prefix=f"{owner_prefix()}{run_id}-", dir=base)
    if os.geteuid() == 0:
        uid, gid = (ids.uid, ids.gid) if ids is not None else (RUN_UID, RUN_GID)
        try:
            os.chown(path, uid, gid)
        except OSError:
            shutil.rmtree(path, ignore_errors=True)
            raise
    return path


def remove_tree(path: str) -> None:
    """Remove a run directory and whatever its program made in it, however deep or wide,
    whatever its modes, never following a link out of it (:mod:`kernelgate.model.removal`).

    If ``path`` itself is no longer a directory (a program at ``process`` level may own
    its run directory and replace it), only that entry goes: its parent, the temporary
    directory, is never touched. Never raises for what it finds: what it could not remove
    is logged (a dead host's is swept later, see :func:`sweep_run_dirs`).
    """
    left = removal.remove_tree(path)
    if left:
        log.warning("kernelgate: %s", left)
