"""Debugging against a recording: replay cells (``#| replay``), replays with a debugger,
and stepping through a call that failed when it ran.

The recording is real: a program run in a child against bindings whose second call
raises, saved as a notebook. Replays answer from it, with no live call."""

from __future__ import annotations

import asyncio
import json
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kernelgate import Gateway, Limits, RunResult, save_run
from kernelgate.gateway.debug import RunDebugger
from kernelgate.jupyter.replaycell import ReplayMarker, replay_marker, run_replay_cell
from kernelgate.model.result import CallRecord
from kernelgate.notebooks import NotARunError, load_run, replay_async

from .conftest import FAST

pytestmark = pytest.mark.timeout(120)

#: The agent's program: the second binding call fails on the host (KeyError), and the
#: program catches the ToolError. Line numbers matter to the debugger tests.
PROGRAM = """\
hits = await tools.search("kernel")
try:
    doc = await tools.fetch(hits[1])
except ToolError as exc:
    failure = exc
    print("fetch failed:", exc.ename)
    doc = None
{"hits": hits, "doc": doc}
"""
CALL_LINE = 3  # the failing call
AFTER_LINE = 6  # the print after the failure


def search(query: str) -> list[str]:
    return [f"{query}-1", f"{query}-gone"]


def fetch(doc_id: str) -> dict[str, str]:
    if doc_id.endswith("-gone"):
        raise KeyError(f"no document {doc_id!r}")
    return {"id": doc_id}


@pytest.fixture(scope="module")
def recorded() -> RunResult:
    result = Gateway(bindings={"search": search, "fetch": fetch}, limits=FAST).run_sync(PROGRAM)
    assert result.ok, result.message
    first, second = result.calls
    assert first.ok and not second.ok and second.error is not None
    assert second.error.ename == "KeyError"
    assert result.stdout == "fetch failed: KeyError\n"
    return result


@pytest.fixture
def recording(tmp_path: Path, recorded: RunResult) -> Path:
    return save_run(recorded, tmp_path / "agent.ipynb")


# -- the marker ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("first", "expected"),
    [
        ("#| replay agent.ipynb", ReplayMarker("agent.ipynb")),
        ("#|replay runs/s.ipynb --cell 3", ReplayMarker("runs/s.ipynb", cell=3)),
        ("#| REPLAY s.ipynb --cell=-1", ReplayMarker("s.ipynb", cell=-1)),
        ("#| replay s.ipynb --cell-id ab12", ReplayMarker("s.ipynb", cell_id="ab12")),
        ("#| replay --position 7 s.ipynb", ReplayMarker("s.ipynb", position=7)),
        ("#| replay 'my runs/a b.ipynb'  ", ReplayMarker("my runs/a b.ipynb")),
        ("\n\n#| replay a.ipynb", ReplayMarker("a.ipynb", line=3)),
    ],
)
def test_the_marker_is_read(first: str, expected: ReplayMarker) -> None:
    assert replay_marker(first + "\nx = 1\n") == expected


@pytest.mark.parametrize(
    "code",
    ["x = 1", "", "# replay a.ipynb", "#| replayed a.ipynb", "#| setup", "x = 1\n#| replay a"],
)
def test_other_cells_are_not_replay_cells(code: str) -> None:
    assert replay_marker(code) is None


@pytest.mark.parametrize(
    ("first", "says"),
    [
        ("#| replay", "names no PATH"),
        ("#| replay a.ipynb --cell", "--cell needs a value"),
        ("#| replay a.ipynb --cell three", "--cell takes a whole number, not 'three'"),
        ("#| replay a.ipynb --position 2.5", "--position takes a whole number, not '2.5'"),
        ("#| replay a.ipynb --cell 1 --position 2", "not by --cell and --position"),
        ("#| replay a.ipynb --cells 1", "unknown option '--cells'"),
        ("#| replay a.ipynb b.ipynb", "got 'a.ipynb' and 'b.ipynb'"),
        ("#| replay 'a.ipynb", 'cannot read "\'a.ipynb"'),
        ("#| replay a.ipynb --cell-id=", "--cell-id needs a cell's id"),
    ],
)
def test_a_malformed_marker_says_what_and_the_form(first: str, says: str) -> None:
    with pytest.raises(ValueError) as caught:
        replay_marker(first + "\nx = 1")
    message = str(caught.value)
    assert says in message, message
    assert "#| replay PATH [--cell N | --cell-id ID | --position K]" in message


