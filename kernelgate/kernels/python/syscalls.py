"""The system calls the child's sandbox makes, as thin ctypes wrappers. Stdlib only.

One place for the C library, errno handling and the numbers and structures of the calls
Python's ``os`` module does not offer: ``unshare``, ``clone`` with namespace flags,
``prctl``, ``capset``, ``mount`` and the new mount API, and landlock. Each wrapper makes one
call and raises :class:`OSError` naming it when the kernel refuses; deciding *what* to call,
and in which order, is the job of :mod:`.userns` (namespaces and their init),
:mod:`.mounts` (the run's view) and :mod:`.confine` (the lock-down). The seccomp filter
installs itself (:mod:`.seccomp` loads standalone in the tests, so it keeps its own
``prctl``).

>>> check(0, "getpid")
0
"""

from __future__ import annotations

import ctypes
import os
import signal
from typing import Any

from . import seccomp

__all__ = [
    "libc",
    "check",
    "syscall_number",
    "unshare",
    "clone_with_flags",
    "prctl",
    "capset",
    "mount",
    "mount_setattr",
    "open_tree",
    "move_mount",
    "landlock_abi",
    "landlock_create_ruleset",
    "landlock_add_path_rule",
    "landlock_restrict_self",
]

# -- numbers (linux/sched.h, linux/prctl.h, linux/mount.h, linux/landlock.h) ---------------

CLONE_NEWNS = 0x00020000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000

PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_SET_KEEPCAPS = 8
PR_CAPBSET_DROP = 24
PR_SET_NO_NEW_PRIVS = seccomp.PR_SET_NO_NEW_PRIVS  # defined where the filter needs it

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REC, MS_PRIVATE = 16384, 1 << 18
MOUNT_ATTR_RDONLY, MOUNT_ATTR_NOSUID, MOUNT_ATTR_NODEV = 0x1, 0x2, 0x4
MOUNT_ATTR_IDMAP = 0x00100000
SYS_open_tree, SYS_move_mount, SYS_mount_setattr = 428, 429, 442
OPEN_TREE_CLONE, AT_RECURSIVE, AT_EMPTY_PATH = 1, 0x8000, 0x1000
MOVE_MOUNT_F_EMPTY_PATH = 4
AT_FDCWD = -100

SYS_landlock_create_ruleset = 444
SYS_landlock_add_rule = 445
SYS_landlock_restrict_self = 446
LANDLOCK_CREATE_RULESET_VERSION = 1
LANDLOCK_RULE_PATH_BENEATH = 1

_CAPABILITY_VERSION_3 = 0x20080522

# -- the C library -------------------------------------------------------------------------

_libc: Any = None


def libc() -> Any:
    """The C library, loaded once, with errno kept (for the sandbox's system calls)."""
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    return _libc


def check(result: int, what: str) -> int:
    """``result`` of a libc call, or an OSError naming ``what`` and errno's text."""
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return result


def syscall_number(name: str) -> int | None:
    """This machine's number for syscall ``name`` (from :data:`.seccomp.SYSCALLS`, checked
    against the kernel headers), None where the table has none."""
    return seccomp.SYSCALLS.get(os.uname().machine, {}).get(name)


# -- processes and namespaces --------------------------------------------------------------


def unshare(flags: int, what: str = "unshare") -> None:
    """``unshare(flags)``; an OSError naming ``what`` if the kernel refuses."""
    check(libc().unshare(flags), what)


def prctl(option: int, arg: int = 0) -> int:
    """``prctl(option, arg, 0, 0, 0)``: its raw result (negative on failure, errno set)."""
    return int(libc().prctl(option, arg, 0, 0, 0))


_held_syscall: Any = None  # libc's syscall(), called with the GIL held (a PyDLL's)


def clone_with_flags(flags: int, init_only: bool = False) -> int:
    """``os.fork()`` through ``clone(flags | SIGCHLD)``: 0 in the child, its pid in the parent.

    The interpreter's fork bookkeeping runs as in ``os.fork`` (``PyOS_BeforeFork`` and
    ``PyOS_AfterFork_*``: locks, at-fork hooks such as ``random``'s reseeding), and the GIL
    is held across the call (a ``PyDLL``). For a single-threaded caller only.

    ``init_only``: the child is a namespace's init, which runs no program and no thread and
    forks its program with ``os.fork`` (that fork reinitializes the program's interpreter
    and runs the at-fork hooks, as ever). The init itself only gives back what
    ``PyOS_BeforeFork`` took (``PyOS_AfterFork_Parent``: the import lock, the locks the
    before-fork hooks took), as if no fork had happened: with one thread, whose id the
    child keeps, the interpreter's state is the caller's and consistent. Skipped in the
    init: threading's, logging's and random's at-fork hooks and the reinitialization they
    follow, 0.4-0.5 ms and ~100 page faults of every warm run (issue 23), for a process
    whose interpreter state nothing reads but the init's own code.
    """
    number = syscall_number("clone")
    if number is None:
        raise OSError(38, "clone: no syscall number for this machine")  # ENOSYS
    global _held_syscall
    if _held_syscall is None:
        # Looked up once (a zygote clones every warm child through it): a new handle per
        # call is a dlopen and a new function object, in the zygote and in each child.
        _held_syscall = ctypes.PyDLL(None, use_errno=True).syscall
    api = ctypes.pythonapi
    api.PyOS_BeforeFork()
    pid = _held_syscall(
        ctypes.c_long(number), ctypes.c_ulong(flags | signal.SIGCHLD), None, None, None, None
    )
    if pid == 0:
        if init_only:
            api.PyOS_AfterFork_Parent()
        else:
            api.PyOS_AfterFork_Child()
        return 0
    err = ctypes.get_errno()
    api.PyOS_AfterFork_Parent()
    if pid < 0:
        raise OSError(err, f"clone into new namespaces: {os.strerror(err)}")
    return int(pid)


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


