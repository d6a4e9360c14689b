"""The JSON boundary: check and meter a value iteratively.

Every value that crosses fd 3 (binding arguments, binding results, a run's value) must be
*lossless* JSON: ``dict`` with ``str`` keys, ``list`` (``tuple`` is accepted and becomes a
list), ``str``, ``int``, finite ``float``, ``bool`` and ``None``. Types are checked exactly, so
a ``dict`` subclass that overrides behaviour, a ``set`` or a ``Decimal`` is refused with a
message naming the type and where it sits, e.g. ``value['a'][2]: set is not JSON``.

The walk uses an explicit stack (memory O(depth), no recursion), so a 10,000-deep list or a
six-million-element list passes or fails cleanly. Sizes are metered as they will be
serialized by :func:`dumps`, and metering stops as soon as a budget is exceeded, without
building the serialized text: a long string is metered a chunk at a time (a 60 MB string of
control characters, 360 MB as JSON, costs one chunk past the budget). Runs of scalars inside
a list are checked and metered in bulk (C speed); anything the bulk pass is not sure about
is redone element by element, so messages and sizes are the same either way. Messages are
bounded whatever the value holds: a key or a class name in a path is cut.

Note that :func:`check_json` has no depth limit but the wire has one: :func:`dumps` and
:func:`loads` use the C ``json`` module, which refuses values nested deeper than about
``sys.getrecursionlimit()`` levels.
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections.abc import Callable
from typing import Any

__all__ = [
    "MAX_DEPTH",
    "NotJSONError",
    "ValueTooLargeError",
    "check_json",
    "dumps",
    "loads",
    "describe_path",
]


def _not_json(value: Any) -> Any:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


# The C encoder itself, made once: ``JSONEncoder.encode`` would add two Python calls and a
# fresh encoder per frame (most frames are a compact call or reply: that was half their
# encoding). No circular-reference markers: they would be one dict shared by every thread
# that sends, and values are checked first (check_json refuses a cycle by its size); a
# cycle that was not still fails, with RecursionError.
_dumps: Callable[[Any], str]
_c_encoder = getattr(json.encoder, "c_make_encoder", None)
if _c_encoder is not None:
    _encode = _c_encoder(
        None, _not_json, json.encoder.encode_basestring, None, ":", ",", False, False, False
    )

    def _dumps(value: Any) -> str:
        return "".join(_encode(value, 0))

else:  # pragma: no cover - an interpreter without the C accelerator
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
    """Serialize a checked value compactly (UTF-8 text, no NaN).

    Raises ``ValueError`` for NaN and infinities, ``TypeError`` for other non-JSON types and
    ``RecursionError`` for values nested too deeply for the C encoder. Call
    :func:`check_json` first: ``dumps`` alone quietly turns ``{1: 2}`` into ``{"1": 2}``.
    """
    return _dumps(value)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _parse_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text[:40]} is out of range for a float")
    return value


# Quick test for a \uD800-\uDFFF escape; only when it matches is the text tokenized.
_SURROGATE_ESCAPE_HINT = re.compile(r"\\u[dD][89a-fA-F]")
# Every escape in valid JSON text; "\\\\" is consumed as one escape, so "\\\\ud800" is not one.
_ESCAPE = re.compile(r"\\(?:u([0-9a-fA-F]{4})|.)", re.DOTALL)
_RAW_SURROGATE = re.compile("[\ud800-\udfff]")


def _check_surrogate_escapes(text: str) -> None:
    pair_at = -1  # where a low surrogate escape must start to complete a pair
    for m in _ESCAPE.finditer(text):
        hexa = m.group(1)
        cp = int(hexa, 16) if hexa is not None else -1
        if pair_at >= 0:
            if m.start() == pair_at and 0xDC00 <= cp <= 0xDFFF:
                pair_at = -1
                continue
            raise ValueError(f"lone surrogate escape at char {pair_at - 6} is not valid Unicode")
        if 0xD800 <= cp <= 0xDBFF:
            pair_at = m.end()
        elif 0xDC00 <= cp <= 0xDFFF:
            raise ValueError(f"lone surrogate escape at char {m.start()} is not valid Unicode")
    if pair_at >= 0:
        raise ValueError(f"lone surrogate escape at char {pair_at - 6} is not valid Unicode")


# One decoder for every frame: json.loads with hooks would build a new one each call.
_decoder = json.JSONDecoder(parse_constant=_reject_constant, parse_float=_parse_float)
_decode = _decoder.decode
# Its scanner, called directly for a frame that is one JSON value and nothing else (every
# frame a sender makes): ``decode`` adds two Python calls and two regex matches. Anything
# else (whitespace around the value, trailing data, no value) goes through ``decode``,
# which accepts or refuses it as before.
_scan: Callable[[str, int], tuple[Any, int]] = _decoder.scan_once  # type: ignore[attr-defined]


def loads(text: str | bytes) -> Any:
    """Parse JSON strictly; every failure is a ``ValueError``.

    Refused: ``NaN`` and ``Infinity``, numbers out of float range (``1e400``), bytes that
    are not UTF-8 (no UTF-16/32 guessing), and lone surrogates, raw or as ``\\ud800``
    escapes, which have no UTF-8 form. ``RecursionError`` is raised for text nested too
    deeply for the C parser.
    """
    if not isinstance(text, str):
        text = bytes(text).decode("utf-8")  # UnicodeDecodeError is a ValueError
    elif _RAW_SURROGATE.search(text) is not None:
        raise ValueError("text holds a lone surrogate, which is not valid Unicode")
    try:
        value, end = _scan(text, 0)
    except StopIteration:  # no value at the start: decode says what is wrong
        end = -1
    if end != len(text):
        value = _decode(text)
    if "\\u" in text and _SURROGATE_ESCAPE_HINT.search(text) is not None:
        _check_surrogate_escapes(text)
    return value


#: Longest key a path shows, and longest path (its start and its end are kept).
_MAX_KEY_SHOWN = 80
_MAX_PATH_SHOWN = 4096


def describe_path(root: str, steps: list[str | int]) -> str:
    """Render a path like ``value['a'][2]``, bounded: a long key is cut, and so is a long
    path (in the middle).

    >>> describe_path("value", ["a", 2])
    "value['a'][2]"
    >>> describe_path("value", ["k" * 1000])[-20:]
    'kkkk...(1000 chars)]'
    """
    parts = [root]
    for step in steps:
        if type(step) is str and len(step) > _MAX_KEY_SHOWN:
            head = repr(step[: _MAX_KEY_SHOWN - 10])[:-1]
            parts.append(f"[{head}...({len(step)} chars)]")
        else:
            parts.append(f"[{step!r}]")
    path = "".join(parts)
    if len(path) > _MAX_PATH_SHOWN:
        half = _MAX_PATH_SHOWN // 2
        path = f"{path[:half]}...{path[-half:]}"
    return path


# Serialized size of a str is len + 2 quotes + escapes. Measuring through the encoder is
# exact and fast (C), and strings are bounded by the frame size anyway.
_encode_str = json.encoder.encode_basestring


#: Characters of a string serialized at once to meter it: bounds the text built.
_STR_CHUNK = 1 << 16


def _str_size(s: str, root: str, keys: list[str | int], budget: int = -1) -> int:
    """Serialized size of ``s``; once past ``budget`` (if not negative) a size over it is
    returned without metering the rest."""
    if s.isascii() and s.isprintable() and '"' not in s and "\\" not in s:
        return len(s) + 2
    try:
        if len(s) <= _STR_CHUNK:
            return len(_encode_str(s).encode("utf-8"))
        # A chunk at a time, each without its two quotes: an escape never spans chunks.
        size = 2
        for i in range(0, len(s), _STR_CHUNK):
            size += len(_encode_str(s[i : i + _STR_CHUNK]).encode("utf-8")) - 2
            if 0 <= budget < size:
                return size
        return size
    except UnicodeEncodeError:
        where = describe_path(root, [k for k in keys if k != -1])
        # exc.start indexes the encoded text (quotes, escapes): find the index in s itself.
        m = _RAW_SURROGATE.search(s)
        at = m.start() if m is not None else 0
        raise NotJSONError(
            f"{where}: str holds a lone surrogate {s[at]!r} at index {at}, "
            "which is not valid Unicode and has no UTF-8 form",
            where,
            "str",
        ) from None


def _int_size(n: int, root: str, keys: list[str | int]) -> int:
    try:
        return len(repr(n))
    except ValueError:  # more digits than sys.get_int_max_str_digits() allows
        where = describe_path(root, keys)
        limit = getattr(sys, "get_int_max_str_digits", lambda: 4300)()
        raise NotJSONError(
            f"{where}: int with {n.bit_length()} bits is too large to serialize "
            f"(more than {limit} digits)",
            where,
            "int",
        ) from None


_SCALARS = frozenset({str, int, float, bool, type(None)})
_BULK = 2048  # elements per bulk step
_BULK_CHARS = 1 << 20  # most characters of strings serialized in one bulk step
_NEG_ZERO = re.compile(r"[\[,]-0\.0[,\]]")


def _bulk_size(chunk: list[Any] | tuple[Any, ...]) -> int:
    """Serialized size of a run of exactly-typed scalars (commas excluded), or -1 if any of
    them may be refused: the element-by-element walk then decides, with the exact path."""
    types = set(map(type, chunk))
    if str in types:
        # Long strings are metered one by one, against the budget: the bulk text of a
        # few of them could be far larger than anything the value may be.
        strs = chunk if len(types) == 1 else [x for x in chunk if type(x) is str]
        if sum(map(len, strs)) > _BULK_CHARS:
            return -1
    try:
        text = _dumps(chunk)  # ValueError for NaN/inf or an int too long to print
    except ValueError:
        return -1
    if float in types and _NEG_ZERO.search(text) is not None:
        return -1
    if text.isascii():
        n = len(text)
    else:
        try:
            n = len(text.encode("utf-8"))
        except UnicodeEncodeError:  # a lone surrogate
            return -1
    return n - 2 - (len(chunk) - 1)


#: Deepest nesting a value may have: deeper ones could not be encoded or parsed without
#: recursion, so they are refused here, cleanly, with the path.
MAX_DEPTH = 500


def check_json(value: Any, root: str = "value", max_bytes: int | None = None) -> int:
    """Check that ``value`` is lossless JSON and return its serialized size in bytes.

    The size is exactly ``len(dumps(value).encode("utf-8"))``. Raises
    :class:`NotJSONError` naming the first offending type and its path, or
    :class:`ValueTooLargeError` as soon as the running size passes ``max_bytes``.

    >>> check_json({"a": [1, 2.5, None]})
    18
    >>> check_json({"a": [1, {2}]})
    Traceback (most recent call last):
    ...
    kernelgate.wire.values.NotJSONError: value['a'][1]: set is not JSON
    """
    # long: one iterative loop over the whole value (no recursion, no call per node): it
    # runs on every argument, answer and value that crosses the wire, where a split into
    # helpers would cost a call per node.
    limit = max_bytes if max_bytes is not None else -1
    t = type(value)
    if value is None or t is bool or t is int or t is str:
        # A lone scalar (most binding results and many arguments): no walk to set up.
        if t is str:
            size = _str_size(value, root, [], limit)
        elif t is int:
            size = _int_size(value, root, [])
        else:
            size = 4 if value is not False else 5
        if limit >= 0 and size > limit:
            _too_large(root, limit, [])
        return size
    size = 0
    # keys runs parallel to the stack: the key or index of the child being visited in each
    # open container (-1 before the first), so a path is only rendered when needed.
    keys: list[str | int] = []
    active: set[int] = set()  # ids of containers on the current path: cycle detection
    # One frame per open container: [container, dict items iterator or None for a
    # list/tuple, index before which no bulk step is tried].
    stack: list[list[Any]] = []
    item: Any = value
    have_item = True
    while True:
        if have_item:
            t = type(item)
            if t is str:
                size += _str_size(item, root, keys, limit - size if limit >= 0 else -1)
            elif t is int:
                size += _int_size(item, root, keys)
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
                if len(stack) >= MAX_DEPTH:
                    where = describe_path(root, keys)
                    raise NotJSONError(
                        f"{where}: nested deeper than {MAX_DEPTH} levels; values crossing the "
                        f"boundary may nest at most {MAX_DEPTH} deep (flatten the structure)",
                        where,
                        t.__name__,
                    )
                active.add(ident)
                size += 2
                if item:
                    size += len(item) - 1  # commas
                stack.append([item, iter(item.items()) if t is dict else None, 0])
                keys.append(-1)  # replaced by each child's key or index
            else:
                name = _type_name(item)
                raise NotJSONError(
                    f"{describe_path(root, keys)}: {name} is not JSON",
                    describe_path(root, keys),
                    name,
                )
            if limit >= 0 and size > limit:
                _too_large(root, limit, keys)
        if not stack:
            return size
        frame = stack[-1]
        container, it = frame[0], frame[1]
        if it is not None:  # a dict
            nxt = next(it, _END)
            if nxt is _END:
                _pop(stack, keys, active)
                have_item = False
                continue
            key, item = nxt
            if type(key) is not str:
                raise NotJSONError(
                    f"{describe_path(root, keys[:-1])}: dict key {_safe_repr(key)} is "
                    f"{_type_name(key)}, not str; JSON object keys must be str",
                    describe_path(root, keys[:-1]),
                    _type_name(key),
                )
            keys[-1] = key
            size += _str_size(key, root, keys, limit - size if limit >= 0 else -1) + 1
            if limit >= 0 and size > limit:
                _too_large(root, limit, keys)
            have_item = True
            continue
        i: int = keys[-1] + 1  # type: ignore[operator]
        if i >= len(container):
            _pop(stack, keys, active)
            have_item = False
            continue
        if i >= frame[2] and type(container[i]) in _SCALARS:
            chunk = container[i : i + _BULK]
            n = -1
            if len(chunk) > 1 and set(map(type, chunk)) <= _SCALARS:
                n = _bulk_size(chunk)
            if n >= 0 and (limit < 0 or size + n <= limit):
                size += n
                keys[-1] = i + len(chunk) - 1
                have_item = False
                continue
            frame[2] = i + _BULK  # walk this run element by element
        keys[-1] = i
        item = container[i]
        have_item = True


def _pop(stack: list[list[Any]], keys: list[str | int], active: set[int]) -> None:
    active.discard(id(stack.pop()[0]))
    keys.pop()


def _too_large(root: str, limit: int, keys: list[str | int]) -> None:
    where = describe_path(root, [k for k in keys if k != -1])
    raise ValueTooLargeError(
        f"{root} is over {limit} bytes as JSON (limit reached at {where})", limit
    )


class _End:
    pass


_END: Any = _End()


_MAX_NAME_SHOWN = 200


def _type_name(obj: Any) -> str:
    try:
        t = type(obj)
        name = t.__qualname__
        module = t.__module__
        if type(name) is not str or type(module) is not str:
            return "object"
        full = name if module in ("builtins", "__main__") else f"{module}.{name}"
        if len(full) > _MAX_NAME_SHOWN:
            full = f"{full[: _MAX_NAME_SHOWN - 20]}...({len(full)} chars)"
        return full.encode("utf-8", "backslashreplace").decode("utf-8")
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
