"""The child's seccomp filter, at every sandbox level. Stdlib only (ctypes).

Why we write the BPF ourselves: the child must stay stdlib-only on any CPython >= 3.10, and
libseccomp's Python binding is not in the standard library (nor always installed). The filter
is small, so a tiny assembler with labels (:class:`_Asm`) is enough; it resolves jump offsets
at the end and refuses a program whose conditional jumps do not fit BPF's 8-bit forward
offsets, so a mistake shows when the filter is built (the tests build every level on every
machine), never as a wrong jump.

What the filter does, and why (the program is built once per level and machine):

1. **Native architecture only.** A syscall made through another ABI (i386 ``int 0x80`` or
   ``sysenter`` on x86_64, arm32 on aarch64) kills the process: those ABIs have other syscall
   numbers, so a filter keyed on native numbers would let them through (issue 9, finding 1:
   ``socket(AF_UNIX)`` as i386 syscall 359). On x86_64 the x32 ABI shares the native
   architecture value but sets bit 30 of the number: that range kills too.
2. **Socket families** (issue 9, finding 2). ``socket()`` is allowed for ``AF_INET`` and
   ``AF_INET6`` (at the namespace levels the network namespace is empty; at ``process`` the
   network is not isolated, as documented), ``AF_NETLINK`` with ``NETLINK_ROUTE`` only (glibc's
   ``getaddrinfo`` and ``if_nameindex`` ask it), and ``AF_UNIX`` at ``process`` only: at the
   namespace levels the host's pathname sockets are visible in the host's tree, and landlock
   has no right for ``connect()``, so ``socket(AF_UNIX)`` fails with ``EACCES`` there.
   Everything else (``AF_VSOCK``, ``AF_PACKET``, ``AF_ALG``, ``AF_KEY``, ``AF_XDP``,
   ``AF_BLUETOOTH``, other netlink protocols, ...) fails with ``EAFNOSUPPORT``.
   ``socketpair()`` is allowed for ``AF_UNIX`` only (the event loop's self-pipe; a pair
   reaches nothing outside). The kernel reads the domain and protocol as ``int``: the filter
   compares the low 32 bits, exactly what the kernel will use, so the high half of the 64-bit
   argument cannot disguise a family.
3. **Denied at every level** with ``EPERM``: what reaches other processes (``ptrace``,
   ``process_vm_readv/writev``, ``process_madvise``, ``pidfd_getfd``, ``kcmp``; issue 9,
   findings 8 and 11), the kernel keyring (``add_key``, ``request_key``, ``keyctl``: not
   namespaced by our namespaces, shared with the host's same-uid sessions), kernel attack
   surface a program does not need (``bpf``, ``perf_event_open``, ``userfaultfd``,
   ``io_uring_*``, ``modify_ldt``), file handles (``open_by_handle_at`` walks around mount
   namespaces and landlock), mounts and namespaces (``mount``, the new mount API, ``setns``,
   ``unshare``, ``clone`` with a ``CLONE_NEW*`` flag), and what needs capabilities the child
   never has (module loading, kexec, swap, reboot, acct, quotactl). ``personality`` is
   allowed only to query or to set ``PER_LINUX`` (nothing else; other personalities turn off
   address randomisation or make reads imply exec). Setuid/setgid bits: ``chmod`` family,
   ``mknod`` family and file creation (``open``/``openat``/``creat`` with ``O_CREAT`` or
   ``O_TMPFILE``) with ``S_ISUID`` or ``S_ISGID`` in the mode fail with ``EPERM`` (issue 9,
   finding 4: at the namespace levels uid 0 inside is the host's uid, root on a root host).
   ``clone3`` and ``openat2`` fail with ``ENOSYS``: their flags sit in a struct in memory that
   seccomp cannot read, and glibc falls back to ``clone``/``openat`` on ``ENOSYS``.
4. **SysV IPC and POSIX message queues at ``process`` only** (issue 9, finding 3): there is no
   IPC namespace at that level, so segments and queues would outlive the run, reach the host's
   own objects and hold memory outside the run's limits. The namespace levels get
   ``CLONE_NEWIPC`` and keep them (private to the run).

Everything else is allowed: this is a deny list around a default-allow, so that CPython,
its standard library and native extensions run unchanged.

**Per runtime** (:data:`RUNTIMES`): the program's runtime may take calls out of the deny lists
above, only those it cannot run without. Python needs none. Node (libuv, V8) needs none
either, measured with ``strace -f`` on Node 20 (libuv 1.46) running timers, file reads and
writes through the thread pool and ``fs.promises``, ``child_process`` (``spawnSync``,
``spawn`` with pipes), a worker thread, ``dns.lookup`` and stdout: what the filter refuses it
is only ``io_uring_setup`` (``EPERM``: libuv falls back to its thread pool; Node 20 tries
io_uring only with ``UV_USE_IO_URING=1``), ``clone3`` (``ENOSYS``: glibc falls back to
``clone`` for threads and ``fork``) and, at the namespace levels, ``socket(AF_UNIX)`` for
glibc's nscd lookup (``EACCES``: it goes on without). So the two filters are the same today;
a runtime that needs more gets it here, named and justified, never by a wider default.

Syscall numbers are hardcoded per machine (x86_64 and aarch64; aarch64 has none of the
legacy calls such as ``open``, ``creat``, ``chmod``, ``mknod``). A machine without a table
gets an ``OSError`` from :func:`build` and :func:`apply`.
"""

