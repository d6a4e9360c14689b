"""HOST and CHILD Connection objects joined in memory (no pipes, no processes), as in h11."""

from __future__ import annotations

import copy
import datetime
import json
import re

import nbformat
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nbformat.v4 import new_code_cell, new_notebook, output_from_msg

from kernelgate.wire import (
    BINDINGS_TARGET,
    CALL_MIME,
    CHILD,
    CHILD_RUN_STATUSES,
    HOST,
    PROTOCOL_VERSION,
    CallReply,
    CallRequest,
    Connection,
    DisplayData,
    ErrorOutput,
    ExecuteReply,
    ExecuteRequest,
    ExecuteResult,
    LocalProtocolError,
    OpenBindings,
    ProtocolError,
    RemoteProtocolError,
    Stream,
)

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


# -- a full conversation ------------------------------------------------------------------------


def conversation(w):
    """Every message type, in both directions; returns the events each side received."""
    host_got = []
    child_got = []
    host_got += w.child_send(Stream("stdout", "starting\n"))
    host_got += w.child_send(Stream("stderr", "warning: é 漢字 😀\n"))
    # three calls in flight at once, answered out of order
    host_got += w.child_send(CallRequest(0, "tools", "add", [1, 2], {}))
    host_got += w.child_send(CallRequest(1, "tools", "search", ["q"], {"limit": 3}))
    host_got += w.child_send(CallRequest(2, "db", "missing", [], {}))
    assert w.host.outstanding_calls == 3
    assert w.child.outstanding_calls == 3
    child_got += w.host_send(
        CallReply(2, False, ename="LookupError", evalue="no binding db.missing")
    )
    child_got += w.host_send(CallReply(0, True, 3))
    child_got += w.host_send(CallReply(1, True, [{"rank": 0, "text": "ünïcode"}, None, 1.5]))
    assert w.host.outstanding_calls == 0
    assert w.child.outstanding_calls == 0
    host_got += w.child_send(DisplayData({"text/plain": "<b>", "text/html": "<b>hi</b>"}))
    host_got += w.child_send(
        DisplayData(
            {CALL_MIME: {"namespace": "tools", "name": "add"}, "text/plain": "tools.add()"},
            {"kernelgate": {"call_id": 0}},
        )
    )
    host_got += w.child_send(
        ExecuteResult({"application/json": {"x": [3]}, "text/plain": "{'x': [3]}"})
    )
    host_got += w.child_send(ErrorOutput("ValueError", "bad", ["Traceback:", "ValueError: bad"]))
    host_got += w.child_send(
        ExecuteReply("error", "exception", ename="ValueError", evalue="bad", traceback=["tb"])
    )
    return host_got, child_got


def test_full_conversation():
    w = started()
    host_got, child_got = conversation(w)
    assert host_got == [
        Stream("stdout", "starting\n"),
        Stream("stderr", "warning: é 漢字 😀\n"),
        CallRequest(0, "tools", "add", [1, 2], {}),
        CallRequest(1, "tools", "search", ["q"], {"limit": 3}),
        CallRequest(2, "db", "missing", [], {}),
        DisplayData({"text/plain": "<b>", "text/html": "<b>hi</b>"}, {}),
        DisplayData(
            {CALL_MIME: {"namespace": "tools", "name": "add"}, "text/plain": "tools.add()"},
            {"kernelgate": {"call_id": 0}},
        ),
        ExecuteResult({"application/json": {"x": [3]}, "text/plain": "{'x': [3]}"}, {}, 1),
        ErrorOutput("ValueError", "bad", ["Traceback:", "ValueError: bad"]),
        ExecuteReply("error", "exception", 1, "ValueError", "bad", ["tb"]),
    ]
    assert child_got == [
        CallReply(2, False, None, "LookupError", "no binding db.missing"),
        CallReply(0, True, 3),
        CallReply(1, True, [{"rank": 0, "text": "ünïcode"}, None, 1.5]),
    ]
    assert w.host.finished and w.child.finished
    assert w.host.next_call_id == w.child.next_call_id == 3


def test_ok_run_with_value():
    w = started()
    assert w.child_send(ExecuteResult({"application/json": [1, 2], "text/plain": "[1, 2]"})) == [
        ExecuteResult({"application/json": [1, 2], "text/plain": "[1, 2]"})
    ]
    assert w.child_send(ExecuteReply("ok")) == [ExecuteReply("ok", "ok", 1)]
    assert w.host.finished


def test_non_json_last_expression_is_text_plain_only():
    w = started()
    got = w.child_send(ExecuteResult({"text/plain": "{1, 2}"}))
    assert got == [ExecuteResult({"text/plain": "{1, 2}"})]
    assert "application/json" not in w.to_host[-1]["content"]["data"]


@pytest.mark.parametrize("run_status", sorted(CHILD_RUN_STATUSES - {"ok"}))
def test_every_child_error_status_round_trips(run_status):
    w = started()
    reply = ExecuteReply("error", run_status, ename="E", evalue="v", traceback=["E: v"])
    assert w.child_send(reply) == [ExecuteReply("error", run_status, 1, "E", "v", ["E: v"])]
    assert w.to_host[-1]["metadata"] == {"kernelgate": {"status": run_status}}
    assert w.to_host[-1]["content"]["status"] == "error"


