"""The fd-3 protocol as a sans-I/O state machine, one per endpoint (as in h11).

>>> host, child = Connection(HOST, session="h"), Connection(CHILD, session="c")
>>> child.receive_data(host.send(OpenBindings("bindings-h", {})))
>>> child.receive_data(host.send(ExecuteRequest("print(1)")))
>>> child.next_event(), child.next_event()
(OpenBindings(comm_id='bindings-h', namespaces={}), ExecuteRequest(code='print(1)', options={}))
>>> host.receive_data(child.send(Stream("stdout", "1\\n")))
>>> host.next_event()
Stream(name='stdout', text='1\\n')
>>> host.send(ExecuteRequest("again"))
Traceback (most recent call last):
...
kernelgate.wire.errors.LocalProtocolError: cannot send ExecuteRequest: the host is in ...
>>> host.our_state
'ERROR'

What each role may send, and when, is one table per role
(:data:`~kernelgate.wire.state.TRANSITIONS`): ``send`` consults ours, ``next_event`` the
peer's. Everything received is rebuilt field by field through the events' own
constructors, which validate; unknown message types, malformed fields, events out of
order, forged or repeated call ids and oversized frames raise
:class:`RemoteProtocolError` with a message saying what was wrong.

After a violation, ours (:class:`LocalProtocolError`) or the peer's
(:class:`RemoteProtocolError`), the connection is in ERROR and refuses everything:
``send`` raises LocalProtocolError, and ``receive_data``/``next_event`` raise the peer's
error again (or a LocalProtocolError naming ours).

An event that is valid and allowed but whose values cannot be encoded (NaN, a set, a lone
surrogate: callers check values with :func:`~kernelgate.wire.values.check_json` first)
raises :class:`LocalProtocolError` and changes nothing: no frame was made, so the
connection is as it was and the caller may send something else instead (the host answers
such a call with an error reply).
"""

# long: just over the ~500 lines a module may have: send, receive and the compact frames
# (issue 23) read and write one connection's state (its states, call ids, the agreement);
# the per-event encoders are methods so that they see it, as in h11's Connection.

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .compact import COMPACT_KEY, encode_call, encode_reply, read_call, read_reply
from .errors import LocalProtocolError, ProtocolError, RemoteProtocolError
from .events import (
    CallReply,
    CallRequest,
    ClearOutput,
    DebugEvent,
    DebugReply,
    DebugRequest,
    DisplayData,
    ErrorOutput,
    Event,
    ExecuteReply,
    ExecuteRequest,
    ExecuteResult,
    OpenBindings,
    Stream,
    UpdateDisplayData,
    show,
)
from .framing import DEFAULT_MAX_FRAME_BYTES, FrameDecoder
from .messages import (
    BINDINGS_TARGET,
    MessageFactory,
    clear_output_content,
    display_data_content,
    error_content,
    execute_reply_content,
    execute_request_content,
    execute_result_content,
    stream_content,
)
from .reader import read, read_fast
from .state import CHILD, HOST, MOVES_PEER, TRANSITIONS, ConnectionState
from .values import dumps, loads

__all__ = ["HOST", "CHILD", "Connection"]


