"""One gateway shared by several threads' event loops at once (kernelgate/gateway/loops.py):
threads each calling ``run_sync``, or each awaiting runs in an ``asyncio.run`` of its own,
and a close from yet another thread. What the pool and its zygote share between runs is
handed to the loop it belongs to: a zygote's report reaches the loop waiting for it, and a
close leaves each loop's watched fds to that loop (closed under it, their numbers reused,
the loop would never hear of the fds that took them: a run waited for ever)."""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import threading
from typing import Any

import pytest

from kernelgate.gateway.pool import PooledChild, Zygote, booted

from .conftest import BINDINGS, FAST

pytestmark = pytest.mark.timeout(90)

ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}


def _close_child(child: PooledChild) -> None:
    """No program will come: closing its fd 3 ends the parked child."""
    child.control.close()
    for fd in (child.stdout_fd, child.stderr_fd, child.pidfd):
        if fd >= 0:
            os.close(fd)


def test_a_zygotes_report_reaches_the_loop_that_waits_for_it_when_another_loop_forks(
    tmp_path,
):
    zygote = Zygote(sys.executable, ENV)
    dirs = [tmp_path / "a", tmp_path / "b"]
    for d in dirs:
        d.mkdir()
    waiting = threading.Event()
    seen: dict[str, Any] = {}

    def waits_in_a_loop_of_its_own() -> None:
        async def main() -> None:
            child = await zygote.fork("process", str(dirs[0]), ())
            assert await booted(child, 60)
            told = asyncio.get_running_loop().create_future()
            zygote.wait_status(child.pid, lambda: told.set_result(threading.get_ident()))
            seen["child"] = child
            waiting.set()
            seen["told in"] = await asyncio.wait_for(told, 20)

        asyncio.run(main())

    thread = threading.Thread(target=waits_in_a_loop_of_its_own, daemon=True)
    try:
        thread.start()
        assert waiting.wait(30)
        # Another loop (this thread's) forks and ends while the first one waits: the
        # zygote's socket must still be watched for the first loop's report.
        other = asyncio.run(zygote.fork("process", str(dirs[1]), ()))
        _close_child(other)
        _close_child(seen["child"])  # its child exits: the zygote reports it
        thread.join(30)
        assert seen.get("told in") == thread.ident, (
            "the exit report of a child forked in one thread's loop was lost when another "
            f"thread's loop forked and ended: {seen}"
        )
    finally:
        zygote.close()
        for d in dirs:
            shutil.rmtree(d, ignore_errors=True)


def _watched(loop: asyncio.AbstractEventLoop) -> dict[int, tuple[int, int]]:
    """The fds ``loop`` watches (its own wakeup pipe left out), with the file each is."""
    own = loop._ssock.fileno()  # type: ignore[attr-defined]
    found = {}
    for key in loop._selector.get_map().values():  # type: ignore[attr-defined]
        if key.fd != own:
            st = os.fstat(key.fd)
            found[key.fd] = (st.st_dev, st.st_ino)
    return found


def _file(fd: int) -> tuple[int, int]:
    st = os.fstat(fd)
    return (st.st_dev, st.st_ino)


def _same(fd: int, file: tuple[int, int]) -> bool:
    try:
        st = os.fstat(fd)
    except OSError:
        return False
    return (st.st_dev, st.st_ino) == file


