"""The child's sandbox: resource limits, namespaces, landlock. Stdlib only (ctypes).

Applied in the child after it has its program and before the program runs:

``process``
    rlimits, no core files, capabilities dropped (the host already gave it a process group,
    an empty environment and a temporary cwd).
``namespaces``
    plus new user, network, pid and mount namespaces: no network interfaces but a down
    loopback, a private ``/tmp``, ``/proc`` of the new pid namespace. A small init (pid 1)
    reaps everything and takes the whole tree down when the program ends; the program
    itself is pid 2, so signals behave as they do outside. A cold child unshares, and
    stays outside the pid namespace mirroring the program's exit; a warm child is forked
    into its namespaces by the zygote and is their init.
``namespaces+landlock``
    plus a landlock ruleset: writes only in the run directory and the private ``/tmp``,
    reads only where the interpreter and the configured paths are, no TCP bind/connect.
"""

from __future__ import annotations

import ctypes
import os
import resource
import signal
import sys
from typing import Any

__all__ = [
    "LEVELS",
    "probe",
    "apply_rlimits",
    "die_with_parent",
    "prepare",
    "lock_down",
    "restrict",
    "enter",
]

LEVELS = ("process", "namespaces", "namespaces+landlock")

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
MS_NOSUID, MS_NODEV, MS_NOEXEC = 2, 4, 8
MS_BIND, MS_REC, MS_PRIVATE = 4096, 16384, 1 << 18
PR_SET_PDEATHSIG = 1
PR_CAPBSET_DROP = 24
PR_SET_NO_NEW_PRIVS = 38
SYS_capset = {"x86_64": 126, "aarch64": 91}
SYS_landlock_create_ruleset = 444
SYS_landlock_add_rule = 445
SYS_landlock_restrict_self = 446
LANDLOCK_CREATE_RULESET_VERSION = 1
LANDLOCK_RULE_PATH_BENEATH = 1

NAMESPACES = CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWPID
SYS_clone = {"x86_64": 56, "aarch64": 220}

_libc: Any = None


def _lib() -> Any:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    return _libc


def _check(result: int, what: str) -> int:
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return result


def fork_into_namespaces() -> int:
    """``os.fork()``, with the child born in new user, mount, network and pid namespaces
    (as pid 1 of its own): one process where ``unshare`` needs two, since unshare moves
    only the caller's later children into a new pid namespace.

    The interpreter's fork bookkeeping runs as in ``os.fork`` (``PyOS_BeforeFork`` and
    ``PyOS_AfterFork_*``: locks, at-fork hooks such as ``random``'s reseeding), and the GIL
    is held across the call. For a single-threaded caller only (the zygote).
    """
    number = SYS_clone.get(os.uname().machine)
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
    # host, and capabilities are dropped before the program runs.
    try:
        _write("/proc/self/setgroups", "deny")
    except FileNotFoundError:
        pass
    _write("/proc/self/uid_map", f"0 {uid} 1")
    _write("/proc/self/gid_map", f"0 {gid} 1")


def _mount(
    source: str, target: str, fstype: str | None, flags: int, data: str | None = None
) -> None:
    _check(
        _lib().mount(
            source.encode(),
            target.encode(),
            fstype.encode() if fstype else None,
            ctypes.c_ulong(flags),
            data.encode() if data else None,
        ),
        f"mount {target}",
    )


SYS_open_tree, SYS_move_mount = 428, 429
_AT_FDCWD = -100


SYS_mount_setattr = 442


