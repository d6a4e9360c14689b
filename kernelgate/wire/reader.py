"""Frames -> events: the two readers of what the peer sent (sans-I/O; no state changes).

:func:`read_fast` reads the most frequent messages (a binding call and its reply, a stream)
and those a run's latency waits for (the request, the value, the reply) straight from the
parsed dict, or gives up (``None``); :func:`read` reads any message field
by field and names what is wrong. Both build events through the events' own constructors,
which validate (:class:`~kernelgate.wire.errors.LocalProtocolError`: the connection reports
it as the peer's fault), and neither changes anything: the connection then consults the
peer's table for whichever event came back, so both readers are judged the same way.
``tests/wire/test_fast_path.py`` fuzzes them against each other.

>>> raw = {"header": {"msg_type": "stream"}, "parent_header": {}, "metadata": {},
...        "content": {"name": "stdout", "text": "hi"}}
>>> read_fast(raw, "host", None)
Stream(name='stdout', text='hi')
>>> read(raw, "child", None, lambda etype: None)
Stream(name='stdout', text='hi')
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .errors import LocalProtocolError, RemoteProtocolError
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
from .messages import BINDINGS_TARGET
from .state import CHILD, HOST

__all__ = ["FROM_CHILD", "FROM_HOST", "read_fast", "read"]

#: Message type -> the event it carries, per sender ("comm_msg" is a call from the child
#: and a reply from the host).
FROM_CHILD: dict[str, type] = {
    "stream": Stream,
    "comm_msg": CallRequest,
    "display_data": DisplayData,
    "update_display_data": UpdateDisplayData,
    "clear_output": ClearOutput,
    "execute_result": ExecuteResult,
    "error": ErrorOutput,
    "execute_reply": ExecuteReply,
    "debug_reply": DebugReply,
    "debug_event": DebugEvent,
}
FROM_HOST: dict[str, type] = {
    "comm_open": OpenBindings,
    "execute_request": ExecuteRequest,
    "comm_msg": CallReply,
    "debug_request": DebugRequest,
}


def read_fast(raw: dict[str, Any], our_role: str, comm_id: str | None) -> Event | None:
    """A call, a stream, the value or the reply (``our_role`` the host), or a call reply or
    the request (the child) read without the field-by-field reader, or None to let that
    reader say what is wrong.

    Accepts exactly what :func:`read` accepts for these messages and gives the same event:
    the constructors do the checking either way; this only skips building error messages
    it will not need.
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
            if comm_id is None or content.get("comm_id") != comm_id or type(data) is not dict:
                return None
            d: Any = data  # its values are unchecked: the constructors check them
            if our_role == HOST:
                if d.get("method") != "call":
                    return None
                return CallRequest(
                    d.get("id"), d.get("namespace"), d.get("name"), d.get("args"), d.get("kwargs")
                )
            if d.get("method") != "reply":
                return None
            ok = d.get("ok")
            if ok is True and "value" in d:
                return CallReply(d.get("id"), True, d["value"])
            if ok is False:
                return CallReply(d.get("id"), False, None, d.get("ename"), d.get("evalue"))
        elif our_role == HOST:
            c: Any = content
            if msg_type == "stream":
                return Stream(c.get("name"), c.get("text"))
            if msg_type == "execute_reply":
                return _fast_reply(c, raw["metadata"])
            if msg_type == "execute_result":
                # The run's last frames (its value, then its reply) are read as the
                # caller waits: the same fields the general reader takes, or None.
                meta = c.get("metadata", _ABSENT)
                if meta is _ABSENT:
                    meta = {}
                elif type(meta) is not dict:
                    return None
                return ExecuteResult(c.get("data"), meta, c.get("execution_count"))
        elif msg_type == "execute_request" and our_role == CHILD:
            return _fast_request(content, raw["metadata"])
    except LocalProtocolError:
        pass
    return None


_ABSENT: Any = object()


def _fast_reply(c: dict[str, Any], metadata: dict[str, Any]) -> Event | None:
    """An execute_reply as :func:`_read_reply` reads it, or None where it would refuse
    a field (that reader then names it)."""
    status = c.get("status")
    kg = metadata.get("kernelgate", _ABSENT)
    if kg is _ABSENT:
        kg = {}
    count = c.get("execution_count")
    if type(status) is not str or type(kg) is not dict or type(count) is not int:
        return None
    run_status = usage = None
    if "status" in kg:  # when there, a string (null too is refused)
        run_status = kg["status"]
        if type(run_status) is not str:
            return None
    if "usage" in kg:
        usage = kg["usage"]
        if type(usage) is not dict:
            return None
    if status != "error":
        return ExecuteReply(status, run_status, count, usage=usage)
    ename, evalue, tb = c.get("ename"), c.get("evalue"), c.get("traceback")
    if type(ename) is not str or type(evalue) is not str or type(tb) is not list:
        return None
    return ExecuteReply("error", run_status, count, ename, evalue, tb, usage=usage)


