"""Binding signatures as they travel: callable -> spec, spec -> ``inspect.Signature``, and
signature text -> ``inspect.Signature``. One module for all three, so the host, the child,
the kernel front and replay agree on what a binding accepts and how it is shown.

A binding's *spec* is what the host announces for it (to the child, or a client to a
kernel)::

    {"params": [[name, kind, has_default], ...],        # decides which calls fit
     "signature": "(query: str, limit: int = 3)",       # what is shown
     "doc": "Search the index."}

``kind`` is an ``inspect.Parameter`` kind by name (:data:`PARAMETER_KINDS`). Default values
never cross: a spec says only *that* a parameter has one.

>>> def search(query: str, limit: int = 3) -> list: ...
>>> spec = spec_from_signature(signature_of(search), "Search.")
>>> spec["params"]
[['query', 'POSITIONAL_OR_KEYWORD', False], ['limit', 'POSITIONAL_OR_KEYWORD', True]]
>>> spec["signature"]
'(query: str, limit: int = 3) -> list'
>>> str(signature_from_spec(spec)), str(signature_from_spec(spec, text=False))
('(query: str, limit: int = 3) -> list', '(query, limit=...)')

Stdlib only and free of I/O: the child imports it (``inspect`` imports ``ast`` already, so
this costs the child nothing more than the module itself).
"""

from __future__ import annotations

import ast
import inspect
from collections.abc import Callable, Mapping
from typing import Any

__all__ = [
    "ANY_PARAMS",
    "MAX_SIGNATURE_TEXT",
    "PARAMETER_KINDS",
    "Source",
    "params_of",
    "signature_from_spec",
    "signature_from_text",
    "signature_of",
    "signature_text",
    "spec_from_signature",
]

#: The ``kind`` names a binding spec uses (``inspect.Parameter`` kinds, by name).
PARAMETER_KINDS: dict[str, inspect._ParameterKind] = {
    "POSITIONAL_ONLY": inspect.Parameter.POSITIONAL_ONLY,
    "POSITIONAL_OR_KEYWORD": inspect.Parameter.POSITIONAL_OR_KEYWORD,
    "VAR_POSITIONAL": inspect.Parameter.VAR_POSITIONAL,
    "KEYWORD_ONLY": inspect.Parameter.KEYWORD_ONLY,
    "VAR_KEYWORD": inspect.Parameter.VAR_KEYWORD,
}

#: The params of a callable without a signature (some builtins): any arguments; the call
#: itself decides.
ANY_PARAMS: tuple[tuple[str, str, bool], ...] = (
    ("args", "VAR_POSITIONAL", False),
    ("kwargs", "VAR_KEYWORD", False),
)

#: Longer signature texts are not parsed (they come from recordings and clients: bounded
#: work for what is only shown). The params still decide what calls fit.
MAX_SIGNATURE_TEXT = 10_000

_EMPTY = inspect.Parameter.empty


class Source:
    """Stands for a default value or annotation by its source text: ``repr`` is the text,
    so ``str(signature)`` shows it as written (``limit: int = 3``, not ``limit: 'int'``).

    >>> Source("int")
    int
    """

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text


#: The default of a parameter whose value stayed on the host.
_DEFAULT = Source("...")


# -- callable -> spec ----------------------------------------------------------------------------


def signature_of(fn: Callable[..., Any]) -> inspect.Signature | None:
    """``inspect.signature(fn)``, or ``None`` for a callable that has none (some builtins:
    they accept any arguments, and the call decides)."""
    try:
        return inspect.signature(fn)
    except (ValueError, TypeError):
        return None


def _unquoted(sig: inspect.Signature) -> inspect.Signature:
    """String annotations (``from __future__ import annotations``) shown unquoted."""

    def fix(annotation: Any) -> Any:
        return Source(annotation) if isinstance(annotation, str) else annotation

    params = [p.replace(annotation=fix(p.annotation)) for p in sig.parameters.values()]
    return sig.replace(parameters=params, return_annotation=fix(sig.return_annotation))


def signature_text(sig: inspect.Signature | None) -> str:
    """How a binding's signature is shown: ``(query: str, limit: int = 3)``.

    >>> signature_text(None)
    '(*args, **kwargs)'
    """
    if sig is None:
        return "(*args, **kwargs)"
    return str(_unquoted(sig))


def params_of(sig: inspect.Signature | None) -> list[tuple[str, str, bool]]:
    """A signature's ``(name, kind, has_default)`` triples, as a spec lists them."""
    if sig is None:
        return list(ANY_PARAMS)
    return [(p.name, p.kind.name, p.default is not _EMPTY) for p in sig.parameters.values()]


def spec_from_signature(sig: inspect.Signature | None, doc: str = "") -> dict[str, Any]:
    """The spec of a binding with signature ``sig`` (``None``: any arguments) and ``doc``."""
    return {
        "params": [list(p) for p in params_of(sig)],
        "signature": signature_text(sig),
        "doc": doc,
    }


# -- spec -> Signature ---------------------------------------------------------------------------