def test_child_run_statuses():
    assert {"ok", "exception", "invalid_output", "output_limit"} <= CHILD_RUN_STATUSES
    assert not CHILD_RUN_STATUSES & set(HOST_ONLY_STATUSES)


def test_execute_reply_without_kernelgate_metadata_defaults():
    w = started()
    raw = json.loads(w.child.send(ExecuteReply("error", "exception", ename="E", evalue="v")))
    raw["metadata"] = {}
    w.host.receive_data(frame(raw))
    assert drain(w.host) == [ExecuteReply("error", "exception", 1, "E", "v", [])]


def test_execute_reply_carries_the_childs_usage():
    w = started()
    usage = {"cpu_user_s": 0.012, "cpu_system_s": 0.004, "peak_memory_bytes": 17 << 20}
    got = w.child_send(ExecuteReply("ok", usage=usage))
    assert got == [ExecuteReply("ok", "ok", 1, usage=usage)]
    assert w.to_host[-1]["metadata"] == {"kernelgate": {"status": "ok", "usage": usage}}


@pytest.mark.parametrize(
    ("usage", "pattern"),
    [
        ([1], r"\['usage'\] must be an object"),
        ({"cpu_user_s": -1}, r"\['cpu_user_s'\] must be a number from 0 up, got -1"),
        ({"cpu_user_s": "1"}, r"must be a number from 0 up, got '1'"),
        ({"cpu_user_s": True}, r"must be a number from 0 up, got True"),
        ({"peak_memory_bytes": 1e300}, r"must be a number from 0 up"),
        ({"wall_s": 1}, r"unknown key 'wall_s'; it may have \['cpu_system_s'"),
    ],
)
def test_execute_reply_with_bad_usage_is_refused(usage, pattern):
    w = started()
    raw = json.loads(w.child.send(ExecuteReply("ok")))
    raw["metadata"]["kernelgate"]["usage"] = usage
    with pytest.raises(RemoteProtocolError, match=pattern):
        w.host.receive_data(frame(raw))
        drain(w.host)


def test_many_calls_in_flight_answered_in_reverse():
    w = started()
    n = 1025
    for i in range(n):
        assert w.child.next_call_id == i
        assert w.child_send(CallRequest(i, "tools", "add", [i, 1], {})) == [
            CallRequest(i, "tools", "add", [i, 1], {})
        ]
    assert w.host.outstanding_calls == n
    for i in reversed(range(n)):
        assert w.host_send(CallReply(i, True, i + 1)) == [CallReply(i, True, i + 1)]
    assert w.host.outstanding_calls == w.child.outstanding_calls == 0


def test_events_arrive_from_bytes_split_anywhere():
    w = started()
    data = b"".join(
        [
            w.child.send(Stream("stdout", "a\n")),
            w.child.send(CallRequest(0, "tools", "add", [1, 2], {})),
            w.child.send(ExecuteReply("ok")),
        ]
    )
    got = []
    for i in range(0, len(data), 7):
        w.host.receive_data(data[i : i + 7])
        got += drain(w.host)
    assert got == [
        Stream("stdout", "a\n"),
        CallRequest(0, "tools", "add", [1, 2], {}),
        ExecuteReply("ok", "ok", 1),
    ]


def test_peer_closed():
    w = started()
    w.host.receive_data(w.child.send(Stream("stdout", "x")))
    w.host.receive_data(b"")
    assert not w.host.peer_closed  # a frame is still waiting
    assert drain(w.host) == [Stream("stdout", "x")]
    assert w.host.peer_closed


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=6) | st.dictionaries(st.text(), inner, max_size=6),
    max_leaves=15,
)


@settings(max_examples=50, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(json_values, max_size=4),
    st.dictionaries(st.text(), json_values, max_size=4),
    json_values,
    st.text(),
)
def test_values_and_text_cross_unchanged(args, kwargs, value, text):
    w = started()
    assert w.child_send(Stream("stdout", text)) == [Stream("stdout", text)]
    assert w.child_send(CallRequest(0, "tools", "add", args, kwargs)) == [
        CallRequest(0, "tools", "add", args, kwargs)
    ]
    assert w.host_send(CallReply(0, True, value)) == [CallReply(0, True, value)]


# -- the Jupyter message shape ------------------------------------------------------------------

HEADER_FIELDS = {"msg_id", "msg_type", "session", "username", "date", "version"}
#: Content fields per the Jupyter messaging spec (5.3) for every message kernelgate sends.
CONTENT_FIELDS = {
    "comm_open": {"comm_id", "target_name", "data"},
    "comm_msg": {"comm_id", "data"},
    "execute_request": {
        "code",
        "silent",
        "store_history",
        "user_expressions",
        "allow_stdin",
        "stop_on_error",
    },
    "stream": {"name", "text"},
    "display_data": {"data", "metadata", "transient"},
    "execute_result": {"execution_count", "data", "metadata"},
    "error": {"ename", "evalue", "traceback"},
}
EXECUTE_REPLY_FIELDS = {
    "ok": {"status", "execution_count", "user_expressions", "payload"},
    "error": {"status", "execution_count", "ename", "evalue", "traceback"},
}


