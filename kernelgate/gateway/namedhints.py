"""Named types at the JSON boundary: an Enum (by value), a TypedDict and a dataclass (JSON
objects with named fields), each a ``$defs`` entry of the schema (see :mod:`.hints`)."""

from __future__ import annotations

import collections.abc
import dataclasses
import enum
import sys
import typing
from collections.abc import Callable
from typing import Any

from .hints import (
    Defs,
    Hint,
    Mismatch,
    Named,
    UnsupportedHint,
    enum_schema,
    join,
    same_json,
    short_key,
    shown,
    typing_names,
)

__all__ = ["DataclassHint", "EnumHint", "FieldsHint", "TypedDictHint", "is_typeddict"]


class EnumHint(Named):
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
            if same_json(value, json):
                return member
        raise Mismatch(path, self.expected, value)

    def dump(self, value: Any, path: str) -> Any:
        if isinstance(value, self.cls):
            return value.value
        return self.load(value, path).value  # its value is its JSON form too

    def body(self, defs: Defs) -> dict[str, Any]:
        return self.titled(enum_schema([v for v, _ in self.by_value]))


class FieldsHint(Named):
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
                    f"unexpected key {short_key(key)} "
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


class TypedDictHint(FieldsHint):
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
            if origin is not None and origin in typing_names("NotRequired"):
                required.discard(name)
            elif origin is not None and origin in typing_names("Required"):
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
                raise Mismatch(path, self.expected, value, f"unexpected key {short_key(key)}")
            out[key] = hint.dump(item, join(path, key))
        return out


class DataclassHint(FieldsHint):
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


def is_typeddict(tp: Any) -> bool:
    """``typing``'s TypedDicts, and ``typing_extensions``' (another class on 3.10-3.12)."""
    if typing.is_typeddict(tp):
        return True
    extensions = sys.modules.get("typing_extensions")
    return extensions is not None and bool(extensions.is_typeddict(tp))
