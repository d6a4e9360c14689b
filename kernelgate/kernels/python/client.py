"""The child's end of fd 3: whole frames out, the host's messages in, binding calls.

fd 3 is shared by every thread of the program: each frame is written whole under one lock
(a thread printing while another sends a large call must not splice frames), and replies
are read by whichever event loop is waiting for one (the program's, or a loop of its own
in another thread) and handed to the loop that made the call.

Everything here is bound before the program runs: the program may rebind builtins or
module globals such as ``os.read``, and the calls and the reporting must still work.

>>> CallClient.__name__
'CallClient'
"""

from __future__ import annotations

import asyncio
import os
import select
import sys
import threading
from asyncio.events import _get_running_loop
from typing import Any

from kernelgate.wire.connection import CHILD, Connection
from kernelgate.wire.events import CallReply, CallRequest, ExecuteRequest, OpenBindings
from kernelgate.wire.messages import binding_label

from .namespace import ToolError
from .program import safe_str
from .streams import OutputStream

__all__ = ["CONTROL_FD", "CallClient"]

CONTROL_FD = 3
_HOST_FRAME_CEILING = 1 << 30  # the host is trusted; its frames are bounded by its limits

_os_write = os.write
_os_read = os.read
_os_exit = os._exit
_select = select.select
_SelectorLoop = asyncio.SelectorEventLoop


