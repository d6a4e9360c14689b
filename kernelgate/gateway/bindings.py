"""The binding registry: namespaces of host callables, their signatures, and dispatch."""

from __future__ import annotations

import inspect
import keyword
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from kernelgate.model.schema import check_bound, check_value
from kernelgate.model.signatures import signature_of, spec_from_signature
from kernelgate.model.signatures import signature_text as _signature_text
from kernelgate.wire.messages import binding_label

from .paramschema import annotation_schema, evaluated_signature, signature_schema
from .schemas import OUTPUT_ATTR, schema_of
from .typecheck import BindingTypes, Mismatch, binding_types

__all__ = ["Binding", "BindingRegistry", "RESERVED_NAMES", "inline"]

F = TypeVar("F", bound=Callable[..., Any])

#: Globals every program has; a namespace may not shadow them. ``kernelgate`` is the
#: namespace of the gateway's own built-in bindings (``Gateway(tool_search=True)``: the
#: search over bindings a program can call), so no user binding can take its place.
RESERVED_NAMES = frozenset(
    {"ToolError", "display", "__builtins__", "__name__", "__doc__", "kernelgate"}
)


@dataclass(frozen=True)
class Binding:
    """One host callable as programs see it."""

    namespace: str
    name: str
    fn: Callable[..., Any]
    signature: inspect.Signature | None
    _simple: tuple[tuple[str, ...], int] | None = field(
        default=None, init=False, repr=False, compare=False
    )

    #: A coroutine function (called in the event loop); anything else is called in a
    #: worker thread, since it may block.
    is_async: bool = field(default=False, init=False, repr=False, compare=False)
    #: A synchronous binding marked with :func:`inline`: called on the event loop.
    inline: bool = field(default=False, init=False, repr=False, compare=False)
    #: A JSON Schema for the arguments (:func:`kernelgate.input_schema`), checked too.
    schema: dict[str, Any] | None = field(default=None, init=False, repr=False, compare=False)
    #: The checks and conversions its type hints ask for (:mod:`.typecheck`); None: none.
    types: BindingTypes | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "schema", schema_of(self.fn))
        has_output = isinstance(getattr(self.fn, OUTPUT_ATTR, None), dict)
        types = binding_types(self.label, self.fn, self.schema is not None, has_output)
        object.__setattr__(self, "types", types)
        if self.signature is not None:
            object.__setattr__(self, "_simple", _simple_parameters(self.signature))
        fn = self.fn
        is_async = inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
            getattr(fn, "__call__", None)  # noqa: B004 - an object with async __call__
        )
        object.__setattr__(self, "is_async", is_async)
        object.__setattr__(self, "inline", bool(getattr(fn, "__kernelgate_inline__", False)))

    @property
    def label(self) -> str:
        return binding_label(self.namespace, self.name)

    @property
    def signature_text(self) -> str:
        return _signature_text(self.signature)

    @property
    def doc(self) -> str:
        return inspect.getdoc(self.fn) or ""

    def spec(self) -> dict[str, Any]:
        """What the child needs to check calls: parameters (no default values), text, doc
        (see :mod:`kernelgate.model.signatures`), and the binding's JSON Schema if it has one.

        ``described``: :meth:`described`, where the binding takes or returns named types
        (a dataclass, TypedDict, Enum): the child's ``help()`` then shows them as
        ``describe()`` does, not as ``__main__.Point`` (only there: it costs bytes per run).
        """
        spec = spec_from_signature(self.signature, self.doc)
        if self.schema is not None:
            spec["schema"] = self.schema
        described = self.described()
        if _names_types(described["parameters"]) or _names_types(described["returns"]):
            spec["described"] = described
        return spec

    def described(self) -> dict[str, Any]:
        """This binding as ``describe(format="json")`` lists it: its parameters and answer
        as JSON Schemas, named types under ``$defs``."""
        signature = evaluated_signature(self.fn, self.signature)
        if self.schema is not None:
            parameters = self.schema
        else:
            parameters = signature_schema(signature)
        returns = getattr(self.fn, OUTPUT_ATTR, None)
        if not isinstance(returns, dict):
            returns = annotation_schema(
                signature.return_annotation if signature is not None else inspect.Parameter.empty
            )
        return {
            "namespace": self.namespace,
            "name": self.name,
            "description": self.doc,
            "parameters": parameters,
            "returns": returns,
        }

    def check_arguments(self, args: list[Any], kwargs: dict[str, Any]) -> None:
        """Raise ``TypeError`` if ``fn(*args, **kwargs)`` does not fit the signature."""
        if self.signature is not None:
            simple = self._simple
            if simple is not None and self.schema is None and _fits(simple, args, kwargs):
                return  # the usual case, without Signature.bind (6 us -> under 1 us)
            try:
                bound = self.signature.bind(*args, **kwargs)
            except TypeError as exc:
                raise TypeError(
                    f"{self.label}() {exc}; its signature is {self.name}{self.signature_text}"
                ) from None
            error = check_bound(self.schema, bound) if self.schema is not None else None
        else:
            error = check_value(kwargs, self.schema) if self.schema is not None else None
        if error:
            raise TypeError(
                f"{self.label}() {error}; its signature is {self.name}{self.signature_text}"
            )

    def load_arguments(
        self, args: list[Any], kwargs: dict[str, Any]
    ) -> tuple[list[Any], dict[str, Any]]:
        """The arguments as the binding takes them: checked against the signature (as
        :meth:`check_arguments`) and the type hints, and converted (an ISO 8601 string to a
        ``date``, an object to a dataclass...). Raises ``TypeError`` naming the argument,
        where in it, what was expected and what came. ``args`` and ``kwargs`` are not
        edited (the call's record keeps them as JSON)."""
        self.check_arguments(args, kwargs)
        types = self.types
        if types is None:
            return args, kwargs
        if not kwargs and tuple(map(type, args)) in types.fast_types:
            return args, kwargs  # simple hints (int, str...), all by position: one test
        try:
            return types.load(args, kwargs)
        except Mismatch as exc:
            raise TypeError(
                f"{self.label}() {exc.message()}; its signature is {self.name}{self.signature_text}"
            ) from None
        except RecursionError:
            # A recursive hint (a tree of dataclasses) converts by recursion; the wire lets
            # values nest 500 deep, which can be deeper than Python's stack.
            raise TypeError(
                f"{self.label}() the arguments nest too deeply to convert by the binding's "
                f"type hints (a recursive type); flatten them. Its signature is "
                f"{self.name}{self.signature_text}"
            ) from None

    def dump_result(self, value: Any) -> Any:
        """The binding's result as JSON, converted (a dataclass to an object, a ``date`` to
        its ISO 8601 string...) and checked against its return annotation. Raises
        ``TypeError`` saying the binding broke its own annotation."""
        types = self.types
        if types is None or types.returns is None or type(value) in types.returns_exact:
            return value
        try:
            return types.dump(value)
        except RecursionError:
            raise TypeError(
                f"the binding {self.label} returned a value that contains itself or nests too "
                "deeply to convert by its return annotation (its result). This is a fault of "
                "the host's binding, not of the program"
            ) from None
        except Mismatch as exc:
            raise TypeError(
                f"the binding {self.label} returned a value its own return annotation "
                f"(-> {self.signature_text.rpartition(' -> ')[2]}) refuses: "
                f"{exc.message('its result')}. "
                "This is a fault of the host's binding, not of the program"
            ) from None


