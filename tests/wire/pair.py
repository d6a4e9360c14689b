"""A HOST and a CHILD Connection joined in memory (no pipes, no processes), as in h11, and
the helpers the wire tests share to build frames, edit them and check refusals."""

from __future__ import annotations

import json

import pytest

from kernelgate.wire import (
    CHILD,
    HOST,
    CallReply,
    CallRequest,
    Connection,
    DisplayData,
    ErrorOutput,
    ExecuteReply,
    ExecuteRequest,
    ExecuteResult,
    OpenBindings,
    RemoteProtocolError,
    Stream,
    dumps,
)
from kernelgate.wire.connection import _BUILDERS


class GeneralOnly(Connection):
    """The same Connection with the fast reader switched off: every frame, full or compact,
    through the general reader (what the fast paths must agree with)."""

    _read_fast = staticmethod(lambda raw, our_role, comm_id: None)


COMM_ID = "bindings-run1"
SPECS = {
    "tools": {
        "add": {
            "params": [["a", "POSITIONAL_OR_KEYWORD", False], ["b", "POSITIONAL_OR_KEYWORD", True]],
            "signature": "(a, b=1)",
            "doc": "Add two numbers.",
        },
        "search": {
            "params": [["query", "POSITIONAL_OR_KEYWORD", False], ["limit", "KEYWORD_ONLY", True]],
            "signature": "(query, *, limit=5)",
            "doc": "",
        },
    },
    "db": {},
}
OPTIONS = {
    "cwd": "/tmp/kernelgate/run1",
    "max_output_bytes": 65536,
    "max_value_bytes": 32768,
    "max_calls": 10000,
    "max_frame_bytes": 8 * 1024 * 1024,
}
CODE = "x = await tools.add(1, 2)\nprint(x)\nx"
#: Run statuses only the host decides; a child reporting one is refused.
HOST_ONLY_STATUSES = ("timeout", "interrupted", "worker_exit", "protocol")


def drain(conn):
    events = []
    while (event := conn.next_event()) is not None:
        events.append(event)
    return events


def frame(raw) -> bytes:
    return (json.dumps(raw) + "\n").encode("utf-8")


class Wire:
    """A host and a child joined in memory; every frame is also kept as parsed JSON."""

    def __init__(self, max_frame_bytes=8 * 1024 * 1024):
        self.host = Connection(HOST, session="host-session", max_frame_bytes=max_frame_bytes)
        self.child = Connection(CHILD, session="child-session")
        self.to_child: list[dict] = []
        self.to_host: list[dict] = []

    def host_send(self, event):
        data = self.host.send(event)
        assert data.endswith(b"\n") and data.count(b"\n") == 1
        self.to_child.append(json.loads(data))
        self.child.receive_data(data)
        return drain(self.child)

    def child_send(self, event):
        data = self.child.send(event)
        assert data.endswith(b"\n") and data.count(b"\n") == 1
        self.to_host.append(json.loads(data))
        self.host.receive_data(data)
        return drain(self.host)

    def start(self):
        assert self.host_send(OpenBindings(COMM_ID, SPECS)) == [OpenBindings(COMM_ID, SPECS)]
        assert self.host_send(ExecuteRequest(CODE, OPTIONS)) == [ExecuteRequest(CODE, OPTIONS)]
        return self


def started():
    return Wire().start()


def forged(event, comm_id=COMM_ID) -> bytes:
    """The frame its role would write for ``event``, whatever any state says: what a peer
    that breaks the protocol (a program writing fd 3 itself) can send."""
    role = HOST if type(event) in (OpenBindings, ExecuteRequest, CallReply) else CHILD
    conn = Connection(role, session="forger")
    conn._comm_id = comm_id
    return (dumps(_BUILDERS[type(event)](conn, event)) + "\n").encode("utf-8")


# -- editing frames ------------------------------------------------------------------------------


def setp(path, value):
    def edit(raw):
        d = raw
        for key in path[:-1]:
            d = d[key]
        d[path[-1]] = value

    return edit


def delp(path):
    def edit(raw):
        d = raw
        for key in path[:-1]:
            d = d[key]
        del d[path[-1]]

    return edit


def edited(event, *edits, before=()):
    """Frames: ``before`` (valid events), then ``event`` as JSON with ``edits`` applied."""

    def build(w):
        frames = [w.child.send(e) for e in before]
        raw = json.loads(forged(event))
        for e in edits:
            e(raw)
        frames.append(frame(raw))
        return frames

    return build


def raw_bytes(*frames):
    return lambda w: list(frames)


STREAM = Stream("stdout", "hi\n")
CALL0 = CallRequest(0, "tools", "add", [1, 2], {})
DISPLAY = DisplayData({"text/plain": "x"})
RESULT = ExecuteResult({"application/json": 1, "text/plain": "1"})
ERROR = ErrorOutput("E", "v", ["E: v"])
REPLY_OK = ExecuteReply("ok")
REPLY_ERR = ExecuteReply("error", "exception", ename="E", evalue="v")


# -- checking refusals ---------------------------------------------------------------------------


def host_edited(event, *edits, before=()):
    """A frame: ``event`` as the host would write it, with ``edits`` applied; ``before``
    (valid events) are sent first."""

    def build(w):
        for e in before:
            w.host_send(e)
        raw = json.loads(forged(event))
        for e in edits:
            e(raw)
        return frame(raw)

    return build


def assert_dead(conn, error):
    """After a violation every receive_data/next_event raises the same error."""
    for call in (
        conn.next_event,
        lambda: conn.receive_data(Wire().start().child.send(STREAM)),
        lambda: conn.receive_data(b""),
        conn.next_event,
    ):
        with pytest.raises(RemoteProtocolError) as again:
            call()
        assert again.value is error
