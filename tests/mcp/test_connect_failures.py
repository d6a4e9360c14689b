"""kernelgate.mcp.connect against servers that fail: each failure is one McpServerError,
within connect_timeout, naming the server, what was tried and what to do, and leaves no
process, task or open connection behind."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

import kernelgate.mcp
from tests.procs import marker_for, processes_with

from .conftest import HERE, TOOLS_SERVER, read_line, stop

#: What the SDK's stop of a server process that ignores its closed stdin adds to
#: connect_timeout: 2 s of grace, then SIGTERM (and, ignored, 2 s more and SIGKILL).
STDIN_GRACE = 2.0
SIGTERM_GRACE = 2.0
SLACK = 3.0


def fail_connect(server: Any, **kwargs: Any) -> tuple[kernelgate.mcp.McpServerError, float]:
    """Connect to ``server`` expecting failure: the error, the seconds it took, and a check
    that the event loop was left with no task of ours."""

    async def main() -> kernelgate.mcp.McpServerError:
        try:
            async with kernelgate.mcp.connect(server, **kwargs):
                raise AssertionError(f"connected to {server!r}")
        except kernelgate.mcp.McpServerError as exc:
            error = exc
        await asyncio.sleep(0)  # let finished tasks be collected before counting
        left = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        assert left == [], f"tasks left behind: {left}"
        return error

    start = time.monotonic()
    error = asyncio.run(main())
    return error, time.monotonic() - start


def python(code: str, marker: str) -> list[str]:
    return [sys.executable, "-c", code, marker]


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "code, bound",
    [
        # Reads nothing, answers nothing, stops when SIGTERMed: 13 s before the fix.
        ("import time; time.sleep(60)", STDIN_GRACE),
        # Reads the requests and never answers; exits when its stdin closes.
        ("import sys\nfor line in sys.stdin: pass", 0.0),
        # Ignores SIGTERM too: the SDK's SIGKILL ends it.
        (
            "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)",
            STDIN_GRACE + SIGTERM_GRACE,
        ),
    ],
    ids=["sleeps", "reads-never-answers", "ignores-sigterm"],
)
def test_a_server_that_hangs_at_start_fails_within_connect_timeout(
    code: str, bound: float, request: pytest.FixtureRequest
) -> None:
    marker = marker_for(request.node.name)
    error, took = fail_connect(python(code, marker), connect_timeout=1)
    assert took < 1 + bound + SLACK, f"took {took:.1f} s"
    message = str(error)
    assert message.startswith(f"MCP server {sys.executable} -c ")
    assert "did not complete MCP's handshake and tool listing within 1 s" in message
    assert "connect_timeout" in message and "run it by hand" in message
    assert processes_with(marker) == []


def test_a_missing_command_is_a_server_error_saying_what_to_do() -> None:
    error, took = fail_connect(["/nonexistent/mcp-server", "--stdio"])
    assert took < SLACK
    assert str(error) == (
        "MCP server /nonexistent/mcp-server --stdio: could not start '/nonexistent/mcp-server': "
        "No such file or directory; give the command's full path, or a PATH in its "
        "environment (connect(env=...), kernelgate mcp --mcp-env) that finds it"
    )
    error, _ = fail_connect("no-such-mcp-server-anywhere")
    assert "could not start 'no-such-mcp-server-anywhere'" in str(error)


def test_a_server_that_exits_during_the_handshake(request: pytest.FixtureRequest) -> None:
    marker = marker_for(request.node.name)
    code = "import sys; sys.stdin.readline(); sys.exit(4)"
    error, took = fail_connect(python(code, marker), connect_timeout=10)
    assert took < SLACK
    assert "Connection closed" in str(error) and "run the command by hand" in str(error)
    # What it ran with: the few variables the SDK passes on, nothing of ours.
    assert "environment variables HOME" in str(error)
    assert processes_with(marker) == []


def test_a_server_that_writes_garbage_on_stdout(request: pytest.FixtureRequest) -> None:
    marker = marker_for(request.node.name)
    code = "import sys; print('Welcome to my server!', flush=True); sys.stdin.read()"
    error, took = fail_connect(python(code, marker), connect_timeout=1)
    assert took < 1 + SLACK
    assert "it wrote something that is not MCP's JSON-RPC: 'Welcome to my server!'" in str(error)
    assert processes_with(marker) == []


def test_an_url_nobody_serves_is_a_server_error_at_once() -> None:
    error, took = fail_connect("http://127.0.0.1:9/mcp", connect_timeout=5)
    assert took < SLACK
    assert str(error).startswith(
        "MCP server http://127.0.0.1:9/mcp: sent it MCP requests over HTTP, which failed: "
        "ConnectError:"
    )
    assert str(error).endswith("is the server running, and is the URL right?")


@pytest.fixture
def status_server(request: pytest.FixtureRequest) -> Iterator[str]:
    proc = subprocess.Popen(
        [sys.executable, str(HERE / "status_server.py"), str(request.param)],
        stdout=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    try:
        yield f"http://127.0.0.1:{int(read_line(proc, 'stdout'))}/mcp"
    finally:
        stop(proc)


@pytest.mark.parametrize(
    "status_server, said, hint",
    [
        (401, "HTTP 401 Unauthorized", "it wants credentials: connect(headers="),
        (404, "HTTP 404 Not Found", "is the URL the server's MCP endpoint (often /mcp)?"),
        (500, "HTTP 500 Internal Server Error", "the server failed: see its own log"),
    ],
    indirect=["status_server"],
)
def test_an_http_server_that_refuses_names_its_status(
    status_server: str, said: str, hint: str
) -> None:
    error, took = fail_connect(status_server, connect_timeout=5)
    assert took < SLACK
    assert str(error).startswith(f"MCP server {status_server}: sent it MCP requests over HTTP")
    assert f"(it answered {said}); {hint}" in str(error)


def test_the_tools_server_still_connects_after_all_that() -> None:
    async def main() -> Any:
        async with kernelgate.mcp.connect(TOOLS_SERVER, connect_timeout=30) as t:
            return await t["add"](1, 2)

    assert asyncio.run(main()) == 3


@pytest.mark.timeout(60)
def test_a_connect_cancelled_while_the_server_starts_leaves_nothing_behind(
    request: pytest.FixtureRequest,
) -> None:
    marker = marker_for(request.node.name)

    async def main() -> None:
        async def hold() -> None:
            server = python("import time; time.sleep(60)", marker)
            async with kernelgate.mcp.connect(server, connect_timeout=30):
                raise AssertionError("connected")

        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(hold(), 1)
        left = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        assert left == [], f"tasks left behind: {left}"

    start = time.monotonic()
    asyncio.run(main())
    assert time.monotonic() - start < 1 + STDIN_GRACE + SLACK
    assert processes_with(marker) == []
