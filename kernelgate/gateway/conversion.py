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
import types
import typing
from typing import Any, Literal

from .hints import (
    TEXTS,
    AnyHint,
    Defs,
    DictHint,
    ExactHint,
    FloatHint,
    Hint,
    IntHint,
    ListHint,
    LiteralHint,
    Mismatch,
    Named,
    TupleHint,
    UnionHint,
    UnsupportedHint,
    typing_names,
)
from .namedhints import DataclassHint, EnumHint, TypedDictHint, is_typeddict

__all__ = [
    "Defs",
    "Hint",
    "Mismatch",
    "UnsupportedHint",
    "compile_hint",
    "hint_schema",
    "schema_with_defs",
]

_EMPTY = inspect.Parameter.empty


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
            return ExactHint(type(None), "None", "null")
        if tp is str or tp in typing_names("LiteralString"):
            return ExactHint(str, "str", "string")
        if tp is bool:
            return ExactHint(bool, "bool", "boolean")
        if tp is int:
            return IntHint()
        if tp is float:
            return FloatHint()
        text = TEXTS.get(tp) if _hashable(tp) else None
        if text is not None:
            return text
        if isinstance(tp, typing.TypeVar):
            bound = tp.__bound__
            return self.compile(bound, depth + 1) if bound is not None else AnyHint()
        if isinstance(tp, typing.NewType):
            return self.compile(tp.__supertype__, depth + 1)
        origin = typing.get_origin(tp)
        generic = self._generic(tp, origin, typing.get_args(tp), depth)
        if generic is not None:
            return generic
        if _hashable(tp) and tp in _ADVICE:
            return self._refuse(tp)
        if origin is not None and _hashable(origin) and origin in _ADVICE:
            return self._refuse(origin)
        if isinstance(tp, type):
            return self._named(tp)
        if (
            origin is not None
            and isinstance(origin, type)
            and (is_typeddict(origin) or dataclasses.is_dataclass(origin))
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

    def _generic(self, tp: Any, origin: Any, args: tuple[Any, ...], depth: int) -> Hint | None:
        """The hint of a generic form (``X | None``, ``Literal``, ``list[T]``...); None for
        anything else."""
        if origin is typing.Annotated:
            return self.compile(args[0], depth + 1)
        if origin is not None and origin in typing_names("Required", "NotRequired"):
            return self.compile(args[0], depth + 1)
        if origin is typing.Union or origin is types.UnionType:
            options = [self.compile(a, depth + 1) for a in args]
            if any(isinstance(o, AnyHint) for o in options):
                return AnyHint()
            return UnionHint(options)
        if origin is Literal:
            for v in args:
                if not (type(v) in (str, int, bool) or v is None or isinstance(v, enum.Enum)):
                    raise UnsupportedHint(
                        f"Literal value {v!r} cannot travel as JSON: use str, int, bool or None"
                    )
            return LiteralHint(args)
        if origin is tuple or tp is tuple:
            if not args or (len(args) == 2 and args[1] is Ellipsis):
                item = self.compile(args[0], depth + 1) if args else AnyHint()
                return ListHint(item, as_tuple=True)
            if args == ((),):
                return TupleHint([])
            return TupleHint([self.compile(a, depth + 1) for a in args])
        if origin in _ARRAYS or tp in _ARRAYS:
            return ListHint(self.compile(args[0], depth + 1) if args else AnyHint())
        if origin in _OBJECTS or tp in _OBJECTS:
            if args:
                key = args[0]
                if key is not str and key is not Any:
                    raise UnsupportedHint(
                        f"{_name(tp)}: JSON object keys are strings: annotate it as "
                        f"dict[str, ...] and convert the keys yourself"
                    )
                return DictHint(self.compile(args[1], depth + 1))
            return DictHint(AnyHint())
        return None

    def _refuse(self, tp: Any) -> Hint:
        raise UnsupportedHint(
            f"{_name(tp)} cannot travel as JSON: {_ADVICE[tp]} (or use Any to accept anything JSON)"
        )

    def _named(self, tp: type) -> Hint:
        named = self.named.get(tp)
        if named is not None:
            return named
        if issubclass(tp, enum.Enum):
            named = EnumHint(tp)
            self.named[tp] = named
            return named
        if is_typeddict(tp):
            hint: TypedDictHint | DataclassHint = TypedDictHint(tp)
        elif dataclasses.is_dataclass(tp):
            hint = DataclassHint(tp)
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
