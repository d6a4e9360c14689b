"""``complete``, ``inspect`` and ``is_complete`` for cells, without a live namespace.

Every cell runs in a fresh child, so there is no interpreter state to ask: completion and
inspection answer from what every program has -- the binding namespaces, ``ToolError``,
``display``, builtins and keywords -- plus the names the cell itself binds.
"""

from __future__ import annotations

import ast
import builtins
import codeop
import inspect
import keyword
import re
import sys
import warnings
from collections.abc import Mapping
from typing import Any

from kernelgate.gateway.bindings import Binding
from kernelgate.model.describe import render_help, render_stub
from kernelgate.model.signatures import signature_text as _signature_text

__all__ = ["complete", "describe_name", "inspect_code", "is_complete", "plain_doc"]

Namespaces = Mapping[str, Mapping[str, Binding]]

_GLOBAL_DOCS = {
    "ToolError": (
        "ToolError(message, *, tool='', ename='Exception')",
        "A binding failed on the host (or was refused before it ran).\n\n"
        "``exc.tool`` is the binding (e.g. 'tools.search'), ``exc.ename`` the host "
        "exception's class name.",
    ),
    "display": (
        "display(*objs)",
        "Show objects as rich outputs (display_data), as in a notebook: text/plain plus "
        "whatever _repr_html_, _repr_png_, _repr_svg_, _repr_json_, ... they offer.",
    ),
}
_ATTRIBUTE = re.compile(r"([A-Za-z_]\w*)\s*\.\s*(\w*)$")
_SUBSCRIPT = re.compile(r"([A-Za-z_]\w*)\s*\[\s*(['\"])([^'\"\\]*)$")
_IDENTIFIER = re.compile(r"[A-Za-z_]\w*$")
_WORDS = re.compile(r"[A-Za-z_]\w*")
_DOTTED_LEFT = re.compile(r"[A-Za-z_][\w.]*$")
_WORD_RIGHT = re.compile(r"\w*")


def _cursor(code: str, cursor_pos: Any) -> int:
    if isinstance(cursor_pos, int) and not isinstance(cursor_pos, bool) and 0 <= cursor_pos:
        return min(cursor_pos, len(code))
    return len(code)


#: Longest text a completion item's ``type`` shows after ``function`` (JupyterLab sizes
#: its list to it, and clips it beside the documentation panel).
_TYPE_CHARS = 56
_NBSP = "\u00a0"


def _binding_type(binding: Binding) -> dict[str, Any]:
    """A binding's completion item: ``signature`` as ipykernel sends it (parameters and
    return annotation), and ``type`` of ``function search(query: str, limit: int = 3)``.

    JupyterLab 4 shows no ``signature`` field: its kernel completer keeps only ``type``,
    shown lowercased beside each item (in full as its tooltip; its first letter, ``f``, is
    the icon). That column is sized to its longest unbreakable run, so the spaces are
    no-break spaces (else the text wraps onto the next item), and it is kept short: the
    parameters without the return annotation, cut to :data:`_TYPE_CHARS`. The doc is not
    put there (a sentence per item would make the list as wide as the notebook): the
    completer's documentation panel shows it, from ``inspect`` (the binding's stub, return
    annotation and whole doc)."""
    sig = binding.signature
    params = _signature_text(sig.replace(return_annotation=inspect.Signature.empty) if sig else sig)
    shown = f"{binding.name}{params}"
    if len(shown) > _TYPE_CHARS:
        shown = shown[: _TYPE_CHARS - 1] + "\u2026"
    return {
        "type": f"function{_NBSP}{shown.replace(' ', _NBSP)}",
        "signature": binding.signature_text,
    }


