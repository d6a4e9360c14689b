"""replay: the recorded program in a fresh child, answered from the recording."""

from __future__ import annotations

import hashlib
import inspect
import json
from pathlib import Path
from typing import Any

import pytest

from kernelgate import Gateway, RunResult, save_run
from kernelgate.demo import BINDINGS, DEMO_PROGRAM
from kernelgate.notebooks import CALL_MIME, load_run, replay
from kernelgate.notebooks.replay import match_calls, recorded_bindings, signature_from_text

from .conftest import FAST, Ordered


def test_demo_replays_without_divergence(saved_demo: Path, demo_run: RunResult) -> None:
    report = replay(saved_demo)
    assert report.diverged is False and report.ok
    assert len(report.matched) == 5 and not report.unrecorded and not report.unused
    assert report.result.stdout == demo_run.stdout
    assert report.result.value == demo_run.value
    assert "MATCHES" in report.format()
    # the failed recorded call failed the same way in the replay
    failed = [m for m in report.matched if not m.recorded.ok]
    assert len(failed) == 1 and failed[0].replayed.error.ename == "KeyError"


def test_replay_needs_no_live_bindings(saved_demo: Path) -> None:
    # the stand-ins are generated from the recording: nothing from kernelgate.demo runs
    namespaces, _ = recorded_bindings(load_run(saved_demo))
    assert set(namespaces["tools"]) == {"search", "fetch", "compute"}
    for fn in namespaces["tools"].values():
        assert fn.__module__ == "kernelgate.notebooks.replay"
    recorded = load_run(saved_demo).bindings["tools"]["search"]
    assert str(inspect.signature(namespaces["tools"]["search"])) == recorded
    assert list(inspect.signature(namespaces["tools"]["search"]).parameters) == [
        "query",
        "limit",
    ]


def reverse_recorded_order(path: Path) -> None:
    """Rewrite a saved run so its calls arrived in the opposite order (ids and starts)."""
    nb = json.loads(path.read_text())
    outs = [o for o in nb["cells"][0]["outputs"] if CALL_MIME in o.get("data", {})]
    calls = [o["data"][CALL_MIME] for o in outs]
    ids = [c["id"] for c in calls]
    starts = [c["start_s"] for c in calls]
    for c, new_id, new_start in zip(calls, reversed(ids), reversed(starts), strict=True):
        c["id"] = new_id
        c["start_s"] = new_start
    path.write_text(json.dumps(nb))


def test_gather_replays_when_recorded_arrival_order_differs(
    tmp_path: Path, gather_run: RunResult
) -> None:
    path = save_run(gather_run, tmp_path / "gather.ipynb")
    # The calls as the notebook lists them: by completion, which for gathered calls to
    # threaded bindings need not be their issue order. The reversal hands out their ids
    # in reverse of this listing.
    nb = json.loads(path.read_text())
    outputs = nb["cells"][0]["outputs"]
    listed = [o["data"][CALL_MIME] for o in outputs if CALL_MIME in o.get("data", {})]
    renumbered = sorted(
        zip([c["id"] for c in reversed(listed)], listed, strict=True), key=lambda p: p[0]
    )
    expected = [c["args"][0] for _, c in renumbered if c["name"] == "fetch"]
    issued = [c.args[0] for c in sorted(gather_run.calls, key=lambda c: c.id) if c.name == "fetch"]
    reverse_recorded_order(path)
    recorded = sorted(load_run(path).calls, key=lambda c: c.id)
    fetches = [c.args[0] for c in recorded if c.name == "fetch"]
    assert fetches == expected and fetches != issued  # the recording now says another order
    report = replay(path)
    assert report.diverged is False, report.format()
    assert len(report.matched) == len(gather_run.calls)
    for m in report.matched:
        assert (m.recorded.name, m.recorded.args) == (m.replayed.name, m.replayed.args)


def test_gather_recorded_out_of_completion_order_replays(tmp_path: Path) -> None:
    ordered = Ordered()
    program = (
        "import asyncio\n"
        "a, b = await asyncio.gather(tools.slow('a'), tools.fast('b'))\n"
        "print(a, b)\n"
        "[a['from'], b['from']]\n"
    )
    r = Gateway(bindings=ordered.bindings(), limits=FAST).run_sync(program)
    assert r.ok, r.message
    slow, fast = r.calls  # issued slow first ...
    assert slow.name == "slow" and fast.name == "fast"
    assert fast.start_s + fast.duration_s <= slow.start_s + slow.duration_s  # ... done last
    report = replay(save_run(r, tmp_path / "ordered.ipynb"))
    assert report.diverged is False, report.format()
    assert report.result.value == ["slow", "fast"]


