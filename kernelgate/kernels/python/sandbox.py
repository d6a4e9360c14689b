"""The child's sandbox: resource limits, namespaces, landlock, seccomp. Stdlib only (ctypes).

Applied in the child after it has its program and before the program runs (a warm child:
before its program arrives):

``process``
    rlimits, no core files, not dumpable, the seccomp filter (:mod:`.seccomp`), no
    capabilities (the host already gave it a process group, an empty environment, a
    temporary cwd and only fds 0-3). On a root host the child drops to :data:`RUN_UID`,
    keeping only CAP_DAC_READ_SEARCH (see :func:`_become_run_user`).
``namespaces``
    plus new user, network, pid, mount and IPC namespaces: no network interfaces but a down
    loopback, no SysV/POSIX IPC object of anyone else, the view of :mod:`.mounts` (the host
    tree read-only and nosuid; private ``/tmp``, ``/dev/shm`` and run directory parent; the
    run directory the one writable host path), a read-only ``/proc`` of the new pid
    namespace. A small init (pid 1) reaps everything and takes the whole tree down when the
    program ends; the program itself is pid 2, so signals behave as they do outside.
    Who makes the namespaces:

    - a non-root host: a cold child unshares and maps uid 0 inside to its own uid, staying
      outside the pid namespace to mirror the program's exit; a warm child is cloned into
      its namespaces by the zygote and is their init;
    - a root host (:func:`_unprivileged_init`): uid 0 inside must not be root outside, so
      the child (cold, or forked by the zygote) arranges the view as real root in a mount
      namespace of its own, clones the init into the other namespaces, maps its uid 0 to
      :data:`RUN_UID` from outside (which needs CAP_SETUID in the parent namespace) and
      mirrors it.
``namespaces+landlock``
    plus a landlock ruleset: writes only in the run directory, the private ``/tmp`` and
    ``/dev/shm``, reads only where the interpreter and the configured paths are, no TCP
    bind/connect.
"""

from __future__ import annotations

import ctypes
import os
import resource
import signal
import sys
from typing import Any

from . import mounts, seccomp
from .mounts import MS_NODEV, MS_NOEXEC, MS_NOSUID, MS_RDONLY, RUN_GID, RUN_UID

__all__ = [
    "LEVELS",
    "probe",
    "apply_rlimits",
    "die_with_parent",
    "prepare",
    "lock_down",
    "restrict",
    "enter",
    "not_dumpable",
    "RUN_UID",
    "RUN_GID",
]

LEVELS = ("process", "namespaces", "namespaces+landlock")

CLONE_NEWNS = 0x00020000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_SET_KEEPCAPS = 8
PR_CAPBSET_DROP = 24
PR_SET_NO_NEW_PRIVS = 38
SYS_landlock_create_ruleset = 444
SYS_landlock_add_rule = 445
SYS_landlock_restrict_self = 446
LANDLOCK_CREATE_RULESET_VERSION = 1
LANDLOCK_RULE_PATH_BENEATH = 1

#: CLONE_NEWIPC: SysV shared memory, semaphores, message queues and POSIX message queues
#: are per IPC namespace; in a fresh one a run sees none of the host's or other runs', and
#: the kernel frees what it made when the namespace goes (issue 9, finding 3).
NAMESPACES = CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWPID | CLONE_NEWIPC
CAP_DAC_READ_SEARCH = 2

# One loaded libc and one errno check for the whole sandbox (mounts owns them).
_lib, _check = mounts.libc, mounts.check


