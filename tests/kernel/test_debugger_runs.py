"""Debugging cells through a real kernel and jupyter_client, modelled on ipykernel's own
debugger tests (initialize, attach, debugInfo, dumpCell, setBreakpoints, configurationDone,
execute, the stopped event, stackTrace, scopes, variables, next, continue), at every sandbox
level, warm and cold; and what must hold around it: interrupt and shutdown while stopped,
setup cells' frames, a second client, and what the child says reaching the front end inert.

The kernels here run in this process (a real :class:`KernelServer` on loopback sockets,
served on the main thread, with the test's client in a thread) so that the sandbox level and
the pool can be chosen; the kernelspec's kernel (a process of its own) is used where its
processes matter (shutdown).
"""

from __future__ import annotations

import asyncio
import json
import pathlib
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from jupyter_client.blocking.client import BlockingKernelClient
from jupyter_client.connect import write_connection_file
from jupyter_client.manager import start_new_kernel

from kernelgate import Gateway, save_run
from kernelgate.demo import BINDINGS
from kernelgate.jupyter.server import KernelServer
from kernelgate.model.limits import Limits
from tests.hardening.conftest import at_levels
from tests.procs import descendants

from .helpers import KERNEL_NAME, TIMEOUT, _keep, collect, send_execute, wait_gone
from .test_debugger import OWNER, debug, debug_reply, send_debug, start, wait_event

pytestmark = pytest.mark.timeout(180)

#: ipykernel's test program (tests/test_debugger.py, test_stop_on_breakpoint).
CODE = """def f(a, b):
    c = a + b
    return c

f(2, 3)"""


def in_process_kernel(
    tmp_path: pathlib.Path,
    body: Callable[[BlockingKernelClient, KernelServer], None],
    *,
    level: str | None = None,
    pool_size: int = 4,
) -> None:
    """Serve a kernel on this thread while ``body(client, server)`` runs in another."""
    path = str(tmp_path / "kernel.json")
    _, info = write_connection_file(path, ip="127.0.0.1", key=b"debug-tests-key")
    server = KernelServer(
        info,
        {"tools": BINDINGS},
        limits=Limits(wall_seconds=60, kill_grace_seconds=0.5),
        sandbox=level,
        pool_size=pool_size,
    )
    failure: list[BaseException] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()

        def client() -> None:
            kc = BlockingKernelClient(connection_file=path)
            kc.load_connection_file()
            kc.start_channels()
            try:
                kc.wait_for_ready(timeout=TIMEOUT)
                body(kc, server)
            except BaseException as exc:
                failure.append(exc)
            finally:
                kc.stop_channels()
                loop.call_soon_threadsafe(server.stop)

        thread = threading.Thread(target=client, daemon=True)
        thread.start()
        await server.serve()
        await asyncio.to_thread(thread.join, TIMEOUT)

    asyncio.run(main())
    if failure:
        raise failure[0]


def dump_and_break(kc: BlockingKernelClient, code: str, *lines: int) -> str:
    """dumpCell then setBreakpoints on ``lines``, as JupyterLab does; the cell's path."""
    path = str(debug(kc, "dumpCell", {"code": code})["body"]["sourcePath"])
    reply = debug(
        kc,
        "setBreakpoints",
        {
            "source": {"path": path},
            "breakpoints": [{"line": line} for line in lines],
            "sourceModified": False,
        },
    )
    assert reply["success"], reply
    return path


def top_frame(kc: BlockingKernelClient) -> dict[str, Any]:
    reply = debug(kc, "stackTrace", {"threadId": 1})
    assert reply["success"], reply
    frames = reply["body"]["stackFrames"]
    assert frames, reply
    return dict(frames[0])


def variables(kc: BlockingKernelClient, frame_id: int, scope: str = "Locals") -> dict[str, Any]:
    scopes = debug(kc, "scopes", {"frameId": frame_id})
    assert scopes["success"], scopes
    [ref] = [s["variablesReference"] for s in scopes["body"]["scopes"] if s["name"] == scope]
    reply = debug(kc, "variables", {"variablesReference": ref})
    assert reply["success"], reply
    return {v["name"]: v for v in reply["body"]["variables"]}


