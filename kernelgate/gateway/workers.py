"""Long-lived threads for synchronous bindings, on a gateway's executor, shared fairly
between its runs.

A synchronous binding never runs on the event loop (it may block), so each call hops to a
worker thread. ``Executor.submit`` per call builds a Future (a Condition, an RLock), a work
item and its callbacks, and ends by notifying the Future nobody waits on: a measurable
share of a call's host CPU. Here a thread stays parked for a moment after its job, on a
lock of its own, and the next job is handed to it directly (one ``release``: the wakeup
the hop needs anyway). Threads still come from the gateway's executor, one executor job
per thread: its ``max_workers`` bounds them, its thread names stay, and an executor that is
shut down takes no new threads.

The threads are the gateway's, the jobs a run's: each run submits through a :class:`Lane`
of its own. A run's calls may block (a binding that waits for an event, a slow request),
and one run may have far more calls in flight than the gateway has threads, so the pool
alone would let one run hold every thread and stall the others. Two rules keep every run
moving whatever the others do:

- a run with no job in a thread right now always gets a thread: a parked one, a new one of
  the pool, or else one *extra* thread of its own beyond the pool (at most one per run, so
  at most ``max_workers`` + the runs with jobs waiting in all; it parks like the others, and
  ends after ``IDLE_S`` without a job of its run);
- a job no thread can take waits in its run's queue, first in first out, and a pool thread
  that ends a job takes the next job of the run with the fewest jobs in threads (never the
  executor's own queue, where it would wait out the parked threads' idle time).

After an idle spell (an agent thinking between runs), the first call's hop is what costs:
the thread that takes it, and the CPU it wakes on. A gateway keeps one thread parked for
``KEEP_S`` (:meth:`Workers.keep_one`; the others go after ``IDLE_S``), released when the
gateway closes, the executor is collected or the interpreter exits. And a thread parked for
``PIN_AFTER_S`` or more is woken on the CPU of the thread that hands it the job, then given
back every CPU it had before it runs the job: the scheduler would otherwise wake it on
another, idle, CPU (on a VM, an idle vCPU takes tens of microseconds to wake, twice per call:
the thread's wakeup and the loop's), while the loop that handed it the job goes to sleep on
its own (issue 23: 0.2 ms of a one-call run after 60 ms idle).

>>> import concurrent.futures, threading
>>> done = threading.Event()
>>> with concurrent.futures.ThreadPoolExecutor(1) as ex:
...     workers_for(ex).lane().submit(done.set)
...     done.wait(5)
True
"""

from __future__ import annotations

import asyncio
import ctypes
import inspect
import itertools
import os
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Any, TypeVar

__all__ = ["Lane", "Workers", "workers_for"]

T = TypeVar("T")

#: How long a thread waits for another job before it goes back to the executor (or, an
#: extra thread, ends). Short: a parked thread holds one of the executor's threads, and
#: after ``shutdown`` ends only when this runs out; long enough to span the gap between
#: one run's calls, or two runs'.
IDLE_S = 0.02
#: How long a gateway's last parked thread waits for a job (see :meth:`Workers.keep_one`).
KEEP_S = 30.0
#: A thread parked at least this long is woken on the CPU of the thread handing it a job
#: (see the module's docstring). Below it, threads hand jobs on faster than CPUs go idle,
#: and three system calls per job would cost more than they save.
PIN_AFTER_S = 0.002


def _cpu_getter() -> Callable[[], int] | None:
    """libc's ``sched_getcpu`` (the os module has none), or None where a thread cannot be
    moved between CPUs (no ``sched_setaffinity``) or there is no such function."""
    if not hasattr(os, "sched_setaffinity"):
        return None
    try:
        getcpu = ctypes.CDLL(None, use_errno=True).sched_getcpu
    except (OSError, AttributeError):
        return None
    getcpu.restype, getcpu.argtypes = ctypes.c_int, []
    return getcpu


_getcpu = _cpu_getter()


