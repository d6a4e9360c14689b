"""What a call to an MCP server can fail with, as the program sees it (``ToolError.ename``)."""

from __future__ import annotations

__all__ = ["McpServerError", "McpToolError"]


class McpToolError(Exception):
    """The MCP tool ran and reported an error (``isError``); the message is its text."""


class McpServerError(Exception):
    """The MCP server did not answer: it could not be started or reached, it is gone, it
    timed out, or it broke the protocol. The message names the server, what was tried and
    what to do."""
