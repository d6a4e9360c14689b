"""Fixtures for the hostile-program suite: one gateway per test, and leak checks after it.

Every test gets a :class:`Hostile` helper. After the test its gateways are closed, then the
helper checks that nothing the programs started is left: no process carrying the test's
marker, no live child of this process, no run directory under the test's ``tmp_dir``, no
per-run pids cgroup; the ``no_fd_leak`` fixture checks the file descriptors.

**Levels.** The suite runs every attack at each level where it applies and the machine has
it; a case that needs what this machine lacks is skipped with a reason naming it (the
markers below), and the session ends with one summary of what was skipped and why. Where
user namespaces are unavailable, that is everything but ``process``.

``KERNELGATE_TEST_LEVELS=process`` (or ``namespaces``) runs the suite as on a machine whose
strongest level is that one: before any test, the gateway's per-interpreter probe result
(``gateway.sandbox.probe_support``) for this interpreter is replaced with one that lacks
what is above it, so gateways plan and fall back exactly as they would there. Tests only:
the gateway itself never reads the variable. Hosts the suite starts in other processes
get their level explicitly, or are skipped when they cannot (the kernelspec's kernel).
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import sys
import tempfile
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from kernelgate import Gateway, Limits, RunResult
from kernelgate.gateway import sandbox as host_sandbox
from kernelgate.gateway.cgroups import CgroupRoots
from kernelgate.gateway.sandbox import LEVELS, SandboxSupport, probe_support
from tests.procs import live_children, processes_with

from .asuser import make_as_user, unavailable

#: The test-only knob (see the module's doc).
LEVELS_ENV = "KERNELGATE_TEST_LEVELS"


def _support() -> tuple[SandboxSupport, str]:
    """What this machine gives the suite: the probe's answer, limited by :data:`LEVELS_ENV`
    (and the level it was limited to, "" when not)."""
    pythons = {sys.executable, os.path.realpath(sys.executable)}
    real = probe_support(os.path.realpath(sys.executable))
    cap = os.environ.get(LEVELS_ENV, "")
    if not cap:
        return real, ""
    if cap not in LEVELS:
        raise pytest.UsageError(f"{LEVELS_ENV}={cap!r}: use one of {', '.join(LEVELS)}")
    forced = f"limited to {cap!r} by {LEVELS_ENV} (tests only)"
    limited = SandboxSupport(
        namespaces=real.namespaces and cap != "process",
        landlock_abi=real.landlock_abi if cap == "namespaces+landlock" else 0,
        cgroups=real.cgroups,
        why_not_namespaces=forced if cap == "process" else real.why_not_namespaces,
    )
    # The probe caches per interpreter: every gateway of this process on this interpreter
    # (the default, sys.executable) plans with the limited answer from now on.
    with host_sandbox._cache_lock:
        for python in pythons:
            host_sandbox._cache[python] = limited
    for python in pythons:  # if the cache ever moves, fail here, not silently at full levels
        assert probe_support(python) is limited, f"{LEVELS_ENV} could not limit the probe"
    return limited, cap


SUPPORT, FORCED_LEVEL = _support()
#: The strongest level the suite's gateways get here.
STRONGEST = SUPPORT.strongest
ROOT_HOST = os.geteuid() == 0


def needs_level(level: str) -> pytest.MarkDecorator:
    """Skip unless this machine gives ``level``; the reason names what is missing."""
    missing = SUPPORT.missing(level)
    return pytest.mark.skipif(bool(missing), reason=f"needs the {level!r} level: {missing}")


def at_levels(*levels: str, process_needs_root: bool = False) -> pytest.MarkDecorator:
    """Parametrize ``level`` over ``levels``, each skipped where the machine lacks it.

    ``process_needs_root``: the ``process`` case holds on a root host only (the program has
    the run's own uid there; on a non-root host it shares the host's, docs/security.md).
    """
    params = []
    for level in levels:
        marks = [needs_level(level)]
        if level == "process" and process_needs_root:
            marks.append(NEEDS_ROOT_HOST_AT_PROCESS_CASE)
        params.append(pytest.param(level, marks=marks, id=level))
    return pytest.mark.parametrize("level", params)


#: The ``process`` case of a test whose guarantee at that level needs a root host.
NEEDS_ROOT_HOST_AT_PROCESS_CASE = pytest.mark.skipif(
    not ROOT_HOST,
    reason="at the 'process' level a non-root host shares its uid with the program "
    "(docs/security.md): the program may write what the host may",
)

#: Every level, each where available.
ALL_LEVELS = at_levels(*LEVELS)
#: The namespace levels only (the attack targets what only they have).
NS_LEVELS = at_levels("namespaces", "namespaces+landlock")
#: A test at the strongest level that needs what namespaces give (a private /tmp, no
#: network, a pid namespace).
NEEDS_NAMESPACES = needs_level("namespaces")
#: A test at the strongest level that needs landlock (reading the host's files).
NEEDS_LANDLOCK = needs_level("namespaces+landlock")
#: At ``process`` only a writable pids cgroup bounds a run's processes and kills what
#: escaped its process group (setsid); the namespace levels have their pid namespace.
NEEDS_PIDS_CGROUP_AT_PROCESS = pytest.mark.skipif(
    STRONGEST == "process" and (SUPPORT.cgroups is None or SUPPORT.cgroups.pids is None),
    reason="needs a writable pids cgroup at the 'process' level (max_processes and the "
    "killing of setsid() escapees): none here, and no namespaces",
)
#: At ``process`` a non-root host shares its uid with the program (docs/security.md): what
#: only a different uid stops (reading the host's environ, writing its files) is not
#: promised there.
NEEDS_ROOT_HOST_AT_PROCESS = pytest.mark.skipif(
    STRONGEST == "process" and not ROOT_HOST,
    reason="at the 'process' level a non-root host shares its uid with the program "
    "(docs/security.md): needs namespaces, or a root host",
)


#: The kernelspec's kernel probes the machine itself: the knob cannot limit it.
REAL_LEVELS_ONLY = pytest.mark.skipif(
    bool(FORCED_LEVEL),
    reason=f"{LEVELS_ENV} limits this process's gateways only; the kernel started through "
    "its kernelspec probes the machine itself",
)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """One line per skip reason of the hostile suite, with how many cases it skipped."""
    skipped = [
        report
        for report in terminalreporter.stats.get("skipped", [])
        if "tests/hardening/" in report.nodeid.replace(os.sep, "/")
    ]
    ran = [
        report
        for key in ("passed", "failed", "error")
        for report in terminalreporter.stats.get(key, [])
        if "tests/hardening/" in getattr(report, "nodeid", "").replace(os.sep, "/")
        and getattr(report, "when", "call") == "call"
    ]
    if not skipped and not ran:
        return
    reasons: Counter[str] = Counter()
    for report in skipped:
        longrepr = report.longrepr
        reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
        reasons[reason.removeprefix("Skipped: ")] += 1
    write = terminalreporter.write_line
    terminalreporter.section("kernelgate hostile suite: levels and skips", sep="-")
    levels = ", ".join(level for level in LEVELS if not SUPPORT.missing(level))
    forced = f" ({FORCED_LEVEL!r} forced by {LEVELS_ENV})" if FORCED_LEVEL else ""
    write(f"levels here: {levels}{forced}; {len(ran)} cases ran, {len(skipped)} skipped")
    for reason, count in sorted(reasons.items(), key=lambda item: (-item[1], item[0])):
        write(f"  {count:4d} skipped: {reason}")


#: Short budgets so that every hostile program ends in a few seconds.
FAST = Limits(wall_seconds=10, kill_grace_seconds=0.3, cpu_seconds=5)


def add(a: int, b: int) -> int:
    return a + b


def echo(*args: Any, **kwargs: Any) -> dict[str, Any]:
    return {"args": list(args), "kwargs": kwargs}


BINDINGS = {"add": add, "echo": echo}

#: A program that forks children (each sleeping) until refused, then kills and reaps them:
#: returns ``[children made, errno of the refusal or None]`` (max_processes tests).
FORK_UNTIL_REFUSED = """
import os, time
pids, err = [], None
for _ in range(40):
    try:
        pid = os.fork()
    except OSError as exc:
        err = exc.errno
        break
    if pid == 0:
        time.sleep(30)
        os._exit(0)
    pids.append(pid)
