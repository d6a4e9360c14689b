"""What a program sees of the host: namespaces of async bindings, and ``ToolError``.

``tools.search("x", limit=3)`` checks its arguments against the host callable's signature
and the JSON rules *before* anything leaves the child, so a mistake raises at the program's
own line; then it sends a call and returns an awaitable for the host's answer.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from kernelgate.wire.messages import binding_label
from kernelgate.wire.values import NotJSONError, ValueTooLargeError, check_json

__all__ = ["PARAMETER_KINDS", "ToolError", "Namespace", "Binding", "signature_from_spec"]

#: The ``kind`` names a binding spec uses (``inspect.Parameter`` kinds, by name).
PARAMETER_KINDS = {
    "POSITIONAL_ONLY": inspect.Parameter.POSITIONAL_ONLY,
    "POSITIONAL_OR_KEYWORD": inspect.Parameter.POSITIONAL_OR_KEYWORD,
    "VAR_POSITIONAL": inspect.Parameter.VAR_POSITIONAL,
    "KEYWORD_ONLY": inspect.Parameter.KEYWORD_ONLY,
    "VAR_KEYWORD": inspect.Parameter.VAR_KEYWORD,
}


class _Default:
    """Stands for a host-side default value, which never crosses the wire."""

    def __repr__(self) -> str:
        return "..."


_DEFAULT = _Default()


class ToolError(Exception):
    """A binding failed on the host (or was refused before it ran).

    ``tool`` is the binding (``"tools.search"``), ``ename`` the host exception's class name.
    """

    def __init__(self, message: str, *, tool: str = "", ename: str = "Exception") -> None:
        super().__init__(message)
        self.tool = tool
        self.ename = ename

    def __str__(self) -> str:
        message = super().__str__()
        return f"{self.tool} failed: {self.ename}: {message}" if self.tool else message

    def __reduce__(self) -> Any:
        return (_rebuild_tool_error, (self.args[0] if self.args else "", self.tool, self.ename))


# Programs know it as the global ``ToolError``: tracebacks should say just that.
ToolError.__module__ = "builtins"


def _rebuild_tool_error(message: str, tool: str, ename: str) -> ToolError:
    return ToolError(message, tool=tool, ename=ename)


def signature_from_spec(spec: dict[str, Any]) -> inspect.Signature:
    params = []
    for name, kind, has_default in spec.get("params", []):
        params.append(
            inspect.Parameter(
                name,
                PARAMETER_KINDS[kind],
                default=_DEFAULT if has_default else inspect.Parameter.empty,
            )
        )
    return inspect.Signature(params)


class Binding:
    """One host function as the program calls it: ``await tools.name(...)``."""

    def __init__(
        self,
        namespace: str,
        name: str,
        spec: dict[str, Any],
        call: Callable[[str, str, list[Any], dict[str, Any]], Any],
        max_arg_bytes: int,
    ) -> None:
        self._namespace = namespace
        self._name = name
        self._signature = signature_from_spec(spec)
        self._call = call
        self.__doc__ = spec.get("doc") or None
        self._label = binding_label(namespace, name)
        self._shown = spec.get("signature") or str(self._signature)
        self._max_arg_bytes = max_arg_bytes

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        try:
            bound = self._signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise TypeError(
                f"{self._label}() {exc}; its signature is {self._name}{self._shown}"
            ) from None
        budget = self._max_arg_bytes
        for pname, value in bound.arguments.items():
            try:
                budget -= check_json(value, f"{self._label}() argument {pname}", budget)
            except NotJSONError as exc:
                raise TypeError(
                    f"{exc}; binding arguments must be JSON (dict with str keys, list, "
                    "str, int, float, bool, None)"
                ) from None
            except ValueTooLargeError:
                raise ValueError(
                    f"the arguments of {self._label}() are over {self._max_arg_bytes} bytes "
                    "as JSON (max_frame_bytes); pass less data per call"
                ) from None
        return self._call(self._namespace, self._name, list(args), kwargs)

    def __repr__(self) -> str:
        return f"<binding {self._label}{self._shown}>"

    @property
    def __signature__(self) -> inspect.Signature:
        return self._signature


class Namespace:
    """The bindings of one namespace: ``tools.name`` or ``tools["name-with-dash"]``."""

    def __init__(self, name: str, bindings: dict[str, Binding]) -> None:
        object.__setattr__(self, "_kg_name", name)
        object.__setattr__(self, "_kg_bindings", bindings)

    def __getattr__(self, name: str) -> Binding:
        bindings = object.__getattribute__(self, "_kg_bindings")
        try:
            return bindings[name]  # type: ignore[no-any-return]
        except KeyError:
            raise AttributeError(self._missing(name)) from None

    def __getitem__(self, name: str) -> Binding:
        bindings = object.__getattribute__(self, "_kg_bindings")
        try:
            return bindings[name]  # type: ignore[no-any-return]
        except (KeyError, TypeError):
            raise KeyError(self._missing(name)) from None

    def _missing(self, name: Any) -> str:
        ns = object.__getattribute__(self, "_kg_name")
        names = sorted(object.__getattribute__(self, "_kg_bindings"))
        shown = ", ".join(names[:50]) + (", ..." if len(names) > 50 else "")
        return f"{ns} has no binding {name!r}; it has: {shown or '(none)'}"

    def __setattr__(self, name: str, value: Any) -> None:
        ns = object.__getattribute__(self, "_kg_name")
        raise AttributeError(f"{ns} is read-only: bindings are provided by the host")

    def __contains__(self, name: object) -> bool:
        return name in object.__getattribute__(self, "_kg_bindings")

    def __iter__(self) -> Any:
        return iter(sorted(object.__getattribute__(self, "_kg_bindings")))

    def __dir__(self) -> list[str]:
        return sorted(object.__getattribute__(self, "_kg_bindings"))

    def __repr__(self) -> str:
        ns = object.__getattribute__(self, "_kg_name")
        return f"<namespace {ns}: {', '.join(self.__dir__())}>"
