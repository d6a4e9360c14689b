"""Conformance: the Python cold child and the Node child, given the same message sequences,
give equivalent replies.

Each scenario is one program written twice (Python and JavaScript, doing the same thing)
or one hostile host sequence, sent to both children over a real fd 3 by a host
``Connection``. What must match: the message types the host receives, in order (streams by
name and text), the run's status, the error's kind (``ename``) and, where the text is the
child's own (limits, binding errors, the JSON boundary's verdict), its message; the
calls the host saw (arguments, how many were in flight at once); how the child exits.

Not compared: what is each language's own (a value's ``text/plain``, traceback frames,
Python's ``set`` vs JavaScript's ``Set`` in a message), and a debugged run, which the
Python child serves and the Node child refuses (tests/node/test_program.py).
"""

from __future__ import annotations

import json
import socket
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from .nodechild import KernelRun, Outcome, needs_node

pytestmark = [pytest.mark.timeout(120), needs_node]


@dataclass
class Scenario:
    name: str
    python: str
    javascript: str
    options: dict[str, Any] = field(default_factory=dict)
    #: Compare the error's message too (it is the child's own text).
    same_message: bool = False
    #: Hold calls until this many are in flight.
    hold_until: int = 0
    #: The bindings' specs (None: the driver's ``search`` and ``fail``).
    specs: dict[str, Any] | None = None


SCENARIOS = [
    Scenario(
        "value",
        "x = await tools.search('q', limit=2)\nlen(x)",
        "const x = await tools.search('q', {limit: 2})\nreturn x.length",
    ),
    Scenario("no value", "y = 1", "const y = 1"),
    Scenario(
        "exception", "raise TypeError('bad')", "throw new TypeError('bad')", same_message=True
    ),
    Scenario("tool error", "await tools.fail()", "await tools.fail()", same_message=True),
    Scenario(
        "tool error caught",
        "try:\n    await tools.fail('x')\nexcept ToolError as e:\n    r = [e.tool, e.ename, str(e)]\nr",
        "let r\ntry { await tools.fail('x') } catch (e) { r = [e.tool, e.ename, e.message] }\nreturn r",
    ),
    Scenario("invalid output", "return {1, 2}", "return new Set([1, 2])"),
    Scenario(
        "output limit",
        "return 'x' * 5000",
        "return 'x'.repeat(5000)",
        {"max_value_bytes": 1000},
        True,
    ),
    Scenario(
        "max calls",
        "for i in range(3):\n    await tools.search('a')",
        "for (let i = 0; i < 3; i++) await tools.search('a')",
        {"max_calls": 2},
        True,
    ),
    Scenario(
        "output order",
        "import sys\nprint('a')\nprint('b', file=sys.stderr)\nawait tools.search('z')\nprint('c')",
        "console.log('a')\nconsole.error('b')\nawait tools.search('z')\nconsole.log('c')",
    ),
    Scenario(
        "output cut", "print('x' * 100)", "console.log('x'.repeat(100))", {"max_output_bytes": 10}
    ),
    Scenario(
        "concurrent calls",
        "import asyncio\nrs = await asyncio.gather(tools.search('a'), tools.search('b'), tools.search('c'))\nlen(rs)",
        "const rs = await Promise.all([tools.search('a'), tools.search('b'), tools.search('c')])\nreturn rs.length",
        hold_until=3,
    ),
    Scenario(
        "display", "display({'a': 1})\nprint('after')", "display({a: 1})\nconsole.log('after')"
    ),
    Scenario("missing argument", "await tools.search()", "await tools.search()", same_message=True),
    Scenario(
        "too many arguments",
        "await tools.search(1, 2, 3)",
        "await tools.search(1, 2, 3)",
        same_message=True,
    ),
    Scenario(
        "argument not JSON", "await tools.search({1, 2})", "await tools.search(new Set([1, 2]))"
    ),
    Scenario(
        "arguments over the frame",
        "await tools.search('x' * 70000)",
        "await tools.search('x'.repeat(70000))",
        {"max_frame_bytes": 64 * 1024},
        True,
    ),
    Scenario(
        "a timer",
        "import asyncio\nawait asyncio.sleep(0.01)\n1",
        "await new Promise(r => setTimeout(r, 10))\nreturn 1",
    ),
]

