"""Fuzzing the host side of fd 3: whatever a child writes, the host raises nothing but
RemoteProtocolError, and every event it does accept can be re-serialized as UTF-8 JSON.

Example counts are kept moderate so this file stays fast; ``benchmarks/fuzz_wire.py`` runs
the same idea for as long as you like.
"""

from __future__ import annotations

import copy
import itertools
import json

import pytest
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
    RemoteProtocolError,
    Stream,
    dumps,
)

COMM_ID = "bindings-fuzz"
SPECS = {"tools": {"add": {"params": [["a", "POSITIONAL_OR_KEYWORD", False]], "signature": "(a)"}}}
MAX_FRAME = 4096
CHILD_EVENTS = (CallRequest, Stream, DisplayData, ExecuteResult, ErrorOutput, ExecuteReply)

FUZZ = settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def primed():
    """A host that sent OpenBindings and ExecuteRequest, and a child that received them."""
    host = Connection(HOST, session="host", max_frame_bytes=MAX_FRAME)
    child = Connection(CHILD, session="child")
    for event in (OpenBindings(COMM_ID, SPECS), ExecuteRequest("pass", {"max_calls": 10})):
        child.receive_data(host.send(event))
    while child.next_event() is not None:
        pass
    return host, child


def valid_frames(*ending):
    """A whole valid run, one frame per message."""
    _, child = primed()
    return [
        child.send(e)
        for e in (
            Stream("stdout", "hello\n"),
            CallRequest(0, "tools", "add", [1, {"k": [None, 2.5]}], {"b": True}),
            Stream("stderr", "é😀\n"),
            CallRequest(1, "tools", "add", [], {}),
            DisplayData({"text/plain": "x", "application/json": {"a": 1}}, {"m": 1}),
            *ending,
        )
    ]


#: A run that returns a value, and one that fails: the two ways a run ends.
VALID = valid_frames(
    ExecuteResult({"application/json": [1, "two"], "text/plain": "[1, 'two']"}),
    Stream("stdout", "late\n"),
    ExecuteReply("ok"),
)
FAILING = valid_frames(
    ErrorOutput("ValueError", "bad", ["Traceback", "ValueError: bad"]),
    ExecuteReply("error", "exception", ename="ValueError", evalue="bad"),
)
RUNS = [VALID, FAILING]
ALL_FRAMES = VALID + FAILING[-2:]


def split_at(data, cuts):
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    return [data[a:b] for a, b in itertools.pairwise(points)]


def check_event(event):
    assert type(event) in CHILD_EVENTS
    # What the host accepted can always be written out again (no NaN, no lone surrogate).
    dumps({name: getattr(event, name) for name in event.__slots__}).encode("utf-8")


def feed(host, chunks, eof=True):
    """Feed chunks, take every event; a protocol error must be the only failure, and
    final: afterwards every call raises the same error."""
    events = []
    try:
        for chunk in chunks:
            host.receive_data(chunk)
            while (event := host.next_event()) is not None:
                check_event(event)
                events.append(event)
        if eof:
            host.receive_data(b"")
            while (event := host.next_event()) is not None:
                check_event(event)
                events.append(event)
    except RemoteProtocolError as exc:
        assert str(exc)
        for call in (host.next_event, lambda: host.receive_data(VALID[0])):
            with pytest.raises(RemoteProtocolError) as again:
                call()
            assert again.value is exc
        return events, exc
    return events, None


cuts = st.lists(st.integers(min_value=0), max_size=20)


# -- arbitrary bytes ----------------------------------------------------------------------------


@FUZZ
@given(st.binary(max_size=3 * MAX_FRAME), cuts)
def test_arbitrary_bytes(data, cut_points):
    host, _ = primed()
    feed(host, split_at(data, cut_points))


@FUZZ
@given(st.lists(st.binary(max_size=200), max_size=10), cuts)
def test_arbitrary_lines(lines, cut_points):
    host, _ = primed()
    feed(host, split_at(b"\n".join(lines) + b"\n", cut_points))


# -- JSON-ish structures --------------------------------------------------------------------------

