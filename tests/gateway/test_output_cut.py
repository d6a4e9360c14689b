"""Stream output kept head and tail: the marker says exactly what is not there.

The collector alone, with any sequence of writes to both streams among outputs and calls
(hypothesis); the whole runs through real children are in test_output_runs.py.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from kernelgate.gateway.output import OutputCollector, RunOutput, truncation_marker
from kernelgate.model.limits import Limits
from kernelgate.model.result import CallRecord

_TEXT = st.text(alphabet=st.sampled_from("ab\n é€😀"), min_size=1, max_size=40)
_STEP = st.one_of(
    st.tuples(st.sampled_from(["stdout", "stderr"]), _TEXT),
    st.just(("display", "")),
    st.just(("call", "")),
)


def _split(collector: OutputCollector, name: str) -> tuple[str, str]:
    """The stream's kept head and tail, the marker checked and taken out."""
    text = collector.text(name)
    cut = collector.cuts().get(name)
    if cut is None:
        return text, ""
    marker = collector.marker() if collector.marker_stream == name else ""
    assert text[cut.at : cut.at + len(marker)] == marker
    return text[: cut.at], text[cut.at + len(marker) :]


@settings(max_examples=300, deadline=None)
@given(limit=st.integers(0, 60), steps=st.lists(_STEP, max_size=40))
def test_what_is_kept_is_a_head_and_a_tail_and_the_marker_counts_the_rest(
    limit: int, steps: list[tuple[str, str]]
) -> None:
    collector = OutputCollector(limit)
    written = {"stdout": "", "stderr": ""}
    calls: list[CallRecord] = []
    displays: list[dict[str, Any]] = []
    for kind, text in steps:
        if kind in written:
            collector.add_text(kind, text)
            written[kind] += text
        elif kind == "display":
            displays.append({"output_type": "display_data", "data": {"text/plain": "d"}})
            collector.add_output(displays[-1])
        else:
            calls.append(CallRecord(id=len(calls), namespace="t", name="f", args=[], kwargs={}))
            collector.place(calls[-1])
        assert collector._ring_bytes <= collector.tail_limit  # memory stays bounded
    kept_bytes = 0
    for name, whole in written.items():
        head, tail = _split(collector, name)
        cut = collector.cuts().get(name)
        assert whole.startswith(head) and whole.endswith(tail)
        kept_bytes += len((head + tail).encode())
        if cut is None:
            assert head == whole
            continue
        dropped = whole[len(head) : len(whole) - len(tail)]
        assert len(head) + len(dropped) + len(tail) == len(whole)
        assert (cut.chars, cut.bytes, cut.lines) == (
            len(dropped),
            len(dropped.encode()),
            dropped.count("\n"),
        )
        assert cut.chars > 0
    assert kept_bytes <= limit
    # The outputs show the same text, the marker once, the displays in order.
    outputs = collector.outputs
    for name in written:
        shown = "".join(
            o["text"] for o in outputs if o["output_type"] == "stream" and o["name"] == name
        )
        assert shown == collector.text(name)
    marker = collector.marker()
    assert sum(o.get("text") == marker for o in outputs) == (1 if collector.truncated else 0)
    assert [o for o in outputs if o["output_type"] == "display_data"] == displays
    indexes = [c.output_index for c in calls]
    assert indexes == sorted(indexes) and all(0 <= i <= len(outputs) for i in indexes)


@given(lines=st.integers(0, 3000))
def test_the_last_line_is_always_kept(lines: int) -> None:
    collector = OutputCollector(1000)
    for i in range(lines):
        collector.add_text("stdout", f"{i:06d}\n")
    collector.add_text("stdout", "FINAL ANSWER: 42\n")
    text = collector.text("stdout")
    assert text.endswith("FINAL ANSWER: 42\n")
    if lines > 0:
        assert text.startswith("000000\n")
    if collector.truncated:
        cut = collector.cuts()["stdout"]
        assert text.count("[kernelgate:") == 1
        # Cuts fall on line breaks: the dropped text is whole lines.
        assert cut.chars == 7 * cut.lines


def test_a_call_and_a_display_in_the_dropped_middle_stay_in_order_around_the_marker() -> None:
    out = RunOutput(Limits(max_output_bytes=20))
    out.stream("stdout", "head line\n")  # 10 bytes: the head is full
    out.stream("stdout", "dropped 1\n")
    call = CallRecord(id=1, namespace="t", name="f", args=[], kwargs={})
    out.place_call(call)
    out.stream("stdout", "dropped 2\n")
    out.stream("stdout", "tail line\n")
    cuts = out.collector.cuts()
    marker = truncation_marker(20, cuts)
    assert cuts["stdout"].lines == 2
    assert [o["text"] for o in out.outputs] == ["head line\n", marker, "tail line\n"]
    assert call.output_index == 1  # the call came before the last text dropped
    out.clear(wait=False)
    out.stream("stdout", "after\n")
    assert [o["text"] for o in out.outputs] == ["after\n"]
    # "after" pushed out what was left of "tail line" (a cut moves on to a line break)
    cuts = out.collector.cuts()
    assert cuts["stdout"].lines == 3
    assert out.collector.text("stdout") == "head line\n" + truncation_marker(20, cuts) + "after\n"