FIND = {
    "find": {
        "params": [["query", "POSITIONAL_OR_KEYWORD", False], ["kwargs", "VAR_KEYWORD", False]],
        "signature": "(query: str, **kwargs)",
        "doc": "",
        "schema": {
            "type": "object",
            "properties": {
                "query": {"type": "string"},
                "max-results": {"type": "integer", "minimum": 1},
            },
            "required": ["query"],
            "additionalProperties": False,
        },
    }
}
SCENARIOS += [
    Scenario("negative zero", "return -0.0", "return -0"),
    Scenario("nan", "return float('nan')", "return NaN"),
    Scenario("a cycle", "a = []\na.append(a)\nreturn a", "const a = []\na.push(a)\nreturn a"),
    Scenario(
        "too deep",
        "v = 1\nfor _ in range(600):\n    v = [v]\nreturn v",
        "let v = 1\nfor (let i = 0; i < 600; i++) v = [v]\nreturn v",
    ),
    Scenario("a lone surrogate value", "return 'a\\ud800'", "return 'a\\ud800'"),
    Scenario("a lone surrogate printed", "print('a\\ud800')", "console.log('a\\ud800')"),
    Scenario("empty", "", ""),
    Scenario(
        "one of two calls fails",
        "import asyncio\nawait asyncio.gather(tools.search('a'), tools.fail('no'))",
        "await Promise.all([tools.search('a'), tools.fail('no')])",
        same_message=True,
    ),
    Scenario(
        "output budget shared",
        "import sys\nprint('o' * 8)\nprint('e' * 8, file=sys.stderr)",
        "console.log('o'.repeat(8))\nconsole.error('e'.repeat(8))",
        {"max_output_bytes": 12},
    ),
    Scenario(
        "a partial line before the value",
        "import sys\nsys.stdout.write('partial')\n1",
        "process.stdout.write('partial')\nreturn 1",
    ),
    Scenario(
        "a partial line before the error",
        "import sys\nsys.stderr.write('partial')\nraise ValueError('x')",
        "process.stderr.write('partial')\nthrow new RangeError('x')",
    ),
    Scenario(
        "schema keyword",
        "await tools.find('x', **{'max-results': 2})",
        "await tools.find('x', {'max-results': 2})",
        specs=FIND,
    ),
    Scenario(
        "schema refusal",
        "await tools.find('x', **{'max-results': 0})",
        "await tools.find('x', {'max-results': 0})",
        same_message=True,
        specs=FIND,
    ),
]

#: Error kinds that are the same thing under each language's name.
SAME_KIND = {"ValueError": "RangeError"}


def normal(out: Outcome) -> dict[str, Any]:
    """What must match between the two children."""
    events: list[tuple[Any, ...]] = []
    for e in out.events:
        kind = type(e).__name__
        if kind == "Stream":
            events.append((kind, e.name, e.text))
        elif kind == "CallRequest":
            events.append((kind, e.name, e.args, e.kwargs))
        elif kind == "ExecuteResult":
            events.append((kind, e.data.get("application/json")))
        else:
            events.append((kind,))
    reply = out.reply
    return {
        "events": events,
        "status": reply.run_status if reply else None,
        "ename": SAME_KIND.get(reply.ename, reply.ename) if reply else None,
        "in_flight": out.max_in_flight,
        "protocol_error": out.protocol_error is not None,
    }


def both(scenario: Scenario, drive: Callable[[KernelRun, str], Outcome]) -> tuple[Outcome, Outcome]:
    outcomes = []
    for python, code in ((sys.executable, scenario.python), (None, scenario.javascript)):
        specs = scenario.specs
        k = KernelRun(
            python=python,
            bindings=None if specs is None else {n: (lambda *a, **kw: None) for n in specs},
            specs=specs,
            max_frame_bytes=scenario.options.get("max_frame_bytes", 8 << 20),
        )
        try:
            outcomes.append(drive(k, code))
        finally:
            k.close()
    return outcomes[0], outcomes[1]


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name)
def test_the_same_program_gets_the_same_replies(scenario: Scenario) -> None:
    def drive(k: KernelRun, code: str) -> Outcome:
        k.start(code, **scenario.options)
        hold = (lambda held: len(held) < scenario.hold_until) if scenario.hold_until else None
        return k.pump(hold=hold)

    py, js = both(scenario, drive)
    assert normal(js) == normal(py), (py.events, js.events)
    assert py.reply is not None  # a run that ended, not two children that both hung
    if scenario.same_message:
        assert js.reply is not None and py.reply is not None
        assert js.reply.evalue == py.reply.evalue


