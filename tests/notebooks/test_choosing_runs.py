"""Which run a replay takes, and how long it may take: every run of a session log by
default with one summary, a run chosen by number, cell id or position, and a budget that
follows the recording (issue 19, "Recordings that never lie")."""

from __future__ import annotations

import json
import time
from pathlib import Path

import nbformat
import pytest

from kernelgate import Gateway, Limits
from kernelgate.notebooks import NotARunError, SessionLog, load_run, load_runs, replay

from .conftest import FAST
from .test_cli import kernelgate

pytestmark = pytest.mark.timeout(120)

SPIN = "x = 0\nwhile True:\n    x += 1\n"


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A session log of three runs: a value, a call, and a loop stopped at 1 s."""
    path = tmp_path_factory.mktemp("session") / "session.ipynb"
    log = SessionLog(str(path))
    with Gateway(bindings={"add": lambda a, b: a + b}, limits=FAST) as gw:
        log.append(gw.run_sync("return 1"))
        log.append(gw.run_sync("print(await tools.add(1, 2))"))
        stopped = gw.run_sync(SPIN, limits=Limits(wall_seconds=1, kill_grace_seconds=0.5))
        assert stopped.status == "timeout"
        log.append(stopped)
    return path


def test_replay_without_a_choice_replays_every_run_with_one_summary(session: Path) -> None:
    p = kernelgate("replay", str(session), cwd=session.parent)
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.count("MATCHES") == 3
    assert p.stdout.rstrip().endswith(f"replayed 3 runs of {session}: 3 matched, 0 diverged")
    p = kernelgate("replay", str(session), "--json", cwd=session.parent)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["diverged"] is False and len(out["runs"]) == 3
    assert [r["run_number"] for r in out["runs"]] == [1, 2, 3]


def test_one_run_that_diverges_or_cannot_be_read_fails_the_summary(
    session: Path, tmp_path: Path
) -> None:
    nb = nbformat.read(session, as_version=4)
    runs = [c for c in nb.cells if c.cell_type == "code"]
    runs[0].source = "return 2"  # a session log's cell is its program: it now diverges
    runs[1].outputs = []  # outputs cleared: this run cannot be replayed
    edited = tmp_path / "edited.ipynb"
    nbformat.write(nb, edited)
    assert isinstance(load_runs(edited)[1], NotARunError)
    p = kernelgate("replay", str(edited), cwd=tmp_path)
    assert p.returncode == 1
    assert "cannot replay:" in p.stdout and "outputs were cleared" in p.stdout
    assert p.stdout.rstrip().endswith("1 matched, 1 diverged, 1 could not be replayed")
    p = kernelgate("replay", str(edited), "--program", str(edited), cwd=tmp_path)
    assert p.returncode == 2 and "choose it with --cell N" in p.stderr


def test_a_stopped_run_replays_within_its_recorded_time_not_the_default_budget(
    session: Path, tmp_path: Path
) -> None:
    started = time.monotonic()
    report = replay(session, cell=3)
    took = time.monotonic() - started
    assert report.ok, report.format()
    assert report.result.status == "timeout" and report.result.limits["wall_seconds"] < 5
    assert took < 20  # the default budget is 600 s of wall clock and 60 s of CPU
    assert "stopped again, as recorded" in report.format()
    # Interrupted in a kernel (Jupyter's stop button): the same, by the recorded duration.
    nb = json.loads(session.read_text())
    cell = [c for c in nb["cells"] if c["cell_type"] == "code"][2]
    cell["metadata"]["kernelgate"]["status"] = "interrupted"
    interrupted = tmp_path / "interrupted.ipynb"
    interrupted.write_text(json.dumps(nb))
    report = replay(interrupted, cell=3)
    assert report.ok and report.result.limits["wall_seconds"] < 5, report.format()
    # The caller's limits still win.
    report = replay(session, cell=3, limits=Limits(wall_seconds=0.5, kill_grace_seconds=0.5))
    assert report.result.limits["wall_seconds"] == 0.5 and report.note == ""


def test_a_run_is_chosen_by_cell_id_or_position(session: Path) -> None:
    nb = nbformat.read(session, as_version=4)
    positions = [i + 1 for i, c in enumerate(nb.cells) if c.cell_type == "code"]
    second = [c for c in nb.cells if c.cell_type == "code"][1]
    assert load_run(session, cell_id=second.id).stdout == "3\n"
    assert load_run(session, position=positions[1]).stdout == "3\n"
    with pytest.raises(NotARunError, match="markdown cell, not a run"):
        load_run(session, position=1)
    with pytest.raises(NotARunError, match="no cell with id 'nope'"):
        load_run(session, cell_id="nope")
    with pytest.raises(TypeError, match="not by cell and position"):
        load_run(session, cell=1, position=2)
    p = kernelgate("replay", str(session), "--cell-id", second.id, cwd=session.parent)
    assert p.returncode == 0 and "run 2" in p.stdout, p.stdout + p.stderr
    p = kernelgate("timeline", str(session), "--position", str(positions[1]), "-o", "-",
                   cwd=session.parent)
    assert p.returncode == 0 and p.stdout.count('class="call') == 1, p.stderr
