"""JupyterLab's debugger on a kernelgate kernel: the kernel's side (kernelgate issue 24).

Driven through a real kernel with jupyter_client, as JupyterLab drives it: ``debug_request``
on control, ``debug_reply`` back, ``debug_event`` on iopub. The cell paths must be the ones
ipykernel gives the same code (JupyterLab hashes each cell's source itself to find the cell
a frame or breakpoint is in), checked against ipykernel's own ``murmur2_x86``.
"""

from __future__ import annotations

import doctest
import json
import os
import time
from collections.abc import Iterator
from typing import Any

import pytest
from ipykernel.compiler import murmur2_x86 as ipykernel_murmur2
from jupyter_client.blocking.client import BlockingKernelClient
from jupyter_client.kernelspec import KernelSpecManager

from kernelgate.jupyter import cells as cells_module
from kernelgate.jupyter import dap
from kernelgate.jupyter.cells import Program, Setup
from kernelgate.jupyter.dap import ProgramMap, cell_path, inert_body, inert_event

from .helpers import KERNEL_NAME, TIMEOUT, _keep, execute, owned

pytestmark = pytest.mark.timeout(120)

#: What JupyterLab sends first (``Debugger.Session.start``).
INITIALIZE = {
    "clientID": "jupyterlab",
    "clientName": "JupyterLab",
    "adapterID": KERNEL_NAME,
    "pathFormat": "path",
    "linesStartAt1": True,
    "columnsStartAt1": True,
    "supportsVariableType": True,
    "supportsVariablePaging": True,
    "supportsRunInTerminalRequest": True,
    "locale": "en",
}
SEED = 0xC70F6907
OWNER = "o" * 40

# -- talking to the debugger -------------------------------------------------------------------

_seq = 0


def send_debug(
    kc: BlockingKernelClient,
    command: str,
    arguments: dict[str, Any] | None = None,
    *,
    owner: str | None = None,
    content: Any = None,
) -> str:
    """Send a debug_request (``content`` replaces the whole DAP request); its msg_id."""
    global _seq
    _seq += 1
    if content is None:
        content = {"type": "request", "seq": _seq, "command": command, "arguments": arguments or {}}
    msg = kc.session.msg("debug_request", content, metadata=owned(owner))
    kc.control_channel.send(msg)
    return str(msg["header"]["msg_id"])


def debug_reply(kc: BlockingKernelClient, msg_id: str, timeout: float = TIMEOUT) -> dict[str, Any]:
    """The content of the debug_reply to ``msg_id`` (other control replies are dropped)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            msg = kc.get_control_msg(timeout=0.1)
        except Exception:
            continue
        if msg["parent_header"].get("msg_id") == msg_id:
            assert msg["msg_type"] == "debug_reply", msg
            return dict(msg["content"])
    raise TimeoutError(f"no debug_reply to {msg_id} in {timeout} s")


def debug(
    kc: BlockingKernelClient,
    command: str,
    arguments: dict[str, Any] | None = None,
    *,
    owner: str | None = None,
    timeout: float = TIMEOUT,
) -> dict[str, Any]:
    """Send a debug request and return its reply's content."""
    return debug_reply(kc, send_debug(kc, command, arguments, owner=owner), timeout)


