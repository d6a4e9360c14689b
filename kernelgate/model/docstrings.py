"""Docstrings as a model needs them: the text, and each parameter's description.

A binding's docstring is the only place most Python functions say what a parameter means,
in one of three conventions: Google (``Args:`` then ``name (type): text``), NumPy
(``Parameters`` underlined with dashes, then ``name : type`` and indented text) and reST
(``:param name: text``). :func:`parse_docstring` splits any of them into the description
(everything else, sections such as ``Returns:`` and ``Raises:`` kept as written) and the
parameters' descriptions, so the stub can put each description beside its parameter.
Stdlib only and free of I/O: the child imports it when a program asks for ``help()``.

>>> doc = parse_docstring('''Search issues.
...
... Args:
...     query (str): Words to look for.
...     limit: How many to return,
...         at most.
...
... Returns:
...     The issues, best first.
... ''')
>>> doc.params
{'query': 'Words to look for.', 'limit': 'How many to return, at most.'}
>>> print(doc.text)
Search issues.
<BLANKLINE>
Returns:
    The issues, best first.
"""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass, field

__all__ = ["Docstring", "parse_docstring", "shorten"]

_GOOGLE_PARAMS = re.compile(
    r"^(Args|Arguments|Parameters|Params|Keyword Args|Keyword Arguments|Other Parameters)\s*:\s*$"
)
_GOOGLE_ITEM = re.compile(r"^\*{0,2}([A-Za-z_][\w-]*)\s*(?:\([^)]*\))?\s*:\s*(.*)$")
_NUMPY_PARAMS = {"parameters", "other parameters", "keyword arguments", "params"}
_NUMPY_ITEM = re.compile(r"^\*{0,2}([A-Za-z_][\w-]*)\s*(?::.*)?$")
_REST_PARAM = re.compile(
    r"^:(?:param|parameter|arg|argument|key|keyword)\s+(?:[^:]*\s)?([\w-]+)\s*:\s*(.*)$"
)
_REST_OTHER = re.compile(r"^:(?:type|vartype)\s+[\w-]+\s*:")
_UNDERLINE = re.compile(r"^\s*-{3,}\s*$")


@dataclass(frozen=True)
class Docstring:
    """A docstring split: ``text`` (without the parameter section) and ``params``
    (name -> description, in the docstring's order)."""

    text: str
    params: dict[str, str] = field(default_factory=dict)


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _joined(lines: list[str]) -> str:
    return " ".join(part.strip() for part in lines if part.strip())


def _google(lines: list[str], start: int, params: dict[str, str]) -> int:
    """Read a Google section's items from ``start`` (the line after the header); the index
    of the first line after the section."""
    i = start
    base: int | None = None
    name: str | None = None
    parts: list[str] = []
    while i < len(lines):
        line = lines[i]
        if not line.strip():
            # A blank line inside the section ends it unless more indented items follow.
            j = i + 1
            while j < len(lines) and not lines[j].strip():
                j += 1
            if j >= len(lines) or base is None or _indent(lines[j]) < base:
                break
            i += 1
            continue
        indent = _indent(line)
        if base is None:
            if indent == 0:
                break
            base = indent
        if indent < base:
            break
        match = _GOOGLE_ITEM.match(line.strip()) if indent == base else None
        if match:
            if name:
                params[name] = _joined(parts)
            name, parts = match.group(1), [match.group(2)]
        elif name:
            parts.append(line)
        i += 1
    if name:
        params[name] = _joined(parts)
    return i


def _numpy(lines: list[str], start: int, params: dict[str, str]) -> int:
    """Read a NumPy section's items from ``start`` (the line after the dashes)."""
    i = start
    name: str | None = None
    parts: list[str] = []
    base: int | None = None
    while i < len(lines):
        line = lines[i]
        if line.strip() and i + 1 < len(lines) and _UNDERLINE.match(lines[i + 1]):
            break  # the next section's header
        if line.strip():
            indent = _indent(line)
            if base is None:
                base = indent
            if indent <= base:
                match = _NUMPY_ITEM.match(line.strip())
                if not match:
                    break
                if name:
                    params[name] = _joined(parts)
                name, parts = match.group(1), []
            elif name:
                parts.append(line)
        i += 1
    if name:
        params[name] = _joined(parts)
    return i


def parse_docstring(doc: str) -> Docstring:
    """``doc`` (dedented here as ``inspect.getdoc`` would) split into its text and its
    parameters' descriptions. A docstring in none of the conventions is all text."""
    lines = inspect.cleandoc(doc or "").splitlines()
    params: dict[str, str] = {}
    kept: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        if _GOOGLE_PARAMS.match(stripped) and _indent(line) == 0:
            i = _google(lines, i + 1, params)
            continue
        if (
            stripped.lower() in _NUMPY_PARAMS
            and i + 1 < len(lines)
            and _UNDERLINE.match(lines[i + 1])
        ):
            i = _numpy(lines, i + 2, params)
            continue
        rest = _REST_PARAM.match(stripped)
        if rest:
            parts = [rest.group(2)]
            i += 1
            while i < len(lines) and lines[i].strip() and not lines[i].strip().startswith(":"):
                parts.append(lines[i])
                i += 1
            params[rest.group(1)] = _joined(parts)
            continue
        if _REST_OTHER.match(stripped):
            i += 1
            continue
        kept.append(line.rstrip())
        i += 1
    text = "\n".join(kept).strip("\n")
    text = re.sub(r"\n{3,}", "\n\n", text)
    return Docstring(text=text, params=params)


def shorten(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters, at a line or word end where one is
    near, with ``...`` saying so.

    >>> shorten("one two three", 9)
    'one...'
    """
    if len(text) <= limit:
        return text
    cut = text[: max(0, limit - 3)]
    for sep in ("\n", " "):
        at = cut.rfind(sep)
        if at >= limit // 3:
            cut = cut[:at]
            break
    return cut.rstrip() + "..."
