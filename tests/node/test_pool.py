"""The warm pool of Node children (``Gateway(language=..., pool_size=N)``, gateway/nodepool.py):
runs take children started ahead at every level; a run with other limits starts cold with
its own; a killed idle child is dropped; 8 runs share a pool of 2; and nothing (process,
zombie, run directory, cgroup, uid) is left once the gateway is closed.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
from collections.abc import Iterator
from typing import Any

import pytest

from kernelgate import Gateway, Limits, RunResult
from kernelgate.gateway.nodepool import NodePool
from kernelgate.gateway.process import owner_prefix
from tests.hardening.conftest import ALL_LEVELS, at_levels, kernelgate_cgroups
from tests.procs import _pids, _stat

pytestmark = [
    pytest.mark.skipif(shutil.which("node") is None, reason="node (>= 18) is not installed"),
    pytest.mark.timeout(180),
]

LIMITS = Limits(wall_seconds=60)
CALL = "const n: number = await tools.add(1, 2);\nn"


def add(a: int, b: int) -> int:
    return a + b


def children_of_us() -> list[int]:
    """Every process whose parent is this test process, zombies included."""
    me = os.getpid()
    return [p for p in _pids() if (s := _stat(p)) is not None and s[1] == me]


@pytest.fixture
def runs(tmp_path: Any, no_fd_leak: None) -> Iterator[str]:
    """The run directories' base; after the test: no directory, process (zombie included)
    or pool cgroup of ours is left, nor an fd (a pidfd, a run uid's lock: no_fd_leak)."""
    base = tmp_path / "runs"
    base.mkdir()
    yield str(base)
    assert os.listdir(base) == [], "run directories are left"
    assert children_of_us() == [], "child processes (or zombies) of the test process are left"
    assert kernelgate_cgroups({owner_prefix() + "nodepool-"}) == [], "pool cgroups are left"


def gateway(base: str, level: str = "process", size: int = 2, **kwargs: Any) -> Gateway:
    return Gateway(
        language="typescript",
        bindings={"add": add},
        sandbox=level,
        limits=LIMITS,
        tmp_dir=base,
        pool_size=size,
        **kwargs,
    )


async def filled(gw: Gateway) -> NodePool:
    """The gateway's Node pool, once its refill has ended."""
    pool = gw._pool
    assert isinstance(pool, NodePool), pool
    await pool.filled()
    return pool


def ok(result: RunResult, value: Any = 3) -> None:
    assert result.status == "ok", (result.status, result.error, result.stderr)
    assert result.value == value


@ALL_LEVELS
def test_pooled_runs_are_warm(runs: str, level: str) -> None:
    async def body() -> None:
        async with gateway(runs, level) as gw:
            first = await gw.run(CALL)
            ok(first)
            assert first.usage["warm"] is False  # the pool starts its children as it is made
            pool = await filled(gw)
            assert pool.ready == 2
            for _ in range(3):
                result = await gw.run(CALL)
                ok(result)
                assert result.usage["warm"] is True
                assert result.isolation == level
                await pool.filled()
            assert pool.handed_out == 3
            assert pool.cold_fallbacks == 1

    asyncio.run(body())


@ALL_LEVELS
def test_a_run_with_other_limits_starts_cold_with_its_own(runs: str, level: str) -> None:
    """The pool's children have the gateway's heap flag and rlimits; a run with another
    memory_bytes or max_file_bytes gets its own (cold), never the pool's."""

    async def body() -> None:
        heap = "process.execArgv.find((a: string) => a.startsWith('--max-old-space-size'))"
        write = (
            "let r = 'written';\n"
            "try { require('fs').writeFileSync('big', Buffer.alloc(300000)) }"
            " catch (e: any) { r = e.code }\nr"
        )
        async with gateway(runs, level) as gw:
            ok(await gw.run("1", limits=LIMITS), 1)
            pool = await filled(gw)
            warm = await gw.run(heap)
            assert warm.usage["warm"] is True
            assert warm.value == f"--max-old-space-size={(LIMITS.memory_bytes >> 20) - 48}"
            await pool.filled()
            cold = await gw.run(heap, limits=Limits(wall_seconds=60, memory_bytes=256 << 20))
            assert cold.usage["warm"] is False
            assert cold.value == "--max-old-space-size=208"
            small = await gw.run(write, limits=Limits(wall_seconds=60, max_file_bytes=100_000))
            assert small.usage["warm"] is False
            assert small.value == "EFBIG", (small.status, small.error)
            big = await gw.run(write)
            assert big.usage["warm"] is True
            assert big.value == "written", (big.status, big.error)
            assert pool.cold_fallbacks == 3  # the first run's, and the two with other limits

    asyncio.run(body())


@ALL_LEVELS
def test_a_killed_idle_child_is_dropped(runs: str, level: str) -> None:
    async def body() -> None:
        async with gateway(runs, level) as gw:
            ok(await gw.run(CALL))
            pool = await filled(gw)
            idle = list(pool._ready)
            assert len(idle) == 2
            for child in idle:
                os.kill(child.pid, signal.SIGKILL)
            for child in idle:
                assert await asyncio.to_thread(child.wait_gone, 10)
            result = await gw.run(CALL)
            ok(result)
            assert result.usage["warm"] is False
            assert pool.discarded == 2
            await pool.filled()
            again = await gw.run(CALL)
            ok(again)
            assert again.usage["warm"] is True

    asyncio.run(body())


@at_levels("process", "namespaces", "namespaces+landlock", process_needs_root=True)
def test_a_warm_run_cannot_reach_the_idle_child_beside_it(runs: str, level: str) -> None:
    """The other idle child of the pool (the next run's) is another uid (a root host) or
    outside the run's pid namespace: the program can neither signal nor read it, and it
    serves the next run warm."""
    attack = (
        "const out: string[] = [];\n"
        "try { process.kill(PID, 'SIGKILL'); out.push('killed') }"
        " catch (e: any) { out.push(e.code) }\n"
        "try { require('fs').readFileSync('/proc/PID/environ'); out.push('read') }"
        " catch (e: any) { out.push(e.code) }\n"
        "out"
    )

    async def body() -> None:
        async with gateway(runs, level) as gw:
            ok(await gw.run(CALL))
            pool = await filled(gw)
            _, other = pool._ready
            result = await gw.run(attack.replace("PID", str(other.pid)))
            assert result.usage["warm"] is True
            assert result.status == "ok", result.error
            assert "killed" not in result.value and "read" not in result.value, result.value
            assert other.alive()
            await pool.filled()
            assert other in pool._ready
            nxt = await gw.run(CALL)
            ok(nxt)
            assert nxt.usage["warm"] is True
            assert pool.discarded == 0

    asyncio.run(body())


PROBE = r"""
const fs = require('fs');
const keep = /^(Seccomp|Seccomp_filters|NoNewPrivs|CapInh|CapPrm|CapEff|CapBnd|CapAmb|Uid|Gid):/;
const status = fs.readFileSync('/proc/self/status', 'utf8').split('\n')
  .filter((l: string) => keep.test(l)).map((l: string) => l.replace(/\s+/g, ' '));
const limits = fs.readFileSync('/proc/self/limits', 'utf8').split('\n')
  .filter((l: string) => l).map((l: string) => l.replace(/\s+/g, ' '));
const tried: Record<string, string> = {};
for (const path of ['/etc/shadow', HOST_FILE, '/proc/1/environ']) {
  try { fs.readFileSync(path); tried[path] = 'read' } catch (e: any) { tried[path] = e.code }
}
({status, limits, tried, ns: fs.readlinkSync('/proc/self/ns/pid') === HOST_PIDNS,
  cwd: process.cwd() === RUN_DIR_OF_HOST ? 'host' : 'run', argv: process.execArgv})
"""


@ALL_LEVELS
def test_a_pooled_child_is_confined_as_a_cold_one(runs: str, level: str, tmp_path: Any) -> None:
    """What the program sees of its confinement (seccomp, no_new_privs, capabilities, uid
    kind, every rlimit, V8's flags, what it may read, its pid namespace) is the same in a
    warm run as in a cold run of the same plan."""
    secret = tmp_path / "host-secret"
    secret.write_text("the host's\n")
    code = (
        PROBE.replace("HOST_FILE", repr(str(secret)))
        .replace("HOST_PIDNS", repr(os.readlink("/proc/self/ns/pid")))
        .replace("RUN_DIR_OF_HOST", repr(os.getcwd()))
    )

    def seen(result: RunResult) -> dict[str, Any]:
        assert result.status == "ok", (result.status, result.error)
        value = dict(result.value)
        ids = [line.split(" ")[1:] for line in value.pop("status") if line[:4] in ("Uid:", "Gid:")]
        value["status"] = [
            line for line in result.value["status"] if line[:4] not in ("Uid:", "Gid:")
        ]
        value["root"] = any(i == "0" for row in ids for i in row)
        return value

    async def body() -> None:
        async with gateway(runs, level, size=1) as cold_gw:
            cold = await cold_gw.run(code)
            assert cold.usage["warm"] is False
            await filled(cold_gw)
            warm = await cold_gw.run(code)
            assert warm.usage["warm"] is True
        assert seen(warm) == seen(cold)
        assert seen(warm)["tried"][str(secret)] != "read" or level == "process"
        assert seen(warm)["tried"]["/etc/shadow"] != "read"

    asyncio.run(body())


def test_eight_concurrent_runs_share_a_pool_of_two(runs: str) -> None:
    async def body() -> None:
        async with gateway(runs) as gw:
            ok(await gw.run(CALL))
            pool = await filled(gw)
            results = await asyncio.gather(
                *(gw.run(f"const n: number = await tools.add({i}, 1);\nn") for i in range(8))
            )
            for i, result in enumerate(results):
                ok(result, i + 1)
            warm = sum(bool(r.usage["warm"]) for r in results)
            assert warm >= 2
            assert pool.handed_out == warm
            assert pool.cold_fallbacks == 1 + 8 - warm

    asyncio.run(body())


def test_closing_while_the_pool_refills_leaves_nothing(runs: str) -> None:
    async def body() -> None:
        async with gateway(runs, size=3) as gw:
            ok(await gw.run(CALL))
            # aclose now: the refill is under way (children started and starting).

    asyncio.run(body())


def test_run_sync_and_close_leave_nothing(runs: str) -> None:
    """run_sync has a loop per run: the pool's children outlive it, its refill does not."""
    with gateway(runs) as gw:
        ok(gw.run_sync(CALL))
        warm = 0
        for _ in range(3):
            result = gw.run_sync(CALL)
            ok(result)
            warm += bool(result.usage["warm"])
        assert warm >= 1
    assert gw._pool is None
