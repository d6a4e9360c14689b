"""The warm pool: a zygote per gateway forks booted children ahead of demand.

Every run still gets a fresh process: a pooled child has imported the bootstrap and asyncio
(inherited from the zygote, which never runs user code), entered its sandbox and waits for
its one program; it serves one run and exits. The pool refills in the background; when it
is empty a run waits for the next child as long as the zygote keeps delivering, and spawns a
cold child when it does not (or before the zygote is up).

A child is ready once it has booted and parked (its first byte on fd 3, see :func:`booted`),
not when the zygote has forked it: a child that dies or hangs while booting is discarded,
never handed out. Forks do not wait for each other's boots; on a root host a child forked
while two others are parked boots at a lower priority, put back before it is handed out
(:func:`in_foreground`).

The zygote's messages are :mod:`kernelgate.wire.zygote`'s events; the pool's teardown
helpers live in :mod:`.teardown`.
"""

# long: over ~500 lines because the zygote's process side (start, watch, restart, its
# socket) and the pool's policy (refill, waiting for a fork, cold fallback) read and write
# the same state; split, each half would reach into the other's.

from __future__ import annotations

import asyncio
import errno
import itertools
import os
import secrets
import select
import signal
import socket
import threading
import types
import weakref
from collections.abc import Callable
from functools import partial
from typing import Any

from kernelgate.kernels.python import ZYGOTE_LOADER, package_root
from kernelgate.wire.connection import Connection
from kernelgate.wire.zygote import (
    BOOTED,
    Exited,
    Forked,
    ForkFailed,
    ForkRequest,
    ZygoteProtocolError,
    decode_reply,
    encode,
)

from .cgroups import CgroupRoots, RunCgroup
from .loops import call_in_loop, cancel_in_loop, resolve_in_loop, running_loop
from .preopen import Preopened, send_bindings
from .process import (
    ChildProcess,
    high_fd,
    make_run_dir,
    owner_prefix,
    remove_tree,
)
from .recycle import recycle_cgroup
from .runids import RunIds, allocate_ids
from .sandbox import SandboxPlan
from .teardown import (
    discard,
    discard_all_blocking,
    discard_idle,
    discard_in_task,
    discard_now,
    reap,
    remove_cgroup,
    remove_dir,
    settle_off_loop,
    sweep_leftovers,
)
from .usage import descendants, keep_proc_fds

__all__ = ["WarmChild", "WarmPool", "PooledChild", "Zygote", "sweep_leftovers"]

#: What the zygote hands a waiting loop once out of its lock (see ``Zygote._hand``).
Handing = Callable[[], object]


#: How long a refill waits when other children are still ready: about a warm run.
_REFILL_DELAY = 0.02
#: How long a forked child may take to boot and park before it is given up (a child that
#: hangs while booting is killed, never handed out); generous: a loaded machine is slow.
_BOOT_TIMEOUT = 10.0


