"""An MCP server written with the official SDK, started by the tests as a subprocess.

Tools with typed parameters, one that raises, one with structured content, one that hangs
until released, one that kills its own process, one that reads its environment.
``python tools_server.py [http [PORT]]``.
"""

from __future__ import annotations

import os
import socket
import sys
from typing import Literal

import anyio
from mcp.server import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import BaseModel

server = MCPServer("kernelgate-test-tools")


class Stats(BaseModel):
    count: int
    mean: float


@server.tool()
def add(a: int, b: int = 2) -> int:
    """Add two integers.

    Longer text that describe() leaves out.
    """
    return a + b


@server.tool()
def greet(name: str, style: Literal["plain", "loud"] = "plain") -> str:
    """Greet someone by name."""
    text = f"hello {name}"
    return text.upper() if style == "loud" else text


@server.tool()
def stats(values: list[float]) -> Stats:
    """Count and mean of the values (structured content)."""
    return Stats(count=len(values), mean=sum(values) / len(values) if values else 0.0)


@server.tool()
def history(values: list[float]) -> list[Stats]:
    """Running statistics: a wrapped list of models (their schema in $defs)."""
    return [stats(values[: i + 1]) for i in range(len(values))]


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def environ(name: str) -> str | None:
    """The server's own environment variable ``name`` (None when unset)."""
    return os.environ.get(name)


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def pid() -> int:
    """The server's process id."""
    return os.getpid()


@server.tool()
def explode(message: str) -> str:
    """Always fails with the message."""
    raise ToolError(f"exploded: {message}")


_arrived: dict[str, int] = {}
_all_here: dict[str, anyio.Event] = {}


@server.tool()
async def meet(party: str, size: int) -> int:
    """Waits until ``size`` calls of the same party are in flight at once (10 s at most):
    only calls made concurrently can meet."""
    _arrived[party] = _arrived.get(party, 0) + 1
    event = _all_here.setdefault(party, anyio.Event())
    if _arrived[party] >= size:
        event.set()
    with anyio.fail_after(10):
        await event.wait()
    return _arrived[party]


@server.tool()
async def hang(token: str) -> str:
    """Never answers (until the process is stopped)."""
    await anyio.sleep_forever()
    return token


@server.tool()
def die() -> str:
    """Kills the server process mid-call."""
    sys.stdout.flush()
    os._exit(3)


async def serve_http(port: int = 0) -> None:
    """Streamable HTTP on loopback (a free port unless one is given), the port printed on
    stdout once listening."""
    import uvicorn

    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(16)
    print(sock.getsockname()[1], flush=True)
    app = server.streamable_http_app(host="127.0.0.1")
    await uvicorn.Server(uvicorn.Config(app, log_level="warning")).serve(sockets=[sock])


if __name__ == "__main__":
    if sys.argv[1:2] == ["http"]:
        anyio.run(serve_http, int(sys.argv[2]) if len(sys.argv) > 2 else 0)
    else:
        server.run()
