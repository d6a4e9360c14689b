"""HOST and CHILD Connection objects joined in memory (no pipes, no processes), as in h11:
whole conversations, the Jupyter shape of every message, and what sending refuses."""

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

from .pair import (
    CALL0,
    CODE,
    COMM_ID,
    HOST_ONLY_STATUSES,
    OPTIONS,
    REPLY_ERR,
    REPLY_OK,
    RESULT,
    SPECS,
    STREAM,
    drain,
    frame,
    started,
)


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
    # The program's other threads may still print after its value, until the reply.
    host_got += w.child_send(Stream("stdout", "late\n"))
    host_got += w.child_send(ExecuteReply("ok"))
    return host_got, child_got


def failing(w):
    """The other way a run ends: the program's exception, then an error reply."""
    got = w.child_send(Stream("stdout", "before\n"))
    got += w.child_send(ErrorOutput("ValueError", "bad", ["Traceback:", "ValueError: bad"]))
    got += w.child_send(
        ExecuteReply("error", "exception", ename="ValueError", evalue="bad", traceback=["tb"])
    )
    return got


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
        Stream("stdout", "late\n"),
        ExecuteReply("ok", "ok", 1),
    ]
    assert child_got == [
        CallReply(2, False, None, "LookupError", "no binding db.missing"),
        CallReply(0, True, 3),
        CallReply(1, True, [{"rank": 0, "text": "ünïcode"}, None, 1.5]),
    ]
    assert w.host.finished and w.child.finished
    assert w.host.next_call_id == w.child.next_call_id == 3
    assert w.host.states == {"host": "DONE", "child": "DONE"}
    # The child cannot know when the host saw its reply: replies may still be on the way.
    assert w.child.states == {"host": "EXECUTING", "child": "DONE"}


def test_failing_run():
    w = started()
    assert failing(w) == [
        Stream("stdout", "before\n"),
        ErrorOutput("ValueError", "bad", ["Traceback:", "ValueError: bad"]),
        ExecuteReply("error", "exception", 1, "ValueError", "bad", ["tb"]),
    ]
    assert w.host.finished and w.host.our_state == "DONE"


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
    """Two runs: one with a value (every message but ``error``), one that fails."""
    w = started()
    conversation(w)
    e = started()
    failing(e)
    return w, e


def test_jupyter_envelope_and_header():
    for w in all_messages():
        check_envelopes(w)


def check_envelopes(w):
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
    seen = set()
    for raw in [m for w in all_messages() for m in w.to_child + w.to_host]:
        msg_type = raw["header"]["msg_type"]
        seen.add(msg_type)
        content = raw["content"]
        if msg_type == "execute_reply":
            assert set(content) == EXECUTE_REPLY_FIELDS[content["status"]]
        else:
            assert set(content) == CONTENT_FIELDS[msg_type], msg_type
    assert seen == set(CONTENT_FIELDS) | {"execute_reply"}


def test_host_messages():
    w, _ = all_messages()
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
    for w, count in zip(all_messages(), (10, 3), strict=True):
        request_header = w.to_child[1]["header"]
        assert request_header["msg_type"] == "execute_request"
        assert len(w.to_host) == count
        for raw in w.to_host:
            assert raw["parent_header"] == request_header


def test_call_messages():
    w, _ = all_messages()
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
    checked = set()
    for w in all_messages():
        request_id = w.to_child[1]["header"]["msg_id"]
        for raw in w.to_child + w.to_host:
            msg_type = raw["header"]["msg_type"]
            if msg_type in msgspec.schema_fragments:
                msgspec.validate_message(copy.deepcopy(raw), msg_type, request_id)
                checked.add(msg_type)
    assert checked == {
        "execute_request",
        "stream",
        "display_data",
        "execute_result",
        "error",
        "execute_reply",
    }


