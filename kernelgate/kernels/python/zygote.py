"""The zygote: a template process that forks booted children ahead of demand.

It imports the bootstrap, asyncio and the sandbox once, never runs user code, and serves
the host over a SOCK_SEQPACKET socket on fd 3:

- host -> zygote: ``{"op": "fork", "id": N, "level": L, "run_dir": D, "cgroups": [C, ...],
  "read_paths": [...], "owner": "kernelgate-<pid>-<start>-<pidns>-", "ids": [U, G]|null}``
  (``ids``: on a root host, the run's own uid and gid, taken on before the sandbox)
  with three fds attached (SCM_RIGHTS): the child's fd 3, fd 1 and fd 2.
- zygote -> host: ``{"id": N, "pid": P}`` once forked, and ``{"exit": P, "status": S,
  "rusage": [user_s, system_s, maxrss_kib]}`` when it has reaped a child (wait status).

Each child starts a new session, takes its fds, joins its run cgroup (pids and memory, one
directory per controller under cgroup v1), enters its sandbox
(namespaces) and then blocks, booted, until the host sends its program. At a namespace
level the child is forked straight into its namespaces (their init); the zygote attaches it
to its cgroup before it goes on, and reports the program's status that init wrote to a pipe.
When the host closes the socket, the zygote exits; children waiting for a program see fd 3
close and exit.

When the host dies (SIGKILL, SIGTERM, the OOM killer: its fd 3 closes, or its pidfd says it
is gone), nothing of the host's would remove what it owned, so the zygote does before it
exits: it kills its children and what is left in their cgroups, waits for them to be
gone, then removes the cgroups and run directories. Beside the paths the fork requests
named, it removes every entry their directories hold under the host's ``owner`` name
prefix (its cold runs' too). A host that merely closed the pool is alive: it cleans up
itself (and kills the zygote), so the zygote then just exits.

Before its first fork the zygote warms up (:func:`warm_up`): it encodes once what every child
would make itself, and rehearses runs itself until their code is specialized
(:func:`.rehearsal.rehearse_in_zygote`); each warm child rehearses a run on throwaway
objects (:func:`.rehearsal.rehearse`) while it waits for its program.
"""

# long: over the ~500 lines a module may have: the fork loop, the cleanup after a dead host and
# the warm-up all read and write the zygote's own state (its children, their places, the
# host it watches, what it encoded once), and the warm-up belongs with the process that
# does it once for all its children.

from __future__ import annotations

import asyncio
import errno
import gc
import os
import select
import signal
import socket
import sys
import time
from collections.abc import Callable
from typing import Any, NoReturn

from kernelgate.model.removal import remove_tree
from kernelgate.wire.zygote import (
    BOOTED,
    Exited,
    Forked,
    ForkFailed,
    ForkRequest,
    ZygoteEvent,
    ZygoteProtocolError,
    decode_request,
    encode,
)

from . import bootstrap, rehearsal, sandbox
from .report import cache_fallback
from .runner import precompile_debugger

__all__ = ["main", "warm_up"]

_ZYGOTE_FD = 3
#: The C function under ``signal.signal``, for the child's reset of SIGCHLD: the wrapper
#: turns the handler it replaces into an enum, and ours (a function) is none, so it raises
#: and catches a ValueError inside enum first, 0.13 ms and ~30 page faults in a freshly
#: forked child against 0.02 ms and 6 (issue 23).
_set_signal: Callable[[int, int], object] = sys.modules["_signal"].signal
_SIG_DFL = int(signal.SIG_DFL)


def _send(sock: socket.socket, message: ZygoteEvent) -> None:
    try:
        sock.send(encode(message))
    except OSError:
        _host_gone()


_NAMESPACE_LEVELS = ("namespaces", "namespaces+landlock")
_statuses: dict[int, int] = {}  # pid of a child born in namespaces -> its status pipe
_can_clone = True  # until a clone into namespaces fails: then fork and unshare
# What the host owns, to remove if it dies: each live child's run directory and cgroups,
# the directories holding them, and the host's name prefix for what else they hold.
_children: dict[int, tuple[str, tuple[str, ...]]] = {}
_places: set[tuple[str, str]] = set()  # ("dir" | "cgroup", parent directory)
_owner = ""
_host_pid = 0
_host_pidfd = -1
#: How long the children of a dead host may take to leave their cgroups.
_CLEANUP_WAIT = 5.0


