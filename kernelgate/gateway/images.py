"""The images a run showed, for the model APIs that take images.

A program shows an image by displaying it (a ``display_data`` or ``execute_result``
output with ``image/png``, ``image/jpeg``, ``image/gif`` or ``image/webp`` base64 data), or
by returning an MCP ``ImageContent`` (``{"type": "image", "data": ..., "mimeType": ...}``,
what an MCP binding's image answer is to the program). Each becomes a :class:`ToolImage`:
attached when its bytes really are an image of a type the APIs take (the format is read
from the bytes, not the label: an API refuses a whole request over one bad image), within
``max_images`` and ``max_image_bytes``; else only its placeholder line says it was there.

>>> png = base64.b64encode(bytes.fromhex(
...     "89504e470d0a1a0a0000000d4948445200000140000000c80806000000")).decode()
>>> image = ToolImage.from_base64(png, "image/png", "displayed")
>>> image.placeholder(1)
'[image 1: image/png 320x200, 29 bytes, displayed]'
"""

from __future__ import annotations

import base64
import binascii
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

__all__ = [
    "IMAGE_TYPES",
    "MAX_IMAGES",
    "MAX_IMAGE_BYTES",
    "MAX_SIDE",
    "ToolImage",
    "collect_images",
]

#: What the APIs take (Anthropic: these four; OpenAI the same, GIF not animated).
IMAGE_TYPES = ("image/png", "image/jpeg", "image/gif", "image/webp")
#: Images attached to one result at most; the rest get a line saying so.
MAX_IMAGES = 5
#: The largest image attached (decoded bytes): Anthropic's 5 MB limit is on the base64.
MAX_IMAGE_BYTES = 3_750_000
#: The longest side attached (Anthropic refuses larger; OpenAI scales down).
MAX_SIDE = 8000
#: Placeholder lines kept for images not attached; past this, one line counts the rest.
_MAX_LINES = 20


