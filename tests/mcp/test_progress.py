"""``kernelgate mcp``'s run_code, watched: MCP progress notifications while a program runs
(to a client that asked with a progressToken), and the run as structured content that
the SDK client validates against the tool's outputSchema; over stdio and HTTP."""

from __future__ import annotations

import asyncio
import contextlib
import doctest
import importlib
import os
import re
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from mcp import Client, StdioServerParameters

from kernelgate.mcp.progress import INTERVAL, ProgressReporter
from kernelgate.mcp.structured import OUTPUT_SCHEMA
from kernelgate.model.result import CallRecord

from .conftest import HERE, http_client, kernelgate_cmd, read_line, stop

# Prints a lot (the notifications must not follow each print), calls a binding, then
# waits in gate() until the test has heard of that call through a progress notification.
PROGRAM = (
    "for i in range(2000):\n"
    "    print('line', i)\n"
    "await tools.first()\n"
    "opened = await tools.gate()\n"
    "print('after the gate')\n"
    "return opened"
)
ARGS = ("--bindings-path", str(HERE), "--bindings", "gate_bindings:BINDINGS", "--timeout", "20")
TOKEN = "a-progress-token-" + "p" * 30


@pytest.fixture
def gate(tmp_path: Path) -> Iterator[str]:
    path = str(tmp_path / "gate")
    os.mkfifo(path)
    yield path
    # A run that never heard of its gate must not hold the server's thread forever.
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        os.write(fd, b"late\n")
        os.close(fd)


def _release(path: str) -> None:
    with open(path, "w", encoding="utf-8") as fifo:
        fifo.write("go\n")


@contextlib.asynccontextmanager
async def _client(transport: str, gate: str) -> AsyncIterator[Client]:
    if transport == "stdio":
        cmd = kernelgate_cmd("mcp", *ARGS)
        params = StdioServerParameters(command=cmd[0], args=cmd[1:], env={"KG_TEST_GATE": gate})
        async with Client(params, read_timeout_seconds=60) as client:
            yield client
        return
    proc = subprocess.Popen(
        kernelgate_cmd("mcp", *ARGS, "--http", "127.0.0.1:0"),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "KERNELGATE_MCP_TOKEN": TOKEN, "KG_TEST_GATE": gate},
    )
    try:
        line = read_line(proc, "stderr")
        assert line.startswith("kernelgate mcp: serving http://127.0.0.1:"), line
        async with http_client(line.split("serving ", 1)[1].strip(), TOKEN) as client:
            yield client
    finally:
        stop(proc)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_run_code_sends_progress_while_the_program_runs(transport: str, gate: str) -> None:
    notes: list[tuple[float, float | None, str | None]] = []
    elapsed: list[float] = []
    heard: list[str] = []

    async def main() -> Any:
        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            notes.append((progress, total, message))
            if not heard and message is not None and message.startswith("tools.first returned"):
                heard.append(message)
                # The program is waiting in gate() for exactly this: let it go on.
                await asyncio.to_thread(_release, gate)

        async with _client(transport, gate) as client:
            started = time.monotonic()
            try:
                return await client.call_tool(
                    "run_code", {"code": PROGRAM}, progress_callback=on_progress
                )
            finally:
                elapsed.append(time.monotonic() - started)

    result = asyncio.run(main())
    assert result.is_error is False, result.content[0].text
    assert result.content[0].text.endswith('after the gate\nreturned:\n"go"')
    # It was heard while the program waited: the gate opened only on that notification.
    [message] = heard
    assert re.fullmatch(
        r"tools\.first returned in \d+\.\d\d s \(\d+ outputs, 1 binding call so far\)", message
    ), message
    progress = [p for p, _, _ in notes]
    assert progress == sorted(set(progress)), "progress must grow with every notification"
    assert all(total is None for _, total, _ in notes)
    # Bounded in rate: of 2,002 prints and calls, the first at once, then one per 0.2 s.
    assert 1 <= len(notes) <= 2 + elapsed[0] / INTERVAL, (notes, elapsed)
    assert progress[0] >= 1 and max(progress) >= 2001
    sc = result.structured_content
    assert sc["status"] == "ok" and sc["value"] == "go" and sc["calls"] == 2


