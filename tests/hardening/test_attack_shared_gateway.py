"""Attacks on one gateway shared by several threads' event loops (kernelgate/gateway/loops.py,
docs/design.md "One gateway, several threads"): each thread runs its own loop (``run_sync``,
or ``asyncio.run`` of its own), and ``close()``, ``aclose()`` or ``interrupt()`` come from yet
another thread, at phases of the others' runs put there deterministically (a binding that
waits on an Event says a run is in a call), or at many phases of runs going on.

The claim attacked: every run is right (or ends "interrupted" once closed or interrupted),
none hangs, and after the close nothing is left: processes, fds, run directories, cgroups
(the ``hostile`` fixture), zygotes, binding threads. Warm (a pool) and cold (``pool_size=0``),
sync and async bindings, Python and TypeScript. Threads are daemons: a stuck run fails the
test, never the interpreter's exit.
"""

from __future__ import annotations

import asyncio
import os
import select
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from kernelgate import Gateway, Limits, RunResult
from kernelgate.gateway.sandbox import LEVELS
from kernelgate.kernels.python import ZYGOTE_LOADER
from tests.procs import live_children, pid_alive

from .conftest import at_levels

pytestmark = pytest.mark.timeout(120)

#: Long enough that a run ending in time was stopped, not timed out.
LONG = Limits(wall_seconds=60, kill_grace_seconds=0.3, cpu_seconds=30)
#: How long a thread may take to see its run end once it was stopped.
PROMPTLY = 15.0

WARM_COLD = pytest.mark.parametrize("pool_size", [1, 0], ids=["warm", "cold"])
#: Every sandbox level, each where this machine has it.
EACH_LEVEL = at_levels(*LEVELS)


@pytest.fixture(autouse=True)
def no_kernelgate_thread_left() -> Iterator[None]:
    """Set up before (so torn down after) ``hostile``, which closes the test's gateways:
    then none of their threads (binding threads, cleanups) may be left running."""
    yield
    left = [t for t in threading.enumerate() if t.name.startswith("kernelgate-")]
    assert not _joined(left), "kernelgate threads outlived the gateways' close()"


class Gate:
    """What a run's binding waits on: ``entered`` counts the calls in it; ``opened`` lets
    them all return (opened at the test's end whatever happened)."""

    def __init__(self) -> None:
        self.opened = threading.Event()
        self._cond = threading.Condition()
        self.entered = 0

    def _enter(self) -> None:
        with self._cond:
            self.entered += 1
            self._cond.notify_all()

    def block(self) -> str:  # a sync binding: holds a binding thread
        self._enter()
        return "opened" if self.opened.wait(30) else "timed out"

    async def ablock(self) -> str:  # an async binding: runs on the run's own loop
        self._enter()
        deadline = time.monotonic() + 30
        while not self.opened.is_set() and time.monotonic() < deadline:
            await asyncio.sleep(0.005)  # the binding's own wait, not the test's
        return "opened" if self.opened.is_set() else "timed out"

    def entered_in(self, count: int, timeout: float = 60) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: self.entered >= count, timeout)


@pytest.fixture
def switchy() -> Iterator[None]:
    """Threads switched every few microseconds (not 5 ms): a check-then-act on shared state
    that is not under a lock is interleaved far more often."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    yield
    sys.setswitchinterval(before)


@pytest.fixture
def gate() -> Iterator[Gate]:
    g = Gate()
    yield g
    g.opened.set()


class Worker:
    """A daemon thread running ``fn``; what it returned or raised is kept."""

    def __init__(self, fn: Callable[[], Any], name: str = "attack") -> None:
        self.value: Any = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._main, args=(fn,), name=name, daemon=True)
        self.thread.start()

    def _main(self, fn: Callable[[], Any]) -> None:
        try:
            self.value = fn()
        except BaseException as exc:  # reported by the test
            self.error = exc

    def join(self, timeout: float = PROMPTLY) -> Any:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), f"{self.thread.name}: still running (a hang)"
        if self.error is not None:
            raise self.error
        return self.value


def _zygotes() -> list[int]:
    """Zygotes that are children of this test process (alive)."""
    found = []
    for pid in live_children(os.getpid()):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read()
        except OSError:
            continue
        if ZYGOTE_LOADER.encode()[:40] in cmdline:
            found.append(pid)
    return found


def _binding_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("kernelgate-binding")]


def _joined(threads: list[threading.Thread], timeout: float = 10) -> list[str]:
    deadline = time.monotonic() + timeout
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    return [t.name for t in threads if t.is_alive()]


def _in_own_loop(gw: Gateway, program: str, **kwargs: Any) -> RunResult:
    """One run awaited in an ``asyncio.run`` of this thread's own (not run_sync)."""
    return asyncio.run(gw.run(program, **kwargs))


