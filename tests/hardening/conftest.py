"""Fixtures for the hostile-program suite: one gateway per test, and leak checks after it.

Every test gets a :class:`Hostile` helper. After the test its gateways are closed, then the
helper checks that nothing the programs started is left: no process carrying the test's
marker, no live child of this process, no run directory under the test's ``tmp_dir``, no
per-run pids cgroup; the ``no_fd_leak`` fixture checks the file descriptors.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from typing import Any

import pytest

from kernelgate import Gateway, Limits, RunResult
from kernelgate.gateway.sandbox import PidsCgroup
from tests.procs import live_children, processes_with

#: Short budgets so that every hostile program ends in a few seconds.
FAST = Limits(wall_seconds=10, kill_grace_seconds=0.3, cpu_seconds=5)


def add(a: int, b: int) -> int:
    return a + b


def echo(*args: Any, **kwargs: Any) -> dict[str, Any]:
    return {"args": list(args), "kwargs": kwargs}


BINDINGS = {"add": add, "echo": echo}




def kernelgate_cgroups(names: set[str]) -> list[str]:
    """Per-run pids cgroups left under the pids cgroup root whose name has one of ``names``."""
    root = PidsCgroup.find_root()
    if root is None or not names:
        return []
    try:
        entries = os.listdir(root)
    except OSError:
        return []
    return [e for e in entries if e.startswith("kernelgate-") and any(n in e for n in names)]


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
            first = self.record(await gw.run("'warm-up'"))
            assert first.ok, first.message
            filler = getattr(getattr(gw, "_pool", None), "_filler", None)
            if filler is not None:
                await asyncio.shield(filler)  # the pool holds a booted child now
            return await gw.run(program, limits=limits)

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
    assert kernelgate_cgroups(helper.run_ids) == [], "per-run pids cgroups are left"


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