from __future__ import annotations

import ctypes
import os
import struct
from typing import Any

__all__ = ["build", "apply", "warm", "LEVELS", "MACHINES", "RUNTIMES"]

LEVELS = ("process", "namespaces", "namespaces+landlock")

#: Per runtime, the calls of the deny lists it is allowed (see the module's doc: measured,
#: none for either).
RUNTIMES: dict[str, frozenset[str]] = {"python": frozenset(), "node": frozenset()}

# -- constants (linux/audit.h, linux/seccomp.h, linux/filter.h, asm-generic) -----------------

AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
MACHINES = tuple(AUDIT_ARCH)
X32_SYSCALL_BIT = 0x40000000

SECCOMP_RET_KILL_PROCESS = 0x80000000
SECCOMP_RET_ERRNO = 0x00050000
SECCOMP_RET_ALLOW = 0x7FFF0000
SECCOMP_MODE_FILTER = 2
PR_SET_SECCOMP = 22
PR_SET_NO_NEW_PRIVS = 38

EPERM, EACCES, ENOSYS, EAFNOSUPPORT = 1, 13, 38, 97

AF_UNIX, AF_INET, AF_INET6, AF_NETLINK = 1, 2, 10, 16
NETLINK_ROUTE = 0

#: clone()'s namespace flags. CLONE_NEWTIME (0x80) is left out: in clone() that bit is part
#: of the exit signal (CSIGNAL), and only clone3()/unshare() take it, both refused anyway.
CLONE_NEW_ANY = (
    0x00020000  # CLONE_NEWNS
    | 0x02000000  # CLONE_NEWCGROUP
    | 0x04000000  # CLONE_NEWUTS
    | 0x08000000  # CLONE_NEWIPC
    | 0x10000000  # CLONE_NEWUSER
    | 0x20000000  # CLONE_NEWPID
    | 0x40000000  # CLONE_NEWNET
)
S_ISUID_ISGID = 0o6000
O_CREAT = 0o100  # the same on x86_64 and aarch64
O_TMPFILE_BIT = 0o20000000  # __O_TMPFILE: makes a file too, with the given mode
PERSONALITY_QUERY = 0xFFFFFFFF
PER_LINUX = 0

# -- syscall numbers ---------------------------------------------------------------------------

