"""The host: starts and supervises children, dispatches binding calls, enforces limits.

``Gateway`` is imported when first used (PEP 562): the layers above take single modules
of this package (``sanitize``, ``bindings``) without loading the runtime (pool, sandbox,
run) behind it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kernelgate.model.limits import Limits
from kernelgate.model.result import CallRecord, ErrorInfo, RunResult

if TYPE_CHECKING:
    from .gateway import Gateway

__all__ = ["CallRecord", "ErrorInfo", "Gateway", "Limits", "RunResult"]


def __getattr__(name: str) -> Any:
    if name == "Gateway":
        from .gateway import Gateway  # lazy, pointing down: see the module docstring

        globals()["Gateway"] = Gateway
        return Gateway
    raise AttributeError(f"module 'kernelgate.gateway' has no attribute {name!r}")