def fork_into_namespaces() -> int:
    """``os.fork()``, with the child born in new user, mount, network and pid namespaces
    (as pid 1 of its own): one process where ``unshare`` needs two, since unshare moves
    only the caller's later children into a new pid namespace.

    The interpreter's fork bookkeeping runs as in ``os.fork`` (``PyOS_BeforeFork`` and
    ``PyOS_AfterFork_*``: locks, at-fork hooks such as ``random``'s reseeding), and the GIL
    is held across the call. For a single-threaded caller only (the zygote).
    """
    number = seccomp.SYSCALLS.get(os.uname().machine, {}).get("clone")
    if number is None:
        raise OSError(38, "clone: no syscall number for this machine")  # ENOSYS
    api = ctypes.pythonapi
    libc = ctypes.PyDLL(None, use_errno=True)
    api.PyOS_BeforeFork()
    pid = libc.syscall(
        ctypes.c_long(number), ctypes.c_ulong(NAMESPACES | signal.SIGCHLD), None, None, None, None
    )
    if pid == 0:
        api.PyOS_AfterFork_Child()
        return 0
    err = ctypes.get_errno()
    api.PyOS_AfterFork_Parent()
    if pid < 0:
        raise OSError(err, f"clone into new namespaces: {os.strerror(err)}")
    return int(pid)


def landlock_abi() -> int:
    """The kernel's landlock ABI version, 0 when landlock is unavailable."""
    try:
        r = _lib().syscall(
            SYS_landlock_create_ruleset,
            None,
            ctypes.c_size_t(0),
            ctypes.c_uint32(LANDLOCK_CREATE_RULESET_VERSION),
        )
    except (OSError, AttributeError):
        return 0
    return max(int(r), 0)


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
            _check(_lib().unshare(NAMESPACES), "unshare")
            _map_ids(uid, gid)
            # The view needs the new mount API (Linux 5.12+: mount_setattr).
            mounts.mount("none", "/", None, mounts.MS_REC | mounts.MS_PRIVATE)
            mounts.set_attr("/", mounts.MOUNT_ATTR_RDONLY | mounts.MOUNT_ATTR_NOSUID)
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


# -- rlimits ------------------------------------------------------------------------------


def apply_rlimits(limits: dict[str, list[int]]) -> None:
    """Set each ``RLIMIT_*`` to ``[soft, hard]``, never above what is already in force."""
    for name, (soft, hard) in limits.items():
        which = getattr(resource, name)
        cur_soft, cur_hard = resource.getrlimit(which)
        if cur_hard != resource.RLIM_INFINITY:
            hard = min(hard, cur_hard)
        if cur_soft != resource.RLIM_INFINITY and cur_soft < soft:
            soft = cur_soft  # a tighter inherited limit stays in force
        soft = min(soft, hard)
        resource.setrlimit(which, (soft, hard))


# -- namespaces ---------------------------------------------------------------------------


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _map_ids(uid: int, gid: int) -> None:
    # Root inside maps to whoever we are outside: the namespace grants nothing new on the
    # host, and capabilities are dropped before the program runs. A process that is not
    # dumpable (the zygote's children) cannot open its own maps (/proc/self is owned by
    # root then): dumpable only while it writes them, before any program exists.
    libc = _lib()
    libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)
    try:
        try:
            _write("/proc/self/setgroups", "deny")
        except FileNotFoundError:
            pass
        _write("/proc/self/uid_map", f"0 {uid} 1")
        _write("/proc/self/gid_map", f"0 {gid} 1")
    finally:
        libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)


def not_dumpable() -> None:
    """Make this process (and what it forks) non-dumpable: its /proc/<pid>/fd, mem and
    environ need CAP_SYS_PTRACE then, so a program of the same uid at ``process`` level
    cannot reach an idle pool child or another run's child through them (issue 9,
    finding 8). Execve resets it: what a program execs is its own business."""
    _lib().prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)


def _kept_paths() -> list[str]:
    """What the interpreter reads: comes back read-only where the view hides it."""
    return [os.path.dirname(sys.executable), *interpreter_paths()]


