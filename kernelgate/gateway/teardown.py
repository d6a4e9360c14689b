"""Teardown: the end of a run's child, and the waits every ending needs, all async.

Nothing here blocks the event loop, which serves every run of the host: a child's exit is
awaited on its pidfd (or its zygote's report), a cgroup is emptied in short awaited steps,
and what cannot be awaited any more (the loop is going away) is finished by a thread of
its own, never by a blocking wait on the loop.
"""

from __future__ import annotations

import asyncio
import os
import select
import signal
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol, TypeVar

from .cgroups import CgroupRoots, RunCgroup
from .channel import ChildChannel
from .cleanups import guarded_task, off_loop
from .process import ChildProcess, backoff, log, remove_tree, sweep_run_dirs
from .runids import RunIds

__all__ = [
    "Calls",
    "IdleChild",
    "Teardown",
    "discard",
    "discard_all_blocking",
    "discard_idle",
    "discard_now",
    "discard_in_task",
    "sweep_leftovers",
    "empty_cgroup",
    "off_loop",
    "reap",
    "remove_cgroup",
    "remove_dir",
    "release_ids",
    "settle_off_loop",
    "wait_readable",
]

#: How long a killed child may take to be gone before the teardown stops waiting for it.
_GONE_TIMEOUT = 2.0
#: Seconds the sweep of dead hosts' run directories may take (the first run waits for it):
#: a dead host's programs may have left trees that take minutes to remove.
SWEEP_TIMEOUT = 20.0


async def wait_readable(fd: int, timeout: float) -> bool:
    """Wait until ``fd`` (a pidfd: the process exited) is readable; False on timeout."""
    loop = asyncio.get_running_loop()
    ready: asyncio.Future[None] = loop.create_future()

    def on_ready() -> None:
        if not ready.done():
            ready.set_result(None)

    loop.add_reader(fd, on_ready)
    try:
        await asyncio.wait_for(ready, timeout)
    except asyncio.TimeoutError:
        return False
    finally:
        loop.remove_reader(fd)
    return True


class IdleChild(Protocol):
    """A warm child no run has taken (a :class:`~.pool.PooledChild`)."""

    pidfd: int
    run_dir: str
    cgroup: RunCgroup | None
    ids: RunIds | None

    def kill_all(self) -> None: ...
    def wait_gone(self, timeout: float) -> bool: ...
    def close(self) -> None: ...


class _Closable(Protocol):
    def close(self) -> None: ...


_Idle = TypeVar("_Idle", bound=IdleChild)


async def wait_gone(child: ChildProcess | IdleChild, timeout: float = _GONE_TIMEOUT) -> bool:
    """Wait until ``child`` has exited (not necessarily reaped); False on timeout."""
    if child.wait_gone(0):  # reaped, closed, or its pidfd readable already: no wait
        return True
    return await wait_readable(child.pidfd, timeout)


async def empty_cgroup(cgroup: RunCgroup, remove: bool = True) -> bool:
    """Kill everything in ``cgroup``; then remove it, or leave it empty for reuse. True on
    success; False after the backstop (never hang the caller; the leak checks see it)."""
    for delay in backoff():
        if cgroup.settle(remove):
            return True
        await asyncio.sleep(delay)
    return cgroup.settle(remove)


def _rmdir(path: str) -> bool:
    """Remove ``path`` if it is an empty directory (or gone); False if anything is left."""
    try:
        os.rmdir(path)
    except FileNotFoundError:
        return True
    except OSError:
        return False  # not empty, or no longer a directory (remove_tree sees to both)
    return True


async def remove_dir(path: str) -> None:
    """Remove a run directory without blocking the loop: an empty one at once (the usual
    case), anything a program left in it (any number of files) in a worker thread."""
    if not _rmdir(path):
        # Submitted to the thread now, not from a task that a cancellation could stop
        # before it starts (asyncio.run cancels every task it finds, a fresh one too):
        # then the directory was never removed.
        removal = asyncio.get_running_loop().run_in_executor(None, remove_tree, path)
        try:
            await asyncio.shield(removal)
        except asyncio.CancelledError:
            # The thread goes on whatever we do; wait for it (the removal has a deadline
            # of its own), so that whoever cancelled finds the directory gone, not going.
            await asyncio.wait([removal])
            raise


async def remove_cgroup(cgroup: RunCgroup) -> None:
    """Empty and remove ``cgroup``; if cancelled first, finish it off the loop."""
    try:
        await empty_cgroup(cgroup)
    except BaseException:
        off_loop(cgroup.settle_blocking, "cgroup")
        raise