WORDS = [
    "header",
    "parent_header",
    "metadata",
    "content",
    "msg_type",
    "msg_id",
    "kernelgate",
    "status",
    "name",
    "text",
    "data",
    "comm_id",
    "method",
    "id",
    "namespace",
    "args",
    "kwargs",
    "execution_count",
    "ename",
    "evalue",
    "traceback",
    "transient",
    "text/plain",
    "application/json",
]
MSG_TYPES = [
    "stream",
    "comm_msg",
    "display_data",
    "execute_result",
    "error",
    "execute_reply",
    "comm_open",
    "execute_request",
    "status",
]
STRINGS = [
    COMM_ID,
    "stdout",
    "stderr",
    "call",
    "reply",
    "ok",
    "error",
    "exception",
    "invalid_output",
    "output_limit",
    "timeout",
    "tools",
    "add",
    "\udc80",  # lone surrogates: written as \udc80 escapes, or as raw CESU-8 bytes
    "\ud83d",
    *MSG_TYPES,
]
scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-2, max_value=3)
    | st.integers()
    | st.floats()  # NaN and infinities included: json.dumps writes them as NaN/Infinity
    | st.sampled_from(STRINGS)
    | st.text(max_size=10)
)
jsonish = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.sampled_from(WORDS) | st.text(max_size=4), inner, max_size=6)
    ),
    max_leaves=6,
)


@st.composite
def messages(draw):
    """Messages shaped roughly right, with every field possibly wrong or missing."""
    content = draw(st.dictionaries(st.sampled_from(WORDS), jsonish, max_size=4))
    if draw(st.booleans()):
        data = draw(st.dictionaries(st.sampled_from(WORDS), jsonish, max_size=4))
        if draw(st.booleans()):
            data.update(method="call", id=draw(st.integers(-1, 3)), namespace="tools", name="add")
        content["data"] = data
    if draw(st.booleans()):
        content["comm_id"] = COMM_ID
    msg = {
        "header": {"msg_type": draw(st.sampled_from(MSG_TYPES) | st.text(max_size=5))},
        "parent_header": draw(st.sampled_from([{}, None, []])),
        "metadata": draw(
            st.sampled_from([{}, {"kernelgate": {"status": "ok"}}])
            | st.dictionaries(st.sampled_from(WORDS), jsonish, max_size=3)
        ),
        "content": content,
    }
    for key in draw(st.lists(st.sampled_from(list(msg)), max_size=2, unique=True)):
        if draw(st.booleans()):
            del msg[key]
        else:
            msg[key] = draw(jsonish)
    return msg


@settings(FUZZ, max_examples=60)
@given(st.lists(messages() | jsonish, min_size=1, max_size=3), cuts, st.booleans())
def test_jsonish_messages(items, cut_points, ensure_ascii):
    host, _ = primed()
    text = "\n".join(json.dumps(m, ensure_ascii=ensure_ascii) for m in items) + "\n"
    data = text.encode("utf-8", "surrogatepass")
    feed(host, split_at(data, cut_points))


# -- mutated valid frames -----------------------------------------------------------------------

mutation = st.one_of(
    st.tuples(st.just("flip"), st.integers(min_value=0), st.integers(0, 255)),
    st.tuples(st.just("insert"), st.integers(min_value=0), st.binary(min_size=1, max_size=8)),
    st.tuples(st.just("delete"), st.integers(min_value=0), st.integers(1, 40)),
    st.tuples(st.just("duplicate"), st.integers(min_value=0), st.integers(1, 400)),
    st.tuples(st.just("truncate"), st.integers(min_value=0), st.just(0)),
)


def mutate(data, ops):
    buf = bytearray(data)
    for op, pos, arg in ops:
        pos %= len(buf) + 1
        if op == "flip" and pos < len(buf):
            buf[pos] = arg
        elif op == "insert":
            buf[pos:pos] = arg
        elif op == "delete":
            del buf[pos : pos + arg]
        elif op == "duplicate":
            buf[pos:pos] = buf[pos : pos + arg]
        elif op == "truncate":
            del buf[pos:]
        if not buf:
            break
    return bytes(buf)


@FUZZ
@given(
    st.lists(st.integers(0, len(ALL_FRAMES) - 1), min_size=1, max_size=10),
    st.lists(mutation, min_size=1, max_size=6),
    cuts,
)
def test_mutated_valid_frames(order, ops, cut_points):
    host, _ = primed()
    data = mutate(b"".join(ALL_FRAMES[i] for i in order), ops)
    feed(host, split_at(data, cut_points))


