"""A pooled child is ready once it has booted and parked, never at its fork (issue 23).

The zygote's ``Forked`` reply comes before the child has joined its cgroups, entered its
sandbox and rehearsed a run; the child says it is parked with one byte on its fd 3. These
tests stop or kill real children of a real zygote right after their fork and check that
the pool never hands out one that has not parked, and leaves nothing behind.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys

import pytest

from kernelgate.gateway import pool as pool_mod
from kernelgate.gateway.sandbox import probe_support
from kernelgate.gateway.teardown import discard, wait_readable
from kernelgate.wire.zygote import BOOTED
from tests.procs import pid_alive

from .conftest import warmed_up

pytestmark = pytest.mark.timeout(120)

LEVELS = ["process", "namespaces", "namespaces+landlock"]


def _skip_unless(level: str) -> None:
    missing = probe_support(os.path.realpath(sys.executable)).missing(level)
    if missing:
        pytest.skip(missing)


def _parked(child: pool_mod.PooledChild) -> bool:
    """Whether ``child`` has already said it is parked (its byte waits unread)."""
    try:
        return child.control.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == BOOTED
    except BlockingIOError:
        return False


def _signal_child(pid: int, sig: int) -> None:
    """``sig`` to the child's whole group (at a namespace level, its init too); before the
    child has started its session (its group), to the child alone, which then has not
    forked anything yet."""
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        os.kill(pid, sig)


def _assert_all_gone(booting: list[pool_mod.PooledChild]) -> None:
    """Each child killed, its run directory and cgroups removed."""
    assert booting, "no child was booting: the test proves nothing"
    for child in booting:
        assert not pid_alive(child.pid)
        assert not os.path.exists(child.run_dir)
        if child.cgroup is not None:
            assert not any(os.path.exists(path) for path in child.cgroup.paths)


def _intercept_forks(monkeypatch, sig: int, first_only: bool = False):
    """Send ``sig`` to each child the zygote forks (or the first) as soon as its fork is
    reported; returns the list of (child, already parked when signalled) and an event."""
    seen: list[tuple[pool_mod.PooledChild, bool]] = []
    forked = asyncio.Event()
    real_fork = pool_mod.Zygote.fork

    async def fork(self, *args, **kwargs):
        child = await real_fork(self, *args, **kwargs)
        if not (first_only and seen):
            _signal_child(child.pid, sig)
            seen.append((child, _parked(child)))
            if sig == signal.SIGKILL and child.pidfd >= 0:
                # A killed process is gone once it has run its exit, which under load
                # takes a while: until then a child that parked before the kill looks
                # alive, and the pool rightly hands it out (that run ends worker_exit,
                # as any whose child is killed from outside as it starts). The test is
                # about a child that has died: wait until it has.
                assert await wait_readable(child.pidfd, 30), "the killed child did not exit"
            forked.set()
        return child

    monkeypatch.setattr(pool_mod.Zygote, "fork", fork)
    return seen, forked


@pytest.mark.parametrize("level", LEVELS)
def test_a_booting_child_is_not_handed_out_before_it_parks(make_gateway, monkeypatch, level):
    """A child stopped before it parks is never ready, however long a run waits: runs get
    another child (one forked for them) or go cold; once it goes on and parks, it is."""
    _skip_unless(level)
    gw = make_gateway(pool_size=1, sandbox=level)
    seen, forked = _intercept_forks(monkeypatch, signal.SIGSTOP, first_only=True)

    async def main():
        first = await gw.run("import os\nreturn os.getpid()")  # cold: starts the zygote
        await asyncio.wait_for(forked.wait(), 60)
        pool = gw._pool
        child, parked_before = seen[0]
        taken = await pool.acquire(wait=0.3)
        ready_while_stopped = child in pool._ready
        if taken is not None:
            await discard(taken)
        later = await gw.run("return 2")
        await gw.wait_finished()
        _signal_child(child.pid, signal.SIGCONT)
        await pool._filler
        return first, later, child, parked_before, taken, ready_while_stopped, pool._ready

    first, later, child, parked_before, taken, ready_while_stopped, ready = asyncio.run(main())
    assert first.ok and later.ok, (first.message, later.message)
    if parked_before:
        pytest.skip("the child parked before the test could stop it (a slow host): rerun")
    assert taken is None or taken.pid != child.pid
    assert not ready_while_stopped
    assert child in ready  # parked once it could go on


@pytest.mark.parametrize("level", LEVELS)
def test_a_child_that_hangs_while_booting_is_killed_and_never_handed_out(
    make_gateway, monkeypatch, level
):
    monkeypatch.setattr(pool_mod, "_BOOT_TIMEOUT", 0.5)  # the pool's, from its start
    _skip_unless(level)
    gw = make_gateway(pool_size=1, sandbox=level)
    seen, forked = _intercept_forks(monkeypatch, signal.SIGSTOP, first_only=True)

    async def main():
        await gw.run("return 1")
        pool = gw._pool
        assert pool.boot_timeout == 0.5
        await asyncio.wait_for(forked.wait(), 60)
        await pool._filler  # the stopped child given up, the next one booted
        taken = await pool.acquire(wait=30)
        if taken is not None:
            await discard(taken)
        return seen[0], taken

    (hung, parked_before), taken = asyncio.run(main())
    if parked_before:
        pytest.skip("the child parked before the test could stop it (a slow host): rerun")
    assert taken is not None and taken.pid != hung.pid
    assert not pid_alive(hung.pid)
    assert not os.path.exists(hung.run_dir)


@pytest.mark.parametrize("level", LEVELS)
def test_a_child_that_dies_while_booting_is_never_handed_out(make_gateway, monkeypatch, level):
    """Every child killed as it boots: no run is warm, every run still answers, and each
    child's directory, cgroup and fds are gone (the fixtures check the directories and
    fds at the end)."""
    _skip_unless(level)
    gw = make_gateway(pool_size=2, sandbox=level)
    seen, _ = _intercept_forks(monkeypatch, signal.SIGKILL)

    async def main():
        results = [await gw.run(f"return {i}") for i in range(3)]
        pool = gw._pool
        if pool._filler is not None:
            await pool._filler
        # Live ones only: a child that parked before its kill landed is ready, dead, until
        # the next handout (or the close) discards it.
        ready = sum(c.alive() for c in pool._ready)
        await gw.aclose()
        return results, ready, pool.cold_fallbacks

    results, ready, cold = asyncio.run(main())
    assert [r.value for r in results] == [0, 1, 2]
    assert not any(r.usage["warm"] for r in results)
    assert ready == 0 and cold == 3
    assert seen and not any(pid_alive(c.pid) for c, _ in seen)
    for child, _ in seen:
        assert not os.path.exists(child.run_dir)
        if child.cgroup is not None:
            assert not any(os.path.exists(path) for path in child.cgroup.paths)


@pytest.mark.parametrize("level", LEVELS)
def test_a_program_never_runs_at_the_priority_its_child_booted_at(make_gateway, level, monkeypatch):
    """A root host's warm children boot at a lower priority while others are parked; each
    is put back to nice 0 before it is handed out: every thread of a program, warm, at
    every level, runs at nice 0 under SCHED_OTHER, as a cold one does."""
    if os.geteuid() != 0:
        pytest.skip("only a root host boots children in the background")
    _skip_unless(level)
    asked: list[bool] = []
    real_fork = pool_mod.Zygote.fork

    async def fork(self, *args, **kwargs):
        asked.append(bool(args[5] if len(args) > 5 else kwargs.get("background")))
        return await real_fork(self, *args, **kwargs)

    monkeypatch.setattr(pool_mod.Zygote, "fork", fork)
    gw = make_gateway(pool_size=4, sandbox=level)
    program = (
        "import os, threading\n"
        "return [os.getpriority(os.PRIO_PROCESS, 0), os.sched_getscheduler(0),"
        " sorted(os.listdir('/proc/self/task')) == [str(threading.get_native_id())]]"
    )

    async def main():
        await warmed_up(gw)
        results = []
        for _ in range(8):  # each refill forks in the background: two others are parked
            results.append(await gw.run(program))
            await gw.wait_finished()
            await gw._pool.filled()
        return results

    results = asyncio.run(main())
    assert any(asked), "no child booted in the background: the test proves nothing"
    for r in results:
        assert r.ok, r.message
        assert r.value == [0, os.SCHED_OTHER, True], r.value
    assert sum(r.usage["warm"] for r in results) >= 6


@pytest.mark.parametrize("closing", ["aclose", "loop-ends-then-close"])
def test_closing_the_pool_while_children_boot_leaves_none_behind(
    make_gateway, monkeypatch, closing
):
    """aclose() while children are still booting (here stopped before they park), or the
    loop ending under them (asyncio.run cancels their boot tasks) and then close(): each
    is killed, its directory and cgroup removed (the fixtures check directories and
    fds), the zygote gone."""
    gw = make_gateway(pool_size=2)
    _, forked = _intercept_forks(monkeypatch, signal.SIGSTOP)

    async def main():
        await gw.run("return 1")
        await asyncio.wait_for(forked.wait(), 60)
        pool = gw._pool
        zygote = pool._zygote.pid
        booting = list(pool._booting)
        if closing == "aclose":
            await gw.aclose()
        return zygote, booting

    zygote, booting = asyncio.run(main())
    if closing != "aclose":
        gw.close()
    _assert_all_gone(booting)
    assert not pid_alive(zygote)


def test_closing_the_pool_before_a_boot_task_first_runs_leaves_nothing_behind(make_gateway):
    """aclose() in the same loop turn as a fork (the last run ending as the kernel shuts
    down): the boot task is cancelled before its first step, so its own cleanup never
    runs; the pool still kills the child and removes its directory, cgroup and fds (CI
    caught one left, with its run-id lock, under load)."""
    gw = make_gateway(pool_size=1)

    async def main():
        await warmed_up(gw)
        pool = gw._pool
        # No await between the fork's boot task being made and aclose(): it never starts.
        assert await pool._fork_one()
        booting = list(pool._booting)
        await gw.aclose()
        return booting

    booting = asyncio.run(main())
    _assert_all_gone(booting)