async def reap(pid: int, timeout: float = 5.0) -> None:
    """Reap our child ``pid`` (already signalled) without blocking the loop: await its
    pidfd, then collect it. One that does not exit in time is reaped off the loop."""
    try:
        pidfd = os.pidfd_open(pid)
    except OSError:
        pidfd = -1  # already reaped (or no pidfds): nothing to await
    exited = pidfd < 0
    try:
        if not exited:
            exited = await wait_readable(pidfd, timeout)
    finally:
        if pidfd >= 0:
            os.close(pidfd)
        if not exited:  # not gone in time, or cancelled: reaped by a thread
            off_loop(lambda: _waitpid(pid, 0), "reap")
    if exited:
        _waitpid(pid, os.WNOHANG)


def _waitpid(pid: int, flags: int) -> None:
    try:
        os.waitpid(pid, flags)
    except ChildProcessError:
        pass


def release_ids(child: ChildProcess | IdleChild) -> None:
    """Give the run's uid back (see :mod:`.runids`): last, once its processes are gone and
    its directory is removed, so no later run shares the uid with anything of this one."""
    if child.ids is not None:
        child.ids.release()


def settle_off_loop(cgroup: RunCgroup, ids: RunIds | None) -> None:
    """Empty and remove ``cgroup`` in a thread of its own, then give back the run's uid."""

    def settle() -> None:
        try:
            cgroup.settle_blocking()
        finally:
            if ids is not None:
                ids.release()

    off_loop(settle, "cgroup")


async def discard(child: IdleChild) -> None:
    """Kill an idle child and remove its run directory and cgroup, awaiting its exit."""
    child.kill_all()
    try:
        await wait_gone(child)
    except BaseException:  # cancelled: finish without the loop
        discard_now(child)
        raise
    child.close()
    try:
        await remove_dir(child.run_dir)
        if child.cgroup is not None:
            await remove_cgroup(child.cgroup)  # cancelled: finished off the loop
    finally:
        release_ids(child)  # the child is gone: its uid is free, cancelled or not


def discard_in_task(child: IdleChild, tasks: set[asyncio.Task[None]]) -> None:
    """:func:`discard` ``child`` in a task of the running loop, kept in ``tasks`` until done.

    A task cancelled before its first step (the loop ending, a pool closed in the same
    turn) never runs its coroutine, so its own cleanup never runs either: its done
    callback then discards the child without the loop."""
    task = guarded_task(lambda: discard(child), lambda: discard_now(child))
    tasks.add(task)
    task.add_done_callback(tasks.discard)


def discard_now(child: IdleChild) -> None:
    """:func:`discard` without the loop and without waiting (cancelled, or the loop gone):
    kill it, remove its directory; its cgroup (which the kill empties) is removed now or,
    if its processes have not left yet, in a thread of its own, then its uid given back."""
    child.kill_all()
    child.close()
    remove_tree(child.run_dir)
    if child.cgroup is not None and not child.cgroup.settle():
        settle_off_loop(child.cgroup, child.ids)
    else:
        release_ids(child)


async def discard_idle(
    ready: list[Any],
    free: list[RunCgroup],
    tasks: Sequence[asyncio.Task[Any] | None],
    finalizer: Any,
    name: str,
    then: Callable[[], Awaitable[Any]] | None = None,
) -> None:
    """A pool's ``aclose``: :func:`discard` every idle child of ``ready`` and remove the
    ``free`` cgroups (both lists emptied), await the pool's ``tasks`` of this loop (those
    of a loop that ended were cancelled with it), then ``then()``; and detach the pool's
    ``finalizer``. Cancelled midway, the children not yet reaped go back to ``ready`` and
    the finalizer (which holds the lists) finishes in a thread of its own."""
    children, ready[:] = list(ready), []
    cgroups, free[:] = list(free), []
    loop = asyncio.get_running_loop()
    try:
        await asyncio.gather(
            *(discard(child) for child in children),
            *(remove_cgroup(cgroup) for cgroup in cgroups),
            *(t for t in tasks if t is not None and t.get_loop() is loop),
            return_exceptions=True,
        )
        if then is not None:
            await then()
    except BaseException:
        ready.extend(c for c in children if not c.reaped)
        off_loop(finalizer, name)
        raise
    finalizer.detach()


def discard_all_blocking(
    ready: list[_Idle],
    zygote_box: Sequence[_Closable | None],
    free: list[RunCgroup],
    booting: list[_Idle] | None = None,
) -> None:
    """:func:`discard` every child in ``ready`` and ``booting``, remove the ``free``
    cgroups and close the zygote, waiting: the pool's finalizer (a synchronous close, the
    pool collected, or an ``aclose`` cancelled midway, then in a thread of its own), never
    on the event loop. ``booting``: children whose boot tasks may never run again (a pool
    collected with its loop gone)."""
    if booting:
        ready.extend(booting)
        booting.clear()
    while ready:
        child = ready.pop()
        child.kill_all()
        child.wait_gone(_GONE_TIMEOUT)
        child.close()
        remove_tree(child.run_dir)
        if child.cgroup is not None:
            child.cgroup.settle_blocking()
        release_ids(child)
    while free:
        free.pop().settle_blocking()
    for zygote in zygote_box:
        if zygote is not None:
            zygote.close()


