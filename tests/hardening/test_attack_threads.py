"""Attacks on the gateway's binding threads (kernelgate/gateway/workers.py): runs whose
synchronous calls block try to take every thread from the other runs.

The threads are the gateway's (``max_threads``), a run may have far more calls in flight
than that, and a binding may block (it waits for an event, a slow request). Whatever the
other runs' calls do, a run whose calls have no thread gets one (beyond the pool if need
be: at most one more per run), the pool's threads go first to the run with the fewest, a
run that ended starts none of its calls still waiting, and the gateway closes with every
thread it made ended.
"""

from __future__ import annotations

import asyncio
import collections
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from kernelgate import Limits

from .test_attack_batches import WARM_COLD, Gate, _src

MAX_THREADS = 4


@pytest.fixture
def gate() -> Iterator[Gate]:
    g = Gate()
    yield g
    g.event.set()


def _binding_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("kernelgate-binding")]


def _joined(threads: list[threading.Thread]) -> list[str]:
    """Join ``threads`` (10 s in all): the names of those still alive."""
    deadline = time.monotonic() + 10
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    return [t.name for t in threads if t.is_alive()]


def _close_and_join(gw: Any) -> None:
    """Close ``gw`` and wait for every binding thread to end (close does not wait)."""
    gw.close()
    assert not _joined(_binding_threads())


class Holds:
    """``block(tag)`` waits at the gate and counts the calls waiting per tag; ``all_in``
    (a coroutine binding: on the host's loop, it needs no binding thread) returns once at
    least ``total`` calls of ``tags`` different tags wait."""

    def __init__(self, gate: Gate, total: int, tags: int) -> None:
        self.gate, self.total, self.tags = gate, total, tags
        self.waiting: collections.Counter[str] = collections.Counter()
        self.started = 0
        self.lock = threading.Lock()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.ready: asyncio.Event | None = None

    def _all_in(self) -> bool:
        return sum(self.waiting.values()) >= self.total and len(self.waiting) >= self.tags

    def block(self, tag: str = "a") -> str:
        with self.lock:
            self.waiting[tag] += 1
            self.started += 1
            if self._all_in() and self.loop is not None and self.ready is not None:
                self.loop.call_soon_threadsafe(self.ready.set)
        return self.gate.wait()

    async def all_in(self) -> int:
        with self.lock:
            self.loop = asyncio.get_running_loop()
            self.ready = asyncio.Event()
            if self._all_in():
                self.ready.set()
        await self.ready.wait()
        return self.total

    def bindings(self) -> dict[str, Any]:
        return {
            "block": self.block,
            "all_in": self.all_in,
            "release": self.gate.release,
            "add": lambda a, b: a + b,
            "threads": lambda: len(_binding_threads()),
        }


def _attacker(tag: str, calls: int) -> str:
    return _src(f"return await asyncio.gather(*[tools.block({tag!r}) for _ in range({calls})])")


#: The run the attacks try to starve: 100 synchronous calls (batched, split by the sweep)
#: once the attackers' calls all wait, then it counts the binding threads and opens the gate.
_VICTIM = _src(
    """
    await tools.all_in()
    out = await asyncio.gather(*[tools.add(i, 1) for i in range(100)])
    threads = await tools.threads()
    await tools.release()
    return [out == [i + 1 for i in range(100)], threads]
    """
)


def _together(gw: Any, hostile: Any, *programs: tuple[str, Limits | None]) -> list[Any]:
    async def all_of_them() -> list[Any]:
        try:
            return list(await asyncio.gather(*(gw.run(p, limits=lim) for p, lim in programs)))
        finally:
            await gw.runtime.end_loop()

    return [hostile.record(r) for r in asyncio.run(all_of_them())]


@pytest.mark.timeout(90)
@WARM_COLD
def test_runs_that_each_block_every_thread_leave_another_run_its_own(hostile, gate, warm):
    # Three runs, each with more blocked calls than the gateway has threads: the pool is
    # theirs, and each of them has at least one call in a thread. The fourth run still
    # gets a thread: its 100 calls run, and it opens the gate for them.
    holds = Holds(gate, total=MAX_THREADS, tags=3)
    gw = hostile.gateway(
        bindings=holds.bindings(), pool_size=1 if warm else 0, max_threads=MAX_THREADS
    )
    runs = _together(
        gw,
        hostile,
        *[(_attacker(tag, 6), None) for tag in "xyz"],
        (_VICTIM, None),
    )
    *attackers, victim = runs
    assert victim.status == "ok", victim.message
    ok, threads = victim.value
    assert ok
    # The pool, one more for each of the three attackers that found it taken, one for the
    # victim: never a thread per call.
    assert threads <= MAX_THREADS + 4, threads
    for r in attackers:
        assert r.status == "ok", r.message
        assert r.value == ["released"] * 6


