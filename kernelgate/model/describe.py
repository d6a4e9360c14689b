"""The bindings as a model reads them: a compact Python stub, one renderer for every side.

``Gateway.describe()`` (host), ``help(tools)`` inside a program (child) and the Jupyter
kernel's inspect all show this text, made here from the binding specs the host sends in
``comm_open`` (``{"params", "signature", "doc"}`` and, for a binding with its own JSON
Schema, ``"schema"``), and, on the host, what ``describe(format="json")`` says of them
(the answers' schemas). Stdlib only and free of I/O: the child imports it when a program
asks for help.

What the model needs is kept: the docstring (cut to :data:`MAX_DOC` characters) with each
parameter's description beside the parameter (from a Google, NumPy or reST parameter
section, or the schema's ``description``), the named types the schemas define (``$defs``:
a ``TypedDict`` per object, a ``Literal`` per enum), once, at the top, and how to pass an
argument whose name Python cannot spell (``**{"from": ...}``).

>>> spec = {"signature": "(query: str, limit: int = 3) -> list[dict]",
...         "doc": "Search the corpus.\\n\\nArgs:\\n    query: Words to find."}
>>> print(render_binding("tools", "search", spec))
async def search(query: str, limit: int = 3) -> list[dict]:
    \"\"\"Search the corpus.
<BLANKLINE>
    Args:
        query: Words to find.
    \"\"\"
"""

from __future__ import annotations

import keyword
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .defs import Definitions, resolve, safe_name
from .docstrings import parse_docstring, shorten
from .signatures import Source, signature_from_text

__all__ = [
    "HOW_TO_CALL",
    "MAX_DOC",
    "first_paragraph",
    "how_to_call",
    "render_binding",
    "render_definitions",
    "render_help",
    "render_stub",
    "type_hint",
]


_HOW_TO_CALL = """\
# Bindings are async: `x = await tools.name(...)`; run several at once with
# `a, b = await asyncio.gather(tools.f(...), tools.g(...))`. The program is the body of an
# async function: top-level `await`, and `return value` ends it with its result (JSON:
# dict, list, str, int, float, bool, None). Arguments and answers are JSON too.
# A binding that fails raises ToolError (`exc.tool`, `exc.ename`, `str(exc)`): catch it to
# recover. Arguments that do not fit the signature raise TypeError at your line before
# the call is made; a value of the wrong type raises ToolError with `exc.ename ==
# "TypeError"` there, saying which argument and what was expected."""


def how_to_call(namespaces: Sequence[str] = ("tools",)) -> str:
    """The lines above the stub: how a program calls bindings (in the namespaces it
    really has), and how they fail.

    >>> print(how_to_call(["tracker", "files"]).splitlines()[0])
    # Bindings are async: `x = await tracker.name(...)`; run several at once with
    """
    names = [n for n in namespaces if n] or ["tools"]
    text = _HOW_TO_CALL.replace("tools.", f"{names[0]}.")
    if len(names) > 1:
        text += f"\n# The namespaces (globals of the program): {', '.join(names)}."
    return text


#: The lines above a stub of the one namespace ``tools``.
HOW_TO_CALL = how_to_call()

#: Longest docstring text shown per binding (a stub is read by a model on every turn);
#: the parameters' descriptions come on top, up to :data:`MAX_PARAM_DOC` each.
MAX_DOC = 400
MAX_PARAM_DOC = 200
#: Enum values a ``Literal`` lists at most.
MAX_ENUM = 12
MAX_ENUM_DEFINED = 50
#: Names a definition may not take: what the stub itself uses.
_TYPING_NAMES = frozenset(
    "Any Literal TypedDict NotRequired list dict str int float bool None tuple set".split()
)


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
    return safe_name(name)


