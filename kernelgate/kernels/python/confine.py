"""The confinement policy: what a child gives up before its program runs, and in which order.
Stdlib only.

- **rlimits** (:func:`apply_rlimits`): never above what is already in force;
- **not dumpable** (:func:`not_dumpable`) and **killed with its parent**
  (:func:`die_with_parent`);
- ``process`` level on a root host: **the run's own uid** (:func:`_become_run_user`), keeping
  only CAP_DAC_READ_SEARCH; and at ``process`` level on any host, a **landlock domain** of
  its own (:func:`_landlock_domain`) where the kernel has landlock: no reaching processes
  outside it (ptrace access, and with ABI 6+ signals and abstract unix sockets);
- ``namespaces+landlock``: a **landlock ruleset** (:func:`_landlock`), which sets
  ``no_new_privs`` itself;
- the namespace levels: **no capabilities** (:func:`_drop_capabilities`);
- last, the **seccomp filter** (:mod:`.seccomp`, which sets ``no_new_privs`` too): it denies
  calls the steps before need (landlock's own, ``capset``, ``setresuid``).

:func:`lock_down` is that order. The system calls are :mod:`.syscalls`.

>>> sorted(set(interpreter_paths()) & {"/proc", "/usr/bin"})
['/proc', '/usr/bin']
"""

from __future__ import annotations

import ctypes
import os
import resource
import signal
import stat
import sys

from kernelgate.model.constants import RUN_GID, RUN_UID

from . import seccomp
from .syscalls import (
    PR_CAPBSET_DROP,
    PR_SET_DUMPABLE,
    PR_SET_KEEPCAPS,
    PR_SET_NO_NEW_PRIVS,
    PR_SET_PDEATHSIG,
    LandlockAttr,
    capset,
    check,
    landlock_abi,
    landlock_add_path_rule,
    landlock_create_ruleset,
    landlock_restrict_self,
    prctl,
)

__all__ = [
    "Ids",
    "run_ids",
    "apply_rlimits",
    "not_dumpable",
    "die_with_parent",
    "interpreter_paths",
    "system_paths",
    "read_rules",
    "lock_down",
]

CAP_DAC_READ_SEARCH = 2

#: A run's uid and gid outside its user namespace (on a root host).
Ids = tuple[int, int]
_NO_ID = 2**32 - 1  # (uid_t)-1 means "unchanged" to setresuid: never an id


def run_ids(value: object) -> Ids:
    """The run's ``[uid, gid]`` as the host sent them (None: the shared
    :data:`RUN_UID`/:data:`RUN_GID`). Never 0: a run is never root outside."""
    if value is None:
        return RUN_UID, RUN_GID
    if (
        isinstance(value, (list, tuple))
        and len(value) == 2
        and all(type(n) is int and 0 < n < _NO_ID for n in value)
    ):
        return int(value[0]), int(value[1])
    raise ValueError(
        f"the run's ids must be [uid, gid], each from 1 to {_NO_ID - 1}; got {value!r}"
    )


# -- rlimits and the process's own flags ------------------------------------------------------


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


def not_dumpable() -> None:
    """Make this process (and what it forks) non-dumpable: its /proc/<pid>/fd, mem and
    environ need CAP_SYS_PTRACE then, so a program of the same uid at ``process`` level
    cannot reach an idle pool child or another run's child through them (issue 9,
    finding 8). Execve resets it: what a program execs is kept from other runs by the
    run's own uid (a root host) or pid namespace, not by this."""
    prctl(PR_SET_DUMPABLE, 0)


def die_with_parent(parent: int | None = None) -> None:
    """Be killed when the process that started us dies (the host, or the zygote).

    Without this a busy program would outlive a host killed with SIGKILL. The kernel
    forgets it whenever the effective uid or gid changes: call again after that, with the
    ``parent`` the process had before (it may have died in between).
    """
    if parent is None:
        parent = os.getppid()
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # it died before the request took effect
        os._exit(1)