def all_messages():
    w = started()
    conversation(w)
    return w


def test_jupyter_envelope_and_header():
    w = all_messages()
    ids = set()
    for raw, session in [(m, "host-session") for m in w.to_child] + [
        (m, "child-session") for m in w.to_host
    ]:
        assert set(raw) == {"header", "parent_header", "metadata", "content"}
        header = raw["header"]
        assert set(header) == HEADER_FIELDS
        assert header["version"] == PROTOCOL_VERSION == "5.3"
        assert header["session"] == session
        assert header["username"] == "kernelgate"
        assert all(type(header[k]) is str for k in HEADER_FIELDS)
        assert header["msg_id"] not in ids
        ids.add(header["msg_id"])
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", header["date"])
        date = datetime.datetime.fromisoformat(header["date"].replace("Z", "+00:00"))
        now = datetime.datetime.now(datetime.timezone.utc)
        assert abs((now - date).total_seconds()) < 3600
        assert type(raw["parent_header"]) is dict and type(raw["metadata"]) is dict


def test_content_fields_follow_the_spec():
    w = all_messages()
    seen = set()
    for raw in w.to_child + w.to_host:
        msg_type = raw["header"]["msg_type"]
        seen.add(msg_type)
        content = raw["content"]
        if msg_type == "execute_reply":
            assert set(content) == EXECUTE_REPLY_FIELDS[content["status"]]
        else:
            assert set(content) == CONTENT_FIELDS[msg_type], msg_type
    assert seen == set(CONTENT_FIELDS) | {"execute_reply"}


def test_host_messages():
    w = all_messages()
    comm_open, execute_request, *replies = w.to_child
    assert comm_open["header"]["msg_type"] == "comm_open"
    assert comm_open["content"] == {
        "comm_id": COMM_ID,
        "target_name": BINDINGS_TARGET,
        "data": {"namespaces": SPECS},
    }
    assert BINDINGS_TARGET == "kernelgate.bindings"
    assert comm_open["parent_header"] == {} and comm_open["metadata"] == {}
    assert execute_request["header"]["msg_type"] == "execute_request"
    assert execute_request["content"] == {
        "code": CODE,
        "silent": False,
        "store_history": False,
        "user_expressions": {},
        "allow_stdin": False,
        "stop_on_error": True,
    }
    assert execute_request["metadata"] == {"kernelgate": OPTIONS}
    assert [r["content"] for r in replies] == [
        {
            "comm_id": COMM_ID,
            "data": {
                "method": "reply",
                "id": 2,
                "ok": False,
                "ename": "LookupError",
                "evalue": "no binding db.missing",
            },
        },
        {"comm_id": COMM_ID, "data": {"method": "reply", "id": 0, "ok": True, "value": 3}},
        {
            "comm_id": COMM_ID,
            "data": {
                "method": "reply",
                "id": 1,
                "ok": True,
                "value": [{"rank": 0, "text": "ünïcode"}, None, 1.5],
            },
        },
    ]
    for reply in replies:
        assert reply["parent_header"] == execute_request["header"]


def test_child_messages_are_children_of_the_execute_request():
    w = all_messages()
    request_header = w.to_child[1]["header"]
    assert request_header["msg_type"] == "execute_request"
    assert len(w.to_host) == 10
    for raw in w.to_host:
        assert raw["parent_header"] == request_header


def test_call_messages():
    w = all_messages()
    calls = [m for m in w.to_host if m["header"]["msg_type"] == "comm_msg"]
    assert [c["content"] for c in calls] == [
        {
            "comm_id": COMM_ID,
            "data": {
                "method": "call",
                "id": 0,
                "namespace": "tools",
                "name": "add",
                "args": [1, 2],
                "kwargs": {},
            },
        },
        {
            "comm_id": COMM_ID,
            "data": {
                "method": "call",
                "id": 1,
                "namespace": "tools",
                "name": "search",
                "args": ["q"],
                "kwargs": {"limit": 3},
            },
        },
        {
            "comm_id": COMM_ID,
            "data": {
                "method": "call",
                "id": 2,
                "namespace": "db",
                "name": "missing",
                "args": [],
                "kwargs": {},
            },
        },
    ]


def test_execute_reply_messages():
    w = started()
    w.child_send(ExecuteReply("ok"))
    ok = w.to_host[-1]
    assert ok["content"] == {
        "status": "ok",
        "execution_count": 1,
        "user_expressions": {},
        "payload": [],
    }
    assert ok["metadata"] == {"kernelgate": {"status": "ok"}}
    w = started()
    w.child_send(ExecuteReply("error", "output_limit", ename="OutputLimit", evalue="too big"))
    err = w.to_host[-1]
    assert err["content"] == {
        "status": "error",
        "execution_count": 1,
        "ename": "OutputLimit",
        "evalue": "too big",
        "traceback": [],
    }
    assert err["metadata"] == {"kernelgate": {"status": "output_limit"}}