# -- replay cells, no debugger --------------------------------------------------------------


def cell_run(
    recording: Path, code: str, **kwargs: Any
) -> tuple[RunResult, list[dict[str, Any]], list[CallRecord]]:
    outputs: list[dict[str, Any]] = []
    calls: list[CallRecord] = []
    marker = replay_marker(code)
    assert marker is not None

    async def main() -> RunResult:
        return await run_replay_cell(
            marker,
            code,
            limits=FAST,
            on_output=outputs.append,
            on_call=calls.append,
            cwd=str(recording.parent),
            **kwargs,
        )

    return asyncio.run(main()), outputs, calls


def report_of(outputs: list[dict[str, Any]]) -> dict[str, Any]:
    """The replay cell's report output (the last), checked to be inert."""
    last = outputs[-1]
    assert last["metadata"]["kernelgate"]["role"] == "replay"
    html = last["data"]["text/html"]
    assert "<script" not in html and "<pre>" in html
    return last


def test_a_replay_cell_runs_against_the_recording(recording: Path, recorded: RunResult) -> None:
    code = f"#| replay {recording.name}\n{PROGRAM}"
    result, outputs, calls = cell_run(recording, code)
    assert result.status == "ok", result.message
    assert result.stdout == recorded.stdout and result.value == recorded.value
    # the failed call failed again, from the recording's answer: no binding ran
    assert [c.ok for c in calls] == [True, False]
    assert calls[1].error is not None and calls[1].error.ename == "KeyError"
    report = report_of(outputs)
    text = report["data"]["text/plain"]
    assert "recorded program, answers from the recording" in text  # the marker is no edit
    assert text.endswith(
        "MATCHES: same calls with the same answers, same status, stdout, stderr and value"
    )
    assert report["metadata"]["kernelgate"]["diverged"] is False
    assert [o["name"] for o in outputs if o["output_type"] == "stream"] == ["stdout"]


def test_an_edited_line_changes_the_outcome(recording: Path) -> None:
    edited = PROGRAM.replace("hits[1]", "hits[0]")  # fetch the document that exists
    result, outputs, calls = cell_run(recording, f"#| replay {recording.name}\n{edited}")
    # fetch('kernel-1') is a call the recording lacks: the program's `except ToolError`
    # catches NotRecorded, and the run goes on to another stdout
    assert result.status == "ok", result.message
    assert result.stdout == "fetch failed: NotRecorded\n"
    assert [c.error.ename for c in calls if c.error] == ["NotRecorded"]
    report = report_of(outputs)
    text = report["data"]["text/plain"]
    assert "edited program" in text and "+ tools.fetch('kernel-1')" in text
    assert "- tools.fetch('kernel-gone')" in text
    assert "+fetch failed: NotRecorded" in text and "DIVERGED: 3 differences" in text
    assert report["metadata"]["kernelgate"]["diverged"] is True


def test_a_call_the_recording_lacks_is_not_recorded_and_never_live(recording: Path) -> None:
    edited = PROGRAM.replace('"kernel"', '"debugger"')
    result, outputs, calls = cell_run(recording, f"#| replay {recording.name}\n{edited}")
    assert result.status == "exception"
    assert calls[0].error is not None and calls[0].error.ename == "NotRecorded"
    assert "it recorded tools.search with ('kernel')" in calls[0].error.evalue
    assert "the program ended here" in report_of(outputs)["data"]["text/plain"]


def test_a_marker_alone_runs_the_recorded_program_and_offers_it(
    recording: Path, recorded: RunResult
) -> None:
    payload: list[dict[str, Any]] = []
    code = f"#| replay {recording.name}\n\n"
    result, outputs, _ = cell_run(recording, code, payload=payload)
    assert result.ok and result.stdout == recorded.stdout
    text = f"#| replay {recording.name}\n{PROGRAM}"
    assert payload == [{"source": "set_next_input", "text": text, "replace": True}]
    assert result.program == text  # what ran is what the cell will hold: lines map 1:1
    assert "recorded program" in report_of(outputs)["data"]["text/plain"]