def wait_event(kc: BlockingKernelClient, event: str, timeout: float = TIMEOUT) -> dict[str, Any]:
    """The next ``debug_event`` named ``event`` on iopub (other iopub messages are kept for
    their cell's ``collect``)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            msg = kc.get_iopub_msg(timeout=0.1)
        except Exception:
            continue
        if msg["msg_type"] == "debug_event":
            if msg["content"].get("event") == event:
                return dict(msg["content"])
            continue
        _keep(kc, "iopub", msg)
    raise TimeoutError(f"no {event} debug_event in {timeout} s")


def start(kc: BlockingKernelClient) -> dict[str, Any]:
    """initialize then attach, as JupyterLab does; the initialize reply."""
    init = debug(kc, "initialize", INITIALIZE)
    assert init["success"], init
    attach = debug(kc, "attach", {})
    assert attach["success"], attach
    return init


def stop(kc: BlockingKernelClient) -> None:
    reply = debug(kc, "disconnect", {"restart": False, "terminateDebuggee": False})
    assert reply["success"], reply


@pytest.fixture
def session(kc: BlockingKernelClient) -> Iterator[BlockingKernelClient]:
    """The shared kernel with its debugger started (stopped again after the test)."""
    start(kc)
    try:
        yield kc
    finally:
        stop(kc)


# -- what JupyterLab looks at before it shows the debugger -------------------------------------


def test_kernel_info_and_kernelspec_offer_the_debugger(kc: BlockingKernelClient) -> None:
    info = kc.kernel_info(reply=True, timeout=TIMEOUT)["content"]
    assert info["debugger"] is True
    assert info["supported_features"] == ["debugger"]
    spec = KernelSpecManager().get_kernel_spec(KERNEL_NAME)
    # JupyterLab shows the bug icon only for this.
    assert spec.metadata["debugger"] is True


# -- the session: answered by the kernel -------------------------------------------------------


def test_the_session_as_jupyterlab_starts_it(kc: BlockingKernelClient) -> None:
    info = debug(kc, "debugInfo")
    assert info["success"] and info["body"]["isStarted"] is False
    init = debug(kc, "initialize", INITIALIZE)
    assert init["success"] and init["command"] == "initialize"
    assert init["body"]["supportsConfigurationDoneRequest"] is True
    attach = debug(kc, "attach", {})
    assert attach["success"]
    assert wait_event(kc, "initialized")["type"] == "event"
    try:
        body = debug(kc, "debugInfo")["body"]
        assert body["isStarted"] is True
        assert body["hashMethod"] == "Murmur2" and body["hashSeed"] == SEED
        prefix = body["tmpFilePrefix"]
        # JupyterLab names frames "Cell [N]" for paths with "ipykernel_" in them.
        assert "ipykernel_" in prefix and prefix.endswith(os.sep)
        assert body["tmpFileSuffix"] == ".py"
        assert body["stoppedThreads"] == [] and body["breakpoints"] == []
        # Nothing is written under the prefix (cells are kept in the kernel's memory).
        assert not os.path.exists(prefix)
        assert debug(kc, "configurationDone")["success"]
        modules = debug(kc, "modules", {})
        assert modules["success"] and modules["body"]["modules"] == []
        assert debug(kc, "inspectVariables")["body"] == {"variables": []}
        assert debug(kc, "threads")["body"] == {"threads": []}
    finally:
        stop(kc)
    assert debug(kc, "debugInfo")["body"]["isStarted"] is False


@pytest.mark.parametrize(
    "code",
    ["x = 1", "", "def f(a, b):\n    c = a + b\n    return c\n\nf(2, 3)", "s = 'héllo ✓ 𝄞'\n"],
)
def test_dump_cell_gives_ipykernel_s_path_for_the_same_code(
    session: BlockingKernelClient, code: str
) -> None:
    prefix = debug(session, "debugInfo")["body"]["tmpFilePrefix"]
    reply = debug(session, "dumpCell", {"code": code})
    assert reply["success"], reply
    expected = f"{prefix}{ipykernel_murmur2(code, SEED)}.py"  # type: ignore[no-untyped-call]
    assert reply["body"]["sourcePath"] == expected
    source = debug(session, "source", {"source": {"path": expected}, "sourceReference": 0})
    assert source["success"] and source["body"]["content"] == code
    assert not os.path.exists(expected)


def test_breakpoints_are_kept_per_cell_and_reported(session: BlockingKernelClient) -> None:
    code = "a = 1\nb = 2\nc = a + b"
    path = debug(session, "dumpCell", {"code": code})["body"]["sourcePath"]
    reply = debug(
        session,
        "setBreakpoints",
        {
            "source": {"path": path},
            "breakpoints": [{"line": 2}, {"line": 9}],
            "sourceModified": False,
        },
    )
    assert reply["success"], reply
    shown = reply["body"]["breakpoints"]
    assert [(b["line"], b["verified"]) for b in shown] == [(2, True), (9, False)]
    # Each with its source, as debugpy answers: JupyterLab's Breakpoints panel draws
    # nothing without it (tests/kernel/test_debugger_browser.py).
    assert all(b["source"] == {"path": path} for b in shown), shown
    assert "3 lines" in shown[1]["message"]
    info = debug(session, "debugInfo")["body"]
    assert info["breakpoints"] == [{"source": path, "breakpoints": [{"line": 2}, {"line": 9}]}]
    cleared = debug(session, "setBreakpoints", {"source": {"path": path}, "breakpoints": []})
    assert cleared["success"] and cleared["body"]["breakpoints"] == []
    assert debug(session, "debugInfo")["body"]["breakpoints"] == []
    # A cell still runs as it always did while the debugger is started.
    cell = execute(session, "print('still runs')")
    assert cell.status == "ok" and cell.stdout() == "still runs\n"


def test_disconnect_forgets_the_breakpoints(kc: BlockingKernelClient) -> None:
    start(kc)
    debug(kc, "setBreakpoints", {"source": {"path": "/x/1.py"}, "breakpoints": [{"line": 1}]})
    assert debug(kc, "debugInfo")["body"]["breakpoints"]
    stop(kc)
    assert debug(kc, "debugInfo")["body"]["breakpoints"] == []


# -- bad requests get a clear refusal, and the kernel goes on ----------------------------------


def test_session_requests_before_the_debugger_is_started_are_refused(
    kc: BlockingKernelClient,
) -> None:
    reply = debug(kc, "dumpCell", {"code": "x = 1"})
    assert not reply["success"]
    assert "initialize and attach" in reply["message"]
    assert not debug(kc, "attach")["success"]  # no initialize yet


@pytest.mark.parametrize(
    "content, phrase",
    [
        ({"type": "request", "seq": 1}, "needs a 'command'"),
        ({"type": "request", "seq": 1, "command": "dumpCell", "arguments": [1]}, "must be an object"),
        ({"type": "request", "seq": 1, "command": "dumpCell", "arguments": {"code": 3}}, "code"),
        ({"type": "request", "seq": 1, "command": "launch", "arguments": {}}, "does not handle launch"),
        (
            {"type": "request", "seq": 1, "command": "setBreakpoints",
             "arguments": {"source": {"path": "/p/1.py"}, "breakpoints": [{"line": "2"}]}},
            "line number",
        ),
        (
            {"type": "request", "seq": 1, "command": "setBreakpoints",
             "arguments": {"source": {"path": "/p/1.py"},
                           "breakpoints": [{"line": 1}] * 1001}},
            "at most 1000",
        ),
        (
            {"type": "request", "seq": 1, "command": "source",
             "arguments": {"source": {"path": "/etc/passwd"}}},
            "source unavailable",
        ),
        ({"type": "request", "seq": 1, "command": "stackTrace", "arguments": {"threadId": 1}},
         "no cell is running"),
        ({"type": "request", "seq": 1, "command": "richInspectVariables",
          "arguments": {"variableName": "x"}}, "no cell is stopped"),
        ({"type": "request", "seq": "x", "command": 5}, "needs a 'command'"),
    ],
)  # fmt: skip
def test_bad_debug_requests_get_a_clear_refusal(
    session: BlockingKernelClient, content: Any, phrase: str
) -> None:
    reply = debug_reply(session, send_debug(session, "", content=content))
    assert reply["success"] is False and reply["type"] == "response"
    assert phrase in reply["message"], reply
    # The kernel goes on: the session answers, a cell runs.
    assert debug(session, "debugInfo")["success"]


def test_a_private_client_s_debug_requests_are_refused(session: BlockingKernelClient) -> None:
    """The session is the notebook's: a request with an owner secret (a RemoteGateway's)
    reaches nothing of it (it cannot read its cells, breakpoints, or a run)."""
    code = "token = 'notebook-only'"
    path = debug(session, "dumpCell", {"code": code})["body"]["sourcePath"]
    requests: list[tuple[str, dict[str, Any]]] = [
        ("debugInfo", {}),
        ("source", {"source": {"path": path}}),
        ("dumpCell", {"code": "y = 2"}),
        ("stackTrace", {"threadId": 1}),
        ("disconnect", {}),
    ]
    for command, arguments in requests:
        reply = debug(session, command, arguments, owner=OWNER)
        assert reply["success"] is False and "notebook's" in reply["message"]
        assert "notebook-only" not in json.dumps(reply)
    assert debug(session, "debugInfo")["body"]["isStarted"] is True


# -- the pure parts: coordinates and inert text ------------------------------------------------


def test_doctests() -> None:
    for module in (dap, cells_module):
        result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
        assert result.attempted > 0 and result.failed == 0


def test_lone_surrogates_hash_as_jupyterlab_s_text_encoder_makes_them() -> None:
    """JSON may carry a lone surrogate; JupyterLab's TextEncoder writes U+FFFD for it (and
    joins a pair), so the cell's path is the one JupyterLab computes."""
    assert dap.murmur2_x86("a\ud800b", SEED) == dap.murmur2_x86("a\ufffdb", SEED)
    assert dap.murmur2_x86("\ud83d\ude00", SEED) == dap.murmur2_x86("\U0001f600", SEED)