class _Parked:
    """A thread waiting for its next job: ``wake`` is released once ``job`` is set;
    ``lane`` is the run whose job it runs (or ran last); ``since`` when it parked;
    ``unpin`` the CPUs it is given back once awake (see :func:`_pin`)."""

    __slots__ = ("wake", "job", "lane", "tid", "since", "unpin")

    def __init__(self, lane: Lane, job: Callable[[], None]) -> None:
        self.wake = threading.Lock()
        self.wake.acquire()
        # Its first job too: what its thread starts with is not held by the executor's
        # work item (or the Thread) for as long as the thread lives (see _work).
        self.job: Callable[[], None] | None = job
        self.lane = lane
        self.tid = 0  # its thread's, once it runs
        self.since = 0.0
        self.unpin: set[int] | None = None

    def take(self) -> Callable[[], None] | None:
        """Awake, in its thread: the job handed to it (None: the workers are closing),
        with every CPU it may run on given back first (its job may run long, beside the
        thread that handed it over)."""
        job, self.job = self.job, None
        if self.unpin is not None:
            try:
                os.sched_setaffinity(0, self.unpin)
            except OSError:  # a CPU of the set went offline meanwhile: the kernel's choice
                pass
            self.unpin = None
        return job


def _pin(parked: _Parked) -> None:
    """Before ``parked`` is woken: put it on this thread's CPU, which is about to be free
    (the loop goes back to waiting once it has handed the job over), if it has been
    parked long enough for the other CPUs to be idle. Nothing when it cannot be done."""
    if _getcpu is None or time.monotonic() - parked.since < PIN_AFTER_S:
        return
    try:
        cpus = os.sched_getaffinity(parked.tid)
        here = _getcpu()
        if here in cpus and len(cpus) > 1:
            os.sched_setaffinity(parked.tid, (here,))
            parked.unpin = cpus
    except OSError:  # not allowed here (a container's policy): woken where the kernel puts it
        pass


class Lane:
    """One run's jobs on the gateway's threads (see the module's docstring). Used from the
    run's loop; its counts change under the workers' lock."""

    __slots__ = ("_workers", "running", "waiting", "extra")

    def __init__(self, workers: Workers) -> None:
        self._workers = workers
        self.running = 0  # its jobs in threads now
        self.waiting: deque[Callable[[], None]] = deque()  # its jobs no thread took yet
        self.extra: _Parked | None = None  # its extra thread, while parked

    def submit(self, job: Callable[[], None]) -> None:
        """Run ``job`` (a callable that handles its own errors) in a thread, or once one is
        free for this run (RuntimeError: the executor is shut down, or no thread starts)."""
        self._workers.submit(job, self)

    def others_waiting(self) -> bool:
        """Whether another run has a job waiting for a thread: a job that runs one call
        after another (a chain) ends then, so that its thread goes to the fairest run
        (read without the lock: a job queued just after is seen at the next call)."""
        ready = self._workers._ready
        return bool(ready) and (len(ready) > 1 or self not in ready)

    def close(self) -> None:
        """The run is over: its jobs no thread took yet are dropped, never started."""
        with self._workers._lock:
            self.waiting.clear()
            self._workers._ready.pop(self, None)

    def run(self, loop: asyncio.AbstractEventLoop, fn: Callable[[], T]) -> asyncio.Future[T]:
        """``fn()`` in one of these threads, as a future of ``loop`` (``run_in_executor``
        on these threads: its value, or what it raised). Not started if the future was
        cancelled before a thread took it (the run is over: nobody records it)."""
        future: asyncio.Future[T] = loop.create_future()

        def settle(ok: bool, value: Any) -> None:
            if not future.done():  # cancelled meanwhile: its outcome goes nowhere
                (future.set_result if ok else future.set_exception)(value)

        def job() -> None:
            if future.cancelled():  # a read of its state: safe from this thread
                return
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

    async def call(self, loop: asyncio.AbstractEventLoop, fn: Callable[[], T]) -> T:
        """``await self.run(loop, fn)``; but cancelled once ``fn`` has returned, its value
        all the same: a run that ends records its calls whose binding ran, not only those
        whose value reached the loop in time (an awaitable it returned is not awaited)."""
        got: list[T] = []

        def job() -> T:
            got.append(fn())
            return got[0]

        try:
            return await self.run(loop, job)
        except asyncio.CancelledError:
            if not got or inspect.isawaitable(got[0]):
                raise
            return got[0]


