"""``complete``, ``inspect`` and ``is_complete`` for TypeScript and JavaScript cells.

The counterpart of :mod:`.introspect` (Python's, built on ``ast`` and ``codeop``) for a
kernel whose runtime is Node: every cell is a fresh program, so there is no live namespace
to ask, and nothing here runs or parses the cell with a JavaScript engine. Answers come
from what every program has -- the binding namespaces (their TypeScript declarations, as
``Gateway.describe()`` gives them), ``ToolError``, ``display``, the JavaScript globals and
keywords -- plus the identifiers the cell itself binds; ``is_complete`` balances brackets,
strings, template literals and comments.

>>> is_complete("const x = [1,\\n")["status"], is_complete("let y = )")["status"]
('incomplete', 'invalid')
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from kernelgate.gateway.bindings import Binding
from kernelgate.gateway.describe import describe_binding
from kernelgate.model.describe_ts import render_binding_ts, render_declarations

__all__ = ["complete", "describe_name", "inspect_code", "is_complete", "ts_declaration"]

Namespaces = Mapping[str, Mapping[str, Binding]]

#: The globals every TypeScript/JavaScript program has (the Node kernel's and the
#: language's), as completion lists them: name -> the completer's type column.
GLOBALS: dict[str, str] = {
    "ToolError": "class",
    "display": "function",
    "console": "module",
    "process": "module",
    "JSON": "module",
    "Math": "module",
    "Promise": "class",
    "Object": "class",
    "Array": "class",
    "String": "class",
    "Number": "class",
    "Boolean": "class",
    "Date": "class",
    "RegExp": "class",
    "Error": "class",
    "TypeError": "class",
    "RangeError": "class",
    "SyntaxError": "class",
    "ReferenceError": "class",
    "Map": "class",
    "Set": "class",
    "WeakMap": "class",
    "Symbol": "function",
    "BigInt": "function",
    "Intl": "module",
    "Reflect": "module",
    "globalThis": "module",
    "parseInt": "function",
    "parseFloat": "function",
    "isNaN": "function",
    "isFinite": "function",
    "encodeURIComponent": "function",
    "decodeURIComponent": "function",
    "setTimeout": "function",
    "clearTimeout": "function",
    "structuredClone": "function",
    "undefined": "keyword",
    "NaN": "keyword",
    "Infinity": "keyword",
}

#: Members of the global objects a cell most often reaches for.
MEMBERS: dict[str, tuple[str, ...]] = {
    "console": ("debug", "error", "info", "log", "table", "warn"),
    "JSON": ("parse", "stringify"),
    "Promise": ("all", "allSettled", "any", "race", "reject", "resolve"),
    "Object": ("assign", "entries", "freeze", "fromEntries", "keys", "values"),
    "Array": ("from", "isArray", "of"),
    "Math": (
        "abs",
        "ceil",
        "floor",
        "max",
        "min",
        "pow",
        "random",
        "round",
        "sign",
        "sqrt",
        "trunc",
        "PI",
        "E",
    ),
    "Number": ("isFinite", "isInteger", "isNaN", "parseFloat", "parseInt"),
    "process": ("stdout", "stderr"),
}

KEYWORDS = tuple(
    "as async await break case catch class const continue debugger default delete do else "
    "enum export extends false finally for function if in instanceof interface let new null "
    "of return satisfies switch this throw true try type typeof var void while yield".split()
)

_GLOBAL_DOCS: dict[str, str] = {
    "ToolError": (
        "class ToolError extends Error {\n  tool: string;   // e.g. 'tools.search'\n"
        "  ename: string;  // the host exception's class name\n}\n\n"
        "A binding failed on the host (or was refused before it ran): `await tools.x(...)` "
        "throws it; catch it to recover."
    ),
    "display": (
        "declare function display(...objs: unknown[]): void;\n\n"
        "Show values as rich outputs (display_data), as in a notebook."
    ),
    "console": (
        "console.log/info/debug write to stdout, console.error/warn to stderr, in order with "
        "process.stdout.write and process.stderr.write."
    ),
}

_IDENT = r"[A-Za-z_$][\w$]*"
_ATTRIBUTE = re.compile(rf"({_IDENT})\s*(\?\.|\.)\s*([\w$]*)$")
_SUBSCRIPT = re.compile(rf"({_IDENT})\s*\[\s*(['\"`])([^'\"`\\]*)$")
_IDENTIFIER = re.compile(rf"{_IDENT}$")
_WORDS = re.compile(_IDENT)
_DOTTED_LEFT = re.compile(rf"{_IDENT}(?:\s*\.\s*[\w$]*|\s*\[\s*['\"][^'\"\\]*['\"]\s*\])*$")
_WORD_RIGHT = re.compile(r"[\w$]*")
_BRACKETED = re.compile(r"\[\s*['\"]([^'\"\\]*)['\"]\s*\]")
_TYPE_CHARS = 56
_NBSP = "\u00a0"


def _cursor(code: str, cursor_pos: Any) -> int:
    if isinstance(cursor_pos, int) and not isinstance(cursor_pos, bool) and 0 <= cursor_pos:
        return min(cursor_pos, len(code))
    return len(code)


def ts_declaration(binding: Binding) -> str:
    """A binding's TypeScript declaration (the line ``describe()`` gives a model), its
    first paragraph as a doc comment."""
    params = binding.spec().get("params")
    return render_binding_ts(
        describe_binding(binding), params if isinstance(params, list) else None
    )


def _signature(binding: Binding) -> str:
    """``search(query: string, limit?: number): Promise<unknown>``: the declaration's
    last line without its ``;``."""
    return ts_declaration(binding).splitlines()[-1].rstrip(";")


def _binding_type(binding: Binding) -> dict[str, Any]:
    """A binding's completion item: ``signature`` (the TypeScript one) and ``type``
    (``function search(query: string, ...)``, short, with no-break spaces: JupyterLab 4
    shows only ``type``, one line an item; see :func:`.introspect._binding_type`)."""
    signature = _signature(binding)
    shown = signature.rsplit("): Promise<", 1)[0] + ")" if "): Promise<" in signature else signature
    if len(shown) > _TYPE_CHARS:
        shown = shown[: _TYPE_CHARS - 1] + "\u2026"
    return {"type": f"function{_NBSP}{shown.replace(' ', _NBSP)}", "signature": signature}


def bound_names(code: str) -> set[str]:
    """Identifiers a cell declares (``const``/``let``/``var``, destructuring names,
    ``function``, ``class``), read from its text.

    >>> sorted(bound_names("const {a, b: c} = o; let [d] = x; function f() {}"))
    ['a', 'c', 'd', 'f']
    """
    names: set[str] = set()
    for m in re.finditer(
        rf"\b(?:const|let|var)\s+(?:({_IDENT})|([{{\[][^=;]*[}}\]]))|"
        rf"\b(?:function\*?|class)\s+({_IDENT})",
        code,
    ):
        if m.group(1):
            names.add(m.group(1))
        elif m.group(3):
            names.add(m.group(3))
        elif m.group(2):
            # `{a, b: c = 1, ...rest}` binds a, c, rest: a key before ':' is not a name.
            inner = re.sub(rf"{_IDENT}\s*:", "", m.group(2))
            inner = re.sub(r"=[^,}\]]*", "", inner)
            names.update(_WORDS.findall(inner))
    return names


def complete(code: str, cursor_pos: Any, namespaces: Namespaces) -> dict[str, Any]:
    """The ``complete_reply`` content for ``code`` at ``cursor_pos``."""
    pos = _cursor(code, cursor_pos)
    before = code[:pos]
    items: list[tuple[str, dict[str, Any]]] = []
    start = pos
    if (m := _SUBSCRIPT.search(before)) is not None and m.group(1) in namespaces:
        prefix = m.group(3)
        start = pos - len(prefix)
        table = namespaces[m.group(1)]
        items = [(n, _binding_type(table[n])) for n in sorted(table) if n.startswith(prefix)]
    elif (m := _ATTRIBUTE.search(before)) is not None:
        owner, prefix = m.group(1), m.group(3)
        start = pos - len(prefix)
        if owner in namespaces:
            table = namespaces[owner]
            items = [
                (n, _binding_type(table[n]))
                for n in sorted(table)
                if n.startswith(prefix) and re.fullmatch(_IDENT, n)
            ]
        else:
            items = [
                (n, {"type": "function"})
                for n in sorted(MEMBERS.get(owner, ()))
                if n.startswith(prefix)
            ]
    elif (m := _IDENTIFIER.search(before)) is not None and not (
        m.start() > 0 and (before[m.start() - 1].isdigit() or before[m.start() - 1] == ".")
    ):
        prefix = m.group(0)
        start = m.start()
        candidates: dict[str, str] = {}
        rest = code[: m.start()] + " " + code[pos:]
        for word in _WORDS.findall(rest):
            candidates.setdefault(word, "statement")
        for name in bound_names(rest):
            candidates[name] = "variable"
        candidates.update(GLOBALS)
        for word in KEYWORDS:
            candidates[word] = "keyword"
        for ns in namespaces:
            candidates[ns] = "module"
        items = [(n, {"type": t}) for n, t in sorted(candidates.items()) if n.startswith(prefix)]
    types = [{"text": name, **extra, "start": start, "end": pos} for name, extra in items]
    return {
        "status": "ok",
        "matches": [name for name, _ in items],
        "cursor_start": start,
        "cursor_end": pos,
        "metadata": {"_jupyter_types_experimental": types},
    }


def _token_at(code: str, pos: int) -> str:
    left = _DOTTED_LEFT.search(code[:pos])
    right = _WORD_RIGHT.match(code, pos)
    token = (left.group(0) if left else "") + (right.group(0) if right else "")
    return _normal(token)


def _normal(token: str) -> str:
    """``tools["web-search"]`` and ``tools . search`` as ``tools.web-search``."""
    token = _BRACKETED.sub(lambda m: "." + m.group(1), token)
    return re.sub(r"\s+", "", token).replace("?.", ".").strip(".")


def _callee_before(code: str, pos: int) -> str:
    """The name whose call the cursor is inside: ``tools.search("x", |`` -> ``tools.search``."""
    depth = 0
    for i in range(pos - 1, -1, -1):
        ch = code[i]
        if ch in ")]}":
            depth += 1
        elif ch in "([{":
            if depth == 0:
                if ch != "(":
                    return ""
                left = _DOTTED_LEFT.search(code[:i].rstrip())
                return _normal(left.group(0)) if left else ""
            depth -= 1
    return ""


def describe_name(token: str, namespaces: Namespaces) -> str | None:
    """What ``inspect`` and ``obj?`` show for a name: a binding's TypeScript declaration
    and whole doc, a namespace's declarations, or one of the program's globals; ``None``
    when there is nothing to show."""
    head, _, rest = token.partition(".")
    if head in namespaces:
        table = namespaces[head]
        if not rest:
            entries = [describe_binding(table[n]) for n in sorted(table)]
            specs = {head: {n: b.spec() for n, b in table.items()}}
            return render_declarations(entries, specs)
        binding = table.get(rest)
        if binding is None:
            return None
        text = f"{head}.{ts_declaration(binding).splitlines()[-1]}"
        doc = binding.doc.strip()
        return f"{text}\n\n{doc}" if doc else text
    if not rest and head in _GLOBAL_DOCS:
        return _GLOBAL_DOCS[head]
    return None


def inspect_code(code: str, cursor_pos: Any, namespaces: Namespaces) -> dict[str, Any]:
    """The ``inspect_reply`` content: a binding's declaration and doc, or a namespace's."""
    pos = _cursor(code, cursor_pos)
    text = None
    for token in (_token_at(code, pos), _callee_before(code, pos)):
        if token:
            text = describe_name(token, namespaces)
            if text is not None:
                break
    if text is None:
        return {"status": "ok", "found": False, "data": {}, "metadata": {}}
    return {"status": "ok", "found": True, "data": {"text/plain": text}, "metadata": {}}


_OPENERS = {"(": ")", "[": "]", "{": "}"}
#: What may come right before a ``/`` that starts a regular expression (not a division).
_REGEX_AFTER = set("(,=:[!&|?{};+-*%<>~^") | {""}
_REGEX_WORDS = {"return", "typeof", "case", "do", "else", "in", "of", "void", "yield", "await"}


class _Scan:
    """Where a cell's text stands at its end: open brackets, an open string, template or
    comment, or a closing bracket that does not match (``invalid``)."""

    def __init__(self, code: str) -> None:
        self.code = code
        self.stack: list[str] = []  # open brackets, and "`" for each open template
        self.open = ""  # what the text ends inside: "'", '"', "`", "/*" or ""
        self.invalid = ""

    def run(self) -> _Scan:
        code, n, i = self.code, len(self.code), 0
        last = ""  # the last significant token's last character (or word)
        while i < n and not self.invalid:
            ch = code[i]
            if ch in " \t\r\n":
                i += 1
            elif code.startswith("//", i):
                end = code.find("\n", i)
                i = n if end < 0 else end
            elif code.startswith("/*", i):
                end = code.find("*/", i + 2)
                if end < 0:
                    self.open = "/*"
                    return self
                i = end + 2
            elif ch in "'\"":
                i = self._quoted(i, ch)
                last = "x"
            elif ch == "`" or (ch == "}" and self.stack and self.stack[-1] == "`"):
                if ch == "}":
                    self.stack.pop()  # the end of a ${...} in a template
                i = self._template(i + 1)
                last = "x"
            elif ch in _OPENERS:
                self.stack.append(ch)
                i += 1
                last = ch
            elif ch in ")]}":
                if not self.stack or _OPENERS.get(self.stack[-1]) != ch:
                    self.invalid = f"unmatched {ch!r}"
                    return self
                self.stack.pop()
                i += 1
                last = ch
            elif ch == "/" and (last in _REGEX_AFTER or last in _REGEX_WORDS):
                i = self._regex(i)
                last = "x"
            elif ch.isalnum() or ch in "_$":
                m = re.compile(r"[\w$]+").match(code, i)
                assert m is not None
                last = m.group(0)
                i = m.end()
            else:
                last = ch
                i += 1
        return self

    def _quoted(self, i: int, quote: str) -> int:
        code, j = self.code, i + 1
        while j < len(code):
            c = code[j]
            if c == "\\":
                j += 2
                continue
            if c == quote:
                return j + 1
            if c == "\n":
                self.invalid = "a newline inside a quoted string (use a template literal)"
                return len(code)
            j += 1
        self.open = quote
        return len(code)

    def _template(self, j: int) -> int:
        """Read a template's text from ``j`` to its end or to a ``${`` (pushed)."""
        code = self.code
        while j < len(code):
            c = code[j]
            if c == "\\":
                j += 2
                continue
            if c == "`":
                return j + 1
            if code.startswith("${", j):
                self.stack.append("`")
                return j + 2
            j += 1
        self.open = "`"
        return len(code)

    def _regex(self, i: int) -> int:
        code, j, in_class = self.code, i + 1, False
        while j < len(code):
            c = code[j]
            if c == "\\":
                j += 2
                continue
            if c == "\n":
                return i + 1  # no regex after all: a lone '/'
            if c == "[":
                in_class = True
            elif c == "]":
                in_class = False
            elif c == "/" and not in_class:
                return j + 1
            j += 1
        return i + 1


def is_complete(code: str) -> dict[str, Any]:
    """The ``is_complete_reply`` content: ``incomplete`` while a bracket, string, template
    literal or comment is open (with the indent of the next line), ``invalid`` for a
    closing bracket that matches nothing or a newline in a quoted string, else
    ``complete`` (whether the cell is valid TypeScript is the run's to say)."""
    scan = _Scan(code).run()
    if scan.invalid:
        return {"status": "invalid"}
    if scan.open or scan.stack:
        lines = code.split("\n")
        last = lines[-1] if lines else ""
        indent = last[: len(last) - len(last.lstrip())]
        if not scan.open and last.rstrip()[-1:] in ("(", "[", "{"):
            indent += "  "
        return {"status": "incomplete", "indent": indent}
    return {"status": "complete"}