for pid in pids:
    os.kill(pid, 9)
    os.waitpid(pid, 0)
return [len(pids), err]
"""


def kernelgate_cgroups(names: set[str]) -> list[str]:
    """Per-run cgroups (pids, memory) left under the cgroup roots whose name has one of
    ``names``, as ``controller-root/name`` paths."""
    roots = CgroupRoots.find()
    if roots is None or not names:
        return []
    found = []
    for root in roots.dirs():
        try:
            entries = os.listdir(root)
        except OSError:
            continue
        found += [
            os.path.join(root, e)
            for e in entries
            if e.startswith("kernelgate-") and any(n in e for n in names)
        ]
    return found


class Hostile:
    """Makes gateways for one test and remembers what to check after it."""

    def __init__(self, base: str, marker: str) -> None:
        self.base = base
        self.marker = marker
        self.gateways: list[Gateway] = []
        self.run_ids: set[str] = set()

    def gateway(self, limits: Limits | None = None, **kwargs: Any) -> Gateway:
        kwargs.setdefault("bindings", BINDINGS)
        gw = Gateway(limits=limits or FAST, tmp_dir=self.base, **kwargs)
        self.gateways.append(gw)
        return gw

    def run(
        self,
        program: str,
        limits: Limits | None = None,
        *,
        warm: bool = True,
        gateway: Gateway | None = None,
        **kwargs: Any,
    ) -> RunResult:
        """Run ``program`` on ``gateway`` or a fresh one (level: the strongest here).

        ``warm``: in a child from the warm pool (a first run fills the pool, as in a
        long-lived gateway); else in a cold child (``pool_size=0``).
        """
        if gateway is None:
            kwargs.setdefault("pool_size", 1 if warm else 0)
            gateway = self.gateway(limits, **kwargs)
        gw = gateway
        if not warm:
            return self.record(gw.run_sync(program, limits=limits))

        async def warm_then_run() -> RunResult:
            try:
                first = self.record(await gw.run("'warm-up'"))
                assert first.ok, first.message
                filler = getattr(getattr(gw, "_pool", None), "_filler", None)
                if filler is not None:
                    await asyncio.shield(filler)  # the pool holds a booted child now
                return await gw.run(program, limits=limits)
            finally:
                # As run_sync does: what the runtime holds on this loop (a Node gateway's
                # type-stripping helper) goes with the loop.
                await gw.runtime.end_loop()

        result = self.record(asyncio.run(warm_then_run()))
        assert result.usage.get("warm") is True, "the program did not run in a warm child"
        return result

    def record(self, result: RunResult) -> RunResult:
        self.run_ids.add(result.run_id)
        return result

    def close(self) -> None:
        for gw in self.gateways:
            gw.close()


@pytest.fixture
def hostile(tmp_path, request, no_fd_leak) -> Iterator[Hostile]:
    base = tmp_path / "runs"
    base.mkdir()
    safe = re.sub(r"[^A-Za-z0-9_-]", "_", request.node.name)
    helper = Hostile(str(base), f"kg-hostile-{safe}-{os.getpid()}")
    yield helper
    helper.close()
    assert processes_with(helper.marker) == [], "processes the program started are left"
    assert live_children(os.getpid()) == [], "child processes of the test process are left"
    assert os.listdir(base) == [], "run directories are left"
    # The cgroups of the runs themselves; the warm pool's are checked by their own test.
    assert kernelgate_cgroups(helper.run_ids) == [], "per-run cgroups are left"


@pytest.fixture
def outside_dir() -> Iterator[str]:
    """A host directory outside /tmp (which programs see as a private tmpfs) and outside
    every path the interpreter reads: only landlock stands between it and a program."""
    for parent in ("/var/tmp", os.path.expanduser("~")):
        if os.path.isdir(parent) and os.access(parent, os.W_OK):
            path = tempfile.mkdtemp(prefix="kg-hostile-outside-", dir=parent)
            break
    else:  # pragma: no cover - depends on the machine
        pytest.skip("no writable directory outside /tmp")
    with open(os.path.join(path, "secret.txt"), "w") as f:
        f.write("host secret\n")
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def as_user() -> Iterator[Any]:
    """A host process as another, unprivileged user (:mod:`.asuser`), or the test skipped
    saying why it cannot be one here."""
    why = unavailable()
    if why:
        pytest.skip(f"needs a host as another user: {why}")
    user, base = make_as_user()
    yield user
    shutil.rmtree(base, ignore_errors=True)
