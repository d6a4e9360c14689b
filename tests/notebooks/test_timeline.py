"""The call timeline: well-formed SVG, one bar per call, concurrent calls on their own lanes."""

from __future__ import annotations

import asyncio
import xml.etree.ElementTree as ET
from typing import Any

from kernelgate import CallRecord, Gateway, RunResult
from kernelgate.gateway.recording.timeline import _CHAR_W, MIN_WIDTH, _plot, layout, max_in_flight
from kernelgate.notebooks import run_to_notebook, timeline_summary, timeline_svg
from kernelgate.notebooks.render import timeline_svg_of

from .conftest import FAST

SVG = "{http://www.w3.org/2000/svg}"


def bars(svg_text: str) -> list[ET.Element]:
    root = ET.fromstring(svg_text)  # well-formed XML or this raises
    assert root.tag == f"{SVG}svg"
    return [e for e in root.iter(f"{SVG}rect") if e.get("class", "").split()[:1] == ["call"]]


def length(value: str | None) -> float:
    """An SVG length as a number: x and widths along the time axis are percentages of the
    drawing's width (it follows the space it is shown in), y are px."""
    assert value is not None
    return float(value.removesuffix("%"))


def span(bar: ET.Element) -> tuple[float, float, float]:
    x, w, y = length(bar.get("x")), length(bar.get("width")), length(bar.get("y"))
    return x, x + w, y


