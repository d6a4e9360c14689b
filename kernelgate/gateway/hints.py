"""The value side of type hints at the JSON boundary: a :class:`Hint` per kind of
annotation (``int``, ``list[T]``, ``Literal``, a date...) that loads a JSON value for a
binding, dumps a binding's value to JSON, and gives its JSON Schema. Named types (Enum,
TypedDict, dataclass) are :mod:`.namedhints`; :mod:`.conversion` builds hints from
annotations.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import datetime
import enum
import inspect
import math
import re
import sys
import typing
import uuid
from collections.abc import Callable
from typing import Any

from kernelgate.model.schema import shown

__all__ = [
    "TEXTS",
    "AnyHint",
    "Defs",
    "DictHint",
    "ExactHint",
    "FloatHint",
    "Hint",
    "IntHint",
    "ListHint",
    "LiteralHint",
    "Mismatch",
    "Named",
    "TextHint",
    "TupleHint",
    "UnionHint",
    "UnsupportedHint",
    "enum_schema",
    "join",
    "same_json",
    "short_key",
    "shown",
    "own_doc",
    "typing_names",
]


def typing_names(*names: str) -> tuple[Any, ...]:
    """``typing``'s objects of these names (and ``typing_extensions``' if a program of the
    host's imported it): the ones this Python has (3.10 has no ``NotRequired``)."""
    found = [getattr(typing, n) for n in names if hasattr(typing, n)]
    extensions = sys.modules.get("typing_extensions")
    if extensions is not None:
        found += [getattr(extensions, n) for n in names if hasattr(extensions, n)]
    return tuple(found)


class UnsupportedHint(TypeError):
    """An annotation JSON cannot carry; the message says what to write instead."""


class Mismatch(Exception):
    """A value that does not fit its hint: where in the value, what was expected, what came."""

    def __init__(self, path: str, expected: str, value: Any, detail: str = "") -> None:
        self.path = path
        self.expected = expected
        self.value = value
        self.detail = detail
        super().__init__(self.message())

    def message(self, what: str = "argument") -> str:
        path = self.path
        where = f"{what}{path}" if path.startswith("[") else f"{what} {path}" if path else what
        if self.detail:
            return f"{where}: {self.detail}"
        return f"{where}: expected {self.expected}, got {shown(self.value)}"


def join(path: str, key: Any) -> str:
    """``path[0]``, ``path['key']``: where a nested value is."""
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}[{short_key(key)}]"


def short_key(key: Any) -> str:
    """A key as an error shows it: a program's keys may be long."""
    text = repr(key)
    return text if len(text) <= 42 else text[:39] + "..."


class Defs:
    """The named types (``$defs``) a schema refers to, one name per class."""

    def __init__(self) -> None:
        self.schemas: dict[str, dict[str, Any]] = {}
        self._names: dict[Any, str] = {}

    def ref(self, hint: Named) -> dict[str, Any]:
        name = self._names.get(hint.cls)
        if name is None:
            name = hint.cls.__name__
            if name in self.schemas or name in self._names.values():
                qual = f"{hint.cls.__module__}__{hint.cls.__qualname__}"
                name = re.sub(r"[^A-Za-z0-9_]", "_", qual)
            self._names[hint.cls] = name
            self.schemas[name] = {}  # taken before the body: a recursive type refers to it
            self.schemas[name] = hint.body(self)
        return {"$ref": f"#/$defs/{name}"}


class Hint:
    """A checker and converter for one annotation (see the module's docstring)."""

    #: What an error says was expected (``int``, ``'open' or 'closed'``).
    expected = "anything JSON"
    #: ``load`` returns JSON values unchanged and refuses none: callers skip it.
    passthrough = False
    #: Types whose values ``load`` and ``dump`` return unchanged (``type(v) in exact``):
    #: the per-call fast path of simple hints (int, str...) skips the method call.
    exact: tuple[type, ...] = ()

    def load(self, value: Any, path: str) -> Any:
        """The JSON ``value`` as the binding gets it; :class:`Mismatch` if it does not fit."""
        return value

    def dump(self, value: Any, path: str) -> Any:
        """The binding's ``value`` as JSON; :class:`Mismatch` if it does not fit."""
        return value

    def schema(self, defs: Defs) -> dict[str, Any]:
        return {}


