"""What one event loop hands another: a gateway is shared by loops in several threads.

A gateway serves every loop that awaits its runs, one after the other or at once (threads
each calling ``run_sync``, each ``asyncio.run`` of its own). What its pool and zygote share
between runs is then touched from several threads: a future or a task belongs to the loop
that made it, and is resolved or cancelled there, never from another thread (asyncio's
objects are not thread-safe: set from elsewhere, the loop is not even woken).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["call_in_loop", "cancel_in_loop", "resolve_in_loop", "running_loop"]

T = TypeVar("T")


def running_loop() -> asyncio.AbstractEventLoop | None:
    """This thread's running loop (None: none)."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def call_in_loop(loop: asyncio.AbstractEventLoop, fn: Callable[..., Any], *args: Any) -> bool:
    """``fn(*args)`` on ``loop``: now when it is this thread's running loop, else as its next
    callback (the loop woken for it). False, and nothing done, when ``loop`` is closed:
    nothing of it can run or wait any more."""
    if running_loop() is loop:
        fn(*args)
        return True
    try:
        loop.call_soon_threadsafe(fn, *args)
    except RuntimeError:  # closed
        return False
    return True


def _set_result(fut: asyncio.Future[T], value: T) -> None:
    if not fut.done():
        fut.set_result(value)


def _set_exception(fut: asyncio.Future[Any], exc: BaseException) -> None:
    if not fut.done():
        fut.set_exception(exc)


def resolve_in_loop(
    fut: asyncio.Future[T], value: T | None = None, exc: BaseException | None = None
) -> None:
    """Set ``fut``'s result (or ``exc``) on its own loop, unless it is done by then."""
    if exc is not None:
        call_in_loop(fut.get_loop(), _set_exception, fut, exc)
    else:
        call_in_loop(fut.get_loop(), _set_result, fut, value)


def cancel_in_loop(task: asyncio.Future[Any] | None) -> None:
    """Cancel ``task`` on its own loop (nothing when done, or its loop closed)."""
    if task is not None and not task.done():
        call_in_loop(task.get_loop(), task.cancel)
