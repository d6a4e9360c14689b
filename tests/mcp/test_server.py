"""``kernelgate mcp`` as a subprocess, spoken to with the official SDK's client."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters

from kernelgate import Gateway
from kernelgate.demo import BINDINGS
from kernelgate.notebooks import SessionLog

from .conftest import TOOLS_SERVER, http_client, kernelgate_cmd, read_line, stop

PROGRAM = (
    "import asyncio\n"
    "hits = await tools.search('messages', limit=2)\n"
    "print(len(hits), 'hits')\n"
    "docs = await asyncio.gather(*(tools.fetch(h['id']) for h in hits))\n"
    "return sorted(d['stars'] for d in docs)"
)
FAILING = "print('about to fail')\nawait tools.fetch('no-such-doc')"


def _stdio(*args: str) -> StdioServerParameters:
    cmd = kernelgate_cmd("mcp", "--bindings", "kernelgate.demo:BINDINGS", "--timeout", "30", *args)
    return StdioServerParameters(command=cmd[0], args=cmd[1:])


async def _session(server: Any, calls: list[dict[str, Any]]) -> tuple[Any, list[Any]]:
    async with Client(server, read_timeout_seconds=60) as client:
        listed = await client.list_tools()
        results = [await client.call_tool("run_code", c) for c in calls]
    return listed.tools, results


def test_stdio_lists_one_tool_and_runs_programs(tmp_path: Path) -> None:
    tools, (ok, failed, bad) = asyncio.run(
        _session(
            _stdio("--record-to", str(tmp_path)),
            [{"code": PROGRAM}, {"code": FAILING}, {"program": "1"}],
        )
    )
    assert [t.name for t in tools] == ["run_code"]
    assert tools[0].input_schema["required"] == ["code"]
    # The description embeds describe(): the same stub a Gateway over these bindings gives.
    assert Gateway(bindings=BINDINGS).describe() in tools[0].description

    assert ok.is_error is False
    assert ok.content[0].text == "printed:\n2 hits\nreturned:\n[188, 412]"

    assert failed.is_error is True
    text = failed.content[0].text
    assert text.startswith("error (exception): ToolError: tools.fetch failed: KeyError:")
    assert "no document 'no-such-doc'" in text
    assert 'File "<program>", line 2' in text
    assert text.endswith("printed before the failure:\nabout to fail")

    assert bad.is_error is True and "takes one argument, code" in bad.content[0].text

    # The whole session is one notebook: both runs, the failure included.
    [path] = tmp_path.glob("session-*.ipynb")
    runs = SessionLog(path).runs()
    assert [r.status for r in runs] == ["ok", "exception"]
    assert runs[0].value == [188, 412]


def test_it_sits_in_front_of_mcp_servers() -> None:
    server = _stdio("--mcp", "t=" + " ".join(TOOLS_SERVER))
    tools, (r,) = asyncio.run(
        _session(server, [{"code": "return [await t.add(40), await tools.compute('sum', [1, 2])]"}])
    )
    assert "class t:" in tools[0].description and "async def add(a: int, b: int = 2)" in (
        tools[0].description
    )
    assert r.is_error is False, r.content[0].text
    assert r.content[0].text == "returned:\n[42, 3.0]"


def test_streamable_http_on_loopback() -> None:
    token = "a-test-token-" + "z" * 30
    proc = subprocess.Popen(
        kernelgate_cmd("mcp", "--bindings", "kernelgate.demo:BINDINGS", "--http", "127.0.0.1:0"),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "KERNELGATE_MCP_TOKEN": token},
    )
    try:
        line = read_line(proc, "stderr")
        assert line.startswith("kernelgate mcp: serving http://127.0.0.1:"), line
        url = line.split("serving ", 1)[1].strip()

        async def session() -> tuple[Any, list[Any]]:
            async with http_client(url, token) as client:
                listed = await client.list_tools()
                return listed.tools, [await client.call_tool("run_code", {"code": PROGRAM})]

        tools, (r,) = asyncio.run(session())
        assert [t.name for t in tools] == ["run_code"]
        assert r.is_error is False and r.content[0].text.endswith("returned:\n[188, 412]")
        proc.terminate()
        assert proc.wait(30) in (0, -15, 143)
    finally:
        stop(proc)


def _usage(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        kernelgate_cmd("mcp", *args),
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )


def test_usage_errors() -> None:
    r = _usage()
    assert r.returncode == 2 and "give --bindings MODULE:ATTR, --mcp NAME=COMMAND" in r.stderr
    r = _usage("--bindings", "kernelgate.demo:BINDINGS", "--http", "0.0.0.0:0")
    assert r.returncode == 2 and "loopback address only" in r.stderr
    r = _usage("--mcp", "not an identifier=python x.py")
    assert r.returncode == 2 and "must be a Python identifier" in r.stderr
    r = _usage("--bindings", "kernelgate.demo:BINDINGS", "--record-to", "/nonexistent/dir")
    assert r.returncode == 2 and "is not a directory" in r.stderr
    assert sys.executable  # the venv's interpreter ran them


TS_PROGRAM = (
    'const hits: {id: string}[] = await tools.search("messages", {limit: 2});\n'
    'console.log(hits.length, "hits");\n'
    "const docs = await Promise.all(hits.map((h) => tools.fetch(h.id)));\n"
    "docs.map((d: any) => d.stars).sort((a: number, b: number) => a - b)"
)


def test_stdio_runs_typescript_programs_with_language_typescript(tmp_path: Path) -> None:
    if shutil.which("node") is None:
        pytest.skip("node (>= 18) is not installed")
    tools, (ok, failed) = asyncio.run(
        _session(
            _stdio("--language", "typescript", "--record-to", str(tmp_path)),
            [{"code": TS_PROGRAM}, {"code": 'await tools.fetch("no-such-doc")'}],
        )
    )
    assert tools[0].description.startswith("Run a TypeScript program")
    assert Gateway(language="typescript", bindings=BINDINGS).describe() in tools[0].description
    assert ok.is_error is False
    assert ok.content[0].text == "printed:\n2 hits\nreturned:\n[188, 412]"
    assert failed.is_error is True and "ToolError" in failed.content[0].text
    [path] = tmp_path.glob("session-*.ipynb")
    assert [r.language for r in SessionLog(path).runs()] == ["typescript", "typescript"]


def test_run_code_states_the_rules_and_search_tools_finds_bindings(tmp_path: Path) -> None:
    """``--tool-search --max-description-chars 1024``: run_code's description fits, names
    the rules of a run, and points at search_tools; search_tools answers with the stub of
    the matches; a program finds bindings with kernelgate.search_tools too."""

    async def session() -> tuple[list[Any], Any, Any, Any]:
        server = _stdio("--tool-search", "--max-description-chars", "1024")
        async with Client(server, read_timeout_seconds=60) as client:
            listed = await client.list_tools()
            found = await client.call_tool("search_tools", {"query": "fetch a document"})
            bad = await client.call_tool("search_tools", {"query": "x" * 5000})
            ran = await client.call_tool(
                "run_code",
                {"code": "return 'async def fetch' in await kernelgate.search_tools('fetch')"},
            )
        return listed.tools, found, bad, ran

    tools, found, bad, ran = asyncio.run(session())
    assert [t.name for t in tools] == ["run_code", "search_tools"]
    description = tools[0].description
    assert len(description) <= 1024, len(description)
    assert "search_tools" in description
    assert "wall" in description.lower()  # the rules: this run's limits
    assert "async def fetch(" in found.content[0].text, found.content[0].text
    assert "class tools:" in found.content[0].text
    assert found.is_error is False
    assert bad.content[0].text.startswith("search_tools:"), bad.content[0].text
    assert ran.is_error is False and ran.content[0].text == "returned:\ntrue", ran.content[0].text


def test_without_tool_search_run_code_still_states_the_rules() -> None:
    async def session() -> list[Any]:
        async with Client(_stdio(), read_timeout_seconds=60) as client:
            return (await client.list_tools()).tools

    (tool,) = asyncio.run(session())
    # The rules of the runs this server makes (--timeout 30), before the stub.
    assert "Rules of every run: at most 30 s of wall time" in tool.description
    assert tool.description.index("Rules of every run") < tool.description.index("class tools:")