def ipykernel_sequence(kc: BlockingKernelClient) -> None:
    start(kc)
    path = str(debug(kc, "dumpCell", {"code": CODE})["body"]["sourcePath"])
    assert debug(kc, "debugInfo")["success"]
    dump_and_break(kc, CODE, 2)
    assert debug(kc, "configurationDone")["success"]
    msg_id = kc.execute(CODE)
    stopped = wait_event(kc, "stopped")
    assert stopped["body"]["reason"] == "breakpoint" and stopped["body"]["threadId"] == 1
    assert debug(kc, "debugInfo")["body"]["stoppedThreads"] == [1]
    frame = top_frame(kc)
    assert frame["source"]["path"] == path and frame["line"] == 2 and frame["name"] == "f"
    local = variables(kc, frame["id"])
    assert local["a"]["value"] == "2" and local["b"]["value"] == "3" and "c" not in local
    assert debug(kc, "evaluate", {"expression": "a * 10", "frameId": frame["id"],
                                  "context": "repl"})["body"]["result"] == "20"  # fmt: skip
    assert debug(kc, "next", {"threadId": 1})["success"]
    assert wait_event(kc, "stopped")["body"]["reason"] == "step"
    frame = top_frame(kc)
    assert frame["line"] == 3 and variables(kc, frame["id"])["c"]["value"] == "5"
    reply = debug(kc, "continue", {"threadId": 1})
    assert reply["success"], reply
    cell = collect(kc, msg_id)
    assert cell.status == "ok", cell.events
    [result] = cell.outputs("execute_result")
    assert result["content"]["data"]["text/plain"] == "5"
    assert debug(kc, "debugInfo")["body"]["stoppedThreads"] == []


@at_levels("process", "namespaces", "namespaces+landlock")
@pytest.mark.parametrize("pool_size", [4, 0], ids=["warm", "cold"])
def test_ipykernel_s_debug_sequence(tmp_path: pathlib.Path, level: str, pool_size: int) -> None:
    in_process_kernel(
        tmp_path, lambda kc, _: ipykernel_sequence(kc), level=level, pool_size=pool_size
    )


def test_the_sequence_through_the_kernelspec_s_kernel(kc: BlockingKernelClient) -> None:
    try:
        ipykernel_sequence(kc)
    finally:
        debug(kc, "disconnect", {"restart": False, "terminateDebuggee": False})


def test_setup_cell_frames_name_the_setup_cell(tmp_path: pathlib.Path) -> None:
    setup = "#| setup\ndef helper(x):\n    y = x * 2\n    return y"
    code = "z = 1\nprint(helper(z))"

    def body(kc: BlockingKernelClient, server: KernelServer) -> None:
        assert collect(kc, kc.execute(setup)).status == "ok"
        start(kc)
        setup_path = dump_and_break(kc, setup, 3)
        cell_path = dump_and_break(kc, code, 2)
        msg_id = kc.execute(code)
        wait_event(kc, "stopped")
        frame = top_frame(kc)  # the cell's line 2, though the program has 4 lines before it
        assert (frame["source"]["path"], frame["line"]) == (cell_path, 2)
        assert debug(kc, "continue", {"threadId": 1})["success"]
        wait_event(kc, "stopped")  # the setup cell's own breakpoint, in helper
        frames = debug(kc, "stackTrace", {"threadId": 1})["body"]["stackFrames"]
        assert [(f["source"]["path"], f["line"], f["name"]) for f in frames] == [
            (setup_path, 3, "helper"),
            (cell_path, 2, "<module>"),
        ]
        source = debug(kc, "source", {"source": {"path": setup_path}})
        assert source["body"]["content"] == setup
        debug(kc, "continue", {"threadId": 1})
        cell = collect(kc, msg_id)
        assert cell.status == "ok" and cell.stdout() == "2\n"

    in_process_kernel(tmp_path, body)