def test_run_code_returns_structured_content_its_output_schema_describes(gate: str) -> None:
    programs = [
        "print('hi')\nreturn {'n': await tools.first()}",
        "print('about to fail')\nx = 1\n1 / 0",
        "print('x' * 50000)\nreturn 1",
    ]

    async def main() -> tuple[Any, list[Any]]:
        async with _client("stdio", gate) as client:
            listed = await client.list_tools()
            # The SDK's client validates each result that is not an error against the
            # outputSchema it listed (a RuntimeError if it does not conform).
            return listed.tools, [await client.call_tool("run_code", {"code": p}) for p in programs]

    tools, (ok, failed, long) = asyncio.run(main())
    jsonschema.Draft202012Validator.check_schema(tools[0].output_schema)
    assert tools[0].output_schema == OUTPUT_SCHEMA
    for r in (ok, failed, long):
        jsonschema.validate(r.structured_content, OUTPUT_SCHEMA)

    assert ok.is_error is False and ok.content[0].text == 'printed:\nhi\nreturned:\n{"n": "first"}'
    sc = ok.structured_content
    assert (sc["status"], sc["ok"], sc["value"], sc["stdout"], sc["error"]) == (
        "ok",
        True,
        {"n": "first"},
        "hi\n",
        None,
    )
    assert (sc["calls"], sc["failed_calls"], sc["cut"]) == (1, 0, False)
    assert re.fullmatch(r"\d{8}T\d{6}-[0-9a-f]{8}", sc["run_id"])

    assert failed.is_error is True
    sc = failed.structured_content
    assert (sc["status"], sc["ok"], sc["value"]) == ("exception", False, None)
    assert sc["error"]["ename"] == "ZeroDivisionError"
    assert sc["error"]["evalue"] == "division by zero"
    assert any('File "<program>", line 3' in line for line in sc["error"]["traceback"])
    assert sc["stdout"] == "about to fail\n"

    # What was printed is cut to max_chars here too, saying how much.
    sc = long.structured_content
    assert sc["cut"] is True and len(sc["stdout"]) < 21_000
    cut = int(re.search(r"kernelgate cut (\d+) characters", sc["stdout"]).group(1))  # type: ignore[union-attr]
    kept = len(sc["stdout"]) - len(re.search(r"\n\[\.\.\. .*? \.\.\.\]\n", sc["stdout"]).group(0))  # type: ignore[union-attr]
    assert cut + kept == 50001


def test_the_reporter_quotes_little_and_a_client_that_went_does_not_stop_the_run() -> None:
    async def main() -> tuple[list[tuple[float, str]], int, int]:
        sent: list[tuple[float, str]] = []
        arrived = asyncio.Event()

        async def send(progress: float, message: str) -> None:
            sent.append((progress, message))
            arrived.set()

        reporter = ProgressReporter(send, interval=0.05)
        async with reporter.running():
            # A flood of outputs, the last a huge coloured line: one notification at first.
            for i in range(10_000):
                reporter.on_output({"output_type": "stream", "name": "stdout", "text": f"{i}\n"})
            reporter.on_output(
                {"output_type": "stream", "name": "stderr", "text": "\x1b[31m" + "z" * 10**6}
            )
            await arrived.wait()
            arrived.clear()
            reporter.on_call(CallRecord(0, "tools", "f" * 5000, [], {}, ok=True))
            await arrived.wait()

        tried = asyncio.Event()

        async def gone(progress: float, message: str) -> None:
            tried.set()
            raise ConnectionResetError("the client went")

        dead = ProgressReporter(gone, interval=0.05)
        async with dead.running():
            dead.on_output({"output_type": "stream", "name": "stdout", "text": "x\n"})
            await tried.wait()  # the send failed: the reporting ends, not the run
            for _ in range(100):  # the listeners still take events, and cost nothing
                dead.on_output({"output_type": "stream", "name": "stdout", "text": "x\n"})
        return sent, reporter.sent, dead.sent

    sent, count, dead = asyncio.run(main())
    assert count == len(sent) == 2 and dead == 0
    (p1, m1), (p2, m2) = sent
    assert p1 == 10_001 and p2 == 10_002
    assert m1.startswith("stderr: zzz") and "\x1b" not in m1 and len(m1) < 300
    assert m1.endswith("(10001 outputs, 0 binding calls so far)")
    assert len(m2) < 300 and m2.endswith("(10001 outputs, 1 binding call so far)")


@pytest.mark.parametrize("module", ["kernelgate.mcp.progress", "kernelgate.mcp.structured"])
def test_doctests(module: str) -> None:
    result = doctest.testmod(importlib.import_module(module), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0