# -- capabilities ----------------------------------------------------------------------------


def _drop_capabilities() -> None:
    for cap in range(64):
        if prctl(PR_CAPBSET_DROP, cap) < 0:
            break  # past the last capability this kernel knows
    capset(0)


def _become_run_user(ids: Ids) -> None:
    """``process`` level on a root host: drop to the run's own uid and gid ``ids`` (no
    supplementary groups), keeping only CAP_DAC_READ_SEARCH (effective and permitted; the
    bounding set otherwise empty).

    A uid of its own, not one shared by all runs: ``execve`` makes a process dumpable
    again, so what a program execs is kept from other runs (their /proc/<pid>/environ
    and mem, their signals) by its uid alone (issue 18, finding 5).

    The trade-off, on purpose: the interpreter often lives where only root may look (a
    pyenv under /root, mode 0700), and this level has no mount namespace to show it
    elsewhere, so the program keeps root's right to read and search any file, as it had
    before; it loses everything else root had: writing root's files, /proc/sys, cgroupfs,
    signalling root's processes, setuid-root files. The one known escape through this
    capability, open_by_handle_at, is denied by the seccomp filter.
    """
    for cap in range(64):
        if cap != CAP_DAC_READ_SEARCH and prctl(PR_CAPBSET_DROP, cap) < 0:
            break  # past the last capability this kernel knows
    check(prctl(PR_SET_KEEPCAPS, 1), "keepcaps")
    os.setgroups([])
    uid, gid = ids
    parent = os.getppid()
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    check(prctl(PR_SET_KEEPCAPS, 0), "keepcaps")
    capset(1 << CAP_DAC_READ_SEARCH)
    die_with_parent(parent)  # the uid change cleared it: a killed host's run would live on


# -- landlock --------------------------------------------------------------------------------

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


_read_rules: dict[tuple[str, ...], list[str]] = {}


def read_rules(paths: list[str]) -> list[str]:
    """The paths of ``paths`` worth a read rule, resolved: each followed to where it
    leads (the rule is on what a path opens to), those that do not exist (or are not
    absolute) left out, and only the outermost (a rule covers everything beneath it,
    mount points included: landlock walks up through them to the root).

    Found once per list (a zygote's children inherit it: about 27 paths and a third of
    them nested for the interpreter's own, ``sys.path`` under its prefix).
    """
    key = tuple(paths)
    rules = _read_rules.get(key)
    if rules is None:
        found = {os.path.realpath(p) for p in paths if os.path.isabs(p)}
        rules = _outermost([p for p in found if os.path.exists(p)])
        _read_rules[key] = rules
    return list(rules)


def _outermost(paths: list[str]) -> list[str]:
    outer: list[str] = []
    for path in sorted(paths):
        if not any(path == o or path.startswith(o.rstrip("/") + "/") for o in outer):
            outer.append(path)
    return outer


def _landlock(read_paths: list[str], write_paths: list[str]) -> None:
    """``read_paths``: as :func:`read_rules` gives them (resolved, outermost)."""
    abi = landlock_abi()
    if abi < 1:
        raise OSError("landlock is not available in this kernel")
    handled = _handled_fs(abi)
    attr = LandlockAttr(handled, 3 if abi >= 4 else 0)  # TCP bind and connect: none allowed
    size = 16 if abi >= 4 else 8  # ABI 1-3 know only .fs, 4-5 .fs and .net
    ruleset = landlock_create_ruleset(attr, size)
    try:
        for paths, rights in ((read_paths, _READ), (write_paths, handled)):
            for path in paths:
                try:
                    fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
                except OSError:
                    continue  # a configured path that does not exist grants nothing
                try:
                    allowed = rights & handled
                    if not stat.S_ISDIR(os.fstat(fd).st_mode):
                        allowed &= _FILE_RIGHTS
                    landlock_add_path_rule(ruleset, allowed, fd, path)
                finally:
                    os.close(fd)
        check(prctl(PR_SET_NO_NEW_PRIVS, 1), "no_new_privs")
        landlock_restrict_self(ruleset)
    finally:
        os.close(ruleset)