def _stopped(result: Any) -> bool:
    """A run that the close or interrupt stopped."""
    return isinstance(result, RunResult) and result.status == "interrupted"


# -- concurrent first runs ------------------------------------------------------------------


def test_concurrent_first_runs_make_one_pool_one_zygote_one_executor(hostile, switchy):
    """Fresh gateways, first runs from four threads at once: one pool, one zygote (a child
    of this process), one binding executor; after close none of them is left."""
    for _ in range(4):
        gw = hostile.gateway(pool_size=2, limits=LONG)
        start = threading.Barrier(4, timeout=30)
        pools: list[Any] = []

        def first(gw: Gateway = gw, start: threading.Barrier = start, pools: Any = pools) -> Any:
            start.wait()
            result = hostile.record(gw.run_sync("return await tools.add(1, 2)"))
            pools.append(gw._pool)
            return result

        workers = [Worker(first, f"first-{i}") for i in range(4)]
        results = [w.join(60) for w in workers]
        assert all(r.ok and r.value == 3 for r in results), results
        assert len({id(p) for p in pools}) == 1 and gw._pool is pools[0], (
            "concurrent first runs made several pools"
        )
        executor = gw._executor
        zygotes = _zygotes()
        assert len(zygotes) == 1, f"one pool, one zygote: {zygotes}"
        gw.close()
        assert _zygotes() == [], "a zygote outlived close()"
        assert not _joined(_binding_threads()), "binding threads outlived close()"
        assert executor is gw._executor or gw._executor is None


# -- closes from several threads at once ---------------------------------------------------


PROGRAM = "return await tools.block()"


@WARM_COLD
@pytest.mark.parametrize("closers", ["close x3", "close + aclose"])
def test_closes_from_several_threads_at_once(hostile, gate, switchy, pool_size, closers):
    """Three threads close the gateway at once (or close and aclose on a loop of its own),
    runs in a call on two others' loops: each close returns without raising, the runs end
    stopped, the binding threads and the zygote go."""
    for _ in range(6):
        gw = hostile.gateway(bindings={"block": gate.block}, pool_size=pool_size, limits=LONG)
        entered = gate.entered
        a = Worker(lambda gw=gw: hostile.record(gw.run_sync(PROGRAM)), "run_sync")
        b = Worker(lambda gw=gw: hostile.record(_in_own_loop(gw, PROGRAM)), "asyncio.run")
        assert gate.entered_in(entered + 2), "the runs never reached their call"
        start = threading.Barrier(3, timeout=30)

        def close(gw: Gateway = gw, start: threading.Barrier = start) -> None:
            start.wait()
            gw.close()

        def aclose(gw: Gateway = gw, start: threading.Barrier = start) -> None:
            async def main() -> None:
                start.wait()
                await gw.aclose()

            asyncio.run(main())

        ways = [close, close, close] if closers == "close x3" else [close, aclose, close]
        for w in [Worker(way, f"closer-{i}") for i, way in enumerate(ways)]:
            w.join(30)
        results = [a.join(), b.join()]
        assert all(_stopped(r) for r in results), results
        assert _zygotes() == []
    gate.opened.set()
    assert not _joined(_binding_threads()), "binding threads outlived close()"


# -- a thread that keeps its loop between runs -------------------------------------------------


