"""``display(obj)`` in programs, and the MIME bundle of an object (as IPython builds it).

>>> mime_bundle(3)
({'text/plain': '3'}, {})
"""

from __future__ import annotations

import base64
from typing import Any

from kernelgate.model.constants import FRAME_OVERHEAD
from kernelgate.wire.values import NotJSONError, ValueTooLargeError, check_json

__all__ = ["mime_bundle", "plain_repr", "display_bundle"]

_REPR_METHODS = (
    ("_repr_html_", "text/html"),
    ("_repr_markdown_", "text/markdown"),
    ("_repr_svg_", "image/svg+xml"),
    ("_repr_png_", "image/png"),
    ("_repr_jpeg_", "image/jpeg"),
    ("_repr_latex_", "text/latex"),
    ("_repr_json_", "application/json"),
    ("_repr_javascript_", "application/javascript"),
)


def plain_repr(obj: Any, limit: int = 32 * 1024) -> str:
    """``repr(obj)`` cut to ``limit`` characters; never raises."""
    try:
        text = repr(obj)
        if type(text) is not str:
            raise TypeError("__repr__ returned non-string")
    except Exception as exc:
        return f"<{type(obj).__qualname__} object: repr() failed: {type(exc).__name__}>"
    if len(text) > limit:
        return text[:limit] + f"... [{len(text) - limit} more characters cut]"
    return text


def mime_bundle(obj: Any, limit: int = 32 * 1024) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(data, metadata)`` for ``obj``: ``text/plain`` plus whatever ``_repr_*_`` offer.

    A ``_repr_mimebundle_`` wins, as in IPython. A repr method that raises or returns the
    wrong type is skipped: display never fails because of one representation.
    """
    data: dict[str, Any] = {}
    metadata: dict[str, Any] = {}
    method = _lookup(obj, "_repr_mimebundle_")
    if method is not None:
        try:
            got = method()
            if isinstance(got, tuple) and len(got) == 2:
                got, meta = got
                if isinstance(meta, dict):
                    metadata.update(meta)
            if isinstance(got, dict):
                # Only JSON MIME types may hold non-text values (the host refuses others).
                data.update(
                    (k, v)
                    for k, v in got.items()
                    if isinstance(k, str) and (k.endswith("json") or isinstance(v, str))
                )
        except Exception:
            pass
    for name, mime in _REPR_METHODS:
        if mime in data:
            continue
        method = _lookup(obj, name)
        if method is None:
            continue
        try:
            value = method()
        except Exception:
            continue
        if isinstance(value, tuple) and len(value) == 2:
            value, meta = value
            if isinstance(meta, dict):
                metadata[mime] = meta
        if value is None:
            continue
        if isinstance(value, bytes):
            value = base64.b64encode(value).decode("ascii")
        if mime.endswith("json") or isinstance(value, str):
            data[mime] = value
    data.setdefault("text/plain", plain_repr(obj, limit))
    return data, metadata


def _lookup(obj: Any, name: str) -> Any:
    # Look up on the type, as IPython does, so instances that answer every attribute
    # (proxies, mocks) do not claim every format.
    try:
        if getattr(type(obj), name, None) is None:
            return None
        return getattr(obj, name)
    except Exception:
        return None


def display_bundle(obj: Any, max_frame_bytes: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(data, metadata)`` of one ``display(obj)``, fit for one frame of ``max_frame_bytes``.

    A representation that is not JSON is dropped; metadata that is not JSON is dropped; a
    bundle too big for the frame becomes one ``text/plain`` line saying so.
    """
    data, metadata = mime_bundle(obj)
    for key in list(data):
        try:
            check_json(data[key], f"display data[{key!r}]")
        except (NotJSONError, ValueTooLargeError):
            del data[key]
    try:
        size = check_json(data, "display", max_frame_bytes - FRAME_OVERHEAD)
        check_json(metadata, "display metadata", max_frame_bytes - size)
    except ValueTooLargeError:
        data = {
            "text/plain": "[kernelgate: display output over "
            f"max_frame_bytes={max_frame_bytes} not shown]"
        }
        metadata = {}
    except NotJSONError:
        metadata = {}
    return data, metadata
