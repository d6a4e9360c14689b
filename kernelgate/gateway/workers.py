"""Long-lived threads for synchronous bindings, on a gateway's executor.

A synchronous binding never runs on the event loop (it may block), so each call hops to a
worker thread. ``Executor.submit`` per call builds a Future (a Condition, an RLock), a work
item and its callbacks, and ends by notifying the Future nobody waits on: a measurable
share of a call's host CPU. Here a thread stays parked for a moment after its job, on a
lock of its own, and the next job is handed to it directly (one ``release``: the wakeup
the hop needs anyway). Threads still come from the gateway's executor, one executor job
per thread: its ``max_workers`` bounds them, its thread names stay, and an executor that is
shut down takes no new threads. Jobs no thread can take wait here, first in first out,
never in the executor's own queue, where they would wait out the parked threads' idle
time; a thread takes the next waiting job before it parks.

>>> import concurrent.futures, threading
>>> done = threading.Event()
>>> with concurrent.futures.ThreadPoolExecutor(1) as ex:
...     workers_for(ex).submit(done.set)
...     done.wait(5)
True
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections import deque
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Any, TypeVar

__all__ = ["Workers", "workers_for"]

T = TypeVar("T")

#: How long a thread waits for another job before it goes back to the executor. Short:
#: a parked thread holds one of the executor's threads, and after ``shutdown`` ends only
#: when this runs out; long enough to span the gap between one run's calls, or two runs'.
IDLE_S = 0.02


class _Parked:
    """A thread waiting for its next job: ``wake`` is released once ``job`` is set."""

    __slots__ = ("wake", "job")

    def __init__(self) -> None:
        self.wake = threading.Lock()
        self.wake.acquire()
        self.job: Callable[[], None] | None = None


class Workers:
    """Runs jobs (callables that handle their own errors) in threads of ``executor``."""

    def __init__(self, executor: Executor) -> None:
        # Weak: this object is the executor's entry in a WeakKeyDictionary.
        self._executor = weakref.ref(executor)
        self._lock = threading.Lock()
        self._parked: list[_Parked] = []
        self._waiting: deque[Callable[[], None]] = deque()
        self._threads = 0  # executor jobs of ours running now (parked ones included)
        # A ThreadPoolExecutor's bound (another executor queues for itself: no bound here).
        limit = getattr(executor, "_max_workers", None)
        self._max = limit if isinstance(limit, int) and limit > 0 else None

    def submit(self, job: Callable[[], None]) -> None:
        """Run ``job`` in a parked thread, or a new one, or once a thread is free, in the
        order submitted (RuntimeError: the executor is shut down and no thread is ours)."""
        with self._lock:
            if self._parked:
                parked = self._parked.pop()  # the most recent: its caches are warm
                parked.job = job
                parked.wake.release()
                return
            if self._max is not None and self._threads >= self._max:
                self._waiting.append(job)  # a running thread of ours takes it next
                return
            self._threads += 1
        executor = self._executor()
        try:
            if executor is None:
                raise RuntimeError("the binding threads' executor is gone")
            executor.submit(self._work, job)
        except BaseException:
            with self._lock:
                self._threads -= 1
            raise

    def run(self, loop: asyncio.AbstractEventLoop, fn: Callable[[], T]) -> asyncio.Future[T]:
        """``fn()`` in one of these threads, as a future of ``loop`` (``run_in_executor``
        on these threads: its value, or what it raised)."""
        future: asyncio.Future[T] = loop.create_future()

        def settle(ok: bool, value: Any) -> None:
            if not future.done():  # cancelled meanwhile: its outcome goes nowhere
                (future.set_result if ok else future.set_exception)(value)

        def job() -> None:
            try:
                outcome: tuple[bool, Any] = (True, fn())
            except BaseException as exc:
                outcome = (False, exc)
            try:
                loop.call_soon_threadsafe(settle, *outcome)
            except RuntimeError:
                pass  # the loop is closed: nobody waits for it any more

        self.submit(job)
        return future

    def _next(self, me: _Parked) -> bool:
        """After a job: take the next waiting one into ``me.job`` (True), or park ``me``
        (False); a thread that the executor's own queue needs is given back (``me.job``
        None, True)."""
        with self._lock:
            if self._waiting:
                me.job = self._waiting.popleft()
                return True
            executor = self._executor()
            queue = getattr(executor, "_work_queue", None)
            if queue is not None and not queue.empty():
                self._threads -= 1  # another job of the executor waits for a thread
                me.job = None
                return True
            self._parked.append(me)
            return False

    def _work(self, job: Callable[[], None] | None) -> None:
        """One executor job: ``job``, then the jobs waiting or handed to this thread."""
        me = _Parked()
        while job is not None:
            try:
                job()
            except BaseException:  # a job reports its own errors
                pass
            if not self._next(me):
                if not me.wake.acquire(timeout=IDLE_S):
                    with self._lock:
                        if me in self._parked:
                            self._parked.remove(me)
                            self._threads -= 1
                            return  # nothing came: the thread goes back to the executor
                    me.wake.acquire()  # handed a job just as the wait ran out: it is set now
            job, me.job = me.job, None


_by_executor: weakref.WeakKeyDictionary[Executor, Workers] = weakref.WeakKeyDictionary()
_by_executor_lock = threading.Lock()


def workers_for(executor: Executor) -> Workers:
    """The parked threads of ``executor`` (one set per executor, so per gateway)."""
    with _by_executor_lock:
        workers = _by_executor.get(executor)
        if workers is None:
            workers = _by_executor[executor] = Workers(executor)
        return workers
