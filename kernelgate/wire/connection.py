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

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .errors import LocalProtocolError, ProtocolError, RemoteProtocolError
from .events import (
    CallReply,
    CallRequest,
    DisplayData,
    ErrorOutput,
    Event,
    ExecuteReply,
    ExecuteRequest,
    ExecuteResult,
    OpenBindings,
    Stream,
    show,
)
from .framing import DEFAULT_MAX_FRAME_BYTES, FrameDecoder
from .messages import (
    BINDINGS_TARGET,
    MessageFactory,
    display_data_content,
    error_content,
    execute_reply_content,
    execute_request_content,
    execute_result_content,
    stream_content,
)
from .state import CHILD, HOST, MOVES_PEER, TRANSITIONS, ConnectionState
from .values import dumps, loads

__all__ = ["HOST", "CHILD", "Connection"]

# Message type -> the event it carries, per sender ("comm_msg" is a call from the child
# and a reply from the host).
_FROM_CHILD: dict[str, type] = {
    "stream": Stream,
    "comm_msg": CallRequest,
    "display_data": DisplayData,
    "execute_result": ExecuteResult,
    "error": ErrorOutput,
    "execute_reply": ExecuteReply,
}
_FROM_HOST: dict[str, type] = {
    "comm_open": OpenBindings,
    "execute_request": ExecuteRequest,
    "comm_msg": CallReply,
}


class _Fields:
    """Typed access to a received dict; every failure names the message and the field."""

    __slots__ = ("d", "where")

    def __init__(self, where: str, d: Any) -> None:
        if type(d) is not dict:
            raise RemoteProtocolError(f"{where} must be a JSON object, got {show(d)}")
        self.where = where
        self.d: dict[str, Any] = d

    def get(self, key: str) -> Any:
        try:
            return self.d[key]
        except KeyError:
            raise RemoteProtocolError(f"{self.where} has no field {key!r}") from None

    def _bad(self, key: str, what: str, v: Any) -> RemoteProtocolError:
        return RemoteProtocolError(f"{self.where}[{key!r}] must be {what}, got {show(v)}")

    def text(self, key: str) -> str:
        v = self.get(key)
        if type(v) is not str:
            raise self._bad(key, "a string", v)
        return v

    def integer(self, key: str) -> int:
        v = self.get(key)
        if type(v) is not int:
            raise self._bad(key, "an integer", v)
        return v

    def boolean(self, key: str) -> bool:
        v = self.get(key)
        if type(v) is not bool:
            raise self._bad(key, "true or false", v)
        return v

    def obj(self, key: str, default: dict[str, Any] | None = None) -> dict[str, Any]:
        if default is not None and key not in self.d:
            return default
        v = self.get(key)
        if type(v) is not dict:
            raise self._bad(key, "an object", v)
        return v

    def array(self, key: str) -> list[Any]:
        v = self.get(key)
        if type(v) is not list:
            raise self._bad(key, "a list", v)
        return v

    def sub(self, key: str) -> _Fields:
        return _Fields(f"{self.where}[{key!r}]", self.get(key))


