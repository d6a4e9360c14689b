"""kernelgate as an MCP server: one tool, ``run_code``, over stdio or streamable HTTP.

Any MCP client (a desktop assistant, an IDE agent, an agent framework) then writes one
program per task against the gateway's bindings, each run in a fresh isolated child,
instead of calling many tools one by one. The tool's description embeds
``Gateway.describe()``; its answer is ``ToolOutput.text`` with ``isError`` set when the
program failed, and the run as structured content (:mod:`.structured`, declared as the
tool's ``outputSchema``). A client that asks for progress (a ``progressToken``) hears of
each output and binding call while the program runs (:mod:`.progress`).
``kernelgate mcp`` (:mod:`kernelgate.cli.mcp`) is the command.

>>> from kernelgate import Gateway
>>> server = build_server(Gateway(bindings={"add": lambda a, b: a + b}))
>>> server.name
'kernelgate'
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable
from typing import Any

from mcp.server import Server
from mcp.server.stdio import stdio_server
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.jsonrpc_dispatcher import progress_token_from_params
from mcp.types import CallToolRequestParams, CallToolResult, ListToolsResult, TextContent, Tool

from kernelgate import __version__
from kernelgate.gateway.agent import AgentSurface
from kernelgate.gateway.api import CodeGateway
from kernelgate.gateway.discovery import SEARCH_TOOL_NAME
from kernelgate.gateway.tools import MAX_CHARS, TOOL_NAME, tool_output, tool_schema
from kernelgate.model.language import check_language, title

from .guard import HttpGuard
from .progress import ProgressReporter
from .structured import OUTPUT_SCHEMA, structured

__all__ = ["build_server", "check_loopback", "listen", "serve_http", "serve_stdio"]

_INSTRUCTIONS = (
    "This server has one tool, run_code: write one {language} program per task that calls "
    "the bindings its description lists (with await) and returns what you need. Each "
    "program runs in a fresh, isolated process; nothing is kept between runs."
)


def _error(text: str) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=text)], is_error=True)


def _tools_of(
    gateway: CodeGateway, max_description_chars: int | None, tool_search: bool
) -> list[Tool]:
    """run_code (and search_tools): a :class:`kernelgate.Gateway` states the rules of its
    runs and fits the description to ``max_description_chars``; another CodeGateway (a
    RemoteGateway) gives its stub."""
    if isinstance(gateway, AgentSurface):
        definition = gateway.tool_schema("mcp", max_description_chars=max_description_chars)
    else:
        definition = tool_schema(gateway.describe(), "mcp", gateway.language)
    tools = [
        Tool(
            name=definition["name"],
            description=definition["description"],
            input_schema=definition["inputSchema"],
            output_schema=OUTPUT_SCHEMA,
        )
    ]
    if tool_search:
        if not isinstance(gateway, AgentSurface):
            raise TypeError(
                "tool_search=True needs a kernelgate.Gateway (it searches its bindings); "
                f"got {type(gateway).__name__}"
            )
        search = gateway.search_tool_schema("mcp")
        tools.append(
            Tool(
                name=search["name"],
                description=search["description"],
                input_schema=search["inputSchema"],
            )
        )
    return tools


def build_server(
    gateway: CodeGateway,
    *,
    max_chars: int = MAX_CHARS,
    name: str = "kernelgate",
    max_description_chars: int | None = None,
    tool_search: bool = False,
) -> Server[Any]:
    """An MCP server (the SDK's low-level ``Server``) whose tool ``run_code`` runs programs
    on ``gateway`` (a :class:`kernelgate.Gateway`, or any :class:`kernelgate.CodeGateway`:
    a :class:`kernelgate.RemoteGateway` serves a kernel elsewhere), in its language;
    ``max_chars`` caps the text of each answer, ``max_description_chars`` run_code's
    description (past it the description lists binding names). ``tool_search`` adds the
    tool ``search_tools``, answered by ``Gateway.search_tools``, for a model with more
    bindings than a description holds."""
    language = gateway.language
    tools = _tools_of(gateway, max_description_chars, tool_search)
    names = " or ".join(t.name for t in tools)

    async def on_list_tools(ctx: Any, params: Any) -> ListToolsResult:
        return ListToolsResult(tools=tools)

    async def on_call_tool(ctx: Any, params: CallToolRequestParams) -> CallToolResult:
        if tool_search and params.name == SEARCH_TOOL_NAME:
            assert isinstance(gateway, AgentSurface)  # _tools_of checked
            arguments = params.arguments or {}
            found = gateway.search_tools(arguments.get("query"), arguments.get("limit"))  # type: ignore[arg-type]
            return CallToolResult(content=[TextContent(type="text", text=found)])
        if params.name != TOOL_NAME:
            return _error(f"there is no tool {params.name!r} here; use {names}")
        code = (params.arguments or {}).get("code")
        if not isinstance(code, str):
            return _error(
                f"{TOOL_NAME} takes one argument, code: the program as a string; got "
                f"{type(code).__name__}"
            )
        try:
            if progress_token_from_params(ctx.params) is None:
                result = await gateway.run(code)
            else:
                reporter = ProgressReporter(
                    lambda progress, message: ctx.session.report_progress(progress, None, message)
                )
                async with reporter.running():
                    result = await gateway.run(
                        code, on_output=reporter.on_output, on_call=reporter.on_call
                    )
            out = tool_output(result, max_chars)
        except Exception as exc:  # the host's own trouble (closed, a recorder that failed)
            return _error(f"kernelgate could not run the program: {type(exc).__name__}: {exc}")
        # The text, then an ImageContent per image the run showed (ToolOutput.to_mcp), and
        # the run as the structured content run_code's outputSchema declares.
        answer = out.to_mcp()
        answer["structuredContent"] = structured(result, max_chars)
        return CallToolResult.model_validate(answer)

    return Server(
        name,
        version=__version__,
        instructions=_INSTRUCTIONS.format(language=title(check_language(language))),
        on_list_tools=on_list_tools,
        on_call_tool=on_call_tool,
    )


async def serve_stdio(server: Server[Any]) -> None:
    """Serve one client on stdin/stdout until it closes stdin."""
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


def check_loopback(host: str) -> str:
    """``host`` if it is a loopback address (or ``localhost``); else ``ValueError``: the
    server runs programs for whoever reaches it, so it listens on this machine only."""
    if host == "localhost":
        return host
    try:
        if ipaddress.ip_address(host).is_loopback:
            return host
    except ValueError:
        pass
    raise ValueError(
        f"--http {host!r}: kernelgate serves on a loopback address only (127.0.0.1, ::1 or "
        "localhost): whoever reaches it can run programs with your bindings"
    )


def listen(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (port 0: a free one; see getsockname())."""
    check_loopback(host)
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128)
    except BaseException:
        sock.close()
        raise
    return sock


