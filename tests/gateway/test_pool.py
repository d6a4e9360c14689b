"""The warm pool: fresh processes from a zygote, refilled, restarted, falling back."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import sys
import time

import pytest

from kernelgate.gateway.sandbox import probe_support
from tests.procs import descendants, pid_alive

from .conftest import filled, warmed_up


def test_pooled_runs_are_warm_and_share_no_state(make_gateway):
    gw = make_gateway(pool_size=2)

    async def main():
        await warmed_up(gw)
        first = await gw.run(
            "import json, os, random, colorsys\njson.kg_marker = 1\nrandom.seed(1)\n"
            "os.environ['KG_SET'] = '1'\nopen('left.txt', 'w').write('x')\n"
            "open('/tmp/left.txt', 'w').write('x')\nkept = 'global'"
        )
        await filled(gw)
        second = await gw.run(
            "import json, os, random, sys\nreturn [hasattr(json, 'kg_marker'), "
            "os.path.exists('left.txt'), os.path.exists('/tmp/left.txt'), "
            "os.environ.get('KG_SET'), 'colorsys' in sys.modules, 'kept' in globals(), "
            "random.random()]"
        )
        return first, second

    first, second = asyncio.run(main())
    assert first.ok and second.ok, (first.message, second.message)
    assert first.usage["warm"] and second.usage["warm"]
    assert second.value[:6] == [False, False, False, None, False, False]
    assert second.value[6] != random.Random(1).random()


def test_children_of_one_zygote_do_not_share_random_streams(make_gateway):
    gw = make_gateway(pool_size=6)

    async def main():
        await warmed_up(gw)
        return await asyncio.gather(
            *[gw.run("import random, os\nreturn [random.getrandbits(64), os.urandom(8).hex()]") for _ in range(6)]
        )

    results = asyncio.run(main())
    assert all(r.ok for r in results)
    assert sum(r.usage["warm"] for r in results) >= 2
    assert len({r.value[0] for r in results}) == 6
    assert len({r.value[1] for r in results}) == 6


def test_runs_beyond_the_pool_wait_for_forks_rather_than_start_cold(make_gateway):
    """With the zygote up, six runs at once on a pool of one wait a few milliseconds
    each for the next fork instead of paying for a cold interpreter."""
    gw = make_gateway(pool_size=1)

    async def main():
        await warmed_up(gw)
        return await asyncio.gather(*[gw.run("import os\nreturn os.getpid()") for _ in range(6)])

    results = asyncio.run(main())
    assert all(r.ok for r in results), [r.message for r in results]
    assert sum(r.usage["warm"] for r in results) >= 5  # a loaded machine may miss one wait
    assert gw._pool.cold_fallbacks <= 1


def test_a_pool_that_cannot_keep_up_falls_back_to_cold_spawn(make_gateway):
    """A zygote that stops forking (here: stopped by SIGSTOP) holds runs up for a bounded
    wait at most, once; after that they start cold at once until it delivers again."""
    gw = make_gateway(pool_size=1)

    async def main():
        await warmed_up(gw)
        zygote = gw._pool._zygote.pid
        os.kill(zygote, signal.SIGSTOP)
        try:
            first = await asyncio.gather(*[gw.run("return 7") for _ in range(3)])
            later = await gw.run("return 8")
        finally:
            os.kill(zygote, signal.SIGCONT)
        return first, later

    first, later = asyncio.run(main())
    assert [r.value for r in first] == [7] * 3 and later.value == 8
    assert sum(r.usage["warm"] for r in first) == 1  # the one child that was ready
    assert not later.usage["warm"]
    assert gw._pool.cold_fallbacks == 4  # with the very first run, before any zygote


def test_a_dead_zygote_is_restarted(make_gateway):
    gw = make_gateway(pool_size=1)

    async def main():
        await warmed_up(gw)
        pool = gw._pool
        old = pool._zygote
        os.kill(old.pid, signal.SIGKILL)
        os.waitpid(old.pid, 0)  # it is gone (its children get SIGKILL as it exits)
        # Its ready child died with it: this run falls back to a cold child, and the refill
        # needs a new zygote.
        r1 = await gw.run("return 1")
        await filled(gw)
        r2 = await gw.run("return 2")
        return old, pool, r1, r2

    old, pool, r1, r2 = asyncio.run(main())
    assert (r1.value, r2.value) == (1, 2)
    assert pool.zygote_restarts >= 1 and pool._zygote is not old
    assert not pid_alive(old.pid)


def test_close_stops_zygote_and_idle_children(make_gateway):
    gw = make_gateway(pool_size=3)

    async def main():
        await warmed_up(gw)
        pool = gw._pool
        pids = [pool._zygote.pid] + [c.pid for c in pool._ready]
        await gw.aclose()
        return pids

    pids = asyncio.run(main())
    assert len(pids) == 4
    assert not any(pid_alive(p) for p in pids)


@pytest.mark.parametrize("steps", [0, 1, 3])
def test_an_aclose_cancelled_midway_still_leaves_no_idle_child(make_gateway, steps):
    """Cancelled after ``steps`` turns of the loop, the pool's finalizer finishes off the
    loop: the zygote and every idle child are gone, none of them dropped from its lists."""
    gw = make_gateway(pool_size=3)

    async def main():
        await warmed_up(gw)
        pool = gw._pool
        pids = [pool._zygote.pid] + [c.pid for c in pool._ready]
        closing = asyncio.ensure_future(pool.aclose())
        for _ in range(steps):
            await asyncio.sleep(0)
        closing.cancel()
        with pytest.raises(asyncio.CancelledError):
            await closing
        return pids

    pids = asyncio.run(main())
    gw.close()
    assert len(pids) == 4
    deadline = time.monotonic() + 30
    while any(pid_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)  # the finalizer's thread waits for them
    assert not any(pid_alive(p) for p in pids)


def test_pool_size_zero_spawns_cold(make_gateway):
    gw = make_gateway(pool_size=0)
    r = gw.run_sync("return 1")
    assert r.ok and not r.usage["warm"] and gw._pool is None


def test_a_warm_child_at_a_namespace_level_is_two_processes(make_gateway):
    """The zygote forks the child straight into its namespaces, as their init: the init
    and the program, no third process outside mirroring them; the exit still reports how
    the program ended."""
    if probe_support(os.path.realpath(sys.executable)).strongest == "process":
        pytest.skip("no namespaces on this machine")
    seen = {}

    def look() -> int:
        (run,) = gw._runs
        seen["child"] = run.child.pid
        seen["zygote's"] = descendants(gw._pool._zygote.pid)
        seen["tree"] = descendants(run.child.pid)
        return len(seen["tree"])

    gw = make_gateway(bindings={"look": look}, sandbox="namespaces", pool_size=1)

    async def main():
        await warmed_up(gw)
        inside = await gw.run("import os\nreturn [await tools.look(), os.getpid(), os.getppid()]")
        crashed = await gw.run("import os\nos.kill(os.getpid(), 11)")
        return inside, crashed

    inside, crashed = asyncio.run(main())
    assert inside.ok and inside.usage["warm"], inside.message
    # Below the child (the namespace's init): the program (pid 2) alone, on a root host
    # too (its child makes the run's user namespace itself: no process stays outside).
    assert inside.value == [1, 2, 1]
    assert seen["child"] in seen["zygote's"]
    assert crashed.status == "worker_exit" and crashed.signal == 11


def test_an_exited_unreaped_process_is_still_charged_yet_its_cgroup_can_go():
    # What WarmPool.recycle_cgroup relies on: a process that has exited but is not yet reaped has left
    # cgroup.procs yet is still charged to pids.current (a run given the cgroup then would
    # get fewer than max_processes: seen in the soak, where orphans wait seconds for this
    # machine's init to reap them), and the cgroup can be removed meanwhile, so a run's
    # pool removes it instead of waiting to reuse it.
    from kernelgate.gateway.cgroups import CgroupRoots, RunCgroup

    roots = CgroupRoots.find()
    if roots is None or roots.pids is None:
        pytest.skip("no writable pids cgroup here")
    cgroup = RunCgroup(roots, "charge-test", 10)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the forked process
        os.close(r)
        cgroup.attach(os.getpid())
        os.write(w, b"x")
        os._exit(0)
    try:
        os.close(w)
        assert os.read(r, 1) == b"x"  # it is in the cgroup
        os.close(r)
        # Exited (it leaves cgroup.procs at once) and not reaped: still charged.
        os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
        assert cgroup.pids() == []
        assert cgroup.charged() == 1
        assert cgroup.settle() is True  # removed all the same
        assert not os.path.exists(cgroup.path)
    finally:
        os.waitpid(pid, 0)


def _cgroups_held_open() -> set[str]:
    """The cgroups (by name, whichever controller) this process has files of open."""
    held = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue  # closed since listed
        if target.startswith("/sys/fs/cgroup/"):
            held.add(os.path.basename(os.path.dirname(target)))
    return held


@pytest.mark.timeout(120)
def test_a_burst_of_runs_leaves_no_more_cgroups_open_than_the_pool_holds(make_gateway):
    # A finished run's cgroup is kept for the next child with its files open; a burst of
    # 24 runs at once once left all 24 kept (half a dozen fds each) until the gateway closed.
    gw = make_gateway(pool_size=2)

    async def main():
        await warmed_up(gw)
        if gw._pool is None or gw._pool.cgroup_roots is None:
            pytest.skip("no writable cgroup here: runs have no cgroup to keep")
        for _ in range(3):
            results = await asyncio.gather(*[gw.run("print('hi')") for _ in range(24)])
            assert all(r.ok for r in results), [r.message for r in results if not r.ok]
            await gw.wait_finished()
            await filled(gw)
        return _cgroups_held_open()

    held = asyncio.run(main())
    # The two parked children's cgroups and at most two kept for the next ones.
    assert len(held) <= 2 * 2, sorted(held)