def _child(
    sock: socket.socket,
    wake: tuple[int, int],
    fds: list[int],
    request: ForkRequest,
    born_in: sandbox.Born | None = None,
    go: int = -1,
) -> None:
    try:
        if go >= 0:
            # Wait until the zygote has put us in the run's cgroups: we cannot (our uid
            # has no mapping yet), and everything we fork or fill must be counted.
            if os.read(go, 1) != b"x":
                os._exit(72)  # the zygote could not count us (or is gone): never run
            os.close(go)
        for fd in _statuses.values():
            os.close(fd)  # the other children's
        os.setsid()
        signal.set_wakeup_fd(-1)
        _set_signal(signal.SIGCHLD, _SIG_DFL)
        sock.close()
        for fd in wake:
            os.close(fd)
        control, out, err = fds
        null = os.open(os.devnull, os.O_RDONLY)
        for src, dst in ((null, 0), (out, 1), (err, 2), (control, 3)):
            os.dup2(src, dst)  # dup2 clears close-on-exec on the target
        # Exactly fds 0-3 (and our init's status pipe) from here on: nothing of the zygote's
        # or of the host's reaches the program (issue 9, finding 10).
        close_fds_except({0, 1, 2, 3} | ({born_in.status_fd} if born_in else set()))
        if born_in is None:
            _attach(request.cgroups, 0)  # before anything forks: all of this run is counted
        if request.background and os.geteuid() == 0:  # only a root host can undo it
            # Boot in the background, at nice BACKGROUND_NICE: a warm child's boot yields
            # the CPUs to the runs. (After the cgroup write: a global lock the rest of the
            # machine waits for must not be held at a low priority.) A root host asks: it
            # puts every thread of ours back to nice 0 when we have parked (or when a run
            # needs us sooner), before any program runs; without CAP_SYS_NICE nothing
            # could (see pool.in_foreground).
            os.setpriority(os.PRIO_PROCESS, 0, BACKGROUND_NICE)
    except BaseException:
        os._exit(72)
    bootstrap.main(
        level=request.level,
        run_dir=request.run_dir,
        read_paths=list(request.read_paths),
        born_in=born_in,
        rehearse=_rehearse_and_park,
        ids=request.ids,
    )
    os._exit(0)


def _rehearse_and_park(loop: asyncio.AbstractEventLoop) -> None:
    """The last step of a warm child's boot: rehearse a run, then tell the host it is
    booted (:data:`BOOTED` on fd 3) just before it blocks for its program. Until this byte
    arrives the pool does not hand the child out; no program has run yet to forge it."""
    rehearsal.rehearse(loop)
    if os.write(bootstrap.CONTROL_FD, BOOTED) != 1:  # fd 3: the host's end of the run
        raise OSError("could not tell the host this child is booted")


#: The nice value a root host's warm child boots at (a tenth of a CPU's share against a run).
BACKGROUND_NICE = 10


def close_fds_except(keep: set[int]) -> None:
    """Close every fd not in ``keep`` (close_range, in the gaps between the kept ones)."""
    low = 0
    for fd in sorted(keep):
        if fd > low:
            os.closerange(low, fd)
        low = max(low, fd + 1)
    os.closerange(low, _MAX_FD)


_MAX_FD = 2**31 - 1


def _attach(cgroups: tuple[str, ...], pid: int) -> None:
    # os.open and one write, not a text file object: once per child in the zygote, whose
    # every page a first write copies while children share it (issue 23).
    data = str(pid).encode()
    for cgroup in cgroups:
        fd = os.open(os.path.join(cgroup, "cgroup.procs"), os.O_WRONLY | os.O_CLOEXEC)
        try:
            if os.write(fd, data) != len(data):
                raise OSError(f"could not join the run's cgroup {cgroup}")
        finally:
            os.close(fd)


def _fork(sock: socket.socket, wake: tuple[int, int], fds: list[int], request: ForkRequest) -> int:
    """Fork a child for ``request``; in the parent, return its pid.

    At a namespace level the child is born in its namespaces, as their pid 1 (it becomes
    the namespace's init): the process unshare would need to stay outside them, mirroring
    the program's exit, is saved (a fork and an exit, some milliseconds of CPU per run).
    """
    global _can_clone
    # On a root host the child is born outside a user namespace: it arranges its view as
    # real root, then makes the run's (userns._become_the_runs_root).
    if _can_clone and request.level in _NAMESPACE_LEVELS and sandbox.clones_into_namespaces():
        status_r, status_w = os.pipe()
        go_r, go_w = os.pipe()
        born_in = sandbox.Born(os.geteuid(), os.getegid(), status_w)
        try:
            pid = sandbox.fork_into_namespaces(init_only=True)  # it forks the program
        except OSError:
            for fd in (status_r, status_w, go_r, go_w):
                os.close(fd)
            _can_clone = False
        else:
            if pid == 0:
                os.close(status_r)
                os.close(go_w)
                _child(sock, wake, fds, request, born_in, go_r)
            os.close(status_w)
            os.close(go_r)
            try:
                _attach(request.cgroups, pid)
                os.write(go_w, b"x")
            except OSError:
                os.kill(pid, signal.SIGKILL)  # it must not run uncounted
            finally:
                os.close(go_w)
            os.set_blocking(status_r, False)
            _statuses[pid] = status_r
            return pid
    pid = os.fork()
    if pid == 0:
        _child(sock, wake, fds, request)
    return pid