@pytest.mark.parametrize("after", ["runs again", "closed unrun"])
def test_a_thread_keeping_its_loop_between_runs_then_a_close(hostile, after):
    """A thread keeps one loop for all its runs (``run_until_complete``, the loop idle in
    between: a request thread's own loop): its runs leave the pool refilling on that idle
    loop. Another thread closes the gateway; then the first runs its loop again and closes
    it, or closes it without running it again: nothing is left either way."""
    for _ in range(3):
        gw = hostile.gateway(pool_size=2, limits=LONG)
        ran, closed = threading.Event(), threading.Event()

        def keeper(gw: Gateway = gw, ran: threading.Event = ran,
                   closed: threading.Event = closed) -> list[Any]:  # fmt: skip
            loop = asyncio.new_event_loop()
            out: list[Any] = []
            try:
                for _ in range(2):
                    out.append(hostile.record(loop.run_until_complete(_run_finished(gw))))
                ran.set()
                assert closed.wait(30)
                if after == "runs again":
                    try:
                        loop.run_until_complete(gw.run("return 6"))
                    except RuntimeError as exc:
                        out.append(exc)
                    loop.run_until_complete(asyncio.sleep(0))
            finally:
                loop.close()
            return out

        k = Worker(keeper, "keeper")
        assert ran.wait(60)
        Worker(gw.close, "closer").join(30)
        closed.set()
        out = k.join(30)
        assert [r.value for r in out[:2]] == [5, 5], out
        assert _zygotes() == []


def test_runs_go_on_after_a_kept_loop_is_closed_with_the_refill_on_it(hostile):
    """A thread's kept loop is closed (unrun) while the pool's refill may wait on it;
    other threads' runs then get every run right, warm again once the pool refills."""
    for _ in range(3):
        gw = hostile.gateway(pool_size=1, limits=LONG)

        def keeper(gw: Gateway = gw) -> list[Any]:
            loop = asyncio.new_event_loop()
            try:
                return [
                    hostile.record(loop.run_until_complete(_run_finished(gw))).value
                    for _ in range(2)
                ]
            finally:
                loop.close()

        assert Worker(keeper, "keeper").join(60) == [5, 5]
        after = [Worker(lambda gw=gw: hostile.record(gw.run_sync("return 1"))) for _ in range(2)]
        after += [Worker(lambda gw=gw: hostile.record(_in_own_loop(gw, "return 1")))]
        results = [w.join(60) for w in after]
        assert all(r.ok and r.value == 1 for r in results), results
        gw.close()
        assert _zygotes() == []


async def _run_finished(gw: Gateway, program: str = "return 5") -> RunResult:
    """A run, and its teardown awaited (what a loop kept between runs must do itself)."""
    result = await gw.run(program)
    await gw.wait_finished()
    return result


def test_one_thread_keeping_its_loop_then_closing_the_gateway_and_the_loop(hostile):
    """No other thread at all: runs with ``run_until_complete`` on a loop kept between
    them, then ``close()`` from the same thread (its loop idle, the pool's refill booting
    on it), then the loop closed: nothing is left (the close discards the booting
    children, whose boots that idle loop would never finish)."""
    for _ in range(4):
        gw = hostile.gateway(pool_size=2, limits=LONG)
        loop = asyncio.new_event_loop()
        try:
            for _ in range(2):
                assert hostile.record(loop.run_until_complete(_run_finished(gw))).value == 5
            gw.close()
        finally:
            loop.close()
        assert _zygotes() == []
        leftover = [d for d in os.listdir(hostile.base) if "-pool-" in d]
        assert leftover == [], f"the booting children's run directories are left: {leftover}"


# -- close from a third thread, a call in flight in two loops --------------------------------


@EACH_LEVEL
@WARM_COLD
@pytest.mark.parametrize("binding", ["sync", "async"])
def test_close_from_a_third_thread_while_calls_are_in_flight(
    hostile, gate, level, pool_size, binding
):
    gw = hostile.gateway(
        bindings={"block": gate.block if binding == "sync" else gate.ablock},
        pool_size=pool_size,
        limits=LONG,
        sandbox=level,
    )
    program = "return await tools.block()"
    a = Worker(lambda: hostile.record(gw.run_sync(program)), "run_sync")
    b = Worker(lambda: hostile.record(_in_own_loop(gw, program)), "asyncio.run")
    assert gate.entered_in(2), "the runs never reached their call"
    closer = Worker(gw.close, "closer")
    closer.join()
    results = [a.join(), b.join()]  # the gate is still shut: stopped, not answered
    assert all(_stopped(r) for r in results), results
    assert _zygotes() == []


# -- interrupt from another thread ----------------------------------------------------------


