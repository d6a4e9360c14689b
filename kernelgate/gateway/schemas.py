"""Bindings with a JSON Schema of their own: :func:`input_schema`.

A binding's arguments are checked against its Python signature on both sides. A host
that knows more (an MCP tool's ``inputSchema``, an API's request schema) attaches that
schema to the callable; the registry sends it to the child in the binding's spec, the
child checks each call against it before the call leaves (``TypeError`` at the program's
line), the host checks again (the child is an untrusted peer), and ``describe()`` shows
it as the binding's ``parameters``. The checker is :mod:`kernelgate.model.schema`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from kernelgate.model.schema import check_schema

__all__ = ["OUTPUT_ATTR", "SCHEMA_ATTR", "input_schema", "schema_of"]

F = TypeVar("F", bound=Callable[..., Any])

#: The attribute a callable's argument schema is kept in.
SCHEMA_ATTR = "__kernelgate_schema__"

#: A callable may carry a JSON Schema of what it returns here (MCP tools' ``outputSchema``);
#: its return annotation is then only shown, not enforced.
OUTPUT_ATTR = "__kernelgate_output_schema__"


def input_schema(schema: Mapping[str, Any]) -> Callable[[F], F]:
    """Give a binding a JSON Schema for its arguments (an object schema keyed by name).

    >>> @input_schema({"type": "object", "properties": {"n": {"type": "integer",
    ...                "minimum": 1}}, "required": ["n"]})
    ... def square(n):
    ...     return n * n
    >>> from kernelgate import Gateway
    >>> with Gateway(bindings={"square": square}) as gw:
    ...     r = gw.run_sync("await tools.square(0)")
    >>> print(r.error.evalue)
    tools.square() argument n: must be at least 1, got 0; its signature is square(n)
    """
    checked = check_schema(schema)
    try:
        json.dumps(checked)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"an argument schema must be JSON: {exc}") from None

    def mark(fn: F) -> F:
        try:
            setattr(fn, SCHEMA_ATTR, checked)
        except AttributeError as exc:
            raise TypeError(
                f"input_schema() cannot mark {fn!r}: it takes no attributes; wrap it in a def"
            ) from exc
        return fn

    return mark


def schema_of(fn: Callable[..., Any]) -> dict[str, Any] | None:
    """The argument schema ``fn`` carries, checked; None if it has none."""
    schema = getattr(fn, SCHEMA_ATTR, None)
    if schema is None:
        return None
    try:
        checked = check_schema(schema)
        json.dumps(checked)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"the argument schema of {fn!r} is not usable: {exc}") from None
    return checked