class CallClient:
    """fd 3 of one run: framed writes, the host's bindings and request, binding calls.

    ``fallback``: a pre-encoded ``execute_reply`` written when nothing else can be
    (:func:`give_up`). ``streams``: flushed before each call leaves, so a call's output
    comes before it.
    """

    def __init__(self, fallback: bytes, fd: int = CONTROL_FD) -> None:
        self.fd = fd
        os.set_blocking(fd, False)
        self.conn = Connection(
            CHILD,
            session=f"child-{os.getpid()}",
            max_frame_bytes=_HOST_FRAME_CEILING,
            compact=True,  # takes the host's offer of compact call frames, if it makes one
        )
        self.fallback = fallback
        # call id -> (future of the answer, in the loop that made the call; binding label)
        self.pending: dict[int, tuple[asyncio.Future[Any], str]] = {}
        self._labels: dict[tuple[str, str], str] = {}  # (namespace, name) -> its label
        # Writing fd 3: one frame at a time whatever thread sends it. Reentrant, because
        # a signal handler that prints may run on a thread in the middle of its own write:
        # that frame waits in the backlog until the one being written is whole.
        self._wlock = threading.RLock()
        self._writing = False
        self._backlog: list[bytes] = []
        # Calls held back while other tasks of the program's loop are ready (a gather
        # starting many): the first leaves at once, the others together, in one write, at
        # the loop's next turn or before any other frame (see call).
        self._gathering = False
        self._held: list[bytes] = []
        self._rlock = threading.Lock()  # reading fd 3 and decoding, from any loop
        # Loops of other threads waiting for replies -> how many calls each waits for.
        self._watching: dict[asyncio.AbstractEventLoop, int] = {}
        self.namespaces: dict[str, dict[str, dict[str, Any]]] = {}
        self.loop: asyncio.AbstractEventLoop | None = None  # the program's
        self.streams: tuple[OutputStream, ...] = ()
        self.calls = 0
        self.max_calls = 10_000
        # A debugged run: a reader thread owns fd 3 (.debugchannel), no loop watches it.
        self.reader = False
        # The loop _wait_here last looked into: it, its wakeup fd, its selector's fds.
        self._waits_in: tuple[asyncio.AbstractEventLoop, int, Any] | None = None

    # -- writing -----------------------------------------------------------------------------

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        fd = self.fd
        while view:
            try:
                n = _os_write(fd, view)
            except BlockingIOError:
                _select([], [fd], [])
                continue
            except InterruptedError:
                continue
            view = view[n:]

    def send(self, event: Any) -> None:
        with self._wlock:
            self._write_frame(self.conn.send(event))

    def send_all(self, events: list[Any]) -> None:
        """Send ``events`` in one write: the host wakes once for all of them."""
        with self._wlock:
            self._write_frame(b"".join([self.conn.send(event) for event in events]))

    def _write_frame(self, data: bytes) -> None:
        """Write one encoded frame whole (the caller holds ``_wlock``), after the calls
        held back, so frames leave in the order they were made."""
        if self._held:
            data = b"".join([*self._held, data])
            self._held.clear()
        if self._writing:  # re-entered from a signal handler on this thread
            self._backlog.append(data)
            return
        self._writing = True
        try:
            self.write(data)
            backlog = self._backlog
            while backlog:
                self.write(backlog.pop(0))
        finally:
            self._writing = False

    def _hold(self, loop: asyncio.AbstractEventLoop, frame: bytes, scheduled: bool) -> bool:
        """Hold a call of the program's loop back when other tasks run before the loop
        waits again and may call too (a gather of calls): the calls made in this turn
        then leave together, in one write, at the loop's next turn (the host wakes, reads
        and answers once for them). The caller holds ``_wlock``.

        With one other callback ready the first call leaves at once (that callback may
        end the process, as ``os._exit`` does, and a lone call still reaches the host);
        with two or more, it is held too. A ``scheduled`` call (``gather`` took it as a
        future: the code running now may start more) is always held: it leaves when that
        code gives the loop back, as a task's first step would have started it then.
        True: ``frame`` was held.
        """
        if self._gathering:
            self._held.append(frame)
            return True
        ready = 2 if scheduled else len(loop._ready)  # type: ignore[attr-defined]
        if not ready:
            return False
        self._gathering = True
        loop.call_soon(self._send_held)
        if ready == 1:
            return False
        self._held.append(frame)
        return True

    def _send_held(self) -> None:
        """The calls held back in the last turn of the program's loop leave, in one write."""
        with self._wlock:
            self._gathering = False
            if self._held:
                self._write_frame(b"")

    def give_up(self, why: str) -> None:
        """The run cannot go on: say why on stderr and end with the InternalError reply."""
        try:
            sys.__stderr__.write(f"kernelgate child: {why}\n")  # type: ignore[union-attr]
            sys.__stderr__.flush()  # type: ignore[union-attr]
        except BaseException:
            pass
        try:
            with self._wlock:
                self.write(self.fallback)
        except BaseException:
            pass
        _os_exit(70)

    # -- reading -----------------------------------------------------------------------------

    def read_until_request(self) -> ExecuteRequest:
        """Block until the host's ``execute_request`` (keeping the bindings it opened)."""
        while True:
            event = self.wait_event()
            if type(event) is OpenBindings:
                self.namespaces = event.namespaces
            elif type(event) is ExecuteRequest:
                return event

    def wait_event(self) -> Any:
        """Block until the host's next event, before the program runs (the child exits if
        the host goes away first)."""
        while True:
            event = self.conn.next_event()
            if event is not None:
                return event
            _select([self.fd], [], [])
            try:
                data = os.read(self.fd, 1 << 16)
            except BlockingIOError:
                continue
            if not data:
                _os_exit(1)  # the host went away before sending a program
            self.conn.receive_data(data)

    def on_readable(self) -> None:
        """fd 3 is readable: take the host's replies and hand each to its call's loop.

        Runs in the program's loop, and in the loop of any other thread waiting for a
        reply (the program's loop may be blocked, e.g. in ``thread.join()``).
        """
        try:
            replies = self._take_replies()
            if replies is None:
                return  # another loop took it
            self._hand_over(replies)
        except Exception as exc:
            # Replies can no longer be read (the program broke something this needs):
            # end the run now rather than let it wait for answers until wall_seconds.
            self.give_up(f"reading the host's replies failed: {_brief(exc)}")

    def _hand_over(self, replies: list[CallReply]) -> None:
        """Give each reply to its call's future, in the loop that made the call."""
        if replies:
            here = _get_running_loop()
            pending = self.pending
            for reply in replies:
                entry = pending.pop(reply.call_id, None)
                if entry is None:
                    continue
                fut, tool = entry
                loop = fut.get_loop()
                if loop is here:
                    _resolve(fut, reply, tool)
                else:
                    try:
                        loop.call_soon_threadsafe(_resolve, fut, reply, tool)
                    except RuntimeError:
                        pass  # that loop is closed: nobody waits for the answer

    def _take_replies(self) -> list[CallReply] | None:
        """Read what fd 3 holds and decode the replies in it (None: nothing to read)."""
        replies: list[CallReply] = []
        with self._rlock:
            try:
                data = _os_read(self.fd, 1 << 16)
            except BlockingIOError:
                return None
            except OSError:
                data = b""
            if not data:
                _os_exit(1)  # the host is gone: nobody is left to report to
            self.conn.receive_data(data)
            while True:
                event = self.conn.next_event()
                if event is None:
                    break
                if type(event) is CallReply:
                    replies.append(event)
        return replies

    # -- binding calls -----------------------------------------------------------------------

    def call(
        self,
        namespace: str,
        name: str,
        args: list[Any],
        kwargs: dict[str, Any],
        scheduled: bool = False,
    ) -> asyncio.Future[Any]:
        """Send a call (when a :class:`BindingCall` first runs) and return the future of
        its answer, which belongs to the event loop running the call.

        ``scheduled``: ``asyncio.gather`` took the call as a future in the code the
        program's loop runs now; the code goes on and may start more calls, so the call
        is held until the loop's next turn (:meth:`_hold`) and the reply is not waited
        for here."""
        loop = _get_running_loop()
        if loop is None:
            raise RuntimeError(
                f"{binding_label(namespace, name)}() must run in an event loop: await it, "
                "or pass it to asyncio.run() or create_task()"
            )
        key = (namespace, name)
        tool = self._labels.get(key)
        if tool is None:
            tool = binding_label(namespace, name)
            if len(self._labels) < 1024:  # the host's bindings; any name the program makes
                self._labels[key] = tool
        for stream in self.streams:
            stream.flush()
        fut = loop.create_future()
        with self._wlock:
            if self.calls >= self.max_calls:
                raise ToolError(
                    f"max_calls={self.max_calls} binding calls per run reached; "
                    "make fewer calls (batch the work) or raise Limits.max_calls",
                    tool=tool,
                    ename="LimitExceeded",
                )
            call_id = self.conn.next_call_id
            frame = self.conn.send(CallRequest(call_id, namespace, name, args, kwargs))
            self.calls += 1
            # Registered before the frame leaves: another thread may read the reply.
            self.pending[call_id] = (fut, tool)
            if (
                loop is self.loop
                and type(loop) is _SelectorLoop
                and self._hold(loop, frame, scheduled)
            ):
                return fut
            self._write_frame(frame)
        if loop is not self.loop:
            self._watch(loop, fut)
        elif not self.reader and not scheduled:
            self._wait_here(loop, fut)
        return fut

    def _wait_here(self, loop: asyncio.AbstractEventLoop, fut: asyncio.Future[Any]) -> None:
        """While nothing else in the program's loop can run, wait for the reply here,
        blocked on fd 3, instead of in a turn of the loop (two turns per call: the read,
        then the task's wakeup).

        Nothing else can run when the loop has no callback ready and watches no fd but
        fd 3 and its own wakeup socket (signals, other threads' ``call_soon_threadsafe``):
        then the loop itself would block on just these. A timer bounds the wait. Anything
        but our reply (the wakeup socket, a timer due, the replies of other calls waking
        their tasks) ends the wait and the call is awaited as usual; nothing is read
        here that the loop would have read differently.
        """
        if type(loop) is not _SelectorLoop:
            return  # a loop the program brought: its internals are not ours to read
        fd = self.fd
        try:
            seen = self._waits_in
            if seen is None or seen[0] is not loop:
                wakeup = loop._ssock.fileno()  # type: ignore[attr-defined]
                selector = loop._selector  # type: ignore[attr-defined]
                # The selector's own dict (what get_map() shows through a Python mapping),
                # kept with the loop: it is the same dict for the selector's life.
                watched = getattr(selector, "_fd_to_key", None)
                if type(watched) is not dict:
                    watched = selector.get_map()
                seen = self._waits_in = (loop, wakeup, watched)
            _loop, wakeup, watched = seen
            if len(watched) != 2 or fd not in watched or wakeup not in watched:
                return  # the program watches fds of its own
        except Exception:
            return
        while not fut.done() and not loop._ready:  # type: ignore[attr-defined]
            timeout = None
            timers = loop._scheduled  # type: ignore[attr-defined]
            if timers:
                timeout = timers[0].when() - loop.time()
                if timeout <= 0:
                    return
            try:
                readable = _select([fd, wakeup], [], [], timeout)[0]
            except InterruptedError:
                continue
            if not readable or wakeup in readable:
                return
            try:
                replies = self._take_replies()
                if replies is not None:
                    self._hand_over(replies)
            except Exception as exc:
                self.give_up(f"reading the host's replies failed: {_brief(exc)}")

    def _watch(self, loop: asyncio.AbstractEventLoop, fut: asyncio.Future[Any]) -> None:
        """Let a loop of another thread read fd 3 while it waits for ``fut``."""
        if self.reader:
            return  # the reader thread hands the reply to ``loop``
        watching = self._watching
        count = watching.get(loop, 0)
        if count == 0:
            loop.add_reader(self.fd, self.on_readable)
        watching[loop] = count + 1
        fut.add_done_callback(lambda _f: self._unwatch(loop))

    def _unwatch(self, loop: asyncio.AbstractEventLoop) -> None:
        count = self._watching.pop(loop, 1) - 1
        if count > 0:
            self._watching[loop] = count
            return
        try:
            loop.remove_reader(self.fd)
        except Exception:
            pass  # the loop is closing: its selector goes with it


def _resolve(fut: asyncio.Future[Any], reply: CallReply, tool: str) -> None:
    """Give a call's answer to its future (in the future's loop)."""
    if fut.done():
        return  # the program cancelled the call; the answer is dropped
    if reply.ok:
        fut.set_result(reply.value)
    else:
        fut.set_exception(ToolError(reply.evalue, tool=tool, ename=reply.ename))


def _brief(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {safe_str(exc, 500)}"
