"""A binding call as a notebook output, live in the kernel exactly as in saved runs.

The kernel shows each call as it completes with :func:`call_display` (the saved runs'
builder, :func:`kernelgate.notebooks.calls.call_output`); a client rebuilds the
:class:`~kernelgate.model.result.CallRecord` from that output with
:func:`call_record_from_data` (the codec's :func:`~kernelgate.model.codec.call_from_json`).
"""

from __future__ import annotations

from typing import Any

from kernelgate.model.codec import NotARunError, call_from_json
from kernelgate.model.result import CallRecord
from kernelgate.notebooks.calls import call_output as call_display

__all__ = ["call_display", "call_record_from_data"]


def call_record_from_data(data: Any, output_index: int = 0) -> CallRecord | None:
    """Rebuild a :class:`CallRecord` from a call payload; ``None`` if it is not one.

    ``output_index`` is used when the payload does not say where the call belongs.
    """
    try:
        return call_from_json(data, "call output", output_index)
    except (NotARunError, TypeError, ValueError):
        return None