def _forged(msg_type: str, content: dict[str, Any]) -> bytes:
    return (
        json.dumps(
            {
                "header": {"msg_type": msg_type},
                "parent_header": {},
                "metadata": {},
                "content": content,
            }
        ).encode()
        + b"\n"
    )


def _second_open(k: KernelRun) -> None:
    k.open_bindings()
    k.send_bytes(
        _forged(
            "comm_open",
            {"comm_id": "b", "target_name": "kernelgate.bindings", "data": {"namespaces": {}}},
        )
    )


def _unknown_type(k: KernelRun) -> None:
    k.open_bindings()
    k.send_bytes(_forged("shutdown_request", {}))


def _eof_first(k: KernelRun) -> None:
    k.open_bindings()
    k.sock.shutdown(socket.SHUT_WR)


HOSTILE: dict[str, Callable[[KernelRun], None]] = {
    "garbage first": lambda k: k.send_bytes(b"\xff\xfe garbage\n"),
    "request before the bindings": lambda k: k.send_bytes(
        _forged("execute_request", {"code": "1"})
    ),
    "unknown message type": _unknown_type,
    "a second comm_open": _second_open,
    "eof before the request": _eof_first,
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_the_same_hostile_host_gets_the_same_answer(name: str) -> None:
    def drive(k: KernelRun, _code: str) -> Outcome:
        HOSTILE[name](k)
        out = k.pump()
        k.wait_exit()
        return out

    py, js = both(Scenario(name, "", ""), drive)
    assert normal(js) == normal(py), (py.events, js.events, py.stderr_raw, js.stderr_raw)
    assert js.returncode == py.returncode
    if py.reply is not None:
        assert js.reply is not None and js.reply.evalue == py.reply.evalue


MID_RUN: dict[str, Callable[[KernelRun], None]] = {
    "reply to a call not waiting": lambda k: k.send_bytes(
        _forged(
            "comm_msg",
            {
                "comm_id": "bindings-node-test",
                "data": {"method": "reply", "id": 9, "ok": True, "value": 1},
            },
        )
    ),
    "reply on another comm": lambda k: k.send_bytes(
        _forged(
            "comm_msg",
            {"comm_id": "other", "data": {"method": "reply", "id": 0, "ok": True, "value": 1}},
        )
    ),
    "reply without ok": lambda k: k.send_bytes(
        _forged("comm_msg", {"comm_id": "bindings-node-test", "data": {"method": "reply", "id": 0}})
    ),
    "eof with a call in flight": lambda k: k.sock.shutdown(socket.SHUT_WR),
}


@pytest.mark.parametrize("name", sorted(MID_RUN))
def test_the_same_hostile_host_mid_run(name: str) -> None:
    def drive(k: KernelRun, code: str) -> Outcome:
        k.start(code)
        k.pump(lambda o: bool(o.of("CallRequest")), hold=lambda held: True)
        MID_RUN[name](k)
        out = k.pump()
        k.wait_exit()
        return out

    py, js = both(
        Scenario(
            name,
            "await tools.search('x')\nprint('never')",
            "await tools.search('x')\nconsole.log('never')",
        ),
        drive,
    )
    assert normal(js) == normal(py), (py.events, js.events, py.stderr_raw, js.stderr_raw)
    assert js.returncode == py.returncode


def test_a_program_writing_fd_3_is_refused_the_same_way() -> None:
    scenario = Scenario(
        "fd 3",
        "import os\nos.write(3, b'garbage\\n')\nawait tools.search('x')",
        "require('fs').writeSync(3, 'garbage\\n')\nawait tools.search('x')",
    )

    def drive(k: KernelRun, code: str) -> Outcome:
        return k.run(code)

    py, js = both(scenario, drive)
    assert py.protocol_error is not None and js.protocol_error is not None
    assert py.protocol_error.split(";")[0] == js.protocol_error.split(";")[0]