class Workers:
    """Runs jobs (callables that handle their own errors) in threads of ``executor``."""

    def __init__(self, executor: Executor) -> None:
        # Weak: this object is the executor's entry in a WeakKeyDictionary. A kept thread
        # holds this object (not the executor): the executor's collection releases it.
        me = weakref.ref(self)
        self._executor = weakref.ref(executor, lambda _: _close(me))
        self._lock = threading.Lock()
        self._parked: list[_Parked] = []
        self._ready: dict[Lane, None] = {}  # the lanes with jobs waiting, oldest first
        self._threads = 0  # executor jobs of ours running now (parked ones included)
        self._extras = 0  # extra threads alive now (parked ones included)
        # For submit without a lane (one run's, in effect): made on first use, as it and
        # this object refer to each other (a gateway's runs each have a lane: no cycle).
        self._shared: Lane | None = None
        # A ThreadPoolExecutor's bound (another executor queues for itself: no bound here).
        limit = getattr(executor, "_max_workers", None)
        self._max = limit if isinstance(limit, int) and limit > 0 else None
        prefix = getattr(executor, "_thread_name_prefix", "") or "kernelgate-binding"
        self._prefix = f"{prefix}-extra_"
        self._numbers = itertools.count()  # next() on it is atomic
        self._keep_s = 0.0  # see keep_one

    def keep_one(self, seconds: float | None = None) -> None:
        """Keep the last parked thread for ``seconds`` (default ``KEEP_S``) without a job,
        not ``IDLE_S``: the first call after an idle spell then finds it (for a gateway's
        own executor, which only these workers use; :meth:`close` releases it, as does the
        executor's collection and the interpreter's exit). Nothing where that exit cannot
        be hooked.

        >>> import concurrent.futures
        >>> with concurrent.futures.ThreadPoolExecutor(1) as ex:
        ...     workers = workers_for(ex)
        ...     workers.keep_one(5.0)
        ...     workers.close()  # before the executor's shutdown, which would wait for it
        """
        if _exit_hooked():
            _every.add(self)  # before the check: a release that runs after it closes this
            with self._lock:
                if not _exiting:  # released already: concurrent.futures' hook would join it
                    self._keep_s = KEEP_S if seconds is None else seconds

    def close(self) -> None:
        """Release the parked threads (they go back to the executor, which may then shut
        down at once) and keep none from now on; jobs still take threads as before."""
        with self._lock:
            self._keep_s = 0.0
            parked, self._parked = self._parked, []
            self._threads -= len(parked)
            for me in parked:
                me.job = None
                me.wake.release()

    def lane(self) -> Lane:
        """A run's own lane onto these threads."""
        return Lane(self)

    def submit(self, job: Callable[[], None], lane: Lane | None = None) -> None:
        """Run ``job`` in a parked thread, a new one, the lane's extra one, or once a thread
        is free for ``lane`` (see the module's docstring); RuntimeError: the executor is
        shut down and no thread is ours, or a new thread would not start."""
        if lane is None:
            lane = self._shared = self._shared or Lane(self)
        with self._lock:
            # A parked pool thread, the most recent (its caches are warm); else this run's
            # parked extra one (the pool's threads are all busy, or not made yet).
            parked = self._parked.pop() if self._parked else lane.extra
            if parked is not None:
                if parked is lane.extra:
                    lane.extra = None
                parked.job, parked.lane = job, lane
                lane.running += 1
                _pin(parked)
                parked.wake.release()
                return
            pool = self._max is None or self._threads < self._max
            if not pool and lane.running:
                lane.waiting.append(job)  # a thread of its run, or the fairest, takes it
                self._ready[lane] = None
                return
            lane.running += 1
            if pool:
                self._threads += 1
            else:
                self._extras += 1  # no job of this run runs: it gets a thread anyway
        try:
            executor = self._executor()
            if executor is None or getattr(executor, "_shutdown", False):
                raise RuntimeError("the binding threads' executor is shut down")
            if pool:
                executor.submit(self._work, _Parked(lane, job))
            else:
                name = f"{self._prefix}{next(self._numbers)}"
                threading.Thread(target=self._extra, args=(_Parked(lane, job),), name=name).start()
        except BaseException:
            with self._lock:
                lane.running -= 1
                if pool:
                    self._threads -= 1
                else:
                    self._extras -= 1
            raise

    def _next(self, me: _Parked) -> bool:
        """After a pool thread's job: take the next job of the waiting run with the fewest
        jobs in threads into ``me.job`` (True), or park ``me`` (False); a thread that the
        executor's own queue needs is given back (``me.job`` None, True)."""
        with self._lock:
            me.lane.running -= 1
            ready = self._ready
            if ready:
                lane = min(ready, key=_running) if len(ready) > 1 else next(iter(ready))
                me.job, me.lane = lane.waiting.popleft(), lane
                lane.running += 1
                if not lane.waiting:
                    del ready[lane]
                return True
            executor = self._executor()
            queue = getattr(executor, "_work_queue", None)
            if queue is not None and not queue.empty():
                self._threads -= 1  # another job of the executor waits for a thread
                me.job = None
                return True
            me.since = time.monotonic()
            self._parked.append(me)
            return False

    def _work(self, me: _Parked) -> None:
        """One executor job: ``me``'s job, then the jobs waiting or handed to this thread."""
        me.tid = threading.get_native_id()
        job = me.take()
        while job is not None:
            try:
                job()
            except BaseException:  # a job reports its own errors
                pass
            # Not held while parked: a job refers to its run (and the run to the gateway's
            # executor, which a kept thread would otherwise keep from being collected).
            job = None
            if not self._next(me) and not self._parked_until_job(me):
                return  # nothing came: the thread goes back to the executor
            job = me.take()

    def _parked_until_job(self, me: _Parked) -> bool:
        """A pool thread parked (by :meth:`_next`): True once handed a job (``me.job``, or
        None when closing), False when none came in ``IDLE_S``, or in ``KEEP_S`` for the
        thread the others leave parked alone (no longer parked then)."""
        timeout = IDLE_S
        while not me.wake.acquire(timeout=timeout):
            with self._lock:
                if me not in self._parked:
                    timeout = -1  # handed a job just as the wait ran out: it is set now
                elif timeout == IDLE_S and self._keep_s > IDLE_S and self._parked == [me]:
                    timeout = self._keep_s - IDLE_S  # the one thread a gateway keeps
                else:
                    self._parked.remove(me)
                    self._threads -= 1
                    return False
        return True

    def _extra(self, me: _Parked) -> None:
        """An extra thread of ``me.lane``'s: its jobs only, parked between them; it ends
        once none came for ``IDLE_S``."""
        me.tid, lane = threading.get_native_id(), me.lane
        job = me.take()
        assert job is not None
        try:
            while True:
                try:
                    job()
                except BaseException:  # a job reports its own errors
                    pass
                del job  # not held while parked (see _work)
                with self._lock:
                    lane.running -= 1
                    if lane.waiting:  # its own run's, before any other thread takes them
                        job = lane.waiting.popleft()
                        lane.running += 1
                        if not lane.waiting:
                            del self._ready[lane]
                        continue
                    me.since = time.monotonic()
                    lane.extra = me
                if not me.wake.acquire(timeout=IDLE_S):
                    with self._lock:
                        if lane.extra is me:
                            lane.extra = None
                            return  # nothing came for its run: the thread ends
                    me.wake.acquire()  # handed a job just as the wait ran out: it is set now
                job = me.take()
                assert job is not None
        finally:
            with self._lock:
                self._extras -= 1


