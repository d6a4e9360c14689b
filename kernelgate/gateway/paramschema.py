"""JSON Schemas of a binding's parameters and answer, made from its signature and type
hints: what ``describe(format="json")`` lists and what a child's ``help()`` renders named
types from (:meth:`kernelgate.gateway.bindings.Binding.described`)."""

from __future__ import annotations

import inspect
import json
from typing import Any

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

__all__ = ["annotation_schema", "signature_schema", "evaluated_signature"]


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


def evaluated_signature(fn: Any, fallback: inspect.Signature | None) -> inspect.Signature | None:
    """``fn``'s signature with string annotations (``from __future__ import annotations``)
    evaluated where they can be; ``fallback`` (the registry's own) when they cannot."""
    try:
        return inspect.signature(fn, eval_str=True)
    except Exception:
        return fallback