@pytest.mark.parametrize(
    ("marker", "ename", "says"),
    [
        ("#| replay missing.ipynb", "FileNotFoundError", "cannot read the recording"),
        ("#| replay prog.py", "NotARunError", "is not a notebook"),
        ("#| replay agent.ipynb --cell 4", "NotARunError", "has no run 4"),
    ],
)
def test_a_recording_it_cannot_use_is_an_error_of_the_cell(
    recording: Path, marker: str, ename: str, says: str
) -> None:
    (recording.parent / "prog.py").write_text(PROGRAM)
    result, outputs, calls = cell_run(recording, marker + "\nx = 1\n")
    assert result.status == "exception" and result.error is not None
    assert result.error.ename == ename and says in result.error.evalue, result.error
    assert result.error.evalue.startswith("#| replay: ")
    assert outputs == [] and calls == []


def test_replay_async_passes_outputs_and_calls_on(recording: Path) -> None:
    outputs: list[dict[str, Any]] = []
    calls: list[CallRecord] = []

    async def main() -> Any:
        return await replay_async(recording, on_output=outputs.append, on_call=calls.append)

    report = asyncio.run(main())
    assert not report.diverged, report.format()
    assert [c.name for c in calls] == ["search", "fetch"]
    assert any(o.get("text") == "fetch failed: KeyError\n" for o in outputs)


def test_a_replay_cell_recorded_by_the_kernel_reads_back_without_its_report(
    recording: Path, tmp_path: Path
) -> None:
    """The report output is the kernel's words: a saved replay cell loads as a run whose
    outputs are the program's only."""
    from kernelgate.notebooks.cellrun import run_record_output

    code = f"#| replay {recording.name}\n{PROGRAM}"
    result, outputs, calls = cell_run(recording, code)
    from kernelgate.notebooks.calls import call_output

    cell_outputs = [*outputs[:-1], *(call_output(c) for c in calls), outputs[-1]]
    cell_outputs.append(run_record_output(result, code, code))
    nb = {
        "nbformat": 4,
        "nbformat_minor": 5,
        "metadata": {},
        "cells": [
            {
                "cell_type": "code",
                "id": "c1",
                "source": code,
                "metadata": {},
                "execution_count": 1,
                "outputs": cell_outputs,
            }
        ],
    }
    saved = tmp_path / "kernel.ipynb"
    saved.write_text(json.dumps(nb))
    run = load_run(saved)
    assert run.program == code and len(run.calls) == 2
    assert all((o.get("metadata") or {}).get("kernelgate") is None for o in run.outputs)


# -- a debugged replay ----------------------------------------------------------------------


class Driver:
    """Drives a :class:`RunDebugger` from the events it gets, as a front end does."""

    def __init__(self, breakpoints: list[int]) -> None:
        self.events: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.seen: list[str] = []
        self.dbg = RunDebugger(breakpoints, on_event=self._event)

    def _event(self, event: dict[str, Any]) -> None:
        self.seen.append(event["event"])
        self.events.put_nowait(event)

    async def stop(self) -> dict[str, Any]:
        """The next ``stopped`` event (skipping ``continued``)."""
        while True:
            event = await asyncio.wait_for(self.events.get(), 30)
            if event["event"] == "stopped":
                return event
            assert event["event"] != "terminated", self.seen

    async def line(self) -> int:
        reply = await self.dbg.request("stackTrace", {"threadId": 1})
        assert reply["success"], reply
        frames = reply["body"]["stackFrames"]
        assert frames[0]["source"]["path"] == "<program>"
        return int(frames[0]["line"])

    async def value(self, expression: str) -> str:
        reply = await self.dbg.request(
            "evaluate", {"expression": expression, "frameId": await self.frame(), "context": "repl"}
        )
        assert reply["success"], reply
        return str(reply["body"]["result"])

    async def frame(self) -> int:
        reply = await self.dbg.request("stackTrace", {"threadId": 1})
        return int(reply["body"]["stackFrames"][0]["id"])

    async def variables(self, scope: str) -> dict[str, str]:
        reply = await self.dbg.request("scopes", {"frameId": await self.frame()})
        ref = next(s["variablesReference"] for s in reply["body"]["scopes"] if s["name"] == scope)
        reply = await self.dbg.request("variables", {"variablesReference": ref})
        return {v["name"]: v["value"] for v in reply["body"]["variables"]}

    async def step_to(self, line: int, limit: int = 8) -> None:
        for _ in range(limit):
            if await self.line() == line:
                return
            assert (await self.dbg.request("next", {"threadId": 1}))["success"]
            await self.stop()
        raise AssertionError(f"never reached line {line}")


