"""MCP servers as bindings: :func:`connect` yields one binding per tool of a server.

Each tool becomes an async callable named as the tool, whose signature and docstring come
from its ``inputSchema`` and description, and which carries that schema (the child checks
every call against it before the call leaves, the host again). A call goes to the server
through the SDK's client session: structured content comes back as JSON, text content as a
string, a tool error as :class:`McpToolError` (``ToolError`` with ``ename``
``McpToolError`` in the program). A server that dies or does not answer within
``call_timeout`` gives :class:`McpServerError`; the run goes on and ends cleanly.
"""

from __future__ import annotations

import inspect
import keyword
import shlex
import warnings
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import httpx2
from mcp import Client, MCPError, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult, Tool

from kernelgate.gateway.describe import OUTPUT_ATTR
from kernelgate.gateway.schemas import SCHEMA_ATTR
from kernelgate.model.describe import type_hint
from kernelgate.model.schema import arguments_object, schema_error

__all__ = ["McpServerError", "McpToolError", "connect", "tool_binding"]

#: Seconds a tool call may take before it fails with :class:`McpServerError`.
CALL_TIMEOUT = 60.0
#: Seconds starting a server, its handshake and its tool listing may take.
CONNECT_TIMEOUT = 30.0
#: Pages of ``tools/list`` read at most (a server that pages forever cannot hang us).
_MAX_PAGES = 100


class McpToolError(Exception):
    """The MCP tool ran and reported an error (``isError``); the message is its text."""


class McpServerError(Exception):
    """The MCP server did not answer: it is gone, it timed out, or it broke the protocol."""


def _server_params(
    server: str | Sequence[str], env: Mapping[str, str] | None, cwd: str | None
) -> tuple[StdioServerParameters | str, str]:
    """What :class:`mcp.Client` takes for ``server``, and a name for messages."""
    if isinstance(server, str) and server.startswith(("http://", "https://")):
        return server, server
    argv = shlex.split(server) if isinstance(server, str) else [str(a) for a in server]
    if not argv:
        raise ValueError("connect(server=...) needs a command (or an http(s) URL), got nothing")
    params = StdioServerParameters(
        command=argv[0], args=argv[1:], env=dict(env) if env else None, cwd=cwd
    )
    label = shlex.join(argv)
    return params, label if len(label) <= 80 else label[:77] + "..."


def _text_of(result: CallToolResult) -> str:
    texts = [getattr(block, "text", "") for block in result.content]
    return "\n".join(t for t in texts if t) or "(the tool gave no message)"


def _answer(result: CallToolResult) -> Any:
    """A tool result as the program gets it: structured content, else the text, else
    the content blocks as JSON."""
    if result.is_error:
        raise McpToolError(_text_of(result))
    if result.structured_content is not None:
        return result.structured_content
    out = [
        block.text
        if block.type == "text"
        else block.model_dump(mode="json", by_alias=True, exclude_none=True)
        for block in result.content
    ]
    if not out:
        return None
    return out[0] if len(out) == 1 else out


def _signature(schema: Mapping[str, Any], output: Any) -> inspect.Signature:
    """Python parameters for an input schema: the required properties, then the optional
    ones with their defaults (``None`` when the schema gives none); names Python cannot
    spell, or a schema open to more, go through ``**kwargs``."""
    props = schema.get("properties")
    props = props if isinstance(props, Mapping) else {}
    required = [r for r in schema.get("required", []) if isinstance(r, str)]
    ordered = [p for p in props if p in required] + [p for p in props if p not in required]
    params = []
    # No properties at all and nothing closing it: the tool takes any keyword arguments.
    rest = "properties" not in schema and schema.get("additionalProperties") is not False
    for name in ordered:
        if not name.isidentifier() or keyword.iskeyword(name) or name == "kwargs":
            rest = True
            continue
        prop = props[name]
        default: Any = inspect.Parameter.empty
        if name not in required:
            default = prop.get("default") if isinstance(prop, Mapping) else None
        params.append(
            inspect.Parameter(
                name,
                inspect.Parameter.POSITIONAL_OR_KEYWORD,
                default=default,
                annotation=type_hint(prop, schema),
            )
        )
    if rest:
        params.append(inspect.Parameter("kwargs", inspect.Parameter.VAR_KEYWORD))
    returns = type_hint(output) if isinstance(output, Mapping) else "Any"
    return inspect.Signature(params, return_annotation=returns)


