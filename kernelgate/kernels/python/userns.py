"""The run's namespaces and their init: user, mount, network, pid and IPC. Stdlib only.

At the namespace levels the program runs as pid 2 under a small init (pid 1) that reaps
everything and takes the whole namespace down when the program ends. Who makes the
namespaces:

- a non-root host: a cold child unshares and maps uid 0 inside to its own uid, staying
  outside the pid namespace to mirror the program's exit; a warm child is cloned into its
  namespaces by the zygote (:func:`fork_into_namespaces`) and is their init;
- a root host (:func:`_unprivileged_init`): uid 0 inside must not be root outside, so the
  child (cold, or forked by the zygote) arranges the view as real root in a mount namespace
  of its own, clones the init into the other namespaces, maps its uid 0 to the run's own
  uid (the host's choice, :data:`RUN_UID` if none) from outside (which needs CAP_SETUID
  in the parent namespace) and mirrors it.

The view itself is :mod:`.mounts`; the system calls are :mod:`.syscalls`.

>>> NAMESPACES & CLONE_NEWPID != 0
True
"""

from __future__ import annotations

import os
import resource
import select
import signal
from typing import Any

from kernelgate.model.constants import RUN_GID, RUN_UID

from . import mounts
from .syscalls import (
    CLONE_NEWIPC,
    CLONE_NEWNET,
    CLONE_NEWNS,
    CLONE_NEWPID,
    CLONE_NEWUSER,
    MOUNT_ATTR_NOSUID,
    MOUNT_ATTR_RDONLY,
    MS_NODEV,
    MS_NOEXEC,
    MS_NOSUID,
    MS_PRIVATE,
    MS_RDONLY,
    MS_REC,
    PR_SET_DUMPABLE,
    PR_SET_PDEATHSIG,
    clone_with_flags,
    landlock_abi,
    mount,
    mount_setattr,
    prctl,
    unshare,
)

__all__ = [
    "NAMESPACES",
    "Born",
    "fork_into_namespaces",
    "clones_into_namespaces",
    "probe",
    "enter_namespaces",
    "read_all",
    "read_status",
    "serve_as_init",
]

#: CLONE_NEWIPC: SysV shared memory, semaphores, message queues and POSIX message queues
#: are per IPC namespace; in a fresh one a run sees none of the host's or other runs', and
#: the kernel frees what it made when the namespace goes (issue 9, finding 3).
NAMESPACES = CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWPID | CLONE_NEWIPC


class Born:
    """How a child forked into its namespaces came to be: who it is outside (the uid and
    gid to map to) and the fd its init reports the program's wait status on.

    ``mapped``: its parent wrote its id maps and arranged its view already (a root host).
    """

    def __init__(self, uid: int, gid: int, status_fd: int, mapped: bool = False) -> None:
        self.uid, self.gid, self.status_fd, self.mapped = uid, gid, status_fd, mapped


#: What a root zygote's child is born in: every namespace but the user namespace, which
#: the child makes itself once it has arranged its view as real root
#: (:func:`_become_the_runs_root`).
ROOT_BORN = NAMESPACES & ~CLONE_NEWUSER


def fork_into_namespaces(init_only: bool = False) -> int:
    """``os.fork()``, with the child born in new mount, network, pid and IPC namespaces
    (as pid 1 of its own): one process where ``unshare`` needs two, since unshare moves
    only the caller's later children into a new pid namespace. A non-root caller's child
    is born in a new user namespace too; a root caller's makes its own
    (:func:`enter_namespaces`), so that no process of the run stays outside to map it.

    The interpreter's fork bookkeeping runs as in ``os.fork``; for a single-threaded caller
    only (the zygote). ``init_only``: the child only serves as the init (it forks the
    program in :func:`enter_namespaces`): see :func:`.syscalls.clone_with_flags`.
    """
    return clone_with_flags(ROOT_BORN if os.geteuid() == 0 else NAMESPACES, init_only)


_clones: bool | None = None


def clones_into_namespaces() -> bool:
    """Whether a child of :func:`fork_into_namespaces` can enter its sandbox on this host.

    A non-root caller: yes (a clone that fails raises, and the caller forks instead). Root:
    only if a process whose effective uid is a run's may make a user namespace (it must own
    the run's, and map its own ids in it); a sysctl such as Debian's
    ``kernel.unprivileged_userns_clone=0`` refuses that. Tried once, in a throwaway process;
    where refused, the child is forked and maps its init from outside
    (:func:`_unprivileged_init`).
    """
    global _clones
    if _clones is None:
        _clones = os.geteuid() != 0 or _run_uid_may_own_a_user_namespace()
    return _clones