class Connection:
    """One endpoint of the fd-3 protocol: ``send(event) -> bytes``, bytes in, events out."""

    def __init__(
        self,
        our_role: str,
        *,
        session: str,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
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
        self._from_peer = _FROM_CHILD if our_role == HOST else _FROM_HOST

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
        if self._error is not None:
            raise self._dead(f"send {type(event).__name__}")
        role = self.our_role
        etype = type(event)
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
        except LocalProtocolError as exc:
            raise self._fail(exc) from None
        msg = _BUILDERS[etype](self, event)
        name = etype.__name__
        try:
            data = (dumps(msg) + "\n").encode("utf-8")
        except UnicodeEncodeError as exc:
            raise LocalProtocolError(f"cannot encode {name}: text holds a lone surrogate") from exc
        except (TypeError, ValueError) as exc:
            raise LocalProtocolError(f"cannot encode {name}: {exc}") from exc
        except RecursionError as exc:
            raise LocalProtocolError(f"cannot encode {name}: nested too deeply") from exc
        # The frame exists: only now does anything change.
        self._commit(event, new_state, self._our_moves_peer, msg["header"])
        return data

    def _commit(
        self, event: Event, new_state: str, moves_peer: frozenset[type], header: dict[str, Any]
    ) -> None:
        """Record an event sent or received (and checked): the states, then what else it
        changes (call ids, the calls in flight, the comm, the request's header)."""
        etype = type(event)
        role = self.our_role if moves_peer is self._our_moves_peer else self.their_role
        if etype in moves_peer:
            self._state.commit(role, etype, new_state)
        else:
            self._states[role] = new_state
        if type(event) is CallRequest:
            self._next_call_id += 1
            self._outstanding.add(event.call_id)
        elif type(event) is CallReply:
            self._outstanding.discard(event.call_id)
        elif etype not in _RECORDED:
            return
        elif type(event) is OpenBindings:
            self._comm_id = event.comm_id
        elif type(event) is ExecuteRequest:
            self._request_header = header
        elif type(event) is ExecuteReply:
            self._finished = True

    def _open_bindings(self, e: OpenBindings) -> dict[str, Any]:
        content = {
            "comm_id": e.comm_id,
            "target_name": BINDINGS_TARGET,
            "data": {"namespaces": e.namespaces},
        }
        return self._factory.message("comm_open", content)

    def _execute_request(self, e: ExecuteRequest) -> dict[str, Any]:
        return self._factory.message(
            "execute_request", execute_request_content(e.code), metadata={"kernelgate": e.options}
        )

    def _call_reply(self, e: CallReply) -> dict[str, Any]:
        data: dict[str, Any] = {"method": "reply", "id": e.call_id, "ok": e.ok}
        if e.ok:
            data["value"] = e.value
        else:
            data["ename"] = e.ename
            data["evalue"] = e.evalue
        content = {"comm_id": self._comm_id, "data": data}
        return self._factory.message("comm_msg", content, self._request_header)

    def _call_request(self, e: CallRequest) -> dict[str, Any]:
        data = {
            "method": "call",
            "id": e.call_id,
            "namespace": e.namespace,
            "name": e.name,
            "args": e.args,
            "kwargs": e.kwargs,
        }
        content = {"comm_id": self._comm_id, "data": data}
        return self._factory.message("comm_msg", content, self._request_header)

    def _stream(self, e: Stream) -> dict[str, Any]:
        return self._factory.message("stream", stream_content(e.name, e.text), self._request_header)

    def _display_data(self, e: DisplayData) -> dict[str, Any]:
        content = display_data_content(e.data, e.metadata)
        return self._factory.message("display_data", content, self._request_header)

    def _execute_result(self, e: ExecuteResult) -> dict[str, Any]:
        content = execute_result_content(e.execution_count, e.data, e.metadata)
        return self._factory.message("execute_result", content, self._request_header)

    def _error_output(self, e: ErrorOutput) -> dict[str, Any]:
        content = error_content(e.ename, e.evalue, e.traceback)
        return self._factory.message("error", content, self._request_header)

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
        # The most frequent messages (a binding call and its reply, a stream) are read
        # straight from the dict; anything unusual takes the general reader, which names
        # the fault.
        event = self._read_fast(raw) if type(raw) is dict else None
        if event is None:
            try:
                event = self._read(raw)
            except LocalProtocolError as exc:  # an event constructor refused a field
                raise RemoteProtocolError(str(exc)) from None
        self._accept(event, raw)
        return event

    def _accept(self, event: Event, raw: dict[str, Any]) -> None:
        """The peer sent ``event``: consult its table and the call ids, then record it."""
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
        elif type(event) is CallReply and event.call_id not in self._outstanding:
            raise RemoteProtocolError(f"reply to call {event.call_id}, which is not waiting")
        self._commit(event, new_state, self._their_moves_peer, raw["header"])

    def _read_fast(self, raw: dict[str, Any]) -> Event | None:
        """A call or a stream (host side) or a call reply (child side) read without the
        field-by-field reader, or None to let that reader say what is wrong.

        Accepts exactly what the general reader accepts for these messages and gives the
        same event (tests/wire/test_fast_path.py compares the two on fuzzed bytes): the
        event constructors do the checking either way; this only skips building error
        messages it will not need. The state is not consulted here: both readers' events
        go through the same :meth:`_accept`.
        """
        header = raw.get("header")
        content = raw.get("content")
        if (
            type(header) is not dict
            or type(content) is not dict
            or type(raw.get("parent_header")) is not dict
            or type(raw.get("metadata")) is not dict
        ):
            return None
        msg_type = header.get("msg_type")
        try:
            if msg_type == "comm_msg":
                data = content.get("data")
                if (
                    self._comm_id is None
                    or content.get("comm_id") != self._comm_id
                    or type(data) is not dict
                ):
                    return None
                d: Any = data  # its values are unchecked: the constructors check them
                if self.our_role == HOST:
                    if d.get("method") != "call":
                        return None
                    return CallRequest(
                        d.get("id"),
                        d.get("namespace"),
                        d.get("name"),
                        d.get("args"),
                        d.get("kwargs"),
                    )
                if d.get("method") != "reply" or type(d.get("id")) is not int:
                    return None
                ok = d.get("ok")
                if ok is True and "value" in d:
                    return CallReply(d["id"], True, d["value"])
                if ok is False:
                    return CallReply(d["id"], False, None, d.get("ename"), d.get("evalue"))
            elif msg_type == "stream" and self.our_role == HOST:
                c: Any = content
                return Stream(c.get("name"), c.get("text"))
        except LocalProtocolError:
            pass
        return None

    def _read(self, raw: Any) -> Event:
        """The general reader: the envelope, the state, then the fields, each named when
        wrong. Event constructors validate what the fields hold (LocalProtocolError,
        which the caller turns into RemoteProtocolError)."""
        msg = _Fields("message", raw)
        header = msg.sub("header")
        msg_type = header.text("msg_type")
        msg.obj("parent_header")
        metadata = msg.obj("metadata")
        content = msg.sub("content")
        content.where = f"{msg_type} content"
        etype = self._from_peer.get(msg_type)
        if etype is None:
            raise RemoteProtocolError(
                f"unexpected message type {show(msg_type)} from the {self.their_role}; it "
                f"may send {', '.join(self._from_peer)}"
            )
        # Out of order is said before what is wrong inside: the state is what matters.
        self._state.check(self.their_role, etype)
        return _READERS[etype](self, content, metadata)

    def _comm_data(self, c: _Fields, method: str) -> _Fields:
        """The data of a comm_msg on the bindings comm, whose method must be ``method``."""
        comm_id = c.text("comm_id")
        if comm_id != self._comm_id:
            raise RemoteProtocolError(
                f"comm_msg on unknown comm {show(comm_id)}; bindings use {self._comm_id!r}"
            )
        d = c.sub("data")
        got = d.text("method")
        if got != method:
            raise RemoteProtocolError(
                f"the {self.their_role} may only send method {method!r}, got {show(got)}"
            )
        return d

    def _read_stream(self, c: _Fields, metadata: dict[str, Any]) -> Event:
        return Stream(c.text("name"), c.text("text"))

    def _read_call(self, c: _Fields, metadata: dict[str, Any]) -> Event:
        d = self._comm_data(c, "call")
        return CallRequest(
            d.integer("id"), d.text("namespace"), d.text("name"), d.array("args"), d.obj("kwargs")
        )

    def _read_display(self, c: _Fields, metadata: dict[str, Any]) -> Event:
        return DisplayData(c.obj("data"), c.obj("metadata", {}))

    def _read_result(self, c: _Fields, metadata: dict[str, Any]) -> Event:
        return ExecuteResult(c.obj("data"), c.obj("metadata", {}), c.integer("execution_count"))

    def _read_error(self, c: _Fields, metadata: dict[str, Any]) -> Event:
        return ErrorOutput(c.text("ename"), c.text("evalue"), c.array("traceback"))

    def _read_reply(self, c: _Fields, metadata: dict[str, Any]) -> Event:
        status = c.text("status")
        kg = _Fields("execute_reply metadata['kernelgate']", metadata.get("kernelgate", {}))
        run_status = kg.text("status") if "status" in kg.d else None
        usage = kg.obj("usage") if "usage" in kg.d else None
        if status != "error":  # "ok", or refused by ExecuteReply with its message
            return ExecuteReply(status, run_status, c.integer("execution_count"), usage=usage)
        return ExecuteReply(
            "error",
            run_status,
            c.integer("execution_count"),
            c.text("ename"),
            c.text("evalue"),
            c.array("traceback"),
            usage=usage,
        )

    def _read_open(self, c: _Fields, metadata: dict[str, Any]) -> Event:
        target = c.text("target_name")
        if target != BINDINGS_TARGET:
            raise RemoteProtocolError(f"comm_open for unknown target {show(target)}")
        return OpenBindings(c.text("comm_id"), c.sub("data").obj("namespaces"))

    def _read_request(self, c: _Fields, metadata: dict[str, Any]) -> Event:
        options = _Fields("execute_request metadata", metadata).obj("kernelgate", {})
        return ExecuteRequest(c.text("code"), options)

    def _read_reply_to_call(self, c: _Fields, metadata: dict[str, Any]) -> Event:
        d = self._comm_data(c, "reply")
        call_id = d.integer("id")
        if d.boolean("ok"):
            return CallReply(call_id, True, d.get("value"))
        return CallReply(call_id, False, None, d.text("ename"), d.text("evalue"))


#: Events that change more than the states (call ids, the comm, the request's header).
_RECORDED = frozenset({CallRequest, CallReply, OpenBindings, ExecuteRequest, ExecuteReply})
_BUILDERS: dict[type, Callable[[Connection, Any], dict[str, Any]]] = {
    OpenBindings: Connection._open_bindings,
    ExecuteRequest: Connection._execute_request,
    CallReply: Connection._call_reply,
    CallRequest: Connection._call_request,
    Stream: Connection._stream,
    DisplayData: Connection._display_data,
    ExecuteResult: Connection._execute_result,
    ErrorOutput: Connection._error_output,
    ExecuteReply: Connection._execute_reply,
}
_READERS: dict[type, Callable[[Connection, _Fields, dict[str, Any]], Event]] = {
    Stream: Connection._read_stream,
    CallRequest: Connection._read_call,
    DisplayData: Connection._read_display,
    ExecuteResult: Connection._read_result,
    ErrorOutput: Connection._read_error,
    ExecuteReply: Connection._read_reply,
    OpenBindings: Connection._read_open,
    ExecuteRequest: Connection._read_request,
    CallReply: Connection._read_reply_to_call,
}