def test_setup_cell_lines_map_to_their_own_paths() -> None:
    setup = Setup()
    setup.add(1, "#| setup\nlimit = 2")
    setup.add(2, "# Parameters\nname = 'x'\n")
    program = setup.program("y = limit\nprint(y)")
    where = ProgramMap.of(program, "/p/")
    s1, s2, cell = (cell_path(code, "/p/") for code in (
        "#| setup\nlimit = 2", "# Parameters\nname = 'x'\n", "y = limit\nprint(y)"))  # fmt: skip
    assert where.paths == [s1, s2, cell]
    lines = program.text.split("\n")
    assert lines[where.program_line(cell, 2) - 1] == "print(y)"  # type: ignore[operator]
    assert lines[where.program_line(s1, 2) - 1] == "limit = 2"  # type: ignore[operator]
    assert where.cell_line(4) == (s2, 2) and where.cell_line(6) == (cell, 2)
    assert where.cell_line(99) is None
    bps = where.program_breakpoints(
        {cell: [{"line": 1, "condition": "y"}, {"line": 7}], s1: [{"line": 2}]}
    )
    assert bps == [{"line": 2}, {"line": 5, "condition": "y"}]
    # A private run's or a replay cell's program is one part: lines map one to one.
    single = ProgramMap.of(Program("a = 1\nb = 2"), "/p/")
    assert single.cell_line(2) == (cell_path("a = 1\nb = 2", "/p/"), 2)