def test_interrupt_while_stopped_ends_the_run_cleanly(tmp_path: pathlib.Path) -> None:
    """Interrupt reaches a stopped cell, even with a request waiting on the child: control
    is never held up by the debugger."""
    code = "import time\nx = 1\nx = 2"

    def body(kc: BlockingKernelClient, server: KernelServer) -> None:
        start(kc)
        dump_and_break(kc, code, 3)
        msg_id = kc.execute(code)
        wait_event(kc, "stopped")
        frame = top_frame(kc)
        # A slow request the child is busy with (its own code: up to its evaluate bound).
        slow = send_debug(
            kc,
            "evaluate",
            {
                "expression": "print('busy', flush=True) or time.sleep(8)",
                "frameId": frame["id"],
                "context": "repl",
            },
        )
        # Interrupt only once the child is inside the request (it printed): the case where
        # a request holds the child, not one still on its way.
        deadline = time.monotonic() + TIMEOUT
        while True:
            msg = kc.get_iopub_msg(timeout=max(0.1, deadline - time.monotonic()))
            if msg["msg_type"] == "stream" and "busy" in msg["content"]["text"]:
                break
        asked = time.monotonic()
        interrupt = kc.session.msg("interrupt_request", {})
        kc.control_channel.send(interrupt)
        cell = collect(kc, msg_id)
        assert time.monotonic() - asked < 5
        assert cell.run_status == "interrupted", cell.events
        # The front end is told the program goes on (JupyterLab clears what it showed).
        said = [m["content"]["event"] for m in cell.outputs("debug_event")]
        assert said[-1:] == ["continued"], said
        assert debug_reply(kc, slow)["success"] is False
        assert debug(kc, "debugInfo")["body"]["stoppedThreads"] == []
        # The kernel goes on: the next cell runs, debugged, to the end.
        assert collect(kc, kc.execute("print('next')")).stdout() == "next\n"

    in_process_kernel(tmp_path, body)


def test_disconnect_while_stopped_says_continued_and_the_cell_finishes(
    tmp_path: pathlib.Path,
) -> None:
    """JupyterLab's "Stop Debugger" while stopped (a ``disconnect``): the cell runs on,
    undebugged, to its end, and the front end is told it goes on (JupyterLab's "Paused in
    Debugger" overlay leaves only on ``continued``; tests/kernel/test_debugger_browser.py)."""
    code = "x = 1\nx = 2\nprint('done', x)"

    def body(kc: BlockingKernelClient, server: KernelServer) -> None:
        start(kc)
        dump_and_break(kc, code, 2)
        msg_id = kc.execute(code)
        wait_event(kc, "stopped")
        assert debug(kc, "disconnect", {"restart": False, "terminateDebuggee": True})["success"]
        cell = collect(kc, msg_id)
        assert cell.status == "ok" and cell.stdout() == "done 2\n", cell.events
        said = [m["content"]["event"] for m in cell.outputs("debug_event")]
        assert said[-1:] == ["continued"], said
        assert debug(kc, "debugInfo")["body"]["stoppedThreads"] == []

    in_process_kernel(tmp_path, body)


def test_disconnect_lets_a_cell_go_with_its_exception_filters(tmp_path: pathlib.Path) -> None:
    """JupyterLab's "Stop Debugger" while a cell is stopped with "pause on raised exceptions": the
    cell runs on to its end (before: the child kept the filter, stopped at the next raise,
    and the stop, no longer anyone's, held the kernel's queue for up to an hour)."""
    code = (
        "x = 1\nx = 2\nfor i in range(3):\n    try:\n        raise ValueError(i)\n"
        "    except ValueError:\n        pass\nprint('done', x)"
    )

    def body(kc: BlockingKernelClient, server: KernelServer) -> None:
        start(kc)
        assert debug(kc, "setExceptionBreakpoints", {"filters": ["raised"]})["success"]
        dump_and_break(kc, code, 2)
        msg_id = kc.execute(code)
        assert wait_event(kc, "stopped")["body"]["reason"] == "breakpoint"
        assert debug(kc, "disconnect", {"restart": False, "terminateDebuggee": False})["success"]
        cell = collect(kc, msg_id)
        assert cell.status == "ok" and cell.stdout() == "done 2\n", cell.events

    in_process_kernel(tmp_path, body)