def _running(lane: Lane) -> int:
    return lane.running


def _close(workers: weakref.ref[Workers]) -> None:
    """The executor was collected: release the thread its workers keep parked. From a
    thread of its own: a collection may run this in a thread that holds their lock."""
    live = workers()
    if live is not None and live._keep_s:
        threading.Thread(target=live.close, name="kernelgate-release", daemon=True).start()


_every: weakref.WeakSet[Workers] = weakref.WeakSet()  # those that keep a thread
_hooked: bool | None = None
_exiting = False  # the exit's release has run: no thread is kept from then on


def _exit_hooked() -> bool:
    """Whether the interpreter's exit releases kept threads: it joins an executor's threads
    before ``atexit`` runs, so the hook is threading's own, the one concurrent.futures uses
    (private: where it is missing, no thread is kept beyond ``IDLE_S``)."""
    global _hooked
    if _hooked is None:
        register = getattr(threading, "_register_atexit", None)
        _hooked = register is not None
        if register is not None:
            try:
                register(_release_all)
            except RuntimeError:  # the interpreter is exiting already
                _hooked = False
    return _hooked


def _release_all() -> None:
    # Threads a gateway starts after this (a daemon thread's run as the interpreter exits)
    # are not kept either: concurrent.futures' hook, which runs next, joins them.
    global _exiting
    _exiting = True
    for workers in list(_every):
        workers.close()


_by_executor: weakref.WeakKeyDictionary[Executor, Workers] = weakref.WeakKeyDictionary()
_by_executor_lock = threading.Lock()


def workers_for(executor: Executor) -> Workers:
    """The parked threads of ``executor`` (one set per executor, so per gateway)."""
    with _by_executor_lock:
        workers = _by_executor.get(executor)
        if workers is None:
            workers = _by_executor[executor] = Workers(executor)
        return workers