async def serve_http(
    server: Server[Any],
    sock: socket.socket,
    *,
    token: str,
    on_ready: Callable[[str], None] | None = None,
) -> None:
    """Serve streamable HTTP at ``/mcp`` on ``sock`` (from :func:`listen`) until stopped;
    ``on_ready(url)`` is called once the socket is listening.

    Every request must carry ``Authorization: Bearer <token>`` and a ``Host`` (and an
    ``Origin``, if any) naming the bound address: :class:`~kernelgate.mcp.guard.HttpGuard`
    answers any other with 421, 403 or 401 before the SDK sees it."""
    import uvicorn  # only the HTTP transport needs it

    host, port = sock.getsockname()[:2]
    # The guard checks Host and Origin for whatever address is bound, on every path and
    # method; the SDK's own check covers only 127.0.0.1, localhost and ::1 (so not
    # 127.0.0.2) and accepts any port, so it is not relied on.
    app = server.streamable_http_app(
        host=host,
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
    )
    guarded = HttpGuard(app, host=host, port=port, token=token)
    # proxy_headers off: no proxy sits in front, so X-Forwarded-* from a client is not
    # believed (uvicorn trusts them from 127.0.0.1 by default).
    config = uvicorn.Config(guarded, log_level="warning", lifespan="on", proxy_headers=False)
    shown = f"[{host}]" if ":" in host else host
    if on_ready is not None:
        on_ready(f"http://{shown}:{port}/mcp")
    await uvicorn.Server(config).serve(sockets=[sock])