#: Numbers of the syscalls the filter looks at (and of the other per-machine ones the sandbox
#: makes itself: capset), per machine (from asm/unistd_64.h and
#: asm-generic/unistd.h; tests/hardening/test_seccomp.py checks them against the headers when
#: the machine has them). Absent on a machine: that machine has no such syscall.
SYSCALLS: dict[str, dict[str, int]] = {
    "x86_64": {
        "open": 2, "shmget": 29, "shmat": 30, "shmctl": 31, "socket": 41, "socketpair": 53,
        "clone": 56, "semget": 64, "semop": 65, "semctl": 66, "msgget": 68, "msgsnd": 69,
        "msgrcv": 70, "msgctl": 71, "creat": 85, "chmod": 90, "fchmod": 91, "ptrace": 101,
        "capset": 126,
        "mknod": 133, "personality": 135, "modify_ldt": 154, "pivot_root": 155, "acct": 163,
        "mount": 165, "umount2": 166, "swapon": 167, "swapoff": 168, "reboot": 169,
        "init_module": 175, "delete_module": 176, "quotactl": 179, "lookup_dcookie": 212,
        "semtimedop": 220, "mq_open": 240, "mq_unlink": 241, "mq_timedsend": 242,
        "mq_timedreceive": 243, "mq_notify": 244, "mq_getsetattr": 245, "kexec_load": 246,
        "add_key": 248, "request_key": 249, "keyctl": 250, "openat": 257, "mknodat": 259,
        "fchmodat": 268, "unshare": 272, "perf_event_open": 298, "name_to_handle_at": 303,
        "open_by_handle_at": 304, "setns": 308, "process_vm_readv": 310,
        "process_vm_writev": 311, "kcmp": 312, "finit_module": 313, "kexec_file_load": 320,
        "bpf": 321, "userfaultfd": 323, "io_uring_setup": 425, "io_uring_enter": 426,
        "io_uring_register": 427, "open_tree": 428, "move_mount": 429, "fsopen": 430,
        "fsconfig": 431, "fsmount": 432, "fspick": 433, "clone3": 435, "openat2": 437,
        "pidfd_getfd": 438, "process_madvise": 440, "mount_setattr": 442, "quotactl_fd": 443,
        "fchmodat2": 452, "open_tree_attr": 467,
    },
    "aarch64": {
        "lookup_dcookie": 18, "umount2": 39, "mount": 40, "pivot_root": 41, "quotactl": 60,
        "fchmod": 52, "fchmodat": 53, "openat": 56, "mknodat": 33, "acct": 89,
        "capset": 91, "personality": 92, "unshare": 97, "kexec_load": 104, "init_module": 105,
        "delete_module": 106, "ptrace": 117, "reboot": 142, "mq_open": 180, "mq_unlink": 181,
        "mq_timedsend": 182, "mq_timedreceive": 183, "mq_notify": 184, "mq_getsetattr": 185,
        "msgget": 186, "msgctl": 187, "msgrcv": 188, "msgsnd": 189, "semget": 190,
        "semctl": 191, "semtimedop": 192, "semop": 193, "shmget": 194, "shmctl": 195,
        "shmat": 196, "socket": 198, "socketpair": 199, "add_key": 217, "request_key": 218,
        "keyctl": 219, "clone": 220, "swapon": 224, "swapoff": 225, "perf_event_open": 241,
        "name_to_handle_at": 264, "open_by_handle_at": 265, "setns": 268,
        "process_vm_readv": 270, "process_vm_writev": 271, "kcmp": 272, "finit_module": 273,
        "bpf": 280, "userfaultfd": 282, "kexec_file_load": 294, "io_uring_setup": 425,
        "io_uring_enter": 426, "io_uring_register": 427, "open_tree": 428, "move_mount": 429,
        "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433, "clone3": 435,
        "openat2": 437, "pidfd_getfd": 438, "process_madvise": 440, "mount_setattr": 442,
        "quotactl_fd": 443, "fchmodat2": 452, "open_tree_attr": 467,
    },
}  # fmt: skip