def test_shutdown_while_stopped_leaves_nothing_behind() -> None:
    km, kc = start_new_kernel(kernel_name=KERNEL_NAME, startup_timeout=30)
    try:
        kernel_pid = km.provisioner.pid  # type: ignore[union-attr]
        start(kc)
        code = "x = 1\nx = 2"
        dump_and_break(kc, code, 2)
        msg_id = send_execute(kc, code)
        wait_event(kc, "stopped")
        children = descendants(kernel_pid)
        assert children
        kc.shutdown()
        cell = collect(kc, msg_id)
        assert cell.run_status == "interrupted"
    finally:
        kc.stop_channels()
        km.shutdown_kernel()
    assert wait_gone({kernel_pid, *children}) == set()


def test_another_client_with_an_owner_secret_cannot_reach_the_notebook_s_run(
    tmp_path: pathlib.Path,
) -> None:
    """The session is the notebook's: a private client's debug requests are refused (the
    stopped cell stays stopped, its values unread), and its own runs are never debugged
    (a breakpoint on its code does not stop it)."""
    code = "secret = 'notebook-only-4b1d'\nx = 2"

    def body(kc: BlockingKernelClient, server: KernelServer) -> None:
        start(kc)
        dump_and_break(kc, code, 2)
        # A private run of the same code (the same cell path): not debugged, never stops.
        private = collect(kc, send_execute(kc, code, owner=OWNER), timeout=15)
        assert private.status == "ok"
        assert not private.outputs("debug_event")
        msg_id = kc.execute(code)
        wait_event(kc, "stopped")
        frame = top_frame(kc)
        for command, arguments in [
            ("stackTrace", {"threadId": 1}),
            ("scopes", {"frameId": frame["id"]}),
            ("evaluate", {"expression": "secret", "frameId": frame["id"], "context": "repl"}),
            ("inspectVariables", {}),
            ("continue", {"threadId": 1}),
            ("disconnect", {}),
        ]:
            reply = debug(kc, command, arguments, owner=OWNER)
            assert reply["success"] is False and "notebook's" in reply["message"]
            assert "notebook-only" not in json.dumps(reply)
        assert debug(kc, "debugInfo")["body"]["stoppedThreads"] == [1]
        assert debug(kc, "continue", {"threadId": 1})["success"]
        assert collect(kc, msg_id).status == "ok"

    in_process_kernel(tmp_path, body)


def test_what_the_child_says_reaches_the_front_end_as_inert_text(tmp_path: pathlib.Path) -> None:
    """Values, names and rich views from the program are text: control characters escaped,
    long ones cut, a rich view ``text/plain`` only (never the program's HTML)."""
    code = (
        "class Page:\n"
        "    def _repr_html_(self):\n"
        "        return '<img src=x onerror=alert(1)>'\n"
        "    def __repr__(self):\n"
        "        return '\\x1b]0;pwned\\x07' + 'A' * 100_000\n"
        "page = Page()\n"
        "x = 1"
    )

    def body(kc: BlockingKernelClient, server: KernelServer) -> None:
        start(kc)
        dump_and_break(kc, code, 7)
        msg_id = kc.execute(code)
        wait_event(kc, "stopped")
        frame = top_frame(kc)
        page = variables(kc, frame["id"], "Globals")["page"]
        assert "\x1b" not in page["value"] and "\x07" not in page["value"]
        assert len(page["value"]) <= 1000
        rich = debug(kc, "richInspectVariables", {"variableName": "page", "frameId": frame["id"]})
        assert rich["success"], rich
        assert set(rich["body"]["data"]) <= {"text/plain"}
        assert "onerror" not in json.dumps(rich)
        shown = debug(kc, "inspectVariables", {})["body"]["variables"]
        [listed] = [v for v in shown if v["name"] == "page"]
        assert "\x1b" not in listed["value"] and len(listed["value"]) <= 1000
        debug(kc, "continue", {"threadId": 1})
        assert collect(kc, msg_id).status == "ok"

    in_process_kernel(tmp_path, body)


LOOP = (
    "import time\nprint('started', flush=True)\nfor i in range(120):\n    time.sleep(0.05)\n'done'"
)