def _open_tree(path: str, read_only: bool = False) -> int:
    open_tree_clone, at_recursive, at_empty_path = 1, 0x8000, 0x1000
    tree = _check(
        _lib().syscall(SYS_open_tree, _AT_FDCWD, path.encode(), open_tree_clone | at_recursive),
        f"open_tree {path}",
    )
    if read_only:

        class MountAttr(ctypes.Structure):
            _fields_ = [
                ("attr_set", ctypes.c_uint64),
                ("attr_clr", ctypes.c_uint64),
                ("propagation", ctypes.c_uint64),
                ("userns_fd", ctypes.c_uint64),
            ]

        attr = MountAttr(1, 0, 0, 0)  # MOUNT_ATTR_RDONLY
        _check(
            _lib().syscall(
                SYS_mount_setattr,
                tree,
                b"",
                at_empty_path | at_recursive,
                ctypes.byref(attr),
                ctypes.sizeof(attr),
            ),
            f"mount_setattr read-only {path}",
        )
    return tree


def _move_mount(tree: int, target: str) -> None:
    move_mount_f_empty_path = 4
    _check(
        _lib().syscall(
            SYS_move_mount, tree, b"", _AT_FDCWD, target.encode(), move_mount_f_empty_path
        ),
        f"move_mount {target}",
    )


def _kept_under_tmp(extra: list[str]) -> list[str]:
    """The fewest directories under /tmp that cover the interpreter's paths and the
    configured read paths."""
    wanted = {os.path.dirname(sys.executable), *extra}
    wanted.update(p for p in interpreter_paths() if os.path.isdir(p))
    under = sorted(
        os.path.normpath(p) for p in wanted if p.startswith("/tmp/") and os.path.exists(p)
    )
    kept: list[str] = []
    for path in under:
        if not any(path == k or path.startswith(k + "/") for k in kept):
            kept.append(path)
    return kept


def _enter_namespaces(run_dir: str, keep: list[str], born_in: Born | None = None) -> None:
    """Called in the process the host started; returns in the program's process (pid 2).

    ``born_in``: this process was forked into its namespaces already (by the zygote,
    :func:`fork_into_namespaces`) and is their pid 1: no unshare, and no mirror process.
    """
    if born_in is None:
        uid, gid = os.geteuid(), os.getegid()
        _check(_lib().unshare(NAMESPACES), "unshare")
    else:
        uid, gid = born_in.uid, born_in.gid
    _map_ids(uid, gid)
    _mount("none", "/", None, MS_REC | MS_PRIVATE)
    # /tmp is about to be replaced by a private one. What must stay visible and lives under
    # it (the run directory; a virtualenv or the package itself, as in a CI checkout) is
    # taken as detached copies of its mount trees first and attached again inside.
    # They come back read-only: landlock's write grant for /tmp would cover them too, and a
    # program must not be able to change the interpreter or kernelgate for later runs. The
    # run directory comes back last, writable, even when it lies inside one of them.
    trees = [(path, _open_tree(path, read_only=True)) for path in _kept_under_tmp(keep)]
    if run_dir == "/tmp" or run_dir.startswith("/tmp/"):
        trees.append((run_dir, _open_tree(run_dir)))
    _mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777,size=64m")
    for path, tree in trees:
        os.makedirs(path, exist_ok=True)
        _move_mount(tree, path)
        os.close(tree)
    os.chdir(run_dir)
    if born_in is None:
        status_r, status_w = os.pipe()
        init = os.fork()
        if init:
            _mirror(init, status_r, status_w)  # never returns
        os.close(status_r)
    else:
        status_w = born_in.status_fd  # the zygote reads how the program ended from here
    # pid 1 of the new namespace: reap everything, end with the program.
    # If the host's child dies (the host's SIGKILL), the namespace goes with it. (Our ppid
    # reads 0 here: the parent is outside this pid namespace.)
    _lib().prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    try:
        _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    except OSError:
        pass  # /proc keeps the outer view; not a reason to refuse the run
    program = os.fork()
    if program:
        _init(program, status_w)  # never returns
    os.close(status_w)