#: Refused with EPERM at every level.
DENIED = (
    # other processes
    "ptrace", "process_vm_readv", "process_vm_writev", "process_madvise", "pidfd_getfd",
    "kcmp",
    # the kernel keyring: shared with the host's sessions of the same uid
    "add_key", "request_key", "keyctl",
    # kernel attack surface a program does not need
    "bpf", "perf_event_open", "userfaultfd", "io_uring_setup", "io_uring_enter",
    "io_uring_register", "modify_ldt", "lookup_dcookie",
    # file handles open files by inode, around mount namespaces and landlock
    "open_by_handle_at", "name_to_handle_at",
    # mounts and namespaces (clone with CLONE_NEW* is a block of its own)
    "mount", "umount2", "pivot_root", "move_mount", "open_tree", "open_tree_attr", "fsopen",
    "fsmount", "fsconfig", "fspick", "mount_setattr", "setns", "unshare",
    # need capabilities the child never has: refuse before the kernel looks
    "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
    "swapon", "swapoff", "reboot", "acct", "quotactl", "quotactl_fd",
)  # fmt: skip

#: Refused with ENOSYS: their flags are in memory seccomp cannot read; glibc falls back.
UNSUPPORTED = ("clone3", "openat2")

#: Refused with EPERM at ``process`` only, where there is no IPC namespace.
IPC = (
    "shmget", "shmat", "shmctl", "msgget", "msgsnd", "msgrcv", "msgctl", "semget", "semop",
    "semtimedop", "semctl", "mq_open", "mq_unlink", "mq_timedsend", "mq_timedreceive",
    "mq_notify", "mq_getsetattr",
)  # fmt: skip

#: Where the mode sits (argument index) in calls that set one: a mode with S_ISUID or S_ISGID
#: is refused. ``chmod``-like calls always set it; creating calls only with O_CREAT/O_TMPFILE
#: in their flags (argument index in :data:`CREATE_FLAGS`).
MODE_ARG = {
    "chmod": 1, "fchmod": 1, "fchmodat": 2, "fchmodat2": 2, "mknod": 1, "mknodat": 2,
    "creat": 1, "open": 2, "openat": 3,
}  # fmt: skip
CREATE_FLAGS = {"open": 1, "openat": 2}

# -- a small BPF assembler ---------------------------------------------------------------------

BPF_LD_W_ABS = 0x20
BPF_JEQ = 0x15
BPF_JGT = 0x25
BPF_JGE = 0x35
BPF_JSET = 0x45
BPF_JA = 0x05
BPF_RET = 0x06

#: Offsets in struct seccomp_data: nr (u32), arch (u32), instruction_pointer (u64), args[6]
#: (u64). Both machines are little-endian: an argument's low 32 bits come first.
NR, ARCH = 0, 4


def _arg_low(index: int) -> int:
    return 16 + 8 * index


Target = str | None  # a label, or None for "the next instruction"


class _Asm:
    """Instructions with symbolic jump targets; :meth:`assemble` resolves them."""

    def __init__(self) -> None:
        self.code: list[tuple[int, Target, Target, int | str]] = []
        self.labels: dict[str, int] = {}

    def label(self, name: str) -> None:
        if name in self.labels:
            raise ValueError(f"label {name!r} defined twice")
        self.labels[name] = len(self.code)

    def load(self, offset: int) -> None:
        self.code.append((BPF_LD_W_ABS, None, None, offset))

    def jump(self, op: int, k: int, yes: Target, no: Target = None) -> None:
        self.code.append((op, yes, no, k))

    def goto(self, target: str) -> None:
        self.code.append((BPF_JA, None, None, target))

    def ret(self, value: int) -> None:
        self.code.append((BPF_RET, None, None, value))

    def assemble(self) -> bytes:
        out = bytearray()
        for i, (op, yes, no, k) in enumerate(self.code):
            jt, jf = self._offset(i, yes), self._offset(i, no)
            if op == BPF_JA:
                assert isinstance(k, str)
                k = self._offset(i, k, limit=0xFFFFFFFF)
            elif jt > 255 or jf > 255:
                raise ValueError(
                    f"seccomp: conditional jump at instruction {i} is {max(jt, jf)} forward; "
                    "BPF allows 255: reorder the filter's blocks"
                )
            assert isinstance(k, int)
            out += struct.pack("<HBBI", op, jt, jf, k)
        return bytes(out)

    def _offset(self, at: int, target: Target, limit: int = 255) -> int:
        if target is None:
            return 0
        if target not in self.labels:
            raise ValueError(f"seccomp: jump to undefined label {target!r}")
        offset = self.labels[target] - at - 1
        if offset < 0:
            raise ValueError(f"seccomp: backward jump to {target!r} at instruction {at}")
        return offset if offset <= limit else 256  # reported by the caller