def wait_started(kc: BlockingKernelClient, msg_id: str) -> None:
    """Wait (bounded) until the cell printed 'started': its program is running."""
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        try:
            msg = kc.get_iopub_msg(timeout=0.1)
        except Exception:
            continue
        _keep(kc, "iopub", msg)
        if msg["parent_header"].get("msg_id") == msg_id and msg["msg_type"] == "stream":
            return
    raise TimeoutError("the cell did not start")


def test_pause_a_running_cell_and_set_breakpoints_while_it_runs(tmp_path: pathlib.Path) -> None:
    def body(kc: BlockingKernelClient, server: KernelServer) -> None:
        start(kc)
        path = str(debug(kc, "dumpCell", {"code": LOOP})["body"]["sourcePath"])
        msg_id = kc.execute(LOOP)
        wait_started(kc, msg_id)
        refused = debug(kc, "stackTrace", {"threadId": 1})
        assert not refused["success"] and "running" in refused["message"]
        assert debug(kc, "pause", {"threadId": 1})["success"]
        assert wait_event(kc, "stopped")["body"]["reason"] == "pause"
        frame = top_frame(kc)
        assert frame["source"]["path"] == path and frame["line"] in (3, 4)
        assert debug(kc, "continue", {"threadId": 1})["success"]
        # A breakpoint set while the cell runs reaches its child at once.
        dump_and_break(kc, LOOP, 4)
        assert wait_event(kc, "stopped")["body"]["reason"] == "breakpoint"
        assert top_frame(kc)["line"] == 4
        # Disconnecting lets the cell run to its end, undebugged from then on.
        assert debug(kc, "disconnect", {"restart": False, "terminateDebuggee": False})["success"]
        cell = collect(kc, msg_id)
        assert cell.status == "ok", cell.events
        assert debug(kc, "debugInfo")["body"] == {
            **debug(kc, "debugInfo")["body"],
            "isStarted": False,
            "breakpoints": [],
            "stoppedThreads": [],
        }

    in_process_kernel(tmp_path, body)


def test_stepping_over_a_binding_call_makes_the_call(kc: BlockingKernelClient) -> None:
    """``next`` over ``await tools.search(...)``: the real call is made (its output appears
    as the program reaches it) and the program stops at the next line."""
    code = "hits = await tools.search('messages', limit=2)\nn = len(hits)\nn"
    start(kc)
    try:
        dump_and_break(kc, code, 1)
        msg_id = kc.execute(code)
        wait_event(kc, "stopped")
        assert debug(kc, "next", {"threadId": 1})["success"]
        assert wait_event(kc, "stopped")["body"]["reason"] == "step"
        frame = top_frame(kc)
        assert frame["line"] == 2
        assert variables(kc, frame["id"], "Globals")["hits"]["type"] == "list"
        assert debug(kc, "continue", {"threadId": 1})["success"]
        cell = collect(kc, msg_id)
        assert cell.status == "ok", cell.events
        calls = [
            m
            for m in cell.outputs("display_data")
            if m["content"]["metadata"].get("kernelgate", {}).get("role") == "call"
        ]
        assert len(calls) == 1
    finally:
        debug(kc, "disconnect", {"restart": False, "terminateDebuggee": False})


def debug_replies(kc: BlockingKernelClient, ids: list[str]) -> list[dict[str, Any]]:
    """The debug_reply contents to each of ``ids``, in that order."""
    got: dict[str, dict[str, Any]] = {}
    deadline = time.monotonic() + TIMEOUT
    while len(got) < len(ids) and time.monotonic() < deadline:
        try:
            msg = kc.get_control_msg(timeout=0.1)
        except Exception:
            continue
        if msg["msg_type"] == "debug_reply":
            got[msg["parent_header"]["msg_id"]] = msg["content"]
    return [got[i] for i in ids]


