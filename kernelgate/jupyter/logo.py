"""The kernel's logo (a gate: two posts and a bar on a rounded teal square), written into
the kernelspec directory at install time as ``logo-32x32.png``, ``logo-64x64.png`` and
``logo-svg.svg``, the names JupyterLab's launcher looks for.

Drawn here with the standard library (PNG is zlib-compressed scanlines and three CRC'd
chunks), so installing needs no image library and the repository holds no binary.

>>> png = logo_png(32)
>>> png[:8] == b"\\x89PNG\\r\\n\\x1a\\n", len(png) < 2000
(True, True)
"""

from __future__ import annotations

import os
import struct
import zlib

__all__ = ["LOGO_SVG", "logo_png", "write_logos"]

_TEAL = (0x0F, 0x6E, 0x73)
_WHITE = (0xFF, 0xFF, 0xFF)

#: The same picture as the PNGs, on a 64-unit grid.
LOGO_SVG = (
    '<svg xmlns="http://www.w3.org/2000/svg" width="64" height="64" viewBox="0 0 64 64">'
    '<rect width="64" height="64" rx="12" fill="#0f6e73"/>'
    '<rect x="14" y="12" width="8" height="40" fill="#fff"/>'
    '<rect x="42" y="12" width="8" height="40" fill="#fff"/>'
    '<rect x="14" y="24" width="36" height="6" fill="#fff"/>'
    '<rect x="14" y="38" width="36" height="6" fill="#fff"/>'
    "</svg>\n"
)

# The shapes of LOGO_SVG on the 64 grid: (x0, y0, x1, y1) of each white bar.
_BARS = ((14, 12, 22, 52), (42, 12, 50, 52), (14, 24, 50, 30), (14, 38, 50, 44))
_RADIUS = 12


def _pixel(x: float, y: float) -> tuple[int, int, int, int]:
    """The colour at a point of the 64 grid (transparent outside the rounded square)."""
    cx = min(max(x, _RADIUS), 64 - _RADIUS)
    cy = min(max(y, _RADIUS), 64 - _RADIUS)
    if (x - cx) ** 2 + (y - cy) ** 2 > _RADIUS**2:
        return (0, 0, 0, 0)
    inside = any(x0 <= x < x1 and y0 <= y < y1 for x0, y0, x1, y1 in _BARS)
    return (*(_WHITE if inside else _TEAL), 255)


def _chunk(kind: bytes, data: bytes) -> bytes:
    body = kind + data
    return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))


def logo_png(size: int) -> bytes:
    """The logo as an RGBA PNG of ``size`` x ``size`` pixels."""
    scale = 64 / size
    rows = bytearray()
    for py in range(size):
        rows.append(0)  # filter type 0: the scanline as it is
        for px in range(size):
            rows.extend(_pixel((px + 0.5) * scale, (py + 0.5) * scale))
    header = struct.pack(">IIBBBBB", size, size, 8, 6, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + _chunk(b"IHDR", header)
        + _chunk(b"IDAT", zlib.compress(bytes(rows), 9))
        + _chunk(b"IEND", b"")
    )


def write_logos(directory: str) -> None:
    """Write the three logo files JupyterLab's launcher shows into ``directory``."""
    for size in (32, 64):
        with open(os.path.join(directory, f"logo-{size}x{size}.png"), "wb") as f:
            f.write(logo_png(size))
    with open(os.path.join(directory, "logo-svg.svg"), "w", encoding="utf-8") as f:
        f.write(LOGO_SVG)
