"""A finished run's cgroup, emptied and kept for a pool's next child, or removed."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from .cgroups import RunCgroup
from .teardown import empty_cgroup

__all__ = ["LEFT_MEMORY", "recycle_cgroup"]

#: Memory a finished run may leave charged to its cgroup for the cgroup to be reused.
LEFT_MEMORY = 1 << 20


async def recycle_cgroup(
    cgroup: RunCgroup,
    free: list[RunCgroup],
    size: int,
    closed: Callable[[], bool],
    lock: AbstractContextManager[Any],
    before_kept: Callable[[RunCgroup], None] | None = None,
) -> None:
    """Empty the cgroup of a finished run and append it to ``free`` for a pool's next
    child; or remove it, when the pool is ``closed()`` or keeps ``size`` cgroups already
    (asked before and after the wait: it may have changed meanwhile) or anything is still
    charged to it. A kept cgroup holds half a dozen open fds (its files, read at every
    run): no more are kept than the pool forks children into, or a burst of runs would
    leave the host as many fds per run it once had in flight, for good.

    A killed process leaves cgroup.procs when it exits but stays charged to pids.current
    until it is reaped (an orphan waits for the system's init, seconds on some machines):
    a next run here would get fewer than max_processes. Memory the run left charged
    (page cache of its files, a tmpfs file that outlives it at ``process`` level) would
    count against the next run's memory_bytes: what reclaim cannot give back makes the
    cgroup go. Removing the cgroup waits for neither (rmdir needs no process left, not
    no charge; the kernel moves leftover memory to the parent). ``before_kept``: what the
    pool resets in a cgroup it keeps. ``lock``: the pool's, under which it is closed and
    ``free`` emptied (from another thread, maybe): a cgroup is kept only under it.
    """

    def keeps_more() -> bool:
        return not closed() and len(free) < size

    if not keeps_more():
        await empty_cgroup(cgroup)
    elif await empty_cgroup(cgroup, remove=False):  # mkdir and rmdir cost ms each
        left = cgroup.memory_charged()  # nothing runs in it now: read again after reclaim
        if left > LEFT_MEMORY:
            cgroup.reclaim()
            left = cgroup.memory_charged()
        kept = False
        if cgroup.charged() == 0 and left <= LEFT_MEMORY:
            if before_kept is not None:
                before_kept(cgroup)
            with lock:
                kept = keeps_more()
                if kept:
                    free.append(cgroup)
        if not kept:
            await empty_cgroup(cgroup)