def _run_uid_may_own_a_user_namespace() -> bool:
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the forked probe
        code = 1
        try:
            os.setgroups([])
            os.setresgid(-1, RUN_GID, -1)
            os.setresuid(-1, RUN_UID, -1)
            unshare(CLONE_NEWUSER | CLONE_NEWNS)
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) == 0


def probe() -> dict[str, Any]:
    """What this machine allows, found by trying it in a throwaway process."""
    found: dict[str, Any] = {"namespaces": False, "landlock_abi": landlock_abi(), "why": ""}
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the forked probe
        os.close(r)
        code = 0
        uid, gid = os.geteuid(), os.getegid()  # before unshare: inside, they read as unmapped
        try:
            unshare(NAMESPACES)
            _map_ids(uid, gid)
            # The view needs the new mount API (Linux 5.12+: mount_setattr).
            mount("none", "/", None, MS_REC | MS_PRIVATE)
            mount_setattr("/", MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID)
        except OSError as exc:
            os.write(w, str(exc).encode()[:500])
            code = 1
        os._exit(code)
    os.close(w)
    why = read_all(r)
    os.close(r)
    _, status = os.waitpid(pid, 0)
    found["namespaces"] = os.waitstatus_to_exitcode(status) == 0
    found["why"] = why.decode(errors="replace")
    return found


# -- id maps -------------------------------------------------------------------------------


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _map_ids(uid: int, gid: int, proc: str = "/proc") -> None:
    # Root inside maps to whoever we are outside: the namespace grants nothing new on the
    # host, and capabilities are dropped before the program runs. A process that is not
    # dumpable (the zygote's children) cannot open its own maps (/proc/self is owned by
    # root then): dumpable only while it writes them, before any program exists.
    # ``proc``: where a writable /proc is (a root-born child's view made /proc read-only).
    prctl(PR_SET_DUMPABLE, 1)
    try:
        try:
            _write(f"{proc}/self/setgroups", "deny")
        except FileNotFoundError:
            pass
        _write(f"{proc}/self/uid_map", f"0 {uid} 1")
        _write(f"{proc}/self/gid_map", f"0 {gid} 1")
    finally:
        prctl(PR_SET_DUMPABLE, 0)


# -- entering --------------------------------------------------------------------------------


def _unprivileged_init(
    run_dir: str, kept: list[str], read_paths: list[str], ids: tuple[int, int]
) -> Born:
    """On a root host: arrange the view as real root in a mount namespace of our own, then
    clone the namespace's init into new user, mount, network, pid and IPC namespaces, map
    its uid 0 to the run's own uid and gid ``ids`` from out here (no other run's: one run's
    processes must not be another's to signal or read, exec'd ones included), and mirror
    it. Returns in the init only.

    The clone copies our mount namespace into one owned by the new user namespace: every
    mount in it is locked there (the program cannot unmount what hides the host, nor make
    the tree writable). Our supplementary groups go first: the init would inherit them.
    """
    unshare(CLONE_NEWNS, "unshare mount namespace")
    proc = mounts.writable_proc()
    mounts.private_view(run_dir, kept, read_paths, root_host=True, ids=ids)
    os.setgroups([])
    status_r, status_w = os.pipe()
    go_r, go_w = os.pipe()
    init = _fork_owned_by(ids)
    if init == 0:
        os.close(proc)
        os.close(status_r)
        os.close(go_w)
        ok = os.read(go_r, 1) == b"x"
        os.close(go_r)
        if not ok:
            os._exit(72)  # not mapped (the parent failed, or is gone): never run
        # Our credentials are still the host's root until we set them inside: uid 0 here
        # is the run's uid outside now.
        os.setresgid(0, 0, 0)
        os.setresuid(0, 0, 0)
        return Born(ids[0], ids[1], status_w, mapped=True)
    os.close(status_w)
    os.close(go_r)
    try:
        mounts.write_maps(init, ids[0], ids[1], proc)
        os.write(go_w, b"x")
    except OSError:
        os.kill(init, signal.SIGKILL)
    finally:
        os.close(go_w)
        os.close(proc)
    _mirror(init, status_r)  # never returns
    raise AssertionError("unreachable")


