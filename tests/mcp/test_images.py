"""Images reach the model: an MCP binding's ImageContent returned by a program, and a
displayed image through kernelgate's own MCP server, checked with the SDK's client."""

from __future__ import annotations

import asyncio
import base64
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.types import ImageContent, TextContent

import kernelgate.mcp
from kernelgate import Gateway, Limits
from kernelgate.mcp.server import build_server

from .image_server import png

IMAGE_SERVER = [sys.executable, str(Path(__file__).parent / "image_server.py")]
FAST = Limits(wall_seconds=30)


@pytest.mark.timeout(120)
def test_an_mcp_image_the_program_returns_is_an_image_for_the_model() -> None:
    async def main() -> Any:
        async with kernelgate.mcp.connect(IMAGE_SERVER) as images:
            async with Gateway(namespaces={"images": images}, pool_size=0) as gw:
                one = await gw.run_tool(
                    "c = await images.chart(width=40, height=30)\n"
                    "return {'caption': 'sales', 'chart': c}",
                    limits=FAST,
                )
                bad = await gw.run_tool("return await images.bogus()", limits=FAST)
                return one, bad

    one, bad = asyncio.run(main())
    data = base64.b64encode(png(40, 30)).decode()
    (image,) = one.images
    assert image.attached and image.data == data and image.how == "returned"
    # The value's JSON holds the line, not 200 characters of base64 per row.
    assert one.text == (
        'returned:\n{"caption": "sales", "chart": "[image 1: image/png 40x30, '
        f'{len(png(40, 30))} bytes, returned]"}}'
    )
    content = one.to_anthropic("toolu_1")["content"]
    assert content[1] == {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": data},
    }
    assert one.result.value["chart"]["data"] == data  # the result keeps the whole value
    assert bad.images[0].attached is False
    assert "not attached: not a PNG, JPEG, GIF, WEBP image" in bad.text
    assert bad.to_anthropic("t")["content"] == bad.text  # no image the API would refuse


@pytest.mark.timeout(120)
def test_kernelgate_mcp_answers_run_code_with_image_content() -> None:
    data = base64.b64encode(png(8, 8)).decode()
    program = (
        "class P:\n    def _repr_mimebundle_(self):\n"
        f"        return {{'image/png': {data!r}, 'text/plain': 'a picture'}}\n"
        "display(P())\nreturn 'drawn'"
    )

    async def main() -> Any:
        async with Gateway(pool_size=0) as gw:
            async with Client(build_server(gw), read_timeout_seconds=60) as client:
                return await client.call_tool("run_code", {"code": program})

    result = asyncio.run(main())
    assert result.is_error is False
    text, image = result.content
    assert isinstance(text, TextContent) and isinstance(image, ImageContent)
    assert text.text == (
        f'images:\n[image 1: image/png 8x8, {len(png(8, 8))} bytes, displayed]\nreturned:\n"drawn"'
    )
    assert image.data == data and image.mime_type == "image/png"
