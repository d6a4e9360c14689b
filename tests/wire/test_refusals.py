"""What each side refuses from the other, field by field and frame by frame: each refusal is
a RemoteProtocolError saying what was wrong, and the connection is dead after it."""

from __future__ import annotations

import json
import re

import pytest

from kernelgate.wire import (
    CHILD,
    CHILD_RUN_STATUSES,
    HOST,
    CallReply,
    CallRequest,
    Connection,
    ExecuteRequest,
    LocalProtocolError,
    OpenBindings,
    ProtocolError,
    RemoteProtocolError,
    Stream,
)

from .pair import (
    CALL0,
    COMM_ID,
    DISPLAY,
    ERROR,
    HOST_ONLY_STATUSES,
    REPLY_ERR,
    REPLY_OK,
    RESULT,
    STREAM,
    Wire,
    assert_dead,
    delp,
    drain,
    edited,
    forged,
    frame,
    host_edited,
    raw_bytes,
    setp,
    started,
)


# -- what the host refuses from the child -------------------------------------------------------
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
        r"call id must be an integer from 0 up, got -1",
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
    # order (tests/wire/test_state.py has every pair of state and event)
    (
        "stream after execute_reply",
        lambda w: [w.child.send(REPLY_OK), forged(STREAM)],
        r"the child sent stream in state DONE \(after its execute_reply\), where it may send "
        r"nothing",
    ),
    (
        "second execute_reply",
        lambda w: [w.child.send(REPLY_OK), forged(REPLY_ERR)],
        r"the child sent execute_reply in state DONE",
    ),
    (
        "call after execute_reply",
        lambda w: [w.child.send(REPLY_OK), forged(CALL0)],
        r"the child sent comm_msg call in state DONE",
    ),
    (
        "second execute_result",
        lambda w: [w.child.send(RESULT), forged(RESULT)],
        r"the child sent execute_result in state RESULT \(the run's outcome was sent\), where "
        r"it may send only stream, display_data, update_display_data, clear_output, comm_msg call, "
        r"debug_reply, debug_event or execute_reply",
    ),
    (
        "error after execute_result",
        lambda w: [w.child.send(RESULT), forged(ERROR)],
        r"the child sent error in state RESULT",
    ),
    # out of order is said before what is wrong inside
    (
        "malformed stream after execute_reply",
        edited(STREAM, setp(("content", "name"), "stdin"), before=[REPLY_OK]),
        r"the child sent stream in state DONE",
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


def test_call_before_the_request():
    child = Connection(CHILD, session="c")
    with pytest.raises(
        LocalProtocolError,
        match=r"cannot send CallRequest: the child is in state IDLE \(waiting for the "
        r"execute_request\), where it may send only execute_reply",
    ):
        child.send(CALL0)
    assert child.next_call_id == 0 and child.our_state == "ERROR"
    host = Connection(HOST, session="h")
    host.receive_data(forged(CALL0))
    with pytest.raises(RemoteProtocolError, match="the child sent comm_msg call in state IDLE"):
        host.next_event()


# -- what the child refuses from the host -------------------------------------------------------


BINDINGS = OpenBindings(COMM_ID, {})

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
        host_edited(ExecuteRequest("1"), setp(("content", "code"), 1), before=[BINDINGS]),
        r"execute_request content\['code'\] must be a string",
    ),
    (
        "options not object",
        host_edited(
            ExecuteRequest("1"), setp(("metadata", "kernelgate"), ["cwd"]), before=[BINDINGS]
        ),
        r"execute_request metadata\['kernelgate'\] must be an object",
    ),
    (
        "reply to a call that is not waiting",
        lambda w: (w.start(), forged(CallReply(0, True, 1)))[1],
        r"reply to call 0, which is not waiting",
    ),
    (
        "reply method call",
        lambda w: (
            w.start().child_send(CALL0),
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
            w.start().child_send(CALL0),
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
            w.start().child_send(CALL0),
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
    # order
    (
        "execute_request before comm_open",
        lambda w: forged(ExecuteRequest("1")),
        r"the host sent execute_request in state IDLE \(nothing sent yet\), where it may send "
        r"only comm_open",
    ),
    (
        "second comm_open",
        lambda w: (w.host_send(BINDINGS), forged(BINDINGS))[1],
        r"the host sent comm_open in state BINDINGS_OPEN",
    ),
    (
        "second execute_request",
        lambda w: (w.start(), forged(ExecuteRequest("2")))[1],
        r"the host sent execute_request in state EXECUTING \(the program runs; the host "
        r"answers its calls\), where it may send only comm_msg reply",
    ),
    (
        "reply before the request",
        lambda w: (w.host_send(BINDINGS), forged(CallReply(0, True, 1)))[1],
        r"the host sent comm_msg reply in state BINDINGS_OPEN",
    ),
    # a reply ok without a value, or failed without an error's name
    (
        "failed reply with empty ename",
        lambda w: (
            w.start().child_send(CALL0),
            forged(CallReply(0, False, ename="E")).replace(b'"ename":"E"', b'"ename":""'),
        )[1],
        r"call reply 0 ename must be the error's type name, got ''",
    ),
]


@pytest.mark.parametrize(
    ("build", "pattern"), [c[1:] for c in CHILD_REFUSES], ids=[c[0] for c in CHILD_REFUSES]
)
def test_child_refuses(build, pattern):
    w = Wire()
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
