"""The child channel: one child's fds on the event loop.

fd 3 is read into the wire :class:`~kernelgate.wire.connection.Connection` and its events
handed on; frames to the child queue in a write buffer; fd 1 and 2 are read into the run's
output. All I/O is non-blocking (``add_reader``/``add_writer`` on raw fds), so the host never
waits on anything the child does: when the child exits, everything it wrote is already in
the socket and pipe buffers and is drained at once, and a grandchild holding a pipe open
cannot keep the run from settling.
"""

# long: fd 3 read on the loop and fd 3 lent to a binding thread share one lock, one
# buffer of what the thread did not take and one order of events; split, each half would
# reach into the other's state.

from __future__ import annotations

import asyncio
import contextvars
import functools
import os
import select
import threading
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from kernelgate.wire.connection import Connection
from kernelgate.wire.errors import LocalProtocolError, RemoteProtocolError
from kernelgate.wire.events import Event
from kernelgate.wire.state import EXECUTING

from .outcome import Verdicts
from .process import ChildProcess

__all__ = ["AGAIN", "ChildChannel", "REPLY_HIGH_WATER"]

T = TypeVar("T")

#: :meth:`ChildChannel.read_lent`: a part of a frame came, or nothing yet: wait again.
AGAIN: Any = object()

_READ_CHUNK = 256 * 1024

#: Answers queued for a child that does not read them: past this, calls wait to answer.
REPLY_HIGH_WATER = 16 * 1024 * 1024


