"""The fd-3 protocol as a sans-I/O state machine, one per endpoint (as in h11).

>>> host, child = Connection(HOST, session="h"), Connection(CHILD, session="c")
>>> child.receive_data(host.send(ExecuteRequest("print(1)")))
>>> child.next_event()
ExecuteRequest(code='print(1)', options={})
>>> host.receive_data(child.send(Stream("stdout", "1\\n")))
>>> host.next_event()
Stream(name='stdout', text='1\\n')

Everything received is validated and rebuilt field by field from what the role expects:
unknown message types, malformed fields, forged or repeated call ids and oversized frames
raise :class:`RemoteProtocolError` with a message saying what was wrong. After a violation
the connection is dead: every later call raises the same error.
"""

from __future__ import annotations

from typing import Any

from .errors import LocalProtocolError, RemoteProtocolError
from .events import (
    CHILD_RUN_STATUSES,
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
from .values import dumps, loads

__all__ = ["HOST", "CHILD", "Connection"]

HOST = "host"
CHILD = "child"

_MAX_SHOWN = 80


def _show(value: Any) -> str:
    try:
        text = repr(value)
    except Exception:  # pragma: no cover - values here come from json.loads
        text = "<unrepresentable>"
    return text if len(text) <= _MAX_SHOWN else text[: _MAX_SHOWN - 3] + "..."


class _Fields:
    """Typed access to a received dict; every failure names the message and the field."""

    __slots__ = ("d", "where")

    def __init__(self, where: str, d: Any) -> None:
        if type(d) is not dict:
            raise RemoteProtocolError(f"{where} must be a JSON object, got {_show(d)}")
        self.where = where
        self.d = d

    def _get(self, key: str) -> Any:
        try:
            return self.d[key]
        except KeyError:
            raise RemoteProtocolError(f"{self.where} has no field {key!r}") from None

    def str(self, key: str) -> str:
        v = self._get(key)
        if type(v) is not str:
            raise RemoteProtocolError(f"{self.where}[{key!r}] must be a string, got {_show(v)}")
        return v

    def int(self, key: str) -> int:
        v = self._get(key)
        if type(v) is not int:
            raise RemoteProtocolError(
                f"{self.where}[{key!r}] must be an integer, got {_show(v)}"
            )
        return v

    def bool(self, key: str) -> bool:
        v = self._get(key)
        if type(v) is not bool:
            raise RemoteProtocolError(f"{self.where}[{key!r}] must be true or false, got {_show(v)}")
        return v

    def dict(self, key: str, default: Any = ...) -> dict[str, Any]:
        if default is not ... and key not in self.d:
            return default  # type: ignore[no-any-return]
        v = self._get(key)
        if type(v) is not dict:
            raise RemoteProtocolError(f"{self.where}[{key!r}] must be an object, got {_show(v)}")
        return v

    def list(self, key: str) -> list[Any]:
        v = self._get(key)
        if type(v) is not list:
            raise RemoteProtocolError(f"{self.where}[{key!r}] must be a list, got {_show(v)}")
        return v

    def sub(self, key: str) -> _Fields:
        return _Fields(f"{self.where}[{key!r}]", self._get(key))


def _str_list(where: str, v: list[Any]) -> list[str]:
    for i, item in enumerate(v):
        if type(item) is not str:
            raise RemoteProtocolError(f"{where}[{i}] must be a string, got {_show(item)}")
    return v


def _mime_bundle(where: str, data: dict[str, Any]) -> dict[str, Any]:
    for key, value in data.items():
        if not key.endswith("json") and type(value) is not str:
            raise RemoteProtocolError(
                f"{where}[{key!r}] must be a string (only JSON MIME types hold other values), "
                f"got {_show(value)}"
            )
    return data


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
        self._factory = MessageFactory(session)
        self._decoder = FrameDecoder(max_frame_bytes)
        self._error: RemoteProtocolError | None = None
        self._request_header: dict[str, Any] = {}
        self._comm_id: str | None = None
        # Calls from child to host carry consecutive ids from 0: the host accepts only the
        # exact next id, so forged and repeated ids are refused without per-id state.
        self._next_call_id = 0
        self._outstanding: set[int] = set()
        self.finished = False  # the child sent execute_reply

    # -- sending ---------------------------------------------------------------------------

    @property
    def next_call_id(self) -> int:
        """The id the next :class:`CallRequest` must carry."""
        return self._next_call_id

    @property
    def outstanding_calls(self) -> int:
        """Calls sent (child) or received (host) and not yet answered."""
        return len(self._outstanding)

    def send(self, event: Event) -> bytes:
        """Encode ``event`` as one frame. Raises LocalProtocolError if we may not send it."""
        msg = self._build(event)
        try:
            text = dumps(msg)
        except (TypeError, ValueError) as exc:
            raise LocalProtocolError(f"cannot encode {type(event).__name__}: {exc}") from exc
        try:
            return (text + "\n").encode("utf-8")
        except UnicodeEncodeError as exc:
            raise LocalProtocolError(
                f"cannot encode {type(event).__name__}: text holds a lone surrogate"
            ) from exc

    def _build(self, event: Event) -> dict[str, Any]:
        f = self._factory
        parent = self._request_header
        host = self.our_role == HOST
        if host:
            if type(event) is OpenBindings:
                self._comm_id = event.comm_id
                return f.message(
                    "comm_open",
                    {
                        "comm_id": event.comm_id,
                        "target_name": BINDINGS_TARGET,
                        "data": {"namespaces": event.namespaces},
                    },
                )
            if type(event) is ExecuteRequest:
                msg = f.message(
                    "execute_request",
                    execute_request_content(event.code),
                    metadata={"kernelgate": event.options},
                )
                self._request_header = msg["header"]
                return msg
            if type(event) is CallReply:
                if event.call_id not in self._outstanding:
                    raise LocalProtocolError(f"no call {event.call_id} is waiting for a reply")
                self._outstanding.discard(event.call_id)
                data: dict[str, Any] = {"method": "reply", "id": event.call_id, "ok": event.ok}
                if event.ok:
                    data["value"] = event.value
                else:
                    data["ename"] = event.ename
                    data["evalue"] = event.evalue
                return f.message("comm_msg", {"comm_id": self._comm_id, "data": data}, parent)
        else:
            if self.finished:
                raise LocalProtocolError(f"cannot send {type(event).__name__} after execute_reply")
            if type(event) is Stream:
                return f.message("stream", stream_content(event.name, event.text), parent)
            if type(event) is CallRequest:
                if event.call_id != self._next_call_id:
                    raise LocalProtocolError(
                        f"call id must be {self._next_call_id}, got {event.call_id}"
                    )
                self._next_call_id += 1
                self._outstanding.add(event.call_id)
                data = {
                    "method": "call",
                    "id": event.call_id,
                    "namespace": event.namespace,
                    "name": event.name,
                    "args": event.args,
                    "kwargs": event.kwargs,
                }
                return f.message("comm_msg", {"comm_id": self._comm_id, "data": data}, parent)
            if type(event) is DisplayData:
                return f.message(
                    "display_data", display_data_content(event.data, event.metadata), parent
                )
            if type(event) is ExecuteResult:
                return f.message(
                    "execute_result",
                    execute_result_content(event.execution_count, event.data, event.metadata),
                    parent,
                )
            if type(event) is ErrorOutput:
                return f.message(
                    "error", error_content(event.ename, event.evalue, event.traceback), parent
                )
            if type(event) is ExecuteReply:
                self.finished = True
                return f.message(
                    "execute_reply",
                    execute_reply_content(
                        event.status,
                        event.execution_count,
                        event.ename,
                        event.evalue,
                        event.traceback,
                    ),
                    parent,
                    metadata={"kernelgate": {"status": event.run_status}},
                )
        raise LocalProtocolError(f"the {self.our_role} does not send {type(event).__name__}")

    # -- receiving -------------------------------------------------------------------------

    def receive_data(self, data: bytes) -> None:
        """Feed bytes read from fd 3; ``b""`` means the peer closed it."""
        if self._error is not None:
            raise self._error
        try:
            self._decoder.receive_data(data)
        except RemoteProtocolError as exc:
            self._error = exc
            raise

    def next_event(self) -> Event | None:
        """The next received event, or ``None`` until more data arrives."""
        if self._error is not None:
            raise self._error
        try:
            frame = self._decoder.next_frame()
            if frame is None:
                return None
            return self._parse(frame)
        except RemoteProtocolError as exc:
            self._error = exc
            raise

    @property
    def peer_closed(self) -> bool:
        """The peer closed fd 3 and every frame before that was taken."""
        return self._decoder.at_eof

    def _parse(self, frame: bytes) -> Event:
        try:
            raw = loads(frame)
        except (ValueError, UnicodeDecodeError) as exc:
            raise RemoteProtocolError(
                f"frame is not valid JSON ({exc}); starts with {_show(frame[:40])}"
            ) from None
        except RecursionError:
            raise RemoteProtocolError("frame is JSON nested too deeply to parse") from None
        msg = _Fields("message", raw)
        header = msg.sub("header")
        msg_type = header.str("msg_type")
        msg.dict("parent_header")
        metadata = msg.dict("metadata")
        content = msg.sub("content")
        where = f"{msg_type} content"
        content.where = where
        if self.our_role == HOST:
            return self._parse_from_child(msg_type, content, metadata)
        return self._parse_from_host(msg_type, header, content, metadata)

    def _parse_from_child(self, msg_type: str, c: _Fields, metadata: dict[str, Any]) -> Event:
        if self.finished:
            raise RemoteProtocolError(f"{msg_type} message received after execute_reply")
        if msg_type == "stream":
            name = c.str("name")
            if name not in ("stdout", "stderr"):
                raise RemoteProtocolError(
                    f"stream name must be 'stdout' or 'stderr', got {_show(name)}"
                )
            return Stream(name, c.str("text"))
        if msg_type == "comm_msg":
            comm_id = c.str("comm_id")
            if comm_id != self._comm_id:
                raise RemoteProtocolError(
                    f"comm_msg on unknown comm {_show(comm_id)}; bindings use {self._comm_id!r}"
                )
            d = c.sub("data")
            method = d.str("method")
            if method != "call":
                raise RemoteProtocolError(f"the child may only send method 'call', got {_show(method)}")
            call_id = d.int("id")
            if call_id != self._next_call_id:
                raise RemoteProtocolError(
                    f"call id {call_id} is out of sequence: expected {self._next_call_id} "
                    "(ids are consecutive from 0; forged or repeated ids are refused)"
                )
            kwargs = d.dict("kwargs")
            event = CallRequest(call_id, d.str("namespace"), d.str("name"), d.list("args"), kwargs)
            self._next_call_id += 1
            self._outstanding.add(call_id)
            return event
        if msg_type == "display_data":
            return DisplayData(_mime_bundle(f"{msg_type} data", c.dict("data")), c.dict("metadata", {}))
        if msg_type == "execute_result":
            return ExecuteResult(
                _mime_bundle(f"{msg_type} data", c.dict("data")),
                c.dict("metadata", {}),
                c.int("execution_count"),
            )
        if msg_type == "error":
            return ErrorOutput(
                c.str("ename"), c.str("evalue"), _str_list(f"{msg_type} traceback", c.list("traceback"))
            )
        if msg_type == "execute_reply":
            status = c.str("status")
            kg = _Fields("execute_reply metadata['kernelgate']", metadata.get("kernelgate", {}))
            run_status = kg.str("status") if "status" in kg.d else ("ok" if status == "ok" else "exception")
            if status == "ok":
                if run_status != "ok":
                    raise RemoteProtocolError(
                        f"execute_reply status 'ok' with kernelgate status {_show(run_status)}"
                    )
                reply = ExecuteReply("ok", "ok", c.int("execution_count"))
            elif status == "error":
                if run_status not in CHILD_RUN_STATUSES or run_status == "ok":
                    raise RemoteProtocolError(
                        f"execute_reply kernelgate status must be one of "
                        f"{sorted(CHILD_RUN_STATUSES - {'ok'})}, got {_show(run_status)}"
                    )
                reply = ExecuteReply(
                    "error",
                    run_status,
                    c.int("execution_count"),
                    c.str("ename"),
                    c.str("evalue"),
                    _str_list("execute_reply traceback", c.list("traceback")),
                )
            else:
                raise RemoteProtocolError(
                    f"execute_reply status must be 'ok' or 'error', got {_show(status)}"
                )
            self.finished = True
            return reply
        raise RemoteProtocolError(
            f"unexpected message type {_show(msg_type)} from the child; it may send stream, "
            "display_data, execute_result, error, execute_reply and comm_msg"
        )

    def _parse_from_host(
        self, msg_type: str, header: _Fields, c: _Fields, metadata: dict[str, Any]
    ) -> Event:
        if msg_type == "comm_open":
            if c.str("target_name") != BINDINGS_TARGET:
                raise RemoteProtocolError(f"comm_open for unknown target {_show(c.d.get('target_name'))}")
            self._comm_id = c.str("comm_id")
            return OpenBindings(self._comm_id, c.sub("data").dict("namespaces"))
        if msg_type == "execute_request":
            self._request_header = header.d
            return ExecuteRequest(c.str("code"), metadata.get("kernelgate") or {})
        if msg_type == "comm_msg":
            d = c.sub("data")
            call_id = d.int("id")
            if call_id not in self._outstanding:
                raise RemoteProtocolError(f"reply to call {call_id}, which is not waiting")
            self._outstanding.discard(call_id)
            if d.bool("ok"):
                return CallReply(call_id, True, d.d.get("value"))
            return CallReply(call_id, False, None, d.str("ename"), d.str("evalue"))
        raise RemoteProtocolError(f"unexpected message type {_show(msg_type)} from the host")
