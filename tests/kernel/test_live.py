"""The kernel through a real jupyter_client KernelManager: live output, calls, interrupts.

Where a test needs the program to wait for the test (to prove output arrives while the
cell is still running), the program awaits a client-answered binding (``gate.wait()``,
announced by the test on a ``kernelgate.bindings`` comm) that the test answers only once it
has checked what it has seen so far: no sleeps.
"""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from jupyter_client.blocking.client import BlockingKernelClient

from kernelgate.model.codec import decode_metadata, encode_metadata
from kernelgate.model.result import RunResult
from kernelgate.model.text import strip_ansi
from kernelgate.wire.messages import CALL_MIME

from .helpers import (
    collect,
    execute,
    open_bindings_comm,
    send_comm,
    send_execute,
    send_request,
)

GATE = {
    "gate": {
        "wait": {
            "params": [["token", "POSITIONAL_OR_KEYWORD", True]],
            "signature": "(token: str = 'go') -> str",
            "doc": "Wait until the test lets the program go on.",
        }
    }
}


@dataclass(frozen=True)
class Gate:
    """The test's bindings comm, and the owner secret its cells and answers carry."""

    comm_id: str
    owner: str


@pytest.fixture
def gate(kc: BlockingKernelClient) -> Iterator[Gate]:
    """A ``gate`` namespace answered by the test."""
    comm_id = uuid.uuid4().hex
    owner = secrets.token_urlsafe(32)
    answer = open_bindings_comm(kc, comm_id, GATE, owner)
    assert answer["msg_type"] == "comm_msg", answer["content"]
    assert answer["content"]["data"]["method"] == "ready"
    assert answer["content"]["data"]["namespaces"]["gate"] == {"wait": "(token: str = 'go') -> str"}
    # The kernel's own bindings stay beside the client's.
    assert "search" in answer["content"]["data"]["namespaces"]["tools"]
    try:
        yield Gate(comm_id, owner)
    finally:
        send_request(kc, "comm_close", {"comm_id": comm_id, "data": {}}, owner)


def _calls(msg: dict[str, Any], comm_id: str) -> dict[str, Any] | None:
    if msg["msg_type"] == "comm_msg" and msg["content"]["comm_id"] == comm_id:
        data: dict[str, Any] = msg["content"]["data"]
        if data.get("method") == "call":
            return data
    return None


def test_output_streams_live_in_order(kc: BlockingKernelClient, gate: Gate) -> None:
    code = (
        "import sys\n"
        "print('first')\n"
        "sys.stderr.write('warned\\n')\n"
        "token = await gate.wait('a')\n"
        "print('second', token)\n"
        "'done'"
    )
    seen_at_call: list[list[tuple[str, str]]] = []

    def on_iopub(msg: dict[str, Any], cell: Any) -> None:
        call = _calls(msg, gate.comm_id)
        if call is not None:
            assert call["namespace"] == "gate" and call["name"] == "wait"
            assert call["args"] == ["a"] and call["kwargs"] == {}
            # The parent of a forwarded call is the cell's execute_request.
            assert msg["parent_header"]["msg_id"] == cell.msg_id
            assert cell.reply is None  # the cell is still running
            seen_at_call.append(
                [(m["content"]["name"], m["content"]["text"]) for m in cell.outputs("stream")]
            )
            send_comm(
                kc,
                gate.comm_id,
                {"method": "reply", "call_id": call["call_id"], "ok": True, "value": "go!"},
                gate.owner,
            )

    cell = execute(kc, code, owner=gate.owner, on_iopub=on_iopub)
    assert seen_at_call == [[("stdout", "first\n"), ("stderr", "warned\n")]]
    assert cell.status == "ok"
    kinds = [(m["msg_type"], m["content"].get("text")) for m in cell.iopub]
    assert kinds == [
        ("stream", "first\n"),
        ("stream", "warned\n"),
        ("comm_msg", None),  # the gate.wait call forwarded to this client
        ("display_data", None),  # the gate.wait call, once answered
        ("stream", "second go!\n"),
        ("execute_result", None),
        ("display_data", None),  # the run record, the cell's last output
    ]
    call = cell.iopub[3]["content"]["data"][CALL_MIME]
    assert (call["namespace"], call["name"], call["ok"], call["value"]) == (
        "gate",
        "wait",
        True,
        "go!",
    )
    assert cell.iopub[-2]["content"]["data"] == {"text/plain": "'done'"}
    assert cell.iopub[-1]["content"]["metadata"]["kernelgate"]["value"] == "done"
    # busy, execute_input, outputs..., idle -- all with this cell as parent
    assert cell.events[0][1:] == ("status", {"execution_state": "busy"})
    assert cell.events[1][1] == "execute_input"
    assert [e for e in cell.events if e[0] == "iopub"][-1][1:] == (
        "status",
        {"execution_state": "idle"},
    )


