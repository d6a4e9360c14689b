"""MCP tool results as a program gets them, and the return schema a binding shows.

An SDK server (the official ``MCPServer``, FastMCP) gives a tool whose function returns a
plain value (``int``, ``str``, a list) an ``outputSchema`` with one required property,
``result``, and answers ``{"result": value}`` as structured content (FastMCP also marks
the schema ``"x-fastmcp-wrap-result": true``). The wrapping is the protocol's, not the
tool's: ``await tools.add(1, 2)`` is ``3``, and the binding's return schema is that of
``result``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mcp.types import CallToolResult

from .errors import McpToolError

__all__ = ["answer", "is_wrapped", "return_schema"]

#: FastMCP's mark on an output schema it wrapped around a plain return value.
WRAP_MARK = "x-fastmcp-wrap-result"
#: Where a schema keeps the definitions its ``$ref`` s point to.
_DEFINITIONS = ("$defs", "definitions")


def is_wrapped(schema: Any) -> bool:
    """True if an ``outputSchema`` wraps a plain value as ``{"result": ...}``: FastMCP's
    mark, or an object whose only property, required, is ``result`` (the official SDK's
    form; a tool returning a model with one field named ``result`` reads the same, and
    unwrapping it loses nothing the model could use)."""
    if not isinstance(schema, Mapping):
        return False
    if schema.get(WRAP_MARK) is True:
        return True
    props = schema.get("properties")
    return (
        schema.get("type", "object") == "object"
        and isinstance(props, Mapping)
        and list(props) == ["result"]
        and schema.get("required") == ["result"]
    )


def return_schema(schema: Any) -> dict[str, Any] | None:
    """The schema of what a binding returns, given the tool's ``outputSchema``: that of
    ``result`` for a wrapped one (keeping the definitions its references point to), the
    schema itself otherwise, ``None`` when the tool gives none."""
    if not isinstance(schema, Mapping):
        return None
    if not is_wrapped(schema):
        return dict(schema)
    inner = schema["properties"]["result"]
    out: dict[str, Any] = dict(inner) if isinstance(inner, Mapping) else {}
    for key in _DEFINITIONS:
        if key in schema and key not in out:
            out[key] = schema[key]
    return out


def _text_of(result: CallToolResult) -> str:
    texts = [getattr(block, "text", "") for block in result.content]
    return "\n".join(t for t in texts if t) or "(the tool gave no message)"


def answer(result: CallToolResult, wrapped: bool) -> Any:
    """A tool result as the program gets it: structured content (unwrapped when the
    tool's ``outputSchema`` wraps it), else the text, else the content blocks as JSON."""
    if result.is_error:
        raise McpToolError(_text_of(result))
    content = result.structured_content
    if content is not None:
        if wrapped and isinstance(content, Mapping) and list(content) == ["result"]:
            return content["result"]
        return content
    out = [
        block.text
        if block.type == "text"
        else block.model_dump(mode="json", by_alias=True, exclude_none=True)
        for block in result.content
    ]
    if not out:
        return None
    return out[0] if len(out) == 1 else out
