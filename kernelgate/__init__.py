"""kernelgate: run programs that AI agents write, each in a fresh CPython child.

>>> from kernelgate import Gateway
>>> def add(a: int, b: int) -> int:
...     return a + b
>>> with Gateway(bindings={"add": add}) as gw:
...     result = gw.run_sync("print('hi')\\nawait tools.add(1, b=2)")
>>> result.status, result.stdout, result.value
('ok', 'hi\\n', 3)

``save_run(result, "run.ipynb")`` keeps a run as a notebook (``Gateway(record_to=DIR)``:
every run); :mod:`kernelgate.notebooks` reads, replays and draws them.

Exports are lazy (PEP 562): the child imports ``kernelgate.wire`` and
``kernelgate.kernels.python`` without pulling in the host side.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS = {
    "Gateway": "kernelgate.gateway.gateway",
    "CodeGateway": "kernelgate.gateway.api",
    "Limits": "kernelgate.model.limits",
    "RunResult": "kernelgate.model.result",
    "CallRecord": "kernelgate.model.result",
    "ErrorInfo": "kernelgate.model.result",
    "RemoteGateway": "kernelgate.jupyter.remote",
    "inline": "kernelgate.gateway.bindings",
    "input_schema": "kernelgate.gateway.schemas",
    "ToolOutput": "kernelgate.gateway.tools",
    "save_run": "kernelgate.gateway.recording.store",
}

__all__ = [
    "CallRecord",
    "CodeGateway",
    "ErrorInfo",
    "Gateway",
    "Limits",
    "RemoteGateway",
    "RunResult",
    "ToolOutput",
    "__version__",
    "inline",
    "input_schema",
    "save_run",
]

if TYPE_CHECKING:
    from kernelgate.gateway.api import CodeGateway
    from kernelgate.gateway.bindings import inline
    from kernelgate.gateway.gateway import Gateway
    from kernelgate.gateway.recording.store import save_run
    from kernelgate.gateway.schemas import input_schema
    from kernelgate.gateway.tools import ToolOutput
    from kernelgate.jupyter.remote import RemoteGateway
    from kernelgate.model.limits import Limits
    from kernelgate.model.result import CallRecord, ErrorInfo, RunResult


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'kernelgate' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