class ChildChannel:
    """Reads and writes one child's fd 3, reads its fd 1 and 2, and applies back-pressure.

    ``on_event(event)`` gets each event the wire accepts, ``on_violation(detail)`` what it
    refuses, and ``on_raw(name, data)`` the bytes of fd 1 and 2. Once ``verdicts`` says the
    host refused the child's traffic, nothing more of fd 3 is read or passed on.

    Answers to the calls in one chunk of fd 3 leave together (corked: one write, one wakeup
    of the child, however many calls it sent at once).

    The connection and the write queue are used under one lock: a worker thread that ran a
    synchronous binding writes its answer itself (:meth:`send_from_thread`), without
    waiting for the loop to wake. Between a sequential program's calls, fd 3 may be lent
    to that thread (:meth:`lend`): it reads the child's next call itself
    (:meth:`read_lent`), and anything else it reads goes to the loop, which hands it on
    before what it reads next.
    """

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        child: ChildProcess,
        conn: Connection,
        verdicts: Verdicts,
        *,
        on_event: Callable[[Event], None],
        on_violation: Callable[[str], None],
        on_raw: Callable[[str, bytes], None],
    ) -> None:
        self._loop = loop
        self._child = child
        self._conn = conn
        self._verdicts = verdicts
        self._on_event = on_event
        self._on_violation = on_violation
        self._on_raw = on_raw
        self._lock = threading.Lock()  # the connection and _out, for send_from_thread
        self._control_fd = child.control.fileno()
        self._readers: list[int] = []
        self._out: list[bytes] = []
        #: Bytes queued for the child and not yet written.
        self.backlog = 0
        self._drained = asyncio.Event()
        self._drained.set()
        self._closed = False
        self._corked: list[bytes] | None = None  # frames held back while a chunk is handled
        self._pipes_done = False  # fd 1 and 2 drained for good (drain_pipes)
        #: fd 3 is not read while calls wait for a slot (see :meth:`pause_control`).
        self.paused = False
        self.bytes_in = 0
        self.bytes_out = 0
        #: Called on the loop after each read of the child's fds, before what was read is
        #: handed on (and before its exit is): what happened before the child could send
        #: it (a call answered from a worker thread) is recorded first.
        self.before_read: Callable[[], None] | None = None
        #: Called on the loop once the events of a read of fd 3 are handed on (the calls
        #: it brought go to their worker thread together).
        self.after_events: Callable[[], None] | None = None
        # fd 3 lent to a binding thread (see lend): it reads the child's next call itself.
        # Set and cleared on the loop; ``_revoked`` is set under the lock, which the thread
        # holds from each read to the decision on what it read.
        self.lent = False
        self._revoked = False
        self._eof = False  # the thread read the end of fd 3
        self._draining = False
        # What a thread read of fd 3 but did not take (events, and what the wire refused):
        # handed on by the loop before anything it reads itself (_replay).
        self._returned: list[tuple[list[Event], RemoteProtocolError | None]] = []
        self._poll = select.poll()
        self._poll.register(self._control_fd, select.POLLIN)
        # The run's context: fd 3's reader is registered in it again whenever fd 3 is read
        # here again (after back-pressure, after a chain), maybe in a callback a worker
        # thread scheduled (in its own, empty context): every call admitted from fd 3 is
        # run in the context the run was started in.
        self._context = contextvars.copy_context()

    def violation(self, detail: str) -> None:
        """Tell the run of traffic it refuses (``on_violation``; nothing once closed): what
        the run's other rooms are given, so that only this channel holds the run."""
        self._on_violation(detail)

    def open(self, on_exit: Callable[[], None]) -> None:
        """Start reading fd 3, 1 and 2, and watch the child's pidfd with ``on_exit``."""
        child = self._child
        for fd, callback in (
            (self._control_fd, self._on_control),
            (child.stdout_fd, lambda: self._on_pipe("stdout")),
            (child.stderr_fd, lambda: self._on_pipe("stderr")),
            (child.pidfd, functools.partial(self._on_exit, on_exit)),
        ):
            if fd >= 0:
                self._loop.add_reader(fd, callback)
                self._readers.append(fd)

    # -- reading -------------------------------------------------------------------------

    def _on_exit(self, on_exit: Callable[[], None]) -> None:
        if self.before_read is not None:
            self.before_read()
        on_exit()

    def _on_control(self, drain: bool = False) -> None:
        if self._returned:
            self._replay()
            if self.lent:
                return  # lent again by the calls handed on: the thread reads it now
        sock = self._child.control
        verdicts = self._verdicts
        while True:
            try:
                data = sock.recv(_READ_CHUNK)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                data = b""
            if self.before_read is not None:
                self.before_read()
            if not data:
                self.unwatch(self._control_fd)
                return
            self.bytes_in += len(data)
            if verdicts.refused:
                return
            corked: list[bytes] = []
            self._corked = corked
            conn, lock = self._conn, self._lock
            try:
                with lock:
                    conn.receive_data(data)
                while True:
                    with lock:
                        event = conn.next_event()
                    if event is None:
                        break
                    self._on_event(event)
                    if verdicts.refused:
                        break  # nothing more of this child's is read or recorded
            except RemoteProtocolError as exc:
                self._on_violation(str(exc))
                return
            finally:
                self._handed_on(corked)
            if not drain or self.lent:
                return  # one chunk per wakeup keeps other runs responsive

    def _on_pipe(self, name: str, drain: bool = False) -> None:
        fd = self._child.stdout_fd if name == "stdout" else self._child.stderr_fd
        if self._pipes_done:  # drained for good (see drain_pipes): read no more
            self.unwatch(fd)
            return
        while True:
            try:
                data = os.read(fd, _READ_CHUNK)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                data = b""
            if self.before_read is not None:
                self.before_read()
            if not data:
                self.unwatch(fd)
                return
            self._on_raw(name, data)
            if not drain:
                return

    def drain(self) -> None:
        """The child has exited: take everything it wrote, which is in the buffers now."""
        self._draining = True  # fd 3 is lent no more: it is read here to its end
        self.revoke()
        if self._returned:
            self._replay()
        if (self._control_fd in self._readers or self.paused) and not self._eof:
            self.paused = False
            self._on_control(drain=True)
        self.drain_pipes(stop=False)

    def drain_pipes(self, stop: bool = True) -> None:
        """Take what fd 1 and 2 hold now; with ``stop``, read them no more (after the
        reply, they hold all the program wrote). Their readers then go at their next
        event or with the others (:meth:`stop_reading`), not on the way to the caller."""
        if self._pipes_done:
            return
        for name, fd in (("stdout", self._child.stdout_fd), ("stderr", self._child.stderr_fd)):
            if fd in self._readers:
                self._on_pipe(name, drain=True)
        self._pipes_done = stop

    def stop_control(self) -> None:
        """Read fd 3 no more (the host refused the child's traffic)."""
        self.revoke(watch=False)
        self.unwatch(self._control_fd)

    def stop_reading(self) -> None:
        self.revoke(watch=False)
        for fd in list(self._readers):
            self.unwatch(fd)

    def unwatch(self, fd: int) -> None:
        if fd in self._readers:
            self._readers.remove(fd)
            self._loop.remove_reader(fd)

    # -- back-pressure -------------------------------------------------------------------

    def pause_control(self) -> None:
        """With every call slot taken and more calls waiting, stop reading fd 3 until one
        finishes, so a flood of call frames waits in the child (blocked in its write), not
        in the host's memory."""
        self.revoke()
        if not self.paused and self._control_fd in self._readers:
            self.unwatch(self._control_fd)
            self.paused = True

    def resume_control(self) -> None:
        self.paused = False
        if self._closed or self._verdicts.refused or self.lent or self._eof:
            return
        if self._control_fd not in self._readers:
            self._context.run(self._watch_control_here)

    @property
    def backlogged(self) -> bool:
        """The child is not reading its answers: calls wait (:meth:`drained`) to answer."""
        return self.backlog > REPLY_HIGH_WATER

    async def drained(self) -> None:
        """Wait until every queued frame is written."""
        await self._drained.wait()

    # -- fd 3 lent to a binding thread ---------------------------------------------------

    def lend(self) -> bool:
        """On the loop: stop reading fd 3 here, for a binding thread that answered a call
        to read the child's next one itself (:meth:`read_lent`) instead of a wakeup of
        the loop and a hand-over back to a thread per call (False: not lent, it is not
        read now). The thread gives it back with :meth:`give_back`; the loop takes it back
        at any time with :meth:`revoke`."""
        if (
            self.lent
            or self._draining
            or self.paused
            or self._closed
            or self._returned
            or self._verdicts.refused
            or self._control_fd not in self._readers
        ):
            return False
        self.unwatch(self._control_fd)
        with self._lock:
            self._revoked = False
            self.lent = True
        return True

    def read_lent(self, timeout: float, take: Callable[[Event], T | None]) -> T | None:
        """In the thread fd 3 is lent to: wait at most ``timeout`` seconds for the child's
        next frames, and read them. What ``take`` takes (the one event read, under the
        lock: the loop's :meth:`revoke` comes wholly before or after it) is returned;
        :data:`AGAIN` when only part of a frame came; else None, and the thread must give
        fd 3 back: whatever else it read is kept for the loop, which hands it on before
        anything it reads itself."""
        try:
            if not self._poll.poll(max(timeout, 0.0) * 1e3):
                return None
        except (OSError, ValueError):  # closed under us: the run is settling
            return None
        with self._lock:
            if self._revoked or self._closed or self._verdicts.refused:
                return None
            try:
                data = self._child.control.recv(_READ_CHUNK)
            except (BlockingIOError, InterruptedError):
                return AGAIN  # type: ignore[no-any-return]
            except OSError:
                data = b""
            if not data:
                self._eof = True
                return None
            self.bytes_in += len(data)
            events: list[Event] = []
            error: RemoteProtocolError | None = None
            conn = self._conn
            try:
                conn.receive_data(data)
                while (event := conn.next_event()) is not None:
                    events.append(event)
            except RemoteProtocolError as exc:
                error = exc
            if not events and error is None:
                return AGAIN  # type: ignore[no-any-return]
            if len(events) == 1 and error is None:
                try:
                    got = take(events[0])
                except Exception:  # the loop takes it then, and reports what fails
                    got = None
                if got is not None:
                    return got
            self._returned.append((events, error))
            return None

    def give_back(self) -> None:
        """On the loop, once the thread fd 3 was lent to stopped reading it: read it here
        again, after what the thread read and did not take."""
        if self.lent:
            with self._lock:
                self.lent = False
        # Revoked meanwhile, fd 3 is read here already; but what the thread read just
        # before (under the lock, so nothing after the revoke) waits for the next read
        # here, which may never come (a call the child waits on): handed on now.
        if self._returned and not self._closed:
            self._replay()
        self._watch_control()

    def revoke(self, watch: bool = True) -> None:
        """On the loop: take fd 3 back from the thread it is lent to (it reads no more once
        this returns; what it read and did not take is handed on at the next read here),
        and read it here again (``watch``)."""
        if not self.lent:
            return
        with self._lock:
            self._revoked = True
            self.lent = False
        if watch:
            self._watch_control()

    def _watch_control(self) -> None:
        if self._closed or self._verdicts.refused or self.paused or self._eof:
            return
        if self._control_fd not in self._readers:
            self._context.run(self._watch_control_here)

    def _watch_control_here(self) -> None:
        self._loop.add_reader(self._control_fd, self._on_control)  # in the current context
        self._readers.append(self._control_fd)

    def _replay(self) -> None:
        """On the loop: hand on what a thread read of fd 3 and did not take, as
        :meth:`_on_control` hands on what it reads."""
        with self._lock:
            returned, self._returned = self._returned, []
        if self.before_read is not None:
            self.before_read()
        verdicts = self._verdicts
        for events, error in returned:
            if verdicts.refused:
                return
            corked: list[bytes] = []
            self._corked = corked
            try:
                for event in events:
                    self._on_event(event)
                    if verdicts.refused:
                        break
                if error is not None and not verdicts.refused:
                    self._on_violation(str(error))
            finally:
                self._handed_on(corked)

    def _handed_on(self, corked: list[bytes]) -> None:
        """After the events of one read are handed on: the calls they brought go to their
        thread together (``after_events``), and the frames held back meanwhile leave in
        one write."""
        if self.after_events is not None:
            self.after_events()
        self._corked = None
        if corked and not self._closed:
            self._write(b"".join(corked))

    # -- writing -------------------------------------------------------------------------

    def send(self, event: Event) -> None:
        """Encode ``event`` and write it (queued while the child is not reading). Raises
        LocalProtocolError if the wire may not send it."""
        if self._closed:
            return
        with self._lock:
            data = self._conn.send(event)
            self.bytes_out += len(data)
        if self._corked is not None:
            self._corked.append(data)
            return
        self._write(data)

    def send_all(self, events: list[Event]) -> None:
        """:meth:`send` each of ``events``, in one write: the child wakes once for them."""
        if self._closed:
            return
        with self._lock:
            data = b"".join([self._conn.send(event) for event in events])
            self.bytes_out += len(data)
        if self._corked is not None:
            self._corked.append(data)
            return
        self._write(data)

    def send_from_thread(self, events: Sequence[Event]) -> list[bool]:
        """From a worker thread: encode ``events`` (calls' answers) and write them now, in
        one write. Says which were sent.

        Not sent, with nothing changed, when the loop must send them instead: the channel
        is closed, answers are queued behind a slow reader, or the host no longer answers
        (the child's reply arrived: the run is over) (then none is sent), or one cannot be
        encoded (the loop then answers it with the error, as for any answer).
        """
        sent = [False] * len(events)
        with self._lock:
            if self._closed or self._out or self._conn.our_state != EXECUTING:
                return sent
            frames: list[bytes] = []
            for i, event in enumerate(events):
                try:
                    frames.append(self._conn.send(event))
                except LocalProtocolError:
                    continue  # not encodable (a state refusal is excluded above)
                sent[i] = True
            if not frames:
                return sent
            data = frames[0] if len(frames) == 1 else b"".join(frames)
            self.bytes_out += len(data)
            try:
                n = self._child.control.send(data)
            except (BlockingIOError, InterruptedError):
                n = 0
            except OSError:
                return sent  # the child is gone; its run is settling
            if n < len(data):
                rest = data[n:]
                self._out.append(rest)
                self.backlog += len(rest)
                # A copy: the run's context itself is entered only by _watch_control,
                # which a callback running in it could call (Context.run does not nest).
                ctx = self._context.copy()
                self._loop.call_soon_threadsafe(self._wait_writable, context=ctx)
        return sent

    def _wait_writable(self) -> None:
        """On the loop: write what a worker thread left queued once fd 3 takes it."""
        with self._lock:
            if not self._out or self._closed:
                return
        self._drained.clear()
        self._loop.add_writer(self._control_fd, self._on_writable)

    def _write(self, data: bytes) -> None:
        with self._lock:
            if self._out:
                self._out.append(data)
                self.backlog += len(data)
                return
            self._write_now(data)

    def _write_now(self, data: bytes) -> None:
        try:
            n = self._child.control.send(data)
        except (BlockingIOError, InterruptedError):
            n = 0
        except OSError:
            return  # the child is gone; its run is settling
        if n < len(data):
            rest = data[n:]
            self._out.append(rest)
            self.backlog += len(rest)
            self._drained.clear()
            self._loop.add_writer(self._control_fd, self._on_writable)

    def _on_writable(self) -> None:
        with self._lock:
            self._write_queued()

    def _write_queued(self) -> None:
        sock = self._child.control
        while self._out:
            data = self._out[0]
            try:
                n = sock.send(data)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                self._out.clear()
                self.backlog = 0
                break
            self.backlog -= n
            if n < len(data):
                self._out[0] = data[n:]
                return
            self._out.pop(0)
        self._loop.remove_writer(self._control_fd)
        self._drained.set()

    def close(self) -> None:
        """Stop all I/O and close our ends of the child's fds."""
        with self._lock:
            self._closed = True
            self._returned.clear()
        self.stop_reading()
        if self._out:
            self._loop.remove_writer(self._control_fd)
            with self._lock:
                self._out.clear()
        self._drained.set()
        self._child.close()
        # Let go of the run: its methods (and its call dispatcher's) hold it, and it holds
        # this channel; a finished run is then freed at once, not at the next collection.
        self._on_event = self._on_violation = _ignore
        self._on_raw = _ignore
        self.before_read = self.after_events = None


def _ignore(*_: object) -> None:
    """What a closed channel hands its events to."""
