"""The JSON boundary: check and meter a value iteratively.

Every value that crosses fd 3 (binding arguments, binding results, a run's value) must be
*lossless* JSON: ``dict`` with ``str`` keys, ``list`` (``tuple`` is accepted and becomes a
list), ``str``, ``int``, finite ``float``, ``bool`` and ``None``. Types are checked exactly, so
a ``dict`` subclass that overrides behaviour, a ``set`` or a ``Decimal`` is refused with a
message naming the type and where it sits, e.g. ``value['a'][2]: set is not JSON``.

The walk uses an explicit stack (memory O(depth), no recursion), so a 10,000-deep list or a
six-million-element list passes or fails cleanly. Sizes are metered as they will be
serialized by :func:`dumps`, and metering stops as soon as a budget is exceeded.
"""

from __future__ import annotations

import json
import math
from typing import Any

__all__ = ["NotJSONError", "ValueTooLargeError", "check_json", "dumps", "loads", "describe_path"]

_dumps = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode


class NotJSONError(TypeError):
    """A value is not lossless JSON. ``path`` says where, ``type_name`` what."""

    def __init__(self, message: str, path: str, type_name: str) -> None:
        super().__init__(message)
        self.path = path
        self.type_name = type_name


class ValueTooLargeError(ValueError):
    """A value's serialized size is over its budget."""

    def __init__(self, message: str, limit: int) -> None:
        super().__init__(message)
        self.limit = limit


def dumps(value: Any) -> str:
    """Serialize a checked value compactly (UTF-8 text, no NaN)."""
    return _dumps(value)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def loads(text: str | bytes) -> Any:
    """Parse JSON strictly: ``NaN`` and ``Infinity`` are refused (``ValueError``)."""
    return json.loads(text, parse_constant=_reject_constant)


def describe_path(root: str, steps: list[str | int]) -> str:
    """Render a path like ``value['a'][2]``."""
    parts = [root]
    for step in steps:
        parts.append(f"[{step!r}]")
    return "".join(parts)


# Serialized size of a str is len + 2 quotes + escapes. Measuring through the encoder is
# exact and fast (C), and strings are bounded by the frame size anyway.
_encode_str = json.encoder.encode_basestring  # type: ignore[attr-defined]


def _str_size(s: str, root: str, keys: list[str | int]) -> int:
    if s.isascii() and s.isprintable() and '"' not in s and "\\" not in s:
        return len(s) + 2
    try:
        return len(_encode_str(s).encode("utf-8"))
    except UnicodeEncodeError as exc:
        where = describe_path(root, [k for k in keys if k != -1])
        raise NotJSONError(
            f"{where}: str holds a lone surrogate {s[exc.start]!r} at index {exc.start}, "
            "which is not valid Unicode and has no UTF-8 form",
            where,
            "str",
        ) from None


def check_json(value: Any, root: str = "value", max_bytes: int | None = None) -> int:
    """Check that ``value`` is lossless JSON and return its serialized size in bytes.

    Raises :class:`NotJSONError` naming the first offending type and its path, or
    :class:`ValueTooLargeError` as soon as the running size passes ``max_bytes``.

    >>> check_json({"a": [1, 2.5, None]})
    18
    >>> check_json({"a": [1, {2}]})
    Traceback (most recent call last):
    ...
    kernelgate.wire.values.NotJSONError: value['a'][1]: set is not JSON
    """
    size = 0
    limit = max_bytes if max_bytes is not None else -1
    # keys runs parallel to the stack: the key or index of the child being visited in each
    # open container, so a path is only rendered when something is wrong.
    keys: list[str | int] = []
    active: set[int] = set()  # ids of containers on the current path: cycle detection
    stack: list[tuple[Any, Any]] = []  # (container, iterator)
    item: Any = value
    have_item = True
    while True:
        if have_item:
            t = type(item)
            if t is str:
                size += _str_size(item, root, keys)
            elif t is int:
                size += len(repr(item))
            elif t is bool or item is None:
                size += 4 if item is not False else 5
            elif t is float:
                if not math.isfinite(item):
                    raise NotJSONError(
                        f"{describe_path(root, keys)}: float {item!r} is not JSON "
                        "(NaN and infinities have no JSON form)",
                        describe_path(root, keys),
                        "float",
                    )
                if item == 0.0 and math.copysign(1.0, item) < 0:
                    raise NotJSONError(
                        f"{describe_path(root, keys)}: float -0.0 is not lossless JSON",
                        describe_path(root, keys),
                        "float",
                    )
                size += len(repr(item))
            elif t is dict or t is list or t is tuple:
                ident = id(item)
                if ident in active:
                    raise NotJSONError(
                        f"{describe_path(root, keys)}: {t.__name__} contains itself (a cycle) "
                        "and is not JSON",
                        describe_path(root, keys),
                        t.__name__,
                    )
                active.add(ident)
                size += 2
                if t is dict:
                    if item:
                        size += len(item) - 1  # commas
                    stack.append((item, iter(item.items())))
                else:
                    if item:
                        size += len(item) - 1
                    stack.append((item, iter(item)))
                keys.append(-1)  # replaced by each child's key or index
            else:
                name = _type_name(item)
                raise NotJSONError(
                    f"{describe_path(root, keys)}: {name} is not JSON",
                    describe_path(root, keys),
                    name,
                )
            if limit >= 0 and size > limit:
                where = describe_path(root, [k for k in keys if k != -1])
                raise ValueTooLargeError(
                    f"{root} is over {limit} bytes as JSON (limit reached at {where})",
                    limit,
                )
        if not stack:
            return size
        container, it = stack[-1]
        nxt = next(it, _END)
        if nxt is _END:
            stack.pop()
            keys.pop()
            active.discard(id(container))
            have_item = False
            continue
        if type(container) is dict:
            key, item = nxt
            if type(key) is not str:
                raise NotJSONError(
                    f"{describe_path(root, keys[:-1])}: dict key {_safe_repr(key)} is "
                    f"{_type_name(key)}, not str; JSON object keys must be str",
                    describe_path(root, keys[:-1]),
                    _type_name(key),
                )
            keys[-1] = key
            size += _str_size(key, root, keys) + 1
        else:
            keys[-1] += 1  # type: ignore[operator]
            item = nxt
        have_item = True


class _End:
    pass


_END = _End()


def _type_name(obj: Any) -> str:
    try:
        t = type(obj)
        name = t.__qualname__
        module = t.__module__
        if type(name) is not str or type(module) is not str:
            return "object"
        if module in ("builtins", "__main__"):
            return name
        return f"{module}.{name}"
    except Exception:
        return "object"


def _safe_repr(obj: Any) -> str:
    try:
        r = repr(obj)
        if type(r) is not str:
            return "<unrepresentable>"
        return r if len(r) <= 60 else r[:57] + "..."
    except Exception:
        return "<unrepresentable>"