def test_binding_call_shown_as_it_happens(kc: BlockingKernelClient, gate: Gate) -> None:
    code = (
        "hits = await tools.search('messages', limit=2)\n"
        "await gate.wait()\n"
        "print('after', len(hits))\n"
    )
    seen: list[list[str]] = []

    def on_iopub(msg: dict[str, Any], cell: Any) -> None:
        call = _calls(msg, gate.comm_id)
        if call is not None:
            seen.append([m["content"]["data"]["text/plain"] for m in cell.outputs("display_data")])
            reply = {"method": "reply", "call_id": call["call_id"], "ok": True, "value": None}
            send_comm(kc, gate.comm_id, reply, gate.owner)

    cell = execute(kc, code, owner=gate.owner, on_iopub=on_iopub)
    assert cell.status == "ok", cell.reply
    assert len(seen) == 1 and len(seen[0]) == 1
    assert seen[0][0].startswith("tools.search('messages', limit=2) -> ")
    assert seen[0][0].endswith("ms")
    first = cell.outputs("display_data")[0]["content"]
    data = first["data"][CALL_MIME]
    assert data["namespace"] == "tools" and data["name"] == "search"
    assert data["args"] == ["messages"] and data["kwargs"] == {"limit": 2}
    assert data["ok"] is True and [h["id"] for h in data["value"]] == ["comms", "jupyter-protocol"]
    assert data["duration_s"] >= 0 and data["start_s"] >= 0
    assert cell.stdout() == "after 2\n"


def test_client_binding_error_is_a_tool_error(kc: BlockingKernelClient, gate: Gate) -> None:
    def on_iopub(msg: dict[str, Any], cell: Any) -> None:
        call = _calls(msg, gate.comm_id)
        if call is not None:
            send_comm(
                kc,
                gate.comm_id,
                {
                    "method": "reply",
                    "call_id": call["call_id"],
                    "ok": False,
                    "ename": "PermissionError",
                    "evalue": "not today",
                },
                gate.owner,
            )

    cell = execute(
        kc,
        "try:\n    await gate.wait()\nexcept ToolError as e:\n    print(e.tool, e.ename, e)\n",
        owner=gate.owner,
        on_iopub=on_iopub,
    )
    assert cell.status == "ok"
    assert (
        cell.stdout() == "gate.wait PermissionError gate.wait failed: PermissionError: not today\n"
    )
    data = cell.outputs("display_data")[0]["content"]["data"][CALL_MIME]
    assert data["ok"] is False
    assert (data["error"]["ename"], data["error"]["evalue"]) == ("PermissionError", "not today")


def test_complete_and_inspect_see_client_bindings(kc: BlockingKernelClient, gate: Gate) -> None:
    code = "await gate.w"
    msg_id = send_request(kc, "complete_request", {"code": code, "cursor_pos": 12}, gate.owner)
    reply = kc.get_shell_msg(timeout=10)
    assert reply["parent_header"]["msg_id"] == msg_id
    assert reply["content"]["matches"] == ["wait"]
    assert reply["content"]["cursor_start"] == len("await gate.")
    # Without the owner's secret, the gate is not there (whatever the session).
    kc.complete(code)
    assert kc.get_shell_msg(timeout=10)["content"]["matches"] == []
    inspect = {"code": "gate.wait", "cursor_pos": 9, "detail_level": 0}
    send_request(kc, "inspect_request", inspect, gate.owner)
    reply = kc.get_shell_msg(timeout=10)
    text = reply["content"]["data"]["text/plain"]
    assert text.startswith("async def wait(token: str = 'go') -> str")
    assert "Wait until the test lets the program go on." in text


