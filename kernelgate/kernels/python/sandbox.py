"""The child's sandbox, in order: what each level does, and when. Stdlib only.

Applied in the child after it has its program and before the program runs (a warm child:
before its program arrives), in two steps:

1. :func:`prepare`, what does not depend on the program: the namespaces and the run's view
   (:mod:`.userns`, :mod:`.mounts`; with namespaces this returns in a new process, the
   program's, pid 2), the working directory and ``TMPDIR``;
2. :func:`restrict`, the run's rlimits, then :func:`.confine.lock_down` unless done: the
   run's uid, landlock, no capabilities, the seccomp filter, in that order.

The levels:

``process``
    rlimits, no core files, not dumpable, the seccomp filter (:mod:`.seccomp`), no
    capabilities (the host already gave it a process group, an empty environment, a
    temporary cwd and only fds 0-3). On a root host the child drops to the run's own uid
    and gid (the host's choice, unique among concurrent runs), keeping only
    CAP_DAC_READ_SEARCH.
``namespaces``
    plus new user, network, pid, mount and IPC namespaces (:mod:`.userns`): no network
    interfaces but a down loopback, no SysV/POSIX IPC object of anyone else, the view of
    :mod:`.mounts` (the host tree read-only and nosuid; private ``/tmp``, ``/dev/shm`` and
    run directory parent; the run directory the one writable host path), a read-only
    ``/proc`` of the new pid namespace, and a small init (pid 1) that reaps everything and
    takes the whole tree down when the program ends.
``namespaces+landlock``
    plus a landlock ruleset (:mod:`.confine`): writes only in the run directory, the private
    ``/tmp`` and ``/dev/shm``, reads only where the interpreter and the configured paths
    are, no TCP bind/connect.

>>> LEVELS
('process', 'namespaces', 'namespaces+landlock')
"""

from __future__ import annotations

import os
import sys
from typing import Any

from kernelgate.model.constants import RUN_GID, RUN_UID

from . import seccomp
from .confine import (
    Ids,
    apply_rlimits,
    die_with_parent,
    interpreter_paths,
    lock_down,
    not_dumpable,
    run_ids,
)
from .syscalls import landlock_abi
from .userns import Born, enter_namespaces, fork_into_namespaces, probe, read_all, read_status

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
    "warm_sandbox",
    "Born",
    "fork_into_namespaces",
    "interpreter_paths",
    "landlock_abi",
    "read_all",
    "read_status",
    "RUN_UID",
    "RUN_GID",
    "Ids",
    "run_ids",
]

LEVELS = ("process", "namespaces", "namespaces+landlock")


def warm_sandbox() -> None:
    """Build what every lock-down needs (paths, the seccomp filter) ahead of the children."""
    interpreter_paths()
    seccomp.warm()  # a machine without a filter table is left for lock_down to report


def _kept_paths() -> list[str]:
    """What the interpreter reads: comes back read-only where the view hides it."""
    return [os.path.dirname(sys.executable), *interpreter_paths()]


def prepare(
    level: str,
    run_dir: str,
    read_paths: list[str] | None = None,
    born_in: Born | None = None,
    ids: Ids | None = None,
) -> None:
    """What does not depend on the program: namespaces (when the level has them) and cwd.

    With namespaces this returns in a new process, the program's (pid 2). A warm child
    does this before its program arrives. ``ids``: the run's own uid and gid outside (a
    root host; None: the shared :data:`RUN_UID`).
    """
    if level not in LEVELS:
        raise ValueError(f"unknown sandbox level {level!r}")
    if level in ("namespaces", "namespaces+landlock"):
        enter_namespaces(run_dir, _kept_paths(), list(read_paths or []), born_in, ids)
        os.environ["TMPDIR"] = "/tmp"  # private to this run
    else:
        os.chdir(run_dir)
        os.environ["TMPDIR"] = run_dir  # the host's /tmp is shared: keep temp files here


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
            run_ids(sandbox.get("ids")),
        )


def enter(options: dict[str, Any], prepared: bool = False) -> None:
    """Apply the sandbox ``options["sandbox"]`` asks for; returns in the program's process."""
    if not prepared:
        sandbox = options.get("sandbox") or {}
        prepare(
            sandbox.get("level", "process"),
            options.get("cwd") or os.getcwd(),
            list(sandbox.get("read_paths") or []),
            ids=run_ids(sandbox.get("ids")),
        )
    restrict(options, locked=prepared)