def _errno(value: int) -> int:
    return SECCOMP_RET_ERRNO | value


def _dispatch(asm: _Asm, table: list[tuple[int, str]]) -> None:
    """A binary search on the syscall number (in A) over ``table`` (sorted (nr, label)).

    About log2(n) comparisons per syscall instead of n; every jump goes forward (the left half
    is laid out before the right one) and no further than the tree is long.
    """
    if len(table) <= 3:
        for nr, target in table:
            asm.jump(BPF_JEQ, nr, target)
        asm.goto("allow")
        return
    middle = len(table) // 2
    right = f"nr>{table[middle - 1][0]}"
    asm.jump(BPF_JGT, table[middle - 1][0], right)
    _dispatch(asm, table[:middle])
    asm.label(right)
    _dispatch(asm, table[middle:])


def _table(level: str, machine: str, runtime: str) -> list[tuple[int, str]]:
    """(syscall number, label of what happens to it) for every syscall not simply allowed."""
    if level not in LEVELS:
        raise ValueError(f"unknown sandbox level {level!r}; expected one of {LEVELS}")
    if runtime not in RUNTIMES:
        raise ValueError(
            f"no seccomp filter for runtime {runtime!r}; expected one of {tuple(RUNTIMES)}"
        )
    allowed = RUNTIMES[runtime]
    if machine not in AUDIT_ARCH:
        raise OSError(
            f"no seccomp filter for machine {machine!r}: kernelgate has syscall tables for "
            f"{', '.join(MACHINES)} only"
        )
    numbers = SYSCALLS[machine]
    targets: dict[str, str] = {}  # syscall name -> label of what happens to it
    for name in DENIED:
        targets[name] = "eperm"
    for name in UNSUPPORTED:
        targets[name] = "enosys"
    if level == "process":
        for name in IPC:
            targets[name] = "eperm"
    for name in ("socket", "socketpair", "clone", "personality", *MODE_ARG):
        targets[name] = name
    return sorted(
        (numbers[name], label)
        for name, label in targets.items()
        if name in numbers and name not in allowed
    )


def _program(level: str, machine: str, runtime: str = "python") -> bytes:
    table = _table(level, machine, runtime)
    numbers = SYSCALLS[machine]
    asm = _Asm()
    asm.load(ARCH)
    asm.jump(BPF_JEQ, AUDIT_ARCH[machine], None, "kill")
    asm.load(NR)
    if machine == "x86_64":
        asm.jump(BPF_JGE, X32_SYSCALL_BIT, "kill")
    _dispatch(asm, table)

    # The blocks: each ends in a jump to one of the shared returns below.
    if "socket" in numbers:
        asm.label("socket")
        asm.load(_arg_low(0))  # domain
        asm.jump(BPF_JEQ, AF_INET, "allow")
        asm.jump(BPF_JEQ, AF_INET6, "allow")
        asm.jump(BPF_JEQ, AF_UNIX, "allow" if level == "process" else "eacces")
        asm.jump(BPF_JEQ, AF_NETLINK, None, "eafnosupport")
        asm.load(_arg_low(2))  # protocol
        asm.jump(BPF_JEQ, NETLINK_ROUTE, "allow", "eafnosupport")
    if "socketpair" in numbers:
        asm.label("socketpair")
        asm.load(_arg_low(0))
        asm.jump(BPF_JEQ, AF_UNIX, "allow", "eafnosupport")
    if "clone" in numbers:
        asm.label("clone")
        asm.load(_arg_low(0))  # flags: the first argument on both machines
        asm.jump(BPF_JSET, CLONE_NEW_ANY, "eperm", "allow")
    if "personality" in numbers:
        asm.label("personality")
        asm.load(_arg_low(0))
        asm.jump(BPF_JEQ, PERSONALITY_QUERY, "allow")
        asm.jump(BPF_JEQ, PER_LINUX, "allow", "eperm")
    for name, mode in MODE_ARG.items():
        if name not in numbers:
            continue
        asm.label(name)
        if name in CREATE_FLAGS:
            asm.load(_arg_low(CREATE_FLAGS[name]))
            asm.jump(BPF_JSET, O_CREAT | O_TMPFILE_BIT, None, "allow")
        asm.load(_arg_low(mode))
        asm.jump(BPF_JSET, S_ISUID_ISGID, "eperm", "allow")

    asm.label("allow")
    asm.ret(SECCOMP_RET_ALLOW)
    asm.label("eperm")
    asm.ret(_errno(EPERM))
    asm.label("enosys")
    asm.ret(_errno(ENOSYS))
    asm.label("eacces")
    asm.ret(_errno(EACCES))
    asm.label("eafnosupport")
    asm.ret(_errno(EAFNOSUPPORT))
    asm.label("kill")
    asm.ret(SECCOMP_RET_KILL_PROCESS)
    return asm.assemble()


