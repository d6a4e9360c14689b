"""The kernel's debugger attacked (issue 24, item 5): hostile ``debug_request`` arguments from
a Jupyter client, and a debugged cell's program that answers the host's debug requests
itself with crafted bodies. What reaches a client is inert, bounded text in the fields
JupyterLab reads; the kernel never crashes, blocks or hangs, and goes on debugging.

The kernels run in this process (a real :class:`KernelServer` on loopback sockets, the
client a real jupyter_client in a thread): ``tests/kernel/test_debugger_runs.py``'s harness.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import time
from typing import Any

import pytest
from jupyter_client.blocking.client import BlockingKernelClient

from kernelgate import save_run
from kernelgate.jupyter.server import KernelServer
from tests.kernel.helpers import collect, send_execute
from tests.kernel.test_debugger import OWNER, debug, debug_reply, send_debug, start, wait_event
from tests.kernel.test_debugger_runs import dump_and_break, in_process_kernel, top_frame

from .conftest import at_levels
from .test_debug_attacks import FD3

pytestmark = pytest.mark.timeout(240)

BOTH_POOLS = pytest.mark.parametrize("pool_size", [2, 0], ids=["warm", "cold"])
#: Control characters a terminal or a page would act on (tab and newline are text).
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def _strings(value: Any) -> list[str]:
    """Every string in a JSON value, keys included."""
    out: list[str] = []
    todo = [value]
    while todo:
        v = todo.pop()
        if isinstance(v, str):
            out.append(v)
        elif isinstance(v, dict):
            out.extend(str(k) for k in v)
            todo.extend(v.values())
        elif isinstance(v, list):
            todo.extend(v)
    return out


def _inert(reply: dict[str, Any], limit: int = 10_000) -> None:
    """No control character, no long string (markup is text: JupyterLab shows these
    fields as text, and rich views are ``text/plain`` alone, checked apart)."""
    for text in _strings(reply):
        assert not CONTROL.search(text), text[:200]
        assert len(text) <= limit, len(text)


#: Requests a hostile client sends (command, arguments or a whole content).
HOSTILE: list[tuple[str, Any]] = [
    ("content", [1, 2, 3]),
    ("content", "debug"),
    ("content", {"type": "request", "seq": "1", "command": {"x": 1}}),
    ("content", {"type": "request", "seq": 2**80, "command": "\x1b]0;pwn\x07" * 20_000}),
    ("setBreakpoints", "not an object"),
    ("setBreakpoints", {"source": ["x"], "breakpoints": [{"line": 1}]}),
    ("setBreakpoints", {"source": {"path": "/x.py"}, "breakpoints": "all"}),
    ("setBreakpoints", {"source": {"path": "/x.py"}, "breakpoints": [{"line": -1}]}),
    ("setBreakpoints", {"source": {"path": "/x.py"}, "breakpoints": [{"line": 0}]}),
    ("setBreakpoints", {"source": {"path": "/x.py"}, "breakpoints": [{"line": 2**63}]}),
    ("setBreakpoints", {"source": {"path": "/x.py"}, "breakpoints": [{"line": 1.5}]}),
    ("setBreakpoints", {"source": {"path": "/x.py"}, "breakpoints": [{"line": True}]}),
    ("setBreakpoints", {"source": {"path": "/x.py"}, "breakpoints": [{"line": "3"}]}),
    ("setBreakpoints", {"source": {"path": "/x.py"}, "breakpoints": [{"line": 1}] * 5000}),
    (
        "setBreakpoints",
        {"source": {"path": "/x.py"}, "breakpoints": [{"line": 1, "condition": "x" * 5000}]},
    ),
    ("source", {"source": {"path": "/etc/passwd"}}),
    ("source", {"source": {"path": "PREFIX../../../../etc/passwd"}}),
    ("source", {"source": {"path": "PREFIX"}}),
    ("source", {"sourceReference": 1}),
    ("dumpCell", {"code": ["print(1)"]}),
    ("dumpCell", {}),
    ("stackTrace", {"threadId": 1}),
    ("variables", {"variablesReference": 2**70}),
    ("evaluate", {"expression": "__import__('os').system('touch /kg-pwned')"}),
    ("richInspectVariables", {"variableName": "../../etc/passwd"}),
    ("\x1b[31mnotACommand", {}),
    ("setExceptionBreakpoints", {"filters": ["raised", {"x": 1}]}),
    ("setExceptionBreakpoints", {"filters": [{"x": 1}]}),
    ("setExceptionBreakpoints", {"filters": [["raised"]]}),
]


def test_hostile_debug_requests_are_refused_clearly_and_the_session_goes_on(
    tmp_path: pathlib.Path,
) -> None:
    """Malformed, oversized and path-traversing requests each get a failed reply that says
    why (inert, bounded); nothing is read from or written to the paths named; a huge
    dumpCell is answered; then a cell is debugged as usual. Host-side checks only: the
    level does not matter (it runs at the strongest here)."""
    code = "x = 1\nx = 2\nx"

    def body(kc: BlockingKernelClient, server: KernelServer) -> None:
        start(kc)
        prefix = server.debugger.prefix
        for command, arguments in HOSTILE:
            if command == "content" and not isinstance(arguments, dict):
                # jupyter_client sends only dict contents; packed bytes go as they are.
                msg = kc.session.msg("debug_request", {})
                msg["content"] = json.dumps(arguments).encode()
                kc.control_channel.send(msg)
                reply = debug_reply(kc, msg["header"]["msg_id"])
            elif command == "content":
                reply = debug_reply(kc, send_debug(kc, "", content=arguments))
            else:
                if isinstance(arguments, dict):
                    arguments = json.loads(json.dumps(arguments).replace("PREFIX", prefix))
                reply = debug_reply(kc, send_debug(kc, command, None, content={
                    "type": "request", "seq": 7, "command": command, "arguments": arguments,
                }))  # fmt: skip
            assert reply["success"] is False, (command, arguments, reply)
            assert isinstance(reply.get("message"), str) and reply["message"], reply
            assert len(reply["message"]) <= 2000 and len(reply["command"]) <= 100
            _inert(reply)
            assert "root:" not in json.dumps(reply)
        huge = "x = 1\n" * 400_000  # 2.4 MB: hashed apart, not kept
        dumped = debug(kc, "dumpCell", {"code": huge})
        assert dumped["success"] and dumped["body"]["sourcePath"].startswith(prefix)
        source = {"source": {"path": dumped["body"]["sourcePath"]}}
        assert debug(kc, "source", source)["success"] is False
        assert not os.path.exists(prefix)  # nothing is ever written there
        assert not os.path.exists("/kg-pwned")
        # The session is whole: a cell stops, answers, continues.
        path = dump_and_break(kc, code, 2)
        msg_id = kc.execute(code)
        wait_event(kc, "stopped")
        assert top_frame(kc)["source"]["path"] == path
        assert debug(kc, "continue", {"threadId": 1})["success"]
        cell = collect(kc, msg_id)
        assert cell.status == "ok", cell.events

    in_process_kernel(tmp_path, body)


#: What a hostile program answers to each request the kernel forwards (it stopped on its
#: own word, then took the requests off fd 3 before the debugger's reader thread).
CRAFTED = """\
ANSI = '\\x1b]0;pwned\\x07\\x1b[2J' * 200 + '<script>alert(1)</script>'
DEEP = []
for _ in range(200):
    DEEP = [DEEP]