@pytest.mark.timeout(90)
@WARM_COLD
def test_the_split_calls_of_a_blocked_batch_take_no_thread_beyond_the_pool(hostile, gate, warm):
    # One batch of 12 calls that block: the sweep splits the calls behind the first one
    # off to threads of their own, but only the pool's: the 8 calls left over wait in
    # their run's queue, and the victim still gets a thread.
    holds = Holds(gate, total=MAX_THREADS, tags=1)
    gw = hostile.gateway(
        bindings=holds.bindings(), pool_size=1 if warm else 0, max_threads=MAX_THREADS
    )
    attacker, victim = _together(gw, hostile, (_attacker("a", 12), None), (_VICTIM, None))
    assert victim.status == "ok", victim.message
    ok, threads = victim.value
    assert ok
    assert threads <= MAX_THREADS + 1, threads  # the pool, and the victim's one
    assert attacker.status == "ok", attacker.message
    assert attacker.value == ["released"] * 12


@pytest.mark.timeout(90)
@pytest.mark.parametrize("path", ["policy", "past-max-calls-in-flight"])
@WARM_COLD
def test_queued_calls_of_a_run_do_not_take_every_thread_either(hostile, gate, warm, path):
    # Calls that wait for a slot or a policy go to the threads one by one (calls.py's
    # _queued): the same lanes. With a policy every call takes that path; past
    # max_calls_in_flight the calls beyond the slots do.
    holds = Holds(gate, total=MAX_THREADS, tags=1)
    policy = (lambda namespace, name, args, kwargs: True) if path == "policy" else None
    gw = hostile.gateway(
        bindings=holds.bindings(),
        pool_size=1 if warm else 0,
        max_threads=MAX_THREADS,
        policy=policy,
    )
    limits = Limits(wall_seconds=30, kill_grace_seconds=0.3, cpu_seconds=20, max_calls_in_flight=6)
    attacker, victim = _together(gw, hostile, (_attacker("a", 12), limits), (_VICTIM, None))
    assert victim.status == "ok", victim.message
    ok, threads = victim.value
    assert ok
    assert threads <= MAX_THREADS + 1, threads
    assert attacker.status == "ok", attacker.message
    assert attacker.value == ["released"] * 12


@pytest.mark.timeout(90)
@pytest.mark.parametrize("policy", [False, True], ids=["batched", "queued"])
@WARM_COLD
def test_a_run_that_ends_while_its_calls_hold_every_thread_starts_none_of_the_rest(
    hostile, gate, warm, policy
):
    # The attacker's run ends at its wall clock with every pool thread blocked and more
    # calls waiting for a thread (split off its batch; or, with a policy, each queued on
    # its own) and for a slot. The next run gets a thread; once the gate opens, the ended
    # run's waiting calls are not started.
    holds = Holds(gate, total=MAX_THREADS, tags=1)
    gw = hostile.gateway(
        bindings=holds.bindings(),
        pool_size=1 if warm else 0,
        max_threads=MAX_THREADS,
        policy=(lambda namespace, name, args, kwargs: True) if policy else None,
    )
    short = Limits(wall_seconds=2, kill_grace_seconds=0.3, cpu_seconds=5, max_calls_in_flight=8)
    attacker = hostile.record(gw.run_sync(_attacker("a", 16), limits=short))
    assert attacker.status == "timeout", attacker.message
    assert holds.started == MAX_THREADS
    victim = hostile.record(gw.run_sync(_VICTIM))
    assert victim.status == "ok", victim.message
    assert victim.value[0]
    _close_and_join(gw)  # every thread has ended: nothing more can start
    assert holds.started == MAX_THREADS  # the ended run's waiting calls never ran
    assert not any(c.ok for c in attacker.calls)


@pytest.mark.timeout(60)
def test_closing_the_gateway_ends_the_threads_beyond_the_pool_too(hostile, gate):
    # Two runs block: one holds the pool, the other a thread beyond it. The gateway
    # closes at once; once the bindings return, every thread it made ends.
    holds = Holds(gate, total=MAX_THREADS, tags=1)
    gw = hostile.gateway(bindings=holds.bindings(), pool_size=0, max_threads=MAX_THREADS)
    before = set(_binding_threads())

    async def close_while_blocked() -> tuple[list[Any], float]:
        loop = asyncio.get_running_loop()
        runs = [asyncio.ensure_future(gw.run(_attacker("a", 6)))]
        await holds.all_in()  # the pool is a's
        holds.total, holds.tags = MAX_THREADS + 1, 2
        runs.append(asyncio.ensure_future(gw.run(_attacker("b", 6))))
        await holds.all_in()  # and b has its own thread
        t0 = loop.time()
        await gw.aclose()
        closed_in = loop.time() - t0
        return list(await asyncio.gather(*runs)), closed_in

    results, closed_in = asyncio.run(close_while_blocked())
    for r in results:
        hostile.record(r)
        assert r.status == "interrupted", r.message
    assert closed_in < 5.0  # not the 8 s the blocked bindings wait
    gate.release()
    made = [t for t in _binding_threads() if t not in before]
    assert any("-extra_" in t.name for t in made), [t.name for t in made]
    assert not _joined(made)