def complete(code: str, cursor_pos: Any, namespaces: Namespaces) -> dict[str, Any]:
    """The ``complete_reply`` content for ``code`` at ``cursor_pos``."""
    pos = _cursor(code, cursor_pos)
    before = code[:pos]
    matches: list[str] = []
    types: list[dict[str, Any]] = []
    start = pos
    m = _SUBSCRIPT.search(before)
    if m and m.group(1) in namespaces:
        prefix = m.group(3)
        start = pos - len(prefix)
        table = namespaces[m.group(1)]
        for name in sorted(table):
            if name.startswith(prefix):
                matches.append(name)
                types.append({"text": name, **_binding_type(table[name])})
    elif (m := _ATTRIBUTE.search(before)) is not None:
        prefix = m.group(2)
        start = pos - len(prefix)
        table = namespaces.get(m.group(1), {})
        for name in sorted(table):
            if name.startswith(prefix) and name.isidentifier() and not keyword.iskeyword(name):
                matches.append(name)
                types.append({"text": name, **_binding_type(table[name])})
    elif (m := _IDENTIFIER.search(before)) is not None and not (
        m.start() > 0 and (before[m.start() - 1].isdigit() or before[m.start() - 1] == ".")
    ):
        prefix = m.group(0)
        start = m.start()
        candidates: dict[str, str] = {}
        for word in _WORDS.findall(code[: m.start()] + " " + code[pos:]):
            candidates.setdefault(word, "statement")
        for name in dir(builtins):
            if not name.startswith("_"):
                candidates[name] = (
                    "class" if isinstance(getattr(builtins, name), type) else "function"
                )
        for name in keyword.kwlist:
            candidates[name] = "keyword"
        candidates["ToolError"] = "class"
        candidates["display"] = "function"
        for ns in namespaces:
            candidates[ns] = "module"
        for name in sorted(candidates):
            if name.startswith(prefix):
                matches.append(name)
                types.append({"text": name, "type": candidates[name]})
    for t in types:
        t["start"] = start
        t["end"] = pos
    return {
        "status": "ok",
        "matches": matches,
        "cursor_start": start,
        "cursor_end": pos,
        "metadata": {"_jupyter_types_experimental": types},
    }


def _token_at(code: str, pos: int) -> str:
    left = _DOTTED_LEFT.search(code[:pos])
    right = _WORD_RIGHT.match(code, pos)
    token = (left.group(0) if left else "") + (right.group(0) if right else "")
    return token.strip(".")


def _callee_before(code: str, pos: int) -> str:
    """The name whose call the cursor is inside: ``tools.search("x", |`` -> ``tools.search``."""
    depth = 0
    i = pos - 1
    while i >= 0:
        ch = code[i]
        if ch in ")]}":
            depth += 1
        elif ch in "([{":
            if depth == 0:
                if ch != "(":
                    return ""
                left = _DOTTED_LEFT.search(code[:i].rstrip())
                return left.group(0).strip(".") if left else ""
            depth -= 1
        elif (
            ch == "\n"
            and depth == 0
            and i < pos - 1
            and not code[:i].rstrip().endswith(("(", ",", "\\"))
        ):
            return ""
        i -= 1
    return ""


def _describe(token: str, namespaces: Namespaces) -> str | None:
    parts = token.split(".")
    if parts[0] in namespaces:
        # The text describe() gives a model and help() prints in a program: one renderer.
        table = namespaces[parts[0]]
        if len(parts) == 1:
            return render_stub({parts[0]: {name: b.spec() for name, b in table.items()}})
        if len(parts) == 2 and parts[1] in table:
            return render_help(parts[0], parts[1], table[parts[1]].spec())
        return None
    if len(parts) == 1 and parts[0] in _GLOBAL_DOCS:
        sig, doc = _GLOBAL_DOCS[parts[0]]
        return f"{sig}\n\n{doc}"
    if len(parts) == 1 and parts[0] in dir(builtins) and not parts[0].startswith("_"):
        obj = getattr(builtins, parts[0])
        try:
            head = f"{parts[0]}{inspect.signature(obj)}"
        except (TypeError, ValueError):
            head = parts[0]
        doc = inspect.getdoc(obj) or ""
        return f"{head}\n\n{doc}" if doc else head
    return None


_REST_LITERAL = re.compile(r"``([^`\n]+)``")
_REST_ROLE = re.compile(r":(?:py:)?(?:func|class|meth|attr|mod|data|exc|obj):`~?([^`\n]+)`")


