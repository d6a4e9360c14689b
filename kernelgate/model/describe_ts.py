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

Named types of the schemas (``$defs``) are declared once, on top, as ``interface`` (an
object) or ``type`` (an enum's union, anything else) declarations; a parameter's
description (the schema's, or the docstring's ``Args:``) is its ``@param`` line; a
property a ``**kwargs`` takes because Python cannot name it (``from``) is a key of the
trailing keywords object.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from .defs import Definitions, resolve
from .describe import MAX_DOC, MAX_PARAM_DOC
from .docstrings import parse_docstring, shorten

__all__ = [
    "HOW_TO_CALL_TS",
    "how_to_call_ts",
    "render_binding_ts",
    "render_declarations",
    "ts_type",
]


_HOW_TO_CALL_TS = """\
// Bindings are async: `const x = await tools.name(...)`; run several at once with
// `const [a, b] = await Promise.all([tools.f(...), tools.g(...)])`. The program is the body
// of an async function: top-level `await`, and `return value` ends it with its result; so
// does a last expression. Arguments and answers are JSON (objects, arrays, strings, numbers,
// booleans, null): `undefined`, functions, Map, Set, Date, BigInt and NaN are refused.
// Keyword arguments go in one last plain object: `tools.search("q", {limit: 2})`.
// A binding that fails throws ToolError (`err.tool`, `err.ename`, `err.message`): catch it
// to recover. Arguments that do not fit the signature throw TypeError at your line before
// the call; a value of the wrong type throws ToolError with `err.ename === "TypeError"`
// there, saying which argument and what was expected."""


def how_to_call_ts(namespaces: Sequence[str] = ("tools",)) -> str:
    """The lines above the declarations: how a program calls bindings (in the namespaces
    it really has), and how they fail."""
    names = [n for n in namespaces if n] or ["tools"]
    text = _HOW_TO_CALL_TS.replace("tools.", f"{names[0]}.")
    if len(names) > 1:
        text += f"\n// The namespaces (globals of the program): {', '.join(names)}."
    return text


#: The lines above declarations of the one namespace ``tools``.
HOW_TO_CALL_TS = how_to_call_ts()
#: Names a declaration may not take: TypeScript's own types and what the text uses.
_TS_TYPE_NAMES = frozenset(
    "string number boolean null undefined unknown any never object void Promise Record "
    "Array ToolError".split()
)

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


def ts_type(
    schema: Any,
    root: Mapping[str, Any] | None = None,
    depth: int = 0,
    defs: Definitions | None = None,
) -> str:
    """A TypeScript type for a JSON Schema (``unknown`` where none says more); with
    ``defs``, a ``$ref`` to a ``$defs`` entry is that declaration's name.

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
        name = defs.name_for(ref, root) if defs is not None else None
        if name is not None:
            return name
        node = resolve(ref, root)
        return ts_type(node, root, depth + 1, defs) if node is not None else "unknown"
    enum = schema.get("enum")
    if isinstance(enum, list) and 0 < len(enum) <= _MAX_ENUM:
        return " | ".join(dict.fromkeys(json.dumps(e, ensure_ascii=False) for e in enum))
    if "const" in schema:
        return json.dumps(schema["const"], ensure_ascii=False)
    for key in ("anyOf", "oneOf", "allOf"):
        options = schema.get(key)
        if isinstance(options, list) and options and (key != "allOf" or len(options) == 1):
            return " | ".join(dict.fromkeys(ts_type(o, root, depth + 1, defs) for o in options))
    kind = schema.get("type")
    if isinstance(kind, list):
        return " | ".join(
            dict.fromkeys(ts_type({**schema, "type": k}, root, depth, defs) for k in kind)
        )
    simple = {"string": "string", "integer": "number", "number": "number"}
    simple.update({"boolean": "boolean", "null": "null"})
    if isinstance(kind, str) and kind in simple:
        return simple[kind]
    if kind == "array":
        items = schema.get("items")
        if isinstance(items, Mapping):
            return _grouped(ts_type(items, root, depth + 1, defs)) + "[]"
        return "unknown[]"
    if kind == "object" or "properties" in schema:
        return _object(schema, root, depth, defs)
    return "unknown"


def _object(
    schema: Mapping[str, Any], root: Mapping[str, Any], depth: int, defs: Definitions | None
) -> str:
    props = schema.get("properties")
    extra = schema.get("additionalProperties")
    if isinstance(props, Mapping) and 0 < len(props) <= _MAX_PROPS:
        required = schema.get("required")
        needed = set(required) if isinstance(required, list) else set()
        fields = [
            f"{_key(str(k))}{'' if k in needed else '?'}: {ts_type(v, root, depth + 1, defs)}"
            for k, v in props.items()
        ]
        if isinstance(extra, Mapping):
            fields.append(f"[key: string]: {ts_type(extra, root, depth + 1, defs)}")
        return "{ " + "; ".join(fields) + " }"
    if isinstance(extra, Mapping):
        return f"Record<string, {ts_type(extra, root, depth + 1, defs)}>"
    return "Record<string, unknown>"


def _arguments(
    params: Sequence[Any], schema: Mapping[str, Any], defs: Definitions | None = None
) -> str:
    """The declared parameters: positional ones in order, keyword-only ones (and a
    ``**kwargs``: the schema's properties it takes, such as ``from``, which Python cannot
    name) as the trailing object."""
    props = schema.get("properties")
    props = props if isinstance(props, Mapping) else {}
    required = schema.get("required")
    needed = set(required) if isinstance(required, list) else set()
    positional: list[str] = []
    keywords: list[str] = []
    open_keywords = False
    optional_from = None
    for i, param in enumerate(params):
        if not (isinstance(param, (list, tuple)) and len(param) == 3):
            return "...args: unknown[]"
        name, kind, has_default = str(param[0]), param[1], bool(param[2])
        hint = ts_type(props.get(name), schema, 0, defs)
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
    if open_keywords:
        named = {str(p[0]) for p in params}
        for key, prop in props.items():
            if str(key) not in named:
                mark = "" if key in needed else "?"
                keywords.append(f"{_key(str(key))}{mark}: {ts_type(prop, schema, 0, defs)}")
    if keywords or open_keywords:
        if open_keywords and schema.get("additionalProperties") is not False:
            keywords.append("[key: string]: unknown")
        optional = all("?" in k.partition(":")[0] or k.startswith("[") for k in keywords)
        positional.append(f"keywords{'?' if optional else ''}: {{ {'; '.join(keywords)} }}")
    return ", ".join(positional)


def _comment_text(text: str) -> str:
    return text.replace("*/", "*\\/")


def _jsdoc(description: str, schema: Mapping[str, Any]) -> list[str]:
    """The binding's doc comment: its description (the parameter section taken out) and a
    ``@param`` line per parameter that has a description."""
    parsed = parse_docstring(description)
    doc = _comment_text(shorten(parsed.text, MAX_DOC))
    props = schema.get("properties")
    props = props if isinstance(props, Mapping) else {}
    notes: dict[str, str] = {}
    for key, prop in props.items():
        text = prop.get("description") if isinstance(prop, Mapping) else None
        if text:
            notes[str(key)] = str(text)
    for key, text in parsed.params.items():
        notes.setdefault(key, text)
    params = [
        f"@param {_param(k)} {_comment_text(shorten(' '.join(v.split()), MAX_PARAM_DOC))}"
        for k, v in notes.items()
        if v.strip()
    ]
    if not params:
        if not doc:
            return []
        if "\n" not in doc:
            return [f"/** {doc} */"]
    lines = ["/**"]
    lines.extend(f" * {line}".rstrip() for line in doc.splitlines())
    lines.extend(f" * {p}" for p in params)
    lines.append(" */")
    return lines


def render_binding_ts(
    entry: Mapping[str, Any], params: Sequence[Any] | None, defs: Definitions | None = None
) -> str:
    """One binding as a method declaration with its description and its parameters'.

    ``entry`` is one item of ``describe(format="json")``; ``params`` the spec's
    ``[name, kind, has_default]`` list (None: every argument object property, in order,
    positional); ``defs`` collects the named types it uses (see :func:`render_declarations`).
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
    answer = entry.get("returns")
    named = defs.name_root(answer) if defs is not None else None
    returns = named or ts_type(answer, None, 0, defs)
    lines = _jsdoc(str(entry.get("description") or ""), schema)
    lines.append(f"{_key(name)}({_arguments(params, schema, defs)}): Promise<{returns}>;")
    return "\n".join(lines)


def render_type_declarations(defs: Definitions) -> str:
    """Every named type ``defs`` has met: an ``interface`` per object with properties, a
    ``type`` alias for anything else (an enum's union of literals)."""
    blocks: list[str] = []
    i = 0
    while i < len(defs.order):
        name, schema, root = defs.order[i]
        i += 1
        doc = " ".join(str(schema.get("description") or "").split())
        head = [f"/** {_comment_text(shorten(doc, MAX_DOC))} */"] if doc else []
        props = schema.get("properties")
        if isinstance(props, Mapping) and props and not isinstance(schema.get("enum"), list):
            required = schema.get("required")
            needed = set(required) if isinstance(required, list) else set()
            lines = [*head, f"interface {name} {{"]
            for key, prop in props.items():
                note = prop.get("description") if isinstance(prop, Mapping) else None
                if note:
                    text = _comment_text(shorten(" ".join(str(note).split()), MAX_PARAM_DOC))
                    lines.append(f"  /** {text} */")
                mark = "" if key in needed else "?"
                lines.append(f"  {_key(str(key))}{mark}: {ts_type(prop, root, 1, defs)};")
            extra = schema.get("additionalProperties")
            if isinstance(extra, Mapping):
                lines.append(f"  [key: string]: {ts_type(extra, root, 1, defs)};")
            lines.append("}")
            blocks.append("\n".join(lines))
            continue
        body = {k: v for k, v in schema.items() if k != "title"}
        enum = body.get("enum")
        if isinstance(enum, list) and len(enum) > _MAX_ENUM:
            alias = " | ".join(dict.fromkeys(json.dumps(e, ensure_ascii=False) for e in enum[:50]))
            if len(enum) > 50:
                alias = "string | number  // one of many values"
        else:
            alias = ts_type(body, root, 1, defs)
        if alias == name:
            alias = "unknown"
        blocks.append("\n".join([*head, f"type {name} = {alias};"]))
    if not blocks:
        return ""
    return "// Types the bindings take and return (plain JSON objects and values).\n" + "\n\n".join(
        blocks
    )


def render_declarations(
    entries: Sequence[Mapping[str, Any]],
    specs: Mapping[str, Mapping[str, Mapping[str, Any]]],
) -> str:
    """Every namespace as ``declare const <namespace>: {...}``, :func:`how_to_call_ts` on
    top, then the named types the bindings use (once each). ``entries``:
    ``describe(format="json")``; ``specs``: the registry's specs."""
    by_namespace: dict[str, list[Mapping[str, Any]]] = {ns: [] for ns in specs}
    for entry in entries:
        by_namespace.setdefault(str(entry.get("namespace")), []).append(entry)
    defs = Definitions(reserved=set(_TS_TYPE_NAMES) | set(by_namespace))
    rendered = []
    for namespace, items in by_namespace.items():
        body: list[str] = []
        for entry in sorted(items, key=lambda e: str(e.get("name"))):
            spec = specs.get(namespace, {}).get(str(entry.get("name")), {})
            params = spec.get("params") if isinstance(spec, Mapping) else None
            text = render_binding_ts(entry, params if isinstance(params, list) else None, defs)
            body.extend("  " + line for line in text.splitlines())
        rendered.append(f"declare const {_param(namespace)}: {{\n" + "\n".join(body) + "\n};")
    parts = [how_to_call_ts(list(by_namespace))]
    types = render_type_declarations(defs)
    if types:
        parts.append(types)
    return "\n\n".join(parts + rendered) + "\n"
