"""The bindings as a model reads them: a compact Python stub, one renderer for every side.

``Gateway.describe()`` (host), ``help(tools)`` inside a program (child) and the Jupyter
kernel's inspect all show this text, made here from the binding specs the host sends in
``comm_open`` (``{"params", "signature", "doc"}`` and, for a binding with its own JSON
Schema, ``"schema"``). Stdlib only and free of I/O: the child imports it when a program
asks for help.

>>> spec = {"signature": "(query: str, limit: int = 3) -> list[dict]",
...         "doc": "Search the corpus.\\n\\nMore detail nobody needs up front."}
>>> print(render_binding("tools", "search", spec))
async def search(query: str, limit: int = 3) -> list[dict]:
    \"\"\"Search the corpus.\"\"\"
"""

from __future__ import annotations

import keyword
from collections.abc import Mapping
from typing import Any

__all__ = ["HOW_TO_CALL", "first_paragraph", "render_binding", "render_stub", "type_hint"]

#: The lines above the stub: how a program calls bindings, and how they fail.
HOW_TO_CALL = """\
# Bindings are async: `x = await tools.name(...)`; run several at once with
# `a, b = await asyncio.gather(tools.f(...), tools.g(...))`. The program is the body of an
# async function: top-level `await`, and `return value` ends it with its result (JSON:
# dict, list, str, int, float, bool, None). Arguments and answers are JSON too.
# A binding that fails raises ToolError (`exc.tool`, `exc.ename`, `str(exc)`): catch it to
# recover. Arguments that do not fit raise TypeError at your line before the call is made."""

#: Longest docstring paragraph shown per binding (a stub is read by a model on every turn).
MAX_DOC = 400


def first_paragraph(doc: str, limit: int = MAX_DOC) -> str:
    """The first paragraph of ``doc``, its lines joined, cut to ``limit`` characters.

    >>> first_paragraph("Add numbers.\\n\\nArgs: ...")
    'Add numbers.'
    """
    lines = []
    for line in (doc or "").strip().splitlines():
        if not line.strip():
            break
        lines.append(line.strip())
    text = " ".join(lines)
    return text if len(text) <= limit else text[: limit - 3].rstrip() + "..."


def _identifier(name: str) -> bool:
    return name.isidentifier() and not keyword.iskeyword(name)


def _py_name(name: str) -> str:
    cleaned = "".join(c if c.isalnum() or c == "_" else "_" for c in name)
    if not cleaned or cleaned[0].isdigit() or keyword.iskeyword(cleaned):
        cleaned = "_" + cleaned
    return cleaned


def type_hint(schema: Any, root: Mapping[str, Any] | None = None, depth: int = 0) -> str:
    """A Python type hint for a JSON Schema (``Any`` where none says more).

    >>> type_hint({"type": "array", "items": {"type": "string"}})
    'list[str]'
    >>> type_hint({"anyOf": [{"type": "integer"}, {"type": "null"}]})
    'int | None'
    >>> type_hint({"enum": ["sum", "mean"]})
    "Literal['sum', 'mean']"
    >>> type_hint({"type": "object", "properties": {"count": {"type": "integer"}}})
    "{'count': int}"
    """
    if not isinstance(schema, Mapping) or depth > 8:
        return "Any"
    root = schema if root is None else root
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/"):
        node: Any = root
        for part in ref[2:].split("/"):
            node = node.get(part) if isinstance(node, Mapping) else None
        return type_hint(node, root, depth + 1) if node is not None else "Any"
    enum = schema.get("enum")
    if isinstance(enum, list) and enum and len(enum) <= 12:
        return "Literal[" + ", ".join(repr(e) for e in enum) + "]"
    if "const" in schema:
        return f"Literal[{schema['const']!r}]"
    for key in ("anyOf", "oneOf"):
        options = schema.get(key)
        if isinstance(options, list) and options:
            hints: list[str] = []
            for option in options:
                hint = type_hint(option, root, depth + 1)
                if hint not in hints:
                    hints.append(hint)
            return " | ".join(hints)
    kind = schema.get("type")
    if isinstance(kind, list):
        hints = [type_hint({**schema, "type": k}, root, depth + 1) for k in kind]
        return " | ".join(dict.fromkeys(hints))
    if kind == "string":
        return "str"
    if kind == "integer":
        return "int"
    if kind == "number":
        return "float"
    if kind == "boolean":
        return "bool"
    if kind == "null":
        return "None"
    if kind == "array":
        items = schema.get("items")
        return (
            f"list[{type_hint(items, root, depth + 1)}]" if isinstance(items, Mapping) else "list"
        )
    if kind == "object":
        props = schema.get("properties")
        if isinstance(props, Mapping) and 0 < len(props) <= 10:
            # Not Python, but the shortest way to tell a model which keys come back.
            fields = (f"{k!r}: {type_hint(v, root, depth + 1)}" for k, v in props.items())
            return "{" + ", ".join(fields) + "}"
        extra = schema.get("additionalProperties")
        if isinstance(extra, Mapping):
            return f"dict[str, {type_hint(extra, root, depth + 1)}]"
        return "dict[str, Any]"
    return "Any"


