"""A task cancelled before its first step never runs its coroutine, nor the cleanup that
coroutine keeps in its own ``try``: every task that owns a cleanup (a child to kill and
reap, a directory, a cgroup, a uid, fds) still has it done (CI once left a pooled child,
its run-id lock and cgroups, when a boot task was cancelled in the turn it was made).

Each test cancels the task in the loop turn it was made (as a ``gather`` holding it does
when it is cancelled, e.g. an ``aclose()`` cancelled there), so the coroutine never
starts, and then looks for what is left, without the fixtures' help: a caller that has
awaited ``aclose()`` must find nothing, cleanup threads included.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import threading

import pytest

from kernelgate import Gateway
from kernelgate.gateway import pool as pool_mod
from kernelgate.gateway.cleanups import join_off_loop, off_loop
from kernelgate.gateway.sandbox import probe_support
from kernelgate.gateway.teardown import wait_readable
from tests.procs import descendants, pid_alive

from .conftest import warmed_up
from .test_lifecycle import replies_then_hangs

pytestmark = pytest.mark.timeout(120)


def _fds() -> dict[str, str]:
    found = {}
    for fd in os.listdir("/proc/self/fd"):
        try:
            found[fd] = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            pass  # the listing's own fd, closed already
    return found


def _cancel_unstarted(tasks: set[asyncio.Task[None]]) -> list[asyncio.Task[None]]:
    """Cancel the tasks of ``tasks`` not done yet: called in the turn they were made, their
    coroutines never start."""
    pending = [t for t in tasks if not t.done()]
    for task in pending:
        task.cancel()
    return pending


def _end_leftovers(children: set[int], fds: set[str]) -> None:
    """Kill and reap ``children``, close ``fds``: what a failing test left in this process."""
    for pid in children:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(int(fd))


@pytest.mark.parametrize("pool_size", [0, 1], ids=["cold", "warm"])
def test_a_run_whose_teardown_task_never_starts_leaves_nothing_behind(tmp_path, pool_size):
    """A run returns on its reply and leaves its child's end to a task made in that turn;
    cancelled before it starts, the child is still killed and reaped, its fds closed, its
    cgroup and run directory removed and its uid given back."""
    base = tmp_path / "runs"
    base.mkdir()
    gw = Gateway(tmp_dir=str(base), pool_size=pool_size, sandbox="process")
    fds_before, children_before = _fds(), descendants(os.getpid())

    async def main():
        if pool_size:
            await warmed_up(gw)
        # Its child lives on after its reply: the run's end is always left to the task.
        result = await gw.run(replies_then_hangs())
        # No await since the run made its teardown task: cancelled now, it never starts.
        pending = _cancel_unstarted(gw._finishing)
        await asyncio.gather(*pending, return_exceptions=True)
        await gw.aclose()
        return result, pending

    left_children: set[int] = set()
    left_fds: dict[str, str] = {}
    try:
        result, pending = asyncio.run(main())
        left_children = descendants(os.getpid()) - children_before
        left_fds = {fd: p for fd, p in _fds().items() if fd not in fds_before}
        assert result.ok, result.message
        assert pending, "the run's teardown had ended already: the test proves nothing"
        assert os.listdir(base) == []
        assert not left_children, "the child is not reaped"
        assert left_fds == {}
    finally:
        gw.close()
        _end_leftovers(left_children, set(left_fds))


def _other_level() -> tuple[str, str] | None:
    support = probe_support(os.path.realpath(os.sys.executable))
    levels = [lv for lv in ("process", "namespaces") if not support.missing(lv)]
    return (levels[0], levels[1]) if len(levels) == 2 else None


def test_a_retired_pool_whose_close_never_starts_is_closed_still(make_gateway):
    """A gateway that moves to another sandbox level retires its pool in a task; cancelled
    before it starts, the pool is closed all the same: its children and zygote gone."""
    levels = _other_level()
    if levels is None:
        pytest.skip("needs both the process and namespaces levels")
    first, second = levels
    gw = make_gateway(pool_size=1, sandbox=first)

    async def main():
        await warmed_up(gw)
        old = gw._pool
        children = list(old._ready)
        zygote = old._zygote
        gw.sandbox = second
        assert gw._pool_for(second, gw._support) is not old  # old is retired, in a task
        pending = _cancel_unstarted(gw._finishing)
        await asyncio.gather(*pending, return_exceptions=True)
        return old, children, zygote, pending

    old, children, zygote, pending = asyncio.run(main())
    assert pending, "nothing was retired: the test proves nothing"
    assert children and zygote is not None
    assert old.closed
    for child in children:
        assert not pid_alive(child.pid)
        assert not os.path.exists(child.run_dir)
        if child.cgroup is not None:
            assert not any(os.path.exists(path) for path in child.cgroup.paths)
    assert not pid_alive(zygote.pid)


def test_aclose_returns_once_the_cleanup_threads_have_ended(make_gateway):
    """What could only be finished off the loop (in a thread) is finished when aclose()
    returns: the caller may look for leftovers at once."""
    gw = make_gateway(pool_size=0)
    release = threading.Event()
    order: list[str] = []

    def cleanup() -> None:
        release.wait(30)
        order.append("cleanup")

    async def main():
        off_loop(cleanup, "test-cleanup")
        closing = asyncio.ensure_future(gw.aclose())
        done, _ = await asyncio.wait([closing], timeout=0.5)
        # Not done while the cleanup waits (had it not waited, it would be done by now).
        order.append("closing" if done else "waiting")
        release.set()
        await closing
        order.append("closed")

    try:
        asyncio.run(main())
    finally:
        release.set()
        join_off_loop()
    assert order == ["waiting", "cleanup", "closed"]


def test_children_that_all_die_as_they_boot_are_not_forked_for_ever(make_gateway, monkeypatch):
    """Every child dies before it parks (a broken interpreter or sandbox): the refill
    gives up after three failed boots, however fast each fails, instead of forking in a
    loop (it forked hundreds in a test, until one happened to park before its kill)."""
    gw = make_gateway(pool_size=2, sandbox="process")
    forks: list[int] = []
    real_fork = pool_mod.Zygote.fork

    async def fork(self, *args, **kwargs):
        child = await real_fork(self, *args, **kwargs)
        forks.append(child.pid)
        child.kill_all()
        assert await wait_readable(child.pidfd, 30), "the killed child did not exit"
        if len(forks) > 30:  # runaway: stop the refill, or the test never ends
            gw._pool.closed = True
        return child

    async def dies_booting(child, timeout):
        return False  # it did: dead before its boot was watched (whether it parked or not)

    monkeypatch.setattr(pool_mod.Zygote, "fork", fork)
    monkeypatch.setattr(pool_mod, "booted", dies_booting)

    async def main():
        first = await gw.run("return 1")  # cold: the pool starts filling
        pool = gw._pool
        if pool._filler is not None:
            await pool._filler
        await gw.aclose()
        return first

    first = asyncio.run(main())
    assert first.ok, first.message
    assert len(forks) <= 2 + 3, f"{len(forks)} children forked for one refill"
