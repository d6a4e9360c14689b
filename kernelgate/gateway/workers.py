"""Long-lived threads for synchronous bindings, on a gateway's executor.

A synchronous binding never runs on the event loop (it may block), so each call hops to a
worker thread. ``Executor.submit`` per call builds a Future (a Condition, an RLock), a work
item and its callbacks, and ends by notifying the Future nobody waits on: a measurable
share of a call's host CPU. Here a thread stays parked for a moment after its job, on a
lock of its own, and the next job is handed to it directly (one ``release``: the wakeup
the hop needs anyway). Threads still come from the gateway's executor, one executor job
per thread: its ``max_workers`` bounds them, its thread names stay, and an executor that is
shut down takes no new threads.

>>> import concurrent.futures, threading
>>> done = threading.Event()
>>> with concurrent.futures.ThreadPoolExecutor(1) as ex:
...     workers_for(ex).submit(done.set)
...     done.wait(5)
True
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from concurrent.futures import Executor

__all__ = ["Workers", "workers_for"]

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

    def submit(self, job: Callable[[], None]) -> None:
        """Run ``job`` in a parked thread, or in a new one (RuntimeError: the executor is
        shut down and no thread is parked)."""
        with self._lock:
            if self._parked:
                parked = self._parked.pop()  # the most recent: its caches are warm
                parked.job = job
                parked.wake.release()
                return
        executor = self._executor()
        if executor is None:
            raise RuntimeError("the binding threads' executor is gone")
        executor.submit(self._work, job)

    def _work(self, job: Callable[[], None] | None) -> None:
        """One executor job: ``job``, then the jobs handed to this thread while it parks."""
        me = _Parked()
        while job is not None:
            try:
                job()
            except BaseException:  # a job reports its own errors
                pass
            job = None
            with self._lock:
                self._parked.append(me)
            if not me.wake.acquire(timeout=IDLE_S):
                with self._lock:
                    if me in self._parked:
                        self._parked.remove(me)
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
