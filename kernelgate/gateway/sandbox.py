"""The host side of the sandbox: which levels this machine allows, and what a run gets."""

from __future__ import annotations

import json
import math
import subprocess
import threading
from dataclasses import dataclass, field
from typing import Any

from kernelgate.kernels.python import package_root
from kernelgate.model.limits import Limits
from kernelgate.model.site import SiteState

from .cgroups import CgroupRoots
from .runids import RunIds, own_ids

__all__ = [
    "LEVELS",
    "SandboxSupport",
    "SandboxPlan",
    "probe_support",
    "plan_sandbox",
]

#: Isolation levels, weakest first.
LEVELS = ("process", "namespaces", "namespaces+landlock")

# Also reports what ``site`` made (sys.path taken before kernelgate's root goes first): a
# cold child starts without ``site`` and is given this instead (:class:`.SiteState`).
_PROBE = (
    "import sys, json; path = list(sys.path); sys.path.insert(0, sys.argv[1]);"
    "from kernelgate.kernels.python.sandbox import probe;"
    "from kernelgate.model.site import SiteState;"
    "print(json.dumps({**probe(), 'site': SiteState.made_here(path).to_json()}))"
)
_cache: dict[str, SandboxSupport] = {}
_cache_lock = threading.Lock()


@dataclass(frozen=True)
class SandboxSupport:
    """What the machine allows, as probed with the child interpreter."""

    namespaces: bool
    landlock_abi: int
    #: Where per-run cgroups can be made (pids, memory), or None.
    cgroups: CgroupRoots | None
    why_not_namespaces: str = ""
    #: What the interpreter's ``site`` module makes at start-up (None: the probe did not say).
    site: SiteState | None = None

    @property
    def strongest(self) -> str:
        if self.namespaces and self.landlock_abi >= 1:
            return "namespaces+landlock"
        if self.namespaces:
            return "namespaces"
        return "process"

    def missing(self, level: str) -> str:
        """Why ``level`` is not available here ("" when it is)."""
        reasons = []
        if level in ("namespaces", "namespaces+landlock") and not self.namespaces:
            reasons.append(
                "unprivileged user namespaces are not allowed here "
                f"({self.why_not_namespaces or 'unshare failed'})"
            )
        if level == "namespaces+landlock" and self.landlock_abi < 1:
            reasons.append("the kernel has no landlock (Linux 5.13+ with landlock enabled)")
        return "; ".join(reasons)


def probe_support(python: str) -> SandboxSupport:
    """Probe once per interpreter (cached): user namespaces, landlock, writable cgroups."""
    with _cache_lock:
        if python in _cache:
            return _cache[python]
    try:
        out = subprocess.run(
            [python, "-I", "-c", _PROBE, package_root()],
            capture_output=True,
            timeout=30,
            env={"PATH": "/usr/bin:/bin"},
            check=False,
        )
        found: dict[str, Any] = json.loads(out.stdout or b"{}")
    except (OSError, subprocess.TimeoutExpired, ValueError):
        found = {}
    support = SandboxSupport(
        namespaces=bool(found.get("namespaces")),
        landlock_abi=int(found.get("landlock_abi") or 0),
        cgroups=CgroupRoots.find(),
        why_not_namespaces=str(found.get("why") or ""),
        site=_site_state(found.get("site")),
    )
    with _cache_lock:
        _cache[python] = support
    return support


def _site_state(text: Any) -> SiteState | None:
    try:
        return SiteState.from_json(text)
    except ValueError:
        return None  # a cold child then starts with site, as a warm one does


@dataclass(frozen=True)
class SandboxPlan:
    """How one run is isolated: the level, and the options the child applies."""

    level: str
    rlimits: dict[str, list[int]]
    read_paths: tuple[str, ...] = ()
    write_paths: tuple[str, ...] = ()
    #: Where the run's cgroup is made (None: no writable cgroup here).
    cgroups: CgroupRoots | None = None
    notes: tuple[str, ...] = field(default=())
    #: Threads the runtime's own process holds beyond the program's (Node's V8 and libuv
    #: workers): added to ``max_processes`` wherever tasks are counted.
    own_tasks: int = 0

    def pids_max(self, max_processes: int, born_in_namespaces: bool = False) -> int:
        """``pids.max`` of the run's cgroup: ``max_processes`` for the program and what it
        forks, plus at the namespace levels the processes the sandbox adds: their init,
        and for a child not ``born_in_namespaces`` (a cold one) the mirror outside them.
        ``process`` adds none.

        >>> plan = SandboxPlan("namespaces", {})
        >>> SandboxPlan("process", {}).pids_max(8), plan.pids_max(8), plan.pids_max(8, True)
        (8, 10, 9)
        """
        if self.level == "process":
            return max_processes + self.own_tasks
        return max_processes + self.own_tasks + (1 if born_in_namespaces else 2)

    def child_options(self, ids: RunIds | None = None) -> dict[str, Any]:
        """What the child is told (``ids``: the run's own uid and gid, on a root host)."""
        options: dict[str, Any] = {
            "level": self.level,
            "rlimits": self.rlimits,
            "read_paths": list(self.read_paths),
            "write_paths": list(self.write_paths),
        }
        if ids is not None:
            options["ids"] = [ids.uid, ids.gid]
        return options


def plan_sandbox(
    level: str,
    limits: Limits,
    support: SandboxSupport,
    read_paths: tuple[str, ...] = (),
    own_tasks: int = 0,
) -> SandboxPlan:
    """Turn a level and limits into what the host and the child do for one run
    (``own_tasks``: the threads the runtime's own process holds beyond the program's: they
    are counted by ``pids.max`` and RLIMIT_NPROC on top of ``max_processes``)."""
    rlimits: dict[str, list[int]] = {
        "RLIMIT_CPU": [math.ceil(limits.cpu_seconds), math.ceil(limits.cpu_seconds) + 1],
        "RLIMIT_AS": [limits.memory_bytes, limits.memory_bytes],
        "RLIMIT_FSIZE": [limits.max_file_bytes, limits.max_file_bytes],
        "RLIMIT_NOFILE": [limits.max_open_files, limits.max_open_files],
        "RLIMIT_CORE": [0, 0],
    }
    notes = []
    roots = support.cgroups
    if roots is None or roots.pids is None:
        if level != "process":
            # In a fresh user namespace RLIMIT_NPROC counts only this run's processes.
            nproc = limits.max_processes + own_tasks + 1
            rlimits["RLIMIT_NPROC"] = [nproc, nproc]
        elif own_ids():
            # A root host gives the run a uid of its own (.runids): the count is the run's.
            nproc = limits.max_processes + own_tasks
            rlimits["RLIMIT_NPROC"] = [nproc, nproc]
        else:
            notes.append(
                "max_processes is not enforced: no writable pids cgroup and no user namespace "
                "(RLIMIT_NPROC would count every process of this uid)"
            )
    if roots is None or roots.memory is None:
        notes.append(
            "memory_bytes bounds each process's address space (RLIMIT_AS), not the run: no "
            "writable memory cgroup here, so memory outside an address space (memfd, tmpfs, "
            "shared memory, pipes) and the run's processes together are not bounded by it"
        )
    return SandboxPlan(level, rlimits, read_paths, (), roots, tuple(notes), own_tasks)