def _unprivileged_init(run_dir: str, read_paths: list[str]) -> Born:
    """On a root host: arrange the view as real root in a mount namespace of our own, then
    clone the namespace's init into new user, mount, network, pid and IPC namespaces, map
    its uid 0 to :data:`RUN_UID` from out here, and mirror it. Returns in the init only.

    The clone copies our mount namespace into one owned by the new user namespace: every
    mount in it is locked there (the program cannot unmount what hides the host, nor make
    the tree writable). Our supplementary groups go first: the init would inherit them.
    """
    _check(_lib().unshare(CLONE_NEWNS), "unshare mount namespace")
    proc = mounts.writable_proc()
    mounts.private_view(run_dir, _kept_paths(), read_paths, root_host=True)
    os.setgroups([])
    status_r, status_w = os.pipe()
    go_r, go_w = os.pipe()
    init = fork_into_namespaces()
    if init == 0:
        os.close(proc)
        os.close(status_r)
        os.close(go_w)
        ok = os.read(go_r, 1) == b"x"
        os.close(go_r)
        if not ok:
            os._exit(72)  # not mapped (the parent failed, or is gone): never run
        # Our credentials are still the host's root until we set them inside: uid 0 here
        # is RUN_UID outside now.
        os.setresgid(0, 0, 0)
        os.setresuid(0, 0, 0)
        return Born(RUN_UID, RUN_GID, status_w, mapped=True)
    os.close(status_w)
    os.close(go_r)
    try:
        mounts.write_maps(init, RUN_UID, RUN_GID, proc)
        os.write(go_w, b"x")
    except OSError:
        os.kill(init, signal.SIGKILL)
    finally:
        os.close(go_w)
        os.close(proc)
    _mirror(init, status_r)  # never returns
    raise AssertionError("unreachable")


def _enter_namespaces(run_dir: str, read_paths: list[str], born_in: Born | None = None) -> None:
    """Called in the process the host started; returns in the program's process (pid 2).

    ``born_in``: this process was forked into its namespaces already (by the zygote,
    :func:`fork_into_namespaces`, or by :func:`_unprivileged_init`) and is their pid 1: no
    unshare, and no mirror process here.
    """
    mirror = born_in is None
    if born_in is None and os.geteuid() == 0:
        born_in = _unprivileged_init(run_dir, read_paths)
        mirror = False
    if born_in is None or not born_in.mapped:
        if born_in is None:
            uid, gid = os.geteuid(), os.getegid()
            _check(_lib().unshare(NAMESPACES), "unshare")
        else:
            uid, gid = born_in.uid, born_in.gid
        _map_ids(uid, gid)
        mounts.private_view(run_dir, _kept_paths(), read_paths, root_host=False)
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
    _lib().prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    try:
        # Read-only: /proc/sys above all (a root host's core_pattern runs code as root).
        mounts.mount("proc", "/proc", "proc", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC)
    except OSError:
        pass  # /proc keeps the outer view (read-only too); not a reason to refuse the run
    program = os.fork()
    if program:
        _init(program, status_w)  # never returns
    os.close(status_w)


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


def _init(program: int, status_w: int) -> None:
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


# -- capabilities and landlock -------------------------------------------------------------


def _drop_capabilities() -> None:
    libc = _lib()
    for cap in range(64):
        if libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0:
            break  # past the last capability this kernel knows
    _capset(0)