@WARM_COLD
def test_interrupt_from_another_thread_ends_every_loops_run(hostile, gate, pool_size):
    gw = hostile.gateway(bindings={"entered": gate._enter}, pool_size=pool_size, limits=LONG)
    program = "import time\nawait tools.entered()\ntime.sleep(50)\nreturn 'slept'"
    workers = [
        Worker(lambda: hostile.record(gw.run_sync(program)), "run_sync-1"),
        Worker(lambda: hostile.record(gw.run_sync(program)), "run_sync-2"),
        Worker(lambda: hostile.record(_in_own_loop(gw, program)), "asyncio.run"),
    ]
    assert gate.entered_in(3), "the runs never started"
    assert Worker(gw.interrupt, "interrupter").join() == 3
    results = [w.join() for w in workers]
    assert all(_stopped(r) for r in results), results
    # The gateway goes on serving every thread.
    again = [Worker(lambda: hostile.record(gw.run_sync("return 7"))) for _ in range(2)]
    assert [w.join(60).value for w in again] == [7, 7]


# -- the zygote killed while two threads run -------------------------------------------------


def test_zygote_killed_while_two_threads_run(hostile):
    gw = hostile.gateway(pool_size=2, limits=LONG)
    killed = threading.Event()
    ran = [threading.Event(), threading.Event()]
    program = "return [await tools.add(i, 1) for i in range(3)]"

    def runs(i: int, how: Callable[[str], RunResult]) -> list[RunResult]:
        out = [hostile.record(how(program))]
        ran[i].set()
        assert killed.wait(30)
        out += [hostile.record(how(program)) for _ in range(6)]
        return out

    a = Worker(lambda: runs(0, gw.run_sync), "run_sync")
    b = Worker(lambda: runs(1, lambda p: _in_own_loop(gw, p)), "asyncio.run")
    assert ran[0].wait(60) and ran[1].wait(60)
    pool = gw._pool
    assert pool is not None and pool._zygote is not None
    old = pool._zygote.pid
    pidfd = os.pidfd_open(old)
    try:
        os.kill(old, signal.SIGKILL)
        # Dead, not only signalled: a run taking a child between the kill and the death
        # gets one that dies under it (PR_SET_PDEATHSIG), which no pool can tell.
        assert select.select([pidfd], [], [], 30)[0]
    finally:
        os.close(pidfd)
    killed.set()
    results = a.join(90) + b.join(90)
    wrong = [r for r in results if not r.ok or r.value != [1, 2, 3]]
    assert not wrong, wrong[:3]
    assert pool.zygote_restarts >= 1 or pool.cold_fallbacks > 0, "the kill was never seen"
    gw.close()
    assert _zygotes() == [] and not pid_alive(old)


def test_zygote_killed_while_runs_are_in_flight_in_two_loops(hostile, gate):
    """Killed with a run in its child on each of two loops: those runs end (their children
    die with the zygote), nothing hangs; the next runs of both threads are right."""
    gw = hostile.gateway(bindings={"block": gate.block, "add": lambda a, b: a + b},
                         pool_size=2, limits=LONG)  # fmt: skip
    warmed = [Worker(lambda: gw.run_sync("return 1")) for _ in range(2)]
    assert [w.join(60).value for w in warmed] == [1, 1]
    program = "return await tools.block()"
    a = Worker(lambda: hostile.record(gw.run_sync(program)), "run_sync")
    b = Worker(lambda: hostile.record(_in_own_loop(gw, program)), "asyncio.run")
    assert gate.entered_in(2)
    os.kill(gw._pool._zygote.pid, signal.SIGKILL)  # type: ignore[union-attr]
    first = [a.join(), b.join()]
    # Its children die with it (PR_SET_PDEATHSIG): a warm run ends, not answered "opened";
    # a cold one (the pool was empty) is answered once the gate opens.
    gate.opened.set()
    after = [
        Worker(lambda: hostile.record(gw.run_sync("return await tools.add(2, 2)"))),
        Worker(lambda: hostile.record(_in_own_loop(gw, "return await tools.add(2, 2)"))),
    ]
    assert [w.join(60).value for w in after] == [4, 4]
    assert all(isinstance(r, RunResult) for r in first), first


# -- a loop ending while another waits for the zygote ---------------------------------------


@pytest.mark.parametrize("binding", ["sync", "async"])
def test_loops_ending_while_another_loops_run_waits_for_its_childs_report(hostile, gate, binding):
    """Thread B's run waits in a call; thread A's short loops fork refills and end, each
    (asyncio.run returning) while B still needs the zygote's report of its child's exit."""
    gw = hostile.gateway(
        bindings={"block": gate.block if binding == "sync" else gate.ablock,
                  "add": lambda a, b: a + b},
        pool_size=2, limits=LONG,
    )  # fmt: skip
    b = Worker(lambda: hostile.record(_in_own_loop(gw, "return await tools.block()")), "B")
    assert gate.entered_in(1)
    for _ in range(6):
        r = Worker(lambda: hostile.record(_in_own_loop(gw, "return await tools.add(1, 1)")))
        assert r.join(60).value == 2
    gate.opened.set()
    result = b.join(30)
    assert result.ok and result.value == "opened", result


