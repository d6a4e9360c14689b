"""JSON helpers for recordings: canonical keys, dict key order, and short readable forms.

Everything here walks values iteratively (an explicit stack), so depth never meets the
recursion limit, and the readable forms stop working as soon as they have enough text:
shortening an 8 MB value costs about as much as shortening an 8 kB one.
"""

from __future__ import annotations

import json
import reprlib
from typing import Any

__all__ = [
    "canonical",
    "short_repr",
    "summarize",
    "preview_json",
    "json_size",
    "fmt_duration",
    "fmt_bytes",
]

_canonical = json.JSONEncoder(
    ensure_ascii=False, allow_nan=False, sort_keys=True, separators=(",", ":")
).encode
_compact = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode


def canonical(value: Any) -> str:
    """JSON text with sorted keys: equal for equal JSON values, whatever their dict order.

    ``1``, ``1.0`` and ``True`` stay distinct (as they are in JSON).

    >>> canonical({"b": 1, "a": [1.0, True]})
    '{"a":[1.0,true],"b":1}'
    """
    return _canonical(value)


def json_size(value: Any) -> int:
    """Size of ``value`` as compact UTF-8 JSON, in bytes."""
    return len(_compact(value).encode("utf-8"))


_repr = reprlib.Repr()
_repr.maxlevel = 3
_repr.maxlist = _repr.maxtuple = 5
_repr.maxdict = 4
_repr.maxstring = 40
_repr.maxlong = 40
_repr.maxother = 40


def short_repr(value: Any, width: int = 60) -> str:
    """``repr(value)`` as the program sees it, shortened to about ``width`` characters.

    >>> short_repr("x" * 100, 12)
    "'xxxxxxxxx…'"
    >>> short_repr({"a": [1, 2]})
    "{'a': [1, 2]}"
    """
    if type(value) is str:
        text = repr(value[:width])
        if len(text) <= width:
            return text
        return text[: width - 2] + "…" + text[-1]
    text = _repr.repr(value)
    return text if len(text) <= width else text[: width - 1] + "…"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def summarize(value: Any, width: int = 40) -> str:
    """A few words for a value: itself when short, else its shape (``[3 items]``).

    >>> summarize([1, 2])
    '[1, 2]'
    >>> summarize([{"id": i, "title": "t" * 20} for i in range(3)])
    '[3 items]'
    >>> summarize({"id": "comms", "title": "Comms: custom messages between kernel"})
    '{2 keys: id, title}'
    >>> summarize("y" * 100)
    "'yyyyyyyyyyyyyyyyyyyyyyyyyyyy…' (100 chars)"
    """
    t = type(value)
    if t is str:
        if len(value) + 2 <= width:
            return repr(value)
        head = repr(value[: max(width - 12, 8)])
        return f"{head[:-1]}…{head[-1]} ({len(value)} chars)"
    text = _repr.repr(value)
    if len(text) <= width and "..." not in text:
        return text
    if t is list or t is tuple:
        return f"[{_plural(len(value), 'item')}]"
    if t is dict:
        keys = ", ".join(str(k) for k in list(value)[:4])
        more = ", …" if len(value) > 4 else ""
        shown = f"{{{_plural(len(value), 'key')}: {keys}{more}}}"
        if len(shown) > width + 20:
            return f"{{{_plural(len(value), 'key')}}}"
        return shown
    return text if len(text) <= width else text[: width - 1] + "…"


def preview_json(value: Any, limit: int) -> tuple[str, bool]:
    """Indented JSON of ``value``, at most ``limit`` characters; and whether it was cut.

    Encoding stops once ``limit`` is reached, so a huge value is never encoded whole.

    >>> preview_json({"a": [1, 2]}, 100)
    ('{\\n  "a": [\\n    1,\\n    2\\n  ]\\n}', False)
    >>> preview_json(list(range(1000)), 20)[1]
    True
    """
    encoder = json.JSONEncoder(ensure_ascii=False, allow_nan=False, indent=2)
    parts: list[str] = []
    used = 0
    for chunk in encoder.iterencode(value):
        parts.append(chunk)
        used += len(chunk)
        if used > limit:
            return "".join(parts)[:limit], True
    return "".join(parts), False


def fmt_duration(seconds: float) -> str:
    """``0.0012`` -> ``'1.2 ms'``; ``2.5`` -> ``'2.50 s'``.

    >>> fmt_duration(0.0012), fmt_duration(0.000012), fmt_duration(2.5), fmt_duration(125)
    ('1.2 ms', '12 µs', '2.50 s', '2 min 5 s')
    """
    if seconds < 0.001:
        return f"{seconds * 1e6:.0f} µs"
    if seconds < 1:
        return f"{seconds * 1000:.1f} ms"
    if seconds < 60:
        return f"{seconds:.2f} s"
    minutes, rest = divmod(seconds, 60)
    return f"{int(minutes)} min {rest:.0f} s"


def fmt_bytes(n: int) -> str:
    """``1536`` -> ``'1.5 kB'``.

    >>> fmt_bytes(900), fmt_bytes(1536), fmt_bytes(3 * 1024 * 1024)
    ('900 bytes', '1.5 kB', '3.0 MB')
    """
    if n < 1024:
        return f"{n} bytes"
    if n < 1024 * 1024:
        return f"{n / 1024:.1f} kB"
    return f"{n / (1024 * 1024):.1f} MB"
