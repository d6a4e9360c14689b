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

from . import mounts, seccomp
from .confine import (
    Ids,
    apply_rlimits,
    die_with_parent,
    interpreter_paths,
    lock_down,
    not_dumpable,
    read_rules,
    run_ids,
    system_paths,
)
from .syscalls import landlock_abi
from .userns import (
    Born,
    clones_into_namespaces,
    enter_namespaces,
    fork_into_namespaces,
    probe,
    read_all,
    read_status,
)

__all__ = [
    "LEVELS",
    "probe",
    "apply_rlimits",
    "die_with_parent",
    "prepare",
    "lock_down",
    "restrict",
    "enter",
    "Launched",
    "UNSUITED_RLIMITS",
    "not_dumpable",
    "warm_sandbox",
    "Born",
    "fork_into_namespaces",
    "clones_into_namespaces",
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
    read_rules(interpreter_paths())  # what landlock gets, resolved once
    mounts.warm(_kept_paths())  # what the view needs to know of them
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
    kept: list[str] | None = None,
) -> None:
    """What does not depend on the program: namespaces (when the level has them) and cwd.

    With namespaces this returns in a new process, the program's (pid 2). A warm child
    does this before its program arrives. ``ids``: the run's own uid and gid outside (a
    root host; None: the shared :data:`RUN_UID`). ``kept``: what the program's runtime
    reads, brought back read-only where the view hides it (None: this interpreter; the
    launcher gives Node's binary, libraries and kernel).
    """
    if level not in LEVELS:
        raise ValueError(f"unknown sandbox level {level!r}")
    if level in ("namespaces", "namespaces+landlock"):
        view = _kept_paths() if kept is None else kept
        enter_namespaces(run_dir, view, list(read_paths or []), born_in, ids)
        os.environ["TMPDIR"] = "/tmp"  # private to this run
    else:
        os.chdir(run_dir)
        os.environ["TMPDIR"] = run_dir  # the host's /tmp is shared: keep temp files here


#: Per launched runtime, the rlimits that do not suit it and are left unset. V8 reserves
#: large address ranges up front (its pointer cage and code range, GiBs): under
#: ``RLIMIT_AS`` at a run's ``memory_bytes`` (512 MiB) Node dies at start with SIGTRAP. The
#: run's memory cgroup and V8's own ``--max-old-space-size`` (set by the host) bound it.
UNSUITED_RLIMITS: dict[str, tuple[str, ...]] = {"node": ("RLIMIT_AS",)}


class Launched:
    """A runtime a launcher execs once the sandbox is in place (:mod:`.launcher`), as the
    sandbox must know it: ``name`` (its seccomp filter, :data:`.seccomp.RUNTIMES`, and
    the rlimits that do not suit it) and ``paths`` (what it reads: its binary, libraries
    and kernel; the view brings them back where it hides them, and landlock lets it read
    them and :func:`.confine.system_paths` instead of this interpreter's paths)."""

    def __init__(self, name: str, paths: list[str]) -> None:
        if name not in seccomp.RUNTIMES:
            raise ValueError(
                f"unknown runtime {name!r}; the sandbox knows {', '.join(seccomp.RUNTIMES)}"
            )
        self.name = name
        self.paths = list(paths)

    def read_paths(self) -> list[str]:
        """Where landlock lets it read: the system's paths and its own."""
        return [*system_paths(), *self.paths]


def restrict(
    options: dict[str, Any], locked: bool = False, launched: Launched | None = None
) -> None:
    """What depends on the run's limits (rlimits), and :func:`lock_down` unless done.
    ``launched``: for a runtime the caller execs next (None: this interpreter)."""
    sandbox = options.get("sandbox") or {}
    rlimits = dict(sandbox.get("rlimits") or {})
    rlimits.setdefault("RLIMIT_CORE", [0, 0])
    if launched is not None:
        for name in UNSUITED_RLIMITS.get(launched.name, ()):
            rlimits.pop(name, None)
    apply_rlimits(rlimits)
    if not locked:
        lock_down(
            sandbox.get("level", "process"),
            options.get("cwd") or os.getcwd(),
            list(sandbox.get("read_paths") or []),
            list(sandbox.get("write_paths") or []),
            run_ids(sandbox.get("ids")),
            runtime_paths=launched.read_paths() if launched is not None else None,
            runtime=launched.name if launched is not None else "python",
        )


def enter(
    options: dict[str, Any], prepared: bool = False, launched: Launched | None = None
) -> None:
    """Apply the sandbox ``options["sandbox"]`` asks for; returns in the program's process.
    ``launched``: the runtime the caller execs next (None: this interpreter runs the
    program)."""
    if not prepared:
        sandbox = options.get("sandbox") or {}
        prepare(
            sandbox.get("level", "process"),
            options.get("cwd") or os.getcwd(),
            list(sandbox.get("read_paths") or []),
            ids=run_ids(sandbox.get("ids")),
            kept=launched.paths if launched is not None else None,
        )
    restrict(options, locked=prepared, launched=launched)