VAR = {'name': ANSI, 'value': DEEP, 'type': {'t': ANSI}, 'variablesReference': -5,
       'evaluateName': ANSI * 10, 'presentationHint': {'kind': '<script>'}, 'extra': ANSI}
VAR2 = {'name': 7, 'value': ANSI * 50, 'type': ANSI, 'variablesReference': 2**80}
CRAFTED = {
    'stackTrace': {'stackFrames': [
        {'id': 1, 'name': ANSI, 'line': 1, 'column': -3,
         'source': {'path': '<program>', 'name': ANSI, 'sourceReference': 9}},
        {'id': 2**70, 'name': 'outside', 'line': 10**12, 'source': {'path': '<program>'}},
        {'id': 3, 'name': 'host file', 'line': 1, 'source': {'path': '/etc/passwd'}},
        {'id': '4', 'name': ['x'], 'line': '1', 'source': '<program>'},
    ] * 100, 'totalFrames': 10**9},
    'scopes': {'scopes': [{'name': ANSI, 'variablesReference': 1.5, 'expensive': 'yes'},
                          'not a scope'] * 300},
    'variables': {'variables': [VAR, VAR2, 'x', None] * 20},
    'evaluate': {'result': ['not', 'text'], 'type': ANSI, 'variablesReference': 1e300},
    'richInspectVariables': {'data': {'text/html': '<script>alert(1)</script>',
                                      'application/javascript': 'alert(1)',
                                      'text/plain': ANSI * 100},
                             'metadata': {'x': ANSI}},
    'inspectVariables': {'variables': [VAR] * 100},
}
steal()
stopped()
while True:
    req = next_request()
    if req['command'] == 'continue':
        reply(req['seq'], 'continue', {'allThreadsContinued': True})
        break
    reply(req['seq'], req['command'], CRAFTED.get(req['command'], {'x': ANSI}))
