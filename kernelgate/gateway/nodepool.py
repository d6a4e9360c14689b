"""The warm pool of Node children: started ahead through the launcher, each for one run.

There is no booted template to fork (V8 cannot be forked with its threads), so a pooled
Node child is a cold child started early: its uid, run directory and run cgroup are made
first, it enters the cgroup before the launcher does anything (as a cold child does), the
launcher confines it and execs ``node``, and Node boots and loads the kernel while no run
waits for it. A run that takes it sends its program at once.

What a launched child cannot change once it started: the launcher applies the rlimits
before it execs ``node``, and V8's heap flag (from ``memory_bytes``) is on ``node``'s
command line. So the pool is made for one :class:`~.sandbox.SandboxPlan` (the gateway's
default limits at its level) and only runs with that plan take its children
(:meth:`NodePool.takes`); a run with other limits starts cold, counted in
``cold_fallbacks``. The run's cgroup limits (``pids.max``, memory) are set by the run as
for any pooled child (:meth:`.cgroups.RunCgroup.begin`).

:meth:`NodePool.acquire` never waits: a child is ready as soon as it is started (one
taken before Node has booted still saves its launcher's and Node's start-up that far),
and with none ready the run starts cold while the pool refills in a task.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import secrets
import threading
import weakref
from collections.abc import Callable, Mapping
from typing import Any

from .cgroups import CgroupRoots, RunCgroup
from .launch import LaunchCommand, spawn_launched_child
from .loops import cancel_in_loop
from .pool import WarmChild
from .process import ChildProcess, make_run_dir, remove_tree
from .recycle import recycle_cgroup
from .runids import RunIds, allocate_ids
from .sandbox import SandboxPlan
from .teardown import (
    discard,
    discard_all_blocking,
    discard_idle,
    discard_in_task,
    off_loop,
    remove_cgroup,
)

__all__ = ["LaunchedChild", "NodePool"]

#: How long a refill waits when other children are still ready: the run that just took
#: one boots nothing, but a child booting beside it takes CPU it would use.
_REFILL_DELAY = 0.02
#: pids.max of an idle child's cgroup (no user code runs in it yet).
_IDLE_PIDS = 1 << 20
#: Failed starts in a row after which a refill gives up (until the next acquire).
_MAX_FAILURES = 3


class LaunchedChild(WarmChild):
    """A pooled child started by the launcher: the host is its parent and reaps it
    (closing it reaps it if it has exited; one killed but not gone yet is reaped by a
    thread of its own, so no zombie is left)."""

    @classmethod
    def of(cls, child: ChildProcess, run_dir: str, ids: RunIds | None) -> LaunchedChild:
        made = cls(
            child.pid, child.pidfd, child.control, child.stdout_fd, child.stderr_fd, run_dir=run_dir
        )
        made.inherited_maxrss_kib = child.inherited_maxrss_kib
        made.ids = ids
        return made

    def alive(self) -> bool:
        return not self.reaped and not self.wait_gone(0)

    def close(self) -> None:
        if not self.reaped and not self.try_reap():
            pid = self.pid

            def reap_later() -> None:
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, 0)

            self.reaped = True  # by that thread: no signal may reach the pid after this
            off_loop(reap_later, "reap")
        super().close()


class NodePool:
    """Keeps ``size`` Node children started for runs at ``sandbox`` (a
    :class:`~.runtime.ChildPool`; :meth:`.noderuntime.NodeRuntime.warm_pool` makes it).

    ``spawn(run_dir, ids, before_start)`` starts one launched child (warm) for ``sandbox``
    in ``run_dir`` with ``ids``.
    """

    def __init__(
        self,
        *,
        size: int,
        sandbox: SandboxPlan,
        spawn: Callable[[str, RunIds | None, Callable[[ChildProcess], None]], ChildProcess],
        base_dir: str | None,
        cgroup_roots: CgroupRoots | None,
    ) -> None:
        self.size = size
        self.sandbox = sandbox
        self._spawn = spawn
        self.base_dir = base_dir
        self.cgroup_roots = cgroup_roots
        self.closed = False
        self.cold_fallbacks = 0
        #: Children handed to runs (the warm runs).
        self.handed_out = 0
        #: Idle children found dead (killed, or could not enter their sandbox) and dropped.
        self.discarded = 0
        self._ready: list[LaunchedChild] = []
        self._free_cgroups: list[RunCgroup] = []
        self._filler: asyncio.Task[None] | None = None
        self._discarding: set[asyncio.Task[None]] = set()
        self._names = itertools.count()
        self._token = secrets.token_hex(4)  # names unique across pools and processes
        self._key = _key(sandbox)
        self._finalizer = weakref.finalize(
            self, discard_all_blocking, self._ready, [None], self._free_cgroups
        )
        # The loops of several threads may take children at once (see .loops): what they
        # share is changed under this lock, never across an await.
        self._lock = threading.RLock()

    @property
    def level(self) -> str:
        return self.sandbox.level

    @property
    def ready(self) -> int:
        return len(self._ready)

    def takes(self, sandbox: SandboxPlan) -> bool:
        """Whether a run with ``sandbox`` may take a child of this pool: the same level,
        rlimits (V8's heap among them) and paths the children were started with. A run
        that may not starts cold and is counted in ``cold_fallbacks``."""
        if _key(sandbox) == self._key:
            return True
        self.cold_fallbacks += 1
        return False

    async def acquire(self) -> LaunchedChild | None:
        """A started child (never waits for one), or None: the run starts a cold one."""
        child = None
        with self._lock:
            while self._ready and not self.closed:  # closed: close() discards them
                candidate = self._ready.pop(0)
                if candidate.alive():
                    child = candidate
                    break
                self.discarded += 1
                self._discard_later(candidate)
        self.refill(delay=_REFILL_DELAY if child is not None and self._ready else 0.0)
        if child is None:
            self.cold_fallbacks += 1
        else:
            self.handed_out += 1
        return child

    async def filled(self) -> None:
        """Wait until the refill under way (if any) has ended: ``size`` children started,
        or the pool closed, or starting failed."""
        filler = self._filler
        if (
            filler is not None
            and not filler.done()
            and filler.get_loop() is asyncio.get_running_loop()
        ):
            await asyncio.wait([filler])

    def _discard_later(self, child: LaunchedChild) -> None:
        discard_in_task(child, self._discarding)

    def refill(self, delay: float = 0.0) -> None:
        """Start children until ``size`` are ready, in a task (never on the caller's time)."""
        with self._lock:
            if self.closed or self.size <= 0 or len(self._ready) >= self.size:
                return
            if self._filler is not None and not self._filler.done():
                return
            self._filler = asyncio.get_running_loop().create_task(self._fill(delay))

    async def _fill(self, delay: float) -> None:
        if delay:
            await asyncio.sleep(delay)
        failures = 0
        while not self.closed and len(self._ready) < self.size and failures < _MAX_FAILURES:
            child = await self._start_one()
            if child is None:
                failures += 1
                continue
            with self._lock:
                closed = self.closed
                if not closed:
                    self._ready.append(child)
            if closed:
                await discard(child)
                return
            # One start at a time, a loop turn apart: Node's boot is the children's CPU.
            await asyncio.sleep(0)

    async def _start_one(self) -> LaunchedChild | None:
        """One child in its own uid, run directory and cgroup; None if any cannot be made."""
        name = f"nodepool-{self._token}-{next(self._names)}"
        with self._lock:
            cgroup: RunCgroup | None = self._free_cgroups.pop() if self._free_cgroups else None
        if cgroup is None and self.cgroup_roots is not None:
            # Unbounded while idle (no user code runs; Node's threads count as pids): the
            # run that takes the child bounds both (RunCgroup.begin), as WarmPool's do.
            try:
                cgroup = RunCgroup(self.cgroup_roots, name, _IDLE_PIDS, None)
            except OSError:
                return None
        ids: RunIds | None = None
        try:
            ids = allocate_ids()  # its own uid before it exists (see .runids)
            run_dir = make_run_dir(self.base_dir, name, ids)
        except OSError:
            if ids is not None:
                ids.release()
            if cgroup is not None:
                await remove_cgroup(cgroup)
            return None
        entered: list[RunCgroup] = []

        def enter_cgroup(started: ChildProcess) -> None:
            # Before the launcher reads its config: everything it forks is counted there.
            if cgroup is not None:
                cgroup.attach(started.pid)
                entered.append(cgroup)

        try:
            started = self._spawn(run_dir, ids, enter_cgroup)
        except OSError:
            # Not started (the launcher was killed and reaped if it was).
            remove_tree(run_dir)
            if cgroup is not None:
                await remove_cgroup(cgroup)
            if ids is not None:
                ids.release()
            return None
        except BaseException:
            remove_tree(run_dir)
            if cgroup is not None and not cgroup.settle():
                off_loop(cgroup.settle_blocking, "cgroup")
            if ids is not None:
                ids.release()
            raise
        child = LaunchedChild.of(started, run_dir, ids)
        child.cgroup = cgroup
        return child

    async def recycle_cgroup(self, cgroup: RunCgroup) -> None:
        """Empty the cgroup of a finished run and keep it for the next child; or remove it
        (:func:`.recycle.recycle_cgroup`, as :meth:`.pool.WarmPool.recycle_cgroup`)."""
        await recycle_cgroup(
            cgroup, self._free_cgroups, self.size, self._is_closed, self._lock, _unbounded
        )

    def _is_closed(self) -> bool:
        return self.closed

    def _stop(self) -> None:
        with self._lock:  # from any thread: nothing is taken or kept once it is set
            self.closed = True
        cancel_in_loop(self._filler)

    def close(self) -> None:
        """Kill every idle child and remove its directory, cgroup and uid, waiting: for
        synchronous callers, never on the event loop (there, :meth:`aclose`)."""
        self._stop()
        self._finalizer()

    async def aclose(self) -> None:
        """:meth:`close` without blocking the event loop: every exit is awaited."""
        self._stop()
        await discard_idle(
            self._ready,
            self._free_cgroups,
            (self._filler, *self._discarding),
            self._finalizer,
            "nodepool",
        )


def _unbounded(cgroup: RunCgroup) -> None:
    """An idle child's cgroup: memory unbounded again (the run that takes it sets it)."""
    cgroup.limit(_IDLE_PIDS, None)


def _key(sandbox: SandboxPlan) -> tuple[Any, ...]:
    """What a launched child was started with and cannot change: level, rlimits (the heap
    flag is RLIMIT_AS's), paths."""
    return (
        sandbox.level,
        sorted((k, tuple(v)) for k, v in sandbox.rlimits.items()),
        sandbox.read_paths,
        sandbox.write_paths,
    )


def launched_spawner(
    python: str,
    env: Mapping[str, str],
    sandbox: SandboxPlan,
    command: LaunchCommand,
) -> Callable[[str, RunIds | None, Callable[[ChildProcess], None]], ChildProcess]:
    """What :class:`NodePool` starts its children with: the launcher, warm, for ``sandbox``."""

    def spawn(
        run_dir: str, ids: RunIds | None, before_start: Callable[[ChildProcess], None]
    ) -> ChildProcess:
        return spawn_launched_child(
            python, env, run_dir, sandbox.child_options(ids), command, before_start, warm=True
        )

    return spawn