class Barrier:
    """``n`` calls that each return only once all ``n`` have started: they overlap for sure."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.started = 0
        self.all_in: asyncio.Event | None = None

    async def work(self, key: str) -> str:
        if self.all_in is None:
            self.all_in = asyncio.Event()
        self.started += 1
        if self.started == self.n:
            self.all_in.set()
        await self.all_in.wait()
        return key.upper()


def parallel_run() -> RunResult:
    barrier = Barrier(3)
    program = (
        "import asyncio\n"
        "first = await tools.note('before')\n"
        "got = await asyncio.gather(*(tools.work(k) for k in 'abc'))\n"
        "last = await tools.note('after')\n"
        "got\n"
    )
    r = Gateway(bindings={"work": barrier.work, "note": lambda s: s}, limits=FAST).run_sync(program)
    assert r.ok and r.value == ["A", "B", "C"], r.message
    return r


def test_svg_is_well_formed_with_one_bar_per_call(demo_run: RunResult) -> None:
    found = bars(timeline_svg(demo_run))
    assert len(found) == len(demo_run.calls) == 5
    assert sorted(int(b.get("data-call-id")) for b in found) == [c.id for c in demo_run.calls]
    failed = [b for b in found if "failed" in b.get("class").split()]
    assert len(failed) == 1  # fetch('no-such-doc')
    slowest = [b for b in found if "slowest" in b.get("class").split()]
    assert len(slowest) == 1
    slow_call = max(demo_run.calls, key=lambda c: c.duration_s)
    assert int(slowest[0].get("data-call-id")) == slow_call.id


def test_bars_sit_on_the_run_axis_with_labels_and_titles(demo_run: RunResult) -> None:
    text = timeline_svg(demo_run)
    root = ET.fromstring(text)
    assert root.get("width") == "100%" and root.get("viewBox") is None  # text never scales
    width = 100.0
    for bar in bars(text):
        x0, x1, _ = span(bar)
        assert 0 <= x0 < x1 <= width
    groups = [g for g in root.iter(f"{SVG}g") if g.find(f"{SVG}rect") is not None]
    titles = [g.find(f"{SVG}title").text for g in groups]
    assert any(t.startswith("tools.search('messages', limit=3) -> [2 items]") for t in titles)
    labels = [g.find(f"{SVG}text").text for g in groups]
    assert any(label.startswith("fetch('no-such-doc')") and "KeyError" in label for label in labels)
    assert "run total" in text


def test_concurrent_calls_get_separate_lanes() -> None:
    r = parallel_run()
    assert max_in_flight(r.calls) == 3
    found = {int(b.get("data-call-id")): span(b) for b in bars(timeline_svg(r))}
    work = [c.id for c in r.calls if c.name == "work"]
    lanes = {found[i][2] for i in work}
    assert len(lanes) == 3  # all three ran at once: three lanes
    for i in work:  # and their bars overlap in time
        for j in work:
            assert found[i][0] < found[j][1]
    assert "at most 3 at once" in timeline_summary(r)


def test_layout_never_puts_overlapping_bars_or_labels_in_one_lane() -> None:
    calls = [
        CallRecord(i, "tools", "step", [i], {}, ok=True, start_s=i * 0.01, duration_s=0.004)
        for i in range(40)
    ] + [CallRecord(40, "tools", "long", [], {}, ok=True, start_s=0.0, duration_s=0.4)]
    placed, lanes = layout(calls, 0.41)
    assert lanes >= 2
    for a in placed:
        for b in placed:
            if a is not b and a.lane == b.lane:
                assert a.x1 <= b.x0 or b.x1 <= a.x0
    svg = timeline_svg(calls, duration_s=0.41)
    assert len(bars(svg)) == 41


def test_hostile_text_stays_well_formed() -> None:
    calls = [
        CallRecord(
            0,
            "tools",
            "q",
            ["</svg><script>&\x01\ufffe"],
            {"k": "\"'<>"},
            ok=False,
            start_s=0.0,
            duration_s=0.1,
        ),
    ]
    calls[0].error = __import__("kernelgate").ErrorInfo("Bad<Error>", "\x00 & <b>")
    assert len(bars(timeline_svg(calls, duration_s=0.2))) == 1


def test_no_calls_still_draws_an_axis() -> None:
    r = RunResult("ok", duration_s=0.25)
    text = timeline_svg(r)
    assert bars(text) == [] and "no binding calls" in text


def test_one_call_is_named_in_the_heading_not_called_no_calls() -> None:
    call = CallRecord(0, "tools", "search", ["x"], {}, ok=True, start_s=0.01, duration_s=0.02)
    text = timeline_svg(RunResult("ok", duration_s=0.1, calls=[call]))
    heading = [t.text for t in ET.fromstring(text).iter(f"{SVG}text")][1]
    assert heading is not None and heading.startswith("1 call · tools.search(")
    assert "no binding calls" not in text and len(bars(text)) == 1


def test_timeline_is_embedded_in_the_saved_notebook(demo_run: RunResult) -> None:
    cell = run_to_notebook(demo_run).cells[0]
    pictures = [o for o in cell.outputs if timeline_svg_of(o) is not None]
    assert len(pictures) == 1 and pictures[0] is cell.outputs[-1]
    data: dict[str, Any] = pictures[0].data
    # An <img> in text/html: it renders in an untrusted notebook, where SVG is refused.
    assert "image/svg+xml" not in data and data["text/html"].startswith("<img ")
    assert len(bars(timeline_svg_of(pictures[0]) or "")) == 5
    assert data["text/plain"].startswith("call timeline: 5 calls over ")


def test_text_keeps_its_size_and_labels_fit_at_the_narrowest_width() -> None:
    """No viewBox (it would scale the text with the drawing), x in percentages, and every
    label inside the drawing at MIN_WIDTH (estimated at 11 px monospace; the browser test
    tests/kernel/test_run_record_browser.py measures the drawn text)."""
    calls = [
        CallRecord(0, "tools", "long", ["x" * 80], {"k": "y" * 40}, ok=True, duration_s=0.4),
        CallRecord(1, "web", "search", ["q " * 40], {}, ok=True, start_s=0.2, duration_s=0.002),
        CallRecord(2, "tools", "f", ["z" * 60], {}, ok=False, start_s=0.45, duration_s=0.01),
    ]
    root = ET.fromstring(timeline_svg(calls, duration_s=0.46))
    assert root.get("viewBox") is None and root.get("width") == "100%"
    assert root.get("font-size") == "11"
    left, right = _plot(MIN_WIDTH)
    placed, _ = layout(calls, 0.46)
    for bar in placed:
        w = len(bar.label) * _CHAR_W
        start = bar.label_x - (w if bar.label_anchor == "end" else 0)
        assert left - 0.01 <= start and start + w <= right + 0.01, (bar.label, start, w)
    shortened = next(b for b in placed if b.call.id == 1)
    assert shortened.label.endswith("2.0 ms") and "…" in shortened.label  # the call is cut