def _mirror(init: int, status_r: int, status_w: int) -> None:
    """The host's child: wait for the namespace's init and exit the way the program did."""
    os.close(status_w)
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
            os.waitpid(init, 0)
            break
        except ChildProcessError:
            break
        except InterruptedError:
            continue
    status = read_status(status_r)
    _exit_like(1 << 8 if status is None else status)


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
    was killed first)."""
    text = read_all(fd).strip()
    return int(text) if text.lstrip(b"-").isdigit() else None


def _exit_like(status: int) -> None:
    code = os.waitstatus_to_exitcode(status) if status >= 0 else 1
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
        if pid == program:
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
    nr = SYS_capset.get(os.uname().machine)
    if nr is None:
        return

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


_AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
_SYS_SOCKET = {"x86_64": 41, "aarch64": 198}
_SYS_IO_URING_SETUP = 425
_AF_UNIX = 1
_EACCES = 13


_seccomp: Any = None


def _seccomp_program() -> Any:
    """The filter of :func:`_deny_unix_sockets`, built once (in a zygote, for its children)."""
    global _seccomp
    if _seccomp is not None:
        return _seccomp
    machine = os.uname().machine
    if machine not in _AUDIT_ARCH:
        raise OSError(f"no seccomp filter for {machine}")

    class Filter(ctypes.Structure):
        _fields_ = [
            ("code", ctypes.c_uint16),
            ("jt", ctypes.c_uint8),
            ("jf", ctypes.c_uint8),
            ("k", ctypes.c_uint32),
        ]

    class Program(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(Filter))]

    ld_abs, jeq, ret = 0x20, 0x15, 0x06  # BPF_LD|BPF_W|BPF_ABS, BPF_JMP|BPF_JEQ|BPF_K, BPF_RET
    deny, allow = 0x00050000 | _EACCES, 0x7FFF0000  # SECCOMP_RET_ERRNO, SECCOMP_RET_ALLOW
    code = [
        (ld_abs, 0, 0, 4),  # 0: arch
        (jeq, 0, 6, _AUDIT_ARCH[machine]),  # 1: other arch -> allow (8)
        (ld_abs, 0, 0, 0),  # 2: syscall number
        (jeq, 0, 2, _SYS_SOCKET[machine]),  # 3: not socket -> 6
        (ld_abs, 0, 0, 16),  # 4: args[0], the domain
        (jeq, 1, 2, _AF_UNIX),  # 5: AF_UNIX -> deny (7), else allow (8)
        (jeq, 0, 1, _SYS_IO_URING_SETUP),  # 6: io_uring could make sockets -> deny
        (ret, 0, 0, deny),  # 7
        (ret, 0, 0, allow),  # 8
    ]
    filters = (Filter * len(code))(*[Filter(*c) for c in code])
    _seccomp = Program(len(code), filters)
    _seccomp.keep = filters  # the pointer does not keep the array alive by itself
    return _seccomp


def _deny_unix_sockets() -> None:
    """seccomp: socket(AF_UNIX, ...) and io_uring fail with EACCES.

    The mount namespace still shows the host's tree, and landlock has no right for
    connect() on a pathname unix socket: without this a program could reach any host
    socket its uid may open (a container runtime's, say). socketpair() stays allowed (the
    event loop needs one); it reaches nothing outside.
    """
    program = _seccomp_program()
    libc = _lib()
    _check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
    pr_set_seccomp, seccomp_mode_filter = 22, 2
    _check(libc.prctl(pr_set_seccomp, seccomp_mode_filter, ctypes.byref(program), 0, 0), "seccomp")


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
    try:
        _seccomp_program()
    except OSError:
        pass  # this machine has none; lock_down says so when a level needs it


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
    gid to map to) and the fd its init reports the program's wait status on."""

    def __init__(self, uid: int, gid: int, status_fd: int) -> None:
        self.uid, self.gid, self.status_fd = uid, gid, status_fd


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
    """What depends on the level only: seccomp, landlock, dropping capabilities.

    A warm child does this before its program arrives, too.
    """
    if level != "process":
        _deny_unix_sockets()
    if level == "namespaces+landlock":
        _landlock(
            [*interpreter_paths(), *read_paths],
            [run_dir, "/tmp", "/dev/null", *(write_paths or [])],
        )
    if os.geteuid() == 0 or level != "process":
        _drop_capabilities()


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