def test_a_close_from_another_thread_leaves_each_loops_watched_fds_to_that_loop(make_gateway):
    """A run's loop stands still (its thread busy) while another thread closes the
    gateway: every fd it watched (booting children, the zygote's socket) is still the file
    it was when it runs again; then the loop lets go of them itself."""
    for _ in range(10):  # until the pool is booting a child while the loop stands still
        gw = make_gateway(bindings=BINDINGS, limits=FAST, pool_size=1)
        standing, closed = threading.Event(), threading.Event()
        seen: dict[str, Any] = {}

        def in_a_thread(
            gw: Any = gw, standing: Any = standing, closed: Any = closed, seen: Any = seen
        ) -> None:
            async def main() -> None:
                seen["first"] = await gw.run("return await tools.add(1, 2)")
                seen["warm"] = await gw.run("return await tools.add(2, 3)")  # a refill
                loop = asyncio.get_running_loop()
                watched = seen["watched"] = _watched(loop)
                standing.set()
                closed.wait(30)  # the loop stands still while the gateway is closed
                seen["changed"] = [fd for fd, f in watched.items() if not _same(fd, f)]

            asyncio.run(main())

        thread = threading.Thread(target=in_a_thread, daemon=True)
        thread.start()
        assert standing.wait(60)
        pool = gw._pool
        # The files of the booting children's sockets (the loop watches copies of them).
        booting = {_file(c.control.fileno()) for c in pool._booting} if pool is not None else set()
        gw.close()
        closed.set()
        thread.join(30)
        assert not thread.is_alive()
        assert seen["first"].ok and seen["warm"].ok, seen
        assert seen["changed"] == [], (
            f"fds watched by a loop were closed under it by a close from another thread: "
            f"{seen['changed']} of {sorted(seen['watched'])}"
        )
        if booting & set(seen["watched"].values()):  # a child booting, watched by the loop
            break
    else:
        pytest.fail("the pool never had a child booting, watched, while the loop stood still")


@pytest.mark.parametrize("how", ["run_sync", "asyncio.run"])
def test_threads_sharing_a_gateway_get_every_run_right_and_leave_nothing(make_gateway, how):
    gw = make_gateway(bindings=BINDINGS, limits=FAST, pool_size=2)
    program = "return [await tools.add(i, 1) for i in range(3)]"
    results: list[Any] = []
    start = threading.Barrier(4, timeout=30)

    def runs() -> None:
        start.wait()
        for _ in range(12):
            if how == "run_sync":
                results.append(gw.run_sync(program))
            else:
                results.append(asyncio.run(gw.run(program)))

    threads = [threading.Thread(target=runs, daemon=True) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not [t for t in threads if t.is_alive()], "a run never returned"
    wrong = [r for r in results if not r.ok or r.value != [1, 2, 3]]
    assert len(results) == 48 and not wrong, wrong[:3]
    assert any(r.usage.get("warm") for r in results), "no run found a warm child"
    # make_gateway closes it; no_fd_leak and run_dir_base check what is left.


def _ends(fn: Any) -> bool:
    """Whether ``fn()`` returns within 20 s (in a daemon thread: a deadlock fails the test)."""
    thread = threading.Thread(target=fn, daemon=True)
    thread.start()
    thread.join(20)
    return not thread.is_alive()


def test_a_finalizer_inside_the_zygotes_or_cleanups_lock_does_not_deadlock() -> None:
    """A collection may come at any allocation, inside any lock of the gateway's, and run
    a dropped gateway's finalizer in that thread: its pool's close closes the zygote (the
    kernel's loop deadlocked in ``Zygote._ensure_reader``: the lock held around
    ``add_reader``, a collection there, the finalizer waiting for the same lock) and
    hands cleanups to ``off_loop``. Those locks are reentrant: the nested close runs."""
    from kernelgate.gateway import cleanups

    zygote = Zygote(sys.executable, ENV)

    def close_inside_its_lock() -> None:
        with zygote._lock:
            zygote.close()

    def off_loop_inside_its_lock() -> None:
        with cleanups._lock:
            cleanups.off_loop(lambda: None, "test-nested")

    try:
        assert _ends(close_inside_its_lock), "a zygote closed inside its own lock deadlocked"
        assert zygote.dead
        assert _ends(off_loop_inside_its_lock), "off_loop inside its own lock deadlocked"
        assert cleanups.join_off_loop(10)
    finally:
        zygote.close()
