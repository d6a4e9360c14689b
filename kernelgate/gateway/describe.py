"""``describe()``: the bindings as a model is told about them, as a stub or as JSON.

The text form is :func:`kernelgate.model.describe.render_stub` over the specs the child
gets, so ``help(tools)`` in a program and the Jupyter kernel's inspect say the same. The
JSON form gives, per binding, ``namespace``, ``name``, ``description``, ``parameters`` (a
JSON Schema object: the binding's own schema when it carries one, else built from its
signature) and ``returns`` (a JSON Schema of the return annotation, ``{}`` when unknown).

>>> from kernelgate.gateway.bindings import BindingRegistry
>>> def add(a: int, b: int = 2) -> int:
...     "Add two numbers."
...     return a + b
>>> [entry] = describe(BindingRegistry({"tools": {"add": add}}), format="json")
>>> entry["parameters"]["properties"], entry["parameters"]["required"], entry["returns"]
({'a': {'type': 'integer'}, 'b': {'type': 'integer', 'default': 2}}, ['a'], {'type': 'integer'})
"""

from __future__ import annotations

import collections.abc
import inspect
import json
import types
import typing
from typing import Any, Literal, overload

from kernelgate.model.describe import render_stub
from kernelgate.model.describe_ts import render_declarations

from .bindings import Binding, BindingRegistry

__all__ = [
    "describe",
    "describe_json",
    "annotation_schema",
    "signature_schema",
    "copy_json",
    "render_declarations",
    "OUTPUT_ATTR",
]

#: A callable may carry a JSON Schema of what it returns here (MCP tools' ``outputSchema``).
OUTPUT_ATTR = "__kernelgate_output_schema__"

_SIMPLE: dict[Any, dict[str, Any]] = {
    str: {"type": "string"},
    int: {"type": "integer"},
    float: {"type": "number"},
    bool: {"type": "boolean"},
    type(None): {"type": "null"},
    None: {"type": "null"},
    list: {"type": "array"},
    tuple: {"type": "array"},
    set: {"type": "array"},
    frozenset: {"type": "array"},
    dict: {"type": "object"},
}
_ARRAYS = (
    list,
    tuple,
    set,
    frozenset,
    collections.abc.Sequence,
    collections.abc.Iterable,
    collections.abc.Set,
)
_OBJECTS = (dict, collections.abc.Mapping, collections.abc.MutableMapping)


def annotation_schema(tp: Any, depth: int = 0) -> dict[str, Any]:
    """A JSON Schema for a type annotation where it maps to JSON; ``{}`` (anything) where
    it does not.

    >>> annotation_schema(list[str] | None)
    {'anyOf': [{'type': 'array', 'items': {'type': 'string'}}, {'type': 'null'}]}
    """
    if depth > 8 or tp is inspect.Parameter.empty or tp is Any:
        return {}
    if isinstance(tp, typing.ForwardRef) or isinstance(tp, str):
        return {}  # a name that could not be resolved: say nothing rather than guess
    simple = _SIMPLE.get(tp) if _hashable(tp) else None
    if simple is not None:
        return dict(simple)
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is typing.Union or origin is types.UnionType:
        return {"anyOf": [annotation_schema(a, depth + 1) for a in args]}
    if origin is Literal:
        return {"enum": list(args)}
    if origin is typing.Annotated:
        return annotation_schema(args[0], depth + 1)
    if origin in _ARRAYS:
        out: dict[str, Any] = {"type": "array"}
        if origin is tuple and args and args[-1] is not Ellipsis:
            out["prefixItems"] = [annotation_schema(a, depth + 1) for a in args]
            out["minItems"] = out["maxItems"] = len(args)
        elif args:
            out["items"] = annotation_schema(args[0], depth + 1)
        return out
    if origin in _OBJECTS:
        out = {"type": "object"}
        if len(args) == 2 and args[1] is not Any:
            out["additionalProperties"] = annotation_schema(args[1], depth + 1)
        return out
    if typing.is_typeddict(tp):
        hints = typing.get_type_hints(tp)
        return {
            "type": "object",
            "properties": {k: annotation_schema(v, depth + 1) for k, v in hints.items()},
            "required": sorted(getattr(tp, "__required_keys__", ())),
        }
    return {}