class AnyHint(Hint):
    passthrough = True


class ExactHint(Hint):
    """str, bool, None: one JSON type, nothing to convert."""

    def __init__(self, kind: type, expected: str, json_type: str) -> None:
        self.kind = kind
        self.exact = (kind,)
        self.expected = expected
        self.json_type = json_type

    def load(self, value: Any, path: str) -> Any:
        if type(value) is not self.kind:
            raise Mismatch(path, self.expected, value)
        return value

    def dump(self, value: Any, path: str) -> Any:
        if isinstance(value, self.kind) and not isinstance(value, enum.Enum):
            return value
        if isinstance(value, enum.Enum) and isinstance(value.value, self.kind):
            return value.value  # a StrEnum member where the hint says str: its value
        raise Mismatch(path, self.expected, value)

    def schema(self, defs: Defs) -> dict[str, Any]:
        return {"type": self.json_type}


class IntHint(Hint):
    expected = "int"
    exact = (int,)

    def load(self, value: Any, path: str) -> Any:
        if type(value) is int:
            return value
        if type(value) is float and value.is_integer():
            return int(value)  # 3.0 is JSON's 3 (a Python program's float arrives so)
        raise Mismatch(path, self.expected, value)

    def dump(self, value: Any, path: str) -> Any:
        if isinstance(value, int) and not isinstance(value, bool):
            return int(value)
        raise Mismatch(path, self.expected, value)

    def schema(self, defs: Defs) -> dict[str, Any]:
        return {"type": "integer"}


class FloatHint(Hint):
    expected = "float"
    exact = (float, int)

    def load(self, value: Any, path: str) -> Any:
        kind = type(value)
        if kind is float or kind is int:
            return value  # an int is a float to a type checker too (PEP 484)
        raise Mismatch(path, self.expected, value)

    def dump(self, value: Any, path: str) -> Any:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if isinstance(value, float) and not math.isfinite(value):
                raise Mismatch(path, self.expected, value, f"{value!r} is not a JSON number")
            return value
        raise Mismatch(path, self.expected, value)

    def schema(self, defs: Defs) -> dict[str, Any]:
        return {"type": "number"}


class TextHint(Hint):
    """A value whose JSON form is a string: date, datetime, time, UUID."""

    def __init__(self, kind: type, expected: str, fmt: str, parse: Callable[[str], Any]) -> None:
        self.kind = kind
        self.expected = expected
        self.fmt = fmt
        self.parse = parse

    def load(self, value: Any, path: str) -> Any:
        if type(value) is str:
            try:
                return self.parse(value)
            except ValueError:
                pass
        raise Mismatch(path, self.expected, value)

    def dump(self, value: Any, path: str) -> Any:
        # A datetime is a date to isinstance, but its JSON form is not one (and the reverse).
        if isinstance(value, self.kind) and not (
            self.kind is datetime.date and isinstance(value, datetime.datetime)
        ):
            obj: Any = value
            return str(obj) if self.kind is uuid.UUID else obj.isoformat()
        raise Mismatch(path, f"a {self.kind.__name__} object", value)

    def schema(self, defs: Defs) -> dict[str, Any]:
        return {"type": "string", "format": self.fmt}


def _zulu(text: str) -> str:
    """A trailing ``Z`` (JavaScript's ``toISOString()``) as ``+00:00``: Python 3.10's
    ``fromisoformat`` does not read it."""
    return text[:-1] + "+00:00" if text.endswith(("Z", "z")) else text


def _parse_date(text: str) -> datetime.date:
    if len(text) != 10:  # fromisoformat also takes 20240102; JSON Schema's date does not
        raise ValueError(text)
    return datetime.date.fromisoformat(text)


