"""A wrapped MCP server that goes away: the call in flight fails clearly (never hangs, and
is not repeated: it may have taken effect), and the next call connects again, starting a
command server anew. Real SDK servers over stdio and streamable HTTP."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest

import kernelgate.mcp
from kernelgate import Gateway, Limits
from tests.procs import pid_alive

from .conftest import TOOLS_SERVER, read_line, stop

FAST = Limits(wall_seconds=60, kill_grace_seconds=0.5)


async def _gone(pid: int, timeout: float = 10.0) -> None:
    """Wait (polling /proc, at most ``timeout`` s) until process ``pid`` has exited."""
    deadline = time.monotonic() + timeout
    while pid_alive(pid):
        assert time.monotonic() < deadline, f"process {pid} did not exit"
        await asyncio.sleep(0.01)


@pytest.mark.timeout(90)
def test_a_server_that_dies_mid_call_fails_that_call_and_the_next_starts_it_again() -> None:
    program = (
        "first = await t.pid()\n"
        "try:\n"
        "    await t.die()\n"
        "except ToolError as exc:\n"
        "    failed = [exc.ename, str(exc)]\n"
        "return first, failed, await t.pid(), await t.add(1)"
    )

    async def main() -> Any:
        async with kernelgate.mcp.connect(TOOLS_SERVER) as t:
            async with Gateway(namespaces={"t": t}, pool_size=0) as gw:
                return await gw.run(program, limits=FAST)

    r = asyncio.run(main())
    assert r.status == "ok", r.message
    first, (ename, message), second, added = r.value
    assert ename == "McpServerError"
    assert "went away during the call to 'die'" in message
    assert "The call is not repeated (it may have taken effect)" in message
    assert "the next call starts the server again" in message
    assert second != first and not pid_alive(first)  # a new server process
    assert added == 3


@pytest.mark.timeout(90)
def test_a_server_killed_between_calls_is_started_again_by_the_next_call() -> None:
    # pid() is marked read-only: a call of it that finds the connection gone (even one
    # sent in the instant before the death was noticed) is repeated on a new connection.
    async def main() -> tuple[int, int, int]:
        async with kernelgate.mcp.connect(TOOLS_SERVER) as t:
            first = await t["pid"]()
            os.kill(first, signal.SIGKILL)
            await _gone(first)
            # Calls that find it gone together share one new server, not one each.
            seconds = await asyncio.gather(*(t["pid"]() for _ in range(5)))
            assert len(set(seconds)) == 1, seconds
            return first, seconds[0], await t["add"](2, 3)

    first, second, added = asyncio.run(main())
    assert second != first and added == 5
    assert not pid_alive(second)  # the block's end stopped the new one too


def _http_server(port: int = 0) -> tuple[subprocess.Popen[str], int]:
    proc = subprocess.Popen(
        [*TOOLS_SERVER, "http", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    return proc, int(read_line(proc, "stdout"))


@pytest.fixture
def servers() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for proc in started:
        stop(proc)


async def _fails(call: Callable[[], Awaitable[Any]]) -> str:
    start = time.monotonic()
    with pytest.raises(kernelgate.mcp.McpServerError) as caught:
        await call()
    assert time.monotonic() - start < 10
    return str(caught.value)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("how", ["between-calls", "mid-call"])
def test_an_http_server_that_goes_away_fails_clearly_and_is_reached_again_once_back(
    how: str, servers: list[subprocess.Popen[str]]
) -> None:
    proc, port = _http_server()
    servers.append(proc)
    url = f"http://127.0.0.1:{port}/mcp"

    async def main() -> list[str]:
        messages = []
        async with kernelgate.mcp.connect(url, connect_timeout=10, call_timeout=30) as t:
            assert await t["add"](1, 2) == 3
            if how == "mid-call":
                messages.append(await _fails(t["die"]))
            else:
                stop(proc)
            # Gone: every call fails at once, saying so.
            messages.append(await _fails(lambda: t["add"](1, 2)))
            messages.append(await _fails(lambda: t["add"](1, 2)))
            # Back (a new process on the same port, which knows no session): reached again.
            again, _ = _http_server(port)
            servers.append(again)
            assert await t["add"](1, 2) == 3
            assert await t["greet"]("bob") == "hello bob"
        return messages

    messages = asyncio.run(main())
    for message in messages:
        assert url in message, message
    assert "ConnectError" in messages[-1], messages
