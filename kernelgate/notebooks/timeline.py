"""A run's binding calls on a timeline, as SVG, under the name the notebooks API has
always had.

The drawing is :mod:`kernelgate.gateway.recording.timeline`, a layer below, because
``Gateway(record_to=DIR)`` writes runs with their timeline.
"""

from __future__ import annotations

from kernelgate.gateway.recording.timeline import (
    MIN_WIDTH,
    TimelineBar,
    TimeScale,
    layout,
    max_in_flight,
    timeline_summary,
    timeline_svg,
)

__all__ = [
    "MIN_WIDTH",
    "timeline_svg",
    "timeline_summary",
    "max_in_flight",
    "TimelineBar",
    "TimeScale",
    "layout",
]