class Connection:
    """One endpoint of the fd-3 protocol: ``send(event) -> bytes``, bytes in, events out."""

    def __init__(
        self,
        our_role: str,
        *,
        session: str,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        compact: bool = False,
    ) -> None:
        if our_role not in (HOST, CHILD):
            raise ValueError(f"our_role must be {HOST!r} or {CHILD!r}, got {our_role!r}")
        self.our_role = our_role
        self.their_role = CHILD if our_role == HOST else HOST
        self._state = ConnectionState(our_role)
        # The hot path reads the tables directly (ConnectionState.check and commit, inlined
        # for events that move only their sender): one dict lookup per event.
        self._states = self._state.states
        self._our_table = TRANSITIONS[our_role]
        self._their_table = TRANSITIONS[self.their_role]
        self._our_moves_peer = MOVES_PEER[our_role]
        self._their_moves_peer = MOVES_PEER[self.their_role]
        self._factory = MessageFactory(session)
        self._decoder = FrameDecoder(max_frame_bytes)
        self._error: ProtocolError | None = None
        self._request_header: dict[str, Any] = {}
        self._comm_id: str | None = None
        # Calls from child to host carry consecutive ids from 0: the host accepts only the
        # exact next id, so forged and repeated ids are refused without per-id state.
        self._next_call_id = 0
        self._outstanding: set[int] = set()
        self._finished = False
        # A debugged run (its execute_request has options["debug"]): only then may the
        # host send debug requests and the child answer them or send debug events; each
        # reply answers one request in flight, once.
        self._debugged = False
        self._debug_waiting: set[int] = set()
        # Compact call frames (wire/compact.py, docs/protocol.md): the host offers them on
        # its comm_open when made with compact=True; a child made with compact=True takes
        # the offer by marking its first call (a full message). From then on both send
        # calls and replies compactly and accept them; before, a compact frame is refused.
        self._compact = compact
        self._offered = False  # host: we offered; child: the host offered and we will
        self._compact_out = False
        self._compact_in = False
        #: The peer's header fields that compact frames leave out (its session, username,
        #: version): from its comm_open (child) or its first call (host).
        self.peer_header: dict[str, Any] | None = None

    # -- what the connection knows -----------------------------------------------------------

    @property
    def our_state(self) -> str:
        """Our role's state (:mod:`kernelgate.wire.state`), e.g. ``"EXECUTING"``."""
        return self._state.states[self.our_role]

    @property
    def their_state(self) -> str:
        """The peer's state, as far as we know it."""
        return self._state.states[self.their_role]

    @property
    def states(self) -> dict[str, str]:
        """Both roles' states: ``{"host": ..., "child": ...}`` (a copy)."""
        return dict(self._state.states)

    @property
    def finished(self) -> bool:
        """The child sent (child side) or we received (host side) its execute_reply."""
        return self._finished

    @property
    def next_call_id(self) -> int:
        """The id the next :class:`CallRequest` must carry."""
        return self._next_call_id

    @property
    def outstanding_calls(self) -> int:
        """Calls sent (child) or received (host) and not yet answered."""
        return len(self._outstanding)

    @property
    def debugged(self) -> bool:
        """The run's execute_request asked for a debugger (``options["debug"]``)."""
        return self._debugged

    @property
    def debug_requests_waiting(self) -> frozenset[int]:
        """The seqs of debug requests sent (host) or received (child) and not answered."""
        return frozenset(self._debug_waiting)

    @property
    def compact(self) -> bool:
        """Both ends agreed on compact call frames for this run (see wire/compact.py)."""
        return self._compact_in

    @property
    def peer_closed(self) -> bool:
        """The peer closed fd 3 and every frame before that was taken."""
        return self._decoder.at_eof

    def _fail(self, error: ProtocolError) -> ProtocolError:
        """Enter ERROR for good; the first violation is the one reported from then on."""
        if self._error is None:
            self._error = error
        self._state.process_error()
        return error

    def _dead(self, doing: str) -> ProtocolError:
        error = self._error
        if isinstance(error, RemoteProtocolError) and doing == "receive":
            return error
        return LocalProtocolError(
            f"cannot {doing}: the connection is in ERROR since this violation: {error}"
        )

    # -- sending ---------------------------------------------------------------------------

    def send(self, event: Event) -> bytes:
        """Encode ``event`` as one frame. Raises LocalProtocolError if we may not send it.

        Values are serialized as they are: check them with
        :func:`~kernelgate.wire.values.check_json` first.
        """
        etype = type(event)
        if self._compact_out and (type(event) is CallRequest or type(event) is CallReply):
            return self._send_compact(event)
        if self._error is not None:
            raise self._dead(f"send {etype.__name__}")
        role = self.our_role
        try:
            new_state = self._our_table[self._states[role]].get(etype)
            if new_state is None:
                raise self._state.refusal(role, etype)
            if type(event) is CallReply:
                if event.call_id not in self._outstanding:
                    raise LocalProtocolError(f"no call {event.call_id} is waiting for a reply")
            elif type(event) is CallRequest and event.call_id != self._next_call_id:
                raise LocalProtocolError(
                    f"call id must be {self._next_call_id}, got {event.call_id}"
                )
            elif etype in _DEBUG:
                self._check_debug(event, self._debug_waiting, LocalProtocolError, sending=True)
        except LocalProtocolError as exc:
            raise self._fail(exc) from None
        msg = _BUILDERS[etype](self, event)
        data = _encode(msg, etype)
        # The frame exists: only now does anything change. (This and _receive do the
        # bookkeeping of calls inline: they are most of the traffic.)
        if type(event) is CallRequest:
            self._next_call_id += 1
            self._outstanding.add(event.call_id)
            if self._offered and not self._compact_out:
                # This call, a full message, said that we take the host's offer.
                self._compact_out = self._compact_in = True
        elif type(event) is CallReply:
            self._outstanding.discard(event.call_id)
        elif etype in _RECORDED:
            self._record(event, msg)
        elif etype in _DEBUG:
            self._record_debug(event)
        if etype in self._our_moves_peer:
            self._state.commit(role, etype, new_state)
        else:
            self._states[role] = new_state
        return data

    def _send_compact(self, event: CallRequest | CallReply) -> bytes:
        """``send`` of a call or a reply once compact frames are agreed: the same checks
        and bookkeeping, without the message builders (most of the traffic)."""
        if self._error is not None:
            raise self._dead(f"send {type(event).__name__}")
        role = self.our_role
        etype = type(event)
        new_state = self._our_table[self._states[role]].get(etype)
        try:
            if new_state is None:
                raise self._state.refusal(role, etype)
            if type(event) is CallRequest:
                if event.call_id != self._next_call_id:
                    raise LocalProtocolError(
                        f"call id must be {self._next_call_id}, got {event.call_id}"
                    )
                raw = ["call", event.call_id, event.namespace, event.name, event.args, event.kwargs]
            elif type(event) is CallReply:
                if event.call_id not in self._outstanding:
                    raise LocalProtocolError(f"no call {event.call_id} is waiting for a reply")
                raw = encode_reply(event)
        except LocalProtocolError as exc:
            raise self._fail(exc) from None
        data = _encode(raw, etype)
        self._factory.skip()  # a compact frame still has its place among our messages
        if type(event) is CallRequest:
            self._next_call_id += 1
            self._outstanding.add(event.call_id)
        else:
            self._outstanding.discard(event.call_id)
        self._states[role] = new_state  # calls and replies move only their sender
        return data

    def _record(self, event: Event, msg: dict[str, Any]) -> None:
        """What an event other than a call or its reply changes besides the states
        (``msg``: its whole message, sent or received)."""
        if type(event) is OpenBindings:
            self._comm_id = event.comm_id
            if self.our_role == HOST:
                self._offered = self._compact
            elif self._compact and _marked_compact(msg):
                self._offered = True
                self.peer_header = msg["header"]
        elif type(event) is ExecuteRequest:
            self._request_header = msg["header"]
            self._debugged = "debug" in event.options
        elif type(event) is ExecuteReply:
            self._finished = True

    def _check_debug(
        self, event: Event, waiting: set[int], error: type[ProtocolError], sending: bool
    ) -> None:
        """A debug event is allowed only in a debugged run, a reply only to a request in
        flight (raises ``error``)."""
        name = type(event).wire_name
        if not self._debugged:
            who = "cannot send" if sending else f"the {self.their_role} sent"
            raise error(
                f"{who} {name} in a run that is not debugged (its execute_request had no "
                "debug option)"
            )
        if type(event) is DebugRequest and event.seq in waiting:
            raise error(f"debug request {event.seq} is already waiting for its reply")
        if type(event) is DebugReply and event.request_seq not in waiting:
            raise error(f"reply to debug request {event.request_seq}, which is not waiting")

    def _record_debug(self, event: Event) -> None:
        if type(event) is DebugRequest:
            self._debug_waiting.add(event.seq)
        elif type(event) is DebugReply:
            self._debug_waiting.discard(event.request_seq)

    def _open_bindings(self, e: OpenBindings) -> dict[str, Any]:
        content = {
            "comm_id": e.comm_id,
            "target_name": BINDINGS_TARGET,
            "data": {"namespaces": e.namespaces},
        }
        metadata = {"kernelgate": {COMPACT_KEY: 1}} if self._compact else None
        return self._factory.message("comm_open", content, metadata=metadata)

    def _execute_request(self, e: ExecuteRequest) -> dict[str, Any]:
        return self._factory.message(
            "execute_request", execute_request_content(e.code), metadata={"kernelgate": e.options}
        )

    def _call_reply(self, e: CallReply) -> Any:
        if self._compact_out:
            self._factory.skip()
            return encode_reply(e)
        data: dict[str, Any] = {"method": "reply", "id": e.call_id, "ok": e.ok}
        if e.ok:
            data["value"] = e.value
        else:
            data["ename"] = e.ename
            data["evalue"] = e.evalue
        content = {"comm_id": self._comm_id, "data": data}
        return self._factory.message("comm_msg", content, self._request_header)

    def _call_request(self, e: CallRequest) -> Any:
        if self._compact_out:
            self._factory.skip()
            return encode_call(e)
        data = {
            "method": "call",
            "id": e.call_id,
            "namespace": e.namespace,
            "name": e.name,
            "args": e.args,
            "kwargs": e.kwargs,
        }
        content = {"comm_id": self._comm_id, "data": data}
        metadata = {"kernelgate": {COMPACT_KEY: 1}} if self._offered else None
        return self._factory.message("comm_msg", content, self._request_header, metadata)

    def _stream(self, e: Stream) -> dict[str, Any]:
        return self._factory.message("stream", stream_content(e.name, e.text), self._request_header)

    def _display_data(self, e: DisplayData) -> dict[str, Any]:
        content = display_data_content(e.data, e.metadata, e.display_id)
        return self._factory.message("display_data", content, self._request_header)

    def _update_display_data(self, e: UpdateDisplayData) -> dict[str, Any]:
        content = display_data_content(e.data, e.metadata, e.display_id)
        return self._factory.message("update_display_data", content, self._request_header)

    def _clear_output(self, e: ClearOutput) -> dict[str, Any]:
        content = clear_output_content(e.wait)
        return self._factory.message("clear_output", content, self._request_header)

    def _execute_result(self, e: ExecuteResult) -> dict[str, Any]:
        content = execute_result_content(e.execution_count, e.data, e.metadata)
        return self._factory.message("execute_result", content, self._request_header)

    def _error_output(self, e: ErrorOutput) -> dict[str, Any]:
        content = error_content(e.ename, e.evalue, e.traceback)
        return self._factory.message("error", content, self._request_header)

    def _debug_request(self, e: DebugRequest) -> dict[str, Any]:
        content = {"type": "request", "seq": e.seq, "command": e.command, "arguments": e.arguments}
        return self._factory.message("debug_request", content, self._request_header)

    def _debug_reply(self, e: DebugReply) -> dict[str, Any]:
        content: dict[str, Any] = {
            "type": "response",
            "request_seq": e.request_seq,
            "command": e.command,
            "success": e.success,
            "body": e.body,
        }
        if e.message:
            content["message"] = e.message
        return self._factory.message("debug_reply", content, self._request_header)

    def _debug_event(self, e: DebugEvent) -> dict[str, Any]:
        content = {"type": "event", "event": e.event, "body": e.body}
        return self._factory.message("debug_event", content, self._request_header)

    def _execute_reply(self, e: ExecuteReply) -> dict[str, Any]:
        content = execute_reply_content(e.status, e.execution_count, e.ename, e.evalue, e.traceback)
        meta: dict[str, Any] = {"status": e.run_status}
        if e.usage:
            meta["usage"] = e.usage
        return self._factory.message(
            "execute_reply", content, self._request_header, metadata={"kernelgate": meta}
        )

    # -- receiving -------------------------------------------------------------------------

    def receive_data(self, data: bytes) -> None:
        """Feed bytes read from fd 3; ``b""`` means the peer closed it."""
        if self._error is not None:
            raise self._dead("receive")
        try:
            self._decoder.receive_data(data)
        except RemoteProtocolError as exc:
            raise self._fail(exc) from None

    def next_event(self) -> Event | None:
        """The next received event, or ``None`` until more data arrives."""
        if self._error is not None:
            raise self._dead("receive")
        try:
            frame = self._decoder.next_frame()
            if frame is None:
                return None
            return self._receive(frame)
        except RemoteProtocolError as exc:
            raise self._fail(exc) from None

    def _receive(self, frame: bytes) -> Event:
        try:
            raw = loads(frame)
        except ValueError as exc:  # includes UnicodeDecodeError and JSONDecodeError
            raise RemoteProtocolError(
                f"frame is not valid UTF-8 JSON ({exc}); starts with {show(frame[:40])}"
            ) from None
        except RecursionError:
            raise RemoteProtocolError("frame is JSON nested too deeply to parse") from None
        # The most frequent messages (a binding call and its reply, a stream) and those a
        # run waits for (the request, the value, the reply) are read straight from the
        # dict; anything unusual takes the general reader, which names the fault.
        event: Event | None
        if type(raw) is list and self._compact_in:
            return self._receive_compact(raw)
        if type(raw) is list and self._offered:  # compact before the agreement: refused
            event = self._read_compact(raw)
        else:
            event = (
                self._read_fast(raw, self.our_role, self._comm_id) if type(raw) is dict else None
            )
        if event is None:
            try:
                event = self._read(raw)
            except LocalProtocolError as exc:  # an event constructor refused a field
                raise RemoteProtocolError(str(exc)) from None
        # Whichever reader made it, the peer's table judges it, then the call ids; then it
        # is recorded (inline, not a method: this runs for every frame).
        role = self.their_role
        etype = type(event)
        new_state = self._their_table[self._states[role]].get(etype)
        if new_state is None:
            raise self._state.refusal(role, etype)
        if type(event) is CallRequest:
            if event.call_id != self._next_call_id:
                raise RemoteProtocolError(
                    f"call id {event.call_id} is out of sequence: expected "
                    f"{self._next_call_id} (ids are consecutive from 0; forged or repeated "
                    "ids are refused)"
                )
            self._next_call_id += 1
            self._outstanding.add(event.call_id)
            if self._offered and not self._compact_in and _marked_compact(raw):
                # The child takes our offer: its calls and our replies are compact now.
                self._compact_in = self._compact_out = True
                self.peer_header = raw["header"]
        elif type(event) is CallReply:
            if event.call_id not in self._outstanding:
                raise RemoteProtocolError(f"reply to call {event.call_id}, which is not waiting")
            self._outstanding.discard(event.call_id)
        elif etype in _RECORDED:
            self._record(event, raw)
        elif etype in _DEBUG:
            self._check_debug(event, self._debug_waiting, RemoteProtocolError, sending=False)
            self._record_debug(event)
        if etype in self._their_moves_peer:
            self._state.commit(role, etype, new_state)
        else:
            self._states[role] = new_state
        return event

    def _receive_compact(self, raw: list[Any]) -> Event:
        """``_receive`` of a compact call (we are the host) or reply (the child), once
        agreed: the peer's table first (out of order is said before what is wrong
        inside), then every position, then the call ids, as for a full message."""
        role = self.their_role
        if self.our_role == HOST:
            new_state = self._their_table[self._states[role]].get(CallRequest)
            if new_state is None:
                raise self._state.refusal(role, CallRequest)
            call = read_call(raw)
            if call.call_id != self._next_call_id:
                raise RemoteProtocolError(
                    f"call id {call.call_id} is out of sequence: expected "
                    f"{self._next_call_id} (ids are consecutive from 0; forged or repeated "
                    "ids are refused)"
                )
            self._next_call_id += 1
            self._outstanding.add(call.call_id)
            self._states[role] = new_state
            return call
        new_state = self._their_table[self._states[role]].get(CallReply)
        if new_state is None:
            raise self._state.refusal(role, CallReply)
        reply = read_reply(raw)
        if reply.call_id not in self._outstanding:
            raise RemoteProtocolError(f"reply to call {reply.call_id}, which is not waiting")
        self._outstanding.discard(reply.call_id)
        self._states[role] = new_state
        return reply

    #: The fast reader (:func:`~kernelgate.wire.reader.read_fast`); a class attribute so
    #: that tests can switch it off (tests/wire/test_fast_path.py).
    _read_fast = staticmethod(read_fast)

    def _read_compact(self, raw: list[Any]) -> Event:
        """A compact call (we are the host) or reply (the child). Out of order is said
        before what is wrong inside, as the general reader does."""
        etype = CallRequest if self.our_role == HOST else CallReply
        if not self._compact_in:
            self._state.check(self.their_role, etype)  # out of order is said first
            raise RemoteProtocolError(
                f"compact frame {show(raw)} before compact frames were agreed (the "
                "child's first call, a full message, takes the host's offer); until "
                "then every frame must be a JSON object"
            )
        try:
            return read_call(raw) if etype is CallRequest else read_reply(raw)
        except RemoteProtocolError:
            self._state.check(self.their_role, etype)
            raise

    def _read(self, raw: Any) -> Event:
        """The general reader (:func:`~kernelgate.wire.reader.read`), judging the order
        by the peer's table before the fields."""
        return read(raw, self.their_role, self._comm_id, self._check_peer)

    def _check_peer(self, etype: type) -> object:
        return self._state.check(self.their_role, etype)


