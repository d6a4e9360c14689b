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

import inspect
import json
from typing import Any, Literal, overload

from kernelgate.model.describe import render_stub
from kernelgate.model.describe_ts import render_declarations

from .bindings import Binding, BindingRegistry
from .conversion import (
    Defs,
    Hint,
    Mismatch,
    UnsupportedHint,
    compile_hint,
    hint_schema,
    schema_with_defs,
)
from .hints import AnyHint
from .schemas import OUTPUT_ATTR

__all__ = [
    "describe",
    "describe_json",
    "annotation_schema",
    "signature_schema",
    "copy_json",
    "render_declarations",
    "OUTPUT_ATTR",
]


def annotation_schema(tp: Any, depth: int = 0) -> dict[str, Any]:
    """A JSON Schema for a type annotation (what the gateway checks arguments against, see
    :mod:`.conversion`), with ``$defs`` for named types (TypedDict, dataclass, Enum);
    ``{}`` (anything) where it is not a type JSON can carry, or a name that did not
    resolve. ``depth`` is kept for callers of the old signature and ignored.

    >>> annotation_schema(list[str] | None)
    {'anyOf': [{'type': 'array', 'items': {'type': 'string'}}, {'type': 'null'}]}
    """
    return hint_schema(tp)


def _json_default(value: Any, hint: Hint | None = None) -> tuple[bool, Any]:
    """A default value as JSON (an Enum member as its value, a date as its string...)."""
    if hint is not None and not isinstance(hint, AnyHint):
        try:
            value = hint.dump(value, "")
        except Mismatch:
            return False, None  # ``x: int = None``: say nothing rather than something false
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return False, None
    return True, value


def signature_schema(signature: inspect.Signature | None) -> dict[str, Any]:
    """The arguments object a signature takes, as a JSON Schema: a property per named
    parameter (typed from its annotation), ``required`` for those without defaults,
    ``additionalProperties`` only for a ``**kwargs`` (its values' schema when annotated),
    ``items`` of a ``*args`` when annotated, and the ``$defs`` of the named types the
    parameters use, at the root."""
    if signature is None:
        return {"type": "object"}
    defs = Defs()
    props: dict[str, Any] = {}
    required: list[str] = []
    extra: bool | dict[str, Any] = False
    for p in signature.parameters.values():
        hint = _hint(p.annotation)
        item = hint.schema(defs) if hint is not None else {}
        if p.kind is inspect.Parameter.VAR_KEYWORD:
            extra = item or True  # ``**kw: str``: more keywords, each a string
            continue
        if p.kind is inspect.Parameter.VAR_POSITIONAL:
            props[p.name] = {"type": "array", "description": f"*{p.name}: positional values"}
            if item:
                props[p.name]["items"] = item
            continue
        prop = hint.schema(defs) if hint is not None else {}
        if p.default is inspect.Parameter.empty:
            required.append(p.name)
        else:
            ok, default = _json_default(p.default, hint)
            if ok:
                prop = {**prop, "default": default}
        props[p.name] = prop
    return schema_with_defs(
        {
            "type": "object",
            "properties": props,
            "required": required,
            "additionalProperties": extra,
        },
        defs,
    )


def _hint(annotation: Any) -> Hint | None:
    if annotation is inspect.Parameter.empty:
        return None
    try:
        return compile_hint(annotation)
    except UnsupportedHint:
        return None  # a proxy's text annotation, or one no binding can have: anything


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