def type_hint(
    schema: Any,
    root: Mapping[str, Any] | None = None,
    depth: int = 0,
    defs: Definitions | None = None,
) -> str:
    """A Python type hint for a JSON Schema (``Any`` where none says more). With ``defs``,
    a ``$ref`` to a ``$defs`` entry is that definition's name (recorded in ``defs``);
    without, it is written out in place.

    >>> type_hint({"type": "array", "items": {"type": "string"}})
    'list[str]'
    >>> type_hint({"anyOf": [{"type": "integer"}, {"type": "null"}]})
    'int | None'
    >>> type_hint({"enum": ["sum", "mean"]})
    "Literal['sum', 'mean']"
    >>> type_hint({"type": "object", "properties": {"count": {"type": "integer"}}})
    "{'count': int}"
    >>> type_hint({"$defs": {"P": {"type": "object"}}, "$ref": "#/$defs/P"}, defs=Definitions())
    'P'
    """
    if not isinstance(schema, Mapping) or depth > 8:
        return "Any"
    root = schema if root is None else root
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/"):
        name = defs.name_for(ref, root) if defs is not None else None
        if name is not None:
            return name
        node = resolve(ref, root)
        return type_hint(node, root, depth + 1, defs) if node is not None else "Any"
    enum = schema.get("enum")
    if isinstance(enum, list) and enum and len(enum) <= MAX_ENUM:
        return "Literal[" + ", ".join(repr(e) for e in enum) + "]"
    if "const" in schema:
        return f"Literal[{schema['const']!r}]"
    for key in ("anyOf", "oneOf", "allOf"):
        options = schema.get(key)
        if isinstance(options, list) and options and (key != "allOf" or len(options) == 1):
            hints: list[str] = []
            for option in options:
                hint = type_hint(option, root, depth + 1, defs)
                if hint not in hints:
                    hints.append(hint)
            return " | ".join(hints)
    kind = schema.get("type")
    if isinstance(kind, list):
        hints = [type_hint({**schema, "type": k}, root, depth + 1, defs) for k in kind]
        return " | ".join(dict.fromkeys(hints))
    simple = {"string": "str", "integer": "int", "number": "float", "boolean": "bool"}
    if isinstance(kind, str) and kind in simple:
        return simple[kind]
    if kind == "null":
        return "None"
    if kind == "array":
        items = schema.get("items")
        if isinstance(items, Mapping):
            return f"list[{type_hint(items, root, depth + 1, defs)}]"
        return "list"
    if kind == "object":
        props = schema.get("properties")
        if isinstance(props, Mapping) and 0 < len(props) <= 10:
            # Not Python, but the shortest way to tell a model which keys come back.
            fields = (f"{k!r}: {type_hint(v, root, depth + 1, defs)}" for k, v in props.items())
            return "{" + ", ".join(fields) + "}"
        extra = schema.get("additionalProperties")
        if isinstance(extra, Mapping):
            return f"dict[str, {type_hint(extra, root, depth + 1, defs)}]"
        return "dict[str, Any]"
    return "Any"


def _docstring(text: str, indent: str) -> list[str]:
    """``text`` as a docstring's lines at ``indent``: one line when it fits on one, and
    always valid Python (no closing quotes or escapes inside)."""
    text = text.replace("\\", "\\\\").replace('"""', '\\"\\"\\"')
    if text.endswith('"'):
        text += " "
    lines = text.splitlines() or [""]
    if len(lines) == 1:
        return [f'{indent}"""{lines[0]}"""']
    out = [f'{indent}"""{lines[0]}']
    out.extend(f"{indent}{line}" if line.strip() else "" for line in lines[1:])
    out.append(f'{indent}"""')
    return out


def _comment(text: str) -> str:
    return " ".join(text.split())


def render_definitions(defs: Definitions) -> str:
    """Every named type ``defs`` has met, as Python: a ``TypedDict`` per object with
    properties (``NotRequired`` for a key it may leave out), a ``Literal`` alias per enum,
    an alias for anything else. Rendering one may meet more: all are rendered."""
    blocks: list[str] = []
    i = 0
    while i < len(defs.order):
        name, schema, root = defs.order[i]
        i += 1
        blocks.append(_definition(name, schema, root, defs))
    if not blocks:
        return ""
    head = (
        "# Types the bindings take and return "
        "(a TypedDict is a plain dict: build and read them as dicts)."
    )
    return head + "\n" + "\n\n".join(blocks)


