"""The fast reader (calls, their replies and streams, read straight from the dict) against
the general field-by-field reader: for arbitrary bytes and for mutated valid frames, both
give the same events, or the same error, and leave the same state behind.

``GeneralOnly`` is the same Connection with the fast reader switched off. Example counts are
moderate so this file stays quick; ``benchmarks/fuzz_wire.py`` fuzzes for as long as you like.
"""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

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
    ProtocolError,
    Stream,
)

from .pair import GeneralOnly, drain
from .test_fuzz import cuts, jsonish, mutate, mutation, paths, split_at

COMM_ID = "bindings-fast"
SPECS = {"tools": {"add": {"params": [["a", "POSITIONAL_OR_KEYWORD", False]]}}}
FUZZ = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


class Counting(Connection):
    """Counts the frames the general reader had to read."""

    general = 0

    def _read(self, raw):
        Counting.general += 1
        return super()._read(raw)


def host_side(cls):
    """A host of class ``cls`` that sent the bindings and the request."""
    host = cls(HOST, session="host", max_frame_bytes=4096)
    child = Connection(CHILD, session="child")
    for event in (OpenBindings(COMM_ID, SPECS), ExecuteRequest("pass")):
        child.receive_data(host.send(event))
    drain(child)
    return host, child


def child_side(cls):
    """A child of class ``cls`` with calls 0, 1 and 2 waiting, and the host's replies."""
    host = Connection(HOST, session="host")
    child = cls(CHILD, session="child")
    for event in (OpenBindings(COMM_ID, SPECS), ExecuteRequest("pass")):
        child.receive_data(host.send(event))
    drain(child)
    for i in range(3):
        host.receive_data(child.send(CallRequest(i, "tools", "add", [i], {})))
    drain(host)
    replies = [
        host.send(CallReply(1, True, {"v": [1.5, "é", None]})),
        host.send(CallReply(0, False, ename="ValueError", evalue="bad")),
        host.send(CallReply(2, True, None)),
    ]
    return child, replies


_, _child = host_side(Connection)
FROM_CHILD = [
    _child.send(e)
    for e in (
        CallRequest(0, "tools", "add", [1, {"k": [None, 2.5]}], {"b": True}),
        Stream("stdout", "hello\n"),
        CallRequest(1, "tools-x", "add", [], {}),
        Stream("stderr", "é😀\n"),
        DisplayData({"text/plain": "x"}),
        CallRequest(2, "db", "q", ["x"], {"k": "v"}),
        ExecuteResult({"application/json": 1, "text/plain": "1"}),
        ExecuteReply("ok"),
    )
]
FROM_HOST = child_side(Connection)[1]


def _last_frames(shown, reply):
    """A child's value or error and its reply, as the frames it sends last."""
    _, child = host_side(Connection)
    return b"".join(child.send(e) for e in (shown, reply))


#: A run's last frames, other ways: each a value or an error and the reply, in one chunk.
LAST = [
    _last_frames(
        ExecuteResult({"text/plain": "x", "image/png": "AAAA"}, {"image/png": {"width": 3}}, 2),
        ExecuteReply("ok", usage={"cpu_user_s": 0.5, "peak_memory_bytes": 1024}),
    ),
    _last_frames(
        ErrorOutput("ValueError", "bad", ["Traceback", "ValueError: bad"]),
        ExecuteReply(
            "error", "exception", 1, "ValueError", "bad", ["ValueError: bad"], {"cpu_user_s": 1}
        ),
    ),
    _last_frames(
        ErrorOutput("OutputLimit", "too much", []),
        ExecuteReply("error", "output_limit", 0, "OutputLimit", "too much"),
    ),
]


def child_before_request(cls):
    """A child of class ``cls`` that has its bindings and waits for its program."""
    host = Connection(HOST, session="host")
    child = cls(CHILD, session="child")
    child.receive_data(host.send(OpenBindings(COMM_ID, SPECS)))
    drain(child)
    return child, host


REQUESTS = [
    child_before_request(Connection)[1].send(e)
    for e in (
        ExecuteRequest("return await tools.add(1)", {"cwd": "/r", "sandbox": {"level": "x"}}),
        ExecuteRequest("", {}),
        ExecuteRequest("print('é')", {"debug": {"breakpoints": []}, "max_calls": 3}),
    )
]


def outcome(conn, chunks):
    """Everything observable: the events, the error (type and words), the state after."""
    events, error = [], None
    try:
        for chunk in chunks:
            conn.receive_data(chunk)
            events += drain(conn)
    except ProtocolError as exc:
        error = (type(exc).__name__, str(exc))
    return (
        events,
        error,
        conn.states,
        conn.next_call_id,
        sorted(conn._outstanding),
        conn.finished,
    )


def same_on_host(chunks):
    fast = outcome(host_side(Connection)[0], chunks)
    assert fast == outcome(host_side(GeneralOnly)[0], chunks)
    return fast


def same_on_child(chunks):
    fast = outcome(child_side(Connection)[0], chunks)
    assert fast == outcome(child_side(GeneralOnly)[0], chunks)
    return fast