def sweep_leftovers(base_dir: str | None, cgroup_roots: CgroupRoots | None) -> list[str]:
    """Remove the run directories under ``base_dir`` (default: the temporary directory)
    and the run cgroups under ``cgroup_roots`` of hosts that are gone (never a live
    host's: names carry their owner, see :func:`~.process.owner_prefix`); return the
    names removed. Two listdirs and a /proc read per marked entry; a dead host's cgroup
    may take a moment to empty, and its run directories as long as its programs took to
    fill them, so it is called off the event loop. Nothing found there makes it raise
    (every later gateway's first ``run()`` calls it): what cannot be removed is logged
    and left. The first run waits for it: the run directories get :data:`SWEEP_TIMEOUT`
    seconds; what is left then is the next sweep's."""
    removed: list[str] = []
    try:
        removed += sweep_run_dirs(base_dir, SWEEP_TIMEOUT)
    except Exception as exc:  # a crafted entry never stops a gateway
        log.warning("kernelgate: the sweep of %r stopped: %r", base_dir, exc)
    try:
        removed += RunCgroup.sweep(cgroup_roots)
    except Exception as exc:
        log.warning("kernelgate: the sweep of %r stopped: %r", cgroup_roots, exc)
    return removed


class Calls(Protocol):
    """What the teardown needs of the run's calls (a :class:`~.calls.CallDispatcher`)."""

    def cancel_now(self) -> None: ...

    async def cancel_all(self) -> None: ...