def test_interrupt_by_signal_stops_a_busy_cell(kernel: Any, kc: BlockingKernelClient) -> None:
    km = kernel[0]
    interrupted: list[bool] = []

    def on_iopub(msg: dict[str, Any], cell: Any) -> None:
        if cell.stdout() == "started\n" and not interrupted:
            interrupted.append(True)
            km.interrupt_kernel()  # SIGINT to the kernel (interrupt_mode "signal")

    cell = execute(kc, "print('started')\nwhile True:\n    pass\n", on_iopub=on_iopub)
    assert interrupted == [True]
    assert cell.status == "error"
    assert cell.run_status == "interrupted"
    assert cell.reply is not None and cell.reply["content"]["ename"] == "Interrupted"
    errors = cell.outputs("error")
    assert len(errors) == 1 and errors[0]["content"]["ename"] == "Interrupted"
    assert km.is_alive()
    after = execute(kc, "'still here'")
    assert after.status == "ok"


def test_interrupt_request_on_control(kc: BlockingKernelClient) -> None:
    replies: list[dict[str, Any]] = []

    def on_iopub(msg: dict[str, Any], cell: Any) -> None:
        if cell.stdout() == "spinning\n" and not replies:
            msg = kc.session.msg("interrupt_request", {})
            kc.control_channel.send(msg)
            replies.append(kc.get_control_msg(timeout=10))

    cell = execute(kc, "print('spinning')\nwhile True:\n    pass\n", on_iopub=on_iopub)
    assert replies[0]["msg_type"] == "interrupt_reply"
    assert replies[0]["content"] == {"status": "ok"}
    assert cell.run_status == "interrupted"


def test_a_cell_after_a_crashed_cell_works(kc: BlockingKernelClient) -> None:
    crashed = execute(kc, "import os, signal\nprint('bye')\nos.kill(os.getpid(), signal.SIGKILL)")
    assert crashed.status == "error"
    assert crashed.run_status == "worker_exit"
    assert crashed.stdout() == "bye\n"
    assert [m["content"]["ename"] for m in crashed.outputs("error")] == ["WorkerExit"]
    after = execute(kc, "print('alive')\n6 * 7")
    assert after.status == "ok"
    assert after.stdout() == "alive\n"
    assert after.outputs("execute_result")[0]["content"]["data"]["text/plain"] == "42"


def test_every_cell_is_a_fresh_program(kc: BlockingKernelClient) -> None:
    execute(kc, "x = 1")
    cell = execute(kc, "x")
    assert cell.status == "error"
    assert cell.reply is not None and cell.reply["content"]["ename"] == "NameError"
    traceback = [strip_ansi(line) for line in cell.reply["content"]["traceback"]]
    assert traceback[-2].startswith("NameError")
    # One line more: the name was assigned by an earlier cell, which ran on its own.
    assert traceback[-1].startswith("cells do not share state: 'x' was assigned in cell [")
    assert "#| setup" in traceback[-1]
    assert all("kernelgate" not in line for line in traceback[:-1])
    assert cell.reply["content"]["evalue"] == "name 'x' is not defined"


def test_execution_count_and_silent(kc: BlockingKernelClient) -> None:
    first = execute(kc, "1")
    count = first.reply["content"]["execution_count"] if first.reply else None
    assert first.outputs("execute_result")[0]["content"]["execution_count"] == count
    silent = execute(kc, "print('hidden')\n2", silent=True)
    assert silent.status == "ok"
    assert silent.iopub == []
    assert silent.reply is not None and silent.reply["content"]["execution_count"] == count
    again = execute(kc, "3")
    assert again.reply is not None and again.reply["content"]["execution_count"] == count + 1


def test_stop_on_error_aborts_queued_cells(kc: BlockingKernelClient, gate: Gate) -> None:
    first = send_execute(kc, "await gate.wait()\nraise ValueError('first fails')", gate.owner)
    second = send_execute(kc, "print('never runs')")

    def on_iopub(msg: dict[str, Any], cell: Any) -> None:
        call = _calls(msg, gate.comm_id)
        if call is not None:  # the second request is queued by now
            reply = {"method": "reply", "call_id": call["call_id"], "ok": True}
            send_comm(kc, gate.comm_id, reply, gate.owner)

    failed = collect(kc, first, on_iopub=on_iopub)
    assert failed.status == "error"
    aborted = collect(kc, second)
    assert aborted.status == "aborted"
    assert aborted.iopub == []