TEXTS: dict[Any, TextHint] = {
    datetime.date: TextHint(
        datetime.date, "a date as an ISO 8601 string (YYYY-MM-DD)", "date", _parse_date
    ),
    datetime.datetime: TextHint(
        datetime.datetime,
        "a date and time as an ISO 8601 string (YYYY-MM-DDTHH:MM:SS[+HH:MM])",
        "date-time",
        lambda text: datetime.datetime.fromisoformat(_zulu(text)),
    ),
    datetime.time: TextHint(
        datetime.time,
        "a time as an ISO 8601 string (HH:MM[:SS])",
        "time",
        datetime.time.fromisoformat,
    ),
    uuid.UUID: TextHint(uuid.UUID, "a UUID as a string", "uuid", uuid.UUID),
}


class ListHint(Hint):
    """list[T] (and Sequence[T], Iterable[T]): a JSON array; tuple[T, ...] too, as a tuple."""

    def __init__(self, item: Hint, as_tuple: bool = False) -> None:
        self.item = item
        self.as_tuple = as_tuple
        self.expected = (
            f"an array of {item.expected}" if not isinstance(item, AnyHint) else ("an array")
        )

    def load(self, value: Any, path: str) -> Any:
        if type(value) is not list:
            raise Mismatch(path, self.expected, value)
        item = self.item
        out = (
            value
            if item.passthrough
            else [item.load(v, join(path, i)) for i, v in enumerate(value)]
        )
        return tuple(out) if self.as_tuple else out

    def dump(self, value: Any, path: str) -> Any:
        if not isinstance(value, (list, tuple)):
            raise Mismatch(path, self.expected, value)
        item = self.item
        return [item.dump(v, join(path, i)) for i, v in enumerate(value)]

    def schema(self, defs: Defs) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "array"}
        if not isinstance(self.item, AnyHint):
            out["items"] = self.item.schema(defs)
        return out


class TupleHint(Hint):
    """tuple[A, B]: a JSON array of exactly those items, a tuple for the binding."""

    def __init__(self, items: list[Hint]) -> None:
        self.items = items
        self.expected = f"an array of {len(items)} items"

    def load(self, value: Any, path: str) -> Any:
        if type(value) is not list or len(value) != len(self.items):
            raise Mismatch(path, self.expected, value)
        pairs = enumerate(zip(self.items, value, strict=True))
        return tuple(h.load(v, join(path, i)) for i, (h, v) in pairs)

    def dump(self, value: Any, path: str) -> Any:
        if not isinstance(value, (list, tuple)) or len(value) != len(self.items):
            raise Mismatch(path, self.expected, value)
        pairs = enumerate(zip(self.items, value, strict=True))
        return [h.dump(v, join(path, i)) for i, (h, v) in pairs]

    def schema(self, defs: Defs) -> dict[str, Any]:
        n = len(self.items)
        return {
            "type": "array",
            "prefixItems": [h.schema(defs) for h in self.items],
            "minItems": n,
            "maxItems": n,
        }


class DictHint(Hint):
    """dict[str, T] (and Mapping[str, T]): a JSON object."""

    def __init__(self, value: Hint) -> None:
        self.value = value
        self.expected = (
            "an object" if isinstance(value, AnyHint) else (f"an object of {value.expected}")
        )

    def load(self, value: Any, path: str) -> Any:
        if type(value) is not dict:
            raise Mismatch(path, self.expected, value)
        hint = self.value
        if hint.passthrough:
            return value
        return {k: hint.load(v, join(path, k)) for k, v in value.items()}

    def dump(self, value: Any, path: str) -> Any:
        if not isinstance(value, collections.abc.Mapping):
            raise Mismatch(path, self.expected, value)
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise Mismatch(path, self.expected, value, f"key {short_key(k)} is not a string")
            out[k] = self.value.dump(v, join(path, k))
        return out

    def schema(self, defs: Defs) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "object"}
        if not isinstance(self.value, AnyHint):
            out["additionalProperties"] = self.value.schema(defs)
        return out


