"""Compact frames: a binding call and its reply as a short JSON array, the same comm message.

A call's ``comm_msg`` is about 490 bytes, most of it what never changes within a run: the
header's session, username and version, the parent header (the ``execute_request``'s),
the empty metadata, the bindings' comm id, and a date. Once both ends agreed (see
``docs/protocol.md``, "Compact call frames"), a call and its reply carry only what does
change, in the order of the comm message's ``data``:

>>> encode_call(CallRequest(0, "tools", "add", [1], {"b": 2}))
['call', 0, 'tools', 'add', [1], {'b': 2}]
>>> encode_reply(CallReply(0, True, 3)), encode_reply(CallReply(1, False, None, "E", "bad"))
(['reply', 0, True, 3], ['reply', 1, False, 'E', 'bad'])

The receiver reads them with :func:`read_call` / :func:`read_reply`, which check every
position as strictly as the field-by-field reader checks the full message (and say which
position was wrong), and build the events through the same constructors. :func:`expand`
rebuilds the full Jupyter message a compact frame stands for, from what the receiver knows
of the run: what a compact frame means is defined by it, and tests check that it gives the
full message the sender would otherwise have written (the date aside: a compact frame has
none, and the receiver's clock stands in).
"""

from __future__ import annotations

from typing import Any

from .errors import LocalProtocolError, RemoteProtocolError
from .events import CallReply, CallRequest, show
from .messages import iso_now

__all__ = [
    "COMPACT_KEY",
    "CALL_SHAPE",
    "REPLY_SHAPE",
    "encode_call",
    "encode_reply",
    "read_call",
    "read_reply",
    "expand",
]

#: ``metadata.kernelgate[COMPACT_KEY] == 1``: the host offers compact frames (on its
#: ``comm_open``), the child accepts them (on its first call, which is a full message).
COMPACT_KEY = "compact"
CALL_SHAPE = '["call", id, namespace, name, args, kwargs]'
REPLY_SHAPE = '["reply", id, true, value] or ["reply", id, false, ename, evalue]'


def encode_call(e: CallRequest) -> list[Any]:
    """The compact form of a call: its ``data`` fields, in order."""
    return ["call", e.call_id, e.namespace, e.name, e.args, e.kwargs]


def encode_reply(e: CallReply) -> list[Any]:
    """The compact form of a reply: its ``data`` fields, in order."""
    if e.ok:
        return ["reply", e.call_id, True, e.value]
    return ["reply", e.call_id, False, e.ename, e.evalue]


def _bad(shape: str, field: str, must: str, value: Any) -> RemoteProtocolError:
    return RemoteProtocolError(f"compact frame {shape}: {field} must be {must}, got {show(value)}")


def read_call(raw: list[Any]) -> CallRequest:
    """A compact call from the child, checked position by position (RemoteProtocolError)."""
    if len(raw) != 6 or raw[0] != "call":
        raise RemoteProtocolError(
            f"a compact frame from the child must be {CALL_SHAPE}, got {show(raw)}"
        )
    try:  # the constructor checks every field at once; a refusal is named below
        return CallRequest(raw[1], raw[2], raw[3], raw[4], raw[5])
    except LocalProtocolError:
        pass
    _, call_id, namespace, name, args, kwargs = raw
    if type(call_id) is not int:
        raise _bad(CALL_SHAPE, "id", "an integer", call_id)
    if type(namespace) is not str:
        raise _bad(CALL_SHAPE, "namespace", "a string", namespace)
    if type(name) is not str:
        raise _bad(CALL_SHAPE, "name", "a string", name)
    if type(args) is not list:
        raise _bad(CALL_SHAPE, "args", "a list", args)
    if type(kwargs) is not dict:
        raise _bad(CALL_SHAPE, "kwargs", "an object", kwargs)
    try:
        return CallRequest(call_id, namespace, name, args, kwargs)
    except Exception as exc:  # LocalProtocolError: a negative id
        raise RemoteProtocolError(f"compact frame {CALL_SHAPE}: {exc}") from None


def read_reply(raw: list[Any]) -> CallReply:
    """A compact reply from the host, checked position by position (RemoteProtocolError)."""
    n = len(raw)
    if n == 4 and raw[0] == "reply" and raw[2] is True:
        try:  # a value (the usual reply): the constructor checks the id; a refusal is named below
            return CallReply(raw[1], True, raw[3])
        except LocalProtocolError:
            pass
    if n < 3 or raw[0] != "reply":
        raise RemoteProtocolError(
            f"a compact frame from the host must be {REPLY_SHAPE}, got {show(raw)}"
        )
    call_id, ok = raw[1], raw[2]
    if type(call_id) is not int:
        raise _bad(REPLY_SHAPE, "id", "an integer", call_id)
    if type(ok) is not bool:
        raise _bad(REPLY_SHAPE, "ok", "true or false", ok)
    if n != (4 if ok else 5):
        raise RemoteProtocolError(
            f"a compact frame from the host must be {REPLY_SHAPE}, got {show(raw)}"
        )
    try:
        if ok:
            return CallReply(call_id, True, raw[3])
        if type(raw[3]) is not str:
            raise _bad(REPLY_SHAPE, "ename", "a string", raw[3])
        if type(raw[4]) is not str:
            raise _bad(REPLY_SHAPE, "evalue", "a string", raw[4])
        return CallReply(call_id, False, None, raw[3], raw[4])
    except RemoteProtocolError:
        raise
    except Exception as exc:  # LocalProtocolError from the constructor
        raise RemoteProtocolError(f"compact frame {REPLY_SHAPE}: {exc}") from None


def expand(
    raw: list[Any],
    *,
    session: str,
    number: int,
    parent_header: dict[str, Any],
    comm_id: str,
    username: str = "kernelgate",
    version: str = "5.3",
    date: str | None = None,
) -> dict[str, Any]:
    """The full Jupyter ``comm_msg`` a (valid) compact frame stands for.

    ``session``, ``username`` and ``version`` are the sender's (from its full messages),
    ``number`` the frame's place among the sender's messages (from 1: its ``msg_id`` is
    ``<session>-<number>``), ``parent_header`` the ``execute_request``'s header and
    ``comm_id`` the bindings comm's. ``date`` defaults to now.
    """
    if raw[0] == "call":
        keys: tuple[str, ...] = ("method", "id", "namespace", "name", "args", "kwargs")
    elif raw[2] is True:
        keys = ("method", "id", "ok", "value")
    else:
        keys = ("method", "id", "ok", "ename", "evalue")
    return {
        "header": {
            "msg_id": f"{session}-{number}",
            "msg_type": "comm_msg",
            "session": session,
            "username": username,
            "date": date if date is not None else iso_now(),
            "version": version,
        },
        "parent_header": parent_header,
        "metadata": {},
        "content": {"comm_id": comm_id, "data": dict(zip(keys, raw, strict=True))},
    }