def test_a_flood_of_requests_or_a_huge_one_is_refused_and_nothing_is_lost(
    tmp_path: pathlib.Path,
) -> None:
    """More requests for the child than the kernel lets wait are refused at once; one too
    big for the run's frames fails; the stopped cell and the kernel go on."""
    code = "import time\nx = 1\nx = 2"

    def body(kc: BlockingKernelClient, server: KernelServer) -> None:
        start(kc)
        dump_and_break(kc, code, 3)
        msg_id = kc.execute(code)
        wait_event(kc, "stopped")
        frame = top_frame(kc)
        slow = {"expression": "time.sleep(0.05)", "frameId": frame["id"], "context": "repl"}
        sent = [send_debug(kc, "evaluate", slow) for _ in range(100)]
        replies = debug_replies(kc, sent)
        refused = [r for r in replies if "waiting for the program already" in r.get("message", "")]
        assert refused and len(refused) <= 100 - 64, len(refused)
        assert all(r["success"] for r in replies if r not in refused)
        huge = {"expression": "1+" * 5_000_000 + "1", "frameId": frame["id"], "context": "repl"}
        reply = debug(kc, "evaluate", huge)
        assert reply["success"] is False and reply["message"]
        assert top_frame(kc)["line"] == 3  # still stopped, still answering
        assert debug(kc, "continue", {"threadId": 1})["success"]
        assert collect(kc, msg_id).status == "ok"

    in_process_kernel(tmp_path, body)


def test_a_replay_cell_is_debugged_against_the_recording(tmp_path: pathlib.Path) -> None:
    """``#| replay PATH``: the cell's program runs against the recording's answers, and its
    lines are the cell's (no setup cells before it)."""
    program = "hits = await tools.search('messages', limit=2)\nn = len(hits)\nn"

    async def record() -> Any:
        async with Gateway(bindings=BINDINGS) as gw:
            return await gw.run(program)

    recorded = asyncio.run(record())
    assert recorded.ok, recorded.message
    path = save_run(recorded, tmp_path / "run.ipynb")
    code = f"#| replay {path}\n{program}"

    def body(kc: BlockingKernelClient, server: KernelServer) -> None:
        assert collect(kc, kc.execute("#| setup\nunused = 1")).status == "ok"
        start(kc)
        cell_path = dump_and_break(kc, code, 3)
        msg_id = kc.execute(code)
        wait_event(kc, "stopped")
        frame = top_frame(kc)
        assert (frame["source"]["path"], frame["line"]) == (cell_path, 3)
        names = {**variables(kc, frame["id"]), **variables(kc, frame["id"], "Globals")}
        assert names["hits"]["type"] == "list" and "unused" not in names
        assert debug(kc, "continue", {"threadId": 1})["success"]
        cell = collect(kc, msg_id)
        assert cell.status == "ok", cell.events
        # Interrupted while stopped, a replay cell ends as any cell does.
        msg_id = kc.execute(code)
        wait_event(kc, "stopped")
        kc.control_channel.send(kc.session.msg("interrupt_request", {}))
        assert collect(kc, msg_id).run_status == "interrupted"

    in_process_kernel(tmp_path, body)


def test_pause_on_uncaught_exceptions_as_jupyterlab_offers_it(kc: BlockingKernelClient) -> None:
    """initialize offers the exception filters; setExceptionBreakpoints with "uncaught"
    stops a cell where its exception is about to end it, in the frame that raised."""
    code = "def lookup(k):\n    return {}[k]\n\nlookup('gone')\n"
    try:
        reply = start(kc)
        offered = [f["filter"] for f in reply["body"]["exceptionBreakpointFilters"]]
        assert offered == ["raised", "uncaught"], reply
        assert debug(kc, "setExceptionBreakpoints", {"filters": ["uncaught"]})["success"]
        path = str(debug(kc, "dumpCell", {"code": code})["body"]["sourcePath"])
        msg_id = kc.execute(code)
        stopped = wait_event(kc, "stopped")
        assert stopped["body"]["reason"] == "exception", stopped
        assert "KeyError" in stopped["body"].get("text", ""), stopped
        frame = top_frame(kc)
        assert (frame["name"], frame["line"], frame["source"]["path"]) == ("lookup", 2, path)
        assert variables(kc, frame["id"])["k"]["value"] == "'gone'"
        assert debug(kc, "continue", {"threadId": 1})["success"]
        cell = collect(kc, msg_id)
        assert cell.status == "error", cell.events
        assert debug(kc, "setExceptionBreakpoints", {"filters": []})["success"]
        assert collect(kc, kc.execute(code)).status == "error"  # no stop: it just ends
    finally:
        debug(kc, "disconnect", {"restart": False, "terminateDebuggee": False})