def test_equal_calls_get_answers_by_occurrence(tmp_path: Path) -> None:
    counter = {"n": 0}

    def next_id(prefix: str) -> str:
        counter["n"] += 1
        return f"{prefix}-{counter['n']}"

    program = (
        "import asyncio\n"
        "x = await tools.next_id('a')\n"
        "y, z = await asyncio.gather(tools.next_id('b'), tools.next_id('a'))\n"
        "print(x, y, z)\n"
    )
    r = Gateway(bindings={"next_id": next_id}).run_sync(program)
    assert r.stdout == "a-1 b-2 a-3\n"
    report = replay(save_run(r, tmp_path / "ids.ipynb"))
    assert report.diverged is False, report.format()
    assert report.result.stdout == "a-1 b-2 a-3\n"


def test_edited_program_reports_the_exact_diverging_call(saved_demo: Path) -> None:
    edited = DEMO_PROGRAM.replace('tools.compute("mean", stars)', 'tools.compute("median", stars)')
    assert edited != DEMO_PROGRAM
    report = replay(saved_demo, program=edited)
    assert report.diverged and report.program_edited
    assert [(c.name, c.args, c.kwargs) for c in report.unrecorded] == [
        ("compute", ["median", [188, 412]], {})
    ]
    # the program stopped at the ToolError, so its last call was never made either
    assert [(c.name, c.args) for c in report.unused] == [
        ("compute", ["mean", [188, 412]]),
        ("fetch", ["no-such-doc"]),
    ]
    assert len(report.matched) == 3
    # the program got ToolError NotRecorded at that call and stopped there
    assert report.result.status == "exception"
    assert "NotRecorded" in report.result.message and "compute('median'" in report.result.message
    fields = {d.field for d in report.differences}
    assert fields == {"status", "stdout", "value"}
    text = report.format()
    assert "+ tools.compute('median', [188, 412])" in text
    assert "- tools.compute('mean', [188, 412]) -> 300.0" in text
    assert text.rstrip().endswith("from the recording") and "DIVERGED" in text


def test_program_edited_in_the_notebook_is_replayed(saved_demo: Path) -> None:
    import nbformat

    nb = nbformat.read(saved_demo, as_version=4)
    nb.cells[0].source = nb.cells[0].source.replace('"no-such-doc"', '"other-doc"')
    nbformat.write(nb, saved_demo)  # as Jupyter saves it: sorted keys
    report = replay(saved_demo)
    assert [c.args for c in report.unrecorded] == [["other-doc"]]
    assert [c.args for c in report.unused] == [["no-such-doc"]]
    # the program catches the ToolError and goes on: only what it printed about it differs
    assert [d.field for d in report.differences] == ["stdout"]
    assert "-as expected, tools.fetch failed with KeyError" in report.differences[0].detail
    assert "+as expected, tools.fetch failed with NotRecorded" in report.differences[0].detail


def test_huge_value_replays_exactly(tmp_path: Path) -> None:
    rows = [{"n": i, "name": f"row {i}", "tags": ["a", "b"][: i % 3]} for i in range(30_000)]
    blob = "".join(chr(0x41 + i % 50) for i in range(1_500_000))

    def dump(kind: str) -> Any:
        return rows if kind == "rows" else blob

    program = (
        "import hashlib, json\n"
        "rows = await tools.dump('rows')\n"
        "blob = await tools.dump('blob')\n"
        "print(hashlib.sha256(json.dumps(rows).encode()).hexdigest())\n"
        "print(hashlib.sha256(blob.encode()).hexdigest(), len(rows), len(blob))\n"
    )
    r = Gateway(bindings={"dump": dump}).run_sync(program)
    assert r.ok, r.message
    want = hashlib.sha256(json.dumps(rows).encode()).hexdigest()
    assert r.stdout.startswith(want)
    path = save_run(r, tmp_path / "huge.ipynb")
    nb = json.loads(path.read_text())
    shown = [o["data"] for o in nb["cells"][0]["outputs"] if CALL_MIME in o.get("data", {})]
    assert all(len(d["text/plain"]) < 120 and len(d["text/html"]) < 12_000 for d in shown)
    report = replay(path)
    assert report.diverged is False, report.format()
    assert report.result.stdout == r.stdout


