"""Real MCP servers for the tests: tools_server.py (written with the official SDK) as a
subprocess over stdio or streamable HTTP, and ``kernelgate mcp`` itself."""

from __future__ import annotations

import os
import selectors
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

HERE = Path(__file__).parent
TOOLS_SERVER = [sys.executable, str(HERE / "tools_server.py")]


def read_line(proc: subprocess.Popen[str], stream: str, timeout: float = 30.0) -> str:
    """The next line ``proc`` writes on ``stream`` (stdout or stderr), waiting at most
    ``timeout`` seconds (a line that never comes fails the test, not hangs it)."""
    pipe = getattr(proc, stream)
    with selectors.DefaultSelector() as sel:
        sel.register(pipe, selectors.EVENT_READ)
        if not sel.select(timeout):
            proc.kill()
            raise AssertionError(f"no line on {stream} within {timeout} s")
    line: str = pipe.readline()
    return line


def stop(proc: subprocess.Popen[Any]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    for pipe in (proc.stdin, proc.stdout, proc.stderr):
        if pipe is not None:
            pipe.close()


@pytest.fixture
def http_tools_server() -> Iterator[str]:
    """tools_server.py over streamable HTTP on a free loopback port: its URL."""
    proc = subprocess.Popen(
        [*TOOLS_SERVER, "http"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    try:
        port = int(read_line(proc, "stdout"))
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        stop(proc)


def kernelgate_cmd(*args: str) -> list[str]:
    """``kernelgate ARGS`` with this venv's interpreter (it resolves kernelgate to the
    worktree under test)."""
    return [sys.executable, "-m", "kernelgate.cli", *args]


@pytest.fixture
def clean_env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    return env


@asynccontextmanager
async def http_client(url: str, token: str) -> AsyncIterator[Client]:
    """The SDK's client on ``url``, sending ``Authorization: Bearer token`` as an MCP
    client configured with the token does."""
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=300)) as http:
        transport = streamable_http_client(url, http_client=http)
        async with Client(transport, read_timeout_seconds=60) as client:
            yield client