def test_limits_from_request_metadata(kc: BlockingKernelClient) -> None:
    msg = kc.session.msg(
        "execute_request",
        {
            "code": "while True:\n    pass",
            "silent": False,
            "store_history": True,
            "user_expressions": {},
            "allow_stdin": False,
            "stop_on_error": False,
        },
        metadata={"kernelgate": {"limits": {"wall_seconds": 0.5, "kill_grace_seconds": 0.2}}},
    )
    kc.shell_channel.send(msg)
    cell = collect(kc, msg["header"]["msg_id"])
    assert cell.run_status == "timeout"
    assert (
        cell.reply is not None
        and cell.reply["metadata"]["kernelgate"]["limits"]["wall_seconds"] == 0.5
    )


def test_the_reply_carries_a_recording_s_run_metadata(kc: BlockingKernelClient) -> None:
    """One encoder: the execute_reply's metadata.kernelgate is what a recorded cell holds."""
    cell = execute(kc, "print('hi')\n6 * 7")
    assert cell.reply is not None
    meta = cell.reply["metadata"]["kernelgate"]
    decoded = decode_metadata(meta, "the reply")
    assert list(meta) == list(encode_metadata(RunResult(**decoded.fields, value=meta["value"])))
    assert meta["value"] == 42
    assert decoded.fields["status"] == "ok" and decoded.calls == 0
    assert decoded.fields["run_id"] and decoded.fields["limits"]["wall_seconds"] > 0


def test_comm_info_and_unknown_targets(kc: BlockingKernelClient, gate: Gate) -> None:
    kc.comm_info(target_name="kernelgate.bindings")
    reply = kc.get_shell_msg(timeout=10)
    assert reply["content"]["comms"][gate.comm_id] == {"target_name": "kernelgate.bindings"}
    kc.shell_channel.send(
        kc.session.msg("comm_open", {"comm_id": "x1", "target_name": "nope", "data": {}})
    )
    while True:
        msg = kc.get_iopub_msg(timeout=10)
        if msg["msg_type"] == "comm_close":
            assert msg["content"]["comm_id"] == "x1"
            break


def test_a_bad_announcement_is_refused(kc: BlockingKernelClient) -> None:
    bad = {"my-ns": {"f": {"params": [], "signature": "()", "doc": ""}}}
    owner = secrets.token_urlsafe(32)
    answer = open_bindings_comm(kc, uuid.uuid4().hex, bad, owner)
    assert answer["msg_type"] == "comm_close"
    assert "not a valid Python identifier" in answer["content"]["data"]["error"]
    worse = {"ns": {"f": {"params": [["a", "NOT_A_KIND", False]]}}}
    answer = open_bindings_comm(kc, uuid.uuid4().hex, worse, owner)
    assert answer["msg_type"] == "comm_close"
    assert "kind" in answer["content"]["data"]["error"]
    # Bindings belong to a secret their cells and answers carry: none, or a short one, is
    # refused (and the refusal does not quote it).
    good = GATE
    answer = open_bindings_comm(kc, uuid.uuid4().hex, good, None)
    assert answer["msg_type"] == "comm_close"
    assert "needs an owner secret" in answer["content"]["data"]["error"]
    answer = open_bindings_comm(kc, uuid.uuid4().hex, good, "short-secret")
    assert answer["msg_type"] == "comm_close"
    error = answer["content"]["data"]["error"]
    assert "22" in error
    assert "short-secret" not in error


def test_kernel_info_and_history(kc: BlockingKernelClient) -> None:
    kc.kernel_info()
    info = kc.get_shell_msg(timeout=10)["content"]
    assert info["protocol_version"] == "5.3"
    assert info["implementation"] == "kernelgate"
    assert info["language_info"]["name"] == "python"
    assert info["debugger"] is True and info["supported_features"] == ["debugger"]
    execute(kc, "'history check'")
    kc.history(hist_access_type="tail", n=1)
    reply = kc.get_shell_msg(timeout=10)["content"]
    assert reply["status"] == "ok" and reply["history"][0][2] == "'history check'"