def paths(value, prefix=()):
    yield prefix
    if type(value) is dict:
        for k, v in value.items():
            yield from paths(v, (*prefix, k))
    elif type(value) is list:
        for i, v in enumerate(value):
            yield from paths(v, (*prefix, i))


@settings(FUZZ, max_examples=60)
@given(st.sampled_from(RUNS), st.data(), st.integers(1, 3))
def test_valid_frames_with_one_field_replaced(run, data, n):
    host, _ = primed()
    index = data.draw(st.integers(0, len(run) - 1))
    raws = [json.loads(f) for f in run[: index + 1]]
    target = raws[-1]
    for _ in range(n):
        all_paths = [p for p in paths(target) if p]
        path = data.draw(st.sampled_from(all_paths))
        parent = target
        for key in path[:-1]:
            parent = parent[key]
        if data.draw(st.booleans()) and type(parent) is dict:
            del parent[path[-1]]
        else:
            parent[path[-1]] = data.draw(jsonish)
    chunks = [(json.dumps(r) + "\n").encode("utf-8", "surrogatepass") for r in raws]
    events, _ = feed(host, chunks)
    assert len(events) >= index  # every untouched frame before it was accepted


NASTY = [
    b"NaN",
    b"Infinity",
    b"-Infinity",
    b"1e400",
    b"-1e999",
    b"-0.0",
    b"1" * 5000,
    b'"\\udc80"',
    b'"\\ud83d"',
    b'"a\\ud83d\\u0041"',
    b'"\xed\xb2\x80"',  # a surrogate as (invalid) UTF-8 bytes
    b'"\xff"',
    b"null",
    b"true",
    b"0",
    b"1.5",
    b'""',
    b"[]",
    b"{}",
    b"[" * 5000 + b"]" * 5000,
]


def leaf_paths(value, prefix=()):
    if type(value) is dict:
        for k, v in value.items():
            yield from leaf_paths(v, (*prefix, k))
    elif type(value) is list:
        for i, v in enumerate(value):
            yield from leaf_paths(v, (*prefix, i))
    elif prefix:
        yield prefix


def test_every_field_replaced_by_every_nasty_token():
    """Exhaustive: each leaf of each valid frame, replaced by raw JSON tokens that json.loads
    alone would accept (NaN, 1e400, lone surrogate escapes, ...)."""
    tried = 0
    for run, index in [(r, i) for r in RUNS for i in range(len(r))]:
        raw = json.loads(run[index])
        for path in leaf_paths(raw):
            edited = copy.deepcopy(raw)
            parent = edited
            for key in path[:-1]:
                parent = parent[key]
            parent[path[-1]] = "__NASTY__"
            text = json.dumps(edited).encode()
            for token in NASTY:
                host, _ = primed()
                data = b"".join(run[:index]) + text.replace(b'"__NASTY__"', token) + b"\n"
                events, _ = feed(host, [data])
                assert len(events) >= index
                tried += 1
    assert tried > 1000


# -- sanity: the fuzz harness itself can tell good from bad -------------------------------------


def test_harness_accepts_a_valid_run():
    host, _ = primed()
    events, error = feed(host, [b"".join(VALID)])
    assert error is None
    assert len(events) == len(VALID)
    assert host.finished


def test_harness_reports_the_error():
    host, _ = primed()
    events, error = feed(host, [VALID[0], b"nonsense\n", VALID[1]])
    assert events == [Stream("stdout", "hello\n")]
    assert isinstance(error, RemoteProtocolError)


def test_harness_fails_on_other_exceptions():
    class Exploding(Connection):
        def next_event(self):
            raise KeyError("boom")

    host = Exploding(HOST, session="h")
    with pytest.raises(KeyError):
        feed(host, [b"{}\n"])


def test_host_may_still_reply_to_accepted_calls():
    host, child = primed()
    events, error = feed(
        host, [VALID[0], child.send(CallRequest(0, "tools", "add", [], {}))], False
    )
    assert error is None and type(events[1]) is CallRequest
    child.receive_data(host.send(CallReply(0, True, 1)))
    assert child.next_event() == CallReply(0, True, 1)