def main() -> None:
    """Serve fork requests until the host closes fd 3."""
    sys.argv = ["kernelgate-zygote"]
    # Not dumpable, nor the children we fork: a running program of the same uid (at
    # ``process`` level) cannot open our /proc/<pid>/fd, mem or environ, nor an idle
    # child's (issue 9, finding 8). The loader closed every inherited fd but 0-3.
    sandbox.not_dumpable()
    _watch_host()
    sock = socket.socket(fileno=_ZYGOTE_FD)
    sock.setblocking(True)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    os.set_blocking(wake_r, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C in the host's terminal is its own
    # Warm what every run needs and what imports lazily.

    asyncio.new_event_loop().close()
    compile("async def f():\n    await g()\n", "<warm>", "exec", dont_inherit=True)
    warm_up()
    rehearsal.rehearse_in_zygote()  # after warm_up's rehome: it replaces the code objects
    # Children share these objects with us until they write to them; a garbage collection
    # in a child would walk (and so copy) all of them. Frozen, they are never walked.
    gc.collect()
    gc.freeze()
    watched: list[Any] = [sock, wake_r] + ([_host_pidfd] if _host_pidfd >= 0 else [])
    while True:
        try:
            ready, _, _ = select.select(watched, [], [])
        except InterruptedError:
            continue
        if _host_pidfd in ready:
            _host_gone()  # even if someone else still holds the host's end of fd 3
        if wake_r in ready:
            try:
                while os.read(wake_r, 512):
                    pass
            except BlockingIOError:
                pass
            _reap(sock)
        if sock in ready:
            try:
                data, fds, _, _ = socket.recv_fds(sock, 65536, 3)
            except InterruptedError:
                continue
            except OSError:
                _host_gone()  # or the host closed the pool
            if not data:
                _host_gone()  # or the host closed the pool
            try:
                request = decode_request(data)
                if len(fds) != 3:
                    raise ZygoteProtocolError(
                        f"a fork request needs 3 fds, got {len(fds)}", request.request_id
                    )
            except ZygoteProtocolError as exc:
                for fd in fds:
                    os.close(fd)
                _send(sock, ForkFailed(exc.request_id, f"bad fork request: {exc}"))
                continue
            try:
                pid = _fork(sock, (wake_r, wake_w), fds, request)
            except OSError as exc:
                for fd in fds:
                    os.close(fd)
                _send(sock, ForkFailed(request.request_id, str(exc)))
                continue
            for fd in fds:
                os.close(fd)
            _own(pid, request)
            _send(sock, Forked(request.request_id, pid))
            _reap(sock)


def _reap(sock: socket.socket) -> None:
    while True:
        try:
            info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return
        if info is None:
            return
        pid = info.si_pid
        if info.si_code not in (os.CLD_EXITED, os.CLD_KILLED, os.CLD_DUMPED):
            # A stop or a continue: a child at ``process`` level that made us its tracer
            # (PTRACE_TRACEME) reports them even unasked. Take it off the queue and go on:
            # only an ending is a status; the host kills a stopped run at wall_seconds.
            try:
                os.waitpid(pid, os.WNOHANG | os.WUNTRACED | os.WCONTINUED)
            except ChildProcessError:
                pass
            continue
        # Still a zombie, the child holds its process group id: kill what it left behind
        # in its group before reaping frees the number.
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass
        try:
            pid, status, ru = os.wait4(pid, 0)
        except ChildProcessError:
            continue
        _children.pop(pid, None)  # its run is over: the host removes what it had
        status = _program_status(pid, status)
        _send(sock, Exited(pid, status, ru.ru_utime, ru.ru_stime, ru.ru_maxrss))


def _program_status(pid: int, status: int) -> int:
    """For a child born in namespaces (their init), how its program ended, as its init
    reported it before exiting; else (or if it died first) its own status."""
    fd = _statuses.pop(pid, -1)
    if fd < 0:
        return status
    try:
        reported = sandbox.read_status(fd)
    except OSError:
        reported = None
    finally:
        os.close(fd)
    return status if reported is None else reported


# -- the host's death ------------------------------------------------------------------------


def _watch_host() -> None:
    """Remember our parent, the host, with a pidfd that tells when it is gone."""
    global _host_pid, _host_pidfd
    _host_pid = os.getppid()
    try:
        _host_pidfd = os.pidfd_open(_host_pid)
    except (OSError, AttributeError):
        _host_pidfd = -1  # no pidfds here: EOF on fd 3 and our parent changing tell it
    if os.getppid() != _host_pid:
        _host_gone()  # it died before we could watch it: that pidfd is not its


def _own(pid: int, request: ForkRequest) -> None:
    """Note what the host told us a new child owns."""
    global _owner
    run_dir = request.run_dir
    if not isinstance(run_dir, str):
        return
    _children[pid] = (run_dir, request.cgroups)
    _places.add(("dir", os.path.dirname(run_dir)))
    for cgroup in request.cgroups:
        _places.add(("cgroup", os.path.dirname(cgroup)))
    owner = request.owner
    # Only a prefix that names our host: never a way to remove anyone else's.
    if isinstance(owner, str) and owner.startswith(f"kernelgate-{_host_pid}-"):
        _owner = owner


_PF_EXITING = 0x4  # /proc/<pid>/stat flags: the process is in do_exit


def _host_exiting() -> bool:
    """True if the host has exited or is exiting.

    fd 3 closes in the middle of the host's exit (its files go before it is a zombie and
    its pidfd fires), but its exit flag is set before that: so when fd 3 closes, a host
    without it merely closed the pool (and cleans up itself).
    """
    if os.getppid() != _host_pid:
        return True  # re-parented: the host has exited
    try:
        with open(f"/proc/{_host_pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return True
    fields = data[data.rfind(b")") + 2 :].split()
    try:
        return fields[0] in (b"Z", b"X") or bool(int(fields[6]) & _PF_EXITING)
    except (IndexError, ValueError):
        return False


def _host_gone() -> NoReturn:
    """fd 3 closed (or the host's pidfd fired): clean up after a dead host, and exit."""
    try:
        if _host_exiting():
            _clean_up()
    finally:
        os._exit(0)


def _listdir(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


def _clean_up() -> None:
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    run_dirs = {run_dir for run_dir, _ in _children.values()}
    cgroups = {cgroup for _, paths in _children.values() for cgroup in paths}
    if _owner:
        for kind, place in _places:
            found = {os.path.join(place, name) for name in _listdir(place)}
            mine = {path for path in found if os.path.basename(path).startswith(_owner)}
            (run_dirs if kind == "dir" else cgroups).update(mine)
    for pid in _children:
        for kill in (os.killpg, os.kill):
            try:
                kill(pid, signal.SIGKILL)
            except OSError:
                pass
    deadline = time.monotonic() + _CLEANUP_WAIT
    delay = 0.0005
    while True:
        # Everything in the cgroups: what left our children's process groups, and the
        # host's cold runs. Killed processes take a moment to leave, so until empty.
        for cgroup in list(cgroups):
            if not _kill_cgroup(cgroup):
                cgroups.discard(cgroup)  # empty and removed, or not a cgroup at all
        _reap_all()
        if not cgroups and not _has_children():
            break
        if time.monotonic() > deadline:
            break
        time.sleep(delay)
        delay = min(delay * 2, 0.05)
    for path in run_dirs:
        if os.path.basename(path).startswith("kernelgate-"):
            remove_tree(path)  # never raises; what it cannot remove, the next sweep sees


def _kill_cgroup(path: str) -> bool:
    """Kill what is in a cgroup and remove it; True while it is still there (busy)."""
    if not os.path.basename(path).startswith("kernelgate-"):
        return False
    try:
        with open(os.path.join(path, "cgroup.procs")) as f:
            pids = [int(line) for line in f.read().split()]
    except (OSError, ValueError):
        pids = []
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    try:
        os.rmdir(path)
    except FileNotFoundError:
        return False
    except OSError as exc:
        return exc.errno == errno.EBUSY  # its processes are on their way out
    return False


def _reap_all() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _has_children() -> bool:
    try:
        os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return False
    return True


# -- the warm-up: what every child would otherwise make itself -------------------------------


def warm_up() -> None:
    """In the zygote, before it forks: make once what every child it forks would otherwise
    make itself (the fallback reply, the rehearsal's frames, the sandbox's paths and
    filters), then rehome the frames of what is loaded.

    faulthandler writes to fd 2 by number, which is each child's own stderr by then.
    """
    import faulthandler

    try:
        faulthandler.enable(file=sys.__stderr__ or sys.stderr)
    except (RuntimeError, ValueError, OSError):
        pass  # no stderr to write to: each child tries again with its own
    cache_fallback()
    rehearsal.rehearsal_frames()
    sandbox.warm_sandbox()
    precompile_debugger()  # bytecode only: no child imports the debugger unless debugged
    bootstrap.rehome_code()  # the zygote's own functions are defined by now


# Last, once everything above is defined: this module's frames (main() is below every warm
# child's) show <kernelgate>/... instead of the host's install path.
bootstrap.rehome_code()