def tool_binding(
    client: Client, tool: Tool, *, server: str = "", call_timeout: float = CALL_TIMEOUT
) -> Callable[..., Any]:
    """One MCP tool as a binding: an async callable that calls it through ``client``."""
    schema = dict(tool.input_schema or {"type": "object"})
    signature = _signature(schema, tool.output_schema)
    name = tool.name
    where = f" of MCP server {server}" if server else ""

    async def call(*args: Any, **kwargs: Any) -> Any:
        arguments = arguments_object(signature.bind(*args, **kwargs))
        try:
            result = await client.call_tool(name, arguments, read_timeout_seconds=call_timeout)
        except MCPError as exc:
            if "timed out" in exc.message:
                raise McpServerError(
                    f"the tool {name!r}{where} did not answer within {call_timeout:g} s "
                    "(kernelgate.mcp.connect(call_timeout=...) sets the limit)"
                ) from None
            raise McpServerError(f"the tool {name!r}{where} failed: {exc.message}") from None
        except (OSError, EOFError) as exc:
            raise McpServerError(
                f"the connection to the tool {name!r}{where} broke: {exc}"
            ) from None
        return _answer(result)

    call.__name__ = call.__qualname__ = name
    call.__doc__ = tool.description or tool.title or f"The MCP tool {name}{where}."
    call.__signature__ = signature  # type: ignore[attr-defined]
    if schema_error(schema) is None:
        setattr(call, SCHEMA_ATTR, schema)
    if isinstance(tool.output_schema, dict):
        setattr(call, OUTPUT_ATTR, dict(tool.output_schema))
    return call


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


@asynccontextmanager
async def connect(
    server: str | Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    call_timeout: float = CALL_TIMEOUT,
    connect_timeout: float = CONNECT_TIMEOUT,
    headers: Mapping[str, str] | None = None,
) -> AsyncIterator[dict[str, Callable[..., Any]]]:
    """Connect to an MCP server and yield its tools as a namespace of bindings.

    ``server`` is a command line (``"python server.py"`` or ``["python", "server.py"]``,
    started as a subprocess and spoken to over stdio) or a streamable HTTP URL
    (``"http://127.0.0.1:8000/mcp"``). ``call_timeout`` bounds each tool call,
    ``connect_timeout`` the start, handshake and tool listing. ``headers`` go with every
    HTTP request to a URL server (``{"Authorization": "Bearer ..."}`` for one that wants a
    token, such as ``kernelgate mcp --http``). The server is stopped (its connection
    closed) when the block ends::

        async with kernelgate.mcp.connect("python files_server.py") as files, \\
                   kernelgate.mcp.connect("http://127.0.0.1:8000/mcp") as web:
            async with Gateway(namespaces={"files": files, "web": web}) as gw:
                print(gw.describe())
                result = await gw.run("return await files.read_file('README.md')")
    """
    for what, value in (("call_timeout", call_timeout), ("connect_timeout", connect_timeout)):
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not value > 0:
            raise ValueError(f"connect({what}=...) must be a positive number of seconds")
    params, label = _server_params(server, env, cwd)
    if headers is not None and not isinstance(params, str):
        raise ValueError(f"connect(headers=...) is for an http(s) URL server, not {label!r}")
    try:
        async with AsyncExitStack() as stack:
            target: Any = params
            if headers is not None and isinstance(params, str):
                # The SDK's own HTTP client, with its timeouts (a stream may stay open).
                http = await stack.enter_async_context(
                    httpx2.AsyncClient(
                        headers=dict(headers), timeout=httpx2.Timeout(30.0, read=300.0)
                    )
                )
                target = streamable_http_client(params, http_client=http)
            # The handshake and the listing use the client's timeout; each call its own.
            client = await stack.enter_async_context(
                Client(target, read_timeout_seconds=connect_timeout)
            )
            try:
                tools = await _list_tools(client)
            except MCPError as exc:
                raise McpServerError(
                    f"MCP server {label} did not list its tools: {exc.message}"
                ) from None
            namespace: dict[str, Callable[..., Any]] = {}
            for tool in tools:
                if tool.name.startswith("_") or not tool.name.isprintable() or not tool.name:
                    warnings.warn(
                        f"MCP server {label}: tool {tool.name!r} left out (a binding name may "
                        "not start with '_' or hold unprintable characters)",
                        stacklevel=2,
                    )
                    continue
                namespace[tool.name] = tool_binding(
                    client, tool, server=label, call_timeout=call_timeout
                )
            yield namespace
    except Exception as exc:
        # The SDK's task groups wrap what broke in exception groups: find the MCP error.
        error = _mcp_error(exc)
        if error is None:
            raise
        raise McpServerError(f"MCP server {label}: {error.message}") from None


def _mcp_error(exc: BaseException) -> MCPError | None:
    """The first :class:`MCPError` in ``exc`` (an exception group's leaves included)."""
    if isinstance(exc, MCPError):
        return exc
    for inner in getattr(exc, "exceptions", ()):
        found = _mcp_error(inner)
        if found is not None:
            return found
    return None