def inline(fn: F) -> F:
    """Mark a synchronous binding as quick and non-blocking: it is called on the gateway's
    event loop instead of in a worker thread, which saves the thread hop per call
    (docs/benchmarks.md). Only for functions that never block: while one runs, every run on
    the gateway waits.

    >>> @inline
    ... def add(a: int, b: int) -> int:
    ...     return a + b
    >>> BindingRegistry({"tools": {"add": add}}).lookup("tools", "add").inline
    True
    """
    try:
        fn.__kernelgate_inline__ = True  # type: ignore[attr-defined]
    except AttributeError as exc:
        raise TypeError(
            f"inline() cannot mark {fn!r}: it takes no attributes; wrap it in a def"
        ) from exc
    return fn


def _simple_parameters(sig: inspect.Signature) -> tuple[tuple[str, ...], int] | None:
    """(names, how many are required) for a signature of plain positional-or-keyword
    parameters whose defaults all follow the required ones; None for anything else."""
    names: list[str] = []
    required = 0
    for p in sig.parameters.values():
        if p.kind is not inspect.Parameter.POSITIONAL_OR_KEYWORD:
            return None
        if p.default is inspect.Parameter.empty:
            if required != len(names):
                return None
            required += 1
        names.append(p.name)
    return tuple(names), required


def _fits(simple: tuple[tuple[str, ...], int], args: list[Any], kwargs: dict[str, Any]) -> bool:
    names, required = simple
    n = len(args)
    if n > len(names):
        return False
    for key in kwargs:
        try:
            if names.index(key) < n:
                return False  # given twice
        except ValueError:
            return False  # no such parameter
    for i in range(n, required):
        if names[i] not in kwargs:
            return False
    return True


def _check_namespace_name(ns: Any) -> str:
    if not isinstance(ns, str) or not ns.isidentifier() or keyword.iskeyword(ns):
        raise ValueError(
            f"namespace {ns!r} is not a valid Python identifier; programs use it as a global "
            "name (e.g. 'tools', 'db')"
        )
    if ns in RESERVED_NAMES or ns.startswith("__"):
        raise ValueError(
            f"namespace {ns!r} would shadow a name every program has; choose another name"
        )
    return ns