def same_json(a: Any, b: Any) -> bool:
    """JSON equality: True is not 1."""
    return (type(a) is type(b) and a == b) or (
        type(a) in (int, float) and type(b) in (int, float) and a == b
    )


class LiteralHint(Hint):
    """Literal[...] of str/int/bool/None (or Enum members, by value)."""

    def __init__(self, values: tuple[Any, ...]) -> None:
        self.values = values
        self.json = [v.value if isinstance(v, enum.Enum) else v for v in values]
        self.expected = " or ".join(repr(v) for v in self.json[:20])
        if len(values) > 20:
            self.expected += f" (or {len(values) - 20} more)"

    def load(self, value: Any, path: str) -> Any:
        for literal, json in zip(self.values, self.json, strict=True):
            if same_json(value, json):
                return literal
        raise Mismatch(path, self.expected, value)

    def dump(self, value: Any, path: str) -> Any:
        for literal, json in zip(self.values, self.json, strict=True):
            if same_json(value, literal) or (value is literal) or same_json(value, json):
                return json
        raise Mismatch(path, self.expected, value)

    def schema(self, defs: Defs) -> dict[str, Any]:
        return enum_schema(self.json)


def enum_schema(values: list[Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"enum": list(values)}
    kinds = {type(v) for v in values}
    names = {str: "string", int: "integer", float: "number", bool: "boolean", type(None): "null"}
    if len(kinds) == 1 and next(iter(kinds)) in names:
        out["type"] = names[next(iter(kinds))]
    return out


class UnionHint(Hint):
    def __init__(self, options: list[Hint]) -> None:
        self.options = options
        self.expected = " or ".join(h.expected for h in options)
        # X | None: a value that is not None goes to X, whose error is the precise one.
        rest = [h for h in options if not (isinstance(h, ExactHint) and h.kind is type(None))]
        self.optional = rest[0] if len(rest) == 1 and len(options) == 2 else None
        # A value of a type an option takes as it is stays so (``int | float`` keeps 3.0 a
        # float, as pydantic's smart mode does), before any option converts it.
        self.exact = tuple(dict.fromkeys(t for h in options for t in h.exact))

    def load(self, value: Any, path: str) -> Any:
        if self.optional is not None:
            return None if value is None else self.optional.load(value, path)
        if type(value) in self.exact:
            return value
        for hint in self.options:
            try:
                return hint.load(value, path)
            except Mismatch:
                continue
        raise Mismatch(path, self.expected, value)

    def dump(self, value: Any, path: str) -> Any:
        if self.optional is not None:
            return None if value is None else self.optional.dump(value, path)
        for hint in self.options:
            try:
                return hint.dump(value, path)
            except Mismatch:
                continue
        raise Mismatch(path, self.expected, value)

    def schema(self, defs: Defs) -> dict[str, Any]:
        return {"anyOf": [h.schema(defs) for h in self.options]}


class Named(Hint):
    """A class with a name of its own in the schema's ``$defs``."""

    cls: Any

    def schema(self, defs: Defs) -> dict[str, Any]:
        return defs.ref(self)

    def body(self, defs: Defs) -> dict[str, Any]:
        raise NotImplementedError

    def titled(self, body: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {"title": self.cls.__name__}
        doc = own_doc(self.cls)
        if doc:
            out["description"] = doc
        out.update(body)
        return out


def own_doc(cls: Any) -> str:
    """The class's own docstring (not one a dataclass or Enum makes up)."""
    doc = cls.__dict__.get("__doc__")
    if not isinstance(doc, str) or not doc.strip():
        return ""
    name: str = getattr(cls, "__name__", "")
    if dataclasses.is_dataclass(cls) and doc.startswith(f"{name}("):
        return ""  # dataclass's generated "Point(x: int, y: int)"
    if isinstance(cls, enum.EnumMeta) and doc == "An enumeration.":
        return ""
    return inspect.cleandoc(doc)
