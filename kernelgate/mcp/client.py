"""MCP servers as bindings: :func:`connect` yields one binding per tool of a server.

Each tool becomes an async callable named as the tool, whose signature and docstring come
from its ``inputSchema`` and description, and which carries that schema (the child checks
every call against it before the call leaves, the host again). A call goes to the server
through the SDK's client session: structured content comes back as JSON (a plain value an
SDK server wrapped as ``{"result": ...}`` unwrapped, :mod:`.results`), text content as a
string, a tool error as :class:`McpToolError` (``ToolError`` with ``ename``
``McpToolError`` in the program). A server that cannot be reached, dies or does not answer
within ``call_timeout`` gives :class:`McpServerError`; the run goes on and ends cleanly,
and the next call connects again (:mod:`.link`).
"""

from __future__ import annotations

import inspect
import keyword
import warnings
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any

import anyio
from mcp import MCPError
from mcp.types import CONNECTION_CLOSED, Tool

from kernelgate.gateway.describe import OUTPUT_ATTR
from kernelgate.gateway.schemas import SCHEMA_ATTR
from kernelgate.model.describe import type_hint
from kernelgate.model.schema import arguments_object, schema_error

from .errors import McpServerError, McpToolError
from .link import Link, server_spec
from .results import answer, is_wrapped, return_schema

__all__ = ["McpServerError", "McpToolError", "connect", "tool_binding"]

#: Seconds a tool call may take before it fails with :class:`McpServerError`.
CALL_TIMEOUT = 60.0
#: Seconds a failed call waits for its connection's end, to say why it ended.
_SETTLE = 5.0
#: Seconds starting a server, its handshake and its tool listing may take.
CONNECT_TIMEOUT = 30.0

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
    link: Link, tool: Tool, *, call_timeout: float = CALL_TIMEOUT
) -> Callable[..., Any]:
    """One MCP tool as a binding: an async callable that calls it through ``link``."""
    schema = dict(tool.input_schema or {"type": "object"})
    returns = return_schema(tool.output_schema)
    wrapped = is_wrapped(tool.output_schema)
    signature = _signature(schema, returns)
    name = tool.name
    server = link.spec.label
    where = f" of MCP server {server}"
    again = "connects again" if link.spec.url else "starts the server again"
    # A call that finds the connection gone is repeated once, on a new one, only for a
    # tool that says repeating it is harmless (MCP's annotations).
    hints = tool.annotations
    repeatable = hints is not None and bool(hints.read_only_hint or hints.idempotent_hint)

    async def call(*args: Any, **kwargs: Any) -> Any:
        arguments = arguments_object(signature.bind(*args, **kwargs))
        for _attempt in range(2 if repeatable else 1):
            try:
                client, seen = await link.session()
            except McpServerError as exc:
                raise McpServerError(f"the tool {name!r}{where} was not called: {exc}") from None
            try:
                result = await client.call_tool(
                    name, arguments, read_timeout_seconds=call_timeout
                )
            except MCPError as exc:
                if "timed out" in exc.message:
                    raise McpServerError(
                        f"the tool {name!r}{where} did not answer within {call_timeout:g} s "
                        "(kernelgate.mcp.connect(call_timeout=...) sets the limit)"
                    ) from None
                if exc.message == "Session terminated":
                    # The HTTP server no longer knows the session (it was restarted): this
                    # connection is over, as if the server had gone away.
                    seen.lose("the HTTP server no longer knows this session (was it restarted?)")
                elif exc.code != CONNECTION_CLOSED:
                    about = seen.about()
                    about = f" ({about})" if about else ""
                    raise McpServerError(
                        f"the tool {name!r}{where} failed: {exc.message}{about}"
                    ) from None
                # The connection's own task knows why it ended (a transport's error): wait
                # for it, briefly (its cleanup is bounded), to say so.
                with anyio.move_on_after(_SETTLE):
                    await seen.ended.wait()
                seen.lose("it closed the connection during the call")
            except (OSError, EOFError, anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
                seen.lose(f"the connection broke: {type(exc).__name__}: {exc}")
            else:
                return answer(result, wrapped)
        if repeatable:
            raise McpServerError(
                f"MCP server {server} went away during the call to {name!r} ({seen.closed}), "
                "and again when it was repeated on a new connection (the tool is marked "
                "read-only or idempotent)"
            )
        # Not repeated: the server may have done what was asked before it went away.
        raise McpServerError(
            f"MCP server {server} went away during the call to {name!r} ({seen.closed}). "
            f"The call is not repeated (it may have taken effect); the next call {again}"
        )

    call.__name__ = call.__qualname__ = name
    call.__doc__ = tool.description or tool.title or f"The MCP tool {name}{where}."
    call.__signature__ = signature  # type: ignore[attr-defined]
    if schema_error(schema) is None:
        setattr(call, SCHEMA_ATTR, schema)
    if returns is not None:
        setattr(call, OUTPUT_ATTR, returns)
    return call


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
    (``"http://127.0.0.1:8000/mcp"``).

    - ``env``: variables a command server gets, over the few the SDK passes on (``HOME``,
      ``LOGNAME``, ``PATH``, ``SHELL``, ``TERM``, ``USER``). The rest of the host's
      environment is never passed on: it holds secrets (API keys, tokens) a server has
      no business with; give each server the ones it needs, e.g.
      ``env={"GITHUB_TOKEN": os.environ["GITHUB_TOKEN"]}``. ``cwd``: its directory.
    - ``headers`` go with every HTTP request to a URL server (``{"Authorization":
      "Bearer ..."}`` for one that wants a token, such as ``kernelgate mcp --http``).
    - ``connect_timeout`` bounds starting the server, the handshake and the tool listing
      (a server that does not stop when its stdin closes takes up to 2 s more to be
      stopped); ``call_timeout`` each tool call.

    Any failure to connect is :class:`McpServerError`, naming the server, what was tried
    and what to do. After a connection is lost (the server exited, the HTTP server went
    away), the call in flight fails with :class:`McpServerError` (it is not repeated:
    it may have taken effect; a tool annotated ``readOnlyHint`` or ``idempotentHint`` is
    called once more, on a new connection) and the next call connects again, starting a
    command server anew. The server is stopped (its connection closed) when the block ends::

        async with kernelgate.mcp.connect("python files_server.py") as files, \\
                   kernelgate.mcp.connect("http://127.0.0.1:8000/mcp") as web:
            async with Gateway(namespaces={"files": files, "web": web}) as gw:
                print(gw.describe())
                result = await gw.run("return await files.read_file('README.md')")
    """
    for what, value in (("call_timeout", call_timeout), ("connect_timeout", connect_timeout)):
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not value > 0:
            raise ValueError(f"connect({what}=...) must be a positive number of seconds")
    spec = server_spec(server, env=env, cwd=cwd, headers=headers)
    link = Link(spec, connect_timeout=float(connect_timeout))
    try:
        tools = await link.start()
        namespace: dict[str, Callable[..., Any]] = {}
        for tool in tools:
            if tool.name.startswith("_") or not tool.name.isprintable() or not tool.name:
                warnings.warn(
                    f"MCP server {spec.label}: tool {tool.name!r} left out (a binding name may "
                    "not start with '_' or hold unprintable characters)",
                    stacklevel=2,
                )
                continue
            namespace[tool.name] = tool_binding(link, tool, call_timeout=call_timeout)
        yield namespace
    finally:
        await link.aclose()