def test_outputs_are_real_jupyter_outputs_in_a_valid_notebook():
    ok, failed = all_messages()
    outputs = [
        output_from_msg(raw)
        for raw in ok.to_host + failed.to_host
        if raw["header"]["msg_type"] in ("stream", "display_data", "execute_result", "error")
    ]
    assert [o.output_type for o in outputs] == [
        "stream",
        "stream",
        "display_data",
        "display_data",
        "execute_result",
        "stream",
        "stream",
        "error",
    ]
    assert outputs[0].name == "stdout" and outputs[0].text == "starting\n"
    assert outputs[1].name == "stderr"
    assert outputs[2].data["text/html"] == "<b>hi</b>"
    assert outputs[3].data[CALL_MIME] == {"namespace": "tools", "name": "add"}
    assert outputs[4].data["application/json"] == {"x": [3]}
    assert outputs[4].execution_count == 1
    assert outputs[7].ename == "ValueError" and outputs[7].traceback == [
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


def test_host_reply_to_a_call_that_is_not_waiting():
    w = started()
    with pytest.raises(LocalProtocolError, match="no call 0 is waiting for a reply"):
        w.host.send(CallReply(0, True, 1))
    assert w.host.our_state == "ERROR"
    w = started()
    w.child_send(CALL0)
    w.host_send(CallReply(0, True, 3))
    with pytest.raises(LocalProtocolError, match="no call 0 is waiting for a reply"):
        w.host.send(CallReply(0, True, 3))  # answered already
    w = started()
    with pytest.raises(LocalProtocolError, match="no call 7 is waiting"):
        w.host.send(CallReply(7, False, ename="E", evalue="v"))


def test_child_sends_a_wrong_call_id():
    w = started()
    with pytest.raises(LocalProtocolError, match="call id must be 0, got 1"):
        w.child.send(CallRequest(1, "tools", "add", [], {}))
    assert w.child.next_call_id == 0 and w.child.our_state == "ERROR"
    w = started()
    w.child_send(CALL0)
    with pytest.raises(LocalProtocolError, match="call id must be 1, got 0"):
        w.child.send(CALL0)
    assert w.child.next_call_id == 1


@pytest.mark.parametrize("event", [STREAM, REPLY_OK, CALL0, RESULT])
def test_child_sends_after_execute_reply(event):
    w = started()
    w.child_send(REPLY_OK)
    with pytest.raises(
        LocalProtocolError,
        match=rf"cannot send {type(event).__name__}: the child is in state DONE \(after its "
        r"execute_reply\), where it may send nothing",
    ):
        w.child.send(event)


def test_host_answers_no_call_after_the_childs_reply():
    w = started()
    w.child_send(CALL0)
    w.child_send(REPLY_OK)
    assert w.host.outstanding_calls == 1  # abandoned by the child's end
    with pytest.raises(LocalProtocolError, match="the host is in state DONE"):
        w.host.send(CallReply(0, True, 3))


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
    assert conn.our_state == "ERROR"


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


def test_a_local_violation_ends_the_connection():
    w = started()
    with pytest.raises(LocalProtocolError, match="no call 3 is waiting") as info:
        w.host.send(CallReply(3, True, 1))
    assert w.host.states == {"host": "ERROR", "child": "ERROR"}
    with pytest.raises(LocalProtocolError, match="connection is in ERROR since") as again:
        w.host.send(CallReply(3, True, 1))
    assert str(info.value) in str(again.value)
    data = w.child.send(STREAM)
    for call in (lambda: w.host.receive_data(data), w.host.next_event):
        with pytest.raises(LocalProtocolError, match="cannot receive: the connection is in ERROR"):
            call()


def test_a_remote_violation_ends_the_connection_both_ways():
    w = started()
    w.host.receive_data(b"garbage\n")
    with pytest.raises(RemoteProtocolError) as info:
        w.host.next_event()
    assert w.host.states == {"host": "ERROR", "child": "ERROR"}
    with pytest.raises(LocalProtocolError, match="cannot send OpenBindings: the connection is"):
        w.host.send(OpenBindings(COMM_ID, {}))
    with pytest.raises(RemoteProtocolError) as again:
        w.host.next_event()
    assert again.value is info.value


def test_an_event_that_cannot_be_encoded_changes_nothing():
    """Nothing was sent: the connection stays as it was, and the caller sends another."""
    w = started()
    w.child_send(CALL0)
    before = (w.host.states, w.host.outstanding_calls)
    with pytest.raises(LocalProtocolError, match="cannot encode CallReply"):
        w.host.send(CallReply(0, True, {1, 2}))
    assert (w.host.states, w.host.outstanding_calls) == before
    assert w.host_send(CallReply(0, False, ename="TypeError", evalue="not JSON"))


def test_protocol_error_hierarchy():
    assert issubclass(LocalProtocolError, ProtocolError)
    assert issubclass(RemoteProtocolError, ProtocolError)
    assert not issubclass(LocalProtocolError, RemoteProtocolError)
