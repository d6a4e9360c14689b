"""Attacks on the binding thread a gateway keeps parked between runs and on the thread woken
on the loop's CPU (kernelgate/gateway/workers.py, docs/benchmarks.md "Speed round seven").

A gateway's last parked binding thread waits ``KEEP_S`` (30 s) for a job: whatever ends the
gateway (close, aclose, its collection, the interpreter's exit) must release it at once, from
any thread, under any lock a collection may run under, with calls in flight; and nothing of
a run may stay reachable from it. A thread parked ``PIN_AFTER_S`` or more is put on the
waker's CPU for its wakeup: every job must still run on every CPU its thread had (pool
threads, extra threads, chains, batches), and what a binding set for its own thread stays.
"""

from __future__ import annotations

import asyncio
import gc
import os
import subprocess
import sys
import textwrap
import threading
import time
import weakref
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from kernelgate import Gateway, Limits
from kernelgate.gateway import workers as workers_module
from kernelgate.gateway.workers import workers_for

from .test_attack_batches import Gate
from .test_attack_threads import _binding_threads, _joined

pytestmark = pytest.mark.timeout(90)

#: An idle spell: several times the time a thread parks unkept (``IDLE_S``) and the time
#: after which a woken thread is moved to the waker's CPU. The scenario, not a wait.
SPELL_S = max(5 * workers_module.IDLE_S, 5 * workers_module.PIN_AFTER_S)
#: A pause inside a program: long enough for a parked thread to be moved when woken,
#: short enough that an unkept parked thread is still there (``IDLE_S``).
PAUSE_S = min(4 * workers_module.PIN_AFTER_S, workers_module.IDLE_S / 2)

FAST_ENOUGH = Limits(wall_seconds=20, kill_grace_seconds=0.5)

TWO_CPUS = pytest.mark.skipif(
    len(os.sched_getaffinity(0)) < 2, reason="one CPU: a woken thread is never moved"
)


@pytest.fixture
def gate() -> Iterator[Gate]:
    g = Gate()
    yield g
    g.event.set()


def _src(body: str) -> str:
    return "import asyncio\n" + textwrap.dedent(body)


#: The last thread seen with each id (an id is reused once its thread has ended: an earlier
#: thread of the same id is over).
_RAN: dict[int, threading.Thread] = {}


def _note() -> int:
    """In a binding (or job): record the thread it runs in; its id."""
    me = threading.current_thread()
    _RAN[threading.get_ident()] = me
    return threading.get_ident()


def _where() -> list[Any]:
    """A sync binding: its thread's id and name, and the CPUs that thread may run on."""
    return [_note(), threading.current_thread().name, sorted(os.sched_getaffinity(0))]


def _threads_of(idents: set[int]) -> list[threading.Thread]:
    return [_RAN[i] for i in idents]


def _gone(idents: set[int]) -> list[str]:
    """Join the threads with these ids (10 s in all, a third of ``KEEP_S``): the names of
    those still alive."""
    return _joined(_threads_of(idents))


def _released_at_once() -> list[str]:
    """The release threads a collection started, joined: those still alive."""
    return _joined([t for t in threading.enumerate() if t.name == "kernelgate-release"])


def _ok(result: Any) -> Any:
    assert result.ok, result
    return result.value


# -- the interpreter's exit -----------------------------------------------------------------

_EXIT_PRELUDE = """
import asyncio, sys, threading
from kernelgate import Gateway, Limits
from kernelgate.gateway import workers

workers.KEEP_S = 3600.0  # a release missed at exit would hang the exit for an hour

def add(a, b):
    return a + b

def make():
    return Gateway(bindings={"add": add}, limits=Limits(wall_seconds=20), tmp_dir=sys.argv[1])

CHAIN = "t = 0\\nfor i in range(20):\\n    t = await tools.add(t, i)\\nreturn t"
"""

#: The scenario's end: an idle spell, after which the last parked thread is kept (waits for
#: KEEP_S); without it, the exit would find that thread still in its IDLE_S wait.
_EXIT_SPELL = "\nimport time\ntime.sleep(0.3)\n"