class Zygote:
    """The template process, and the messages it sends: fork replies and exit statuses."""

    def __init__(self, python: str, env: dict[str, str]) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        theirs_fd = high_fd(os.dup(theirs.fileno()))
        theirs.close()
        try:
            self.pid = os.posix_spawn(
                python,
                [python, "-I", "-c", ZYGOTE_LOADER, package_root()],
                env,
                file_actions=[
                    (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                    (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0),
                    (os.POSIX_SPAWN_DUP2, theirs_fd, 3),
                ],
                setsid=True,
                setsigmask=(),
            )
        finally:
            os.close(theirs_fd)
        ours.setblocking(False)
        self.sock = ours
        self.dead = False
        self._ids = itertools.count()
        # Shared by the loops of every thread that runs on this gateway (see .loops): the
        # state below is read and written under the lock, and each future and status
        # callback is handed to the loop that is waiting for it. Reentrant: a collection
        # inside it (any allocation) may run a dropped pool's finalizer, which closes
        # this zygote in the same thread (a plain lock deadlocked the kernel's loop).
        self._lock = threading.RLock()
        self._replies: dict[int, asyncio.Future[Forked | ForkFailed]] = {}
        self._statuses: dict[int, tuple[int, Any]] = {}
        self._status_waiters: dict[int, tuple[asyncio.AbstractEventLoop, Callable[[], None]]] = {}
        #: The loops watching the socket: each that waits for a message watches it itself
        #: (level-triggered: whichever reads first hands each message to its loop). The
        #: socket is closed once none watches it any more: an fd still registered in a
        #: loop's selector must not be closed (its number, reused, would confuse the loop).
        self._readers: set[asyncio.AbstractEventLoop] = set()

    # -- messages ------------------------------------------------------------------------

    def _ensure_reader(self) -> None:
        loop = asyncio.get_running_loop()
        with self._lock:
            if self.dead or loop in self._readers:
                return
            self._forget_closed_loops()
            self._readers.add(loop)
            loop.add_reader(self.sock.fileno(), self._on_readable, loop)

    def _waits_on(self, loop: asyncio.AbstractEventLoop) -> bool:
        return any(f.get_loop() is loop for f in self._replies.values()) or any(
            w[0] is loop for w in self._status_waiters.values()
        )

    def _maybe_drop_reader(self, loop: asyncio.AbstractEventLoop) -> None:
        """On ``loop``: stop watching the socket there once nothing of it waits."""
        with self._lock:
            if loop not in self._readers or (not self.dead and self._waits_on(loop)):
                return
            self._readers.discard(loop)
            if not loop.is_closed():
                loop.remove_reader(self.sock.fileno())
            self._forget_closed_loops()

    def _on_readable(self, loop: asyncio.AbstractEventLoop) -> None:
        self.poll()
        self._maybe_drop_reader(loop)

    def poll(self) -> None:
        """Take every message the zygote has sent so far (never blocks)."""
        handed: list[Handing] = []
        with self._lock:
            while not self.dead:
                try:
                    data = self.sock.recv(65536)
                except (BlockingIOError, InterruptedError):
                    break
                except OSError:
                    data = b""
                if not data:
                    handed += self._died()
                    break
                try:
                    message = decode_reply(data)
                except ZygoteProtocolError:
                    continue
                if isinstance(message, Exited):
                    pid = message.pid
                    ru = types.SimpleNamespace(
                        ru_utime=message.user_s,
                        ru_stime=message.system_s,
                        ru_maxrss=message.maxrss_kib,
                    )
                    self._statuses[pid] = (message.status, ru)
                    waiter = self._status_waiters.pop(pid, None)
                    if waiter is not None:
                        handed.append(partial(call_in_loop, waiter[0], self._status_known, *waiter))
                else:
                    if isinstance(message, Forked):
                        # Its pid was free: the zygote had reaped what held it before,
                        # and that one's status came first on this socket. One still kept
                        # under the number (no run asked: a discarded idle child, a
                        # teardown finished off the loop) is never this child's.
                        self._statuses.pop(message.pid, None)
                    rid = message.request_id
                    fut = None if rid is None else self._replies.pop(rid, None)
                    if fut is not None:
                        handed.append(partial(resolve_in_loop, fut, message))
        self._hand(handed)

    def _status_known(self, loop: asyncio.AbstractEventLoop, callback: Callable[[], None]) -> None:
        callback()
        self._maybe_drop_reader(loop)

    def _hand(self, handed: list[Handing]) -> None:
        """Outside the lock: each reply to its future's loop, each callback to its own."""
        for hand in handed:
            hand()

    def _died(self) -> list[Handing]:
        """Under the lock: dead; what is to be handed to the loops waiting (see _hand)."""
        self.dead = True
        handed: list[Handing] = [
            partial(resolve_in_loop, fut, exc=OSError("the zygote exited"))
            for fut in self._replies.values()
        ]
        self._replies.clear()
        handed += [
            partial(call_in_loop, w[0], self._status_known, *w)
            for w in self._status_waiters.values()
        ]
        self._status_waiters.clear()
        here = running_loop()
        for loop in list(self._readers):
            if loop is here or loop.is_closed():
                self._readers.discard(loop)
                if not loop.is_closed():
                    loop.remove_reader(self.sock.fileno())
            else:  # another thread's: it stops watching on its own thread
                handed.append(partial(call_in_loop, loop, self._maybe_drop_reader, loop))
        return handed

    def _forget_closed_loops(self) -> None:
        """Under the lock: loops closed since they watched the socket (their selectors went
        with them) watch it no more; a dead zygote's socket goes with the last of them."""
        self._readers = {loop for loop in self._readers if not loop.is_closed()}
        if self.dead and not self._readers:
            self.sock.close()

    def take_status(self, pid: int) -> tuple[int, Any] | None:
        self.poll()
        with self._lock:
            return self._statuses.pop(pid, None)

    def wait_status(self, pid: int, callback: Callable[[], None]) -> None:
        """Call ``callback()`` on this loop once the status of ``pid`` (or the zygote's
        death) is known."""
        with self._lock:
            known = pid in self._statuses or self.dead
            if not known:
                self._status_waiters[pid] = (asyncio.get_running_loop(), callback)
        if known:
            callback()
        else:
            self._ensure_reader()

    async def fork(
        self,
        level: str,
        run_dir: str,
        cgroups: tuple[str, ...],
        read_paths: tuple[str, ...] = (),
        ids: RunIds | None = None,
        background: bool = False,
    ) -> PooledChild:
        """A new child, forked and booting: :func:`booted` says when it has parked,
        waiting for its program. On a root host it takes on ``ids`` (its run's own uid and
        gid) before it enters its sandbox."""
        loop = asyncio.get_running_loop()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        fut: asyncio.Future[Forked | ForkFailed] = loop.create_future()
        request_id = -1
        try:
            try:
                with self._lock:
                    if self.dead:
                        raise OSError("the zygote exited")
                    request_id = next(self._ids)
                    self._replies[request_id] = fut
                    # owner: what to remove if we die: the zygote outlives us (zygote.py).
                    request = ForkRequest(
                        request_id,
                        level,
                        run_dir,
                        cgroups,
                        tuple(read_paths),
                        owner_prefix(),
                        None if ids is None else (ids.uid, ids.gid),
                        background,
                    )
                    sent = [theirs.fileno(), out_w, err_w]
                    socket.send_fds(self.sock, [encode(request)], sent)
            finally:
                # The zygote has its copies (or the request failed): ours go either way.
                theirs.close()
                os.close(out_w)
                os.close(err_w)
            self._ensure_reader()
            try:
                reply = await fut
            finally:
                self._maybe_drop_reader(loop)
            if not isinstance(reply, Forked):
                raise OSError(f"the zygote could not fork: {reply.error}")
        except BaseException:
            with self._lock:
                self._replies.pop(request_id, None)
            ours.close()
            os.close(out_r)
            os.close(err_r)
            raise
        pid = reply.pid
        try:
            pidfd = os.pidfd_open(pid)
        except OSError:
            pidfd = -1  # already gone; its status is on its way
        ours.setblocking(False)
        os.set_blocking(out_r, False)
        os.set_blocking(err_r, False)
        return PooledChild(pid, pidfd, ours, out_r, err_r, zygote=self, run_dir=run_dir)

    #: Set once the zygote is reaped: its pid may then be another process's.
    _reaped = False
    #: A pidfd of the zygote, opened the first time :meth:`gone` asks.
    _pidfd = -1

    def gone(self) -> bool:
        """Whether the zygote is dead: its socket says so, or its process has exited. (A
        child it forked holds the socket open until it closes its copy as it boots, and
        it dies with the zygote: it must not be handed to a run.) Never waits."""
        self.poll()
        handed: list[Handing] = []
        with self._lock:
            if not self.dead and not self._reaped:
                if self._pidfd < 0:
                    try:
                        self._pidfd = os.pidfd_open(self.pid)
                    except OSError:
                        return self.dead
                if select.select([self._pidfd], [], [], 0)[0]:
                    handed = self._died()
            dead = self.dead
        self._hand(handed)
        return dead

    def _kill(self) -> bool:
        """Stop talking to the zygote and kill it; False if it is reaped already."""
        handed: list[Handing] = []
        with self._lock:
            if not self.dead:
                handed = self._died()
            self._forget_closed_loops()  # the socket is closed once no loop watches it
            if self._pidfd >= 0:
                os.close(self._pidfd)
                self._pidfd = -1
            reaped, self._reaped = self._reaped, True  # by the caller, next
        self._hand(handed)
        if reaped:
            return False
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        return True

    def close(self) -> None:
        """Kill and reap the zygote, waiting for it: for synchronous callers, never on
        the event loop (there, :meth:`aclose`)."""
        if self._kill():
            try:
                os.waitpid(self.pid, 0)
            except ChildProcessError:
                pass

    async def aclose(self) -> None:
        """Kill the zygote and reap it without blocking the event loop."""
        if self._kill():
            await reap(self.pid)


class BootWatch:
    """The copies of a booting child's fds that one loop watches (see :func:`booted`),
    let go once: by the boot itself, or by a close from another thread while that loop
    is not running (idle between ``run_until_complete`` calls, it may never run again)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._fds: list[int] = []
        self._lock = threading.RLock()  # a close may come from a finalizer (see Zygote)
        self._released = False

    def add(self, fd: int, callback: Callable[[], None]) -> None:
        with self._lock:
            if not self._released:
                self._fds.append(fd)
                self.loop.add_reader(fd, callback)
                return
        os.close(fd)
        raise OSError(errno.EBADF, "the booting child was taken over")

    def release(self) -> None:
        """Stop watching and close the copies (once, whoever comes first)."""
        with self._lock:
            fds, self._fds, self._released = self._fds, [], True
        for fd in fds:  # out of the selector before the number is free again
            self.loop.remove_reader(fd)
            os.close(fd)


async def booted(child: PooledChild, timeout: float) -> bool:
    """Wait until ``child`` has booted and parked (its first byte on fd 3 is
    :data:`~kernelgate.wire.zygote.BOOTED`, consumed here); False if it exited, sent
    anything else, or did neither within ``timeout``: it must not be handed to a run.

    Never blocks: the socket and the child's pidfd are watched on the loop. The byte comes
    before any program could run in the child, so no program can forge or withhold it.
    The loop watches copies of them, closed only here: a close from any thread may take
    the child over and close its own fds while this loop stands idle or runs (closed under
    the loop and their numbers reused, it would never hear of the fds that took them).
    """
    loop = asyncio.get_running_loop()
    woken: asyncio.Future[None] = loop.create_future()

    def wake() -> None:
        if not woken.done():
            woken.set_result(None)

    watch = child.watch = BootWatch(loop)
    try:
        for fd in [child.control.fileno()] + ([child.pidfd] if child.pidfd >= 0 else []):
            watch.add(os.dup(fd), wake)
        await asyncio.wait_for(woken, timeout)
    except (asyncio.TimeoutError, OSError):  # OSError: taken over and closed already
        return False
    finally:
        watch.release()
    try:
        first = child.control.recv(1)
    except OSError:  # nothing to read: its pidfd fired (it exited before it parked)
        return False
    return first == BOOTED


def in_foreground(child: PooledChild, seen: set[int] | None = None) -> bool:
    """Put every thread of ``child``'s processes (its cgroup's, and those below it) back to
    nice 0: a root host's warm child boots at a lower priority (the zygote's ``_child``),
    and no program may run at a priority it did not start with. False if a thread could
    not be set (the child must not be handed out); a process gone meanwhile is not an
    error (its death shows elsewhere). A few /proc reads and a syscall per thread: done
    once the child has parked, or when a run is about to wait for it. The processes
    found are added to ``seen``."""
    if not child.holds_pid():
        # Exited: the zygote may have reaped it already (before its boot task looked), and
        # its pid be a stranger's, whose whole tree descendants() would walk and renice.
        return False
    pids = set(descendants(child.pid))
    if child.cgroup is not None:
        pids.update(child.cgroup.procs())
    if seen is not None:
        seen.update(pids)
    for pid in pids:
        try:
            tids = [int(tid) for tid in os.listdir(f"/proc/{pid}/task")]
        except (OSError, ValueError):
            continue  # gone
        for tid in tids:
            try:
                if os.getpriority(os.PRIO_PROCESS, tid) != 0:
                    os.setpriority(os.PRIO_PROCESS, tid, 0)
            except ProcessLookupError:
                continue
            except OSError:
                return False
    return True


def exit_code_of(status: int) -> int | None:
    """How a process ended, ``os.waitpid`` style (-N for signal N), from a wait status
    that may be any the zygote relays; never raises.

    ``os.waitstatus_to_exitcode`` raises ValueError on a stop status, and a program can
    make one reach us: traced by its namespace's init (``PTRACE_TRACEME``), it stops
    itself, and init reports that stop as how it ended. By the time the zygote sends the
    status, init is gone and the kernel has killed the stopped program with its
    namespace: it ended by the stop signal, and is reported so. Anything else (a
    continue, a value no wait returns) is unknown: None.
    """
    if not isinstance(status, int) or not 0 <= status <= 0xFFFF:
        return None  # not a wait status (they fit in 16 bits): "we do not know"
    if os.WIFEXITED(status):
        return os.WEXITSTATUS(status)
    if os.WIFSIGNALED(status):
        return -os.WTERMSIG(status)
    if os.WIFSTOPPED(status):
        return -os.WSTOPSIG(status)
    return None


class WarmChild(ChildProcess):
    """A child started ahead of its run, in its sandbox and waiting for its program: what
    any runtime's warm pool hands a run (:class:`~.runtime.ChildPool`). ``run_dir`` is its
    run directory; ``cgroup`` the run cgroup it is in (None: none here); ``preopened`` the
    bindings' comm_open it was sent while parked (None: the run sends it)."""

    def __init__(self, *args: Any, run_dir: str) -> None:
        super().__init__(*args)
        self.run_dir = run_dir
        self.cgroup: RunCgroup | None = None
        self.preopened: Preopened | None = None
        #: The host's end of its wire when a run takes it (None: the run makes its own).
        self.wire: Connection | None = None


