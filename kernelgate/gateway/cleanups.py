"""Cleanups that must be done even when the event loop cannot do them.

Two ways a cleanup gets lost, and what stops each:

* A task cancelled before its first step never runs its coroutine at all, so the
  ``try``/``except``/``finally`` a coroutine keeps for its own cleanup never runs either:
  ``asyncio.run`` ending, a ``gather`` that held it cancelled, a pool closed in the turn
  the task was made. :func:`guarded_task` makes such a task and, if its coroutine never
  started, calls a synchronous ``never_started`` from the task's done callback.
* What cannot be awaited any more (the loop is going away) is finished by a thread of its
  own (:func:`off_loop`). Those threads are counted, so that whoever closes a gateway can
  wait for them (:func:`off_loop_done`): a caller that has awaited ``aclose()`` and then
  looks for leftovers must find none.

And one way a cleanup comes late: an object in a reference cycle is freed only at the next
garbage collection, not when its last reference goes. A callback that an object's own
parts keep (:func:`weakly`) must not hold the object, or a gateway dropped unclosed keeps
its pool's processes alive until the collector runs.
"""

from __future__ import annotations

import asyncio
import threading
import time
import weakref
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

__all__ = [
    "CLEANUP_TIMEOUT",
    "guarded_task",
    "join_off_loop",
    "off_loop",
    "off_loop_done",
    "weakly",
]

_T = TypeVar("_T")

#: The longest a close waits for the off-loop cleanups (each is bounded: a cgroup's
#: settle, 5 s; a killed child's exit, 2 s; then a directory's removal).
CLEANUP_TIMEOUT = 15.0

_threads: set[threading.Thread] = set()
# Reentrant: off_loop runs from finalizers, and a collection may come inside the lock.
_lock = threading.RLock()


def guarded_task(
    start: Callable[[], Coroutine[Any, Any, _T]],
    never_started: Callable[[], None],
    loop: asyncio.AbstractEventLoop | None = None,
) -> asyncio.Task[_T]:
    """A task running ``start()``'s coroutine on ``loop`` (default: the running loop);
    if the task ends before that coroutine took its first step (cancelled in the turn it
    was made, or as its loop ends), ``never_started()`` is called from its done callback,
    on the loop, and must not wait (a thread, :func:`off_loop`, waits for it).

    ``start`` is called in the task's first step: a task that never runs makes no
    coroutine either (none is left "never awaited")."""
    started = False

    async def first_step() -> _T:
        nonlocal started
        started = True
        return await start()

    def done(_: asyncio.Task[_T]) -> None:
        if not started:
            never_started()

    task = (loop or asyncio.get_running_loop()).create_task(first_step())
    task.add_done_callback(done)
    return task


def off_loop(fn: Callable[[], Any], name: str) -> None:
    """Run ``fn`` (a bounded cleanup that may wait) in a thread of its own: for what must
    still be finished when the event loop can no longer await it. Not a daemon thread, so
    the interpreter waits for it at exit (each such cleanup is bounded); counted until it
    ends, for :func:`off_loop_done`."""

    def run() -> None:
        try:
            fn()
        finally:
            with _lock:
                _threads.discard(thread)

    thread = threading.Thread(target=run, name=f"kernelgate-{name}", daemon=False)
    with _lock:  # started before another thread's join_off_loop sees it (its end waits)
        thread.start()
        _threads.add(thread)


def join_off_loop(timeout: float = CLEANUP_TIMEOUT) -> bool:
    """Wait (blocking) until every off-loop cleanup of this process has ended, those they
    start included; False if some still run after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    me = threading.current_thread()
    while True:
        with _lock:
            live = [t for t in _threads if t is not me]
        if not live:
            return True
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        for thread in live:
            thread.join(max(0.0, deadline - time.monotonic()))


async def off_loop_done(timeout: float = CLEANUP_TIMEOUT) -> bool:
    """:func:`join_off_loop` without blocking the event loop (no thread is used when no
    cleanup runs, the usual case)."""
    with _lock:
        if not _threads:
            return True
    return await asyncio.to_thread(join_off_loop, timeout)


def weakly(method: Callable[[], _T]) -> Callable[[], _T]:
    """The bound ``method``, holding its object weakly: for a part of the object (which
    the object holds) to call back without making a cycle through it."""
    ref = weakref.WeakMethod(method)
    name = method.__qualname__  # not the method itself: it holds its object

    def call() -> _T:
        bound = ref()
        if bound is None:  # only the object's own parts call it, while it is alive
            raise ReferenceError(f"{name}: its object is gone")
        return bound()

    return call
