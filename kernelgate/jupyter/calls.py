"""A binding call as a notebook output, live in the kernel exactly as in saved runs.

The kernel shows each call as it completes with :func:`call_display` (the saved runs'
builder, :func:`kernelgate.notebooks.render.call_output`); a client rebuilds the
:class:`~kernelgate.model.result.CallRecord` from that output with
:func:`call_record_from_data`.
"""

from __future__ import annotations

from typing import Any

from kernelgate.model.result import CallRecord
from kernelgate.notebooks.render import call_output as call_display
from kernelgate.notebooks.store import NotARunError, call_record_from_json

__all__ = ["call_display", "call_record_from_data"]


def call_record_from_data(data: Any, output_index: int = 0) -> CallRecord | None:
    """Rebuild a :class:`CallRecord` from a call payload; ``None`` if it is not one.

    ``output_index`` is used when the payload does not say where the call belongs.
    """
    try:
        return call_record_from_json(data, "call output", output_index)
    except (NotARunError, TypeError, ValueError):
        return None
