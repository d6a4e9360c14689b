"""Events are valid by construction: each constructor refuses a bad field with a
LocalProtocolError naming the field and the value, and a receiver refuses the same field
in a frame with a RemoteProtocolError in the same words."""

from __future__ import annotations

import json
import re

import pytest

from kernelgate.wire import (
    CallReply,
    CallRequest,
    DisplayData,
    ErrorOutput,
    ExecuteReply,
    ExecuteRequest,
    ExecuteResult,
    LocalProtocolError,
    OpenBindings,
    RemoteProtocolError,
    Stream,
)

from .pair import COMM_ID, STREAM, drain, forged, frame, started

BAD = [
    # (what, make, message)
    (
        "stream name",
        lambda: Stream("bogus", "x"),
        "stream name must be 'stdout' or 'stderr', got 'bogus'",
    ),
    (
        "stream name type",
        lambda: Stream(b"stdout", "x"),
        "stream name must be 'stdout' or 'stderr', got b'stdout'",
    ),
    ("stream text", lambda: Stream("stdout", 3), "stream text must be a string, got 3"),
    (
        "call id negative",
        lambda: CallRequest(-1, "t", "f", [], {}),
        "call id must be an integer from 0 up, got -1",
    ),
    (
        "call id bool",
        lambda: CallRequest(True, "t", "f", [], {}),
        "call id must be an integer from 0 up, got True",
    ),
    (
        "call id float",
        lambda: CallRequest(0.0, "t", "f", [], {}),
        "call id must be an integer from 0 up, got 0.0",
    ),
    (
        "call namespace",
        lambda: CallRequest(0, None, "f", [], {}),
        "call namespace must be a string, got None",
    ),
    ("call name", lambda: CallRequest(0, "t", 5, [], {}), "call name must be a string, got 5"),
    (
        "call args tuple",
        lambda: CallRequest(0, "t", "f", (1,), {}),
        r"call args must be a list, got \(1,\)",
    ),
    (
        "call kwargs",
        lambda: CallRequest(0, "t", "f", [], []),
        r"call kwargs must be an object \(dict\), got \[\]",
    ),
    (
        "reply id",
        lambda: CallReply(-3, True, 1),
        "call reply id must be an integer from 0 up, got -3",
    ),
    ("reply ok", lambda: CallReply(0, 1, 1), "call reply 0 ok must be True or False, got 1"),
    ("reply both", lambda: CallReply(0, True, 1, "E", "v"), "call reply 0 is ok and has an error"),
    (
        "reply ok, evalue None",
        lambda: CallReply(0, True, 1, "", None),
        r"is ok and has an error \('', None\)",
    ),
    (
        "failed with value",
        lambda: CallReply(0, False, 1, "E"),
        "call reply 0 failed and has a value",
    ),
    (
        "failed no ename",
        lambda: CallReply(0, False),
        "call reply 0 ename must be the error's type name, got ''",
    ),
    (
        "failed evalue",
        lambda: CallReply(0, False, None, "E", 3),
        "call reply 0 evalue must be a string, got 3",
    ),
    (
        "comm id",
        lambda: OpenBindings("", {}),
        "comm_open comm_id must be a non-empty string, got ''",
    ),
    (
        "namespaces",
        lambda: OpenBindings("c", []),
        r"comm_open namespaces must be an object \(dict\), got \[\]",
    ),
    (
        "namespace",
        lambda: OpenBindings("c", {"t": []}),
        r"comm_open namespaces\['t'\] must be an object",
    ),
    (
        "spec",
        lambda: OpenBindings("c", {"t": {"f": "x"}}),
        r"comm_open namespaces\['t'\]\['f'\] must be",
    ),
    (
        "namespace key",
        lambda: OpenBindings("c", {1: {}}),
        "comm_open namespace name must be a string, got 1",
    ),
    ("code", lambda: ExecuteRequest(b"1"), "execute_request code must be a string, got b'1'"),
    ("options", lambda: ExecuteRequest("1", []), r"execute_request options must be an object"),
    (
        "mime value",
        lambda: DisplayData({"text/plain": 1}),
        r"display_data data\['text/plain'\] must be a string \(only JSON MIME types",
    ),
    ("mime key", lambda: DisplayData({1: "x"}), "display_data data key must be a string"),
    ("display metadata", lambda: DisplayData({}, []), "display_data metadata must be an object"),
    (
        "result count",
        lambda: ExecuteResult({}, None, -1),
        "execute_result execution_count must be an integer from 0 up, got -1",
    ),
    ("result data", lambda: ExecuteResult([]), r"execute_result data must be an object"),
    (
        "error traceback",
        lambda: ErrorOutput("E", "v", "tb"),
        "error traceback must be a list of strings, got 'tb'",
    ),
    (
        "error traceback item",
        lambda: ErrorOutput("E", "v", ["ok", 2]),
        r"error traceback\[1\] must be a string, got 2",
    ),
    ("error ename", lambda: ErrorOutput(None, "v", []), "error ename must be a string, got None"),
    (
        "reply status",
        lambda: ExecuteReply("abort"),
        "execute_reply status must be 'ok' or 'error', got 'abort'",
    ),
    (
        "reply ok status",
        lambda: ExecuteReply("ok", "exception"),
        "execute_reply status 'ok' with kernelgate status 'exception'",
    ),
    (
        "host-only status",
        lambda: ExecuteReply("error", "timeout"),
        r"kernelgate status must be one of \['exception', 'invalid_output', 'output_limit', 'sandbox_unavailable'\], got 'timeout'",
    ),
    ("error with ok status", lambda: ExecuteReply("error", "ok"), "got 'ok'"),
    (
        "usage key",
        lambda: ExecuteReply("ok", usage={"wall_s": 1}),
        "execute_reply usage has the unknown key 'wall_s'",
    ),
    (
        "usage value",
        lambda: ExecuteReply("ok", usage={"cpu_user_s": -1}),
        r"execute_reply usage\['cpu_user_s'\] must be a number from 0 up, got -1",
    ),
    (
        "usage nan",
        lambda: ExecuteReply("ok", usage={"cpu_user_s": float("nan")}),
        "must be a number from 0 up, got nan",
    ),
    (
        "reply traceback",
        lambda: ExecuteReply("error", traceback=[1]),
        r"execute_reply traceback\[0\] must be a string",
    ),
]