def _fork_owned_by(ids: tuple[int, int]) -> int:
    """:func:`fork_into_namespaces` with the new user namespace owned by the run's uid and
    gid ``ids``, not root: the kernel charges a namespace's per-user counts (inotify
    instances and watches, user namespaces, ...) to its owner outside, so a run's would
    otherwise use up root's on the whole host (128 inotify instances: every root daemon's
    ``inotify_init`` then fails). Only the effective ids change, for the clone; a machine
    that refuses an unprivileged owner gets the namespace owned by root, as before."""
    uid, gid = ids
    euid, egid = os.geteuid(), os.getegid()
    parent = os.getppid()
    os.setresgid(-1, gid, -1)
    os.setresuid(-1, uid, -1)
    try:
        pid = fork_into_namespaces()
    except OSError:
        pid = -1
    if pid == 0:
        return 0  # the init: its ids are set inside once mapped
    os.setresuid(-1, euid, -1)  # back to root, effective capabilities with it
    os.setresgid(-1, egid, -1)
    # Changing the effective ids cleared our parent-death signal: without it, the run
    # would outlive a host killed with SIGKILL.
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:
        os._exit(1)  # it died meanwhile; the init, not let go, exits too
    return pid if pid > 0 else fork_into_namespaces()


def enter_namespaces(
    run_dir: str,
    kept: list[str],
    read_paths: list[str],
    born_in: Born | None = None,
    ids: tuple[int, int] | None = None,
) -> None:
    """Called in the process the host started; returns in the program's process (pid 2).

    ``kept``: the paths the interpreter reads (they come back read-only where the view
    hides them). ``born_in``: this process was forked into its namespaces already (by the
    zygote, :func:`fork_into_namespaces`, or by :func:`_unprivileged_init`) and is their
    pid 1: no unshare, and no mirror process here. ``ids``: on a root host, the run's
    uid and gid outside (None: the shared :data:`RUN_UID`).
    """
    mirror = born_in is None
    proc_mounted = False
    if born_in is None and os.geteuid() == 0:
        born_in = _unprivileged_init(run_dir, kept, read_paths, ids or (RUN_UID, RUN_GID))
        mirror = False
    elif born_in is not None and not born_in.mapped and os.geteuid() == 0:
        _become_the_runs_root(run_dir, kept, read_paths, ids or (RUN_UID, RUN_GID))
        proc_mounted = True
    elif born_in is None or not born_in.mapped:
        if born_in is None:
            uid, gid = os.geteuid(), os.getegid()
            unshare(NAMESPACES)
        else:
            uid, gid = born_in.uid, born_in.gid
        _map_ids(uid, gid)
        mounts.private_view(run_dir, kept, read_paths, root_host=False)
    os.chdir(run_dir)
    if mirror:
        status_r, status_w = os.pipe()
        init = os.fork()
        if init:
            os.close(status_w)
            _mirror(init, status_r)  # never returns
        os.close(status_r)
    else:
        assert born_in is not None
        status_w = born_in.status_fd  # the zygote (or the mirror) reads the program's end here
    # pid 1 of the new namespace: reap everything, end with the program.
    # If the host's child dies (the host's SIGKILL), the namespace goes with it. (Our ppid
    # reads 0 here: the parent is outside this pid namespace.)
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if born_in is not None and not _parent_holds(status_w):
        os._exit(1)  # the zygote died before our parent-death signal was set again
    if not proc_mounted:
        _mount_proc()
    program = os.fork()
    if program:
        serve_as_init(program, status_w)  # never returns
    os.close(status_w)


def _mount_proc() -> None:
    """This pid namespace's /proc, read-only: /proc/sys above all (a root host's
    core_pattern runs code as root)."""
    try:
        mount("proc", "/proc", "proc", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC)
    except OSError:
        pass  # /proc keeps the outer view (read-only too); not a reason to refuse the run


