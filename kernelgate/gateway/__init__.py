"""The host: starts and supervises children, dispatches binding calls, enforces limits."""

from __future__ import annotations

from .gateway import Gateway
from .limits import Limits
from .result import CallRecord, ErrorInfo, RunResult

__all__ = ["CallRecord", "ErrorInfo", "Gateway", "Limits", "RunResult"]