def debugged(
    source: Path, program: str, breakpoints: list[int], steps: Callable[[Driver], Any]
) -> Any:
    driver = Driver(breakpoints)

    async def main() -> Any:
        run = asyncio.ensure_future(
            replay_async(source, program=program, limits=FAST, debug=driver.dbg)
        )
        try:
            await steps(driver)
        finally:
            if not run.done() and driver.dbg.stopped:
                await driver.dbg.request("continue", {"threadId": 1})
        return await asyncio.wait_for(run, 60)

    return asyncio.run(main())


def test_stepping_over_the_call_that_failed_when_it_ran(recording: Path) -> None:
    """The must-show: break before the call that failed, step over it, see the ToolError
    the recording's answer raises, read the variables, continue to a matching end."""
    seen: dict[str, Any] = {}

    async def steps(d: Driver) -> None:
        stop = await d.stop()
        assert stop["body"]["reason"] == "breakpoint"
        assert await d.line() == CALL_LINE
        seen["hits"] = await d.value("hits")
        assert (await d.dbg.request("next", {"threadId": 1}))["success"]
        await d.stop()
        await d.step_to(AFTER_LINE)  # through the except clause
        seen["failure"] = await d.value("repr(failure)")
        seen["ename"] = await d.value("failure.ename")
        seen["globals"] = await d.variables("Globals")
        assert (await d.dbg.request("continue", {"threadId": 1}))["success"]

    report = debugged(recording, PROGRAM, [CALL_LINE], steps)
    assert "kernel-gone" in seen["hits"]
    assert "ToolError" in seen["failure"] and "no document" in seen["failure"]
    assert seen["ename"] == "'KeyError'"
    assert {"hits", "failure", "exc"} <= set(seen["globals"])
    assert "doc" not in seen["globals"] or seen["globals"]["doc"] == "None"
    assert not report.diverged, report.format()
    assert report.result.stdout == "fetch failed: KeyError\n"


def test_a_debugged_replay_cell_stops_at_cell_lines(recording: Path) -> None:
    """In a replay cell the marker is line 1: the cell's lines are the program's."""
    code = f"#| replay {recording.name}\n{PROGRAM}"
    marker = replay_marker(code)
    assert marker is not None
    driver = Driver([CALL_LINE + 1])
    lines: list[int] = []

    async def main() -> RunResult:
        run = asyncio.ensure_future(
            run_replay_cell(marker, code, limits=FAST, debug=driver.dbg, cwd=str(recording.parent))
        )
        await driver.stop()
        lines.append(await driver.line())
        assert (await driver.dbg.request("continue", {"threadId": 1}))["success"]
        return await asyncio.wait_for(run, 60)

    result = asyncio.run(main())
    assert lines == [CALL_LINE + 1]
    assert result.ok and result.stdout == "fetch failed: KeyError\n"
    assert driver.seen[-1] == "terminated"


# -- a recording that is not a file ---------------------------------------------------------


def _unblock(fifo: Path) -> None:
    """Open ``fifo`` for writing, so a reader blocked opening it returns (cleanup)."""
    fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
    os.close(fd)


def test_a_fifo_or_a_device_is_refused_without_reading_it(tmp_path: Path) -> None:
    """``#| replay PATH`` reads a file on the host when a cell runs: a FIFO must not
    block the cell (nothing interrupts a read), nor a device feed it 512 MiB."""
    fifo = tmp_path / "fifo.ipynb"
    os.mkfifo(fifo)
    outcome: list[BaseException] = []

    def read() -> None:
        try:
            load_run(fifo)
        except BaseException as exc:
            outcome.append(exc)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(10)
    if reader.is_alive():
        _unblock(fifo)
        reader.join(10)
        raise AssertionError("load_run blocked on a FIFO")
    assert isinstance(outcome[0], NotARunError), outcome
    assert "not a regular file" in str(outcome[0])
    with pytest.raises(NotARunError, match="/dev/zero is not a regular file"):
        load_run("/dev/zero")
    result, outputs, _ = cell_run(tmp_path / "x", "#| replay fifo.ipynb\nx = 1\n")
    assert result.status == "exception" and result.error is not None
    assert "not a regular file" in result.error.evalue and outputs == []