def test_what_the_child_says_reaches_the_front_end_as_inert_bounded_text() -> None:
    where = ProgramMap.of(Program("x = 1\ny = 2"), "/p/")
    path = where.paths[0]
    frames = inert_body(
        "stackTrace",
        {
            "stackFrames": [
                {"id": 7, "name": "\x1b]0;pwned\x07" + "f" * 5000, "line": 2,
                 "source": {"path": "<program>"}, "evil": "<script>"},
                {"id": 8, "name": "asyncio", "line": 3, "source": {"path": "/usr/lib/x.py"}},
                {"id": True, "name": 5, "line": "1", "source": {"path": "<program>"}},
                "junk",
            ]
        },
        where,
    )  # fmt: skip
    first = frames["stackFrames"][0]
    assert first["line"] == 2 and first["source"]["path"] == path and "evil" not in first
    assert "\x1b" not in first["name"] and "\x07" not in first["name"]
    assert len(first["name"]) <= dap.MAX_NAME
    # Only program frames, mapped; a frame with a bad line has no place and is left out.
    assert len(frames["stackFrames"]) == 1 and frames["totalFrames"] == 1
    variables = inert_body(
        "variables",
        {"variables": [{"name": "x", "value": "v" * 10**6, "type": "str", "variablesReference": -4,
                        "presentationHint": {"kind": "<img>"}}] * 1000},
    where)  # fmt: skip
    assert len(variables["variables"]) == dap.MAX_ITEMS
    var = variables["variables"][0]
    assert set(var) == {"name", "value", "type", "variablesReference"}
    assert len(var["value"]) <= dap.MAX_VALUE and var["value"].endswith("[cut]")
    assert var["variablesReference"] == 0
    rich = inert_body(
        "richInspectVariables",
        {
            "data": {"text/html": "<script>alert(1)</script>", "text/plain": "x"},
            "metadata": {"a": 1},
        },
        where,
    )
    assert rich == {"data": {"text/plain": "x"}, "metadata": {}}
    assert inert_body("evaluate", {"result": ["no"], "type": None}, where)["result"] == "<list>"
    assert inert_event({"event": "terminated", "body": {}}) is None
    stopped = inert_event({"event": "stopped", "body": {"reason": "x" * 500, "threadId": 9,
                                                        "text": "\x1b[2J"}})  # fmt: skip
    assert stopped is not None and stopped["body"]["threadId"] == 1
    assert len(stopped["body"]["reason"]) <= 40 and "\x1b" not in stopped["body"]["text"]


def test_the_session_s_memory_and_time_are_bounded(session: BlockingKernelClient) -> None:
    """Breakpoints are bounded in all (a client cannot grow the kernel without end), and a
    huge cell is named without hashing it on the kernel's loop."""
    for n in range(10):
        path = f"/p/{n}.py"
        reply = debug(
            session,
            "setBreakpoints",
            {"source": {"path": path}, "breakpoints": [{"line": i} for i in range(1, 1001)]},
        )
        assert reply["success"], reply
    refused = debug(
        session, "setBreakpoints", {"source": {"path": "/p/x.py"}, "breakpoints": [{"line": 1}]}
    )
    assert not refused["success"] and "at most 10000" in refused["message"]
    # Replacing a cell's breakpoints is not adding to them.
    again = debug(session, "setBreakpoints", {"source": {"path": "/p/0.py"},
                                              "breakpoints": [{"line": 2}]})  # fmt: skip
    assert again["success"]
    for n in range(10):
        debug(session, "setBreakpoints", {"source": {"path": f"/p/{n}.py"}, "breakpoints": []})
    big = "x = 1\n" * 60_000
    asked = time.monotonic()
    path = debug(session, "dumpCell", {"code": big})["body"]["sourcePath"]
    assert time.monotonic() - asked < 5 and "/large-" in path
    assert debug(session, "source", {"source": {"path": path}})["body"]["content"] == big
