"""kernelgate and MCP (the Model Context Protocol), with the official ``mcp`` SDK.

- :func:`connect`: an MCP server's tools as a namespace of bindings (``kernelgate[mcp]``);
- :mod:`.server`: kernelgate as an MCP server with one tool, ``run_code``
  (``kernelgate mcp``).

A layer above the gateway, beside the Jupyter front: it uses the gateway, the model and
the notebooks (a session log), never the other way round.
"""

from __future__ import annotations

try:
    import mcp as _sdk  # noqa: F401  (the SDK: say how to get it, not just that it is missing)
except ImportError as exc:  # pragma: no cover - the extra is installed wherever tests run
    raise ImportError(
        "kernelgate.mcp needs the official MCP SDK: pip install 'kernelgate[mcp]'"
    ) from exc

from .client import McpServerError, McpToolError, connect

__all__ = ["McpServerError", "McpToolError", "connect"]
