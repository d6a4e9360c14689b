"""The debugger's messages on fd 3: allowed only in a debugged run, a reply only to a
request in flight and once, ``stopped`` the only event a child may send."""

from __future__ import annotations

import json

import pytest

from kernelgate.wire import (
    CHILD,
    ERROR,
    HOST,
    DebugEvent,
    DebugReply,
    DebugRequest,
    ExecuteReply,
    ExecuteRequest,
    LocalProtocolError,
    OpenBindings,
    RemoteProtocolError,
    Stream,
)

from .pair import CODE, COMM_ID, OPTIONS, SPECS, Wire, forged, frame

pytestmark = pytest.mark.timeout(30)

DEBUG_OPTIONS = {**OPTIONS, "debug": {"breakpoints": [2]}}


def debugged() -> Wire:
    w = Wire()
    w.host_send(OpenBindings(COMM_ID, SPECS))
    w.host_send(ExecuteRequest(CODE, DEBUG_OPTIONS))
    assert w.host.debugged and w.child.debugged
    return w


def test_a_debugged_run_carries_requests_replies_and_stopped_events():
    w = debugged()
    stopped = DebugEvent("stopped", {"reason": "breakpoint", "threadId": 1})
    assert w.child_send(stopped) == [stopped]
    request = DebugRequest(1, "stackTrace", {"threadId": 1})
    assert w.host_send(request) == [request]
    assert w.host.debug_requests_waiting == {1} == w.child.debug_requests_waiting
    reply = DebugReply(1, "stackTrace", True, {"stackFrames": [], "totalFrames": 0})
    assert w.child_send(reply) == [reply]
    assert not w.host.debug_requests_waiting and not w.child.debug_requests_waiting
    # As Jupyter messages: DAP's own shapes in the content.
    assert w.to_child[-1]["header"]["msg_type"] == "debug_request"
    assert w.to_child[-1]["content"] == {
        "type": "request",
        "seq": 1,
        "command": "stackTrace",
        "arguments": {"threadId": 1},
    }
    assert w.to_host[-1]["content"]["type"] == "response"
    assert w.to_host[0]["content"] == {"type": "event", "event": "stopped", "body": stopped.body}
    # The run goes on as any other.
    assert w.child_send(Stream("stdout", "x")) == [Stream("stdout", "x")]
    assert w.child_send(ExecuteReply("ok")) == [ExecuteReply("ok")]


def test_requests_after_the_reply_are_refused_on_the_host():
    w = debugged()
    w.child_send(ExecuteReply("ok"))
    with pytest.raises(LocalProtocolError, match="cannot send DebugRequest: the host is in"):
        w.host.send(DebugRequest(1, "threads"))


@pytest.mark.parametrize(
    "event",
    [
        DebugEvent("stopped", {"reason": "pause"}),
        DebugReply(0, "threads", True, {}),
    ],
    ids=["event", "reply"],
)
def test_a_run_that_is_not_debugged_refuses_the_debuggers_messages(event):
    w = Wire().start()
    assert not w.host.debugged
    with pytest.raises(LocalProtocolError, match="in a run that is not debugged"):
        w.child.send(event)
    w = Wire().start()
    w.host.receive_data(forged(event))
    with pytest.raises(RemoteProtocolError, match=r"the child sent debug_.* in a run that is not"):
        w.host.next_event()
    assert w.host.states == {HOST: ERROR, CHILD: ERROR}


def test_the_host_sends_no_request_to_a_run_that_is_not_debugged():
    w = Wire().start()
    with pytest.raises(LocalProtocolError, match="cannot send debug_request in a run that is not"):
        w.host.send(DebugRequest(0, "threads"))


def test_a_reply_answers_a_request_in_flight_once():
    w = debugged()
    w.host_send(DebugRequest(7, "threads"))
    w.child_send(DebugReply(7, "threads", True, {"threads": []}))
    w.host.receive_data(forged(DebugReply(7, "threads", True, {})))
    with pytest.raises(RemoteProtocolError, match="reply to debug request 7, which is not waiting"):
        w.host.next_event()


def test_a_forged_reply_to_a_request_never_sent_is_refused():
    w = debugged()
    w.host.receive_data(forged(DebugReply(3, "evaluate", True, {"result": "1"})))
    with pytest.raises(RemoteProtocolError, match="reply to debug request 3, which is not waiting"):
        w.host.next_event()


def test_a_request_seq_in_flight_is_not_used_twice():
    w = debugged()
    w.host_send(DebugRequest(1, "threads"))
    with pytest.raises(LocalProtocolError, match="debug request 1 is already waiting"):
        w.host.send(DebugRequest(1, "threads"))


@pytest.mark.parametrize("name", ["continued", "terminated", "output", "initialized", ""])
def test_only_stopped_comes_from_a_child(name):
    w = debugged()
    raw = json.loads(forged(DebugEvent("stopped", {})))
    raw["content"]["event"] = name
    w.host.receive_data(frame(raw))
    with pytest.raises(RemoteProtocolError, match="debug_event event must be one of"):
        w.host.next_event()


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("success", "yes", r"debug_reply content\[.success.\] must be true or false"),
        ("body", [1], r"debug_reply content\[.body.\] must be an object"),
        ("command", "rm -rf", "debug_reply command must be a name"),
        ("request_seq", -1, "debug_reply request_seq must be an integer from 0 up"),
    ],
)
def test_malformed_replies_say_which_field(field, value, message):
    w = debugged()
    w.host_send(DebugRequest(0, "threads"))
    raw = json.loads(forged(DebugReply(0, "threads", True, {})))
    raw["content"][field] = value
    w.host.receive_data(frame(raw))
    with pytest.raises(RemoteProtocolError, match=message):
        w.host.next_event()


def test_the_child_sends_no_request_and_the_host_no_event():
    w = debugged()
    with pytest.raises(LocalProtocolError, match="the child does not send DebugRequest"):
        w.child.send(DebugRequest(0, "threads"))
    w = debugged()
    with pytest.raises(LocalProtocolError, match="the host does not send DebugEvent"):
        w.host.send(DebugEvent("stopped", {}))