class Teardown:
    """The end of one run's child: noticing its exit, taking what it wrote, reaping it,
    emptying its cgroup, cancelling its calls, removing its run directory.
    ``recycle(cgroup)``, when the child came from a pool, gives the cgroup back to it;
    without it the cgroup is removed. Timers made with :meth:`call_later` end with the run."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        child: ChildProcess,
        channel: ChildChannel,
        calls: Calls,
        *,
        level: str,
        run_dir: str,
        cgroup: RunCgroup | None,
        recycle: Callable[[RunCgroup], Awaitable[None]] | None = None,
    ) -> None:
        self._loop = loop
        self._child = child
        self._channel = channel
        self._calls = calls
        self._level = level
        self._run_dir = run_dir
        self._cgroup = cgroup
        self._recycle = recycle
        self._timers: list[asyncio.TimerHandle] = []
        #: Done once the child has exited and everything it wrote has been taken.
        self.exited: asyncio.Future[None] = loop.create_future()
        self._waiter: asyncio.Future[None] | None = None  # finish's own, for the exit

    def watch(self) -> None:
        """Notice the child's exit: its pidfd, or (without one) its zygote's report."""
        self._channel.open(self._on_exit)
        if self._child.pidfd < 0 and self._child.reaped_by_zygote:
            self._child.on_status(self._on_exit)

    def call_later(
        self, delay: float, callback: Callable[..., Any], *args: Any
    ) -> asyncio.TimerHandle:
        """``loop.call_later``, cancelled when the run is released."""
        timer = self._loop.call_later(delay, callback, *args)
        # A debugged run cancels and re-arms its clock at every stop: keep only live ones.
        self._timers = [t for t in self._timers if not t.cancelled()]
        self._timers.append(timer)
        return timer

    def _on_exit(self) -> None:
        child = self._child
        if self.exited.done():
            return
        if child.reaped_by_zygote:
            if not child.try_reap():
                # It is gone (its pidfd fired); the zygote that reaps it reports how it
                # ended in a moment (having killed its process group first).
                self._channel.unwatch(child.pidfd)
                child.on_status(self._on_exit)
                return
        else:
            # Unreaped, the child is a zombie that still holds its process group id, so
            # this cannot reach a stranger that reused the number.
            child.signal_group(signal.SIGKILL)
        self._channel.unwatch(child.pidfd)
        self._channel.drain()
        self.exited.set_result(None)
        if (waiter := self._waiter) is not None and not waiter.done():  # next turn, not 2
            waiter.set_result(None)

    async def settle(self) -> None:
        """After the exit: what the program left behind is killed, the child reaped, its
        cgroup emptied (and given back or removed), its calls cancelled."""
        child = self._child
        self._channel.stop_reading()
        if not child.reaped and self._level == "process" and self._cgroup is None:
            # No pid namespace and no cgroup: the process group is the only handle on what
            # the program left behind. Wait for it to die while the unreaped leader keeps
            # the group id ours. (With namespaces, the namespace is already empty.)
            for delay in backoff():
                if not child.group_alive():
                    break
                child.signal_group(signal.SIGKILL)
                await asyncio.sleep(delay)
        child.try_reap()
        if (cgroup := self._cgroup) is not None:
            # Given back (forked into at once) or removed, it is not _abandon's to empty.
            if self._recycle is not None:
                await self._recycle(cgroup)  # mkdir and rmdir cost ms each
                self._cgroup = None
            elif await empty_cgroup(cgroup):
                self._cgroup = None
        await self._calls.cancel_all()

    async def kill_and_settle(self) -> None:
        """The caller gave up: kill everything, wait until it is gone, settle."""
        self._child.kill_all()
        while not self.exited.done():
            try:
                await asyncio.shield(self.exited)
            except asyncio.CancelledError:
                continue
        await self.settle()

    async def finish(self, kill_after: float | None = None) -> None:
        """A replied run's teardown (a task); its child, not gone ``kill_after`` s on, killed."""
        if kill_after is not None and not self.exited.done():
            self.call_later(kill_after, self._child.signal_group, signal.SIGKILL)
        try:
            if not self.exited.done():  # a future of its own: cancelled, exited is not
                waiter = self._waiter = self._loop.create_future()
                await waiter
            await self.settle()
        except GeneratorExit:
            # The task is destroyed with its loop: nothing can be awaited any more.
            self._finish_off_loop()
            raise
        except asyncio.CancelledError:
            # The loop is closing (asyncio.run ends) with the child still on its way out;
            # it still runs this task to its end, so the waits are awaited.
            try:
                await self._abandon()
            finally:
                await self.release()
            raise
        except BaseException:
            await self.release()
            raise
        await self.release()

    async def _abandon(self) -> None:
        """Kill the child, wait (bounded) until it is gone, empty its cgroup if still ours."""
        self._calls.cancel_now()
        self._child.kill()
        try:
            await asyncio.wait_for(asyncio.shield(self.exited), _GONE_TIMEOUT)
        except (asyncio.TimeoutError, asyncio.CancelledError):
            pass
        self._child.try_reap()
        if self._cgroup is not None:
            try:
                await remove_cgroup(self._cgroup)
            except asyncio.CancelledError:
                pass  # finished off the loop

    def finish_in_task(self, kill_after: float | None = None) -> asyncio.Task[None]:
        """:meth:`finish` in a task of the run's loop. Cancelled before its first step
        (a gateway's ``aclose`` cancelled in the turn the run returned, the loop ending),
        the task never runs ``finish``, nor its cleanup: the child is then finished
        without the loop (:meth:`_finish_off_loop`)."""
        return guarded_task(lambda: self.finish(kill_after), self._finish_off_loop, self._loop)

    def _finish_off_loop(self) -> None:
        """Where nothing can be awaited: kill the child and close our ends of it now; a
        thread waits for its exit (and reaps it, if it is ours), then empties and removes
        its cgroup, removes its run directory and gives its uid back, in that order."""
        child, cgroup, run_dir = self._child, self._cgroup, self._run_dir
        self._calls.cancel_now()
        child.kill_all()
        # Our own copy: closing the channel closes the child's pidfd.
        pidfd = -1 if child.reaped or child.pidfd < 0 else os.dup(child.pidfd)
        self._close()
        # After the close, which may reap it (LaunchedChild): never waitpid a freed number.
        ours = not (child.reaped or child.reaped_by_zygote)

        def finish() -> None:
            try:
                if pidfd >= 0:
                    select.select([pidfd], [], [], _GONE_TIMEOUT)
                if ours:  # SIGKILLed: its exit is on its way
                    _waitpid(child.pid, 0)
                if cgroup is not None:
                    cgroup.settle_blocking()
                remove_tree(run_dir)
            finally:
                if pidfd >= 0:
                    os.close(pidfd)
                release_ids(child)

        off_loop(finish, "finish")

    def _close(self) -> None:
        for timer in self._timers:
            timer.cancel()
        self._channel.close()

    async def release(self) -> None:
        """The last step of either ending: timers and our fds at once, then the run dir."""
        self._close()
        try:
            await remove_dir(self._run_dir)
        finally:  # cancelled: the worker thread removes it still; never keep the uid
            release_ids(self._child)

    def release_now(self) -> None:
        """:meth:`release` where nothing can be awaited (the loop is gone)."""
        self._close()
        remove_tree(self._run_dir)
        release_ids(self._child)