def _size_of(data: bytes) -> tuple[str, int, int] | None:
    """``(mime type, width, height)`` read from the image's own header, or None when the
    bytes are not a PNG, JPEG, GIF or WebP image."""
    if data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR" and len(data) >= 24:
        width, height = struct.unpack(">II", data[16:24])
        return "image/png", width, height
    if data[:6] in (b"GIF87a", b"GIF89a") and len(data) >= 10:
        width, height = struct.unpack("<HH", data[6:10])
        return "image/gif", width, height
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP" and len(data) >= 30:
        kind = data[12:16]
        if kind == b"VP8 " and data[23:26] == b"\x9d\x01\x2a":
            width, height = struct.unpack("<HH", data[26:30])
            return "image/webp", width & 0x3FFF, height & 0x3FFF
        if kind == b"VP8L" and data[20:21] == b"\x2f":
            bits = int.from_bytes(data[21:25], "little")
            return "image/webp", (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
        if kind == b"VP8X":
            width = int.from_bytes(data[24:27], "little") + 1
            height = int.from_bytes(data[27:30], "little") + 1
            return "image/webp", width, height
        return None
    if data[:3] == b"\xff\xd8\xff":
        return _jpeg_size(data)
    return None


def _jpeg_size(data: bytes) -> tuple[str, int, int] | None:
    i = 2
    while i + 9 < len(data):
        if data[i] != 0xFF:
            return None
        marker = data[i + 1]
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:
            i += 2
            continue
        (length,) = struct.unpack(">H", data[i + 2 : i + 4])
        # SOF0..SOF15 but DHT (C4), JPG (C8) and DAC (CC) hold the frame's size.
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            height, width = struct.unpack(">HH", data[i + 5 : i + 9])
            return "image/jpeg", width, height
        i += 2 + length
    return None


def _kb(size: int) -> str:
    if size < 1024:
        return f"{size} bytes"
    if size < 1024 * 1024:
        return f"{size / 1024:.0f} KB"
    return f"{size / (1024 * 1024):.1f} MB"


@dataclass(frozen=True)
class ToolImage:
    """One image a run showed. ``attached`` says whether it goes to the APIs that take
    images; if not, ``reason`` says why. ``data`` is its base64 (empty when not attached),
    ``mime_type`` read from its bytes (the label when they are not an image)."""

    mime_type: str
    data: str
    width: int
    height: int
    size: int
    how: str  # "displayed" or "returned"
    attached: bool = True
    reason: str = ""

    @classmethod
    def from_base64(
        cls, data: Any, label: str, how: str, max_bytes: int = MAX_IMAGE_BYTES
    ) -> ToolImage:
        """The image whose base64 is ``data`` (labelled ``label``), attached if it is one
        the APIs take and at most ``max_bytes``."""
        text = data if isinstance(data, str) else "".join(data) if isinstance(data, list) else ""
        try:
            raw = base64.b64decode("".join(text.split()), validate=True)
        except (binascii.Error, ValueError):
            return cls(label, "", 0, 0, len(text), how, False, "not valid base64")
        sniffed = _size_of(raw)
        if sniffed is None:
            kinds = ", ".join(t.split("/")[1].upper() for t in IMAGE_TYPES)
            reason = f"not a {kinds} image"
            return cls(label, "", 0, 0, len(raw), how, False, reason)
        mime, width, height = sniffed
        if len(raw) > max_bytes:
            reason = f"over {_kb(max_bytes)}"
            return cls(mime, "", width, height, len(raw), how, False, reason)
        if not (0 < width <= MAX_SIDE and 0 < height <= MAX_SIDE):
            reason = f"a side is 0 or over {MAX_SIDE} pixels"
            return cls(mime, "", width, height, len(raw), how, False, reason)
        return cls(mime, base64.b64encode(raw).decode("ascii"), width, height, len(raw), how)

    def not_attached(self, reason: str) -> ToolImage:
        return ToolImage(
            self.mime_type, "", self.width, self.height, self.size, self.how, False, reason
        )

    def placeholder(self, n: int) -> str:
        """The line standing for it in the text: ``[image 1: image/png 320x200, 12 KB,
        displayed]``, and why it is not attached when it is not."""
        dims = f" {self.width}x{self.height}" if self.width else ""
        why = f"; not attached: {self.reason}" if not self.attached else ""
        return f"[image {n}: {self.mime_type}{dims}, {_kb(self.size)}, {self.how}{why}]"


def _is_mcp_image(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and value.get("type") == "image"
        and isinstance(value.get("data"), str)
        and isinstance(value.get("mimeType"), str)
    )


def _displayed(outputs: list[dict[str, Any]]) -> Iterator[tuple[str, Any]]:
    for output in outputs:
        if output.get("output_type") not in ("display_data", "execute_result"):
            continue
        data = output.get("data")
        if not isinstance(data, dict):
            continue
        for mime in IMAGE_TYPES:  # one image per output: the first form the APIs take
            if mime in data:
                yield mime, data[mime]
                break


def collect_images(
    outputs: list[dict[str, Any]],
    value: Any,
    *,
    max_images: int = MAX_IMAGES,
    max_image_bytes: int = MAX_IMAGE_BYTES,
) -> tuple[list[ToolImage], Any, int]:
    """The images of a run: displayed ones (in ``outputs``' order), then MCP images in
    ``value`` (which is given back with each replaced by its placeholder line), and how
    many more were not kept at all (past the placeholder lines' bound)."""
    images: list[ToolImage] = []
    more = 0

    def add(data: Any, label: str, how: str) -> str | None:
        nonlocal more
        if len(images) >= max_images + _MAX_LINES:
            more += 1
            return None
        image = ToolImage.from_base64(data, label, how, max_image_bytes)
        attached = sum(i.attached for i in images)
        if image.attached and attached >= max_images:
            image = image.not_attached(f"over max_images={max_images}")
        images.append(image)
        return image.placeholder(len(images))

    for mime, data in _displayed(outputs):
        add(data, mime, "displayed")

    def walk(node: Any, depth: int) -> Any:
        if _is_mcp_image(node):
            line = add(node["data"], node["mimeType"], "returned")
            return line if line is not None else "[image: not kept]"
        if depth > 50:  # a value is JSON within max_value_bytes; deep ones stay as they are
            return node
        if isinstance(node, dict):
            return {k: walk(v, depth + 1) for k, v in node.items()}
        if isinstance(node, list):
            return [walk(v, depth + 1) for v in node]
        return node

    return images, walk(value, 0), more