def _capset(keep: int) -> None:
    """Effective and permitted capabilities: exactly ``keep`` (bits 0-31); none inheritable."""
    nr = seccomp.SYSCALLS.get(os.uname().machine, {}).get("capset")
    if nr is None:
        return
    libc = _lib()

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [
            ("effective", ctypes.c_uint32),
            ("permitted", ctypes.c_uint32),
            ("inheritable", ctypes.c_uint32),
        ]

    header = Header(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3
    data = (Data * 2)()
    data[0].effective = data[0].permitted = keep
    _check(libc.syscall(nr, ctypes.byref(header), ctypes.byref(data)), "capset")


_FS_EXECUTE, _FS_WRITE_FILE, _FS_READ_FILE, _FS_READ_DIR = 1, 2, 4, 8
_FS_TRUNCATE, _FS_IOCTL_DEV = 1 << 14, 1 << 15
_READ = _FS_EXECUTE | _FS_READ_FILE | _FS_READ_DIR
_FILE_RIGHTS = _FS_EXECUTE | _FS_WRITE_FILE | _FS_READ_FILE | _FS_TRUNCATE | _FS_IOCTL_DEV


def _handled_fs(abi: int) -> int:
    handled = (1 << 13) - 1
    if abi >= 2:
        handled |= 1 << 13  # REFER
    if abi >= 3:
        handled |= _FS_TRUNCATE
    if abi >= 5:
        handled |= _FS_IOCTL_DEV
    return handled


def _landlock(read_paths: list[str], write_paths: list[str]) -> None:
    abi = landlock_abi()
    if abi < 1:
        raise OSError("landlock is not available in this kernel")
    libc = _lib()
    handled = _handled_fs(abi)

    class Attr(ctypes.Structure):
        _fields_ = [("fs", ctypes.c_uint64), ("net", ctypes.c_uint64)]

    class Beneath(ctypes.Structure):
        _pack_ = 1
        _fields_ = [("allowed", ctypes.c_uint64), ("fd", ctypes.c_int32)]

    attr = Attr(handled, 3 if abi >= 4 else 0)  # TCP bind and connect: none allowed
    size = ctypes.sizeof(Attr) if abi >= 4 else 8
    ruleset = _check(
        libc.syscall(
            SYS_landlock_create_ruleset,
            ctypes.byref(attr),
            ctypes.c_size_t(size),
            ctypes.c_uint32(0),
        ),
        "landlock_create_ruleset",
    )
    try:
        for paths, rights in ((read_paths, _READ), (write_paths, handled)):
            for path in paths:
                try:
                    fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
                except OSError:
                    continue  # a configured path that does not exist grants nothing
                try:
                    allowed = rights & handled
                    if not os.path.isdir(path):
                        allowed &= _FILE_RIGHTS
                    rule = Beneath(allowed, fd)
                    _check(
                        libc.syscall(
                            SYS_landlock_add_rule,
                            ctypes.c_int(ruleset),
                            ctypes.c_int(LANDLOCK_RULE_PATH_BENEATH),
                            ctypes.byref(rule),
                            ctypes.c_uint32(0),
                        ),
                        f"landlock_add_rule {path}",
                    )
                finally:
                    os.close(fd)
        _check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
        _check(
            libc.syscall(SYS_landlock_restrict_self, ctypes.c_int(ruleset), ctypes.c_uint32(0)),
            "landlock_restrict_self",
        )
    finally:
        os.close(ruleset)


_interpreter_paths: list[str] | None = None


def interpreter_paths() -> list[str]:
    """Where this interpreter reads from: its prefixes, its sys.path, system libraries.

    Found once per process (a zygote's children inherit it): it walks sys.modules and
    resolves paths.
    """
    global _interpreter_paths
    if _interpreter_paths is None:
        _interpreter_paths = _find_interpreter_paths()
    return list(_interpreter_paths)


def _find_interpreter_paths() -> list[str]:
    paths = {
        sys.prefix,
        sys.base_prefix,
        sys.exec_prefix,
        sys.base_exec_prefix,
        os.path.dirname(os.path.realpath(sys.executable)),
    }
    paths.update(p for p in sys.path if p)
    paths.update(
        os.path.dirname(os.path.dirname(os.path.abspath(m.__file__)))
        for m in [sys.modules.get("kernelgate")]
        if m is not None and m.__file__
    )
    paths.update(
        [
            "/usr/lib",
            "/usr/lib64",
            "/lib",
            "/lib64",
            "/usr/local/lib",
            "/usr/share/zoneinfo",
            "/etc/ld.so.cache",
            "/etc/localtime",
            "/dev/null",
            "/dev/zero",
            "/dev/urandom",
            "/dev/random",
            "/proc",
            "/usr/bin",
            "/bin",
            "/usr/local/bin",
        ]
    )
    return sorted(paths)


def warm_sandbox() -> None:
    """Build what every lock-down needs (paths, the seccomp filter) ahead of the children."""
    interpreter_paths()
    seccomp.warm()  # a machine without a filter table is left for lock_down to report


def die_with_parent() -> None:
    """Be killed when the process that started us dies (the host, or the zygote).

    Without this a busy program would outlive a host killed with SIGKILL.
    """
    parent = os.getppid()
    _lib().prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # it died before the request took effect
        os._exit(1)


class Born:
    """How a child forked into its namespaces came to be: who it is outside (the uid and
    gid to map to) and the fd its init reports the program's wait status on.

    ``mapped``: its parent wrote its id maps and arranged its view already (a root host).
    """

    def __init__(self, uid: int, gid: int, status_fd: int, mapped: bool = False) -> None:
        self.uid, self.gid, self.status_fd, self.mapped = uid, gid, status_fd, mapped


def prepare(
    level: str, run_dir: str, read_paths: list[str] | None = None, born_in: Born | None = None
) -> None:
    """What does not depend on the program: namespaces (when the level has them) and cwd.

    With namespaces this returns in a new process, the program's (pid 2). A warm child
    does this before its program arrives.
    """
    if level not in LEVELS:
        raise ValueError(f"unknown sandbox level {level!r}")
    if level in ("namespaces", "namespaces+landlock"):
        _enter_namespaces(run_dir, list(read_paths or []), born_in)
        os.environ["TMPDIR"] = "/tmp"  # private to this run
    else:
        os.chdir(run_dir)
        os.environ["TMPDIR"] = run_dir  # the host's /tmp is shared: keep temp files here


def lock_down(
    level: str, run_dir: str, read_paths: list[str], write_paths: list[str] | None = None
) -> None:
    """What depends on the level only: the run's uid (``process`` on a root host), landlock,
    seccomp, dropping capabilities.

    A warm child does this before its program arrives, too. The seccomp filter comes after
    everything that needs a syscall it denies (landlock's own, capset, setresuid).
    """
    not_dumpable()
    if level == "process" and os.geteuid() == 0:
        _become_run_user()
    if level == "namespaces+landlock":
        _landlock(
            [*interpreter_paths(), *read_paths],
            [run_dir, "/tmp", "/dev/shm", "/dev/null", *(write_paths or [])],
        )
    if level != "process":
        _drop_capabilities()
    seccomp.apply(level)


def _become_run_user() -> None:
    """``process`` level on a root host: drop to :data:`RUN_UID`/:data:`RUN_GID` (no
    supplementary groups), keeping only CAP_DAC_READ_SEARCH (effective and permitted; the
    bounding set otherwise empty).

    The trade-off, on purpose: the interpreter often lives where only root may look (a
    pyenv under /root, mode 0700), and this level has no mount namespace to show it
    elsewhere, so the program keeps root's right to read and search any file, as it had
    before; it loses everything else root had: writing root's files, /proc/sys, cgroupfs,
    signalling root's processes, setuid-root files. The one known escape through this
    capability, open_by_handle_at, is denied by the seccomp filter.
    """
    libc = _lib()
    for cap in range(64):
        if cap != CAP_DAC_READ_SEARCH and libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0:
            break  # past the last capability this kernel knows
    _check(libc.prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0), "keepcaps")
    os.setgroups([])
    os.setresgid(RUN_GID, RUN_GID, RUN_GID)
    os.setresuid(RUN_UID, RUN_UID, RUN_UID)
    _check(libc.prctl(PR_SET_KEEPCAPS, 0, 0, 0, 0), "keepcaps")
    _capset(1 << CAP_DAC_READ_SEARCH)


def restrict(options: dict[str, Any], locked: bool = False) -> None:
    """What depends on the run's limits (rlimits), and :func:`lock_down` unless done."""
    sandbox = options.get("sandbox") or {}
    rlimits = dict(sandbox.get("rlimits") or {})
    rlimits.setdefault("RLIMIT_CORE", [0, 0])
    apply_rlimits(rlimits)
    if not locked:
        lock_down(
            sandbox.get("level", "process"),
            options.get("cwd") or os.getcwd(),
            list(sandbox.get("read_paths") or []),
            list(sandbox.get("write_paths") or []),
        )


def enter(options: dict[str, Any], prepared: bool = False) -> None:
    """Apply the sandbox ``options["sandbox"]`` asks for; returns in the program's process."""
    if not prepared:
        sandbox = options.get("sandbox") or {}
        prepare(
            sandbox.get("level", "process"),
            options.get("cwd") or os.getcwd(),
            list(sandbox.get("read_paths") or []),
        )
    restrict(options, locked=prepared)
