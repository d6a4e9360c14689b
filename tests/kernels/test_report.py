"""kernels/python/report.py: the child's last word, in a real process of its own (reporting
ends the process) with the host's ``Connection`` reading the other end of its fd 3."""

from __future__ import annotations

import socket
import subprocess
import sys
from typing import Any

from kernelgate.wire.connection import HOST, Connection
from kernelgate.wire.events import (
    ErrorOutput,
    ExecuteReply,
    ExecuteRequest,
    ExecuteResult,
    OpenBindings,
)

#: The child's side: read the request, build a Reporter like runner.py does, then run the
#: request's code (which ends in a report, and so in os._exit).
CHILD = """
import builtins, resource, sys
from kernelgate.kernels.python.client import CallClient
from kernelgate.kernels.python.report import Reporter, fallback_frame
from kernelgate.kernels.python.streams import OutputLedger, OutputStream
from kernelgate.wire.events import Stream
client = CallClient(fallback_frame(), fd=int(sys.argv[1]))
request = client.read_until_request()
ledger = OutputLedger(1000)
send = lambda name, text: client.send(Stream(name, text))
out, err = OutputStream("stdout", send, ledger), OutputStream("stderr", send, ledger)
reporter = Reporter(client, out, err, request.options["max_value_bytes"])
saved = dict(builtins.__dict__)
exec(request.code)
raise SystemExit("the report did not end the process")
"""


def report(action: str, max_value_bytes: int = 1000) -> tuple[list[Any], int]:
    """Run ``action`` (code using ``reporter`` and ``saved``) in a child; what it sent on
    fd 3, and its exit code."""
    host, child = socket.socketpair()
    conn = Connection(HOST, session="test")
    with host, child:
        proc = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(child.fileno())], pass_fds=(child.fileno(),)
        )
        child.close()
        host.sendall(
            conn.send(OpenBindings("bindings", {}))
            + conn.send(ExecuteRequest(action, {"max_value_bytes": max_value_bytes}))
        )
        host.settimeout(30)
        events: list[Any] = []
        while True:
            data = host.recv(1 << 16)
            if not data:
                break
            conn.receive_data(data)
            while (event := conn.next_event()) is not None:
                events.append(event)
        code = proc.wait(30)
    return events, code


def reply_of(events: list[Any]) -> ExecuteReply:
    assert type(events[-1]) is ExecuteReply, events
    return events[-1]


def test_a_value_of_exactly_max_value_bytes_is_reported():
    value = "x" * 998  # 1000 bytes as JSON, with its quotes
    events, code = report(f"reporter.finish_value({value!r}, saved)")
    assert code == 0
    assert [type(e) for e in events] == [ExecuteResult, ExecuteReply]
    assert events[0].data["application/json"] == value
    assert reply_of(events).status == "ok"


def test_one_byte_over_max_value_bytes_is_output_limit():
    events, code = report(f"reporter.finish_value({'x' * 999!r}, saved)")
    assert code == 0
    reply = reply_of(events)
    assert (reply.status, reply.run_status, reply.ename) == ("error", "output_limit", "OutputLimit")
    assert "over max_value_bytes=1000 bytes as JSON" in reply.evalue
    assert "raise Limits.max_value_bytes" in reply.evalue
    assert type(events[0]) is ErrorOutput and events[0].evalue == reply.evalue


def test_a_returned_value_that_is_not_json_is_invalid_output_naming_where():
    events, _ = report("reporter.finish_value({'a': [1, {2}]}, saved)")
    reply = reply_of(events)
    assert reply.run_status == "invalid_output"
    assert "the program's value is not JSON: value['a'][1]: set is not JSON" in reply.evalue
    assert "convert other types first" in reply.evalue


def test_a_final_expression_that_is_not_json_shows_its_repr_and_is_ok():
    action = (
        "from kernelgate.kernels.python.program import LAST_EXPRESSION\n"
        "reporter.finish_value((LAST_EXPRESSION, {1, 2}), saved)"
    )
    events, _ = report(action)
    assert type(events[0]) is ExecuteResult
    assert events[0].data == {"text/plain": "{1, 2}"}
    assert reply_of(events).status == "ok"


