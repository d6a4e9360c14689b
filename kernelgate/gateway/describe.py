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

import json
from typing import Any, Literal, overload

from kernelgate.model.describe import render_stub
from kernelgate.model.describe_ts import render_declarations

from .bindings import Binding, BindingRegistry
from .paramschema import annotation_schema, signature_schema
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


def describe_binding(binding: Binding) -> dict[str, Any]:
    """One binding as ``describe(format="json")`` lists it."""
    return binding.described()


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