@pytest.mark.parametrize(("make", "message"), [c[1:] for c in BAD], ids=[c[0] for c in BAD])
def test_an_invalid_event_cannot_be_made(make, message):
    with pytest.raises(LocalProtocolError, match=message):
        make()


@pytest.mark.parametrize(
    ("event", "defaults"),
    [
        (ExecuteReply("ok"), {"run_status": "ok", "traceback": [], "usage": {}}),
        (ExecuteReply("error"), {"run_status": "exception"}),
        (ExecuteRequest("x"), {"options": {}}),
        (DisplayData({}), {"metadata": {}}),
        (ExecuteResult({}), {"metadata": {}, "execution_count": 1}),
        (CallReply(0, False, ename="E"), {"value": None, "evalue": ""}),
        (OpenBindings("c", {"t": {"f": {"params": [], "schema": {"type": "object"}}}}), {}),
    ],
)
def test_defaults_and_extra_spec_keys(event, defaults):
    for name, value in defaults.items():
        assert getattr(event, name) == value


def test_events_are_frozen_values():
    a, b = Stream("stdout", "x"), Stream("stdout", "x")
    assert a == b and hash(a) == hash(b) and a != Stream("stderr", "x")
    assert Stream("stdout", "x") != ExecuteRequest("x")
    with pytest.raises(AttributeError, match="frozen"):
        a.name = "stderr"  # type: ignore[misc]
    with pytest.raises(AttributeError, match="frozen"):
        del a.text
    assert repr(a) == "Stream(name='stdout', text='x')"


def test_what_the_sender_cannot_make_the_receiver_refuses_in_the_same_words():
    """A field only the constructor checks (not the JSON type): the host reads a forged
    frame through the same constructor, and says what the child's side would have said."""
    cases = [
        (STREAM, ("content", "name"), "bogus", lambda: Stream("bogus", "x")),
        (
            ExecuteReply("ok"),
            ("metadata", "kernelgate", "status"),
            "timeout",
            lambda: ExecuteReply("ok", "timeout"),
        ),
        (
            ExecuteReply("ok"),
            ("metadata", "kernelgate", "usage"),
            {"cpu_user_s": -1},
            lambda: ExecuteReply("ok", usage={"cpu_user_s": -1}),
        ),
        (
            DisplayData({"text/plain": "x"}),
            ("content", "data", "text/html"),
            7,
            lambda: DisplayData({"text/plain": "x", "text/html": 7}),
        ),
    ]
    for event, path, value, make in cases:
        with pytest.raises(LocalProtocolError) as local:
            make()
        raw = json.loads(forged(event))
        d = raw
        for key in path[:-1]:
            d = d.setdefault(key, {})
        d[path[-1]] = value
        w = started()
        w.host.receive_data(frame(raw))
        with pytest.raises(RemoteProtocolError, match=re.escape(str(local.value))):
            w.host.next_event()


def test_what_the_receiver_takes_is_valid():
    w = started()
    w.host.receive_data(forged(STREAM))
    (got,) = drain(w.host)
    assert got == STREAM and got.name in ("stdout", "stderr")
    assert OpenBindings(COMM_ID, {}).wire_name == "comm_open"


def test_refusals_quote_values_bounded():
    for make in (
        lambda: DisplayData({"x" * 10_000: 1}),
        lambda: OpenBindings("c", {"n" * 10_000: []}),
        lambda: Stream("s" * 10_000, "x"),
        lambda: ErrorOutput("E", "v", ["ok", ["x" * 10_000]]),
    ):
        with pytest.raises(LocalProtocolError) as info:
            make()
        assert len(str(info.value)) < 400 and "..." in str(info.value)