def test_nested_deeper_than_the_wire_allows_is_invalid_output():
    action = "x = []\nfor _ in range(600):\n    x = [x]\nreporter.finish_value(x, saved)"
    events, _ = report(action, max_value_bytes=10**6)
    reply = reply_of(events)
    assert reply.run_status == "invalid_output" and "nested deeper than" in reply.evalue


def test_the_reply_carries_the_child_s_own_usage():
    events, _ = report("reporter.finish_value(None, saved)")
    reply = reply_of(events)
    assert reply.status == "ok" and len(events) == 1  # None: no execute_result
    assert set(reply.usage) == {"cpu_user_s", "cpu_system_s", "peak_memory_bytes"}
    assert reply.usage["peak_memory_bytes"] > 1_000_000


def test_a_memory_error_names_the_memory_limit():
    action = (
        "resource.setrlimit(resource.RLIMIT_AS, (2 << 30, resource.RLIM_INFINITY))\n"
        "reporter.finish_exception(MemoryError(), saved)"
    )
    events, _ = report(action)
    reply = reply_of(events)
    assert reply.ename == "MemoryError"
    assert reply.evalue == (
        f"out of memory (the run's memory_bytes={2 << 30} limit; use less memory, "
        "or raise Limits.memory_bytes)"
    )
    assert reply.traceback[-1] == f"MemoryError: {reply.evalue}"


def test_builtins_the_program_rebound_are_restored_before_reporting():
    action = (
        "def boom(*a, **k):\n"
        "    raise RuntimeError('rebound')\n"
        "for name in ('len', 'isinstance', 'type', 'repr', 'str', 'print'):\n"
        "    setattr(builtins, name, boom)\n"
        "builtins.planted = 1\n"
        "reporter.finish_value([1, 'two'], saved)"
    )
    events, code = report(action)
    assert code == 0 and reply_of(events).status == "ok"
    assert events[0].data["application/json"] == [1, "two"]


def test_a_message_of_the_child_s_own_is_capped():
    events, _ = report("reporter.fail('invalid_output', 'InvalidOutput', 'm' * 100_000)")
    reply = reply_of(events)
    assert len(reply.evalue) < 8 * 1024 + 100 and "characters cut" in reply.evalue


def test_buffered_output_is_sent_before_the_value_and_the_reply():
    action = "out.write('tail without newline')\nreporter.finish_value(7, saved)"
    events, _ = report(action)
    kinds = [type(e).__name__ for e in events]
    assert kinds == ["Stream", "ExecuteResult", "ExecuteReply"], kinds
    assert events[0].text == "tail without newline"


def test_the_last_messages_leave_in_one_write_in_the_order_they_were_made():
    """What the streams still hold (a line without its newline, a character cut short
    in ``buffer``, shown as its bytes), the value, then the reply: in that order, and in
    one write, so the host wakes once for them (over SOCK_SEQPACKET a read takes one
    write: one read takes them all)."""
    action = (
        "import os, time\n"
        "out.write('tail')\n"
        "out.buffer.write(b'\\xe2\\x98')\n"
        "err.write('oops')\n"
        "reporter.finish_value([1], saved)"
    )
    host, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    conn = Connection(HOST, session="test")
    with host, child:
        proc = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(child.fileno())], pass_fds=(child.fileno(),)
        )
        child.close()
        host.sendall(
            conn.send(OpenBindings("bindings", {}))
            + conn.send(ExecuteRequest(action, {"max_value_bytes": 1000}))
        )
        assert proc.wait(30) == 0
        host.settimeout(30)
        first = host.recv(1 << 20)  # one write of the child's (it has exited)
        conn.receive_data(first)
        events = []
        while (event := conn.next_event()) is not None:
            events.append(event)
    assert [type(e).__name__ for e in events] == [
        "Stream",
        "Stream",
        "ExecuteResult",
        "ExecuteReply",
    ], events
    assert (events[0].name, events[0].text) == ("stdout", "tail\\xe2\\x98")
    assert (events[1].name, events[1].text) == ("stderr", "oops")
    assert events[2].data["application/json"] == [1]
