"""One MCP server's connection: opened within a deadline, watched, opened again when lost.

Each connection lives in a task of its own (:meth:`Link._connection`): the SDK's client
runs its transport in anyio task groups, which must be entered and left by one task, and
whose failure (an HTTP server that went away makes its POST raise) cancels the task that
entered them. Kept in its own task, that failure ends only the connection: the link marks
it lost and the next call opens a new one. A transport wrapper (:func:`_watched`) notices
the end of the server's output (a stdio server that exited) as it happens, and keeps what
the server wrote that was not JSON-RPC and the HTTP error statuses it answered, so that a
failure can say what the server did.

Every failure to connect is a :class:`McpServerError` naming the server, what was tried
and what to do, within ``connect_timeout`` (plus the SDK's shutdown of a server process
that does not stop when its stdin closes: up to 2 s, then SIGTERM).
"""

from __future__ import annotations

import asyncio
import math
import shlex
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx2
from mcp import Client, MCPError, StdioServerParameters
from mcp.client.stdio import get_default_environment, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.message import SessionMessage
from mcp.types import Tool

from .errors import McpServerError

__all__ = ["Link", "ServerSpec", "server_spec"]

#: Pages of ``tools/list`` read at most (a server that pages forever cannot hang us).
_MAX_PAGES = 100
#: Characters of a server's stray output quoted in a message.
_QUOTE = 120


@dataclass(frozen=True)
class ServerSpec:
    """How to reach one MCP server: a command started over stdio, or a URL."""

    label: str
    """The server as messages name it (the command line, or the URL)."""
    params: StdioServerParameters | None = None
    url: str | None = None
    headers: Mapping[str, str] | None = None

    def tried(self) -> str:
        """What connecting does, for messages."""
        if self.params is not None:
            return "started it as a command and spoke MCP on its stdin/stdout"
        return "sent it MCP requests over HTTP"