# -- aclose on one loop while others run ------------------------------------------------------


@WARM_COLD
def test_aclose_on_one_loop_while_other_threads_runs_go_on(hostile, gate, pool_size):
    gw = hostile.gateway(bindings={"block": gate.block}, pool_size=pool_size, limits=LONG)
    program = "return await tools.block()"
    a = Worker(lambda: hostile.record(gw.run_sync(program)), "run_sync")
    b = Worker(lambda: hostile.record(_in_own_loop(gw, program)), "asyncio.run")
    assert gate.entered_in(2)

    async def closing() -> None:
        # A run of this loop too: aclose waits for its own loop's runs.
        mine = asyncio.ensure_future(gw.run(program))
        while gate.entered < 3:
            await asyncio.sleep(0.01)
        await gw.aclose()
        assert _stopped(hostile.record(await mine))

    Worker(lambda: asyncio.run(closing()), "acloser").join(30)
    results = [a.join(), b.join()]
    assert all(_stopped(r) for r in results), results
    assert _zygotes() == []


# -- close at a refill's boot, the booting loop running on ------------------------------------


def test_close_while_another_loops_refill_boots_and_that_loop_runs_on(hostile):
    """Thread A's run returns with its pool refilling (children booting, watched by A's
    loop), and A's loop goes on running other work while the gateway is closed from here:
    A's loop goes on, refuses its next run (closed), and when it ends nothing is left."""
    for _ in range(5):
        gw = hostile.gateway(pool_size=2, limits=LONG)
        booting = threading.Event()
        closed: dict[str, Any] = {}

        async def main(gw: Gateway = gw, booting: threading.Event = booting,
                       closed: dict[str, Any] = closed) -> Any:  # fmt: skip
            loop = asyncio.get_running_loop()
            done = closed["future"] = loop.create_future()
            hostile.record(await gw.run("return 1"))
            booting.set()
            await asyncio.wait_for(done, 30)  # the loop runs on while the gateway is closed
            try:
                await gw.run("return 2")
            except RuntimeError as exc:
                return str(exc)
            return "ran on a closed gateway"

        a = Worker(lambda main=main: asyncio.run(main()), "A")
        assert booting.wait(60)
        gw.close()
        fut = closed["future"]
        fut.get_loop().call_soon_threadsafe(fut.set_result, None)
        assert "closed" in a.join(30)
        assert _zygotes() == []


# -- close at many phases ---------------------------------------------------------------------


@EACH_LEVEL
@WARM_COLD
def test_close_at_many_phases_of_two_threads_runs(hostile, level, pool_size):
    """Two threads run on and on (run_sync, asyncio.run); the close comes after k runs of
    one of them, k = 0..5: every run is right, stopped, or refused (closed); none hangs."""
    program = "return [await tools.add(i, 1) for i in range(2)]"
    for k in range(6):
        gw = hostile.gateway(pool_size=pool_size, limits=LONG, sandbox=level)
        after_k = threading.Event()

        def runs(how: Callable[[str], RunResult], signal_at: int | None, gw: Any = gw,
                 after_k: threading.Event = after_k) -> list[Any]:  # fmt: skip
            out: list[Any] = []
            for i in range(30):
                if i == signal_at:
                    after_k.set()
                try:
                    out.append(hostile.record(how(program)))
                except RuntimeError as exc:
                    out.append(exc)
                    break
            return out

        a = Worker(lambda gw=gw, k=k: runs(gw.run_sync, k), "run_sync")
        b = Worker(lambda gw=gw: runs(lambda p: _in_own_loop(gw, p), None), "asyncio.run")
        assert after_k.wait(60)
        Worker(gw.close, "closer").join(30)
        outcomes = a.join(60) + b.join(60)
        wrong = [
            o for o in outcomes
            if not (isinstance(o, RuntimeError) and "closed" in str(o))
            and not _stopped(o)
            and not (o.ok and o.value == [1, 2])
        ]  # fmt: skip
        assert not wrong, (k, wrong[:3])
        assert isinstance(outcomes[-1], RuntimeError), "a thread's runs never saw the close"
        assert _zygotes() == []


