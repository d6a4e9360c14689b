"""A ``#| replay`` cell through a real kernel and jupyter_client, debugged as JupyterLab
debugs it: the must-show "a replay debug session on a recorded notebook, stepping through
a call that failed when it ran", in JupyterLab's terms (dumpCell, setBreakpoints,
configurationDone, execute, stopped, stackTrace, variables, next, evaluate, continue).

The kernel runs in this process (tests/kernel/test_debugger_runs.py's in_process_kernel),
so it runs this tree's code."""

from __future__ import annotations

import pathlib

import pytest
from jupyter_client.blocking.client import BlockingKernelClient

from kernelgate import Gateway, RunResult, save_run
from kernelgate.jupyter.server import KernelServer
from tests.kernel.helpers import collect, execute
from tests.kernel.test_debugger import debug, start, stop, wait_event
from tests.kernel.test_debugger_runs import dump_and_break, in_process_kernel, top_frame, variables

from .test_replay_debug import PROGRAM

pytestmark = pytest.mark.timeout(180)

# The recorded agent program (tests/notebooks/test_replay_debug.py). In a cell the marker
# is line 1, so the failing call is line 4.


def _fetch(doc_id: str) -> dict[str, str]:
    if doc_id.endswith("-gone"):
        raise KeyError(f"no document {doc_id!r}")
    return {"id": doc_id}


def record(tmp_path: pathlib.Path) -> pathlib.Path:
    bindings = {"search": lambda query: [f"{query}-1", f"{query}-gone"], "fetch": _fetch}
    result: RunResult = Gateway(bindings=bindings).run_sync(PROGRAM)
    assert result.ok and not result.calls[1].ok, result.message
    return pathlib.Path(save_run(result, tmp_path / "agent.ipynb"))


def test_a_replay_cell_debugged_as_jupyterlab_debugs_it(tmp_path: pathlib.Path) -> None:
    path = record(tmp_path)
    code = f"#| replay {path}\n{PROGRAM.rstrip()}"  # as a cell holds it

    def body(kc: BlockingKernelClient, _: KernelServer) -> None:
        start(kc)
        try:
            cell_path = dump_and_break(kc, code, 4)
            assert debug(kc, "configurationDone")["success"]
            msg_id = kc.execute(code)
            assert wait_event(kc, "stopped")["body"]["reason"] == "breakpoint"
            frame = top_frame(kc)
            assert frame["source"]["path"] == cell_path and frame["line"] == 4
            assert variables(kc, frame["id"], "Globals")["hits"]["value"] == (
                "['kernel-1', 'kernel-gone']"
            )
            lines = []
            for _ in range(3):  # over the call the recording answers with KeyError
                assert debug(kc, "next", {"threadId": 1})["success"]
                wait_event(kc, "stopped")
                frame = top_frame(kc)
                lines.append(frame["line"])
            assert lines == [5, 6, 7]
            shown = debug(
                kc,
                "evaluate",
                {"expression": "failure.ename", "frameId": frame["id"], "context": "repl"},
            )
            assert shown["body"]["result"] == "'KeyError'"
            assert debug(kc, "continue", {"threadId": 1})["success"]
            cell = collect(kc, msg_id)
        finally:
            stop(kc)
        assert cell.status == "ok" and cell.stdout() == "fetch failed: KeyError\n"
        reports = [
            m["content"]["data"]["text/plain"]
            for m in cell.outputs("display_data")
            if m["content"]["metadata"].get("kernelgate", {}).get("role") == "replay"
        ]
        assert len(reports) == 1 and reports[0].endswith(
            "MATCHES: same calls with the same answers, same status, stdout, stderr and value"
        )

    in_process_kernel(tmp_path, body)


def test_a_marker_alone_offers_the_recorded_program(tmp_path: pathlib.Path) -> None:
    path = record(tmp_path)
    marker = f"#| replay {path}"

    def body(kc: BlockingKernelClient, _: KernelServer) -> None:
        cell = execute(kc, marker)
        assert cell.status == "ok" and cell.stdout() == "fetch failed: KeyError\n"
        assert cell.reply is not None
        text = f"{marker}\n{PROGRAM}"
        assert cell.reply["content"]["payload"] == [
            {"source": "set_next_input", "text": text, "replace": True}
        ]
        [run] = [
            m["content"]["metadata"]["kernelgate"]
            for m in cell.outputs("display_data")
            if m["content"]["metadata"].get("kernelgate", {}).get("role") == "run"
        ]
        # The run record holds the program that ran (the marker and the recording's
        # program), so the saved cell replays as it ran.
        assert run["program"] == text, run["program"]
        bad = execute(kc, f"{marker} --cell three\n1")
        assert bad.status == "error" and bad.reply is not None
        assert "--cell takes a whole number, not 'three'" in bad.reply["content"]["evalue"]

    in_process_kernel(tmp_path, body)
