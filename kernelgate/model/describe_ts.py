"""The bindings as TypeScript declarations, for prompts of models that write TypeScript.

``Gateway.describe(format="typescript")`` renders this from what ``describe(format="json")``
gives (a JSON Schema of each binding's arguments and answer) and the binding specs (which
parameters are positional and which keyword-only). A TypeScript program calls a binding
with positional arguments, and passes keyword arguments as one trailing plain object whose
keys are all parameter names (``tools.search("q", {limit: 2})``): so a binding's
positional parameters are declared in order and its keyword-only ones as that object.
Stdlib only and free of I/O.

>>> entry = {"namespace": "tools", "name": "search", "description": "Search the corpus.",
...          "parameters": {"type": "object", "properties": {"query": {"type": "string"},
...              "limit": {"type": "integer", "default": 3}}, "required": ["query"]},
...          "returns": {"type": "array", "items": {"type": "string"}}}
>>> params = [["query", "POSITIONAL_OR_KEYWORD", False], ["limit", "POSITIONAL_OR_KEYWORD", True]]
>>> print(render_binding_ts(entry, params))
/** Search the corpus. */
search(query: string, limit?: number): Promise<string[]>;
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from .describe import first_paragraph

__all__ = ["HOW_TO_CALL_TS", "render_binding_ts", "render_declarations", "ts_type"]

#: The lines above the declarations: how a program calls bindings, and how they fail.
HOW_TO_CALL_TS = """\
// Bindings are async: `const x = await tools.name(...)`; run several at once with
// `const [a, b] = await Promise.all([tools.f(...), tools.g(...)])`. The program is the body
// of an async function: top-level `await`, and `return value` ends it with its result; so
// does a last expression. Arguments and answers are JSON (objects, arrays, strings, numbers,
// booleans, null): `undefined`, functions, Map, Set, Date, BigInt and NaN are refused.
// Keyword arguments go in one last plain object: `tools.search("q", {limit: 2})`.
// A binding that fails throws ToolError (`err.tool`, `err.ename`, `err.message`): catch it
// to recover. Arguments that do not fit throw TypeError at your line before the call."""

_IDENTIFIER = re.compile(r"^[A-Za-z_$][A-Za-z0-9_$]*$")
#: Words a parameter cannot be named in TypeScript (a binding may still have them).
_RESERVED = frozenset(
    "break case catch class const continue debugger default delete do else enum export "
    "extends false finally for function if import in instanceof new null return super switch "
    "this throw true try typeof var void while with yield let static implements interface "
    "package private protected public await".split()
)
_MAX_DEPTH = 8
_MAX_ENUM = 12
_MAX_PROPS = 20


def _key(name: str) -> str:
    """A property name as TypeScript writes it (quoted when it is not an identifier)."""
    return name if _IDENTIFIER.match(name) else json.dumps(name)


def _param(name: str) -> str:
    if _IDENTIFIER.match(name) and name not in _RESERVED:
        return name
    cleaned = re.sub(r"[^A-Za-z0-9_$]", "_", name) or "_"
    if cleaned[0].isdigit() or cleaned in _RESERVED:
        cleaned = "_" + cleaned
    return cleaned


def _grouped(text: str) -> str:
    """``text`` as an array's element type (a union needs parentheses)."""
    return f"({text})" if " | " in text or text.startswith("(") else text


def ts_type(schema: Any, root: Mapping[str, Any] | None = None, depth: int = 0) -> str:
    """A TypeScript type for a JSON Schema (``unknown`` where none says more).

    >>> ts_type({"type": "array", "items": {"type": "integer"}})
    'number[]'
    >>> ts_type({"anyOf": [{"type": "string"}, {"type": "null"}]})
    'string | null'
    >>> ts_type({"enum": ["sum", "mean"]})
    '"sum" | "mean"'
    >>> ts_type({"type": "object", "properties": {"n": {"type": "integer"}}, "required": []})
    '{ n?: number }'
    """
    if not isinstance(schema, Mapping) or depth > _MAX_DEPTH:
        return "unknown"
    root = schema if root is None else root
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/"):
        node: Any = root
        for part in ref[2:].split("/"):
            node = node.get(part) if isinstance(node, Mapping) else None
        return ts_type(node, root, depth + 1) if node is not None else "unknown"
    enum = schema.get("enum")
    if isinstance(enum, list) and 0 < len(enum) <= _MAX_ENUM:
        return " | ".join(dict.fromkeys(json.dumps(e, ensure_ascii=False) for e in enum))
    if "const" in schema:
        return json.dumps(schema["const"], ensure_ascii=False)
    for key in ("anyOf", "oneOf"):
        options = schema.get(key)
        if isinstance(options, list) and options:
            return " | ".join(dict.fromkeys(ts_type(o, root, depth + 1) for o in options))
    kind = schema.get("type")
    if isinstance(kind, list):
        return " | ".join(dict.fromkeys(ts_type({**schema, "type": k}, root, depth) for k in kind))
    simple = {"string": "string", "integer": "number", "number": "number"}
    simple.update({"boolean": "boolean", "null": "null"})
    if isinstance(kind, str) and kind in simple:
        return simple[kind]
    if kind == "array":
        items = schema.get("items")
        if isinstance(items, Mapping):
            return _grouped(ts_type(items, root, depth + 1)) + "[]"
        return "unknown[]"
    if kind == "object" or "properties" in schema:
        return _object(schema, root, depth)
    return "unknown"