def test_messages_pass_the_jupyter_message_spec_validator():
    msgspec = pytest.importorskip("jupyter_kernel_test.msgspec_v5")
    w = all_messages()
    request_id = w.to_child[1]["header"]["msg_id"]
    checked = 0
    for raw in w.to_child + w.to_host:
        msg_type = raw["header"]["msg_type"]
        if msg_type in msgspec.schema_fragments:
            msgspec.validate_message(copy.deepcopy(raw), msg_type, request_id)
            checked += 1
    w = started()
    w.child_send(ExecuteReply("ok"))
    msgspec.validate_message(w.to_host[-1], "execute_reply", w.to_child[1]["header"]["msg_id"])
    assert checked == 8


def test_outputs_are_real_jupyter_outputs_in_a_valid_notebook():
    w = all_messages()
    outputs = [
        output_from_msg(raw)
        for raw in w.to_host
        if raw["header"]["msg_type"] in ("stream", "display_data", "execute_result", "error")
    ]
    assert [o.output_type for o in outputs] == [
        "stream",
        "stream",
        "display_data",
        "display_data",
        "execute_result",
        "error",
    ]
    assert outputs[0].name == "stdout" and outputs[0].text == "starting\n"
    assert outputs[1].name == "stderr"
    assert outputs[2].data["text/html"] == "<b>hi</b>"
    assert outputs[3].data[CALL_MIME] == {"namespace": "tools", "name": "add"}
    assert outputs[4].data["application/json"] == {"x": [3]}
    assert outputs[4].execution_count == 1
    assert outputs[5].ename == "ValueError" and outputs[5].traceback == [
        "Traceback:",
        "ValueError: bad",
    ]
    nb = new_notebook(cells=[new_code_cell(source=CODE, outputs=outputs, execution_count=1)])
    nbformat.validate(nb)
    again = nbformat.reads(nbformat.writes(nb), as_version=4)
    nbformat.validate(again)
    assert again.cells[0].outputs == outputs


def test_json_value_of_any_shape_makes_a_valid_notebook():
    for value in ([1, "two", None], "text", 3, 2.5, True, None, {"a": {"b": []}}):
        w = started()
        w.child_send(ExecuteResult({"application/json": value, "text/plain": repr(value)}))
        output = output_from_msg(w.to_host[-1])
        assert output.data["application/json"] == value
        nbformat.validate(new_notebook(cells=[new_code_cell(outputs=[output])]))


# -- what the host refuses from the child -------------------------------------------------------


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
        raw = json.loads(w.child.send(event))
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


def utf16_stream(w):
    text = w.child.send(STREAM).decode("utf-8").rstrip("\n")
    return [text.encode("utf-16-le") + b"\n"]


def cesu_surrogate(w):
    data = w.child.send(Stream("stdout", "XX"))
    return [data.replace(b"XX", b"\xed\xa0\x80")]


def escaped_surrogate(w):
    raw = json.loads(w.child.send(Stream("stdout", "XX")))
    return [(json.dumps(raw).replace("XX", "\\ud800") + "\n").encode()]


