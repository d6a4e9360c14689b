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
the connection is dead: every later ``receive_data``/``next_event`` raises the same error.

Sending changes state only once the frame is encoded: an event that cannot be encoded
raises :class:`LocalProtocolError` and leaves call ids, the outstanding calls and the
finished flag as they were.
"""

from __future__ import annotations

from typing import Any

from .errors import LocalProtocolError, RemoteProtocolError
from .events import (
    CHILD_RUN_STATUSES,
    USAGE_KEYS,
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


def _reply_metadata(event: ExecuteReply) -> dict[str, Any]:
    meta: dict[str, Any] = {"status": event.run_status}
    if event.usage:
        meta["usage"] = event.usage
    return meta


def _usage(d: dict[str, Any]) -> dict[str, float]:
    where = "execute_reply metadata['kernelgate']['usage']"
    for key, v in d.items():
        if key not in USAGE_KEYS:
            raise RemoteProtocolError(
                f"{where} has the unknown key {_show(key)}; it may have {sorted(USAGE_KEYS)}"
            )
        if type(v) not in (int, float) or not 0 <= v < 1e15:
            raise RemoteProtocolError(
                f"{where}[{key!r}] must be a number from 0 up, got {_show(v)}"
            )
    return d


def _show(value: Any) -> str:
    try:
        text = repr(value)
    except Exception:  # e.g. RecursionError for a deeply nested value
        text = "<unrepresentable>"
    return text if len(text) <= _MAX_SHOWN else text[: _MAX_SHOWN - 3] + "..."


class _Fields:
    """Typed access to a received dict; every failure names the message and the field."""

    __slots__ = ("d", "where")

    def __init__(self, where: str, d: Any) -> None:
        if type(d) is not dict:
            raise RemoteProtocolError(f"{where} must be a JSON object, got {_show(d)}")
        self.where = where
        self.d: dict[str, Any] = d

    def _get(self, key: str) -> Any:
        try:
            return self.d[key]
        except KeyError:
            raise RemoteProtocolError(f"{self.where} has no field {key!r}") from None

    def _bad(self, key: str, what: str, v: Any) -> RemoteProtocolError:
        return RemoteProtocolError(f"{self.where}[{key!r}] must be {what}, got {_show(v)}")

    def text(self, key: str) -> str:
        v = self._get(key)
        if type(v) is not str:
            raise self._bad(key, "a string", v)
        return v

    def integer(self, key: str) -> int:
        v = self._get(key)
        if type(v) is not int:
            raise self._bad(key, "an integer", v)
        return v

    def boolean(self, key: str) -> bool:
        v = self._get(key)
        if type(v) is not bool:
            raise self._bad(key, "true or false", v)
        return v

    def obj(self, key: str, default: dict[str, Any] | None = None) -> dict[str, Any]:
        if default is not None and key not in self.d:
            return default
        v = self._get(key)
        if type(v) is not dict:
            raise self._bad(key, "an object", v)
        return v

    def array(self, key: str) -> list[Any]:
        v = self._get(key)
        if type(v) is not list:
            raise self._bad(key, "a list", v)
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
        self.finished = False  # the child sent (child) or we received (host) execute_reply

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
        """Encode ``event`` as one frame. Raises LocalProtocolError if we may not send it.

        Values are serialized as they are: check them with
        :func:`~kernelgate.wire.values.check_json` first.
        """
        msg = self._build(event)
        name = type(event).__name__
        try:
            data = (dumps(msg) + "\n").encode("utf-8")
        except UnicodeEncodeError as exc:
            raise LocalProtocolError(f"cannot encode {name}: text holds a lone surrogate") from exc
        except (TypeError, ValueError) as exc:
            raise LocalProtocolError(f"cannot encode {name}: {exc}") from exc
        except RecursionError as exc:
            raise LocalProtocolError(f"cannot encode {name}: nested too deeply") from exc
        self._commit(event, msg)
        return data

    def _build(self, event: Event) -> dict[str, Any]:
        """The message for ``event``; checks that we may send it but changes no state."""
        f = self._factory
        parent = self._request_header
        if self.our_role == HOST:
            if type(event) is OpenBindings:
                return f.message(
                    "comm_open",
                    {
                        "comm_id": event.comm_id,
                        "target_name": BINDINGS_TARGET,
                        "data": {"namespaces": event.namespaces},
                    },
                )
            if type(event) is ExecuteRequest:
                return f.message(
                    "execute_request",
                    execute_request_content(event.code),
                    metadata={"kernelgate": event.options},
                )
            if type(event) is CallReply:
                if event.call_id not in self._outstanding:
                    raise LocalProtocolError(f"no call {event.call_id} is waiting for a reply")
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
                if self._comm_id is None:
                    raise LocalProtocolError(
                        "cannot send CallRequest: the host has not opened the bindings comm"
                    )
                if event.call_id != self._next_call_id:
                    raise LocalProtocolError(
                        f"call id must be {self._next_call_id}, got {event.call_id}"
                    )
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
                    metadata={"kernelgate": _reply_metadata(event)},
                )
        raise LocalProtocolError(f"the {self.our_role} does not send {type(event).__name__}")

    def _commit(self, event: Event, msg: dict[str, Any]) -> None:
        """Record that ``event`` was encoded as ``msg`` and will be written."""
        if type(event) is OpenBindings:
            self._comm_id = event.comm_id
        elif type(event) is ExecuteRequest:
            self._request_header = msg["header"]
        elif type(event) is CallReply:
            self._outstanding.discard(event.call_id)
        elif type(event) is CallRequest:
            self._next_call_id += 1
            self._outstanding.add(event.call_id)
        elif type(event) is ExecuteReply:
            self.finished = True

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
        except ValueError as exc:  # includes UnicodeDecodeError and JSONDecodeError
            raise RemoteProtocolError(
                f"frame is not valid UTF-8 JSON ({exc}); starts with {_show(frame[:40])}"
            ) from None
        except RecursionError:
            raise RemoteProtocolError("frame is JSON nested too deeply to parse") from None
        # The messages of a binding call, by far the most frequent, are checked straight
        # from the dict; anything unusual takes the general path, which names the fault.
        fast = self._call_fast(raw) if type(raw) is dict else None
        if fast is not None:
            return fast
        msg = _Fields("message", raw)
        header = msg.sub("header")
        msg_type = header.text("msg_type")
        msg.obj("parent_header")
        metadata = msg.obj("metadata")
        content = msg.sub("content")
        content.where = f"{msg_type} content"
        if self.our_role == HOST:
            return self._parse_from_child(msg_type, content, metadata)
        return self._parse_from_host(msg_type, header, content, metadata)

    def _call_fast(self, raw: dict[str, Any]) -> Event | None:
        """A well-formed call (host side) or call reply (child side), else None.

        Accepts exactly what the general path accepts for these messages and changes the
        same state; it only skips building error messages it will not need.
        """
        header = raw.get("header")
        content = raw.get("content")
        if (
            type(header) is not dict
            or header.get("msg_type") != "comm_msg"
            or type(content) is not dict
            or type(raw.get("parent_header")) is not dict
            or type(raw.get("metadata")) is not dict
            or self._comm_id is None
            or content.get("comm_id") != self._comm_id
        ):
            return None
        d = content.get("data")
        if type(d) is not dict:
            return None
        call_id = d.get("id")
        if type(call_id) is not int:
            return None
        if self.our_role == HOST:
            if self.finished or d.get("method") != "call" or call_id != self._next_call_id:
                return None
            namespace, name, args, kwargs = (
                d.get("namespace"),
                d.get("name"),
                d.get("args"),
                d.get("kwargs"),
            )
            if (
                type(namespace) is not str
                or type(name) is not str
                or type(args) is not list
                or type(kwargs) is not dict
            ):
                return None
            self._next_call_id += 1
            self._outstanding.add(call_id)
            return CallRequest(call_id, namespace, name, args, kwargs)
        if d.get("method") != "reply" or call_id not in self._outstanding:
            return None
        ok = d.get("ok")
        if ok is True and "value" in d:
            reply = CallReply(call_id, True, d["value"])
        elif ok is False and type(d.get("ename")) is str and type(d.get("evalue")) is str:
            reply = CallReply(call_id, False, None, d["ename"], d["evalue"])
        else:
            return None
        self._outstanding.discard(call_id)
        return reply

    def _comm_data(self, c: _Fields, method: str, sender: str) -> _Fields:
        """The data of a comm_msg on the bindings comm, whose method must be ``method``."""
        comm_id = c.text("comm_id")
        if comm_id != self._comm_id:
            raise RemoteProtocolError(
                f"comm_msg on unknown comm {_show(comm_id)}; bindings use {self._comm_id!r}"
            )
        d = c.sub("data")
        got = d.text("method")
        if got != method:
            raise RemoteProtocolError(
                f"the {sender} may only send method {method!r}, got {_show(got)}"
            )
        return d

    def _parse_from_child(self, msg_type: str, c: _Fields, metadata: dict[str, Any]) -> Event:
        if self.finished:
            raise RemoteProtocolError(f"{msg_type} message received after execute_reply")
        if msg_type == "stream":
            name = c.text("name")
            if name not in ("stdout", "stderr"):
                raise RemoteProtocolError(
                    f"stream name must be 'stdout' or 'stderr', got {_show(name)}"
                )
            return Stream(name, c.text("text"))
        if msg_type == "comm_msg":
            d = self._comm_data(c, "call", "child")
            call_id = d.integer("id")
            if call_id != self._next_call_id:
                raise RemoteProtocolError(
                    f"call id {call_id} is out of sequence: expected {self._next_call_id} "
                    "(ids are consecutive from 0; forged or repeated ids are refused)"
                )
            event = CallRequest(
                call_id, d.text("namespace"), d.text("name"), d.array("args"), d.obj("kwargs")
            )
            self._next_call_id += 1
            self._outstanding.add(call_id)
            return event
        if msg_type == "display_data":
            return DisplayData(
                _mime_bundle(f"{msg_type} data", c.obj("data")), c.obj("metadata", {})
            )
        if msg_type == "execute_result":
            return ExecuteResult(
                _mime_bundle(f"{msg_type} data", c.obj("data")),
                c.obj("metadata", {}),
                c.integer("execution_count"),
            )
        if msg_type == "error":
            return ErrorOutput(
                c.text("ename"),
                c.text("evalue"),
                _str_list(f"{msg_type} traceback", c.array("traceback")),
            )
        if msg_type == "execute_reply":
            reply = self._parse_execute_reply(c, metadata)
            self.finished = True
            return reply
        raise RemoteProtocolError(
            f"unexpected message type {_show(msg_type)} from the child; it may send stream, "
            "display_data, execute_result, error, execute_reply and comm_msg"
        )

    @staticmethod
    def _parse_execute_reply(c: _Fields, metadata: dict[str, Any]) -> ExecuteReply:
        status = c.text("status")
        kg = _Fields("execute_reply metadata['kernelgate']", metadata.get("kernelgate", {}))
        if "status" in kg.d:
            run_status = kg.text("status")
        else:
            run_status = "ok" if status == "ok" else "exception"
        usage = _usage(kg.obj("usage", {})) if "usage" in kg.d else None
        if status == "ok":
            if run_status != "ok":
                raise RemoteProtocolError(
                    f"execute_reply status 'ok' with kernelgate status {_show(run_status)}"
                )
            return ExecuteReply("ok", "ok", c.integer("execution_count"), usage=usage)
        if status == "error":
            if run_status not in CHILD_RUN_STATUSES or run_status == "ok":
                raise RemoteProtocolError(
                    f"execute_reply kernelgate status must be one of "
                    f"{sorted(CHILD_RUN_STATUSES - {'ok'})}, got {_show(run_status)}"
                )
            return ExecuteReply(
                "error",
                run_status,
                c.integer("execution_count"),
                c.text("ename"),
                c.text("evalue"),
                _str_list("execute_reply traceback", c.array("traceback")),
                usage=usage,
            )
        raise RemoteProtocolError(
            f"execute_reply status must be 'ok' or 'error', got {_show(status)}"
        )

    def _parse_from_host(
        self, msg_type: str, header: _Fields, c: _Fields, metadata: dict[str, Any]
    ) -> Event:
        if msg_type == "comm_open":
            target = c.text("target_name")
            if target != BINDINGS_TARGET:
                raise RemoteProtocolError(f"comm_open for unknown target {_show(target)}")
            comm_id = c.text("comm_id")
            namespaces = c.sub("data").obj("namespaces")
            self._comm_id = comm_id
            return OpenBindings(comm_id, namespaces)
        if msg_type == "execute_request":
            code = c.text("code")
            options = _Fields("execute_request metadata", metadata).obj("kernelgate", {})
            self._request_header = header.d
            return ExecuteRequest(code, options)
        if msg_type == "comm_msg":
            d = self._comm_data(c, "reply", "host")
            call_id = d.integer("id")
            if call_id not in self._outstanding:
                raise RemoteProtocolError(f"reply to call {call_id}, which is not waiting")
            if d.boolean("ok"):
                reply = CallReply(call_id, True, d._get("value"))
            else:
                reply = CallReply(call_id, False, None, d.text("ename"), d.text("evalue"))
            self._outstanding.discard(call_id)
            return reply
        raise RemoteProtocolError(f"unexpected message type {_show(msg_type)} from the host")