def _check_binding_name(ns: str, name: Any) -> str:
    if not isinstance(name, str) or not name or len(name) > 200:
        raise ValueError(
            f"binding name {name!r} in namespace {ns!r} must be a non-empty string of at most "
            "200 characters"
        )
    if not name.isprintable() or name.startswith("_"):
        raise ValueError(
            f"binding name {name!r} in namespace {ns!r} must be printable and not start with "
            "'_' (use e.g. 'search' or 'web-search')"
        )
    return name


class BindingRegistry:
    """Validated namespaces of bindings.

    >>> reg = BindingRegistry({"tools": {"add": lambda a, b: a + b}})
    >>> reg.lookup("tools", "add").signature_text
    '(a, b)'
    >>> BindingRegistry({"my-tools": {}})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: namespace 'my-tools' is not a valid Python identifier; ...
    """

    def __init__(
        self,
        namespaces: Mapping[str, Mapping[str, Callable[..., Any]]],
        *,
        builtin: Mapping[str, Mapping[str, Callable[..., Any]]] | None = None,
    ) -> None:
        if not isinstance(namespaces, Mapping):
            raise TypeError(
                f"namespaces must be a mapping of namespace -> {{name: callable}}, "
                f"got {type(namespaces).__name__}"
            )
        self._bindings: dict[str, dict[str, Binding]] = {}
        self._specs: dict[str, dict[str, dict[str, Any]]] | None = None
        self._signatures: dict[str, dict[str, str]] | None = None
        for ns, bindings in [*namespaces.items(), *(builtin or {}).items()]:
            if ns not in (builtin or {}) or ns in namespaces:
                _check_namespace_name(ns)  # the gateway's own may use a reserved name
            if not isinstance(bindings, Mapping):
                raise TypeError(
                    f"bindings of namespace {ns!r} must be a mapping of name -> callable, "
                    f"got {type(bindings).__name__}{_as_mapping_hint(bindings)}"
                )
            table: dict[str, Binding] = {}
            for name, fn in bindings.items():
                _check_binding_name(ns, name)
                if not callable(fn):
                    raise TypeError(
                        f"binding {ns}.{name} must be callable, got {type(fn).__name__}"
                    )
                table[name] = Binding(ns, name, fn, signature_of(fn))
            self._bindings[ns] = table

    @classmethod
    def from_arguments(
        cls,
        bindings: Mapping[str, Callable[..., Any]] | None,
        namespace: str,
        namespaces: Mapping[str, Mapping[str, Callable[..., Any]]] | None,
    ) -> BindingRegistry:
        """The registry a gateway's ``bindings=``/``namespace=``/``namespaces=`` describe."""
        if bindings is not None and namespaces is not None:
            raise ValueError(
                "pass either bindings= (one namespace) or namespaces= (several), not both"
            )
        if namespaces is None:
            namespaces = {namespace: bindings or {}}
        return cls(namespaces)

    def with_builtin(
        self, builtin: Mapping[str, Mapping[str, Callable[..., Any]]]
    ) -> BindingRegistry:
        """This registry's bindings and the gateway's own ``builtin`` namespaces (which
        may have a reserved name, such as ``kernelgate``): what a run's child is given."""
        own = {
            ns: {name: b.fn for name, b in table.items()} for ns, table in self._bindings.items()
        }
        return BindingRegistry(own, builtin=builtin)

    def lookup(self, namespace: str, name: str) -> Binding | None:
        table = self._bindings.get(namespace)
        return table.get(name) if table is not None else None

    @property
    def namespaces(self) -> dict[str, dict[str, Binding]]:
        return self._bindings

    def specs(self) -> dict[str, dict[str, dict[str, Any]]]:
        """The ``comm_open`` announcement: namespace -> name -> spec (built once)."""
        if self._specs is None:
            self._specs = {
                ns: {name: b.spec() for name, b in table.items()}
                for ns, table in self._bindings.items()
            }
        return self._specs

    def signatures(self) -> dict[str, dict[str, str]]:
        """namespace -> name -> signature text (a fresh copy: results may be edited)."""
        if self._signatures is None:
            self._signatures = {
                ns: {name: b.signature_text for name, b in table.items()}
                for ns, table in self._bindings.items()
            }
        return {ns: dict(table) for ns, table in self._signatures.items()}


def _names_types(schema: Any) -> bool:
    """Whether a schema refers to named types (``$defs``), at its root."""
    return isinstance(schema, dict) and bool(schema.get("$defs"))


def _as_mapping_hint(value: Any) -> str:
    """What to pass instead of a list or tuple of callables: the dict they make."""
    if isinstance(value, (list, tuple)) and value and all(callable(f) for f in value):
        names = ", ".join(f"{n!r}: {n}" for n in (getattr(f, "__name__", "f") for f in value[:3]))
        more = ", ..." if len(value) > 3 else ""
        return f"; name each binding: {{{names}{more}}}"
    return ""
