"""A binding's type hints, enforced: its arguments checked and converted before it runs,
its result converted back to JSON and checked after.

Built once per binding when the registry is built (:func:`binding_types`), from the
annotations evaluated (``from __future__ import annotations`` included); an annotation
JSON cannot carry is refused there, naming the binding and the parameter. Per call, simple
hints (``int``, ``str``...) given by position cost one set lookup of the argument types
(:attr:`BindingTypes.fast_types`), an unannotated or ``Any`` parameter nothing; other hints
a method call per value (docs/benchmarks.md).

Two kinds of callable are not held to their annotations: one whose arguments a JSON
Schema describes (:func:`kernelgate.input_schema`, an MCP tool: the schema is the
authority, checked by :mod:`kernelgate.model.schema`), and text annotations of a callable
that sets ``__signature__`` itself (a proxy whose annotations are only shown: an MCP tool,
a Jupyter client's binding, a replayed recording; the binding behind it checks).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kernelgate.model.signatures import Source, signature_of

from .conversion import Hint, Mismatch, UnsupportedHint, compile_hint

__all__ = ["BindingTypes", "Mismatch", "binding_types", "display_only", "evaluated_signature"]

_EMPTY = inspect.Parameter.empty
_P = inspect.Parameter


@dataclass(frozen=True)
class BindingTypes:
    """The hints of one binding's parameters and return (None: nothing to check)."""

    #: Each positional parameter's name and hint, in order (None: not checked).
    positional: tuple[tuple[str, Hint | None], ...]
    #: The hint of each parameter a keyword can name.
    by_name: dict[str, Hint | None]
    #: ``*args``' and ``**kwargs``' item hints.
    var_positional: Hint | None
    var_keyword: Hint | None
    returns: Hint | None
    #: The name of ``*args`` (for errors: ``args[2]``).
    var_name: str = "args"
    #: The fast path, when every hint is a simple one (see ``Hint.exact``): the types that
    #: pass unchanged, per positional parameter and per name (None: not checked).
    fast_positional: tuple[tuple[type, ...] | None, ...] | None = None
    fast_by_name: dict[str, tuple[type, ...] | None] | None = None
    #: The return hint's ``exact`` types.
    returns_exact: tuple[type, ...] = ()
    #: Every tuple of argument types that passes unchanged when all arguments come by
    #: position (``tuple(map(type, args)) in fast_types``: one test in C for the usual call).
    fast_types: frozenset[tuple[type, ...]] = frozenset()

    def __post_init__(self) -> None:
        hints = [h for _, h in self.positional] + list(self.by_name.values())
        if (
            self.var_positional is None
            and self.var_keyword is None
            and all(h is None or h.exact for h in hints)
        ):
            fast = tuple(None if h is None else h.exact for _, h in self.positional)
            by_name = {n: None if h is None else h.exact for n, h in self.by_name.items()}
            object.__setattr__(self, "fast_positional", fast)
            object.__setattr__(self, "fast_by_name", by_name)
            object.__setattr__(self, "fast_types", _type_tuples(fast))
        if self.returns is not None:
            object.__setattr__(self, "returns_exact", self.returns.exact)

    @property
    def checks_arguments(self) -> bool:
        return (
            any(h is not None for _, h in self.positional)
            or any(h is not None for h in self.by_name.values())
            or self.var_positional is not None
            or self.var_keyword is not None
        )

    def load(self, args: list[Any], kwargs: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
        """The arguments converted for the binding (new containers where any changed; the
        call's own, which the record keeps as JSON, are never edited). Raises
        :class:`Mismatch` naming the argument. The call fits the signature already."""
        fast = self.fast_positional
        if fast is not None:
            # Simple hints (int, str, float, bool, None): a type test each, no call.
            for value, exact in zip(args, fast):  # noqa: B905 - args fit the signature
                if exact is not None and type(value) not in exact:
                    break
            else:
                if not kwargs:
                    return args, kwargs
                fast_by_name = self.fast_by_name
                assert fast_by_name is not None
                for name, value in kwargs.items():
                    exact = fast_by_name.get(name)
                    if exact is not None and type(value) not in exact:
                        break
                else:
                    return args, kwargs
        positional = self.positional
        out_args = args
        for i, value in enumerate(args):
            if i < len(positional):
                name, hint = positional[i]
            else:
                name, hint = f"{self.var_name}[{i - len(positional)}]", self.var_positional
            if hint is not None:
                loaded = hint.load(value, name)
                if loaded is not value:
                    if out_args is args:
                        out_args = list(args)
                    out_args[i] = loaded
        out_kwargs = kwargs
        if kwargs:
            hints = self.by_name
            for name, value in kwargs.items():
                hint = hints[name] if name in hints else self.var_keyword
                if hint is not None:
                    loaded = hint.load(value, name)
                    if loaded is not value:
                        if out_kwargs is kwargs:
                            out_kwargs = dict(kwargs)
                        out_kwargs[name] = loaded
        return out_args, out_kwargs

    def dump(self, value: Any) -> Any:
        """The binding's result as JSON, by its return hint; :class:`Mismatch` if it does
        not fit."""
        if self.returns is None or type(value) in self.returns_exact:
            return value
        return self.returns.dump(value, "")


def _type_tuples(fast: tuple[tuple[type, ...] | None, ...]) -> frozenset[tuple[type, ...]]:
    """The tuples of types ``fast`` lets through, for each number of arguments (fewer:
    defaults); none when a parameter takes any type or there would be too many."""
    if any(exact is None for exact in fast):
        return frozenset()
    out: set[tuple[type, ...]] = {()}
    level: set[tuple[type, ...]] = {()}
    for exact in fast:
        assert exact is not None
        level = {(*t, kind) for t in level for kind in exact}
        out |= level
        if len(out) > 256:
            return frozenset()
    return frozenset(out)


def display_only(signature: inspect.Signature) -> inspect.Signature:
    """``signature`` with its annotations as text (:class:`Source`): shown the same, not
    enforced. For a wrapper around a binding that checks and converts for itself."""

    def text(annotation: Any) -> Any:
        if annotation is _EMPTY or isinstance(annotation, (str, Source)):
            return annotation
        return Source(inspect.formatannotation(annotation))

    params = [p.replace(annotation=text(p.annotation)) for p in signature.parameters.values()]
    return signature.replace(parameters=params, return_annotation=text(signature.return_annotation))


def _is_proxy(fn: Callable[..., Any]) -> bool:
    return "__signature__" in getattr(fn, "__dict__", {})


def evaluated_signature(fn: Callable[..., Any]) -> inspect.Signature | None:
    """``fn``'s signature with string annotations evaluated; None if it has none.
    Raises what evaluating an annotation raised (``NameError`` for a name not defined)."""
    signature = signature_of(fn)
    if signature is None or _is_proxy(fn):
        return signature  # a proxy's own (its text annotations stay text)
    if not any(
        isinstance(p.annotation, str) for p in signature.parameters.values()
    ) and not isinstance(signature.return_annotation, str):
        return signature
    return inspect.signature(fn, eval_str=True)


def binding_types(
    label: str, fn: Callable[..., Any], has_schema: bool, has_output_schema: bool
) -> BindingTypes | None:
    """The :class:`BindingTypes` of the binding ``label``; None when nothing is checked.
    Raises ``TypeError`` naming the binding and parameter for an annotation JSON cannot
    carry."""
    try:
        signature = evaluated_signature(fn)
    except Exception as exc:
        raise TypeError(
            f"binding {label}: its annotations do not resolve ({type(exc).__name__}: {exc}); "
            "define what they name at module level before the Gateway is built, or use Any "
            "to accept anything JSON"
        ) from None
    if signature is None:
        return None
    proxy = _is_proxy(fn)

    def hint(annotation: Any, where: str) -> Hint | None:
        if (
            annotation is _EMPTY
            or isinstance(annotation, Source)
            or (proxy and isinstance(annotation, str))
        ):
            return None  # unannotated, or text a proxy shows
        try:
            compiled = compile_hint(annotation)
        except UnsupportedHint as exc:
            raise TypeError(f"binding {label}, {where}: {exc}") from None
        return None if compiled.passthrough else compiled

    positional: list[tuple[str, Hint | None]] = []
    by_name: dict[str, Hint | None] = {}
    var_positional = var_keyword = None
    var_name = "args"
    for p in signature.parameters.values():
        # A schema, when the binding has one, is what its arguments are checked against.
        h = None if has_schema else hint(p.annotation, f"parameter {p.name}")
        if p.kind is _P.VAR_POSITIONAL:
            var_positional, var_name = h, p.name
        elif p.kind is _P.VAR_KEYWORD:
            var_keyword = h
        else:
            if p.kind in (_P.POSITIONAL_ONLY, _P.POSITIONAL_OR_KEYWORD):
                positional.append((p.name, h))
            if p.kind is not _P.POSITIONAL_ONLY:
                by_name[p.name] = h
    returns = None if has_output_schema else hint(signature.return_annotation, "its return")
    types = BindingTypes(tuple(positional), by_name, var_positional, var_keyword, returns, var_name)
    if not types.checks_arguments and types.returns is None:
        return None
    return types