def plain_doc(text: str) -> str:
    """A docstring as a reader sees it in a pager: reST literals (````x````) and roles
    (``:func:`x```) shown as plain ``x``.

    >>> plain_doc("Return ``x`` (see :func:`~os.path.join`).")
    'Return x (see os.path.join).'
    """
    return _REST_ROLE.sub(r"\1", _REST_LITERAL.sub(r"\1", text))


def _python_object(token: str) -> str | None:
    """Help for a dotted name of a module the kernel has already imported (``json.dumps``).

    Only what is in ``sys.modules`` already: asking for help never imports anything in
    the kernel, so a cell's ``evil?`` cannot load code into the host."""
    parts = token.split(".")
    obj: Any = sys.modules.get(parts[0])
    if obj is None or parts[0].startswith("_"):
        return None
    for part in parts[1:]:
        if part.startswith("_"):
            return None
        try:
            obj = inspect.getattr_static(obj, part)
        except AttributeError:
            return None
    try:
        head = f"{token}{inspect.signature(obj)}"
    except (TypeError, ValueError):
        head = token
    doc = inspect.getdoc(obj) or ""
    return f"{head}\n\n{doc}" if doc else head


def describe_name(token: str, namespaces: Namespaces) -> str | None:
    """What ``inspect`` and ``obj?`` show for a dotted name: a binding's stub and doc, a
    namespace's bindings, ``ToolError``/``display``, a builtin, or an object of a module
    already imported (``json.dumps``); ``None`` when there is nothing to show."""
    text = _describe(token, namespaces)
    if text is None and token.split(".")[0] not in namespaces:
        text = _python_object(token)
    return None if text is None else plain_doc(text)


def inspect_code(code: str, cursor_pos: Any, namespaces: Namespaces) -> dict[str, Any]:
    """The ``inspect_reply`` content: a binding's signature and docstring, or a namespace's."""
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


_ONLY_AST = ast.PyCF_ONLY_AST
_INCOMPLETE_FLAG: int | None = getattr(codeop, "PyCF_ALLOW_INCOMPLETE_INPUT", None)
_DONT_IMPLY_DEDENT: int = getattr(codeop, "PyCF_DONT_IMPLY_DEDENT", 0x200)


def _parse_error(source: str, flags: int) -> SyntaxError | None:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compile(source, "<cell>", "exec", flags | _ONLY_AST, dont_inherit=True)
    except SyntaxError as exc:
        return exc
    except (ValueError, MemoryError, RecursionError) as exc:
        return SyntaxError(str(exc))
    return None


def _incomplete(source: str) -> bool | None:
    """True if more lines could complete ``source``; False if it is invalid as it stands."""
    if _INCOMPLETE_FLAG is not None:
        err = _parse_error(source, _INCOMPLETE_FLAG | _DONT_IMPLY_DEDENT)
        if err is None:
            return None
        return err.msg == "incomplete input"
    # Python 3.10: codeop's own trick -- an error that moves when lines are added means
    # the input was cut short.
    err1 = _parse_error(source + "\n", _DONT_IMPLY_DEDENT)
    if err1 is None:
        return None
    err2 = _parse_error(source + "\n\n", _DONT_IMPLY_DEDENT)
    if err2 is None:
        return True
    return (err1.msg, err1.lineno) != (err2.msg, err2.lineno) or "EOF" in err1.msg


def is_complete(code: str) -> dict[str, Any]:
    """The ``is_complete_reply`` content: would a console run ``code`` as it stands?"""
    lines = code.splitlines()
    last = lines[-1] if lines else ""
    indent = last[: len(last) - len(last.lstrip())]
    if _parse_error(code, 0) is None:
        # It parses; an open indented block still wants more lines (or a blank one).
        if last.strip() and indent and not code.endswith("\n\n") and len(lines) > 1:
            return {"status": "incomplete", "indent": indent}
        return {"status": "complete"}
    state = _incomplete(code)
    if state is None:
        return {"status": "complete"}
    if state:
        if last.rstrip().endswith(":"):
            indent += "    "
        return {"status": "incomplete", "indent": indent}
    return {"status": "invalid"}
