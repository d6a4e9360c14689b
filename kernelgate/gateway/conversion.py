"""Type hints at the JSON boundary: what a binding's annotations let through, converted.

A program's arguments arrive as JSON; a binding's annotations say what it expects. For
each parameter and the return, :func:`compile_hint` builds once (when the registry is
built) a :class:`Hint` that

- ``load``\\ s a JSON value for the binding: checks it against the annotation and converts
  what has a lossless JSON form (an ISO 8601 string to a ``date``, an Enum's value to its
  member, an object to a dataclass, an array to a tuple);
- ``dump``\\ s what the binding returned back to JSON, checked against the return hint;
- says what it accepts as a JSON Schema (``$defs``/``$ref`` for named types), the shape
  pydantic's ``TypeAdapter(...).json_schema()`` gives, without per-property titles.

An annotation JSON cannot carry (``bytes``, ``set``, a plain class, a ``Callable``, a name
that does not resolve) raises :class:`UnsupportedHint` saying what to write instead.

>>> from typing import Literal
>>> hint = compile_hint(Literal["open", "closed"])
>>> hint.load("open", "state")
'open'
>>> try:
...     hint.load("merged", "state")
... except Mismatch as exc:
...     print(exc)
argument state: expected 'open' or 'closed', got str 'merged'
>>> try:
...     compile_hint(bytes)
... except UnsupportedHint as exc:
...     print(exc)  # doctest: +NORMALIZE_WHITESPACE
bytes cannot travel as JSON: annotate it as str and encode the bytes as base64 yourself
(or use Any to accept anything JSON)
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
import types
import typing
import uuid
from collections.abc import Callable
from typing import Any, Literal

__all__ = [
    "Hint",
    "Mismatch",
    "UnsupportedHint",
    "compile_hint",
    "hint_schema",
    "schema_with_defs",
]

_EMPTY = inspect.Parameter.empty


def _typing_names(*names: str) -> tuple[Any, ...]:
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


def shown(value: Any) -> str:
    """A value as an error names it: its type and a short repr (``str '12'``)."""
    try:
        text = repr(value)
    except Exception:
        text = "<unprintable>"
    if len(text) > 40:
        text = text[:37] + "..."
    return f"{type(value).__name__} {text}"


def join(path: str, key: Any) -> str:
    """``path[0]``, ``path['key']``: where a nested value is."""
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}[{_key(key)}]"


def _key(key: Any) -> str:
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


class _Exact(Hint):
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


class _Int(Hint):
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


class _Float(Hint):
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


class _Text(Hint):
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


_TEXTS: dict[Any, _Text] = {
    datetime.date: _Text(
        datetime.date, "a date as an ISO 8601 string (YYYY-MM-DD)", "date", _parse_date
    ),
    datetime.datetime: _Text(
        datetime.datetime,
        "a date and time as an ISO 8601 string (YYYY-MM-DDTHH:MM:SS[+HH:MM])",
        "date-time",
        lambda text: datetime.datetime.fromisoformat(_zulu(text)),
    ),
    datetime.time: _Text(
        datetime.time,
        "a time as an ISO 8601 string (HH:MM[:SS])",
        "time",
        datetime.time.fromisoformat,
    ),
    uuid.UUID: _Text(uuid.UUID, "a UUID as a string", "uuid", uuid.UUID),
}


class _List(Hint):
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


class _Tuple(Hint):
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


class _Dict(Hint):
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
                raise Mismatch(path, self.expected, value, f"key {_key(k)} is not a string")
            out[k] = self.value.dump(v, join(path, k))
        return out

    def schema(self, defs: Defs) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "object"}
        if not isinstance(self.value, AnyHint):
            out["additionalProperties"] = self.value.schema(defs)
        return out


def _same(a: Any, b: Any) -> bool:
    """JSON equality: True is not 1."""
    return (type(a) is type(b) and a == b) or (
        type(a) in (int, float) and type(b) in (int, float) and a == b
    )


class _Literal(Hint):
    """Literal[...] of str/int/bool/None (or Enum members, by value)."""

    def __init__(self, values: tuple[Any, ...]) -> None:
        self.values = values
        self.json = [v.value if isinstance(v, enum.Enum) else v for v in values]
        self.expected = " or ".join(repr(v) for v in self.json[:20])
        if len(values) > 20:
            self.expected += f" (or {len(values) - 20} more)"

    def load(self, value: Any, path: str) -> Any:
        for literal, json in zip(self.values, self.json, strict=True):
            if _same(value, json):
                return literal
        raise Mismatch(path, self.expected, value)

    def dump(self, value: Any, path: str) -> Any:
        for literal, json in zip(self.values, self.json, strict=True):
            if _same(value, literal) or (value is literal) or _same(value, json):
                return json
        raise Mismatch(path, self.expected, value)

    def schema(self, defs: Defs) -> dict[str, Any]:
        return _enum_schema(self.json)


def _enum_schema(values: list[Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"enum": list(values)}
    kinds = {type(v) for v in values}
    names = {str: "string", int: "integer", float: "number", bool: "boolean", type(None): "null"}
    if len(kinds) == 1 and next(iter(kinds)) in names:
        out["type"] = names[next(iter(kinds))]
    return out


class _Union(Hint):
    def __init__(self, options: list[Hint]) -> None:
        self.options = options
        self.expected = " or ".join(h.expected for h in options)
        # X | None: a value that is not None goes to X, whose error is the precise one.
        rest = [h for h in options if not (isinstance(h, _Exact) and h.kind is type(None))]
        self.optional = rest[0] if len(rest) == 1 and len(options) == 2 else None

    def load(self, value: Any, path: str) -> Any:
        if self.optional is not None:
            return None if value is None else self.optional.load(value, path)
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
        doc = _own_doc(self.cls)
        if doc:
            out["description"] = doc
        out.update(body)
        return out


def _own_doc(cls: Any) -> str:
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


class _Enum(Named):
    def __init__(self, cls: type[enum.Enum]) -> None:
        self.cls = cls
        members = list(cls)
        if not members:
            raise UnsupportedHint(f"Enum {cls.__name__} has no members: no value can fit it")
        for m in members:
            if type(m.value) not in (str, int, float, bool) and m.value is not None:
                raise UnsupportedHint(
                    f"Enum {cls.__name__}: the value of {m.name} is {shown(m.value)}, which "
                    "JSON cannot carry: give its members str or int values"
                )
        self.by_value = [(m.value, m) for m in members]
        self.expected = f"a {cls.__name__}: " + " or ".join(repr(v) for v, _ in self.by_value[:20])

    def load(self, value: Any, path: str) -> Any:
        for json, member in self.by_value:
            if _same(value, json):
                return member
        raise Mismatch(path, self.expected, value)

    def dump(self, value: Any, path: str) -> Any:
        if isinstance(value, self.cls):
            return value.value
        return self.load(value, path).value  # its value is its JSON form too

    def body(self, defs: Defs) -> dict[str, Any]:
        return self.titled(_enum_schema([v for v, _ in self.by_value]))


class _Fields(Named):
    """A TypedDict or a dataclass: a JSON object with named fields."""

    fields: dict[str, Hint]
    required: frozenset[str]
    defaults: dict[str, Any]
    total: bool

    def describe_keys(self) -> str:
        return ", ".join(self.fields) or "no keys"

    def load_fields(self, value: Any, path: str) -> dict[str, Any]:
        if type(value) is not dict:
            raise Mismatch(path, self.expected, value)
        for name in self.required:
            if name not in value:
                raise Mismatch(
                    path,
                    self.expected,
                    value,
                    f"missing key {name!r} (a {self.cls.__name__} has {self.describe_keys()})",
                )
        out = {}
        for key, item in value.items():
            hint = self.fields.get(key)
            if hint is None:
                raise Mismatch(
                    path,
                    self.expected,
                    value,
                    f"unexpected key {_key(key)} "
                    f"(a {self.cls.__name__} has {self.describe_keys()})",
                )
            out[key] = item if hint.passthrough else hint.load(item, join(path, key))
        return out

    def body(self, defs: Defs) -> dict[str, Any]:
        props = {}
        for name, hint in self.fields.items():
            prop = hint.schema(defs)
            if name in self.defaults:
                prop = {**prop, "default": self.defaults[name]}
            props[name] = prop
        body: dict[str, Any] = {"type": "object", "properties": props}
        required = [n for n in self.fields if n in self.required]
        if required:
            body["required"] = required
        # What the checker does: a key the class does not have is refused (a typo is not
        # dropped in silence).
        body["additionalProperties"] = False
        return self.titled(body)


class _TypedDict(_Fields):
    def __init__(self, cls: Any) -> None:
        self.cls = cls
        self.expected = f"a {cls.__name__} object"
        self.defaults = {}

    def setup(self, resolve: Callable[[Any, str], Hint]) -> None:
        hints = typing.get_type_hints(self.cls, include_extras=True)
        required = set(getattr(self.cls, "__required_keys__", hints))
        fields: dict[str, Hint] = {}
        for name, tp in hints.items():
            origin = typing.get_origin(tp)
            # Under ``from __future__ import annotations`` (3.10, 3.11) the class cannot see
            # NotRequired in a string: the evaluated hint can.
            if origin is not None and origin in _typing_names("NotRequired"):
                required.discard(name)
            elif origin is not None and origin in _typing_names("Required"):
                required.add(name)
            fields[name] = resolve(tp, f"key {name!r} of {self.cls.__name__}")
        self.fields = fields
        self.required = frozenset(required)

    def load(self, value: Any, path: str) -> Any:
        return self.load_fields(value, path)

    def dump(self, value: Any, path: str) -> Any:
        if not isinstance(value, collections.abc.Mapping):
            raise Mismatch(path, self.expected, value)
        for name in self.required:
            if name not in value:
                raise Mismatch(path, self.expected, value, f"missing key {name!r}")
        out = {}
        for key, item in value.items():
            hint = self.fields.get(key)
            if hint is None:
                raise Mismatch(path, self.expected, value, f"unexpected key {_key(key)}")
            out[key] = hint.dump(item, join(path, key))
        return out


class _Dataclass(_Fields):
    def __init__(self, cls: Any) -> None:
        self.cls = cls
        self.expected = f"a {cls.__name__} object"

    def setup(self, resolve: Callable[[Any, str], Hint]) -> None:
        hints = typing.get_type_hints(self.cls, include_extras=True)
        fields: dict[str, Hint] = {}
        required: set[str] = set()
        defaults: dict[str, Any] = {}
        for f in dataclasses.fields(self.cls):
            if not f.init:
                continue
            hint = resolve(hints.get(f.name, Any), f"field {f.name!r} of {self.cls.__name__}")
            fields[f.name] = hint
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                required.add(f.name)
            elif f.default is not dataclasses.MISSING:
                try:
                    defaults[f.name] = hint.dump(f.default, "")
                except Mismatch:
                    pass
        self.fields, self.required, self.defaults = fields, frozenset(required), defaults

    def load(self, value: Any, path: str) -> Any:
        kwargs = self.load_fields(value, path)
        try:
            return self.cls(**kwargs)
        except Exception as exc:  # its __post_init__ refused the values: say so, as a mismatch
            raise Mismatch(
                path, self.expected, value, f"{self.cls.__name__}(...) refused it: {exc}"
            ) from None

    def dump(self, value: Any, path: str) -> Any:
        if not isinstance(value, self.cls):
            raise Mismatch(path, self.expected, value)
        return {
            name: hint.dump(getattr(value, name), join(path, name))
            for name, hint in self.fields.items()
        }


_ARRAYS = (list, collections.abc.Sequence, collections.abc.Iterable, collections.abc.Collection)
_OBJECTS = (dict, collections.abc.Mapping)

#: Annotations JSON cannot carry, with what to write instead.
_ADVICE: dict[Any, str] = {
    bytes: "annotate it as str and encode the bytes as base64 yourself",
    bytearray: "annotate it as str and encode the bytes as base64 yourself",
    memoryview: "annotate it as str and encode the bytes as base64 yourself",
    set: "JSON has no sets: annotate it as list[...] and make the set yourself",
    frozenset: "JSON has no sets: annotate it as list[...] and make the set yourself",
    collections.abc.Set: "JSON has no sets: annotate it as list[...] and make the set yourself",
    collections.abc.MutableSet: (
        "JSON has no sets: annotate it as list[...] and make the set yourself"
    ),
    complex: "JSON has no complex numbers: take two floats",
    datetime.timedelta: "annotate it as float (seconds) and convert it yourself",
}


class _Compiler:
    def __init__(self) -> None:
        self.named: dict[Any, Named] = {}

    def resolve(self, tp: Any, where: str) -> Hint:
        try:
            return self.compile(tp, 0)
        except UnsupportedHint as exc:
            raise UnsupportedHint(f"{where}: {exc}") from None

    def compile(self, tp: Any, depth: int) -> Hint:
        if depth > 32:
            raise UnsupportedHint("the annotation nests too deeply")
        if tp is _EMPTY or tp is Any or tp is object:
            return AnyHint()
        if isinstance(tp, (str, typing.ForwardRef)):
            name = tp if isinstance(tp, str) else tp.__forward_arg__
            raise UnsupportedHint(
                f"the annotation {name!r} does not resolve to a type: define it at module "
                "level before the Gateway is built (or use Any to accept anything JSON)"
            )
        if tp is None or tp is type(None):
            return _Exact(type(None), "None", "null")
        if tp is str or tp in _typing_names("LiteralString"):
            return _Exact(str, "str", "string")
        if tp is bool:
            return _Exact(bool, "bool", "boolean")
        if tp is int:
            return _Int()
        if tp is float:
            return _Float()
        text = _TEXTS.get(tp) if _hashable(tp) else None
        if text is not None:
            return text
        if isinstance(tp, typing.TypeVar):
            bound = tp.__bound__
            return self.compile(bound, depth + 1) if bound is not None else AnyHint()
        if isinstance(tp, typing.NewType):
            return self.compile(tp.__supertype__, depth + 1)
        origin = typing.get_origin(tp)
        args = typing.get_args(tp)
        if origin is typing.Annotated:
            return self.compile(args[0], depth + 1)
        if origin is not None and origin in _typing_names("Required", "NotRequired"):
            return self.compile(args[0], depth + 1)
        if origin is typing.Union or origin is types.UnionType:
            options = [self.compile(a, depth + 1) for a in args]
            if any(isinstance(o, AnyHint) for o in options):
                return AnyHint()
            return _Union(options)
        if origin is Literal:
            for v in args:
                if not (type(v) in (str, int, bool) or v is None or isinstance(v, enum.Enum)):
                    raise UnsupportedHint(
                        f"Literal value {v!r} cannot travel as JSON: use str, int, bool or None"
                    )
            return _Literal(args)
        if origin is tuple or tp is tuple:
            if not args or (len(args) == 2 and args[1] is Ellipsis):
                item = self.compile(args[0], depth + 1) if args else AnyHint()
                return _List(item, as_tuple=True)
            if args == ((),):
                return _Tuple([])
            return _Tuple([self.compile(a, depth + 1) for a in args])
        if origin in _ARRAYS or tp in _ARRAYS:
            return _List(self.compile(args[0], depth + 1) if args else AnyHint())
        if origin in _OBJECTS or tp in _OBJECTS:
            if args:
                key = args[0]
                if key is not str and key is not Any:
                    raise UnsupportedHint(
                        f"{_name(tp)}: JSON object keys are strings: annotate it as "
                        f"dict[str, ...] and convert the keys yourself"
                    )
                return _Dict(self.compile(args[1], depth + 1))
            return _Dict(AnyHint())
        if _hashable(tp) and tp in _ADVICE:
            return self._refuse(tp)
        if origin is not None and _hashable(origin) and origin in _ADVICE:
            return self._refuse(origin)
        if isinstance(tp, type):
            return self._named(tp)
        if (
            origin is not None
            and isinstance(origin, type)
            and (_is_typeddict(origin) or dataclasses.is_dataclass(origin))
        ):
            raise UnsupportedHint(
                f"{_name(tp)}: generic TypedDicts and dataclasses are not supported: "
                "annotate it with a plain one (or use Any to accept anything JSON)"
            )
        if origin is collections.abc.Callable or tp is collections.abc.Callable:
            raise UnsupportedHint(
                f"{_name(tp)}: a function cannot travel as JSON; a program passes data only"
            )
        raise UnsupportedHint(
            f"{_name(tp)} is not a type JSON can carry: use str, int, float, bool, None, "
            "list, tuple, dict[str, ...], Literal, an Enum, a TypedDict, a dataclass, "
            "date/datetime/time, or Any to accept anything JSON"
        )

    def _refuse(self, tp: Any) -> Hint:
        raise UnsupportedHint(
            f"{_name(tp)} cannot travel as JSON: {_ADVICE[tp]} (or use Any to accept anything JSON)"
        )

    def _named(self, tp: type) -> Hint:
        named = self.named.get(tp)
        if named is not None:
            return named
        if issubclass(tp, enum.Enum):
            named = _Enum(tp)
            self.named[tp] = named
            return named
        if _is_typeddict(tp):
            hint: _TypedDict | _Dataclass = _TypedDict(tp)
        elif dataclasses.is_dataclass(tp):
            hint = _Dataclass(tp)
        else:
            raise UnsupportedHint(
                f"{_name(tp)} is neither a dataclass, a TypedDict nor an Enum, so JSON cannot "
                "carry it: make it one of those, or annotate it as dict[str, Any] (or Any) "
                "and build it yourself"
            )
        self.named[tp] = hint  # before its fields: a recursive type refers to itself
        try:
            hint.setup(self.resolve)
        except UnsupportedHint:
            raise
        except Exception as exc:  # get_type_hints: a field's name does not resolve
            raise UnsupportedHint(
                f"the fields of {tp.__name__} do not resolve: {type(exc).__name__}: {exc}; "
                "define what they name at module level"
            ) from None
        return hint


def _is_typeddict(tp: Any) -> bool:
    """``typing``'s TypedDicts, and ``typing_extensions``' (another class on 3.10-3.12)."""
    if typing.is_typeddict(tp):
        return True
    extensions = sys.modules.get("typing_extensions")
    return extensions is not None and bool(extensions.is_typeddict(tp))


def _hashable(tp: Any) -> bool:
    try:
        hash(tp)
    except TypeError:
        return False
    return True


def _name(tp: Any) -> str:
    if isinstance(tp, type) and typing.get_origin(tp) is None:
        return tp.__qualname__ if tp.__module__ != "builtins" else tp.__name__
    return repr(tp).replace("typing.", "")


def compile_hint(tp: Any) -> Hint:
    """The :class:`Hint` for an annotation; :class:`UnsupportedHint` for one JSON cannot
    carry (the message says what to write instead)."""
    return _Compiler().compile(tp, 0)


def schema_with_defs(schema: dict[str, Any], defs: Defs) -> dict[str, Any]:
    """``schema`` with the ``$defs`` it refers to, at its root (as pydantic places them)."""
    if defs.schemas:
        return {**schema, "$defs": dict(defs.schemas)}
    return schema


def hint_schema(tp: Any) -> dict[str, Any]:
    """The JSON Schema of an annotation, ``$defs`` included; ``{}`` for one JSON cannot
    carry (or that does not resolve): anything.

    >>> import enum
    >>> class Color(enum.Enum):
    ...     "A color."
    ...     RED = "red"
    >>> hint_schema(list[Color])  # doctest: +NORMALIZE_WHITESPACE
    {'type': 'array', 'items': {'$ref': '#/$defs/Color'},
     '$defs': {'Color': {'title': 'Color', 'description': 'A color.', 'enum': ['red'],
                         'type': 'string'}}}
    """
    try:
        hint = compile_hint(tp)
    except UnsupportedHint:
        return {}
    defs = Defs()
    return schema_with_defs(hint.schema(defs), defs)
