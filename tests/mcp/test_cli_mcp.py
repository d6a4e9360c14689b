"""``kernelgate mcp --mcp``/``--mcp-env`` misuse and failures, through the real command:
one line on stderr, exit status 2, nothing served and no server process left."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from typing import Any

import pytest
from mcp import Client, StdioServerParameters

from tests.procs import marker_for, processes_with

from .conftest import TOOLS_SERVER, kernelgate_cmd

HANG = "import time; time.sleep(60)"
GARBAGE = "import sys; print('Welcome to my server!', flush=True); sys.stdin.read()"
EXITS = "import sys; sys.stdin.readline(); sys.exit(4)"


def _kernelgate(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        kernelgate_cmd("mcp", *args),
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
        env=env,
    )


def _one_line(r: subprocess.CompletedProcess[str]) -> str:
    assert r.returncode == 2, (r.returncode, r.stderr)
    lines = r.stderr.splitlines()
    assert len(lines) == 1, r.stderr
    assert r.stdout == ""
    return lines[0]


@pytest.mark.timeout(90)
@pytest.mark.parametrize(
    "server, said",
    [
        ("http://127.0.0.1:9/mcp", "which failed: ConnectError:"),
        ("/nonexistent/mcp-server --stdio", "could not start '/nonexistent/mcp-server'"),
        (f"{sys.executable} -c '{HANG}'", "within 1 s"),
        (f'{sys.executable} -c "{GARBAGE}"', "not MCP's JSON-RPC: 'Welcome to my server!'"),
        (f"{sys.executable} -c '{EXITS}'", "Connection closed"),
    ],
    ids=["unserved-url", "missing-command", "hangs", "garbage", "exits"],
)
def test_a_wrapped_server_that_fails_is_one_line_and_exit_2(
    server: str, said: str, request: pytest.FixtureRequest
) -> None:
    marker = marker_for(request.node.name)
    command = server if server.startswith("http") else f"{server} {marker}"
    line = _one_line(_kernelgate("--mcp", f"web={command}", "--connect-timeout", "1"))
    assert line.startswith("kernelgate: error: --mcp web=...: MCP server "), line
    assert said in line
    assert processes_with(marker) == []


def test_mcp_and_mcp_env_misuse_is_one_line_and_exit_2() -> None:
    tools = "t=" + " ".join(TOOLS_SERVER)
    cases: list[tuple[list[str], str]] = [
        (["--mcp-env", "t=A=1"], "--mcp-env goes with --mcp NAME=COMMAND"),
        ([f"--mcp={tools}", "--mcp-env", "u=A=1"], "no --mcp server is named 'u' (named: t)"),
        (["--mcp", "t=http://127.0.0.1:9/mcp", "--mcp-env", "t=A=1"], "'t' is the URL"),
        ([f"--mcp={tools}", "--mcp-env", "t=KG_TEST_UNSET_VAR"], "$KG_TEST_UNSET_VAR is not set"),
        ([f"--mcp={tools}", "--mcp-env", "t"], "expected NAME=VAR=VALUE or NAME=VAR"),
        ([f"--mcp={tools}", f"--mcp={tools}"], "the namespace 't' is already taken"),
        (["--mcp", "t=python 'unbalanced"], "not a command line: No closing quotation"),
        (["--mcp", "t=x", "--connect-timeout", "0"], "--connect-timeout"),
    ]
    env = {k: v for k, v in os.environ.items() if k != "KG_TEST_UNSET_VAR"}
    for args, said in cases:
        r = _kernelgate(*args, env=env)
        assert r.returncode == 2, (args, r.stderr)
        assert "Traceback" not in r.stderr and said in r.stderr.splitlines()[-1], (args, r.stderr)


@pytest.mark.timeout(120)
def test_mcp_env_gives_the_server_those_variables_and_no_others() -> None:
    env = {**os.environ, "KG_TEST_PASSED": "from-kernelgate", "KG_TEST_SECRET": "s3cret"}
    cmd = kernelgate_cmd(
        "mcp",
        "--mcp", "t=" + " ".join(TOOLS_SERVER),
        "--mcp-env", "t=KG_TEST_GREETING=hello=world",
        "--mcp-env", "t=KG_TEST_PASSED",
        "--timeout", "30",
    )
    program = (
        "names = ['KG_TEST_GREETING', 'KG_TEST_PASSED', 'KG_TEST_SECRET', 'PATH']\n"
        "return [await t.environ(n) is not None and (await t.environ(n))[:15] for n in names]"
    )

    async def session() -> Any:
        server = StdioServerParameters(command=cmd[0], args=cmd[1:], env=env)
        async with Client(server, read_timeout_seconds=60) as client:
            return await client.call_tool("run_code", {"code": program})

    r = asyncio.run(session())
    assert r.is_error is False, r.content[0].text
    # The value keeps its '='; the host's own secret never reached the server.
    assert r.content[0].text.endswith(
        'returned:\n["hello=world", "from-kernelgate", false, "' + os.environ["PATH"][:15] + '"]'
    )
