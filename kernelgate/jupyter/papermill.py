"""papermill's ``-p`` parameters for the TypeScript and JavaScript kernels.

papermill writes parameters into the cell it injects with a translator it looks up by the
kernel's name, then by its language (``papermill/translators.py``), and it has none for
TypeScript or JavaScript. The one plugin hook papermill loads by itself is its
``papermill.engine`` entry points, read when ``papermill.engines`` is imported (its CLI
and ``execute_notebook`` both import it). kernelgate declares one (pyproject.toml) naming
this module, so installing kernelgate is all a user does: loading the module registers
:class:`ScriptTranslator` for the kernels' default names (``kernelgate-typescript``,
``kernelgate-javascript``) and for the languages ``typescript`` and ``javascript``, each
only where papermill has no translator yet. What papermill registers as the engine
``kernelgate`` is this module, whose three engine functions are papermill's default
engine's (``NBClientEngine``): the default stays the default, and ``--engine kernelgate``
changes nothing. The module itself is the entry point's object, not a class in it: when
this module is imported first, papermill loads it while it is still being imported, and a
module has no attribute to miss then.

The injected cell **assigns**; it declares nothing::

    // Parameters
    limit = 2;
    query = "it's \\"quoted\\"";

The kernel puts every setup cell's source before each later cell, all in one function
body (``kernelgate/jupyter/workbench_ts.py``), so a second ``let limit`` or ``const
limit`` there would be a SyntaxError in every later cell. The notebook's own ``parameters``
cell declares each parameter with ``let`` (after ``//| setup``), and the injected cell,
which papermill puts after it, assigns it: its values win, as a later assignment does in
a Python kernel. A ``const`` cannot be assigned (a TypeError in every later cell), so
:meth:`ScriptTranslator.inspect` warns of one; a name the notebook does not declare
becomes a global of the program (which runs in sloppy mode, as ``vm.Script`` does).

Values become literals that can only ever be values (never code): ``null``, ``true``,
numbers (``NaN``, ``Infinity``, ``-Infinity`` for the floats JSON lacks), strings as JSON
writes them with every non-ASCII and control character escaped (so ``${``, backticks,
quotes, U+2028 and bidi controls are inert), arrays and objects (a ``__proto__`` key as
the computed ``["__proto__"]``, an own property, not the object's prototype); any other
value is its ``str()`` as a string, as papermill's own translators do. A name must be a
plain ASCII identifier that JavaScript can assign, or the translation is refused.

>>> print(ScriptTranslator.codify({"limit": 2, "q": 'a "b" ${c}', "f": float("nan")}))
// Parameters
limit = 2;
q = "a \\"b\\" ${c}";
f = NaN;
<BLANKLINE>
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

# papermill ships no type information.
from papermill.engines import NBClientEngine  # type: ignore[import-untyped]
from papermill.exceptions import PapermillException  # type: ignore[import-untyped]
from papermill.log import logger  # type: ignore[import-untyped]
from papermill.models import Parameter  # type: ignore[import-untyped]
from papermill.translators import papermill_translators  # type: ignore[import-untyped]

__all__ = ["ScriptTranslator", "execute_notebook", "nb_kernel_name", "nb_language", "register"]

#: Where the translator is registered: the kernels' default names, then their languages.
NAMES = ("kernelgate-typescript", "kernelgate-javascript", "typescript", "javascript")

_IDENTIFIER = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*\Z")
#: Names an assignment cannot take: JavaScript's reserved words (strict mode's too), and
#: globals that are not writable or not what they seem (an assignment to ``undefined`` is
#: silently ignored, one to ``__proto__`` changes the global object's prototype).
_NOT_ASSIGNABLE = frozenset(
    "__proto__ arguments await break case catch class const continue debugger default delete "
    "do else enum eval export extends false finally for function if implements import in "
    "Infinity instanceof interface let NaN new null package private protected public return "
    "static super switch this throw true try typeof undefined var void while with yield".split()
)
#: A declaration in a ``parameters`` cell: ``let name: type = value; // help``.
_DECLARATION = re.compile(
    r"\s*(?:export\s+)?(?P<kind>let|var|const)\s+(?P<name>[A-Za-z_$][\w$]*)\s*"
    r"(?::\s*(?P<type>[^=]+?)\s*)?=\s*(?P<rest>.*)"
)
_NUMBER = re.compile(r"[-+]?(?:\d[\d_]*\.?\d*(?:[eE][-+]?\d+)?|\.\d+|NaN|Infinity)\Z")


class ScriptTranslator:
    """papermill's translator interface (``codify`` and ``inspect``, the two papermill
    calls) for TypeScript and JavaScript cells of a kernelgate kernel."""

    @classmethod
    def translate(cls, value: object) -> str:
        """A JavaScript literal for ``value`` (see the module's doc)."""
        if value is None:
            return "null"
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, int):
            return int.__repr__(value)  # not an IntEnum's or numpy's repr
        if isinstance(value, float):
            if math.isnan(value):
                return "NaN"
            if math.isinf(value):
                return "Infinity" if value > 0 else "-Infinity"
            return float.__repr__(value)
        if isinstance(value, str):
            return json.dumps(value, ensure_ascii=True)
        if isinstance(value, list):
            return "[" + ", ".join(cls.translate(item) for item in value) + "]"
        if isinstance(value, dict):
            return "{" + ", ".join(cls._entry(k, v) for k, v in value.items()) + "}"
        return json.dumps(str(value), ensure_ascii=True)

    @classmethod
    def _entry(cls, key: object, value: object) -> str:
        if not isinstance(key, str):
            # JavaScript makes the key a string as it does for any value: 1 -> "1".
            return f"[{cls.translate(key)}]: {cls.translate(value)}"
        text = json.dumps(key, ensure_ascii=True)
        if key == "__proto__":
            text = f"[{text}]"  # an own property, never the object's prototype
        return f"{text}: {cls.translate(value)}"

    @classmethod
    def comment(cls, text: str) -> str:
        """``text`` as line comments (a newline in it cannot end the comment)."""
        return "\n".join(f"// {line}".rstrip() for line in text.splitlines()) or "//"

    @classmethod
    def assign(cls, name: str, literal: str) -> str:
        if not isinstance(name, str) or not _IDENTIFIER.match(name):
            raise PapermillException(
                f"parameter name {name!r} is not a JavaScript identifier (letters, digits, "
                "_ and $, not starting with a digit): a TypeScript kernel cannot take it"
            )
        if name in _NOT_ASSIGNABLE:
            raise PapermillException(
                f"parameter name {name!r} is a JavaScript reserved word or a global that "
                "cannot be assigned: rename the parameter"
            )
        return f"{name} = {literal};"

    @classmethod
    def codify(cls, parameters: Mapping[str, Any], comment: str = "Parameters") -> str:
        """The injected cell: ``// Parameters`` (which makes it a setup cell of the kernel),
        then one assignment per parameter."""
        lines = [cls.comment(comment)]
        if lines[0].replace(" ", "").lower() != "//parameters":
            lines.insert(0, "//| setup")  # still a setup cell under another comment
        lines += [cls.assign(name, cls.translate(value)) for name, value in parameters.items()]
        return "\n".join(lines) + "\n"

    @classmethod
    def inspect(cls, parameters_cell: Mapping[str, Any]) -> list[Any]:
        """The parameters a ``parameters`` cell declares, one ``let``/``var``/``const`` per
        line (``papermill --help-notebook``; papermill also calls it before injecting, to
        warn of unknown names). A ``const`` is reported and warned of: the injected cell
        cannot assign it."""
        source = parameters_cell.get("source", "")
        if not isinstance(source, str):
            source = "".join(source) if isinstance(source, list) else ""
        found: list[Any] = []
        for line in source.splitlines():
            m = _DECLARATION.fullmatch(line)
            if not m:
                continue
            value, help_text = _split_comment(m.group("rest"))
            value = value.rstrip().removesuffix(";").rstrip()
            kind, name = m.group("kind"), m.group("name")
            if kind == "const":
                logger.warning(
                    f"parameter {name!r} is declared with const: papermill's injected cell "
                    "cannot assign it (a TypeError in every later cell); declare it with let"
                )
            found.append(Parameter(name, m.group("type") or _type_of(value), value, help_text))
        return found


