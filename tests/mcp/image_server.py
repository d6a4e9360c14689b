"""An MCP server (official SDK) whose tools answer with images, for the tests: a real PNG,
and bytes that only claim to be one. Started by the tests as a subprocess over stdio."""

from __future__ import annotations

import struct
import zlib

from mcp.server import MCPServer
from mcp.server.mcpserver import Image

server = MCPServer("kernelgate-test-images")


def png(width: int, height: int) -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    rows = b"".join(b"\x00" + b"\x40" * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


@server.tool()
def chart(width: int = 64, height: int = 48) -> Image:
    """A chart, as a PNG image."""
    return Image(data=png(width, height), format="png")


@server.tool()
def bogus() -> Image:
    """Bytes that say they are a PNG and are not."""
    return Image(data=b"<html>not an image</html>", format="png")


if __name__ == "__main__":
    server.run()
