"""A binding call as a notebook output, under the name the notebooks API has always had.

The builders are :mod:`kernelgate.gateway.recording.calls`, a layer below, because
``Gateway(record_to=DIR)`` writes runs (calls included); the kernel front shows live
calls with the same :func:`call_output`.
"""

from __future__ import annotations

from kernelgate.gateway.recording.calls import (
    ARGS_PREVIEW_CHARS,
    VALUE_PREVIEW_CHARS,
    call_html,
    call_label,
    call_line,
    call_output,
    duration_text,
)

__all__ = [
    "ARGS_PREVIEW_CHARS",
    "VALUE_PREVIEW_CHARS",
    "call_html",
    "call_label",
    "call_line",
    "call_output",
    "duration_text",
]