_EXIT_SCENARIOS = {
    # A gateway in a module global, used from synchronous code, never closed: freed (if
    # ever) after threading's exit hooks, when nothing may start a thread any more.
    "module-global": """
        gw = make()
        print(gw.run_sync(CHAIN).value, flush=True)
        """,
    # Made and used inside asyncio.run, returned, never closed; one of its runs a chain.
    "asyncio-run": """
        async def main():
            gw = make()
            r = await gw.run(CHAIN)
            await gw.run("return await asyncio.gather(*[tools.add(i, 1) for i in range(8)])")
            print(r.value, flush=True)
            return gw
        kept = asyncio.run(main())
        """,
    # Used from two event loops one after the other and from run_sync.
    "several-loops": """
        gw = make()
        asyncio.run(gw.run("return await tools.add(1, 1)"))
        asyncio.run(gw.run(CHAIN))
        print(gw.run_sync(CHAIN).value, flush=True)
        """,
    # Used from a thread's own loop, which has ended; the gateway lives on in the thread's
    # target's closure.
    "another-thread": """
        gw = make()
        out = []
        t = threading.Thread(target=lambda: out.append(gw.run_sync(CHAIN).value))
        t.start(); t.join()
        print(out[0], flush=True)
        """,
    # Closed inside the loop with aclose (the release from there), a second one left open.
    "aclose-and-open": """
        async def main():
            a, b = make(), make()
            r = await a.run(CHAIN)
            await b.run(CHAIN)
            await a.aclose()
            print(r.value, flush=True)
            return b
        kept = asyncio.run(main())
        """,
}


def _exit(tmp_path: Any, body: str) -> subprocess.CompletedProcess[str]:
    """Run ``body`` after the prelude in a fresh interpreter: 30 s is far more than it
    takes, far less than ``KEEP_S`` there."""
    script = _EXIT_PRELUDE + textwrap.dedent(body) + _EXIT_SPELL
    try:
        return subprocess.run(
            [sys.executable, "-c", script, str(tmp_path)],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"the interpreter did not exit; it printed {exc.stdout!r}") from None


@pytest.mark.timeout(60)
@pytest.mark.parametrize("scenario", list(_EXIT_SCENARIOS))
def test_the_interpreter_exits_at_once_whatever_kept_a_thread(tmp_path, scenario) -> None:
    done = _exit(tmp_path, _EXIT_SCENARIOS[scenario])
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["190"]
    # Nothing was printed on the way out (a release thread refused at shutdown, say).
    assert "Exception ignored" not in done.stderr and "Traceback" not in done.stderr, done.stderr