def _encode(msg: Any, etype: type) -> bytes:
    """One frame of ``msg``; a value JSON cannot carry is our LocalProtocolError."""
    try:
        return (dumps(msg) + "\n").encode("utf-8")
    except UnicodeEncodeError as exc:
        raise LocalProtocolError(
            f"cannot encode {etype.__name__}: text holds a lone surrogate"
        ) from exc
    except (TypeError, ValueError) as exc:
        raise LocalProtocolError(f"cannot encode {etype.__name__}: {exc}") from exc
    except RecursionError as exc:
        raise LocalProtocolError(f"cannot encode {etype.__name__}: nested too deeply") from exc


def _marked_compact(msg: dict[str, Any]) -> bool:
    """``metadata.kernelgate.compact`` is 1 (an offer on comm_open, a yes on a call)."""
    kg = msg["metadata"].get("kernelgate")
    if type(kg) is not dict:
        return False
    mark = kg.get(COMPACT_KEY)
    return type(mark) is int and mark == 1


#: Events besides calls that change more than the states (the comm, the request's header,
#: the end).
_RECORDED = frozenset({OpenBindings, ExecuteRequest, ExecuteReply})
#: The debugger's events: allowed only in a debugged run, replies only to requests waiting.
_DEBUG = frozenset({DebugRequest, DebugReply, DebugEvent})
_BUILDERS: dict[type, Callable[[Connection, Any], Any]] = {
    OpenBindings: Connection._open_bindings,
    ExecuteRequest: Connection._execute_request,
    CallReply: Connection._call_reply,
    CallRequest: Connection._call_request,
    Stream: Connection._stream,
    DisplayData: Connection._display_data,
    UpdateDisplayData: Connection._update_display_data,
    ClearOutput: Connection._clear_output,
    ExecuteResult: Connection._execute_result,
    ErrorOutput: Connection._error_output,
    ExecuteReply: Connection._execute_reply,
    DebugRequest: Connection._debug_request,
    DebugReply: Connection._debug_reply,
    DebugEvent: Connection._debug_event,
}