def _fast_request(c: dict[str, Any], metadata: dict[str, Any]) -> Event | None:
    """An execute_request as :func:`_read_request` reads it, or None."""
    options = metadata.get("kernelgate", _ABSENT)
    if options is _ABSENT:
        options = {}
    elif type(options) is not dict:
        return None
    code = c.get("code")
    if type(code) is not str:
        return None
    return ExecuteRequest(code, options)


def read(raw: Any, their_role: str, comm_id: str | None, check: Callable[[type], object]) -> Event:
    """The general reader: the envelope, then ``check(event type)`` (the peer's table:
    out of order is said before what is wrong inside), then the fields, each named when
    wrong. Raises RemoteProtocolError, or LocalProtocolError from an event constructor."""
    msg = _Fields("message", raw)
    header = msg.sub("header")
    msg_type = header.text("msg_type")
    msg.obj("parent_header")
    metadata = msg.obj("metadata")
    content = msg.sub("content")
    content.where = f"{msg_type} content"
    kinds = FROM_CHILD if their_role == CHILD else FROM_HOST
    etype = kinds.get(msg_type)
    if etype is None:
        raise RemoteProtocolError(
            f"unexpected message type {show(msg_type)} from the {their_role}; it may send "
            f"{', '.join(kinds)}"
        )
    check(etype)
    if etype is CallRequest or etype is CallReply:
        return _READ_COMM[etype](_comm_data(content, their_role, comm_id))
    return _READERS[etype](content, metadata)


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


def _comm_data(c: _Fields, their_role: str, comm_id: str | None) -> _Fields:
    """The data of a comm_msg on the bindings comm, whose method must be the sender's."""
    got_id = c.text("comm_id")
    if got_id != comm_id:
        raise RemoteProtocolError(
            f"comm_msg on unknown comm {show(got_id)}; bindings use {comm_id!r}"
        )
    d = c.sub("data")
    method = "call" if their_role == CHILD else "reply"
    got = d.text("method")
    if got != method:
        raise RemoteProtocolError(
            f"the {their_role} may only send method {method!r}, got {show(got)}"
        )
    return d


def _read_call(d: _Fields) -> Event:
    return CallRequest(
        d.integer("id"), d.text("namespace"), d.text("name"), d.array("args"), d.obj("kwargs")
    )


def _read_call_reply(d: _Fields) -> Event:
    call_id = d.integer("id")
    if d.boolean("ok"):
        return CallReply(call_id, True, d.get("value"))
    return CallReply(call_id, False, None, d.text("ename"), d.text("evalue"))


def _read_reply(c: _Fields, metadata: dict[str, Any]) -> Event:
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


def _read_open(c: _Fields, metadata: dict[str, Any]) -> Event:
    target = c.text("target_name")
    if target != BINDINGS_TARGET:
        raise RemoteProtocolError(f"comm_open for unknown target {show(target)}")
    return OpenBindings(c.text("comm_id"), c.sub("data").obj("namespaces"))


def _read_request(c: _Fields, metadata: dict[str, Any]) -> Event:
    options = _Fields("execute_request metadata", metadata).obj("kernelgate", {})
    return ExecuteRequest(c.text("code"), options)


def _read_display(c: _Fields) -> DisplayData:
    # transient.display_id is optional on a display (display(obj, display_id=...)).
    display_id = c.obj("transient", {}).get("display_id")
    return DisplayData(c.obj("data"), c.obj("metadata", {}), display_id)


_READ_COMM: dict[type, Callable[[_Fields], Event]] = {
    CallRequest: _read_call,
    CallReply: _read_call_reply,
}
_READERS: dict[type, Callable[[_Fields, dict[str, Any]], Event]] = {
    Stream: lambda c, _m: Stream(c.text("name"), c.text("text")),
    DisplayData: lambda c, _m: _read_display(c),
    UpdateDisplayData: lambda c, _m: UpdateDisplayData(
        c.obj("data"), c.obj("metadata", {}), display_id=c.sub("transient").text("display_id")
    ),
    ClearOutput: lambda c, _m: ClearOutput(c.boolean("wait")),
    ExecuteResult: lambda c, _m: ExecuteResult(
        c.obj("data"), c.obj("metadata", {}), c.integer("execution_count")
    ),
    ErrorOutput: lambda c, _m: ErrorOutput(c.text("ename"), c.text("evalue"), c.array("traceback")),
    ExecuteReply: _read_reply,
    OpenBindings: _read_open,
    ExecuteRequest: _read_request,
    DebugRequest: lambda c, _m: DebugRequest(
        c.integer("seq"), c.text("command"), c.obj("arguments", {})
    ),
    DebugReply: lambda c, _m: DebugReply(
        c.integer("request_seq"),
        c.text("command"),
        c.boolean("success"),
        c.obj("body", {}),
        c.text("message") if "message" in c.d else "",
    ),
    DebugEvent: lambda c, _m: DebugEvent(c.text("event"), c.obj("body", {})),
}