def _argument_notes(schema: Any) -> list[str]:
    """``name: description`` for each property of an argument schema that has one."""
    if not isinstance(schema, Mapping):
        return []
    props = schema.get("properties")
    if not isinstance(props, Mapping):
        return []
    notes = []
    for name, prop in props.items():
        if isinstance(prop, Mapping):
            text = first_paragraph(str(prop.get("description") or ""), 200)
            if text:
                notes.append(f"{name}: {text}")
    return notes


_PREFIX = {"VAR_POSITIONAL": "*", "VAR_KEYWORD": "**"}


def _signature(spec: Mapping[str, Any]) -> str:
    """The stub's signature: the host's text, or, for a binding whose function says no
    types but whose schema does, the parameters typed from the schema."""
    text = str(spec.get("signature") or "(*args, **kwargs)")
    schema, params = spec.get("schema"), spec.get("params")
    if not isinstance(schema, Mapping) or not isinstance(params, list) or ":" in text:
        return text
    props = schema.get("properties")
    props = props if isinstance(props, Mapping) else {}
    parts = []
    for param in params:
        if not (isinstance(param, list) and len(param) == 3):
            return text
        pname, kind, has_default = param
        prop = props.get(pname)
        part = f"{_PREFIX.get(kind, '')}{pname}"
        if isinstance(prop, Mapping):
            part += f": {type_hint(prop, schema)}"
        if has_default:
            default = prop.get("default", ...) if isinstance(prop, Mapping) else ...
            part += f" = {default!r}"
        parts.append(part)
    returns = text.rpartition(") -> ")[2] if ") -> " in text else ""
    return f"({', '.join(parts)})" + (f" -> {returns}" if returns else "")


def render_binding(namespace: str, name: str, spec: Mapping[str, Any], indent: str = "") -> str:
    """One binding as an ``async def`` stub with the first paragraph of its docstring."""
    signature = _signature(spec)
    lines = []
    if not _identifier(name):
        lines.append(f"{indent}# call as: await {namespace}[{name!r}](...)")
    lines.append(f"{indent}async def {name if _identifier(name) else _py_name(name)}{signature}:")
    doc = first_paragraph(str(spec.get("doc") or ""))
    notes = _argument_notes(spec.get("schema"))
    body = indent + "    "
    if notes:
        text = [doc or "(no description)", "", "Args:"] + [f"    {n}" for n in notes]
        lines.append(f'{body}"""{text[0]}')
        lines.extend(f"{body}{line}" if line else "" for line in text[1:])
        lines.append(f'{body}"""')
    elif doc:
        lines.append(f'{body}"""{doc}"""')
    else:
        lines.append(f"{body}...")
    return "\n".join(lines)


def render_namespace(namespace: str, specs: Mapping[str, Mapping[str, Any]]) -> str:
    """One namespace as a class of ``async def`` stubs."""
    lines = [f"class {namespace}:"]
    if not specs:
        lines.append("    pass  # no bindings")
    for i, name in enumerate(sorted(specs)):
        if i:
            lines.append("")
        lines.append(render_binding(namespace, name, specs[name], indent="    "))
    return "\n".join(lines)


def render_stub(namespaces: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> str:
    """Every namespace as a compact Python stub, with :data:`HOW_TO_CALL` on top.

    >>> print(render_stub({"tools": {"add": {"signature": "(a: int, b: int) -> int"}}}))
    ... # doctest: +ELLIPSIS
    # Bindings are async: ...
    <BLANKLINE>
    class tools:
        async def add(a: int, b: int) -> int:
            ...
    """
    parts = [HOW_TO_CALL]
    for namespace in namespaces:
        parts.append(render_namespace(namespace, namespaces[namespace]))
    return "\n\n".join(parts) + "\n"