@pytest.mark.timeout(60)
def test_a_gateway_first_used_while_the_interpreter_exits_does_not_hang_the_exit(tmp_path) -> None:
    # threading runs its exit hooks last registered first: kernelgate's release, then this
    # one (registered before the first gateway's thread is kept), then concurrent.futures',
    # which joins every executor's threads. A gateway whose threads start in between (a
    # daemon thread serving a request as the interpreter exits) must not keep one.
    done = _exit(
        tmp_path,
        """
        def late():
            gw = make()
            print(gw.run_sync(CHAIN).value, flush=True)
            globals()["late_gw"] = gw

        threading._register_atexit(late)
        print(make().run_sync(CHAIN).value, flush=True)  # kernelgate's hook is now registered
        """,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["190", "190"]


# -- close, aclose, collection -----------------------------------------------------------


@pytest.mark.timeout(60)
def test_a_gateway_closed_while_its_call_blocks_ends_that_thread_once_it_returns(hostile, gate):
    inside = threading.Event()
    idents: set[int] = set()

    def block() -> str:
        idents.add(_note())
        inside.set()
        return gate.wait(20)

    gw = hostile.gateway(bindings={"block": block, "where": _where})
    _ok(gw.run_sync("return await tools.where()"))  # the thread the call will find kept
    time.sleep(SPELL_S)
    results: list[Any] = []
    runner = threading.Thread(
        target=lambda: results.append(gw.run_sync(_src("return await tools.block()")))
    )
    runner.start()
    assert inside.wait(20), "the call never reached its binding"
    gw.close()  # from another thread than the run's loop, while the call blocks
    runner.join(20)
    assert not runner.is_alive(), "the run outlived its closed gateway"
    assert results and results[0].status == "interrupted", results
    gate.event.set()  # the binding returns now: its thread goes, not kept for KEEP_S
    assert not _gone(idents), "the binding thread outlived its closed gateway"
    assert not _joined(_binding_threads())


@pytest.mark.timeout(60)
def test_a_gateway_closed_during_a_chain_of_calls_leaves_no_thread(hostile):
    first = threading.Event()
    idents: set[int] = set()

    def add(a: int, b: int) -> int:
        idents.add(_note())
        first.set()
        return a + b

    gw = hostile.gateway(bindings={"add": add})
    chain = _src(
        """
        t = 0
        for i in range(100000):
            t = await tools.add(t, 1)
        return t
        """
    )
    results: list[Any] = []
    runner = threading.Thread(target=lambda: results.append(gw.run_sync(chain)))
    runner.start()
    assert first.wait(20), "the chain never started"
    gw.close()
    runner.join(20)
    assert not runner.is_alive(), "the chain's run outlived its closed gateway"
    assert results and results[0].status == "interrupted", results
    assert not _gone(idents), "a binding thread outlived its closed gateway"
    assert not _joined(_binding_threads())


@pytest.mark.timeout(60)
def test_aclose_in_the_loop_that_ran_chains_and_batches_leaves_no_thread(hostile):
    gw = hostile.gateway(bindings={"where": _where})

    async def main() -> set[int]:
        seen = set()
        for program in (
            "return [await tools.where() for _ in range(10)]",
            "return await asyncio.gather(*[tools.where() for _ in range(10)])",
        ):
            seen |= {w[0] for w in _ok(await gw.run(_src(program)))}
            await asyncio.sleep(SPELL_S)
        await gw.aclose()
        return seen

    idents = asyncio.run(main())
    assert not _gone(idents), "a binding thread outlived aclose"


@pytest.mark.timeout(60)
def test_the_kept_thread_serves_every_event_loop_and_goes_with_close(hostile):
    gw = hostile.gateway(bindings={"where": _where})
    one = "return await tools.where()"
    first = _ok(gw.run_sync(one))[0]
    seen = {first}
    for use in ("asyncio.run", "run_sync", "thread"):
        time.sleep(SPELL_S)  # the unkept threads are gone: the kept one serves the call
        if use == "asyncio.run":
            seen.add(_ok(asyncio.run(gw.run(one)))[0])
        elif use == "run_sync":
            seen.add(_ok(gw.run_sync(one))[0])
        else:
            out: list[Any] = []
            t = threading.Thread(target=lambda out=out: out.append(gw.run_sync(one)))
            t.start()
            t.join(20)
            seen.add(_ok(out[0])[0])
    assert seen == {first}, "a loop's first call after an idle spell did not find the kept thread"
    time.sleep(SPELL_S)  # kept again: close must release it
    gw.close()
    assert not _gone(seen)


@pytest.mark.timeout(60)
def test_a_close_racing_runs_submitted_from_other_threads_leaves_no_thread(hostile):
    gw = hostile.gateway(bindings={"where": _where})
    started = threading.Barrier(4, timeout=20)
    idents: set[int] = set()
    errors: list[BaseException] = []

    def runs() -> None:
        started.wait()
        for _ in range(50):
            try:
                r = gw.run_sync(_src("return [await tools.where() for _ in range(5)]"))
            except RuntimeError:
                return  # closed: refused, as it should
            if r.ok:
                idents.update(w[0] for w in r.value)
            elif r.status != "interrupted":
                errors.append(AssertionError(f"{r!r}: {r.message}"))
                return

    # Daemon threads: a run that never returns fails the test, not the interpreter's exit.
    threads = [threading.Thread(target=runs, daemon=True) for _ in range(3)]
    for t in threads:
        t.start()
    started.wait()
    _ok(gw.run_sync(_src("return await tools.where()")))  # the others are running meanwhile
    gw.close()
    assert not _joined(threads), "a run outlived its closed gateway"
    assert not errors, errors
    assert not _gone(idents), "a binding thread outlived its closed gateway"
    assert not _joined(_binding_threads())


@pytest.mark.timeout(60)
def test_gateways_dropped_in_a_loop_leave_no_thread_and_nothing_alive(hostile):
    gc.collect()
    gc.disable()  # reference counting only: what a kept thread holds stays alive
    try:
        idents: set[int] = set()
        refs: list[weakref.ref[Any]] = []
        for _ in range(6):
            gw = Gateway(
                bindings={"where": _where}, limits=FAST_ENOUGH, tmp_dir=hostile.base, pool_size=0
            )
            r = gw.run_sync(_src("return await asyncio.gather(*[tools.where() for _ in range(3)])"))
            idents.update(w[0] for w in _ok(r))
            refs += [weakref.ref(gw), weakref.ref(workers_for(gw._binding_threads()))]
            time.sleep(SPELL_S)  # its last thread is kept now: the drop must release it
            del gw, r
        assert not _gone(idents), "a dropped gateway's binding thread is still alive"
        assert not _released_at_once()
        assert [ref() for ref in refs] == [None] * len(refs), "a dropped gateway stays alive"
    finally:
        gc.enable()


@pytest.mark.timeout(60)
def test_a_parked_thread_holds_nothing_of_the_run_it_served(hostile):
    # The kept thread lives on for KEEP_S: neither the run's loop nor its binding's
    # arguments or value may stay reachable from it (they would live as long).
    class Arg:
        pass

    held: list[weakref.ref[Any]] = []

    def take(x: int) -> int:
        value = Arg()
        held.append(weakref.ref(value))
        return x

    gw = hostile.gateway(bindings={"take": take}, pool_size=0)  # a warm pool holds its loop

    async def main() -> Any:
        held.append(weakref.ref(asyncio.get_running_loop()))
        return await gw.run(_src("return [await tools.take(i) for i in range(3)]"))

    assert _ok(asyncio.run(main())) == [0, 1, 2]
    time.sleep(SPELL_S)
    workers = workers_for(gw._binding_threads())
    assert len(workers._parked) == 1, "no thread was kept"
    gc.collect()  # the parked thread's frames are roots: what they hold survives this
    assert [ref() for ref in held] == [None] * len(held), "the kept thread holds a run's objects"


@pytest.mark.timeout(60)
def test_a_gateway_collected_inside_a_binding_of_another_releases_its_thread(hostile):
    # gc.collect() in a binding: the weakref callback runs in a binding thread, beside
    # the loop that handed it the job, while calls of the other gateway go on.
    dropped = hostile.gateway(bindings={"where": _where}, pool_size=0)
    kept_ident = _ok(dropped.run_sync("return await tools.where()"))[0]
    dropped.cycle = dropped  # only a collection frees it
    hostile.gateways.remove(dropped)
    ref = weakref.ref(dropped)
    del dropped
    assert ref() is not None

    def collect() -> int:
        return gc.collect()

    gw = hostile.gateway(bindings={"collect": collect, "where": _where})
    got = _ok(gw.run_sync(_src("a = await tools.collect()\nreturn await tools.where()")))
    assert got[0] != kept_ident
    assert ref() is None, "the dropped gateway was not collected"
    assert not _gone({kept_ident}), "the collected gateway's kept thread is still alive"
    assert not _released_at_once()


# A thread that collects without pause holds the GIL for most of each run: 20 runs took
# over 60 s once on a slow VM (2 s on a quiet one). A deadlock is still caught at 180.
@pytest.mark.timeout(180)
def test_collections_in_another_thread_while_calls_are_submitted_do_not_deadlock(hostile):
    # Executors with a kept thread, dropped in cycles and collected in a thread of their
    # own, while a gateway's runs submit calls on the main thread.
    stop = threading.Event()
    threads: list[threading.Thread] = []  # the churned executors' (ids are reused)

    def churn() -> None:
        while not stop.is_set():
            ex = ThreadPoolExecutor(2, thread_name_prefix="kernelgate-binding-churn")
            workers = workers_for(ex)
            workers.keep_one()
            done = threading.Event()
            workers.submit(lambda d=done: (threads.append(threading.current_thread()), d.set()))
            done.wait(10)
            ex.cycle = ex  # type: ignore[attr-defined]
            del ex, workers
            gc.collect()

    churner = threading.Thread(target=churn)
    churner.start()
    try:
        gw = hostile.gateway(bindings={"where": _where})
        for _ in range(20):
            r = gw.run_sync(_src("return await asyncio.gather(*[tools.where() for _ in range(4)])"))
            _ok(r)
    finally:
        stop.set()
        churner.join(20)
    assert not churner.is_alive(), "the collecting thread is stuck"
    assert threads, "no executor was collected"
    assert not _joined(threads), "a collected executor's kept thread is still alive"
    assert not _released_at_once()


@pytest.mark.timeout(60)
def test_an_executor_dropped_while_the_workers_lock_is_held_releases_its_thread() -> None:
    # The weakref callback runs where the last reference goes: here in a thread that holds
    # the workers' own lock (as a collection inside submit would).
    ex = ThreadPoolExecutor(1, thread_name_prefix="kernelgate-binding-locked")
    workers = workers_for(ex)
    workers.keep_one()
    done = threading.Event()
    idents: set[int] = set()
    workers.submit(lambda: (idents.add(_note()), done.set()))
    assert done.wait(10)
    time.sleep(SPELL_S)
    assert len(workers._parked) == 1
    with workers._lock:
        del ex  # the callback runs now, in this thread, under the lock
    del workers
    assert not _gone(idents), "the kept thread outlived its executor"
    assert not _released_at_once()


@pytest.mark.timeout(60)
def test_an_executor_dropped_while_its_kept_thread_runs_a_job_lets_it_go_after(gate) -> None:
    ex = ThreadPoolExecutor(1, thread_name_prefix="kernelgate-binding-running")
    workers = workers_for(ex)
    workers.keep_one()
    inside = threading.Event()
    idents: set[int] = set()

    def job() -> None:
        idents.add(_note())
        inside.set()
        gate.wait(20)

    workers.submit(job)
    assert inside.wait(10)
    del ex  # collected while its one thread runs a job: nothing parked to release yet
    assert not _released_at_once()
    gate.event.set()  # the job ends, the thread parks: it must not be kept for KEEP_S
    del workers
    assert not _gone(idents), "the thread of a collected executor was kept after its job"


# -- the woken thread's CPUs ------------------------------------------------------------


def _cpus_seen(values: list[Any]) -> set[tuple[int, ...]]:
    return {tuple(w[2]) for w in values}


@TWO_CPUS
@pytest.mark.timeout(60)
@pytest.mark.parametrize("shape", ["chain", "batches"])
def test_every_call_after_a_pause_runs_on_every_cpu(hostile, shape):
    mine = tuple(sorted(os.sched_getaffinity(0)))
    gw = hostile.gateway(bindings={"where": _where})
    if shape == "chain":
        body = "for _ in range(8):\n    out.append(await tools.where())\n    await asyncio.sleep(P)"
    else:
        body = (
            "for _ in range(6):\n"
            "    out += await asyncio.gather(*[tools.where() for _ in range(4)])\n"
            "    await asyncio.sleep(P)"
        )
    program = _src(f"P = {PAUSE_S}\nout = []\n{body}\nreturn out")
    for _ in range(3):
        time.sleep(SPELL_S)
        assert _cpus_seen(_ok(gw.run_sync(program))) == {mine}


@TWO_CPUS
@pytest.mark.timeout(60)
def test_an_extra_threads_calls_after_pauses_run_on_every_cpu(hostile, gate):
    # max_threads=1 and another run holds the pool's thread: this run's calls go to its
    # extra thread, parked between them (each pause long enough to be moved when woken).
    mine = tuple(sorted(os.sched_getaffinity(0)))
    inside = threading.Event()

    def block() -> str:
        inside.set()
        return gate.wait(20)

    gw = hostile.gateway(bindings={"block": block, "where": _where}, max_threads=1)
    program = _src(
        f"out = []\nfor _ in range(8):\n    out.append(await tools.where())\n"
        f"    await asyncio.sleep({PAUSE_S})\nreturn out"
    )

    async def main() -> list[Any]:
        holder = asyncio.ensure_future(gw.run(_src("return await tools.block()")))
        await asyncio.get_running_loop().run_in_executor(None, inside.wait, 20)
        try:
            return list(_ok(await gw.run(program)))
        finally:
            gate.event.set()
            assert (await holder).value == "released"

    out = asyncio.run(main())
    assert all("-extra_" in w[1] for w in out), [w[1] for w in out]
    assert _cpus_seen(out) == {mine}


@TWO_CPUS
@pytest.mark.timeout(60)
def test_what_a_binding_sets_for_its_own_thread_is_what_it_finds_after_a_spell(hostile):
    # The pin gives back what the thread had: a set the binding narrowed itself is neither
    # widened to the process's nor left on the waker's CPU.
    mine = sorted(os.sched_getaffinity(0))

    def narrow(cpus: list[int]) -> int:
        os.sched_setaffinity(0, cpus)
        return _note()

    gw = hostile.gateway(bindings={"narrow": narrow, "where": _where}, max_threads=1)
    try:
        for cpus in ([mine[0]], [mine[-1]], mine[:2]):
            ident = _ok(gw.run_sync(_src(f"return await tools.narrow({cpus})")))
            time.sleep(SPELL_S)
            got = _ok(gw.run_sync(_src("return await tools.where()")))
            assert got[0] == ident, "the kept thread did not serve the call"
            assert got[2] == sorted(cpus)
    finally:
        _ok(gw.run_sync(_src(f"return await tools.narrow({mine})")))


# -- fairness ------------------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_a_run_blocked_in_the_kept_thread_does_not_starve_another(hostile, gate):
    # One thread in the pool, kept through the spell: the first run takes it and blocks
    # until the second run's synchronous call opens the gate.
    inside = threading.Event()

    def block() -> str:
        inside.set()
        return gate.wait(20)

    gw = hostile.gateway(
        bindings={"block": block, "release": gate.release, "where": _where}, max_threads=1
    )
    kept = _ok(gw.run_sync(_src("return await tools.where()")))[0]
    time.sleep(SPELL_S)

    async def main() -> list[Any]:
        a = asyncio.ensure_future(gw.run(_src("return await tools.block()")))
        await asyncio.get_running_loop().run_in_executor(None, inside.wait, 20)
        b = await gw.run(_src("await tools.release()\nreturn await tools.where()"))
        return [await a, b]

    a, b = asyncio.run(main())
    assert _ok(a) == "released"
    _ok(b)
    assert kept


@pytest.mark.timeout(60)
def test_an_executor_shuts_down_at_once_after_a_close_that_raced_submits() -> None:
    # Jobs submitted from several threads while the workers close: whatever thread parks
    # after the close is not kept, so the executor's shutdown (which joins its threads)
    # returns long before KEEP_S.
    ex = ThreadPoolExecutor(4, thread_name_prefix="kernelgate-binding-race")
    workers = workers_for(ex)
    workers.keep_one()
    go = threading.Barrier(5, timeout=20)
    ran: list[int] = []

    def submitter() -> None:
        go.wait()
        for i in range(300):
            workers.submit(lambda i=i: ran.append(i))
            if i % 50 == 0:
                time.sleep(SPELL_S / 4)  # short idle spells: threads park, one is kept

    threads = [threading.Thread(target=submitter) for _ in range(4)]
    for t in threads:
        t.start()
    go.wait()
    time.sleep(SPELL_S)
    workers.close()
    assert not _joined(threads)
    time.sleep(SPELL_S)  # the threads that parked after the close: kept ones would stay
    shutdown = threading.Thread(target=ex.shutdown, kwargs={"wait": True})
    shutdown.start()
    shutdown.join(10)
    assert not shutdown.is_alive(), "the executor's shutdown waits for a kept thread"
    assert len(ran) == 4 * 300