def test_a_replay_cell_is_interrupted_through_its_own_gateway(tmp_path: Path) -> None:
    """The kernel's interrupt reaches a replay cell: it runs on a gateway of its own (the
    recording's stand-ins), handed to the caller before the run."""
    spinner = "print('ready', flush=True)\nwhile True:\n    pass\n"
    stopped = Gateway(limits=Limits(wall_seconds=2, kill_grace_seconds=0.5)).run_sync(spinner)
    assert stopped.status == "timeout", stopped.message
    save_run(stopped, tmp_path / "spin.ipynb")
    gateways: list[Gateway] = []
    interrupted: list[int] = []

    def on_output(output: dict[str, Any]) -> None:
        if output.get("text") == "ready\n":
            interrupted.append(gateways[0].interrupt())

    code = "#| replay spin.ipynb\n"

    async def main() -> RunResult:
        marker = replay_marker(code)
        assert marker is not None
        return await run_replay_cell(
            marker,
            code,
            limits=FAST,  # 30 s: only the interrupt ends it soon
            on_output=on_output,
            on_gateway=gateways.append,
            cwd=str(tmp_path),
        )

    result = asyncio.run(main())
    assert interrupted == [1]
    assert result.status == "interrupted", result.message


def test_docstring_examples() -> None:
    import doctest

    from kernelgate.jupyter import replaycell

    assert doctest.testmod(replaycell).failed == 0


def test_a_crafted_recording_shows_inert_in_the_report(tmp_path: Path, recording: Path) -> None:
    """The report quotes the recording (its stdout, in a diff): markup in it is text."""
    nb = json.loads(recording.read_text())
    for output in nb["cells"][0]["outputs"]:
        if output.get("output_type") == "stream":
            output["text"] = "<img src=x onerror=alert(1)><script>alert(2)</script>\n"
    (tmp_path / "crafted.ipynb").write_text(json.dumps(nb))
    code = "#| replay crafted.ipynb\n" + PROGRAM.rstrip("\n")  # as a cell holds it
    result, outputs, _ = cell_run(tmp_path / "x", code)
    assert result.ok
    report = report_of(outputs)
    html = report["data"]["text/html"]
    assert "<img" not in html and "<script" not in html
    assert "&lt;script&gt;alert(2)&lt;/script&gt;" in html
    assert "recorded program" in report["data"]["text/plain"]  # no final newline: no edit
    assert "DIVERGED: 1 difference" in html


@pytest.mark.parametrize(("level", "pool_size"), [("process", 0), ("namespaces+landlock", 4)])
def test_a_replay_cell_runs_as_the_kernel_s_cells_run(
    recording: Path, level: str, pool_size: int
) -> None:
    """``like=`` the kernel's gateway: the replay gets its sandbox level, pool and
    environment (never its bindings: calls are still answered from the recording)."""
    kernel = Gateway(sandbox=level, pool_size=pool_size, env={"KG_MARK": level})
    code = f"#| replay {recording.name}\nimport os\nprint(os.environ['KG_MARK'])\n{PROGRAM}"
    result, _, calls = cell_run(recording, code, like=kernel)
    assert result.ok, result.message
    assert result.isolation == level
    if pool_size == 0:  # (a pool's first run may be cold too: it does not wait for it)
        assert result.usage["warm"] is False
    assert result.stdout == f"{level}\nfetch failed: KeyError\n"
    assert [c.ok for c in calls] == [True, False]


def test_a_replay_gateway_takes_only_its_own_settings(recording: Path) -> None:
    async def main() -> Any:
        return await replay_async(recording, gateway_options={"record_to": "elsewhere"})

    with pytest.raises(ValueError, match=r"gateway_options \['record_to'\] are not"):
        asyncio.run(main())