def _hashable(tp: Any) -> bool:
    try:
        hash(tp)
    except TypeError:
        return False
    return True


def _json_default(value: Any) -> tuple[bool, Any]:
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return False, None
    return True, value


def signature_schema(signature: inspect.Signature | None) -> dict[str, Any]:
    """The arguments object a signature takes, as a JSON Schema: a property per named
    parameter (typed from its annotation), ``required`` for those without defaults,
    ``additionalProperties`` only for a ``**kwargs``."""
    if signature is None:
        return {"type": "object"}
    props: dict[str, Any] = {}
    required: list[str] = []
    extra = False
    for p in signature.parameters.values():
        if p.kind is inspect.Parameter.VAR_KEYWORD:
            extra = True
            continue
        if p.kind is inspect.Parameter.VAR_POSITIONAL:
            props[p.name] = {"type": "array", "description": f"*{p.name}: positional values"}
            continue
        prop = annotation_schema(p.annotation)
        if p.default is inspect.Parameter.empty:
            required.append(p.name)
        else:
            ok, default = _json_default(p.default)
            if ok:
                prop["default"] = default
        props[p.name] = prop
    return {
        "type": "object",
        "properties": props,
        "required": required,
        "additionalProperties": extra,
    }


def _evaluated(binding: Binding) -> inspect.Signature | None:
    """The signature with string annotations (``from __future__ import annotations``)
    evaluated where they can be; the registry's own when they cannot."""
    try:
        return inspect.signature(binding.fn, eval_str=True)
    except Exception:
        return binding.signature


def describe_binding(binding: Binding) -> dict[str, Any]:
    """One binding as ``describe(format="json")`` lists it."""
    signature = _evaluated(binding)
    parameters = binding.schema if binding.schema is not None else signature_schema(signature)
    returns = getattr(binding.fn, OUTPUT_ATTR, None)
    if not isinstance(returns, dict):
        returns = annotation_schema(
            signature.return_annotation if signature is not None else inspect.Parameter.empty
        )
    return {
        "namespace": binding.namespace,
        "name": binding.name,
        "description": binding.doc,
        "parameters": parameters,
        "returns": returns,
    }


def copy_json(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A deep copy of ``describe(format="json")`` entries (the caller may edit it)."""
    copied: list[dict[str, Any]] = json.loads(json.dumps(entries, default=repr))
    return copied


def describe_json(registry: BindingRegistry) -> list[dict[str, Any]]:
    """Every binding, namespace by namespace, as JSON-able dicts."""
    return [
        describe_binding(table[name])
        for table in registry.namespaces.values()
        for name in sorted(table)
    ]


@overload
def describe(registry: BindingRegistry, format: Literal["text"] = "text") -> str: ...
@overload
def describe(registry: BindingRegistry, format: Literal["json"]) -> list[dict[str, Any]]: ...
@overload
def describe(registry: BindingRegistry, format: Literal["typescript"]) -> str: ...
def describe(registry: BindingRegistry, format: str = "text") -> str | list[dict[str, Any]]:
    """The bindings of ``registry`` as a Python stub (``"text"``), JSON (``"json"``) or
    TypeScript declarations (``"typescript"``, for programs written in TypeScript)."""
    if format == "text":
        return render_stub(registry.specs())
    if format == "json":
        return describe_json(registry)
    if format == "typescript":
        return render_declarations(describe_json(registry), registry.specs())
    raise ValueError(
        f"describe(format={format!r}): use 'text' (a Python stub), 'json' or 'typescript'"
    )
