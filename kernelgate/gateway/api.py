"""``CodeGateway``: what a caller of a gateway may use, whatever runs its programs.

:class:`~kernelgate.gateway.gateway.Gateway` (children on this machine, in any language its
runtime speaks) and :class:`~kernelgate.jupyter.remote.RemoteGateway` (a kernelgate kernel
elsewhere) both implement it; the agent helpers (the MCP server) and replay's callers
take a ``CodeGateway``, so they work with either. A caller that needs more (the debugger,
the binding registry) names the class it needs.

>>> from kernelgate import Gateway
>>> isinstance(Gateway(), CodeGateway)
True
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeVar, overload, runtime_checkable

if TYPE_CHECKING:  # light: the notebooks name this protocol without loading the runtime
    from kernelgate.model.limits import Limits
    from kernelgate.model.result import RunResult

    from .output import OutputListener
    from .plan import CallListener

__all__ = ["CodeGateway", "Recorder"]

_G = TypeVar("_G", bound="CodeGateway")


@runtime_checkable
class Recorder(Protocol):
    """Where ``Gateway(record_to=...)`` puts every run: anything with ``append(result)``,
    such as :class:`kernelgate.notebooks.SessionLog` (the whole session, one notebook)."""

    def append(self, result: RunResult, /) -> Any: ...


@runtime_checkable
class CodeGateway(Protocol):
    """Runs programs and returns :class:`~kernelgate.RunResult`; failures of a program are
    data (``status``, ``error``), never exceptions; exceptions are the caller's misuse."""

    @property
    def language(self) -> str:
        """What programs are written in: ``"python"``, ``"typescript"``, ``"javascript"``."""

    async def run(
        self,
        program: str,
        *,
        limits: Limits | None = None,
        on_output: OutputListener | None = None,
        on_call: CallListener | None = None,
    ) -> RunResult:
        """Run ``program`` (``limits``: tighter budgets for this run; ``on_output`` and
        ``on_call`` see outputs and completed calls as they happen)."""

    def run_sync(self, program: str, *, limits: Limits | None = None) -> RunResult:
        """:meth:`run` for synchronous callers (not inside a running event loop)."""

    @overload
    def describe(self, format: Literal["text"] = "text") -> str: ...
    @overload
    def describe(self, format: Literal["json"]) -> list[dict[str, Any]]: ...
    def describe(self, format: str = "text") -> str | list[dict[str, Any]]:
        """The bindings programs can call, as a model is told about them: a stub in the
        programs' language (``"text"``), or per binding JSON (``"json"``)."""

    def interrupt(self) -> int:
        """Stop every live run; return how many there were."""

    async def aclose(self) -> None:
        """Close: live runs are stopped, and everything they held is gone on return."""

    def close(self) -> None:
        """Close from synchronous code."""

    async def __aenter__(self: _G) -> _G: ...

    async def __aexit__(self, *exc: object) -> None: ...


if TYPE_CHECKING:
    from .gateway import Gateway

    def _is_a_code_gateway(gateway: Gateway) -> CodeGateway:
        return gateway  # mypy checks that a Gateway is a CodeGateway