def signature_from_spec(spec: Mapping[str, Any], *, text: bool = True) -> inspect.Signature:
    """The signature a spec announces: its ``params``, shown as its ``signature`` text.

    ``params`` decide what calls are accepted; with ``text`` (the default), the
    ``signature`` text, when it parses to the same parameters, supplies what ``str()``
    shows (annotations and default values as written). A text that does not parse, or
    lies about the parameters, is ignored: defaults show as ``...``. ``ValueError`` for a
    spec whose params are not a valid signature.

    >>> spec = {"params": [["a", "POSITIONAL_OR_KEYWORD", True]], "signature": "(a: int = 1)"}
    >>> str(signature_from_spec(spec)), str(signature_from_spec({**spec, "signature": "(b)"}))
    ('(a: int = 1)', '(a=...)')
    >>> signature_from_spec({"params": [["a", "SOMETIMES", False]]})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: a binding parameter must be [name, kind, has_default] with kind one of ...
    """
    raw = spec.get("params")
    if not isinstance(raw, list):
        raise ValueError("a binding spec needs 'params': [[name, kind, has_default], ...]")
    params: list[inspect.Parameter] = []
    wanted: list[tuple[str, str, bool]] = []
    for item in raw:
        if (
            not isinstance(item, (list, tuple))
            or len(item) != 3
            or not isinstance(item[0], str)
            or item[1] not in PARAMETER_KINDS
        ):
            raise ValueError(
                "a binding parameter must be [name, kind, has_default] with kind one of "
                f"{', '.join(PARAMETER_KINDS)}; got {item!r}"[:500]
            )
        name, kind, has_default = item[0], item[1], bool(item[2])
        wanted.append((name, kind, has_default))
        try:
            params.append(
                inspect.Parameter(
                    name, PARAMETER_KINDS[kind], default=_DEFAULT if has_default else _EMPTY
                )
            )
        except ValueError as exc:  # not an identifier, a keyword...
            raise ValueError(f"binding parameter {name!r}: {exc}"[:500]) from None
    try:
        fallback = inspect.Signature(params)
    except ValueError as exc:
        raise ValueError(f"the announced parameters are not a valid signature: {exc}") from None
    shown = spec.get("signature")
    if text and isinstance(shown, str):
        parsed = signature_from_text(shown)
        if parsed is not None and params_of(parsed) == wanted:
            return parsed
    return fallback


# -- text -> Signature ---------------------------------------------------------------------------


def _parse(source: str) -> ast.FunctionDef | None:
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return None
    if len(tree.body) != 1 or not isinstance(tree.body[0], ast.FunctionDef):
        return None
    fn = tree.body[0]
    if fn.decorator_list or len(fn.body) != 1 or not isinstance(fn.body[0], ast.Pass):
        return None  # the text closed the parameter list and went on
    return fn


def _blank_reprs(text: str) -> str:
    """``<object object at 0x..>``-style defaults do not parse: make them ``...``."""
    out, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "<" and (i == 0 or text[i - 1] in "= "):
            if depth == 0:
                out.append(text[start:i])
            depth += 1
        elif ch == ">" and depth:
            depth -= 1
            if depth == 0:
                out.append("...")
                start = i + 1
    if depth:
        return text  # unbalanced: leave it to fail to parse
    out.append(text[start:])
    return "".join(out)


def signature_from_text(text: str) -> inspect.Signature | None:
    """Rebuild a signature from how it is shown, e.g. ``(query: str, limit: int = 3)``.

    Annotations and defaults are never evaluated: each stands as its source text
    (:class:`Source`), so ``str()`` of the result is the text. Defaults shown as
    ``<object object at 0x..>`` become ``...``. ``None`` when the text does not parse, is
    over :data:`MAX_SIGNATURE_TEXT` characters, or is not one parameter list.

    >>> str(signature_from_text("(query: 'str', limit: 'int' = 3) -> 'list'"))
    "(query: 'str', limit: 'int' = 3) -> 'list'"
    >>> str(signature_from_text("(a, /, *rest, key=<object object at 0x1>, **kw)"))
    '(a, /, *rest, key=..., **kw)'
    >>> signature_from_text("(a, b") is None, signature_from_text("(a, a)") is None
    (True, True)
    """
    if not isinstance(text, str) or not text.startswith("(") or len(text) > MAX_SIGNATURE_TEXT:
        return None
    source = f"def _f{text}: pass"
    fn = _parse(source)
    if fn is None:
        source = f"def _f{_blank_reprs(text)}: pass"
        fn = _parse(source)
        if fn is None:
            return None
    try:
        return _signature(fn, source)
    except (ValueError, TypeError, MemoryError, RecursionError):
        return None  # duplicate names, a default before a required parameter...


def _signature(fn: ast.FunctionDef, source: str) -> inspect.Signature:
    def shown(node: ast.expr | None) -> Any:
        if node is None:
            return _EMPTY
        return Source(ast.get_source_segment(source, node) or "...")

    P = inspect.Parameter
    a = fn.args
    positional = [*a.posonlyargs, *a.args]
    defaults: list[ast.expr | None] = [None] * (len(positional) - len(a.defaults))
    defaults += a.defaults
    params: list[inspect.Parameter] = []
    for i, (arg, default) in enumerate(zip(positional, defaults, strict=True)):
        kind = P.POSITIONAL_ONLY if i < len(a.posonlyargs) else P.POSITIONAL_OR_KEYWORD
        params.append(P(arg.arg, kind, default=shown(default), annotation=shown(arg.annotation)))
    if a.vararg is not None:
        params.append(P(a.vararg.arg, P.VAR_POSITIONAL, annotation=shown(a.vararg.annotation)))
    for arg, kw_default in zip(a.kwonlyargs, a.kw_defaults, strict=True):
        params.append(
            P(arg.arg, P.KEYWORD_ONLY, default=shown(kw_default), annotation=shown(arg.annotation))
        )
    if a.kwarg is not None:
        params.append(P(a.kwarg.arg, P.VAR_KEYWORD, annotation=shown(a.kwarg.annotation)))
    return inspect.Signature(params, return_annotation=shown(fn.returns))