def test_live_mode_reports_answers_that_changed(saved_demo: Path) -> None:
    import asyncio

    async def search(query: str, limit: int = 3) -> list[dict[str, Any]]:
        hits = await BINDINGS["search"](query, limit)
        return hits[:1]  # the live service now finds less

    live = {**BINDINGS, "search": search}
    # The live service answers differently, so the program goes on to calls the recording
    # never held: allowed only with live_any (by default they are NotRecorded).
    report = replay(saved_demo, live={"tools": live}, live_any=True)
    assert report.live and report.diverged
    assert [(m.recorded.name, m.recorded.args) for m in report.changed] == [
        ("search", ["messages"])
    ]
    assert len(report.recorded.calls) == 5 and len(report.result.calls) == 4
    # with one hit, one fetch and a mean over one value: both differ from the recording
    assert [c.args for c in report.unused] == [["jupyter-protocol"], ["mean", [188, 412]]]
    assert [c.args for c in report.unrecorded] == [["mean", [188]]]
    assert "answered differently live" in report.format()
    changed = json.loads(json.dumps(report.to_dict()))["changed"]
    assert len(changed) == 1 and len(changed[0]["replayed"]["value"]) == 1
    assert len(changed[0]["recorded"]["value"]) == 2
    assert asyncio.iscoroutinefunction(search)
    same = replay(saved_demo, live=BINDINGS)  # a flat dict means namespace "tools"
    assert same.diverged is False, same.format()


def test_keyword_and_positional_forms_of_a_call_match(tmp_path: Path) -> None:
    r = Gateway(bindings=BINDINGS).run_sync("await tools.search('nbformat', limit=1)")
    path = save_run(r, tmp_path / "kw.ipynb")
    report = replay(path, program="await tools.search(query='nbformat', limit=1)")
    assert report.unrecorded == [] and report.unused == [] and len(report.matched) == 1
    assert report.diverged is False  # same call, same answer, same value


def test_replay_of_a_run_in_memory(demo_run: RunResult) -> None:
    report = replay(demo_run)
    assert report.diverged is False, report.format()
    assert report.source == ""


def test_report_to_dict_is_json(saved_demo: Path) -> None:
    report = replay(saved_demo, program=DEMO_PROGRAM.replace("limit=3", "limit=2"))
    d = json.loads(json.dumps(report.to_dict()))
    assert d["diverged"] is True and d["mode"] == "recorded" and d["program_edited"] is True
    assert d["counts"]["unrecorded"] == 1 and d["unrecorded"][0]["kwargs"] == {"limit": 2}
    assert d["counts"]["unused"] == 5  # search differs, so nothing after it was called


def test_match_calls_pairs_by_arguments_then_occurrence() -> None:
    from kernelgate import CallRecord

    rec = [CallRecord(i, "t", "f", [a], {}, ok=True, value=i) for i, a in enumerate("abab")]
    rep = [CallRecord(i, "t", "f", [a], {}, start_s=i) for i, a in enumerate("bbac")]
    pairs, unrecorded, unused = match_calls(rec, rep)
    assert [(r.id, p.id) for r, p in pairs] == [(1, 0), (3, 1), (0, 2)]
    assert [c.args for c in unrecorded] == [["c"]]
    assert [c.id for c in unused] == [2]


@pytest.mark.parametrize(
    "text",
    [
        "(query: str, limit: int = 3) -> list[dict[str, Any]]",
        "(query: 'str', limit: 'int' = 3) -> 'list'",
        "(a, /, b, *args, c=None, d: 'x' = 'y', **kw)",
        "(*args, **kwargs)",
        "()",
    ],
)
def test_signature_text_round_trips(text: str) -> None:
    sig = signature_from_text(text)
    assert sig is not None and str(sig) == text


def test_unparseable_signature_accepts_anything() -> None:
    assert signature_from_text("(a, b") is None
    sig = signature_from_text("(x, key=<object object at 0x7f>)")
    assert sig is not None and list(sig.parameters) == ["x", "key"]