def _become_the_runs_root(
    run_dir: str, kept: list[str], read_paths: list[str], ids: tuple[int, int]
) -> None:
    """A root zygote's child, born in new mount, network, pid and IPC namespaces (their
    pid 1) but still real root in the host's user namespace: arrange the view and this pid
    namespace's /proc as real root, then make the run's user namespace ourselves, owned by
    the run's uid and gid ``ids`` (so its per-user counts are the run's, not root's), and
    map 0 inside to them, which a process may do for its own effective ids alone.

    The new mount namespace that comes with the user namespace copies the view and locks
    every mount in it (the program cannot unmount what hides the host, nor make the tree
    writable), as the clone of :func:`_unprivileged_init` does; and no process of the run
    stays outside to write the maps and mirror the init's exit (a fork and an exit per
    run): the zygote is our parent, outside, and reads the program's status from us.
    Our supplementary groups go first: the program would inherit them.
    """
    uid, gid = ids
    proc = mounts.writable_proc()  # the view makes /proc read-only; the maps are in it
    try:
        mounts.private_view(run_dir, kept, read_paths, root_host=True, ids=ids)
        _mount_proc()  # as real root: a pid namespace owned by the host's user namespace
        os.setgroups([])
        os.setresgid(-1, gid, -1)
        os.setresuid(-1, uid, -1)  # the new user namespace's owner: the run's uid
        unshare(CLONE_NEWUSER | CLONE_NEWNS, "unshare user namespace")
        _map_ids(uid, gid, f"/proc/self/fd/{proc}")
    finally:
        os.close(proc)
    # Every id of ours the run's now; uid 0 here is the run's uid outside.
    os.setresgid(0, 0, 0)
    os.setresuid(0, 0, 0)


def _parent_holds(status_w: int) -> bool:
    """Whether the process that reads our status (the zygote, or the mirror) still holds
    the pipe: a credential change cleared our parent-death signal, and it may have died
    before we set it again (our ppid reads 0 from inside the pid namespace)."""
    poller = select.poll()
    poller.register(status_w, select.POLLOUT)
    return not any(events & select.POLLERR for _, events in poller.poll(0))


# -- the mirror and the init -----------------------------------------------------------------


def _ended(status: int) -> bool:
    """A wait status that ends a process (not a stop, a ptrace stop or a continue)."""
    return os.WIFEXITED(status) or os.WIFSIGNALED(status)


def _mirror(init: int, status_r: int) -> None:
    """The host's child: wait for the namespace's init and exit the way the program did."""
    for fd in (0, 1, 2, 3):
        try:
            os.close(fd)
        except OSError:
            pass
    # Stopping is the host's job (SIGKILL after SIGTERM); we must outlive the program's
    # SIGTERM handling to report how it ended.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    while True:
        try:
            _, status = os.waitpid(init, 0)
        except ChildProcessError:
            break
        except InterruptedError:
            continue
        if _ended(status):
            break
    reported = read_status(status_r)
    _exit_like(1 << 8 if reported is None else reported)


def read_all(fd: int) -> bytes:
    """What ``fd`` holds until EOF (or, non-blocking, until it is empty for now)."""
    data = b""
    while True:
        try:
            chunk = os.read(fd, 4096)
        except BlockingIOError:
            return data
        if not chunk:
            return data
        data += chunk


def read_status(fd: int) -> int | None:
    """The program's wait status as its init wrote it to ``fd``; None if it did not (it
    was killed first, or wrote something that is not an ending)."""
    text = read_all(fd).strip()
    if not text.lstrip(b"-").isdigit():
        return None
    status = int(text)
    return status if status >= 0 and _ended(status) else None


def _exit_like(status: int) -> None:
    code = os.waitstatus_to_exitcode(status) if status >= 0 and _ended(status) else 1
    if code < 0:
        sig = -code
        if sig not in (signal.SIGKILL, signal.SIGSTOP):  # those cannot be caught or reset
            signal.signal(sig, signal.SIG_DFL)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        os.kill(os.getpid(), sig)
        os._exit(128 + sig)
    os._exit(code)


def serve_as_init(program: int, status_w: int) -> None:
    """Pid 1 of the run's namespace: reap everything until ``program`` ends, write its wait
    status to ``status_w``, exit (the kernel then kills what is left). Never returns."""
    for fd in (0, 1, 2, 3):
        try:
            os.close(fd)
        except OSError:
            pass
    program_status = 1 << 8
    while True:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            break
        except InterruptedError:
            continue
        # A program that made us its tracer (PTRACE_TRACEME) reports its stops to us:
        # only an ending is its status; a stopped program stays stopped until the host
        # kills the run (wall_seconds).
        if pid == program and _ended(status):
            program_status = status
            break
    os.write(status_w, str(program_status).encode())
    os._exit(0)  # as pid 1 exits, the kernel kills everything left in the namespace