REFUSED = [
    # bytes and JSON
    ("garbage", raw_bytes(b"hello world\n"), r"frame is not valid UTF-8 JSON"),
    ("binary", raw_bytes(b"\x00\x01\x02\xff\n"), r"not valid UTF-8 JSON"),
    ("invalid utf-8", raw_bytes(b'{"header": "\xff\xfe"}\n'), r"not valid UTF-8 JSON"),
    ("utf-16 frame", utf16_stream, r"not valid UTF-8 JSON"),
    ("utf-8 encoded surrogate", cesu_surrogate, r"not valid UTF-8 JSON"),
    ("escaped lone surrogate", escaped_surrogate, r"lone surrogate"),
    ("truncated json", raw_bytes(b'{"header": {\n'), r"not valid UTF-8 JSON"),
    ("empty line", raw_bytes(b"\n"), r"not valid UTF-8 JSON"),
    ("nan", edited(CALL0, setp(("content", "data", "args"), [float("nan")])), r"NaN is not JSON"),
    ("infinity", edited(CALL0, setp(("content", "data", "args"), [float("inf")])), "Infinity"),
    (
        "float overflow",
        lambda w: [w.child.send(CALL0).replace(b'"args":[1,2]', b'"args":[1e400]')],
        r"out of range",
    ),
    ("deep nesting", raw_bytes(b"[" * 200_000 + b"\n"), r"nested too deeply|not valid"),
    # envelope
    ("json list", raw_bytes(b"[1, 2]\n"), r"message must be a JSON object, got \[1, 2\]"),
    ("json null", raw_bytes(b"null\n"), r"message must be a JSON object, got None"),
    ("json string", raw_bytes(b'"stream"\n'), r"message must be a JSON object, got 'stream'"),
    ("no header", edited(STREAM, delp(("header",))), r"message has no field 'header'"),
    ("header not object", edited(STREAM, setp(("header",), "h")), r"message\['header'\] must be"),
    (
        "no msg_type",
        edited(STREAM, delp(("header", "msg_type"))),
        r"message\['header'\] has no field 'msg_type'",
    ),
    (
        "msg_type not str",
        edited(STREAM, setp(("header", "msg_type"), 5)),
        r"message\['header'\]\['msg_type'\] must be a string, got 5",
    ),
    ("no content", edited(STREAM, delp(("content",))), r"message has no field 'content'"),
    (
        "content not object",
        edited(STREAM, setp(("content",), [])),
        r"message\['content'\] must be a JSON object, got \[\]",
    ),
    ("no parent_header", edited(STREAM, delp(("parent_header",))), r"no field 'parent_header'"),
    (
        "parent_header null",
        edited(STREAM, setp(("parent_header",), None)),
        r"message\['parent_header'\] must be an object, got None",
    ),
    ("no metadata", edited(STREAM, delp(("metadata",))), r"message has no field 'metadata'"),
    # message types
    (
        "unknown msg_type",
        edited(STREAM, setp(("header", "msg_type"), "kernel_info_request")),
        r"unexpected message type 'kernel_info_request' from the child",
    ),
    (
        "comm_open from child",
        edited(STREAM, setp(("header", "msg_type"), "comm_open")),
        r"unexpected message type 'comm_open'",
    ),
    (
        "execute_request from child",
        edited(STREAM, setp(("header", "msg_type"), "execute_request")),
        r"unexpected message type 'execute_request'",
    ),
    # stream
    (
        "stream name stdin",
        edited(STREAM, setp(("content", "name"), "stdin")),
        r"stream name must be 'stdout' or 'stderr', got 'stdin'",
    ),
    (
        "stream text not str",
        edited(STREAM, setp(("content", "text"), 5)),
        r"stream content\['text'\] must be a string, got 5",
    ),
    (
        "stream no text",
        edited(STREAM, delp(("content", "text"))),
        r"stream content has no field 'text'",
    ),
    # display_data / execute_result / error
    (
        "display data not object",
        edited(DISPLAY, setp(("content", "data"), ["x"])),
        r"display_data content\['data'\] must be an object",
    ),
    (
        "display text/plain not str",
        edited(DISPLAY, setp(("content", "data", "text/plain"), 5)),
        r"display_data data\['text/plain'\] must be a string",
    ),
    (
        "display metadata not object",
        edited(DISPLAY, setp(("content", "metadata"), "m")),
        r"display_data content\['metadata'\] must be an object",
    ),
    (
        "execution_count str",
        edited(RESULT, setp(("content", "execution_count"), "1")),
        r"execute_result content\['execution_count'\] must be an integer, got '1'",
    ),
    (
        "execution_count float",
        edited(RESULT, setp(("content", "execution_count"), 1.0)),
        r"must be an integer, got 1.0",
    ),
    (
        "execution_count bool",
        edited(RESULT, setp(("content", "execution_count"), True)),
        r"must be an integer, got True",
    ),
    (
        "traceback item not str",
        edited(ERROR, setp(("content", "traceback"), ["ok", 1])),
        r"error traceback\[1\] must be a string, got 1",
    ),
    (
        "traceback not list",
        edited(ERROR, setp(("content", "traceback"), "tb")),
        r"error content\['traceback'\] must be a list",
    ),
    ("error no ename", edited(ERROR, delp(("content", "ename"))), r"has no field 'ename'"),
    # calls
    (
        "wrong comm_id",
        edited(CALL0, setp(("content", "comm_id"), "other")),
        r"comm_msg on unknown comm 'other'; bindings use 'bindings-run1'",
    ),
    ("comm_msg no data", edited(CALL0, delp(("content", "data"))), r"has no field 'data'"),
    (
        "call id str",
        edited(CALL0, setp(("content", "data", "id"), "0")),
        r"comm_msg content\['data'\]\['id'\] must be an integer, got '0'",
    ),
    (
        "call id bool",
        edited(CALL0, setp(("content", "data", "id"), False)),
        r"\['id'\] must be an integer, got False",
    ),
    (
        "call id float",
        edited(CALL0, setp(("content", "data", "id"), 0.0)),
        r"\['id'\] must be an integer, got 0.0",
    ),
    (
        "forged call id",
        edited(CALL0, setp(("content", "data", "id"), 5)),
        r"call id 5 is out of sequence: expected 0",
    ),
    (
        "negative call id",
        edited(CALL0, setp(("content", "data", "id"), -1)),
        r"call id -1 is out of sequence: expected 0",
    ),
    (
        "skipping ahead",
        edited(
            CallRequest(1, "tools", "add", [], {}),
            setp(("content", "data", "id"), 2),
            before=[CALL0],
        ),
        r"call id 2 is out of sequence: expected 1",
    ),
    (
        "duplicate call id",
        lambda w: [w.child.send(CALL0)] * 2,
        r"call id 0 is out of sequence: expected 1",
    ),
    (
        "method reply",
        edited(CALL0, setp(("content", "data", "method"), "reply")),
        r"the child may only send method 'call', got 'reply'",
    ),
    (
        "no method",
        edited(CALL0, delp(("content", "data", "method"))),
        r"comm_msg content\['data'\] has no field 'method'",
    ),
    (
        "args not list",
        edited(CALL0, setp(("content", "data", "args"), {"a": 1})),
        r"\['args'\] must be a list",
    ),
    (
        "kwargs not object",
        edited(CALL0, setp(("content", "data", "kwargs"), [])),
        r"\['kwargs'\] must be an object",
    ),
    (
        "namespace not str",
        edited(CALL0, setp(("content", "data", "namespace"), None)),
        r"\['namespace'\] must be a string, got None",
    ),
    # execute_reply
    (
        "status abort",
        edited(REPLY_OK, setp(("content", "status"), "abort")),
        r"execute_reply status must be 'ok' or 'error', got 'abort'",
    ),
    (
        "ok with exception status",
        edited(REPLY_OK, setp(("metadata", "kernelgate", "status"), "exception")),
        r"execute_reply status 'ok' with kernelgate status 'exception'",
    ),
    *[
        (
            f"host-only status {status}",
            edited(REPLY_ERR, setp(("metadata", "kernelgate", "status"), status)),
            re.escape(
                f"kernelgate status must be one of {sorted(CHILD_RUN_STATUSES - {'ok'})}, "
                f"got '{status}'"
            ),
        )
        for status in (*HOST_ONLY_STATUSES, "ok", "bogus")
    ],
    (
        "kernelgate status not str",
        edited(REPLY_ERR, setp(("metadata", "kernelgate", "status"), 3)),
        r"execute_reply metadata\['kernelgate'\]\['status'\] must be a string, got 3",
    ),
    (
        "kernelgate metadata not object",
        edited(REPLY_ERR, setp(("metadata", "kernelgate"), ["exception"])),
        r"execute_reply metadata\['kernelgate'\] must be a JSON object",
    ),
    ("error reply no evalue", edited(REPLY_ERR, delp(("content", "evalue"))), r"'evalue'"),
    # order
    (
        "stream after execute_reply",
        lambda w: [w.child.send(REPLY_OK), frame(json.loads(Wire().start().child.send(STREAM)))],
        r"stream message received after execute_reply",
    ),
    (
        "second execute_reply",
        lambda w: [w.child.send(REPLY_OK), Wire().start().child.send(REPLY_ERR)],
        r"execute_reply message received after execute_reply",
    ),
    (
        "call after execute_reply",
        lambda w: [w.child.send(REPLY_OK), Wire().start().child.send(CALL0)],
        r"comm_msg message received after execute_reply",
    ),
]


