"""A run's binding calls on a timeline, as SVG.

One bar per call from its start to its end, on lanes so that calls which overlap in time
never share a lane (calls that ran in parallel sit one above the other). A lane is also
kept free where a bar's label would run into the next bar. The axis is the run's whole
duration, from 0 to the run's total; when the calls take a small part of it (a short
program spends most of its time starting the interpreter), the idle stretch before the
first call or after the last is drawn shortened, shaded and labelled with its length, so
the calls get the room. The slowest call is drawn in orange, failed calls in red, and
hovering a bar shows the full call.

The drawing follows the width it is shown at and its text stays 11 px: the root ``<svg>``
has ``width="100%"`` and no ``viewBox`` (a viewBox would scale the text down with the
drawing: a 960 px picture in an 830 px notebook column had 9.5 px text), and everything
placed along the time axis is a percentage of the width, with text offset from it in px
(``dx``). The layout (lanes, which side of its bar a label goes, how far a label is
shortened) is computed at :data:`MIN_WIDTH`, the narrowest width supported: a wider
drawing only moves things placed at different percentages further apart, so labels that
neither collide nor run off the edge at that width never do at any wider one.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from xml.sax.saxutils import escape, quoteattr

from kernelgate.model.result import CallRecord, RunResult

from .calls import call_label, call_line
from .values import fmt_duration

__all__ = [
    "MIN_WIDTH",
    "timeline_svg",
    "timeline_summary",
    "max_in_flight",
    "TimelineBar",
    "TimeScale",
    "layout",
]

#: The narrowest width (px) the drawing is laid out for; shown narrower, it overflows
#: (the ``<img>`` of :func:`kernelgate.gateway.recording.render.timeline_img` has this min-width).
MIN_WIDTH = 600
_PAD = 2.0  # percent of the width, each side
_TOP = 64  # the heading's two lines, then a band for the idle stretches' lengths
_LANE_H = 22
_BAR_H = 15
_AXIS_H = 38  # tick labels, then the legend and the run's total
_CHAR_W = 6.7  # 11px monospace, a little generous
_MIN_BAR = 2.0
_SHORT_W = 84.0  # width of an idle stretch drawn shortened
_FONT = "ui-monospace, SFMono-Regular, Menlo, Consolas, 'DejaVu Sans Mono', monospace"
# A dark card: it reads the same on JupyterLab's light and dark themes (a white one glares
# in dark, and an <img> cannot follow the page's theme). Bar colours keep white labels at
# >= 4.5:1 contrast.
_BACKGROUND = "#1f2428"
_OK = "#3f6fa5"
_FAILED = "#c62f2c"
_SLOWEST = "#a85400"
_XML_BAD = re.compile("[^\t\n\r\u0020-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _xml(text: str) -> str:
    return escape(_XML_BAD.sub("\ufffd", text))


def _attr(text: str) -> str:
    return quoteattr(_XML_BAD.sub("\ufffd", text))


@dataclass
class TimelineBar:
    """Where one call is drawn: bar from ``x0`` to ``x1`` on ``lane``, and its label."""

    call: CallRecord
    x0: float
    x1: float
    lane: int
    label: str
    label_x: float  # where the label is anchored at the layout's width (px)
    label_anchor: str  # "start" or "end"
    label_inside: bool

    @property
    def label_edge(self) -> float:
        """The bar edge the label is offset from (px at the layout's width)."""
        return self.x1 if self.label_x > self.x1 else self.x0

    @property
    def label_dx(self) -> int:
        """The label's offset (px) from :attr:`label_edge`; it stays in px at any width."""
        return -4 if self.label_anchor == "end" else 4


def max_in_flight(calls: Sequence[CallRecord]) -> int:
    """How many calls were running at the same moment, at most.

    >>> a = CallRecord(0, "t", "a", [], {}, start_s=0.0, duration_s=2.0)
    >>> b = CallRecord(1, "t", "b", [], {}, start_s=1.0, duration_s=2.0)
    >>> c = CallRecord(2, "t", "c", [], {}, start_s=3.0, duration_s=1.0)
    >>> max_in_flight([a, b, c])
    2
    """
    events = []
    for c in calls:
        events.append((c.start_s, 1))
        events.append((c.start_s + c.duration_s, -1))
    events.sort(key=lambda e: (e[0], e[1]))  # an end before a start at the same instant
    best = now = 0
    for _, step in events:
        now += step
        best = max(best, now)
    return best


def _slowest(calls: Sequence[CallRecord]) -> CallRecord | None:
    # One call is not "the slowest" of anything: marked only when there is a choice.
    return max(calls, key=lambda c: (c.duration_s, -c.id)) if len(calls) > 1 else None


def _bar_label(call: CallRecord, one_namespace: bool, chars: int = 10_000) -> str:
    """The call as its bar's label, with its duration (and error), in at most ``chars``
    characters: the call is shortened first, the duration kept."""
    suffix = fmt_duration(call.duration_s)
    if not call.ok and call.error is not None:
        suffix += f" ✗ {call.error.ename}"
    width = max(min(44, chars - len(suffix) - 1), 1)
    label = call_label(call.namespace, call.name, call.args, call.kwargs, width, arg_width=16)
    if one_namespace:
        label = label[len(call.namespace) + 1 :] if label.startswith(call.namespace) else label
    return _clip(f"{label} {suffix}", chars)


def _clip(text: str, chars: int) -> str:
    """``text`` in at most ``chars`` characters (an ellipsis marks a cut)."""
    return text if len(text) <= chars else text[: max(chars - 1, 0)] + "…"


def _pct(x: float, width: float) -> str:
    """An x (px at the layout's width) as a percentage of the drawing's width."""
    return f"{x / width * 100:.3f}%"


@dataclass
class _Segment:
    t0: float
    t1: float
    x0: float
    x1: float
    shortened: bool

    def x(self, t: float) -> float:
        if self.t1 <= self.t0:
            return self.x0
        return self.x0 + (t - self.t0) / (self.t1 - self.t0) * (self.x1 - self.x0)


class TimeScale:
    """Run time (seconds) to x, from 0 at ``left`` to ``total`` at ``right``.

    Linear, except that an idle stretch before the first call or after the last that is
    both longer than a tenth of the run and longer than all the calls together is drawn
    shortened to a fixed width.

    >>> c = [CallRecord(0, "t", "f", [], {}, start_s=0.90, duration_s=0.05)]
    >>> s = TimeScale(c, 1.0, 0, 1000)
    >>> [seg.shortened for seg in s.segments], s.x(0.0), s.x(1.0)
    ([True, False], 0.0, 1000.0)
    >>> round(s.x(0.95) - s.x(0.90))  # the call gets half the width, not a twentieth
    449
    """

    def __init__(self, calls: Sequence[CallRecord], total: float, left: float, right: float):
        self.total = total
        lead_end, tail_start = 0.0, total
        short_lead = short_tail = False
        if calls:
            w0 = min(c.start_s for c in calls)
            w1 = max(c.start_s + c.duration_s for c in calls)
            window = max(w1 - w0, total * 1e-3)
            pad = window * 0.04
            lead_end, tail_start = max(w0 - pad, 0.0), min(w1 + pad, total)
            short_lead = lead_end > 0.1 * total and lead_end > window
            short_tail = total - tail_start > 0.1 * total and total - tail_start > window
        segs: list[_Segment] = []
        x = float(left)
        if short_lead:
            segs.append(_Segment(0.0, lead_end, x, x + _SHORT_W, True))
            x += _SHORT_W
        m0 = lead_end if short_lead else 0.0
        m1 = tail_start if short_tail else total
        mx1 = right - (_SHORT_W if short_tail else 0.0)
        segs.append(_Segment(m0, m1, x, mx1, False))
        if short_tail:
            segs.append(_Segment(tail_start, total, mx1, float(right), True))
        self.segments = segs

    @property
    def main(self) -> _Segment:
        return next(s for s in self.segments if not s.shortened)

    def x(self, t: float) -> float:
        t = min(max(t, 0.0), self.total)
        for seg in self.segments:
            if t <= seg.t1:
                return seg.x(t)
        return self.segments[-1].x1


def _plot(width: float) -> tuple[float, float]:
    """The time axis's left and right ends (px) at ``width``."""
    pad = width * _PAD / 100
    return pad, width - pad


def layout(
    calls: Sequence[CallRecord],
    total_s: float,
    width: int = MIN_WIDTH,
    scale: TimeScale | None = None,
) -> tuple[list[TimelineBar], int]:
    """Place every call at ``width`` px: bars in time, labels beside them (inside a bar
    when they fit, else on the side with room, shortened if neither side has enough),
    lanes filled first-fit in order of start (a lane is free once the previous bar and its
    label have ended).

    Returns the bars (in call order) and the number of lanes.
    """
    left, right = _plot(width)
    scale = scale or TimeScale(calls, total_s, left, right)
    one_namespace = len({c.namespace for c in calls}) <= 1
    bars: list[TimelineBar] = []
    spans: list[tuple[float, float, int]] = []
    for i, call in enumerate(calls):
        x0 = scale.x(call.start_s)
        x1 = max(x0 + _MIN_BAR, scale.x(call.start_s + call.duration_s))
        x0, x1 = min(x0, right - _MIN_BAR), min(x1, right)
        label = _bar_label(call, one_namespace)
        w = len(label) * _CHAR_W
        room_right, room_left = right - (x1 + 4), (x0 - 4) - left
        if w > room_right and w > room_left and x1 - x0 < w + 8:
            # Fits nowhere whole: shortened to the roomier side, never cut by the edge.
            label = _bar_label(call, one_namespace, int(max(room_right, room_left) // _CHAR_W))
            w = len(label) * _CHAR_W
        if x1 - x0 >= w + 8:
            lx, anchor, inside, span = x0 + 4, "start", True, (x0, x1)
        elif w <= room_right:
            lx, anchor, inside, span = x1 + 4, "start", False, (x0, x1 + 4 + w)
        else:
            lx, anchor, inside, span = x0 - 4, "end", False, (x0 - 4 - w, x1)
        bars.append(TimelineBar(call, x0, x1, 0, label, lx, anchor, inside))
        spans.append((span[0], span[1] + 6, i))
    lane_ends: list[float] = []
    # In call order (by start), so lanes read top to bottom as time goes on.
    for start, end, i in sorted(spans, key=lambda s: (calls[s[2]].start_s, calls[s[2]].id)):
        for lane, lane_end in enumerate(lane_ends):
            if lane_end <= start:
                lane_ends[lane] = end
                bars[i].lane = lane
                break
        else:
            bars[i].lane = len(lane_ends)
            lane_ends.append(end)
    return bars, len(lane_ends)


def _nice_step(total_s: float, target_ticks: int = 8) -> float:
    raw = total_s / target_ticks
    exp = math.floor(math.log10(raw))
    for m in (1, 2, 5, 10):
        step = m * 10.0**exp
        if step >= raw:
            return step
    return 10.0 ** (exp + 1)


def _tick_label(t: float, step: float, in_seconds: bool) -> str:
    if in_seconds:
        decimals = max(0, -math.floor(math.log10(step))) if step < 1 else 0
        return f"{t:.{decimals}f} s"
    ms, step_ms = t * 1000, step * 1000
    decimals = max(0, -math.floor(math.log10(step_ms))) if step_ms < 1 else 0
    return f"{ms:.{decimals}f} ms"


def _aria(calls: Sequence[CallRecord], total: float) -> str:
    n = len(calls)
    return f"timeline of {n} binding call{'' if n == 1 else 's'} over {fmt_duration(total)}"


def timeline_summary(run: RunResult) -> str:
    """One line about a run's calls: how many, how many at once, which was slowest.

    >>> r = RunResult("ok", duration_s=0.5, calls=[
    ...     CallRecord(0, "tools", "a", [1], {}, ok=True, start_s=0.1, duration_s=0.2),
    ...     CallRecord(1, "tools", "b", [], {}, ok=True, start_s=0.1, duration_s=0.1)])
    >>> timeline_summary(r)
    'call timeline: 2 calls over 500.0 ms; at most 2 at once; slowest tools.a(1) -> None  200.0 ms'
    """
    calls = run.calls
    n = len(calls)
    head = f"call timeline: {n} call{'' if n == 1 else 's'} over {fmt_duration(run.duration_s)}"
    slowest = _slowest(calls)
    if slowest is None:
        return head
    return f"{head}; at most {max_in_flight(calls)} at once; slowest {call_line(slowest)}"


def timeline_svg(
    run: RunResult | Sequence[CallRecord],
    *,
    duration_s: float | None = None,
    width: int = MIN_WIDTH,
    title: str | None = None,
) -> str:
    """The run's calls as an SVG timeline (a standalone ``<svg>`` document).

    Each call is one ``<rect class="call ...">`` with a ``<title>`` (the full call, for
    hovering) and a label. ``duration_s`` defaults to the run's duration. The drawing is
    as wide as where it is shown (``width="100%"``, x in percentages, text at 11 px);
    ``width`` is the narrowest width (px) its labels are laid out to fit.

    >>> from kernelgate import Gateway
    >>> r = Gateway(bindings={"add": lambda a, b: a + b}).run_sync(
    ...     "import asyncio\\nawait asyncio.gather(tools.add(1, 2), tools.add(3, 4))")
    >>> import xml.etree.ElementTree as ET
    >>> svg = ET.fromstring(timeline_svg(r))
    >>> len([e for e in svg.iter("{http://www.w3.org/2000/svg}rect")
    ...      if e.get("class", "").startswith("call")])
    2
    """
    if isinstance(run, RunResult):
        calls = list(run.calls)
        total = run.duration_s if duration_s is None else duration_s
        if title is None:
            title = f"run {run.run_id} · {run.status} · {fmt_duration(run.duration_s)}"
    else:
        calls = list(run)
        total = duration_s if duration_s is not None else 0.0
    ends = [c.start_s + c.duration_s for c in calls]
    total = max([total, *ends, 1e-6])
    left, right = _plot(width)
    scale = TimeScale(calls, total, left, right)
    bars, lanes = layout(calls, total, width, scale)
    slowest = _slowest(calls)
    height = _TOP + max(lanes, 1) * _LANE_H + _AXIS_H
    plot_bottom = _TOP + max(lanes, 1) * _LANE_H
    # No viewBox: user units stay px, so text keeps its size at any width (see above).
    out: list[str] = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="100%" height="{height}" '
        f'data-min-width="{width}" font-family={_attr(_FONT)} font-size="11" '
        f'role="img" aria-label={_attr(_aria(calls, total))}>',
        f'<rect class="background" x="0" y="0" width="100%" height="{height}" rx="4" '
        f'fill="{_BACKGROUND}"/>',
    ]
    out += _heading(calls, slowest, title, width)
    out += _shortened(scale, plot_bottom, width)
    out += _axis(scale, total, width, plot_bottom)
    out += _bars(bars, slowest, width)
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _heading(
    calls: Sequence[CallRecord],
    slowest: CallRecord | None,
    title: str | None,
    width: int,
) -> list[str]:
    """The title line and the summary line, each shortened to fit at ``width``."""
    left, right = _plot(width)
    chars = int((right - left) // _CHAR_W)
    x = _pct(left, width)
    heading = "kernelgate call timeline" + (f" · {title}" if title else "")
    out = [
        f'<text x="{x}" y="16" font-weight="bold" fill="#e8eaed">'
        f"{_xml(_clip(heading, chars))}</text>"
    ]
    n = len(calls)
    if n == 0:
        detail = "no binding calls"
    elif slowest is None:  # one call: nothing to compare it with
        detail = f"1 call · {_bar_label(calls[0], False)}"
    else:
        detail = (
            f"{n} calls · at most {max_in_flight(calls)} at once · "
            f"slowest {_bar_label(slowest, False)}"
        )
    out.append(f'<text x="{x}" y="32" fill="#c8ccd1">{_xml(_clip(detail, chars))}</text>')
    return out


def _legend(width: int, y: int) -> list[str]:
    """What the colours mean, at the left under the axis (the run's total is at the right).

    A nested ``<svg>`` at the axis's left end (a percentage) holds it, so its swatches and
    words keep their px spacing."""
    out = [f'<svg x="{_pct(_plot(width)[0], width)}" y="0" overflow="visible">']
    for i, (color, word) in enumerate(((_OK, "ok"), (_FAILED, "failed"), (_SLOWEST, "slowest"))):
        lx = i * 80
        out.append(
            f'<rect class="legend" x="{lx}" y="{y - 9}" width="10" height="10" fill="{color}"/>'
            f'<text x="{lx + 14}" y="{y}" fill="#c8ccd1">{word}</text>'
        )
    out.append("</svg>")
    return out


def _shortened(scale: TimeScale, plot_bottom: int, width: int) -> list[str]:
    """Idle stretches before the first call and after the last, drawn shortened."""
    out: list[str] = []
    for seg in scale.segments:
        if not seg.shortened:
            continue
        where = "before the first call" if seg.t0 == 0 else "after the last call"
        tip = (
            f"{fmt_duration(seg.t1 - seg.t0)} {where}, drawn shortened (no binding call "
            "was running: interpreter start-up, the program's own work, or teardown)"
        )
        mid = (seg.x0 + seg.x1) / 2
        out.append(
            f'<g class="shortened"><title>{_xml(tip)}</title>'
            f'<rect x="{_pct(seg.x0, width)}" y="{_TOP - 20}" '
            f'width="{_pct(seg.x1 - seg.x0, width)}" '
            f'height="{plot_bottom - _TOP + 20}" fill="#2b3137"/>'
            # Above the lanes, where no call's label can run into it.
            f'<text x="{_pct(mid, width)}" y="{_TOP - 8}" text-anchor="middle" fill="#a9b0b8">'
            f"{_xml('⋯ ' + fmt_duration(seg.t1 - seg.t0) + ' ⋯')}</text></g>"
        )
        edge = seg.x1 if seg.t0 == 0 else seg.x0
        # The break marks: px strokes around a percentage position (a nested <svg>).
        out.append(f'<svg x="{_pct(edge, width)}" y="0" overflow="visible">')
        for dx in (-2.5, 2.5):
            out.append(
                f'<line x1="{dx - 3:.1f}" y1="{plot_bottom + 5}" x2="{dx + 3:.1f}" '
                f'y2="{plot_bottom - 5}" stroke="#8b949e"/>'
            )
        out.append("</svg>")
    return out


def _axis(scale: TimeScale, total: float, width: int, plot_bottom: int) -> list[str]:
    """Grid lines, tick labels (none overlapping at ``width``, so at none wider), the
    axis, the legend and the run's total."""
    left, right = _plot(width)
    out: list[str] = []
    main = scale.main
    step = _nice_step(max(main.t1 - main.t0, 1e-9))
    in_seconds = total >= 2.0
    ticks = [0.0] if main.t0 > 0 else []
    k = math.ceil(main.t0 / step - 1e-9)
    while k * step <= main.t1 + 1e-12:
        ticks.append(k * step)
        k += 1
    if main.t1 < total:
        ticks.append(total)
    last_label_end = -1e9
    for t in ticks:
        x = scale.x(t)
        px = _pct(x, width)
        out.append(
            f'<line x1="{px}" y1="{_TOP - 6}" x2="{px}" y2="{plot_bottom}" stroke="#343a40"/>'
        )
        text = _tick_label(t, step, in_seconds)
        w = len(text) * _CHAR_W
        anchor = "start" if x - w / 2 < left else ("end" if x + w / 2 > right else "middle")
        start_x = x if anchor == "start" else (x - w if anchor == "end" else x - w / 2)
        if start_x < last_label_end + 6:
            continue  # would overlap the previous label
        last_label_end = start_x + w
        out.append(
            f'<text x="{px}" y="{plot_bottom + 16}" text-anchor="{anchor}" fill="#b8bec6">'
            f"{_xml(text)}</text>"
        )
    out.append(
        f'<line class="axis" x1="{_pct(left, width)}" y1="{plot_bottom}" '
        f'x2="{_pct(right, width)}" y2="{plot_bottom}" stroke="#8b949e"/>'
    )
    out += _legend(width, plot_bottom + 30)
    out.append(
        f'<text x="{_pct(right, width)}" y="{plot_bottom + 30}" text-anchor="end" '
        f'fill="#b8bec6">{_xml("run total " + fmt_duration(total))}</text>'
    )
    return out


def _bars(bars: Sequence[TimelineBar], slowest: CallRecord | None, width: int) -> list[str]:
    """One bar per call, with its full call as a hover title; its label is offset in px
    (``dx``) from the bar's edge (a percentage)."""
    out: list[str] = []
    for bar in bars:
        call = bar.call
        state = "ok" if call.ok else "failed"
        is_slowest = call is slowest
        fill = _FAILED if not call.ok else (_SLOWEST if is_slowest else _OK)
        y = _TOP + bar.lane * _LANE_H + (_LANE_H - _BAR_H) / 2
        end = call.start_s + call.duration_s
        tip = (
            f"{call_line(call)}\nstarted +{fmt_duration(call.start_s)}, "
            f"ended +{fmt_duration(end)}, call #{call.id}"
        )
        cls = f"call {state}" + (" slowest" if is_slowest else "")
        stroke = ' stroke="#e8eaed" stroke-width="1.5"' if is_slowest else ""
        text_fill = "#fff" if bar.label_inside else "#e8eaed"
        weight = ' font-weight="bold"' if is_slowest else ""
        out.append(
            f"<g><title>{_xml(tip)}</title>"
            f'<rect class="{cls}" data-call-id="{call.id}" x="{_pct(bar.x0, width)}" '
            f'y="{y:.1f}" width="{_pct(bar.x1 - bar.x0, width)}" height="{_BAR_H}" rx="2" '
            f'fill="{fill}"{stroke}/>'
            f'<text x="{_pct(bar.label_edge, width)}" dx="{bar.label_dx}" '
            f'y="{y + _BAR_H - 4:.1f}" text-anchor="{bar.label_anchor}" fill="{text_fill}"'
            f"{weight}>{_xml(bar.label)}</text></g>"
        )
    return out