_FS_MAKE_BLOCK = 1 << 11
_SCOPE_ABSTRACT_UNIX_SOCKET, _SCOPE_SIGNAL = 1, 2


def _landlock_domain() -> None:
    """``process`` level: a landlock domain of the run's own, which takes no file access
    away (the only one it handles, making block devices, needs a capability the run does
    not have), and which holds across ``execve``, like every landlock domain:

    - no ptrace access to a process outside it: the /proc/<pid>/environ, mem and fd of the
      host's and other runs' processes, what they exec included, even of the same uid
      (a non-root host: every run has the host's uid);
    - (ABI 6+) no signal to a process outside it, and no connecting to an abstract unix
      socket made outside it (this level shares the host's network namespace).

    Without landlock, only the run's uid (a root host) keeps runs apart.
    """
    abi = landlock_abi()
    if abi < 1:
        return
    if abi >= 6:
        attr = LandlockAttr(0, 0, _SCOPE_ABSTRACT_UNIX_SOCKET | _SCOPE_SIGNAL)
        size = ctypes.sizeof(LandlockAttr)
    else:
        attr = LandlockAttr(_FS_MAKE_BLOCK, 0, 0)  # a ruleset must handle something
        size = 8
    ruleset = landlock_create_ruleset(attr, size)
    try:
        check(prctl(PR_SET_NO_NEW_PRIVS, 1), "no_new_privs")
        landlock_restrict_self(ruleset)
    finally:
        os.close(ruleset)


# -- where the interpreter reads ----------------------------------------------------------------

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


#: What any dynamically linked program on the machine reads, whatever its runtime: the
#: system's libraries and executables, the loader's cache, time zones, the harmless devices,
#: and /proc (the pid namespace's own at the namespace levels).
SYSTEM_PATHS = (
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
)


def system_paths() -> list[str]:
    """:data:`SYSTEM_PATHS`, the part of every runtime's landlock read paths that does not
    depend on the runtime (a launched Node adds its binary, libraries and kernel)."""
    return list(SYSTEM_PATHS)


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
    paths.update(SYSTEM_PATHS)
    return sorted(paths)


# -- the order ---------------------------------------------------------------------------------


def lock_down(
    level: str,
    run_dir: str,
    read_paths: list[str],
    write_paths: list[str] | None = None,
    ids: Ids | None = None,
    runtime_paths: list[str] | None = None,
    runtime: str = "python",
) -> None:
    """What depends on the level only: the run's uid ``ids`` (``process`` on a root host;
    None: the shared :data:`RUN_UID`), landlock, seccomp, dropping capabilities.

    A warm child does this before its program arrives, a cold one after. The seccomp filter
    comes after everything that needs a syscall it denies (landlock's own, capset,
    setresuid).

    ``runtime_paths``: where the runtime that will run the program reads (None: this
    interpreter, :func:`interpreter_paths`; a launched Node gives its binary, libraries
    and kernel, plus :func:`system_paths`). ``runtime``: whose seccomp filter
    (:data:`.seccomp.RUNTIMES`).
    """
    not_dumpable()
    if level == "process" and os.geteuid() == 0:
        _become_run_user(ids or (RUN_UID, RUN_GID))
    if level == "process":
        _landlock_domain()
    if level == "namespaces+landlock":
        _landlock(
            read_rules(
                [*(interpreter_paths() if runtime_paths is None else runtime_paths), *read_paths]
            ),
            [run_dir, "/tmp", "/dev/shm", "/dev/null", *(write_paths or [])],
        )
    if level != "process":
        _drop_capabilities()
    seccomp.apply(level, runtime)