@pytest.mark.parametrize(
    ("build", "pattern"), [c[1:] for c in REFUSED], ids=[c[0] for c in REFUSED]
)
def test_host_refuses(build, pattern):
    w = started()
    frames = build(w)
    *good, bad = frames
    for data in good:
        w.host.receive_data(data)
        assert len(drain(w.host)) == 1
    w.host.receive_data(bad)
    with pytest.raises(RemoteProtocolError, match=pattern) as info:
        w.host.next_event()
    assert isinstance(info.value, ProtocolError)
    assert_dead(w.host, info.value)


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


def test_error_messages_are_readable_and_bounded():
    w = started()
    w.host.receive_data(
        frame(
            {
                "header": {"msg_type": "x" * 10_000},
                "parent_header": {},
                "metadata": {},
                "content": {},
            }
        )
    )
    with pytest.raises(RemoteProtocolError) as info:
        w.host.next_event()
    assert len(str(info.value)) < 400
    assert "..." in str(info.value)


def test_oversized_frame_is_refused():
    w = Wire(max_frame_bytes=1000).start()
    w.host.receive_data(w.child.send(Stream("stdout", "x" * 500)))
    assert drain(w.host) == [Stream("stdout", "x" * 500)]
    w.host.receive_data(w.child.send(Stream("stdout", "x" * 2000)))  # one chunk, newline in it
    with pytest.raises(RemoteProtocolError, match="over max_frame_bytes=1000") as info:
        w.host.next_event()
    assert_dead(w.host, info.value)


def test_newline_free_flood_is_refused_before_its_end():
    w = Wire(max_frame_bytes=4096).start()
    with pytest.raises(RemoteProtocolError, match="max_frame_bytes=4096") as info:
        for _ in range(100):
            w.host.receive_data(b"y" * 1000)
    assert w.host._decoder.pending_bytes == 0
    assert_dead(w.host, info.value)


def test_eof_inside_a_frame():
    w = started()
    data = w.child.send(STREAM)
    w.host.receive_data(data[:-5])
    assert w.host.next_event() is None
    w.host.receive_data(b"")
    with pytest.raises(RemoteProtocolError, match="stream ended inside a frame") as info:
        w.host.next_event()
    assert_dead(w.host, info.value)


def test_data_after_eof():
    w = started()
    w.host.receive_data(b"")
    with pytest.raises(RemoteProtocolError, match="data received after end of stream") as info:
        w.host.receive_data(w.child.send(STREAM))
    assert_dead(w.host, info.value)


def test_events_before_the_violation_are_delivered():
    w = started()
    w.host.receive_data(w.child.send(STREAM) + b"garbage\n" + w.child.send(STREAM))
    assert w.host.next_event() == STREAM
    with pytest.raises(RemoteProtocolError):
        w.host.next_event()