def _definition(
    name: str, schema: Mapping[str, Any], root: Mapping[str, Any], defs: Definitions
) -> str:
    description = _comment(str(schema.get("description") or ""))
    enum = schema.get("enum")
    if isinstance(enum, list) and enum:
        if len(enum) <= MAX_ENUM_DEFINED:
            text = f"{name} = Literal[{', '.join(repr(e) for e in enum)}]"
        else:
            shown = ", ".join(repr(e) for e in enum[:MAX_ENUM])
            text = f"{name} = Any  # one of {len(enum)} values: {shown}, ..."
        return text + (f"  # {shorten(description, MAX_PARAM_DOC)}" if description else "")
    props = schema.get("properties")
    if isinstance(props, Mapping) and props:
        required = schema.get("required")
        needed = set(required) if isinstance(required, list) else set()
        fields: list[tuple[str, str, str]] = []
        for key, prop in props.items():
            hint = type_hint(prop, root, 1, defs)
            if key not in needed:
                hint = f"NotRequired[{hint}]"
            note = prop.get("description") if isinstance(prop, Mapping) else None
            fields.append((str(key), hint, _comment(str(note or ""))))
        if all(_identifier(k) for k, _, _ in fields):
            lines = [f"class {name}(TypedDict):"]
            if description:
                lines.extend(_docstring(shorten(description, MAX_DOC), "    "))
            for key, hint, note in fields:
                tail = f"  # {shorten(note, MAX_PARAM_DOC)}" if note else ""
                lines.append(f"    {key}: {hint}{tail}")
            return "\n".join(lines)
        # Keys Python cannot spell (``from``, ``x-id``): TypedDict's functional form.
        lines = [f"# {shorten(description, MAX_DOC)}"] if description else []
        lines.append(f"{name} = TypedDict({name!r}, {{")
        for key, hint, note in fields:
            tail = f"  # {shorten(note, MAX_PARAM_DOC)}" if note else ""
            lines.append(f"    {key!r}: {hint},{tail}")
        lines.append("})")
        return "\n".join(lines)
    hint = type_hint({k: v for k, v in schema.items() if k != "title"}, root, 1, defs)
    if hint == name:
        hint = "Any"
    return f"{name} = {hint}" + (
        f"  # {shorten(description, MAX_PARAM_DOC)}" if description else ""
    )


_PREFIX = {"VAR_POSITIONAL": "*", "VAR_KEYWORD": "**"}


def _has_ref(schema: Any, depth: int = 0) -> bool:
    """Whether ``schema`` points at a definition (``$ref``) anywhere within it."""
    if depth > 32:
        return False
    if isinstance(schema, Mapping):
        return "$ref" in schema or any(_has_ref(v, depth + 1) for v in schema.values())
    if isinstance(schema, list):
        return any(_has_ref(v, depth + 1) for v in schema)
    return False


def _props(schema: Any) -> Mapping[str, Any]:
    props = schema.get("properties") if isinstance(schema, Mapping) else None
    return props if isinstance(props, Mapping) else {}


def _signature(
    spec: Mapping[str, Any],
    defs: Definitions | None,
    entry: Mapping[str, Any] | None,
) -> str:
    """The stub's signature: the host's text; for a binding whose function says no types
    but whose schema does, the parameters typed from the schema; and with ``defs``, a
    parameter or answer whose schema names a type (``$ref``) shown by that name."""
    text = str(spec.get("signature") or "(*args, **kwargs)")
    schema, params = spec.get("schema"), spec.get("params")
    if not isinstance(schema, Mapping) and entry is not None:
        schema = entry.get("parameters")
    returns = entry.get("returns") if entry is not None else None
    if not isinstance(schema, Mapping):
        schema = None
    if schema is not None and isinstance(params, list) and ":" not in text:
        text = _typed_from_schema(text, params, schema, defs)
    if defs is None:
        return text
    props = _props(schema)
    named = {k for k, v in props.items() if _has_ref(v)}
    if not named and not _has_ref(returns):
        return text
    parsed = signature_from_text(text)
    if parsed is None:
        return text
    assert schema is not None or not named
    new = []
    for p in parsed.parameters.values():
        if p.name in named and schema is not None:
            p = p.replace(annotation=Source(type_hint(props[p.name], schema, 0, defs)))
        new.append(p)
    ret = parsed.return_annotation
    if _has_ref(returns):
        ret = Source(defs.name_root(returns) or type_hint(returns, None, 0, defs))
    return str(parsed.replace(parameters=new, return_annotation=ret))


