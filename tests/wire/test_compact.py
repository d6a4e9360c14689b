"""Compact call frames (kernelgate/wire/compact.py): negotiated per run, the same comm
messages, and refused as strictly as full ones.

The property tests read each compact frame twice: as it is, and as the full message it
stands for (``expand``) through the general reader; both must give the same event, or both
refuse, and leave the same state. ``benchmarks/fuzz_wire.py --compact`` fuzzes for longer.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kernelgate.wire import (
    CHILD,
    HOST,
    CallReply,
    CallRequest,
    Connection,
    ExecuteReply,
    ExecuteRequest,
    OpenBindings,
    ProtocolError,
    RemoteProtocolError,
    Stream,
)
from kernelgate.wire.compact import expand

from .pair import GeneralOnly, drain
from .test_fast_path import FUZZ
from .test_fuzz import cuts, jsonish, mutate, mutation, split_at

COMM_ID = "bindings-c"
SPECS = {"tools": {"add": {"params": [["a", "POSITIONAL_OR_KEYWORD", False]]}}}


def pair(host_compact=True, child_compact=True, host_cls=Connection, child_cls=Connection):
    host = host_cls(HOST, session="run1", compact=host_compact)
    child = child_cls(CHILD, session="child-7", compact=child_compact)
    for event in (OpenBindings(COMM_ID, SPECS), ExecuteRequest("pass")):
        child.receive_data(host.send(event))
    drain(child)
    return host, child


def agreed(host_cls=Connection, child_cls=Connection):
    """A pair that agreed on compact frames: call 0 (full, the child's yes) answered."""
    host, child = pair(host_cls=host_cls, child_cls=child_cls)
    host.receive_data(child.send(CallRequest(0, "tools", "add", [1], {})))
    drain(host)
    child.receive_data(host.send(CallReply(0, True, 1)))
    drain(child)
    assert host.compact and child.compact
    return host, child


# -- negotiation -------------------------------------------------------------------------------


def test_offer_taken_first_call_full_then_compact_both_ways():
    host, child = pair()
    assert not host.compact and not child.compact
    first = child.send(CallRequest(0, "tools", "add", [1], {}))
    msg = json.loads(first)
    assert msg["header"]["msg_type"] == "comm_msg"
    assert msg["metadata"] == {"kernelgate": {"compact": 1}}
    host.receive_data(first)
    assert drain(host) == [CallRequest(0, "tools", "add", [1], {})]
    assert host.compact and host.peer_header["session"] == "child-7"
    assert host.send(CallReply(0, True, {"v": None})) == b'["reply",0,true,{"v":null}]\n'
    assert child.send(CallRequest(1, "tools", "add", [], {"a": 2})) == (
        b'["call",1,"tools","add",[],{"a":2}]\n'
    )


def test_comm_open_carries_the_offer():
    host = Connection(HOST, session="run1", compact=True)
    msg = json.loads(host.send(OpenBindings(COMM_ID, SPECS)))
    assert msg["metadata"] == {"kernelgate": {"compact": 1}}
    assert msg["content"]["data"] == {"namespaces": SPECS}


@pytest.mark.parametrize("host_compact, child_compact", [(True, False), (False, True)])
def test_without_both_every_frame_is_full(host_compact, child_compact):
    """A child that does not take the offer (the Node child) and a host that makes none
    exchange full messages only."""
    host, child = pair(host_compact, child_compact)
    for i in range(3):
        frame = child.send(CallRequest(i, "tools", "add", [i], {}))
        assert json.loads(frame)["metadata"] == {}
        host.receive_data(frame)
        drain(host)
        reply = host.send(CallReply(i, True, i))
        assert json.loads(reply)["header"]["msg_type"] == "comm_msg"
        child.receive_data(reply)
        assert drain(child) == [CallReply(i, True, i)]
    assert not host.compact and not child.compact


@pytest.mark.parametrize("host_compact", [True, False])
def test_compact_call_before_the_agreement_is_refused(host_compact):
    host, _ = pair(host_compact)
    host.receive_data(b'["call",0,"tools","add",[1],{}]\n')
    words = "before compact frames were agreed" if host_compact else "must be a JSON object"
    with pytest.raises(RemoteProtocolError, match=words):
        host.next_event()
    assert host.our_state == "ERROR"


def test_compact_reply_before_the_agreement_is_refused():
    _host, child = pair()
    # The child's first call is the full one that takes the offer: until it has been
    # sent, a compact reply is refused.
    child.receive_data(b'["reply",0,true,1]\n')
    with pytest.raises(RemoteProtocolError, match="before compact frames were agreed"):
        child.next_event()


def test_a_forged_yes_without_an_offer_changes_nothing():
    host, child = pair(host_compact=False)
    forged = json.loads(child.send(CallRequest(0, "tools", "add", [1], {})))
    forged["metadata"] = {"kernelgate": {"compact": 1}}
    host.receive_data((json.dumps(forged) + "\n").encode())
    drain(host)
    assert not host.compact
    assert json.loads(host.send(CallReply(0, True, 1)))["content"]["data"]["method"] == "reply"


@pytest.mark.parametrize("mark", [True, 1.0, "1", 2, [1], None])
def test_only_the_integer_1_is_a_yes(mark):
    host, child = pair(child_compact=False)
    forged = json.loads(child.send(CallRequest(0, "tools", "add", [1], {})))
    forged["metadata"] = {"kernelgate": {"compact": mark}}
    host.receive_data((json.dumps(forged) + "\n").encode())
    drain(host)
    assert not host.compact


# -- the same messages ---------------------------------------------------------------------------


def _undated(msg):
    """The message without its dates (its own and its parent's: two pairs, two clocks)."""
    msg["header"].pop("date")
    msg["parent_header"] = {k: v for k, v in msg["parent_header"].items() if k != "date"}
    return msg


def test_expand_gives_the_full_message_the_sender_would_have_written():
    """The same conversation with and without compact frames: every compact frame,
    expanded with what its receiver knows, is the full frame (its date aside)."""
    host_c, child_c = agreed()
    host_f, child_f = pair(False, False)
    host_f.receive_data(child_f.send(CallRequest(0, "tools", "add", [1], {})))
    drain(host_f)
    child_f.receive_data(host_f.send(CallReply(0, True, 1)))
    drain(child_f)
    request_header = child_f._request_header  # the parent both pairs would show
    conversation = [
        ("child", CallRequest(1, "tools", "add", [{"k": [1.5, "é", None]}], {"b": True})),
        ("child", Stream("stdout", "between\n")),
        ("child", CallRequest(2, "db", "q-x", [], {})),
        ("host", CallReply(2, False, None, "ValueError", "bad \u2603")),
        ("host", CallReply(1, True, [1, {"a": None}])),
    ]
    numbers = {"child": 1, "host": 3}  # messages each has sent so far
    for who, event in conversation:
        numbers[who] += 1
        sender_c, sender_f = (child_c, child_f) if who == "child" else (host_c, host_f)
        compact, full = sender_c.send(event), sender_f.send(event)
        if who == "child":
            host_c.receive_data(compact)
            host_f.receive_data(full)
            assert drain(host_c) == drain(host_f) == [event]
        if type(event) is Stream:
            assert _undated(json.loads(compact)) == _undated(json.loads(full))
            continue
        raw = json.loads(compact)
        assert type(raw) is list
        session = "child-7" if who == "child" else "run1"
        shown = expand(
            raw,
            session=session,
            number=numbers[who],
            parent_header=request_header,
            comm_id=COMM_ID,
        )
        assert _undated(shown) == _undated(json.loads(full))
    assert host_c.peer_header["session"] == "child-7"
    assert child_c.peer_header["session"] == "run1"


# -- refusals: the same strictness ---------------------------------------------------------------


BAD_CALLS = [
    (b'["call",1,"tools","add",[1]]', "must be"),
    (b'["cal",1,"tools","add",[1],{}]', "must be"),
    (b'["reply",1,true,1]', "must be"),
    (b'["call","1","tools","add",[1],{}]', "id must be an integer, got '1'"),
    (b'["call",true,"tools","add",[1],{}]', "id must be an integer, got True"),
    (b'["call",1.0,"tools","add",[1],{}]', "id must be an integer, got 1.0"),
    (b'["call",-1,"tools","add",[1],{}]', "call id must be an integer from 0 up, got -1"),
    (b'["call",1,2,"add",[1],{}]', "namespace must be a string, got 2"),
    (b'["call",1,"tools",null,[1],{}]', "name must be a string, got None"),
    (b'["call",1,"tools","add",{},{}]', "args must be a list, got {}"),
    (b'["call",1,"tools","add",[],[]]', "kwargs must be an object, got []"),
    (b'["call",5,"tools","add",[],{}]', "call id 5 is out of sequence: expected 1"),
    (b'["call",0,"tools","add",[],{}]', "call id 0 is out of sequence: expected 1"),
    (b'["call",1,"tools","add",[NaN],{}]', "not valid UTF-8 JSON"),
    (b'["call",1,"tools","add",["\\ud800"],{}]', "lone surrogate"),
    (b"[]", "must be"),
]


@pytest.mark.parametrize("frame, words", BAD_CALLS)
def test_bad_compact_calls_are_refused_with_what_was_wrong(frame, words):
    host, _ = agreed()
    host.receive_data(frame + b"\n")
    with pytest.raises(RemoteProtocolError, match=words.replace("[", r"\[").replace("(", r"\(")):
        host.next_event()
    assert host.our_state == "ERROR"
    with pytest.raises(RemoteProtocolError):  # and for good
        host.next_event()


BAD_REPLIES = [
    (b'["reply",0,true]', "must be"),
    (b'["reply",0,true,1,2]', "must be"),
    (b'["reply",0,false,"E"]', "must be"),
    (b'["call",0,true,1]', "must be"),
    (b'["reply","0",true,1]', "id must be an integer"),
    (b'["reply",0,1,1]', "ok must be true or false, got 1"),
    (b'["reply",0,false,1,"x"]', "ename must be a string, got 1"),
    (b'["reply",0,false,"E",null]', "evalue must be a string, got None"),
    (b'["reply",7,true,1]', "reply to call 7, which is not waiting"),
]


@pytest.mark.parametrize("frame, words", BAD_REPLIES)
def test_bad_compact_replies_are_refused_with_what_was_wrong(frame, words):
    host, child = agreed()
    host.receive_data(child.send(CallRequest(1, "tools", "add", [1], {})))
    drain(host)
    child.receive_data(frame.replace(b",0,", b",1,") + b"\n")
    with pytest.raises(RemoteProtocolError, match=words.replace("[", r"\[")):
        child.next_event()
    assert child.our_state == "ERROR"


def test_out_of_order_is_said_first_as_for_full_frames():
    host, child = agreed()
    host.receive_data(child.send(ExecuteReply("ok")))
    drain(host)
    host.receive_data(b'["call",1,"tools",7,[],{}]\n')  # bad inside, and after the end
    with pytest.raises(RemoteProtocolError, match="the child sent comm_msg call in state DONE"):
        host.next_event()


def test_a_compact_call_after_the_end_is_refused():
    host, child = agreed()
    host.receive_data(child.send(ExecuteReply("ok")))
    drain(host)
    host.receive_data(b'["call",1,"tools","add",[],{}]\n')
    with pytest.raises(RemoteProtocolError, match="state DONE"):
        host.next_event()


def test_frame_ceiling_holds_for_compact_frames():
    host = Connection(HOST, session="run1", compact=True, max_frame_bytes=64)
    child = Connection(CHILD, session="child-7", compact=True)
    for event in (OpenBindings(COMM_ID, SPECS), ExecuteRequest("pass")):
        child.receive_data(host.send(event))
    drain(child)
    # The full first call is over 64 bytes itself: the ceiling counts every frame.
    host.receive_data(child.send(CallRequest(0, "tools", "add", [], {})))
    with pytest.raises(RemoteProtocolError, match="over max_frame_bytes=64"):
        host.next_event()
    host, child = agreed()
    host._decoder = type(host._decoder)(64)
    host.receive_data(child.send(CallRequest(1, "tools", "add", ["x" * 64], {})))
    with pytest.raises(RemoteProtocolError, match="over max_frame_bytes=64"):
        host.next_event()


# -- properties: the compact reader against the general one ---------------------------------------

values = jsonish | st.sampled_from([-1, 0, 1, 2, True, False, None, "0", "call", "reply", "tools"])


def outcome(conn, chunks):
    events, error = [], None
    try:
        for chunk in chunks:
            conn.receive_data(chunk)
            events += drain(conn)
    except ProtocolError as exc:
        error = type(exc).__name__
    return events, error, conn.states, conn.next_call_id, sorted(conn._outstanding)


def _line(value):
    return (json.dumps(value) + "\n").encode("utf-8", "surrogatepass")


@FUZZ
@given(values, values, values, values, values)
def test_compact_calls_read_as_their_full_messages(call_id, namespace, name, args, kwargs):
    raw = ["call", call_id, namespace, name, args, kwargs]
    host, _ = agreed()
    compact = outcome(host, [_line(raw)])
    full_host, _ = agreed(host_cls=GeneralOnly)
    shown = expand(raw, session="child-7", number=2, parent_header={}, comm_id=COMM_ID)
    assert compact == outcome(full_host, [_line(shown)])


@FUZZ
@given(values, st.booleans() | values, st.lists(values, max_size=3))
def test_compact_replies_read_as_their_full_messages(call_id, ok, rest):
    raw = ["reply", call_id, ok, *rest]
    host, child = agreed()
    host.receive_data(child.send(CallRequest(1, "tools", "add", [1], {})))
    compact = outcome(child, [_line(raw)])
    host, full_child = agreed(child_cls=GeneralOnly)
    host.receive_data(full_child.send(CallRequest(1, "tools", "add", [1], {})))
    if (ok is True and len(rest) == 1) or (ok is False and len(rest) == 2):
        shown = expand(raw, session="run1", number=4, parent_header={}, comm_id=COMM_ID)
        assert compact == outcome(full_child, [_line(shown)])
    else:  # no full message has this shape: refused, as a wrong shape
        assert compact[1] == "RemoteProtocolError" and child.our_state == "ERROR"


def _compact_run():
    _host, child = agreed()
    frames = [child.send(CallRequest(i, "tools", "add", [i, {"k": "é"}], {"b": i})) for i in (1, 2)]
    frames.append(child.send(Stream("stdout", "x\n")))
    frames.append(child.send(ExecuteReply("ok")))
    return frames


COMPACT_FROM_CHILD = _compact_run()


@FUZZ
@given(
    st.lists(st.integers(0, len(COMPACT_FROM_CHILD) - 1), min_size=1, max_size=6),
    st.lists(mutation, min_size=1, max_size=4),
    cuts,
)
def test_mutated_compact_frames_only_ever_raise_protocol_errors(order, ops, cut_points):
    data = mutate(b"".join(COMPACT_FROM_CHILD[i] for i in order), ops)
    host, _ = agreed()
    events, error, states, *_ = outcome(host, split_at(data, cut_points))
    if error is not None:
        assert states == {"host": "ERROR", "child": "ERROR"}
    for event in events:
        assert type(event) in (CallRequest, Stream, ExecuteReply)
