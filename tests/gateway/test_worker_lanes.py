"""Runs' lanes onto the binding threads (kernelgate/gateway/workers.py): a run with no job
in a thread gets one even when other runs hold the whole pool (one beyond it at most), a
freed thread goes to the run with the fewest, the threads beyond the pool end, and a job
whose future was cancelled before it started does not start."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from kernelgate.gateway.workers import Workers

PREFIX = "kernelgate-test-lanes"


@pytest.fixture
def gates() -> Iterator[list[threading.Event]]:
    """Events jobs wait on; all set at the end, so no thread stays blocked."""
    made: list[threading.Event] = []
    yield made
    for event in made:
        event.set()


def _extras() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith(PREFIX + "-extra_")]


def _hold(gates: list[threading.Event], started: threading.Semaphore) -> Callable[[], None]:
    gate = threading.Event()
    gates.append(gate)

    def job() -> None:
        started.release()
        gate.wait(10)

    return job


def test_a_run_gets_a_thread_beyond_the_pool_while_another_holds_it(gates) -> None:
    started = threading.Semaphore(0)
    with ThreadPoolExecutor(2, thread_name_prefix=PREFIX) as ex:
        workers = Workers(ex)
        a, b = workers.lane(), workers.lane()
        for _ in range(4):
            a.submit(_hold(gates, started))
        for _ in range(2):
            assert started.acquire(timeout=10)
        # a holds both pool threads; its two other jobs wait for them, not for new threads.
        names: list[str] = []
        ran = threading.Event()
        b.submit(lambda: (names.append(threading.current_thread().name), ran.set()))
        assert ran.wait(10)
        assert names[0].startswith(PREFIX + "-extra_")
        assert not started.acquire(timeout=0)
        for gate in gates:
            gate.set()
        for _ in range(2):
            assert started.acquire(timeout=10)
    for t in _extras():
        t.join(10)
    assert not _extras() and workers._extras == 0


def test_a_run_has_one_thread_beyond_the_pool_at_most(gates) -> None:
    started = threading.Semaphore(0)
    with ThreadPoolExecutor(1, thread_name_prefix=PREFIX) as ex:
        workers = Workers(ex)
        a, b = workers.lane(), workers.lane()
        a.submit(_hold(gates, started))
        assert started.acquire(timeout=10)
        order: list[int] = []
        threads: set[str] = set()
        done = threading.Semaphore(0)
        lock = threading.Lock()
        active = [0, 0]  # now, most

        def job(i: int) -> Callable[[], None]:
            def run() -> None:
                with lock:
                    active[0] += 1
                    active[1] = max(active)
                    order.append(i)
                    threads.add(threading.current_thread().name)
                threading.Event().wait(0.001)
                with lock:
                    active[0] -= 1
                done.release()

            return run

        for i in range(20):
            b.submit(job(i))
        for _ in range(20):
            assert done.acquire(timeout=10)
        assert order == list(range(20))  # one after another, in the order submitted
        assert active[1] == 1 and len(threads) == 1
        gates[0].set()


def test_a_freed_thread_goes_to_the_run_with_the_fewest(gates) -> None:
    started = threading.Semaphore(0)
    order: list[str] = []
    done = threading.Semaphore(0)

    def note(name: str) -> Callable[[], None]:
        def run() -> None:
            order.append(name)
            done.release()

        return run

    with ThreadPoolExecutor(3, thread_name_prefix=PREFIX) as ex:
        workers = Workers(ex)
        a, b = workers.lane(), workers.lane()
        for _ in range(3):
            a.submit(_hold(gates, started))
        for _ in range(3):
            assert started.acquire(timeout=10)
        for i in range(3):
            a.submit(note(f"a{i}"))  # queued first
        b.submit(_hold(gates, started))  # b's one thread, beyond the pool
        assert started.acquire(timeout=10)
        b.submit(note("b"))  # queued behind a's
        gates[0].set()  # one of a's threads is free: a has 2 running, b 1
        for _ in range(4):
            assert done.acquire(timeout=10)
        assert order == ["b", "a0", "a1", "a2"]
        for gate in gates:
            gate.set()


def test_no_thread_beyond_the_pool_once_the_executor_is_shut_down(gates) -> None:
    started = threading.Semaphore(0)
    ex = ThreadPoolExecutor(1, thread_name_prefix=PREFIX)
    workers = Workers(ex)
    workers.lane().submit(_hold(gates, started))
    assert started.acquire(timeout=10)
    ex.shutdown(wait=False)
    with pytest.raises(RuntimeError):
        workers.lane().submit(lambda: None)
    gates[0].set()
    ex.shutdown(wait=True)
    assert workers._extras == 0


def test_a_job_whose_future_was_cancelled_before_a_thread_took_it_does_not_run(gates) -> None:
    started = threading.Semaphore(0)
    ran: list[str] = []

    async def main(ex: ThreadPoolExecutor) -> None:
        loop = asyncio.get_running_loop()
        lane = Workers(ex).lane()
        lane.submit(_hold(gates, started))
        assert started.acquire(timeout=10)
        cancelled = lane.run(loop, lambda: ran.append("cancelled"))
        after = lane.run(loop, lambda: ran.append("after"))
        cancelled.cancel()
        gates[0].set()
        await asyncio.wait_for(after, 10)

    with ThreadPoolExecutor(1, thread_name_prefix=PREFIX) as ex:
        asyncio.run(main(ex))
    assert ran == ["after"]