def _typed_from_schema(
    text: str, params: list[Any], schema: Mapping[str, Any], defs: Definitions | None
) -> str:
    props = _props(schema)
    parts = []
    for param in params:
        if not (isinstance(param, list) and len(param) == 3):
            return text
        pname, kind, has_default = param
        prop = props.get(pname)
        part = f"{_PREFIX.get(kind, '')}{pname}"
        if isinstance(prop, Mapping):
            part += f": {type_hint(prop, schema, 0, defs)}"
        if has_default:
            default = prop.get("default", ...) if isinstance(prop, Mapping) else ...
            part += f" = {default!r}"
        parts.append(part)
    returns = text.rpartition(") -> ")[2] if ") -> " in text else ""
    return f"({', '.join(parts)})" + (f" -> {returns}" if returns else "")


def _unspellable(
    spec: Mapping[str, Any], schema: Any, defs: Definitions | None
) -> list[tuple[str, str, bool]]:
    """The schema's properties a ``**kwargs`` takes because Python cannot name them
    (``from``, ``x-id``): ``(name, type, required)``."""
    params = spec.get("params")
    if not isinstance(params, list) or not isinstance(schema, Mapping):
        return []
    named = {p[0] for p in params if isinstance(p, list) and p}
    if not any(isinstance(p, list) and len(p) == 3 and p[1] == "VAR_KEYWORD" for p in params):
        return []
    required = schema.get("required")
    needed = set(required) if isinstance(required, list) else set()
    return [
        (str(k), type_hint(v, schema, 0, defs), k in needed)
        for k, v in _props(schema).items()
        if k not in named and not _identifier(str(k))
    ]


def render_binding(
    namespace: str,
    name: str,
    spec: Mapping[str, Any],
    indent: str = "",
    defs: Definitions | None = None,
    entry: Mapping[str, Any] | None = None,
) -> str:
    """One binding as an ``async def`` stub with its docstring and its parameters'
    descriptions. ``defs`` collects the named types it uses (see :func:`render_stub`);
    ``entry`` is what ``describe(format="json")`` says of it, where the caller has it."""
    signature = _signature(spec, defs, entry)
    schema = spec.get("schema")
    if not isinstance(schema, Mapping) and entry is not None:
        schema = entry.get("parameters")
    lines = []
    call = f"{namespace}.{name}" if _identifier(name) else f"{namespace}[{name!r}]"
    if not _identifier(name):
        lines.append(f"{indent}# call as: await {call}(...)")
    odd = _unspellable(spec, schema, defs)
    if odd:
        example = ", ".join(f"{k!r}: ..." for k, _, _ in odd)
        several = len(odd) > 1
        lines.append(
            f"{indent}# {', '.join(repr(k) for k, _, _ in odd)} "
            f"{'are not Python names' if several else 'is not a Python name'}, so pass "
            f"{'them' if several else 'it'} as `await {call}(..., **{{{example}}})`"
        )
    lines.append(f"{indent}async def {name if _identifier(name) else _py_name(name)}{signature}:")
    parsed = parse_docstring(str(spec.get("doc") or ""))
    doc = shorten(parsed.text, MAX_DOC)
    notes = _argument_notes(spec, schema, parsed.params, odd)
    body = indent + "    "
    if notes:
        text = [doc or "(no description)", "", "Args:"] + [f"    {n}" for n in notes]
        lines.extend(_docstring("\n".join(text), body))
    elif doc:
        lines.extend(_docstring(doc, body))
    else:
        lines.append(f"{body}...")
    return "\n".join(lines)


