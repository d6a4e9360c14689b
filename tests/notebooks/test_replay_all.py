"""Replay shows everything (issue 10, item 7): a call the recording lacks raises ToolError
NotRecorded for that call only and the replay goes on, so every difference of an edited
program is listed; the text and the JSON report count the same differences."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from kernelgate import Gateway, Limits, save_run
from kernelgate.cli import main
from kernelgate.demo import BINDINGS
from kernelgate.notebooks import replay
from kernelgate.notebooks.replay import ReplayReport

from .conftest import FAST

#: Five calls, each answer used; every call guarded, as an agent's program often is.
RECORDED = """\
out = []
for q in ["messages", "notebook", "sandbox"]:
    try:
        out.append(len(await tools.search(q, limit=2)))
    except ToolError as exc:
        out.append(exc.ename)
for doc in ["comms", "nbformat"]:
    try:
        out.append((await tools.fetch(doc))["stars"])
    except ToolError as exc:
        out.append(exc.ename)
print(out)
return out
"""

#: Three calls changed (the first, a middle one, the last): each is reported, and the
#: unchanged calls between them are still answered from the recording.
EDITED = (
    RECORDED.replace('["messages", "notebook", "sandbox"]', '["messages", "notebooks", "sandbox"]')
    .replace("limit=2", "limit=2 if q != 'messages' else 3")
    .replace('["comms", "nbformat"]', '["comms", "asyncio"]')
)


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> Path:
    result = Gateway(bindings=BINDINGS, limits=FAST).run_sync(RECORDED)
    assert result.ok, result.message
    assert len(result.calls) == 5
    return save_run(result, tmp_path_factory.mktemp("rec") / "run.ipynb")


def counted(report: ReplayReport) -> tuple[int, int, int]:
    """The count the text gives, the JSON gives, and the report's own."""
    found = re.search(r"DIVERGED: (\d+) differences? from the recording", report.format())
    assert found is not None, report.format()
    return int(found.group(1)), report.to_dict()["counts"]["differences"], report.difference_count


def test_every_changed_call_of_an_edited_program_is_listed(recording: Path) -> None:
    report = replay(recording, program=EDITED, limits=FAST)
    assert [(c.name, c.args, c.kwargs) for c in report.unrecorded] == [
        ("search", ["messages"], {"limit": 3}),
        ("search", ["notebooks"], {"limit": 2}),
        ("fetch", ["asyncio"], {}),
    ]
    # each of them, and only them, raised NotRecorded in the program
    assert all(c.error is not None and c.error.ename == "NotRecorded" for c in report.unrecorded)
    assert report.result.value == ["NotRecorded", "NotRecorded", 1, 188, "NotRecorded"]
    # the calls after the first difference were still answered from the recording
    assert sorted((m.replayed.name, *m.replayed.args) for m in report.matched) == [
        ("fetch", "comms"),
        ("search", "sandbox"),
    ]
    assert [(c.name, c.args) for c in report.unused] == [
        ("search", ["messages"]),
        ("search", ["notebook"]),
        ("fetch", ["nbformat"]),
    ]
    assert [d.field for d in report.differences] == ["stdout", "value"]
    assert report.stopped_at_unrecorded is None
    # 3 calls not recorded + 3 recorded calls never made + stdout + value
    assert counted(report) == (8, 8, 8)
    text = report.format()
    assert "in all: 3 calls not in the recording; 3 recorded calls never made; " in text
    assert "2 differences in stdout, value" in text
    counts = report.to_dict()["counts"]
    assert (counts["unrecorded"], counts["unused"], counts["outcome_differences"]) == (3, 3, 2)


def test_a_program_that_lets_not_recorded_go_is_said_to_end_there(recording: Path) -> None:
    unguarded = "n = len(await tools.search('messages', limit=9))\nreturn n"
    report = replay(recording, program=unguarded, limits=FAST)
    stop = report.stopped_at_unrecorded
    assert stop is not None and (stop.name, stop.kwargs) == ("search", {"limit": 9})
    assert report.to_dict()["stopped_at_unrecorded"]["kwargs"] == {"limit": 9}
    assert (
        "+ tools.search('messages', limit=9)\n"
        "      the program ended here: it did not catch this ToolError"
    ) in report.format()
    assert counted(report) == (1 + 5 + 3,) * 3  # + status, stdout, value


def test_the_recorded_program_matches_with_no_differences(recording: Path) -> None:
    report = replay(recording, limits=FAST)
    assert report.ok and report.difference_count == 0
    assert report.to_dict()["counts"]["differences"] == 0
    assert report.format().endswith(
        "MATCHES: same calls with the same answers, same status, stdout, stderr and value"
    )


def test_live_replay_refuses_only_the_calls_the_recording_lacks(recording: Path) -> None:
    report = replay(recording, program=EDITED, live=BINDINGS, limits=FAST)
    assert [c.args for c in report.unrecorded] == [["messages"], ["notebooks"], ["asyncio"]]
    assert len(report.matched) == 2 and not report.changed
    assert counted(report) == (8, 8, 8)


def test_the_command_counts_as_the_json_does(
    recording: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Before: "DIVERGED: 10 differences" in the text, "differences": 3 in --json.
    edited = tmp_path / "edited.py"
    edited.write_text(EDITED)
    assert main(["replay", str(recording), "--program", str(edited)]) == 1
    text = capsys.readouterr().out
    assert main(["replay", str(recording), "--program", str(edited), "--json"]) == 1
    counts = json.loads(capsys.readouterr().out)["counts"]
    assert "DIVERGED: 8 differences from the recording" in text
    assert counts["differences"] == 8


def test_replay_limits_come_from_the_command_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    big = Limits(max_value_bytes=1 << 20, wall_seconds=30)
    recorded = Gateway(limits=big).run_sync("return 'z' * 100_000")
    assert recorded.ok, recorded.message
    path = save_run(recorded, tmp_path / "big.ipynb")
    # the recording's limits are never applied: by default the value is over budget
    assert main(["replay", str(path), "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["replay"]["status"] == "output_limit"
    assert main(["replay", str(path), "--limit", "max_value_bytes=1M"]) == 0
    assert "MATCHES" in capsys.readouterr().out
    with pytest.raises(SystemExit) as stopped:  # argparse refuses it: usage, exit 2
        main(["replay", str(path), "--limit", "max_value_bytes=many"])
    assert stopped.value.code == 2
    assert "argument --limit: max_value_bytes" in capsys.readouterr().err