'done'
"""


@at_levels("process", "namespaces", "namespaces+landlock")
@BOTH_POOLS
def test_crafted_answers_reach_the_client_as_inert_bounded_text(
    tmp_path: pathlib.Path, level: str, pool_size: int
) -> None:
    program = FD3 + CRAFTED

    def body(kc: BlockingKernelClient, server: KernelServer) -> None:
        start(kc)
        path = str(debug(kc, "dumpCell", {"code": program})["body"]["sourcePath"])
        msg_id = kc.execute(program)
        wait_event(kc, "stopped")
        trace = debug(kc, "stackTrace", {"threadId": 1})
        assert trace["success"], trace
        frames = trace["body"]["stackFrames"]
        assert frames[0]["name"].startswith("\\x1b]0;pwned\\x07")  # the program's answer
        assert 0 < len(frames) <= 200 and trace["body"]["totalFrames"] == len(frames)
        for frame in frames:  # only the program's own lines, at the cell's path
            assert frame["source"] == {"path": path, "name": os.path.basename(path)}
            assert 1 <= frame["line"] <= program.count("\n") + 1
            assert isinstance(frame["id"], int) and 0 <= frame["id"] < 2**53
            assert frame["column"] >= 1 and len(frame["name"]) <= 200
        replies = [trace]
        for command, arguments in [
            ("scopes", {"frameId": 1}),
            ("variables", {"variablesReference": 1}),
            ("inspectVariables", {}),
            ("evaluate", {"expression": "1", "frameId": 1, "context": "repl"}),
            ("richInspectVariables", {"variableName": "x", "frameId": 1}),
        ]:
            reply = debug(kc, command, arguments)
            assert reply["success"], reply
            replies.append(reply)
        scopes, variables, inspected, evaluated, rich = (r["body"] for r in replies[1:])
        assert len(scopes["scopes"]) <= 300
        for scope in scopes["scopes"]:
            assert set(scope) == {"name", "variablesReference", "expensive"}
            assert isinstance(scope["variablesReference"], int)
            assert scope["expensive"] in (True, False)
        for listed in (variables, inspected):
            assert len(listed["variables"]) <= 300
            for var in listed["variables"]:
                assert set(var) <= {"name", "value", "type", "variablesReference", "evaluateName"}
                assert all(isinstance(var[k], str) for k in ("name", "value", "type"))
                assert len(var["value"]) <= 1000 and len(var["name"]) <= 200
                assert isinstance(var["variablesReference"], int)
                assert 0 <= var["variablesReference"] < 2**53
        assert isinstance(evaluated["result"], str) and isinstance(
            evaluated["variablesReference"], int
        )
        assert set(rich["data"]) <= {"text/plain"} and rich["metadata"] == {}
        for reply in replies:
            _inert(reply)
        assert debug(kc, "continue", {"threadId": 1})["success"]
        cell = collect(kc, msg_id)
        assert cell.status == "ok", cell.events
        events = [m["content"] for m in cell.outputs("debug_event")]
        for event in events:
            _inert(event)

    in_process_kernel(tmp_path, body, level=level, pool_size=pool_size)


@at_levels("process", "namespaces", "namespaces+landlock")
@BOTH_POOLS
def test_a_private_run_that_forges_debug_messages_reaches_no_client(
    tmp_path: pathlib.Path, level: str, pool_size: int
) -> None:
    """A private client's run is never debugged, even while the notebook's session is
    started: the debug messages it writes on fd 3 end it as a protocol violation, and no
    ``debug_event`` reaches iopub."""

    def body(kc: BlockingKernelClient, server: KernelServer) -> None:
        start(kc)
        forged = FD3 + "stopped()\ntime.sleep(30)"
        cell = collect(kc, send_execute(kc, forged, owner=OWNER), timeout=60)
        assert cell.run_status == "protocol", cell.events
        assert not cell.outputs("debug_event")
        assert debug(kc, "debugInfo")["body"]["stoppedThreads"] == []

    in_process_kernel(tmp_path, body, level=level, pool_size=pool_size)


#: A value whose repr swallows the debugger's deadline: the stopped child stays busy in it.
WEDGED = (
    "class T:\n    def __repr__(self):\n        while True:\n            try:\n"
    "                time.sleep(1000)\n            except BaseException:\n"
    "                pass\nimport time\ntrap = T()\nx = 1\nx"
)


def _owned_leftovers() -> list[str]:
    """Run directories and cgroups this process (the in-process kernel's host) still has."""
    import tempfile

    from kernelgate.gateway.cgroups import CgroupRoots
    from kernelgate.gateway.process import owner_prefix

    prefix = owner_prefix()
    dirs = [tempfile.gettempdir()]
    roots = CgroupRoots.find()
    if roots is not None:
        dirs += list(roots.dirs())
    found = []
    for d in dirs:
        try:
            found += [os.path.join(d, n) for n in os.listdir(d) if n.startswith(prefix)]
        except OSError:
            continue
    return found


@at_levels("process", "namespaces", "namespaces+landlock")
@BOTH_POOLS
def test_interrupt_and_shutdown_end_a_wedged_stopped_cell(
    tmp_path: pathlib.Path, level: str, pool_size: int
) -> None:
    """A stopped cell whose child is stuck in the program's own code (a request it cannot
    finish): interrupt ends it at once; kernel shutdown ends the next one; nothing is left
    (processes, run directories, cgroups)."""
    from tests.procs import live_children

    def wedge(kc: BlockingKernelClient) -> str:
        dump_and_break(kc, WEDGED, 10)
        msg_id = kc.execute(WEDGED)
        wait_event(kc, "stopped")
        frame = top_frame(kc)
        scopes = debug(kc, "scopes", {"frameId": frame["id"]})["body"]["scopes"]
        send_debug(kc, "variables", {"variablesReference": scopes[1]["variablesReference"]})
        return msg_id

    def body(kc: BlockingKernelClient, server: KernelServer) -> None:
        start(kc)
        msg_id = wedge(kc)
        # A flood meanwhile: at most 64 wait for the wedged child, the rest are refused.
        flood = [send_debug(kc, "stackTrace", {"threadId": 1}) for _ in range(100)]
        refused = [debug_reply(kc, m) for m in flood[64:]]
        assert all("waiting for the program already" in r["message"] for r in refused)
        asked = time.monotonic()
        kc.control_channel.send(kc.session.msg("interrupt_request", {}))
        cell = collect(kc, msg_id)
        assert cell.run_status == "interrupted", cell.events
        assert time.monotonic() - asked < 10
        wedge(kc)  # then the kernel is shut down with this one stopped and wedged

    before = set(_owned_leftovers())  # another test's leftovers are its own failure
    in_process_kernel(tmp_path, body, level=level, pool_size=pool_size)
    assert live_children(os.getpid()) == []
    assert sorted(set(_owned_leftovers()) - before) == []


#: What a crafted recording answered: terminal escapes, markup, a long text.
RECORDED_ANSWER = "\x1b]0;pwned\x07\x1b[2J<img src=x onerror=alert(1)>" * 2000


def _crafted(query: str) -> dict[str, Any]:
    return {"title": RECORDED_ANSWER, RECORDED_ANSWER[:300]: [RECORDED_ANSWER] * 3}


@at_levels("process", "namespaces", "namespaces+landlock")
@BOTH_POOLS
def test_a_crafted_recording_s_answers_reach_the_debugger_as_inert_text(
    tmp_path: pathlib.Path, level: str, pool_size: int
) -> None:
    """A ``#| replay`` cell against a recording whose answers are hostile text: stepped
    and inspected in the debugger, every name and value is escaped and bounded."""
    import asyncio

    from kernelgate import Gateway

    program = "hit = await tools.search('q')\nn = len(hit)\nn"

    async def record() -> Any:
        async with Gateway(bindings={"search": _crafted}) as gw:
            return await gw.run(program)

    recorded = asyncio.run(record())
    assert recorded.ok, recorded.message
    path = save_run(recorded, tmp_path / "crafted.ipynb")
    code = f"#| replay {path}\n{program}"

    def body(kc: BlockingKernelClient, server: KernelServer) -> None:
        start(kc)
        dump_and_break(kc, code, 3)
        msg_id = kc.execute(code)
        wait_event(kc, "stopped")
        frame = top_frame(kc)
        scopes = debug(kc, "scopes", {"frameId": frame["id"]})["body"]["scopes"]
        ref = scopes[1]["variablesReference"]
        shown = debug(kc, "variables", {"variablesReference": ref})
        [hit] = [v for v in shown["body"]["variables"] if v["name"] == "hit"]
        inner = debug(kc, "variables", {"variablesReference": hit["variablesReference"]})
        evaluated = debug(kc, "evaluate", {"expression": "hit['title']", "frameId": frame["id"]})
        for reply in (shown, inner, evaluated):
            assert reply["success"], reply
            _inert(reply, limit=1000)
        assert "\\x1b]0;pwned" in evaluated["body"]["result"]  # the answer, escaped
        assert debug(kc, "continue", {"threadId": 1})["success"]
        cell = collect(kc, msg_id)
        assert cell.status == "ok", cell.events

    in_process_kernel(tmp_path, body, level=level, pool_size=pool_size)
