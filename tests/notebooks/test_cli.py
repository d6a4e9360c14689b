"""kernelgate replay / timeline, and run --record, as a user runs them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from kernelgate.cli import main
from kernelgate.demo import DEMO_PROGRAM

PROGRAM = """\
import asyncio
hits = await tools.search("kernel messages")
docs = await asyncio.gather(*(tools.fetch(h["id"]) for h in hits))
print([d["stars"] for d in docs])
"""


def kernelgate(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kernelgate.cli", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=50,
    )


def test_record_replay_timeline_end_to_end(tmp_path: Path) -> None:
    (tmp_path / "prog.py").write_text(PROGRAM)
    run = kernelgate(
        "run",
        "prog.py",
        "--bindings",
        "kernelgate.demo:BINDINGS",
        "--record",
        "r.ipynb",
        cwd=tmp_path,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout == "[188, 412]\n"
    replayed = kernelgate("replay", "r.ipynb", cwd=tmp_path)
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    assert "calls: 3 matched of 3 recorded" in replayed.stdout
    assert replayed.stdout.rstrip().endswith(
        "MATCHES: same calls with the same answers, same status, stdout, stderr and value"
    )
    drawn = kernelgate("timeline", "r.ipynb", "-o", "r.svg", cwd=tmp_path)
    assert drawn.returncode == 0, drawn.stderr
    assert drawn.stdout.startswith("wrote r.svg: call timeline: 3 calls over ")
    root = ET.parse(tmp_path / "r.svg").getroot()
    rects = [
        e
        for e in root.iter("{http://www.w3.org/2000/svg}rect")
        if e.get("class", "").startswith("call")
    ]
    assert len(rects) == 3


def test_replay_exit_codes_and_json(saved_demo: Path, tmp_path: Path, capsys) -> None:
    assert main(["replay", str(saved_demo)]) == 0
    assert "MATCHES" in capsys.readouterr().out

    edited = tmp_path / "edited.py"
    edited.write_text(DEMO_PROGRAM.replace('"no-such-doc"', '"nbformat"'))
    assert main(["replay", str(saved_demo), "--program", str(edited)]) == 1
    out = capsys.readouterr().out
    assert "+ tools.fetch('nbformat')" in out and "- tools.fetch('no-such-doc')" in out
    assert "DIVERGED" in out

    assert main(["replay", str(saved_demo), "--program", str(edited), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["diverged"] is True
    assert [c["args"] for c in report["unrecorded"]] == [["nbformat"]]
    assert [c["args"] for c in report["unused"]] == [["no-such-doc"]]


def test_replay_live_against_real_bindings(saved_demo: Path, capsys) -> None:
    code = main(["replay", str(saved_demo), "--live", "--bindings", "kernelgate.demo:BINDINGS"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "live bindings" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--live"], "--live needs --bindings MODULE:ATTR"),
        (["--bindings", "kernelgate.demo:BINDINGS"], "--bindings is only used with --live"),
        (["--cell", "2"], "has no run 2"),
        (["--program", "/nonexistent/p.py"], "cannot read program '/nonexistent/p.py'"),
    ],
)
def test_replay_usage_errors_exit_2(saved_demo: Path, capsys, args, message) -> None:
    assert main(["replay", str(saved_demo), *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("kernelgate: error: ") and message in err


def test_replay_and_timeline_refuse_files_that_are_not_runs(tmp_path: Path, capsys) -> None:
    prog = tmp_path / "prog.py"
    prog.write_text(PROGRAM)
    assert main(["replay", str(prog)]) == 2
    assert "is not a notebook: it is not JSON" in capsys.readouterr().err
    assert main(["timeline", str(tmp_path / "missing.ipynb")]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_timeline_defaults_and_stdout(saved_demo: Path, capsys) -> None:
    assert main(["timeline", str(saved_demo)]) == 0
    svg = saved_demo.with_suffix(".svg")
    assert capsys.readouterr().out.startswith(f"wrote {svg}: ")
    ET.parse(svg)
    assert main(["timeline", str(saved_demo), "-o", "-"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("<svg") and ET.fromstring(out) is not None


def test_session_cell_from_the_command_line(tmp_path: Path, demo_run, capsys) -> None:
    from kernelgate.notebooks import SessionLog

    log = SessionLog(tmp_path / "s.ipynb")
    log.append(demo_run)
    log.append(demo_run)
    assert main(["replay", str(log.path)]) == 0  # every run, with one summary
    assert "replayed 2 runs of" in capsys.readouterr().out
    assert main(["timeline", str(log.path)]) == 2  # one picture: which run?
    assert "--cell N, --cell-id ID, --position P" in capsys.readouterr().err
    assert main(["replay", str(log.path), "--cell", "2"]) == 0
    assert main(["timeline", str(log.path), "--cell", "-1"]) == 0
    assert os.path.exists(tmp_path / "s-run2.svg")
