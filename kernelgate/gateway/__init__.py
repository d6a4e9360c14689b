"""The host: starts and supervises children, dispatches binding calls, enforces limits.

Exports are lazy (PEP 562): :mod:`kernelgate.notebooks` uses
:mod:`kernelgate.gateway.sanitize` and :mod:`kernelgate.gateway.recording` (the run
writer) alone, and importing them must not start the runtime (pool, sandbox, runs).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__all__ = [
    "CallRecord",
    "CodeGateway",
    "CodeRuntime",
    "ErrorInfo",
    "Gateway",
    "Limits",
    "PythonRuntime",
    "RunDebugger",
    "RunResult",
]

_EXPORTS = {
    "Gateway": "kernelgate.gateway.gateway",
    "CodeGateway": "kernelgate.gateway.api",
    "CodeRuntime": "kernelgate.gateway.runtime",
    "PythonRuntime": "kernelgate.gateway.runtime",
    "Limits": "kernelgate.model.limits",
    "RunDebugger": "kernelgate.gateway.debug",
    "RunResult": "kernelgate.model.result",
    "CallRecord": "kernelgate.model.result",
    "ErrorInfo": "kernelgate.model.result",
}

if TYPE_CHECKING:
    from kernelgate.gateway.api import CodeGateway
    from kernelgate.gateway.debug import RunDebugger
    from kernelgate.gateway.gateway import Gateway
    from kernelgate.gateway.runtime import CodeRuntime, PythonRuntime
    from kernelgate.model.limits import Limits
    from kernelgate.model.result import CallRecord, ErrorInfo, RunResult


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'kernelgate.gateway' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
