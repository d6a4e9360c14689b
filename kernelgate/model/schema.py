"""A small JSON Schema checker for binding arguments: the subset tool schemas use.

A binding may carry a JSON Schema for its arguments (an MCP tool's ``inputSchema``, or one
the host gives with :func:`kernelgate.input_schema`). The child checks a call against it
before the call leaves, so a wrong argument is a ``TypeError`` at the program's own line;
the host checks again, since the child is an untrusted peer. Both sides import this
module, so it is stdlib only and small (a full validator would be start-up time of every
cold child that has such a binding).

Supported: ``type`` (one or a list), ``enum``, ``const``, ``properties``, ``required``,
``additionalProperties`` (bool or schema), ``items`` (one schema), ``prefixItems``,
``minItems``/``maxItems``, ``minLength``/``maxLength``, ``minimum``/``maximum``,
``exclusiveMinimum``/``exclusiveMaximum``, ``anyOf``/``oneOf`` (taken as anyOf: a value
fits one of them), ``allOf``, and local ``$ref`` (``#/$defs/...``, ``#/definitions/...``).
Every other keyword (``format``, ``pattern``, ``description``...) is ignored: the server
(or the binding) still has the last word.

>>> schema = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 1}},
...           "required": ["n"], "additionalProperties": False}
>>> check_value({"n": 2}, schema) is None
True
>>> check_value({"n": "2"}, schema)
"argument n: expected integer, got str '2'"
>>> check_value({}, schema)
'missing required argument n'
>>> check_value({"n": 1, "m": 0}, schema)
'unexpected argument m (allowed: n)'
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Mapping
from typing import Any

__all__ = [
    "arguments_object",
    "check_bound",
    "check_value",
    "check_schema",
    "schema_error",
    "shown",
]

#: The keywords :meth:`_Checker._keywords` looks at: a schema with none skips it.
_KEYWORDS = frozenset(
    {
        "const",
        "enum",
        "anyOf",
        "oneOf",
        "allOf",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "minLength",
        "maxLength",
        "minItems",
        "maxItems",
    }
)

#: Deepest nesting of schemas followed (``$ref`` cycles end here, not in a RecursionError).
_MAX_DEPTH = 64


def _is_type(value: Any, name: str) -> bool:
    if name == "string":
        return isinstance(value, str)
    if name == "integer":
        if isinstance(value, bool):
            return False
        return isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    if name == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if name == "boolean":
        return isinstance(value, bool)
    if name == "null":
        return value is None
    if name == "array":
        return isinstance(value, (list, tuple))
    if name == "object":
        return isinstance(value, dict)
    return True  # an unknown type name: not ours to refuse


def shown(value: Any) -> str:
    """A value as an error names it: its type and a short repr (``str '12'``)."""
    try:
        text = repr(value)
    except Exception:
        text = "<unprintable>"
    if len(text) > 40:
        text = text[:37] + "..."
    return f"{type(value).__name__} {text}"


def _where(path: str) -> str:
    return f"argument {path}" if path else "the arguments"


def _join(path: str, key: Any) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    if not path:
        return str(key)
    return f"{path}[{key!r}]"


class _Checker:
    def __init__(self, root: Mapping[str, Any]) -> None:
        self.root = root

    def resolve(self, ref: Any) -> Any:
        if not isinstance(ref, str) or not ref.startswith("#/"):
            return None  # a remote reference: not followed
        node: Any = self.root
        for part in ref[2:].split("/"):
            part = part.replace("~1", "/").replace("~0", "~")
            if not isinstance(node, Mapping) or part not in node:
                return None
            node = node[part]
        return node

    def check(self, value: Any, schema: Any, path: str, depth: int) -> str | None:
        # Schemas arrive as parsed JSON: plain dicts (``check_schema`` makes the host's so
        # too). Anything else (``true``, not a schema) lets every value through.
        if type(schema) is not dict or not schema or depth > _MAX_DEPTH:
            return None
        if "$ref" in schema:
            target = self.resolve(schema["$ref"])
            if target is not None:
                error = self.check(value, target, path, depth + 1)
                if error:
                    return error
        types = schema.get("type")
        if types is not None:
            if type(types) is str:
                fits = _is_type(value, types)
            else:
                fits = not isinstance(types, list) or not types
                fits = fits or any(_is_type(value, t) for t in types if isinstance(t, str))
            if not fits:
                wanted = types if type(types) is str else " or ".join(str(t) for t in types)
                return f"{_where(path)}: expected {wanted}, got {shown(value)}"
        if not _KEYWORDS.isdisjoint(schema):
            error = self._keywords(value, schema, path, depth)
            if error:
                return error
        if type(value) is dict:
            return self._object(value, schema, path, depth)
        if isinstance(value, (list, tuple)):
            return self._array(value, schema, path, depth)
        return None

    def _keywords(self, value: Any, schema: dict[str, Any], path: str, depth: int) -> str | None:
        """const, enum, bounds and the combinators (most schemas have none of them)."""
        if "const" in schema and not _same(value, schema["const"]):
            return f"{_where(path)}: must be {schema['const']!r}, got {shown(value)}"
        enum = schema.get("enum")
        if isinstance(enum, list) and not any(_same(value, e) for e in enum):
            allowed = ", ".join(repr(e) for e in enum[:20])
            return f"{_where(path)}: {shown(value)} is not one of {allowed}"
        error = self._bounds(value, schema, path)
        if error:
            return error
        for key in ("anyOf", "oneOf"):
            options = schema.get(key)
            if isinstance(options, list) and options:
                errors = [self.check(value, s, path, depth + 1) for s in options]
                if all(errors):
                    return errors[0] if len(options) == 1 else _any_of(path, value, errors)
        all_of = schema.get("allOf")
        if isinstance(all_of, list):
            for sub in all_of:
                error = self.check(value, sub, path, depth + 1)
                if error:
                    return error
        return None

    def _bounds(self, value: Any, schema: Mapping[str, Any], path: str) -> str | None:
        where = _where(path)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            low, high = _bound(schema, "minimum"), _bound(schema, "maximum")
            if low is not None and value < low:
                return f"{where}: must be at least {low}, got {value!r}"
            if high is not None and value > high:
                return f"{where}: must be at most {high}, got {value!r}"
            low, high = _bound(schema, "exclusiveMinimum"), _bound(schema, "exclusiveMaximum")
            if low is not None and value <= low:
                return f"{where}: must be more than {low}, got {value!r}"
            if high is not None and value >= high:
                return f"{where}: must be less than {high}, got {value!r}"
        if isinstance(value, str):
            low, high = _bound(schema, "minLength"), _bound(schema, "maxLength")
            if low is not None and len(value) < low:
                return f"{where}: must be at least {low} characters, got {len(value)}"
            if high is not None and len(value) > high:
                return f"{where}: must be at most {high} characters, got {len(value)}"
        if isinstance(value, (list, tuple)):
            low, high = _bound(schema, "minItems"), _bound(schema, "maxItems")
            if low is not None and len(value) < low:
                return f"{where}: must have at least {low} items, got {len(value)}"
            if high is not None and len(value) > high:
                return f"{where}: must have at most {high} items, got {len(value)}"
        return None

    def _object(
        self, value: dict[Any, Any], schema: Mapping[str, Any], path: str, depth: int
    ) -> str | None:
        props = schema.get("properties")
        props = props if type(props) is dict else {}
        required = schema.get("required")
        if isinstance(required, list):
            for name in required:
                if isinstance(name, str) and name not in value:
                    where = f"argument {_join(path, name)}" if path else f"argument {name}"
                    return f"missing required {where}"
        extra = schema.get("additionalProperties", True)
        for key, item in value.items():
            if key in props:
                error = self.check(item, props[key], _join(path, key), depth + 1)
            elif extra is False:
                allowed = ", ".join(sorted(str(p) for p in props)[:30]) or "none"
                where = f"key {key!r} in argument {path}" if path else f"argument {key}"
                return f"unexpected {where} (allowed: {allowed})"
            else:
                error = self.check(item, extra, _join(path, key), depth + 1)
            if error:
                return error
        return None

    def _array(
        self, value: list[Any] | tuple[Any, ...], schema: Mapping[str, Any], path: str, depth: int
    ) -> str | None:
        prefix = schema.get("prefixItems")
        start = 0
        if isinstance(prefix, list):
            for i, (item, sub) in enumerate(zip(value, prefix, strict=False)):
                error = self.check(item, sub, _join(path, i), depth + 1)
                if error:
                    return error
            start = len(prefix)
        items = schema.get("items")
        if isinstance(items, Mapping) or items is False:
            for i in range(start, len(value)):
                if items is False:
                    return f"{_where(path)}: has {len(value)} items, at most {start} allowed"
                error = self.check(value[i], items, _join(path, i), depth + 1)
                if error:
                    return error
        return None


def _bound(schema: Mapping[str, Any], key: str) -> float | None:
    x = schema.get(key)
    return x if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def _same(a: Any, b: Any) -> bool:
    # JSON equality: True is not 1, 1 is 1.0.
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    try:
        return bool(a == b)
    except Exception:
        return False


def _any_of(path: str, value: Any, errors: list[str | None]) -> str:
    reasons = "; ".join(e.split(": ", 1)[-1] for e in errors if e)
    return f"{_where(path)}: {shown(value)} fits none of the allowed forms ({reasons})"


def check_value(value: Any, schema: Mapping[str, Any]) -> str | None:
    """Why ``value`` does not fit ``schema`` (one line, naming the argument), or None.

    ``value`` is the arguments object of a call: ``{"name": value, ...}``.
    """
    try:
        return _Checker(schema).check(value, schema, "", 0)
    except RecursionError:
        return None  # a value nested past what check_json allows never gets here


def arguments_object(bound: inspect.BoundArguments) -> dict[str, Any]:
    """The call as the object a schema describes: ``{parameter name: value}``, with
    ``**kwargs`` merged in (they are the names a schema lists that Python cannot spell)."""
    out: dict[str, Any] = {}
    params = bound.signature.parameters
    for name, value in bound.arguments.items():
        kind = params[name].kind
        if kind is inspect.Parameter.VAR_KEYWORD:
            out.update(value)
        elif kind is inspect.Parameter.VAR_POSITIONAL:
            if value:
                out[name] = list(value)
        else:
            out[name] = value
    return out


def check_bound(schema: Mapping[str, Any], bound: inspect.BoundArguments) -> str | None:
    """:func:`check_value` for a call bound to its signature."""
    return check_value(arguments_object(bound), schema)


def schema_error(schema: Any) -> str | None:
    """Why ``schema`` cannot be a binding's argument schema, or None."""
    if not isinstance(schema, Mapping):
        return f"an argument schema is a dict (a JSON Schema object), got {type(schema).__name__}"
    kind = schema.get("type", "object")
    if kind != "object":
        return (
            f"an argument schema describes the arguments object: its type is 'object', got {kind!r}"
        )
    props = schema.get("properties", {})
    if not isinstance(props, Mapping) or not all(isinstance(k, str) for k in props):
        return "an argument schema's properties must be a dict with str keys"
    required = schema.get("required", [])
    if not isinstance(required, list) or not all(isinstance(k, str) for k in required):
        return "an argument schema's required must be a list of property names"
    return None


def check_schema(schema: Any) -> dict[str, Any]:
    """``schema`` if it can be a binding's argument schema; else ``ValueError`` saying why."""
    error = schema_error(schema)
    if error:
        raise ValueError(error)
    try:
        # Plain dicts all the way down (what the child gets too), and JSON for certain.
        checked: dict[str, Any] = json.loads(json.dumps(schema, allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"an argument schema must be JSON: {exc}") from None
    return checked