# -- TypeScript, a NodePool shared by threads -------------------------------------------------

NODE_MISSING = pytest.mark.skipif(
    Gateway is None or __import__("shutil").which("node") is None, reason="needs node"
)


def _node_gateway(hostile: Any, pool_size: int, **kwargs: Any) -> Gateway:
    try:
        return hostile.gateway(language="typescript", pool_size=pool_size, limits=LONG, **kwargs)
    except (OSError, RuntimeError, ValueError) as exc:
        pytest.skip(f"no TypeScript runtime here: {exc}")


@NODE_MISSING
@WARM_COLD
def test_typescript_threads_share_a_gateway_and_a_close_leaves_no_helper(hostile, gate, pool_size):
    """Two threads run TypeScript on their own loops (one asyncio.run without end_loop:
    its type-stripping helper is its loop's); the close comes while both wait in a call.
    Once their loops have ended nothing of theirs is left: no child, no helper."""
    gw = _node_gateway(hostile, pool_size, bindings={"block": gate.block})
    program = "const x: string = await tools.block();\nreturn x;"
    a = Worker(lambda: hostile.record(gw.run_sync(program)), "run_sync")
    b = Worker(lambda: hostile.record(_in_own_loop(gw, program)), "asyncio.run")
    assert gate.entered_in(2, 90), "the runs never reached their call"
    Worker(gw.close, "closer").join(30)
    results = [a.join(), b.join()]
    assert all(_stopped(r) for r in results), results
    assert live_children(os.getpid()) == [], "a Node child or helper outlived close()"


@NODE_MISSING
@pytest.mark.xfail(
    strict=False,
    reason="open fault: now and then a warm TypeScript run from one of three threads ended "
    "'worker_exit' (SIGKILL 'from outside', calls=0, 18-45 ms in): 4 of 17 runs of this "
    "whole file on a loaded machine, never alone or single-threaded; 0 of 8 on a quiet one. "
    "Ways to that shape closed since: the type-stripping helper killed by a freed pid "
    "(tests/node/test_helper_pid_reuse.py), a cancelled teardown emptying the cgroup it had "
    "given back to the pool, and the other freed numbers of "
    "tests/hardening/test_attack_number_reuse.py; not seen since (12 whole-file runs), not "
    "proven gone",
)
def test_typescript_runs_from_threads_are_right(hostile):
    gw = _node_gateway(hostile, 1, bindings={"add": lambda a, b: a + b})
    program = "const n: number = await tools.add(2, 3);\nreturn n;"
    start = threading.Barrier(3, timeout=30)

    def runs(how: Callable[[str], RunResult]) -> list[Any]:
        start.wait()
        return [hostile.record(how(program)) for _ in range(4)]

    workers = [
        Worker(lambda: runs(gw.run_sync)),
        Worker(lambda: runs(gw.run_sync)),
        Worker(lambda: runs(lambda p: _in_own_loop(gw, p))),
    ]
    results = [r for w in workers for r in w.join(120)]
    wrong = [(r, r.error, r.usage) for r in results if not r.ok or r.value != 5]
    assert not wrong, wrong[:3]
    gw.close()
    assert live_children(os.getpid()) == [], "a Node child or helper outlived close()"


@NODE_MISSING
def test_typescript_closes_from_several_threads_after_their_loops_ended(hostile, switchy):
    """Three threads each ran TypeScript in an ``asyncio.run`` of its own (no end_loop:
    each loop's type-stripping helper is left for the close to end); then three threads
    close at once: each close returns without raising and no helper is left."""
    for _ in range(12):
        gw = _node_gateway(hostile, 0)
        ran = [
            Worker(lambda gw=gw: hostile.record(_in_own_loop(gw, "return 1;"))) for _ in range(3)
        ]
        assert [w.join(90).value for w in ran] == [1, 1, 1]
        start = threading.Barrier(3, timeout=30)

        def close(gw: Gateway = gw, start: threading.Barrier = start) -> None:
            start.wait()
            gw.close()

        for w in [Worker(close, f"closer-{i}") for i in range(3)]:
            w.join(30)
        assert live_children(os.getpid()) == [], "a type-stripping helper outlived close()"
