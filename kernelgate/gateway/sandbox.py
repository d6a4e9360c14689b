"""The host side of the sandbox: which levels this machine allows, and per-run pids cgroups."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from kernelgate.kernels.python import package_root
from kernelgate.model.limits import Limits
from kernelgate.model.site import SiteState

from .process import backoff, owner_alive, owner_prefix
from .runids import RunIds, own_ids

__all__ = [
    "LEVELS",
    "SandboxSupport",
    "SandboxPlan",
    "probe_support",
    "plan_sandbox",
    "PidsCgroup",
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
    pids_cgroup: str | None
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
    """Probe once per interpreter (cached): user namespaces, landlock, a writable pids cgroup."""
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
        pids_cgroup=PidsCgroup.find_root(),
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
    pids_cgroup: str | None = None
    notes: tuple[str, ...] = field(default=())

    def pids_max(self, max_processes: int) -> int:
        """``pids.max`` of the run's cgroup: ``max_processes`` for the program and what it
        forks, plus at the namespace levels the two processes the sandbox adds (the mirror
        outside the namespaces and their init). ``process`` adds none.

        >>> SandboxPlan("process", {}).pids_max(8), SandboxPlan("namespaces", {}).pids_max(8)
        (8, 10)
        """
        return max_processes + (0 if self.level == "process" else 2)

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
    level: str, limits: Limits, support: SandboxSupport, read_paths: tuple[str, ...] = ()
) -> SandboxPlan:
    """Turn a level and limits into what the host and the child do for one run."""
    rlimits: dict[str, list[int]] = {
        "RLIMIT_CPU": [math.ceil(limits.cpu_seconds), math.ceil(limits.cpu_seconds) + 1],
        "RLIMIT_AS": [limits.memory_bytes, limits.memory_bytes],
        "RLIMIT_FSIZE": [limits.max_file_bytes, limits.max_file_bytes],
        "RLIMIT_NOFILE": [limits.max_open_files, limits.max_open_files],
        "RLIMIT_CORE": [0, 0],
    }
    notes = []
    cgroup = support.pids_cgroup
    if cgroup is None:
        if level != "process":
            # In a fresh user namespace RLIMIT_NPROC counts only this run's processes.
            rlimits["RLIMIT_NPROC"] = [limits.max_processes + 1, limits.max_processes + 1]
        elif own_ids():
            # A root host gives the run a uid of its own (.runids): the count is the run's.
            rlimits["RLIMIT_NPROC"] = [limits.max_processes, limits.max_processes]
        else:
            notes.append(
                "max_processes is not enforced: no writable pids cgroup and no user namespace "
                "(RLIMIT_NPROC would count every process of this uid)"
            )
    return SandboxPlan(level, rlimits, read_paths, (), cgroup, tuple(notes))


class PidsCgroup:
    """A per-run pids cgroup (v1 or v2) capping how many processes a run may have.

    Named ``kernelgate-<owner>-<run_id>`` (:func:`~kernelgate.gateway.process.owner_prefix`):
    :meth:`sweep` finds those of hosts that are gone.
    """

    def __init__(self, root: str, run_id: str, max_pids: int) -> None:
        self.path = os.path.join(root, f"{owner_prefix()}{run_id}")
        os.mkdir(self.path)
        self.max_pids = -1
        try:
            self.set_max(max_pids)
        except OSError:
            os.rmdir(self.path)
            raise

    def attach(self, pid: int) -> None:
        with open(os.path.join(self.path, "cgroup.procs"), "w") as f:
            f.write(str(pid))

    def set_max(self, max_pids: int) -> None:
        if max_pids == self.max_pids:
            return  # a reused cgroup usually has it already
        with open(os.path.join(self.path, "pids.max"), "w") as f:
            f.write(str(max_pids))
        self.max_pids = max_pids

    def pids(self) -> list[int]:
        try:
            with open(os.path.join(self.path, "cgroup.procs")) as f:
                return [int(line) for line in f.read().split()]
        except OSError:
            return []

    def charged(self) -> int:
        """Tasks charged to the cgroup (pids.current): its live processes and threads, and
        exited ones not yet reaped; 0 if it cannot be read."""
        try:
            with open(os.path.join(self.path, "pids.current")) as f:
                return int(f.read().strip() or 0)
        except (OSError, ValueError):
            return 0

    def settle(self, remove: bool = True) -> bool:
        """SIGKILL every process in the cgroup (which also holds what escaped its process
        group with setsid); True once it is empty, and removed when ``remove``.

        Killed processes take a moment to leave, so callers retry until True.
        """
        pids = self.pids()
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if not remove:
            return not pids
        try:
            os.rmdir(self.path)
        except FileNotFoundError:
            return True
        except OSError:
            return False  # busy: a process is still on its way out
        return True

    def settle_blocking(self, timeout: float = 5.0) -> bool:
        """:meth:`settle` and remove, retried until done or ``timeout``: for code that runs
        outside an event loop (close, finalizers, a loop shutting down)."""
        for delay in backoff(timeout):
            if self.settle():
                return True
            time.sleep(delay)
        return self.settle()

    @staticmethod
    def sweep(root: str | None, timeout: float = 0.5) -> list[str]:
        """Empty and remove the cgroups under ``root`` whose owner is gone (killing what is
        left in them: a dead host's runs); return their names. One listdir; a cgroup whose
        processes have not left within ``timeout`` stays for the next sweep."""
        if root is None:
            return []
        try:
            names = os.listdir(root)
        except OSError:
            return []
        left = []
        seen: dict[tuple[int, int], bool] = {}
        for name in names:
            if name.startswith("kernelgate-") and not owner_alive(name, seen):
                cgroup = PidsCgroup.__new__(PidsCgroup)
                cgroup.path = os.path.join(root, name)
                cgroup.max_pids = -1
                left.append(cgroup)
        removed = [c for c in left if c.settle()]
        busy = [c for c in left if c not in removed]
        if busy:
            for delay in backoff(timeout):
                busy = [c for c in busy if not c.settle()]
                if not busy:
                    break
                time.sleep(delay)
        return sorted(os.path.basename(c.path) for c in left if c not in busy)

    @staticmethod
    def find_root() -> str | None:
        """A pids cgroup directory we may create children in, or None."""
        try:
            with open("/proc/self/cgroup") as f:
                lines = f.read().splitlines()
        except OSError:
            return None
        for line in lines:
            _, controllers, path = line.split(":", 2)
            if "pids" in controllers.split(","):
                root = os.path.join("/sys/fs/cgroup/pids", path.lstrip("/"))
                if _usable(root):
                    return root
        for line in lines:
            if line.startswith("0::"):
                base = os.path.join("/sys/fs/cgroup", line[3:].lstrip("/"))
                try:
                    with open(os.path.join(base, "cgroup.subtree_control")) as f:
                        if "pids" in f.read().split() and _usable(base):
                            return base
                except OSError:
                    pass
        return None


def _usable(root: str) -> bool:
    if not os.path.isdir(root) or not os.access(root, os.W_OK):
        return False
    probe = os.path.join(root, f"{owner_prefix()}probe")
    try:
        os.mkdir(probe)
    except OSError:
        return False
    try:
        return os.path.exists(os.path.join(probe, "pids.max"))
    finally:
        os.rmdir(probe)