def capset(keep: int) -> None:
    """Effective and permitted capabilities: exactly ``keep`` (bits 0-31); none inheritable.

    A machine without a number for ``capset`` is left as it is.
    """
    nr = syscall_number("capset")
    if nr is None:
        return
    header = _CapHeader(_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    data[0].effective = data[0].permitted = keep
    check(libc().syscall(nr, ctypes.byref(header), ctypes.byref(data)), "capset")


# -- mounts --------------------------------------------------------------------------------


class _MountAttr(ctypes.Structure):
    _fields_ = [
        ("attr_set", ctypes.c_uint64),
        ("attr_clr", ctypes.c_uint64),
        ("propagation", ctypes.c_uint64),
        ("userns_fd", ctypes.c_uint64),
    ]


def mount(
    source: str, target: str, fstype: str | None, flags: int, data: str | None = None
) -> None:
    """``mount(2)``."""
    check(
        libc().mount(
            source.encode(),
            target.encode(),
            fstype.encode() if fstype else None,
            ctypes.c_ulong(flags),
            data.encode() if data else None,
        ),
        f"mount {target}",
    )


def mount_setattr(
    where: str | int, attr_set: int, recursive: bool = True, userns_fd: int = 0
) -> None:
    """``mount_setattr`` on the mount at path ``where`` (or the detached tree fd)."""
    dirfd, path, flags = (
        (where, b"", AT_EMPTY_PATH) if isinstance(where, int) else (AT_FDCWD, where.encode(), 0)
    )
    attr = _MountAttr(attr_set, 0, 0, userns_fd)
    check(
        libc().syscall(
            SYS_mount_setattr,
            dirfd,
            path,
            flags | (AT_RECURSIVE if recursive else 0),
            ctypes.byref(attr),
            ctypes.sizeof(attr),
        ),
        f"mount_setattr {where}",
    )


def open_tree(path: str, recursive: bool = True) -> int:
    """``open_tree(OPEN_TREE_CLONE)``: a detached copy of the mount (trees) at ``path``."""
    return check(
        libc().syscall(
            SYS_open_tree,
            AT_FDCWD,
            path.encode(),
            (OPEN_TREE_CLONE | AT_RECURSIVE) if recursive else OPEN_TREE_CLONE,
        ),
        f"open_tree {path}",
    )


def move_mount(tree: int, target: str) -> None:
    """``move_mount``: attach the detached tree ``tree`` at ``target``."""
    check(
        libc().syscall(
            SYS_move_mount, tree, b"", AT_FDCWD, target.encode(), MOVE_MOUNT_F_EMPTY_PATH
        ),
        f"move_mount {target}",
    )


# -- landlock ------------------------------------------------------------------------------


class LandlockAttr(ctypes.Structure):
    """``struct landlock_ruleset_attr``: handled file-system and network rights, and (ABI 6+)
    the scopes: what a process may not reach outside its domain."""

    _fields_ = [("fs", ctypes.c_uint64), ("net", ctypes.c_uint64), ("scoped", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed", ctypes.c_uint64), ("fd", ctypes.c_int32)]


def landlock_abi() -> int:
    """The kernel's landlock ABI version, 0 when landlock is unavailable."""
    try:
        r = libc().syscall(
            SYS_landlock_create_ruleset,
            None,
            ctypes.c_size_t(0),
            ctypes.c_uint32(LANDLOCK_CREATE_RULESET_VERSION),
        )
    except (OSError, AttributeError):
        return 0
    return max(int(r), 0)


def landlock_create_ruleset(attr: LandlockAttr, size: int) -> int:
    """A new ruleset's fd; ``size``: how much of ``attr`` this kernel's ABI reads."""
    return check(
        libc().syscall(
            SYS_landlock_create_ruleset,
            ctypes.byref(attr),
            ctypes.c_size_t(size),
            ctypes.c_uint32(0),
        ),
        "landlock_create_ruleset",
    )


def landlock_add_path_rule(ruleset: int, allowed: int, fd: int, path: str) -> None:
    """Allow ``allowed`` beneath the file or directory open at ``fd`` (``path``, named in
    the error)."""
    rule = _PathBeneath(allowed, fd)
    check(
        libc().syscall(
            SYS_landlock_add_rule,
            ctypes.c_int(ruleset),
            ctypes.c_int(LANDLOCK_RULE_PATH_BENEATH),
            ctypes.byref(rule),
            ctypes.c_uint32(0),
        ),
        f"landlock_add_rule {path}",
    )


def landlock_restrict_self(ruleset: int) -> None:
    """Enforce ``ruleset`` on this process (``no_new_privs`` must be set)."""
    check(
        libc().syscall(SYS_landlock_restrict_self, ctypes.c_int(ruleset), ctypes.c_uint32(0)),
        "landlock_restrict_self",
    )
