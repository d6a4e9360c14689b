"""The host: starts and supervises children, dispatches binding calls, enforces limits."""

from __future__ import annotations

from kernelgate.model.limits import Limits
from kernelgate.model.result import CallRecord, ErrorInfo, RunResult

from .gateway import Gateway

__all__ = ["CallRecord", "ErrorInfo", "Gateway", "Limits", "RunResult"]