def _argument_notes(
    spec: Mapping[str, Any],
    schema: Any,
    documented: Mapping[str, str],
    odd: list[tuple[str, str, bool]],
) -> list[str]:
    """``name: description`` per parameter that has one (the schema's ``description``,
    else the docstring's), and the type of each one Python cannot name."""
    props = _props(schema)
    order: list[str] = []
    params = spec.get("params")
    if isinstance(params, list):
        order.extend(str(p[0]) for p in params if isinstance(p, list) and p)
    order.extend(str(k) for k in props if str(k) not in order)
    order.extend(k for k in documented if k not in order)
    unspellable = {k: (hint, req) for k, hint, req in odd}
    notes = []
    for pname in order:
        prop = props.get(pname)
        text = ""
        if isinstance(prop, Mapping):
            text = str(prop.get("description") or "")
        text = _comment(text or documented.get(pname, "") or documented.get(pname.lstrip("*"), ""))
        text = shorten(text, MAX_PARAM_DOC)
        if pname in unspellable:
            hint, req = unspellable[pname]
            label = f"{pname!r} ({hint}{', required' if req else ''}; pass as **{{{pname!r}: ...}})"
            notes.append(f"{label}: {text}" if text else label)
        elif text:
            notes.append(f"{pname}: {text}")
    return notes


def render_namespace(
    namespace: str,
    specs: Mapping[str, Mapping[str, Any]],
    defs: Definitions | None = None,
    entries: Mapping[str, Mapping[str, Any]] | None = None,
) -> str:
    """One namespace as a class of ``async def`` stubs."""
    lines = [f"class {namespace}:"]
    if not specs:
        lines.append("    pass  # no bindings")
    for i, name in enumerate(sorted(specs)):
        if i:
            lines.append("")
        entry = entries.get(name) if entries is not None else None
        lines.append(render_binding(namespace, name, specs[name], "    ", defs, entry))
    return "\n".join(lines)


def render_stub(
    namespaces: Mapping[str, Mapping[str, Mapping[str, Any]]],
    described: Iterable[Mapping[str, Any]] = (),
) -> str:
    """Every namespace as a compact Python stub, with :func:`how_to_call` on top, then the
    named types the bindings use (once each), then a class per namespace. ``described``:
    ``describe(format="json")``'s entries, where the caller has them (the answers'
    schemas, and the parameters' of bindings whose schema is made from the signature).

    >>> print(render_stub({"tools": {"add": {"signature": "(a: int, b: int) -> int"}}}))
    ... # doctest: +ELLIPSIS
    # Bindings are async: ...
    <BLANKLINE>
    class tools:
        async def add(a: int, b: int) -> int:
            ...
    """
    by_name: dict[str, dict[str, Mapping[str, Any]]] = {}
    for entry in described:
        by_name.setdefault(str(entry.get("namespace")), {})[str(entry.get("name"))] = entry
    for ns, table in namespaces.items():  # what a child was given (see render_help)
        for name, spec in table.items():
            given = spec.get("described")
            if isinstance(given, Mapping):
                by_name.setdefault(ns, {}).setdefault(name, given)
    defs = Definitions(reserved=set(_TYPING_NAMES) | set(namespaces))
    rendered = [render_namespace(ns, namespaces[ns], defs, by_name.get(ns)) for ns in namespaces]
    parts = [how_to_call(list(namespaces))]
    definitions = render_definitions(defs)
    if definitions:
        parts.append(definitions)
    return "\n\n".join(parts + rendered) + "\n"


def render_help(namespace: str, name: str, spec: Mapping[str, Any]) -> str:
    """What ``help(tools.name)`` prints in a program (and the Jupyter kernel's inspect):
    the binding's stub, after the named types it uses, from its spec (its ``described``
    entry, where it takes or returns named types; :func:`render_stub` reads it too).

    >>> print(render_help("tools", "inc", {"signature": "(a: int) -> int", "doc": "Add one."}))
    async def inc(a: int) -> int:
        \"\"\"Add one.\"\"\"
    """
    defs = Definitions(reserved=set(_TYPING_NAMES) | {namespace})
    entry = spec.get("described")
    stub = render_binding(
        namespace, name, spec, defs=defs, entry=entry if isinstance(entry, Mapping) else None
    )
    definitions = render_definitions(defs)
    return f"{definitions}\n\n{stub}" if definitions else stub