def _check_env(env: Mapping[str, str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in env.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise TypeError(
                f"connect(env=...) maps names to strings, got {key!r}: {type(value).__name__}"
            )
        if not key or "=" in key or "\0" in key or "\0" in value:
            raise ValueError(
                f"connect(env=...): {key!r} is not an environment variable name (no '=', "
                "no NUL, not empty), or its value holds a NUL"
            )
        out[key] = value
    return out


def server_spec(
    server: str | Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    headers: Mapping[str, str] | None = None,
) -> ServerSpec:
    """A :class:`ServerSpec` for :func:`~kernelgate.mcp.connect`'s arguments (their
    errors as ``ValueError``/``TypeError``)."""
    if isinstance(server, str) and server.startswith(("http://", "https://")):
        for what, value in (("env", env), ("cwd", cwd)):
            if value is not None:
                raise ValueError(
                    f"connect({what}=...) is for a server started as a command, not the URL "
                    f"{server!r} (that server runs with its own environment)"
                )
        return ServerSpec(label=server, url=server, headers=headers)
    argv = shlex.split(server) if isinstance(server, str) else [str(a) for a in server]
    if not argv:
        raise ValueError("connect(server=...) needs a command (or an http(s) URL), got nothing")
    if headers is not None:
        raise ValueError(f"connect(headers=...) is for an http(s) URL server, not {argv[0]!r}")
    params = StdioServerParameters(
        command=argv[0], args=argv[1:], env=_check_env(env) if env else None, cwd=cwd
    )
    label = shlex.join(argv)
    return ServerSpec(label=label if len(label) <= 80 else label[:77] + "...", params=params)


@dataclass
class _Seen:
    """What one connection's server did that a message may need to say."""

    stray: str | None = None
    """The first thing it sent that was not JSON-RPC (a stdio server printing a banner)."""
    http: str | None = None
    """The last HTTP error status it answered (``HTTP 401 Unauthorized``)."""
    closed: str | None = None
    """Why the connection is gone (None while it is up)."""
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    """Set to end the connection."""
    ended: asyncio.Event = field(default_factory=asyncio.Event)
    """Set once the connection is over and cleaned up (``closed`` says why)."""

    def lose(self, why: str) -> None:
        if self.closed is None:
            self.closed = why
        self.stop.set()

    def about(self) -> str:
        """What the server did, for a message ("" when nothing to say)."""
        said = []
        if self.http is not None:
            said.append(f"it answered {self.http}")
        if self.stray is not None:
            said.append(f"it wrote something that is not MCP's JSON-RPC: {self.stray}")
        return "; ".join(said)


def _stray_text(item: Exception) -> str:
    """The input a transport could not parse, quoted, else the error."""
    errors = getattr(item, "errors", None)
    if callable(errors):
        try:
            found = [e.get("input") for e in errors() if isinstance(e.get("input"), str)]
        except Exception:  # a stranger error type: its text below says enough
            found = []
        if found:
            text: str = found[0]
            return repr(text if len(text) <= _QUOTE else text[:_QUOTE] + "...")
    text = str(item).splitlines()[0] if str(item) else type(item).__name__
    return text[:_QUOTE]


@asynccontextmanager
async def _watched(
    inner: AbstractAsyncContextManager[Any], seen: _Seen
) -> AsyncIterator[tuple[Any, Any]]:
    """A transport that passes ``inner``'s streams through, noting what ``seen`` keeps:
    stray (unparseable) output, and the end of the server's output as it happens."""
    async with inner as (read, write):
        send, receive = anyio.create_memory_object_stream[SessionMessage | Exception](0)

        async def forward() -> None:
            try:
                async with send:
                    async for item in read:
                        if isinstance(item, Exception) and seen.stray is None:
                            seen.stray = _stray_text(item)
                        await send.send(item)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                return  # our side is closing: not the server's doing
            seen.lose("it closed the connection (the process exited, or the server hung up)")

        async with anyio.create_task_group() as tg:
            tg.start_soon(forward)
            try:
                yield receive, write
            finally:
                receive.close()
                tg.cancel_scope.cancel()


@asynccontextmanager
async def _http_transport(spec: ServerSpec, seen: _Seen) -> AsyncIterator[tuple[Any, Any]]:
    """The SDK's streamable HTTP transport, with an HTTP client of its default timeouts
    that notes every error status (the SDK's messages do not give it)."""

    async def on_response(response: httpx2.Response) -> None:
        if response.status_code >= 400:
            seen.http = f"HTTP {response.status_code} {response.reason_phrase}".rstrip()

    headers = dict(spec.headers) if spec.headers is not None else None
    async with create_mcp_http_client(headers=headers) as http:
        http.event_hooks = {"request": [], "response": [on_response]}
        assert spec.url is not None
        async with streamable_http_client(spec.url, http_client=http) as streams:
            yield streams


def _transport(spec: ServerSpec, seen: _Seen) -> AbstractAsyncContextManager[Any]:
    if spec.params is not None:
        return _watched(stdio_client(spec.params), seen)
    return _watched(_http_transport(spec, seen), seen)


def _leaf(exc: BaseException, kinds: tuple[type[BaseException], ...]) -> BaseException | None:
    """The first exception of ``kinds`` in ``exc`` (an exception group's leaves included)."""
    if isinstance(exc, kinds):
        return exc
    for inner in getattr(exc, "exceptions", ()):
        found = _leaf(inner, kinds)
        if found is not None:
            return found
    return None


def _env_note(spec: ServerSpec) -> str:
    """Which environment a command server got (it is easy to forget it gets little)."""
    assert spec.params is not None
    names = sorted(get_default_environment() | (spec.params.env or {}))
    return f"it ran with the environment variables {', '.join(names) or '(none)'}"


def _reason(exc: BaseException) -> str:
    """Why a connection that was up broke, in a few words."""
    leaf = _leaf(exc, (httpx2.TransportError, OSError, MCPError)) or exc
    text = leaf.message if isinstance(leaf, MCPError) else str(leaf)
    return f"{type(leaf).__name__}: {text}" if text else type(leaf).__name__


def failure(spec: ServerSpec, exc: BaseException, seen: _Seen) -> McpServerError:
    """What went wrong connecting to ``spec``, as the one error a caller gets."""
    head = f"MCP server {spec.label}"
    about = seen.about()
    about = f" ({about})" if about else ""
    spawn = _leaf(exc, (OSError,))
    if spec.params is not None and spawn is not None and not isinstance(spawn, ConnectionError):
        command = spec.params.command
        what = getattr(spawn, "strerror", None) or str(spawn)
        where = f" in {spec.params.cwd!r}" if spec.params.cwd else ""
        return McpServerError(
            f"{head}: could not start {command!r}{where}: {what}; give the command's full "
            "path, or a PATH in its environment (connect(env=...), kernelgate mcp --mcp-env) "
            "that finds it"
        )
    reach = _leaf(exc, (httpx2.TransportError,))
    if reach is not None:
        return McpServerError(
            f"{head}: {spec.tried()}, which failed: {type(reach).__name__}: {reach}{about}; "
            "is the server running, and is the URL right?"
        )
    error = _leaf(exc, (MCPError,))
    if error is not None and isinstance(error, MCPError):
        if seen.http is not None and seen.http.startswith(("HTTP 401", "HTTP 403")):
            hint = "it wants credentials: connect(headers={'Authorization': 'Bearer ...'})"
        elif seen.http is not None and seen.http.startswith("HTTP 5"):
            hint = "the server failed: see its own log"
        elif seen.http is not None:
            hint = "is the URL the server's MCP endpoint (often /mcp)?"
        elif seen.stray is not None:
            hint = "a stdio server must write nothing but MCP messages on stdout"
        elif spec.params is not None:
            hint = (
                "run the command by hand to see why; its stderr is kernelgate's; "
                + _env_note(spec)
            )
        else:
            hint = "check the server's own log"
        return McpServerError(f"{head}: {spec.tried()}: {error.message}{about}; {hint}")
    return McpServerError(f"{head}: {spec.tried()}: {type(exc).__name__}: {exc}{about}")


async def _list_tools(client: Client) -> list[Tool]:
    tools: list[Tool] = []
    cursor: str | None = None
    for _ in range(_MAX_PAGES):
        page = await client.list_tools(cursor=cursor)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if cursor is None:
            break
    return tools


_Opened = tuple[Client, list[Tool], _Seen]


class Link:
    """One MCP server, connected on :meth:`start` and again, on the next call, when the
    connection was lost; :meth:`aclose` ends it (awaiting every task it started)."""

    def __init__(self, spec: ServerSpec, *, connect_timeout: float) -> None:
        self.spec = spec
        self.connect_timeout = connect_timeout
        self._current: _Opened | None = None
        # The task of the newest connection, what it has seen, and its opening.
        self._task: asyncio.Task[None] | None = None
        self._seen: _Seen | None = None
        self._opening: asyncio.Future[_Opened] | None = None
        self._lock = asyncio.Lock()
        self._closed = False

    async def start(self) -> list[Tool]:
        """Connect and list the tools (a :class:`McpServerError` if it cannot)."""
        async with self._lock:
            opening = await self._begin()
        _client, tools, _seen = await asyncio.shield(opening)
        return tools

    async def session(self) -> tuple[Client, _Seen]:
        """The client of a live connection, opening a new one when the last was lost
        (one opening for all the calls that find it lost)."""
        async with self._lock:
            if self._closed:
                raise McpServerError(f"MCP server {self.spec.label}: its connection was closed")
            current = self._current
            if current is not None and current[2].closed is None:
                return current[0], current[2]
            why = self._seen.closed if self._seen is not None else None
            opening = await self._begin()
        try:
            # Shielded: a caller cancelled while it waits leaves the opening to the others.
            client, _tools, seen = await asyncio.shield(opening)
        except McpServerError as exc:
            lost = f"the connection was lost ({why}), and " if why else ""
            detail = str(exc).removeprefix(f"MCP server {self.spec.label}: ")
            raise McpServerError(f"{lost}connecting again failed: {detail}") from None
        return client, seen

    async def _begin(self) -> asyncio.Future[_Opened]:
        """The opening under way, or a new one replacing the connection (lock held)."""
        if self._opening is not None and not self._opening.done():
            return self._opening
        await self._end_current()
        ready: asyncio.Future[_Opened] = asyncio.get_running_loop().create_future()
        self._seen = _Seen()
        self._task = asyncio.create_task(self._connection(ready, self._seen))
        self._opening = ready
        return ready

    async def _end_current(self) -> None:
        """End the newest connection (an opening under way is cancelled) and await its
        task: the SDK's shutdown of it is bounded."""
        self._current = None
        task, seen, opening = self._task, self._seen, self._opening
        self._task = None
        if task is None or seen is None:
            return
        seen.stop.set()
        if opening is not None and not opening.done():
            task.cancel()
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            if not task.done():
                raise  # we were cancelled, not it: the task still ends on its own

    async def _connection(self, ready: asyncio.Future[_Opened], seen: _Seen) -> None:
        """One connection, from opening to its end (a stop, or the server going away)."""
        try:
            # One scope around the connection's whole life (the SDK's task groups inside
            # must nest in it), its deadline lifted once the connection is up.
            with anyio.CancelScope(deadline=anyio.current_time() + self.connect_timeout) as scope:
                async with AsyncExitStack() as stack:
                    transport = _transport(self.spec, seen)
                    client = await stack.enter_async_context(
                        Client(transport, read_timeout_seconds=self.connect_timeout)
                    )
                    tools = await _list_tools(client)
                    scope.deadline = math.inf
                    self._current = (client, tools, seen)
                    ready.set_result(self._current)
                    await seen.stop.wait()
            if scope.cancelled_caught and not ready.done():
                about = seen.about()
                raise McpServerError(
                    f"MCP server {self.spec.label}: {self.spec.tried()}; it did not "
                    f"complete MCP's handshake and tool listing within "
                    f"{self.connect_timeout:g} s{f' ({about})' if about else ''}; run it by "
                    "hand to see whether it starts, or allow more time "
                    "(connect(connect_timeout=...))"
                )
        except McpServerError as exc:
            if not ready.done():
                ready.set_exception(exc)
        except Exception as exc:
            # Opening failed, or a transport task failed after (and cancelled this task's
            # wait): the connection is over either way.
            if not ready.done():
                ready.set_exception(failure(self.spec, exc, seen))
            else:
                seen.lose(_reason(exc))
        finally:
            seen.lose("it was closed")
            seen.ended.set()
            if not ready.done():
                ready.cancel()

    async def aclose(self) -> None:
        """End the connection and wait for its task (the server process stopped)."""
        async with self._lock:
            self._closed = True
            await self._end_current()