def _split_comment(text: str) -> tuple[str, str]:
    """``text`` cut at its first ``//`` outside a string: (code, the comment's text)."""
    quote = ""
    i = 0
    while i < len(text):
        c = text[i]
        if quote:
            if c == "\\":
                i += 1
            elif c == quote:
                quote = ""
        elif c in "'\"`":
            quote = c
        elif text.startswith("//", i):
            return text[:i], text[i + 2 :].strip()
        i += 1
    return text, ""


def _type_of(literal: str) -> str:
    """The type a literal's value has, or "None" (papermill's word for unknown)."""
    if _NUMBER.match(literal):
        return "number"
    if literal in ("true", "false"):
        return "boolean"
    if literal == "null":
        return "null"
    if len(literal) >= 2 and literal[0] == literal[-1] and literal[0] in "'\"`":
        return "string"
    return "None"


def register() -> None:
    """Register :class:`ScriptTranslator` under :data:`NAMES`, each one papermill has no
    translator for (another plugin's, or a later papermill's own, is kept)."""
    for name in NAMES:
        try:
            papermill_translators.find_translator(name, name)
        except PapermillException:
            papermill_translators.register(name, ScriptTranslator)


# The engine functions papermill calls on the engine "kernelgate": its default engine's.
execute_notebook = NBClientEngine.execute_notebook
nb_kernel_name = NBClientEngine.nb_kernel_name
nb_language = NBClientEngine.nb_language

register()