def test_call_before_bindings_are_opened():
    child = Connection(CHILD, session="c")
    with pytest.raises(LocalProtocolError, match="has not opened the bindings comm"):
        child.send(CALL0)
    assert child.next_call_id == 0
    host = Connection(HOST, session="h")
    host.receive_data(Wire().start().child.send(CALL0))
    with pytest.raises(RemoteProtocolError, match="comm_msg on unknown comm 'bindings-run1'"):
        host.next_event()


# -- what the child refuses from the host -------------------------------------------------------


def host_edited(event, *edits, before=()):
    def build(w):
        for e in before:
            w.host_send(e)
        raw = json.loads(w.host.send(event))
        for e in edits:
            e(raw)
        return frame(raw)

    return build


CHILD_REFUSES = [
    (
        "comm_open unknown target",
        host_edited(OpenBindings(COMM_ID, {}), setp(("content", "target_name"), "jupyter.widget")),
        r"comm_open for unknown target 'jupyter.widget'",
    ),
    (
        "namespaces not object",
        host_edited(OpenBindings(COMM_ID, {}), setp(("content", "data", "namespaces"), [])),
        r"comm_open content\['data'\]\['namespaces'\] must be an object",
    ),
    (
        "execute_request code not str",
        host_edited(ExecuteRequest("1"), setp(("content", "code"), 1)),
        r"execute_request content\['code'\] must be a string",
    ),
    (
        "options not object",
        host_edited(ExecuteRequest("1"), setp(("metadata", "kernelgate"), ["cwd"])),
        r"execute_request metadata\['kernelgate'\] must be an object",
    ),
    (
        "reply to a call that is not waiting",
        lambda w: frame(
            {
                **json.loads(Wire().start().host.send(OpenBindings(COMM_ID, {}))),
                "header": {"msg_type": "comm_msg"},
                "content": {"comm_id": COMM_ID, "data": {"method": "reply", "id": 0, "ok": True}},
            }
        ),
        r"reply to call 0, which is not waiting",
    ),
    (
        "reply method call",
        lambda w: (
            w.child_send(CALL0),
            frame(
                {
                    "header": {"msg_type": "comm_msg"},
                    "parent_header": {},
                    "metadata": {},
                    "content": {
                        "comm_id": COMM_ID,
                        "data": {"method": "call", "id": 0, "ok": True, "value": 1},
                    },
                }
            ),
        )[1],
        r"the host may only send method 'reply', got 'call'",
    ),
    (
        "reply on another comm",
        lambda w: (
            w.child_send(CALL0),
            frame(
                {
                    "header": {"msg_type": "comm_msg"},
                    "parent_header": {},
                    "metadata": {},
                    "content": {
                        "comm_id": "other",
                        "data": {"method": "reply", "id": 0, "ok": True, "value": 1},
                    },
                }
            ),
        )[1],
        r"comm_msg on unknown comm 'other'",
    ),
    (
        "reply ok not bool",
        lambda w: (
            w.child_send(CALL0),
            frame(
                {
                    "header": {"msg_type": "comm_msg"},
                    "parent_header": {},
                    "metadata": {},
                    "content": {
                        "comm_id": COMM_ID,
                        "data": {"method": "reply", "id": 0, "ok": 1, "value": 1},
                    },
                }
            ),
        )[1],
        r"\['ok'\] must be true or false, got 1",
    ),
    (
        "unknown msg_type from host",
        lambda w: frame(
            {
                "header": {"msg_type": "shutdown_request"},
                "parent_header": {},
                "metadata": {},
                "content": {},
            }
        ),
        r"unexpected message type 'shutdown_request' from the host",
    ),
]


@pytest.mark.parametrize(
    ("build", "pattern"), [c[1:] for c in CHILD_REFUSES], ids=[c[0] for c in CHILD_REFUSES]
)
def test_child_refuses(build, pattern):
    w = started()
    data = build(w)
    w.child.receive_data(data)
    with pytest.raises(RemoteProtocolError, match=pattern) as info:
        w.child.next_event()
    with pytest.raises(RemoteProtocolError) as again:
        w.child.next_event()
    assert again.value is info.value


def test_child_reply_without_value_is_refused():
    w = started()
    w.child_send(CALL0)
    raw = json.loads(w.host.send(CallReply(0, True, 5)))
    del raw["content"]["data"]["value"]
    w.child.receive_data(frame(raw))
    with pytest.raises(RemoteProtocolError, match="has no field 'value'"):
        w.child.next_event()


def test_child_refuses_duplicate_reply():
    w = started()
    w.child_send(CALL0)
    data = w.host.send(CallReply(0, True, 5))
    w.child.receive_data(data + data)
    assert w.child.next_event() == CallReply(0, True, 5)
    with pytest.raises(RemoteProtocolError, match="reply to call 0, which is not waiting"):
        w.child.next_event()


# -- what we may not send (LocalProtocolError) --------------------------------------------------


