"""What ``RemoteGateway.describe()`` says: the bindings a program run in the kernel sees.

The client's own bindings are described as ``Gateway.describe()`` describes them; the
kernel's are known by their signature text only (the ``ready`` of the bindings comm).

>>> from kernelgate.gateway.bindings import BindingRegistry
>>> registry = BindingRegistry.from_arguments({"f": lambda x: x}, "agent", None)
>>> text = describe_remote(registry, {"tools": {"search": "(query: str) -> list"}}, "text")
>>> "async def search(query: str) -> list:" in text, "class agent:" in text
(True, True)

A TypeScript or JavaScript kernel's programs read TypeScript declarations (the kernel's
bindings by name and parameters: their signature text is Python's, not evaluated):

>>> ts = describe_remote(registry, {"tools": {"search": "(query: str) -> list"}}, "text",
...                      language="typescript")
>>> "declare const tools" in ts, "search(query: unknown): Promise<unknown>;" in ts
(True, True)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kernelgate.gateway.bindings import BindingRegistry
from kernelgate.gateway.describe import describe_binding, signature_schema
from kernelgate.model.describe import render_stub
from kernelgate.model.describe_ts import render_declarations
from kernelgate.model.signatures import signature_from_text

__all__ = ["describe_remote"]


def _params(signature: str) -> list[list[Any]] | None:
    """A kernel binding's ``[name, kind, has_default]`` list, from its signature text."""
    parsed = signature_from_text(signature)
    if parsed is None:
        return None
    return [[p.name, p.kind.name, p.default is not p.empty] for p in parsed.parameters.values()]


def describe_remote(
    registry: BindingRegistry,
    kernel_bindings: Mapping[str, Mapping[str, str]],
    format: str,
    language: str = "python",
) -> str | list[dict[str, Any]]:
    """The client's bindings (``registry``) and the kernel's (``kernel_bindings``:
    namespace -> name -> signature text), the client's namespaces replacing the kernel's
    of the same names, as a stub (``"text"``: in the kernel's ``language``) or per
    binding JSON (``"json"``), or TypeScript declarations (``"typescript"``)."""
    own = registry.namespaces
    kernels = {ns: t for ns, t in kernel_bindings.items() if ns not in own}
    if format == "typescript" or (format == "text" and language != "python"):
        entries = describe_remote(registry, kernel_bindings, "json")
        assert isinstance(entries, list)
        ts_specs: dict[str, dict[str, dict[str, Any]]] = {
            ns: {name: {"params": _params(sig)} for name, sig in t.items()}
            for ns, t in kernels.items()
        }
        ts_specs.update(
            {ns: {n: dict(s) for n, s in t.items()} for ns, t in registry.specs().items()}
        )
        return render_declarations(entries, ts_specs)
    if format == "text":
        specs: dict[str, dict[str, dict[str, Any]]] = {
            ns: {name: {"signature": sig} for name, sig in t.items()} for ns, t in kernels.items()
        }
        specs.update({ns: {n: dict(s) for n, s in t.items()} for ns, t in registry.specs().items()})
        return render_stub(specs)
    if format == "json":
        entries = [
            {
                "namespace": ns,
                "name": name,
                "description": "",
                "parameters": signature_schema(signature_from_text(sig)),
                "returns": {},
            }
            for ns, t in kernels.items()
            for name, sig in sorted(t.items())
        ]
        entries += [describe_binding(t[n]) for t in own.values() for n in sorted(t)]
        return entries
    raise ValueError(f"describe(format={format!r}): use 'text' (a stub), 'json' or 'typescript'")