def same_before_request(chunks):
    fast = outcome(child_before_request(Connection)[0], chunks)
    assert fast == outcome(child_before_request(GeneralOnly)[0], chunks)
    return fast


def test_valid_frames_take_the_fast_path_and_agree():
    Counting.general = 0
    host, _ = host_side(Counting)
    host.receive_data(b"".join(FROM_CHILD[:4]))
    assert len(drain(host)) == 4
    assert Counting.general == 0  # two calls and two streams, none through the general reader
    child, replies = child_side(Counting)
    Counting.general = 0  # the bindings and the request took the general reader
    child.receive_data(b"".join(replies))
    assert len(drain(child)) == 3 and Counting.general == 0
    events, error, *_ = same_on_host(FROM_CHILD)
    assert error is None and len(events) == len(FROM_CHILD)
    events, error, *_ = same_on_child(FROM_HOST)
    assert error is None and [e.call_id for e in events] == [1, 0, 2]


def test_a_runs_request_value_and_reply_take_the_fast_path_and_agree():
    Counting.general = 0
    host, _ = host_side(Counting)
    host.receive_data(b"".join(FROM_CHILD[6:]))  # the value and the reply
    assert [type(e) for e in drain(host)] == [ExecuteResult, ExecuteReply]
    assert Counting.general == 0
    for frames in LAST:  # the error outputs take the general reader
        Counting.general = 0
        host, _ = host_side(Counting)
        host.receive_data(frames)
        events = drain(host)
        assert type(events[-1]) is ExecuteReply and host.finished
        assert Counting.general == (type(events[0]) is not ExecuteResult)
        events, error, *_ = same_on_host([frames])
        assert error is None and len(events) == 2
    for request in REQUESTS:
        child, _ = child_before_request(Counting)
        Counting.general = 0
        child.receive_data(request)
        assert [type(e) for e in drain(child)] == [ExecuteRequest] and Counting.general == 0
        events, error, *_ = same_before_request([request])
        assert error is None and len(events) == 1


@FUZZ
@given(st.binary(max_size=600), cuts)
def test_arbitrary_bytes(data, cut_points):
    same_on_host(split_at(data, cut_points))
    same_on_child(split_at(data, cut_points))


@FUZZ
@given(
    st.lists(st.integers(0, len(FROM_CHILD) - 1), min_size=1, max_size=6),
    st.lists(mutation, min_size=1, max_size=4),
    cuts,
)
def test_mutated_frames_from_the_child(order, ops, cut_points):
    data = mutate(b"".join(FROM_CHILD[i] for i in order), ops)
    same_on_host(split_at(data, cut_points))


@FUZZ
@given(
    st.lists(st.integers(0, len(FROM_HOST) - 1), min_size=1, max_size=5),
    st.lists(mutation, min_size=1, max_size=4),
    cuts,
)
def test_mutated_frames_from_the_host(order, ops, cut_points):
    data = mutate(b"".join(FROM_HOST[i] for i in order), ops)
    same_on_child(split_at(data, cut_points))


def replaced(data, frames):
    """A valid frame with one to three of its fields replaced by JSON-ish values, or
    deleted."""
    raw = json.loads(data.draw(st.sampled_from(frames)))
    for _ in range(data.draw(st.integers(1, 3))):
        path = data.draw(st.sampled_from([p for p in paths(raw) if p]))
        parent = raw
        for key in path[:-1]:
            parent = parent[key]
        if data.draw(st.booleans()) and type(parent) is dict:
            del parent[path[-1]]
        else:
            parent[path[-1]] = data.draw(
                jsonish | st.sampled_from([-1, 0, 1, 2, 3, True, "0", "stdout", "call", "reply"])
            )
        if not raw or type(raw) is not dict:
            break
    return (json.dumps(raw) + "\n").encode("utf-8", "surrogatepass")


@settings(FUZZ, max_examples=300)
@given(st.data())
def test_valid_frames_with_fields_replaced(data):
    """Every kind of damage the general reader names, the fast reader must hand to it."""
    same_on_host([replaced(data, FROM_CHILD[:4])])
    same_on_child([replaced(data, FROM_HOST)])


@settings(FUZZ, max_examples=300)
@given(st.data())
def test_last_frames_and_request_with_fields_replaced(data):
    """The same for a run's value, its reply and its request."""
    last = [*FROM_CHILD[6:], *(f + b"\n" for fs in LAST for f in fs.split(b"\n")[:2])]
    same_on_host([replaced(data, last)])
    same_before_request([replaced(data, REQUESTS)])


@FUZZ
@given(st.sampled_from(LAST + REQUESTS), st.lists(mutation, min_size=1, max_size=4), cuts)
def test_mutated_last_frames_and_requests(frames, ops, cut_points):
    data = mutate(frames, ops)
    same_on_host(split_at(data, cut_points))
    same_before_request(split_at(data, cut_points))


@FUZZ
@given(st.lists(st.integers(0, 2), min_size=1, max_size=6))
def test_repeated_and_reordered_replies(order):
    """Replies to calls already answered, in any order: refused the same way."""
    same_on_child([FROM_HOST[i] for i in order])