_built: dict[tuple[str, str, str], bytes] = {}


def build(level: str, machine: str | None = None, runtime: str = "python") -> bytes:
    """The BPF program (an array of ``struct sock_filter``) for ``level`` on ``machine``
    (``os.uname().machine`` by default) for the program's ``runtime`` (:data:`RUNTIMES`).
    Built once per (level, machine, runtime), then cached."""
    key = (level, machine or os.uname().machine, runtime)
    program = _built.get(key)
    if program is None:
        program = _built[key] = _program(*key)
    return program


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


#: Per level: the program in C memory and the sock_fprog pointing at it (kept together: the
#: pointer alone does not keep the buffer alive). Made by warm() in a zygote, for its children.
_loaded: dict[tuple[str, str], tuple[Any, _SockFprog]] = {}


def _fprog(level: str, runtime: str = "python") -> _SockFprog:
    entry = _loaded.get((level, runtime))
    if entry is None:
        program = build(level, runtime=runtime)
        buffer = ctypes.create_string_buffer(program, len(program))
        fprog = _SockFprog(len(program) // 8, ctypes.addressof(buffer))
        entry = _loaded[(level, runtime)] = (buffer, fprog)
    return entry[1]


_prctl_fn: Any = None


def _prctl() -> Any:
    """libc's prctl, looked up once (in a zygote, for its children: loading it in each child
    costs more than installing the filter)."""
    global _prctl_fn
    if _prctl_fn is None:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
        prctl.argtypes = [ctypes.c_int, *[ctypes.c_ulong] * 4]
        prctl.restype = ctypes.c_int
        _prctl_fn = prctl
    return _prctl_fn


def apply(level: str, runtime: str = "python") -> None:
    """Set ``no_new_privs``, then install the filter for ``level`` on this process, for a
    program run by ``runtime`` (:data:`RUNTIMES`: this interpreter, or a Node it execs).

    Must run while the process has a single thread, before the program starts any: a filter
    installed with ``prctl(PR_SET_SECCOMP)`` covers the calling thread and whatever it creates
    afterwards, not threads that already run (``SECCOMP_FILTER_FLAG_TSYNC`` would sync them).
    The children call this from the thread fork() left them with, before the program exists,
    so there is no other thread to sync. The filter survives fork and exec, and cannot be
    removed. Raises OSError, saying what failed, when the kernel refuses.
    """
    prog = _fprog(level, runtime)
    prctl = _prctl()
    if prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"seccomp: prctl(PR_SET_NO_NEW_PRIVS) failed: {os.strerror(err)}")
    if prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.addressof(prog), 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(
            err,
            f"seccomp: installing the {level!r} filter failed: {os.strerror(err)} (a kernel "
            "without CONFIG_SECCOMP_FILTER, or a container runtime forbidding seccomp); run "
            "on a kernel with seccomp filters",
        )


def warm() -> None:
    """Build the filter of every level for this machine, ahead of the children (a zygote
    calls this before it forks them). A machine without a table is left for apply() to
    report."""
    _prctl()
    if os.uname().machine not in AUDIT_ARCH:
        return
    for level in LEVELS:
        _fprog(level)