def _object(schema: Mapping[str, Any], root: Mapping[str, Any], depth: int) -> str:
    props = schema.get("properties")
    extra = schema.get("additionalProperties")
    if isinstance(props, Mapping) and 0 < len(props) <= _MAX_PROPS:
        required = schema.get("required")
        needed = set(required) if isinstance(required, list) else set()
        fields = [
            f"{_key(str(k))}{'' if k in needed else '?'}: {ts_type(v, root, depth + 1)}"
            for k, v in props.items()
        ]
        if isinstance(extra, Mapping):
            fields.append(f"[key: string]: {ts_type(extra, root, depth + 1)}")
        return "{ " + "; ".join(fields) + " }"
    if isinstance(extra, Mapping):
        return f"Record<string, {ts_type(extra, root, depth + 1)}>"
    return "Record<string, unknown>"


def _arguments(params: Sequence[Any], schema: Mapping[str, Any]) -> str:
    """The declared parameters: positional ones in order, keyword-only ones (and a
    ``**kwargs``) as the trailing object."""
    props = schema.get("properties")
    props = props if isinstance(props, Mapping) else {}
    positional: list[str] = []
    keywords: list[str] = []
    open_keywords = False
    optional_from = None
    for i, param in enumerate(params):
        if not (isinstance(param, (list, tuple)) and len(param) == 3):
            return "...args: unknown[]"
        name, kind, has_default = str(param[0]), param[1], bool(param[2])
        hint = ts_type(props.get(name), schema)
        if kind == "VAR_POSITIONAL":
            positional.append(f"...{_param(name)}: unknown[]")
        elif kind == "VAR_KEYWORD":
            open_keywords = True
        elif kind == "KEYWORD_ONLY":
            keywords.append(f"{_key(name)}{'?' if has_default else ''}: {hint}")
        else:
            if has_default and optional_from is None:
                optional_from = i
            mark = "?" if optional_from is not None else ""
            positional.append(f"{_param(name)}{mark}: {hint}")
    if keywords or open_keywords:
        if open_keywords:
            keywords.append("[key: string]: unknown")
        optional = all("?" in k.partition(":")[0] or k.startswith("[") for k in keywords)
        positional.append(f"keywords{'?' if optional else ''}: {{ {'; '.join(keywords)} }}")
    return ", ".join(positional)


def render_binding_ts(entry: Mapping[str, Any], params: Sequence[Any] | None) -> str:
    """One binding as a method declaration with the first paragraph of its description.

    ``entry`` is one item of ``describe(format="json")``; ``params`` the spec's
    ``[name, kind, has_default]`` list (None: every argument object property, in order,
    positional).
    """
    name = str(entry.get("name", ""))
    schema = entry.get("parameters")
    schema = schema if isinstance(schema, Mapping) else {}
    if params is None:
        props = schema.get("properties")
        required = schema.get("required")
        needed = set(required) if isinstance(required, list) else set()
        names = list(props) if isinstance(props, Mapping) else []
        params = [[n, "POSITIONAL_OR_KEYWORD", n not in needed] for n in names]
    returns = ts_type(entry.get("returns"))
    doc = first_paragraph(str(entry.get("description") or "")).replace("*/", "*\\/")
    lines = [f"/** {doc} */"] if doc else []
    lines.append(f"{_key(name)}({_arguments(params, schema)}): Promise<{returns}>;")
    return "\n".join(lines)


def render_declarations(
    entries: Sequence[Mapping[str, Any]],
    specs: Mapping[str, Mapping[str, Mapping[str, Any]]],
) -> str:
    """Every namespace as ``declare const <namespace>: {...}``, :data:`HOW_TO_CALL_TS` on
    top. ``entries``: ``describe(format="json")``; ``specs``: the registry's specs."""
    by_namespace: dict[str, list[Mapping[str, Any]]] = {ns: [] for ns in specs}
    for entry in entries:
        by_namespace.setdefault(str(entry.get("namespace")), []).append(entry)
    parts = [HOW_TO_CALL_TS]
    for namespace, items in by_namespace.items():
        body: list[str] = []
        for entry in sorted(items, key=lambda e: str(e.get("name"))):
            spec = specs.get(namespace, {}).get(str(entry.get("name")), {})
            params = spec.get("params") if isinstance(spec, Mapping) else None
            text = render_binding_ts(entry, params if isinstance(params, list) else None)
            body.extend("  " + line for line in text.splitlines())
        parts.append(f"declare const {_param(namespace)}: {{\n" + "\n".join(body) + "\n};")
    return "\n\n".join(parts) + "\n"