def test_host_reply_to_a_call_that_is_not_waiting():
    w = started()
    with pytest.raises(LocalProtocolError, match="no call 0 is waiting for a reply"):
        w.host.send(CallReply(0, True, 1))
    w.child_send(CALL0)
    w.host_send(CallReply(0, True, 3))
    with pytest.raises(LocalProtocolError, match="no call 0 is waiting for a reply"):
        w.host.send(CallReply(0, True, 3))  # answered already
    with pytest.raises(LocalProtocolError, match="no call 7 is waiting"):
        w.host.send(CallReply(7, False, ename="E", evalue="v"))


def test_child_sends_a_wrong_call_id():
    w = started()
    with pytest.raises(LocalProtocolError, match="call id must be 0, got 1"):
        w.child.send(CallRequest(1, "tools", "add", [], {}))
    assert w.child.next_call_id == 0
    w.child_send(CALL0)
    with pytest.raises(LocalProtocolError, match="call id must be 1, got 0"):
        w.child.send(CALL0)
    assert w.child.next_call_id == 1


def test_child_sends_after_execute_reply():
    w = started()
    w.child_send(REPLY_OK)
    for event in (STREAM, REPLY_OK, CallRequest(0, "tools", "add", [], {})):
        with pytest.raises(LocalProtocolError, match="after execute_reply"):
            w.child.send(event)


@pytest.mark.parametrize(
    ("role", "event"),
    [
        (HOST, STREAM),
        (HOST, CALL0),
        (HOST, REPLY_OK),
        (HOST, RESULT),
        (CHILD, OpenBindings(COMM_ID, {})),
        (CHILD, ExecuteRequest("1")),
        (CHILD, CallReply(0, True, 1)),
        (HOST, "not an event"),
    ],
)
def test_role_may_not_send(role, event):
    conn = Connection(role, session="s")
    with pytest.raises(LocalProtocolError, match=f"the {role} does not send"):
        conn.send(event)


def test_unknown_role():
    with pytest.raises(ValueError, match="our_role"):
        Connection("server", session="s")


def test_unencodable_call_does_not_consume_its_id():
    w = started()
    with pytest.raises(LocalProtocolError, match="cannot encode CallRequest"):
        w.child.send(CallRequest(0, "tools", "add", [{1, 2}], {}))
    with pytest.raises(LocalProtocolError, match="cannot encode CallRequest"):
        w.child.send(CallRequest(0, "tools", "add", [float("nan")], {}))
    with pytest.raises(LocalProtocolError, match="lone surrogate"):
        w.child.send(CallRequest(0, "tools", "add", ["\ud800"], {}))
    assert w.child.next_call_id == 0 and w.child.outstanding_calls == 0
    # the id is still free, and the host accepts it
    assert w.child_send(CALL0) == [CALL0]


def test_unencodable_reply_leaves_the_call_waiting():
    w = started()
    w.child_send(CALL0)
    with pytest.raises(LocalProtocolError, match="cannot encode CallReply"):
        w.host.send(CallReply(0, True, object()))
    assert w.host.outstanding_calls == 1
    # the host can still answer with an error instead
    got = w.host_send(CallReply(0, False, ename="TypeError", evalue="not JSON"))
    assert got == [CallReply(0, False, None, "TypeError", "not JSON")]


def test_too_deep_value_is_a_local_protocol_error():
    value: list = []
    for _ in range(100_000):
        value = [value]
    w = started()
    with pytest.raises(LocalProtocolError, match="nested too deeply"):
        w.child.send(CallRequest(0, "tools", "add", [value], {}))
    assert w.child.next_call_id == 0


def test_unencodable_execute_reply_does_not_finish():
    w = started()
    with pytest.raises(LocalProtocolError):
        w.child.send(ExecuteReply("error", "exception", ename="E", evalue="\udc80"))
    assert not w.child.finished
    assert w.child_send(REPLY_ERR) == [ExecuteReply("error", "exception", 1, "E", "v", [])]


def test_local_errors_do_not_kill_the_connection():
    w = started()
    with pytest.raises(LocalProtocolError):
        w.host.send(CallReply(3, True, 1))
    assert w.child_send(STREAM) == [STREAM]


def test_protocol_error_hierarchy():
    assert issubclass(LocalProtocolError, ProtocolError)
    assert issubclass(RemoteProtocolError, ProtocolError)
    assert not issubclass(LocalProtocolError, RemoteProtocolError)


def test_the_fast_path_for_calls_agrees_with_the_general_one(monkeypatch):
    """Calls and their replies skip the field-by-field reader; both readers must give the
    same events and leave the same state (ids, calls waiting)."""

    def conversation_events(w):
        got = []
        got += w.child_send(CallRequest(0, "tools", "add", [1, {"a": [2]}], {"b": None}))
        got += w.child_send(CallRequest(1, "tools-x", "search", [], {}))
        got += w.host_send(CallReply(1, False, ename="E", evalue="bad"))
        got += w.host_send(CallReply(0, True, {"v": [1.5, "é"]}))
        got += w.child_send(CallRequest(2, "db", "q", ["x"], {}))
        return got, (w.host.next_call_id, w.host.outstanding_calls, w.child.outstanding_calls)

    fast = conversation_events(started())
    monkeypatch.setattr(Connection, "_call_fast", lambda self, raw: None)
    general = conversation_events(started())
    assert fast == general
    assert fast[1] == (3, 1, 1)