class PooledChild(WarmChild):
    """A child forked by the zygote: the zygote reaps it and reports its status."""

    #: Its boot's watch (None: not watched yet).
    watch: BootWatch | None = None

    reaped_by_zygote = True
    #: Forked to boot at a lower priority (put back before it is handed out).
    background = False
    #: At a namespace level it is born in its namespaces as their init: no mirror outside
    #: (``SandboxPlan.pids_max``; a zygote refused the clone adds one, the run is stricter).
    born_in_namespaces = True

    def __init__(self, *args: Any, zygote: Zygote, run_dir: str) -> None:
        super().__init__(*args, run_dir=run_dir)
        self.zygote = zygote

    def on_status(self, callback: Callable[[], None]) -> None:
        self.zygote.wait_status(self.pid, callback)

    def try_reap(self) -> bool:
        if self.reaped:
            return True
        found = self.zygote.take_status(self.pid)
        if found is None:
            if not self.zygote.dead:
                return False
            self.reaped = True  # nobody can tell us how it ended
            return True
        status, ru = found
        self.reaped = True
        self.returncode = exit_code_of(status)
        self.rusage = ru
        return True

    def alive(self) -> bool:
        if self.reaped or self.pidfd < 0:
            return False
        return not self.wait_gone(0)


class WarmPool:
    """Keeps ``size`` booted children ready for one gateway's interpreter and sandbox level:
    :class:`~.runtime.PythonRuntime`'s warm pool (a :class:`~.runtime.ChildPool`)."""

    def __init__(
        self,
        *,
        size: int,
        python: str,
        env: dict[str, str],
        level: str,
        base_dir: str | None,
        cgroup_roots: CgroupRoots | None,
        read_paths: tuple[str, ...] = (),
    ) -> None:
        self.size = size
        self.read_paths = read_paths
        self.python = python
        self.env = env
        self.level = level
        self.base_dir = base_dir
        self.cgroup_roots = cgroup_roots
        self.closed = False
        self._zygote: Zygote | None = None
        self._ready: list[PooledChild] = []
        self._filler: asyncio.Task[None] | None = None
        self._names = itertools.count()
        self._token = secrets.token_hex(4)  # names unique across pools and processes
        self.cold_fallbacks = 0
        self.zygote_restarts = 0
        self._free_cgroups: list[RunCgroup] = []  # emptied by finished runs, for reuse
        self._discarding: set[asyncio.Task[None]] = set()  # dead children being removed
        #: Children forked and not yet parked, each watched by a task of ``_boots``.
        self._booting: list[PooledChild] = []
        self._boots: set[asyncio.Task[bool]] = set()
        #: Boots given up so far (their children discarded): the refill's failures.
        self._failed_boots = 0
        #: Set by refill() while the refill waits for boots: more children are wanted.
        self._more: asyncio.Future[None] | None = None
        self._waiters: list[asyncio.Future[None]] = []  # runs waiting for the next child
        self._behind = False  # a wait for a child ran out: the zygote is not keeping up
        self._delivered_at = 0.0  # loop time of the last child made ready
        #: Seconds a forked child may take to boot and park before it is killed.
        self.boot_timeout = _BOOT_TIMEOUT
        #: A root host's children boot at a lower priority (see :func:`in_foreground`).
        self._background_boots = os.geteuid() == 0
        #: What parked children are sent ahead of their run (see :meth:`preopen_with`):
        #: the bindings' announcement and the frame limit of the runs seen so far.
        self._bindings: tuple[dict[str, Any], int] | None = None
        self._mixed = False  # runs with different bindings took children: none is sent
        no_zygote: list[Zygote | None] = [None]
        self._finalizer = self._finalize_with(no_zygote)
        # The loops of several threads may take children at once (see .loops): what they
        # share is changed under this lock, never across an await.
        self._lock = threading.RLock()

    def _finalize_with(self, zygote_box: list[Zygote | None]) -> weakref.finalize[Any, Any]:
        """What discards this pool's idle children (ready or booting), free cgroups and
        zygote when it is closed, or collected without being closed."""
        return weakref.finalize(
            self, discard_all_blocking, self._ready, zygote_box, self._free_cgroups, self._booting
        )

    @property
    def ready(self) -> int:
        return len(self._ready)

    def takes(self, sandbox: SandboxPlan) -> bool:
        """Every run at the pool's level: a child applies its run's rlimits itself."""
        return True

    def preopen_with(self, specs: dict[str, Any], max_frame_bytes: int) -> None:
        """A run with these bindings (``specs``: its registry's comm_open announcement,
        one object per registry) takes children: children that park from now on are sent
        that comm_open while they wait (decoded then, off the next run's path). Runs with
        other bindings (a runtime shared by gateways) stop it for good: a child that was
        sent one registry's bindings serves no run of another."""
        if self._bindings is not None and self._bindings[0] is not specs:
            self._mixed = True
        self._bindings = (specs, max_frame_bytes)

    async def acquire(self, wait: float = 0.5) -> PooledChild | None:
        """A ready child; or, when none is but a running zygote is forking more, the next
        one, for as long as the pool delivers a child at least every ``wait`` seconds;
        else None (the caller spawns a cold one).

        Waiting a few milliseconds for a fork beats a cold start (over 100 ms of CPU here)
        when runs arrive faster than the pool refills; ``wait`` bounds it when the
        zygote cannot keep up at all.
        """
        child = self._take_ready()
        if not self._ready and self._background_boots:
            # No parked child left: the next run would wait for a booting one, so they
            # boot at full priority from now.
            for booting in self._booting:
                if booting.background:
                    in_foreground(booting)  # a failure shows when it has parked
        if child is not None and self._ready:
            # Others are ready: refill a moment later, not while this run starts and
            # runs (booting a child costs milliseconds of CPU the run would wait for).
            self.refill(delay=_REFILL_DELAY)
        else:
            self.refill()
        zygote = self._zygote
        if (
            child is None
            and wait > 0
            and not self._behind
            and zygote is not None
            and not zygote.dead
        ):
            loop = asyncio.get_running_loop()
            started = loop.time()
            while child is None and self._filling():
                left = max(started, self._delivered_at) + wait - loop.time()
                if left <= 0:
                    # Until it delivers again, later runs do not wait for it at all.
                    self._behind = True
                    break
                waiter: asyncio.Future[None] = loop.create_future()
                with self._lock:
                    self._waiters.append(waiter)
                try:
                    await asyncio.wait_for(waiter, left)
                except asyncio.TimeoutError:
                    continue  # others got the children meanwhile? then wait on
                finally:
                    with self._lock:
                        if waiter in self._waiters:
                            self._waiters.remove(waiter)
                child = self._take_ready()
                self.refill()
        if child is None:
            self.cold_fallbacks += 1
        return child

    async def filled(self) -> None:
        """Wait until the refill in progress (if any) is over: every child it forked has
        booted and parked, or been given up (for tests and benchmarks)."""
        loop = asyncio.get_running_loop()
        while not self.closed:
            tasks = (self._filler, *self._boots)  # this loop's: another's cannot be awaited
            pending = [t for t in tasks if t is not None and not t.done() and t.get_loop() is loop]
            if not pending:
                return
            await asyncio.wait(pending)

    def _filling(self) -> bool:
        if self.closed:
            return False
        return bool(self._booting) or (self._filler is not None and not self._filler.done())

    def _wake_one(self) -> None:
        with self._lock:
            while self._waiters:
                waiter = self._waiters.pop(0)
                if not waiter.done():
                    resolve_in_loop(waiter, None)
                    return

    def _take_ready(self) -> PooledChild | None:
        child = None
        with self._lock:
            while self._ready and not self.closed:  # closed: close() discards them
                candidate = self._ready.pop(0)
                # Children die with their zygote (PR_SET_PDEATHSIG): once it is gone, so
                # are they, even if their own death is still on its way.
                if not candidate.zygote.gone() and candidate.alive():
                    child = candidate
                    break
                self._discard_later(candidate)
        return child

    def _discard_later(self, child: PooledChild) -> None:
        """Discard a dead child in a task: its exit is awaited, never waited for."""
        discard_in_task(child, self._discarding)

    def refill(self, delay: float = 0.0) -> None:
        """Fork children until ``size`` are ready or booting (after ``delay`` seconds)."""
        with self._lock:
            if self.closed or self.size <= 0:
                return
            if self._filler is not None and not self._filler.done():
                # It is waiting for boots (maybe on another thread's loop): have it look
                # at the demand again.
                if delay:
                    asyncio.get_running_loop().call_later(delay, self._want_more)
                else:
                    self._want_more()
                return
            self._filler = asyncio.get_running_loop().create_task(self._fill(delay))
            self._filler.add_done_callback(self._filled)

    def _filled(self, task: asyncio.Task[None]) -> None:
        # Let go of the task once it is over: a refill cancelled with its loop keeps its
        # CancelledError, whose traceback holds _fill's frame and so this pool; held here
        # too, the pool would be in a cycle, and a pool dropped unclosed would end its
        # zygote at the next garbage collection instead of at once.
        with self._lock:
            if self._filler is task:
                self._filler = None
        self._wake_all()

    def _want_more(self) -> None:
        more = self._more
        if more is not None and not more.done():
            resolve_in_loop(more, None)

    def _wake_all(self) -> None:
        with self._lock:
            waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                resolve_in_loop(waiter, None)

    async def _fill(self, delay: float = 0.0) -> None:
        """The refill: fork children while fewer than wanted are ready or booting, and
        return once none is booting any more (each parked, or given up) and none is
        wanted; three failures (a fork, a boot) end it early, until the next refill."""
        if delay:
            await asyncio.sleep(delay)
        failures = 0
        # Counted by the boot tasks themselves: one that fails before this loop looks at it
        # (during the next fork's round trip) is gone from _boots by then, and a refill
        # whose every child dies as it boots would fork for ever.
        failed_before = self._failed_boots
        while not self.closed:
            failed = failures + self._failed_boots - failed_before
            if failed < 3 and len(self._ready) + len(self._booting) < self.size + len(
                self._waiters
            ):
                failures += not await self._fork_one()
                continue
            boots = [task for task in self._boots if not task.done()]
            if not boots:
                return
            more = self._more = asyncio.get_running_loop().create_future()
            try:
                await asyncio.wait([*boots, more], return_when="FIRST_COMPLETED")
            finally:
                self._more = None
                more.cancel()

    def _next_fork(self) -> tuple[Zygote, str, RunCgroup | None, Zygote | None] | None:
        """Under the lock: the zygote to fork from (a new one when it died: the dead one
        is returned, to be closed), the child's name and a kept cgroup; None if closed."""
        with self._lock:
            if self.closed:
                return None
            zygote, dead = self._zygote, None
            if zygote is None or zygote.dead:
                if zygote is not None:
                    dead = zygote
                    self.zygote_restarts += 1
                zygote = self._zygote = Zygote(self.python, self.env)
                self._finalizer.detach()
                self._finalizer = self._finalize_with([zygote])
            name = f"pool-{self._token}-{next(self._names)}"
            # With the last run's limits: the next run sets its own (usually the same,
            # then nothing is written); an idle child needs far less than any run.
            cgroup = self._free_cgroups.pop() if self._free_cgroups else None
        return zygote, name, cgroup, dead

    async def _fork_one(self) -> bool:
        """Fork one child and start watching its boot; False if that failed."""
        if (fork := self._next_fork()) is None:
            return True
        zygote, name, cgroup, dead = fork
        if dead is not None:
            await dead.aclose()
        if cgroup is None and self.cgroup_roots is not None:
            # A child whose processes cannot be capped is not made: runs then spawn
            # cold, and the cold path caps them its own way. Idle, its memory is
            # unbounded (it runs no user code); the run that takes it bounds it.
            try:
                cgroup = RunCgroup(self.cgroup_roots, name, 1 << 20)
            except OSError:
                return False
        # The child's own uid, before it exists: it takes it on as it enters its
        # sandbox, before any program is known (see .runids).
        ids: RunIds | None = None
        try:
            ids = allocate_ids()
            run_dir = make_run_dir(self.base_dir, name, ids)
        except OSError:
            if ids is not None:
                ids.release()
            if cgroup is not None:
                await remove_cgroup(cgroup)
            return False
        try:
            # In the background (a root host) while two parked children cover the runs.
            background = self._background_boots and len(self._ready) >= 2
            child = await zygote.fork(
                self.level,
                run_dir,
                cgroup.paths if cgroup else (),
                self.read_paths,
                ids,
                background,
            )
        except OSError:
            await remove_dir(run_dir)
            if cgroup is not None:
                await remove_cgroup(cgroup)
            if ids is not None:
                ids.release()
            return False
        except BaseException:  # cancelled, or its task destroyed with its loop
            remove_tree(run_dir)
            if cgroup is not None and not cgroup.settle():
                settle_off_loop(cgroup, ids)  # the child may be forked: uid after it
            elif ids is not None:
                ids.release()
            raise
        child.ids = ids
        child.cgroup = cgroup
        child.background = background
        loop = asyncio.get_running_loop()
        with self._lock:
            closed = self.closed
            if not closed:
                # Ready once booted and parked, not at the fork: a run must not wait for
                # (or share the CPUs with) its child's boot while another one is parked.
                # The next fork does not wait for this boot: a boot also waits on the
                # kernel (the first cgroup.procs write after an idle spell, namespaces).
                self._booting.append(child)
        if closed:
            await discard(child)
            return True
        task = loop.create_task(self._boot(child))
        self._boots.add(task)
        task.add_done_callback(self._boots.discard)
        return True

    async def _boot(self, child: PooledChild) -> bool:
        """Make ``child`` ready once it has parked; discard it if it dies or hangs first
        (False)."""
        try:
            ok = await booted(child, self.boot_timeout)
            if ok and self._bindings is not None and not self._mixed:
                ok = await self._preopen(child, *self._bindings)
        except asyncio.CancelledError:  # closing: aclose() awaits this task
            if self._unbooting(child):  # else close() took it over
                await discard(child)  # cancelled again, it finishes without the loop
            raise
        except BaseException:  # destroyed with its loop: nothing can be awaited
            if self._unbooting(child):
                discard_now(child)
            raise
        if not self._unbooting(child):
            return True  # close() took it over
        seen = {child.pid}  # its processes: the first, or all that in_foreground found
        if ok and child.background:
            ok = in_foreground(child, seen)
        elif ok and child.cgroup is not None:
            # All of them (the program's process below a namespace's init too), while no
            # program has run: its run's reply then reads kept fds only (Run._measure).
            seen.update(child.cgroup.procs())
        # Parked, then killed before this step (its byte was there to read): dead, it is
        # discarded and counted as a failed boot now, not made ready for a run to find.
        ok = ok and child.alive()
        if ok and not self.closed:
            # Their /proc files, for its run's reply to read without the lookups.
            keep_proc_fds(sorted(seen), child.proc_fds)
            with self._lock:
                ready = not self.closed  # else close() is discarding the others: this too
                if ready:
                    self._ready.append(child)
            if ready:
                self._behind = False
                self._delivered_at = asyncio.get_running_loop().time()
                self._wake_one()
                return True
        if not self.closed:
            self._failed_boots += 1  # given up: counted before the refill forks again
        await discard(child)
        return self.closed

    async def _preopen(
        self, child: PooledChild, specs: dict[str, Any], max_frame_bytes: int
    ) -> bool:
        """Send the parked ``child`` the bindings' comm_open (:mod:`.preopen`); False: it
        could not take it."""
        session = f"pool-{self._token}-{child.pid}"
        try:
            control = child.control.dup()  # what the loop may watch: a copy (see booted)
        except OSError:  # taken over and closed by a close from another thread
            return False
        with control:
            child.preopened = await send_bindings(
                control, session, specs, max_frame_bytes, self.boot_timeout
            )
        return child.preopened is not None

    async def recycle_cgroup(self, cgroup: RunCgroup) -> None:
        """Empty the cgroup of a finished run and take it back for the next child; or
        remove it, when the pool is closed, already keeps ``size`` cgroups, or anything is
        still charged to it (:func:`.recycle.recycle_cgroup`)."""
        await recycle_cgroup(cgroup, self._free_cgroups, self.size, self._is_closed, self._lock)

    def _is_closed(self) -> bool:
        return self.closed

    def _unbooting(self, child: PooledChild) -> bool:
        """Take ``child`` off the booting list; False if close() took it over."""
        with self._lock:
            if child not in self._booting:
                return False
            self._booting.remove(child)
            return True

    def _stop(self) -> list[RunCgroup]:
        """Closed, under the lock: the refill and boots stopped (on their loops), waiting
        runs sent cold, the booting children made idle children the closer discards. The
        free cgroups, taken for the closer to remove."""
        with self._lock:
            self.closed = True
            self._wake_all()  # runs waiting for a child go cold
            for task in (self._filler, *self._boots):
                cancel_in_loop(task)
            # Booting children are idle children too, the closer's to discard, whichever
            # loop watches their boot (idle between run_until_complete calls, it may never
            # run again): that loop watches copies of their fds (see booted), and their
            # cancelled boot tasks find them gone and leave them alone.
            for child in self._booting:
                if child.watch is not None and not child.watch.loop.is_running():
                    child.watch.release()  # its loop may never run its boot task again
            self._ready.extend(self._booting)
            self._booting.clear()
            free, self._free_cgroups[:] = list(self._free_cgroups), []
        return free

    def close(self) -> None:
        """Stop the zygote and every idle child; remove their directories and cgroups,
        waiting for them: for synchronous callers, never on the event loop (there,
        :meth:`aclose`). From any thread, while other threads' loops run on the pool."""
        for cgroup in self._stop():
            cgroup.settle_blocking()
        self._finalizer()

    async def aclose(self) -> None:
        """:meth:`close` without blocking the event loop: every exit is awaited."""
        # Booting children are discarded here, not by their boot tasks: a task cancelled
        # before its first step (forked in this loop turn) never runs its own cleanup.
        # The cancelled tasks that did start find their child gone and leave it alone.
        self._free_cgroups.extend(self._stop())
        zygote = self._zygote
        await discard_idle(
            self._ready,
            self._free_cgroups,
            (self._filler, *self._boots, *self._discarding),
            self._finalizer,
            "pool",
            then=zygote.aclose if zygote is not None else None,
        )
