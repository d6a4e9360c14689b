"""SessionLog: one notebook per agent session, appended atomically, surviving kills."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import nbformat
import pytest

from kernelgate import RunResult, save_run
from kernelgate.notebooks import NotARunError, SessionLog, load_run, replay
from kernelgate.notebooks.store import run_result

from .conftest import demo_gateway

APPENDER = Path(__file__).with_name("appender.py")


def run_cells(path: Path) -> list[dict]:
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    return [c for c in nb.cells if c.cell_type == "code"]


@pytest.fixture(scope="module")
def session_runs() -> list[RunResult]:
    gw = demo_gateway()
    runs = [
        gw.run_sync("hits = await tools.search('notebook')\nprint(hits)\nlen(hits)"),
        gw.run_sync("await tools.fetch('notebook-format')"),  # fails: ToolError
        gw.run_sync("doc = await tools.fetch('nbformat')\ndoc['stars']"),
    ]
    assert [r.status for r in runs] == ["ok", "exception", "ok"]
    return runs


def test_session_log_holds_every_run_in_order(tmp_path: Path, session_runs) -> None:
    path = tmp_path / "session.ipynb"
    log = SessionLog(path)
    assert len(log) == 0 and log.runs() == []
    assert [log.append(r) for r in session_runs] == [1, 2, 3]
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    assert [c.cell_type for c in nb.cells] == ["markdown"] + ["markdown", "code"] * 3
    assert nb.metadata.kernelgate["kind"] == "session" and nb.metadata.kernelgate["runs"] == 3
    assert nb.metadata.kernelspec.name == "kernelgate"
    headers = [c.source.splitlines()[0] for c in nb.cells[1::2]]
    assert headers[0].startswith("### Run 1 · ok · ")
    assert headers[1].startswith("### Run 2 · exception · ")
    assert "ToolError: tools.fetch failed: KeyError" in nb.cells[3].source
    assert headers[2].startswith("### Run 3 · ok · ")
    assert len(log) == 3
    for i, (got, want) in enumerate(zip(log.runs(), session_runs, strict=True), 1):
        assert got.run_number == i
        assert run_result(got).to_dict() == want.to_dict()
    assert load_run(path, 2).status == "exception" and load_run(path, -1).value == 301


def test_session_cell_picking_errors(tmp_path: Path, session_runs) -> None:
    path = tmp_path / "session.ipynb"
    log = SessionLog(path)
    for r in session_runs[:2]:
        log.append(r)
    with pytest.raises(NotARunError, match=r"holds 2 runs; choose one by its number \(1 to 2; -1 is the last\)"):
        load_run(path)
    with pytest.raises(NotARunError, match="has no run 3: it holds runs 1 to 2"):
        load_run(path, 3)
    assert load_run(path, 1).run_id == session_runs[0].run_id


def test_replay_a_session_cell(tmp_path: Path, session_runs) -> None:
    path = tmp_path / "session.ipynb"
    log = SessionLog(path)
    for r in session_runs:
        log.append(r)
    for n in (1, 2, 3):
        report = replay(path, cell=n)
        assert report.diverged is False, report.format()
        assert report.run_number == n


def test_session_log_refuses_to_append_to_other_notebooks(tmp_path: Path, session_runs) -> None:
    single = save_run(session_runs[0], tmp_path / "run.ipynb")
    with pytest.raises(NotARunError, match="is not a kernelgate session log"):
        SessionLog(single).append(session_runs[1])
    assert load_run(single).run_id == session_runs[0].run_id  # untouched


def test_same_run_appended_twice_gets_unique_cell_ids(tmp_path: Path, session_runs) -> None:
    log = SessionLog(tmp_path / "s.ipynb")
    log.append(session_runs[0])
    log.append(session_runs[0])
    nb = nbformat.read(log.path, as_version=4)
    nbformat.validate(nb)
    ids = [c.id for c in nb.cells]
    assert len(ids) == len(set(ids)) == 5


def test_threads_appending_lose_nothing(tmp_path: Path, session_runs) -> None:
    log = SessionLog(tmp_path / "s.ipynb")
    errors: list[BaseException] = []

    def work(run: RunResult) -> None:
        try:
            for _ in range(4):
                log.append(run)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(r,)) for r in session_runs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    numbers = [r.run_number for r in log.runs()]
    assert numbers == list(range(1, 13))


# -- crashes --------------------------------------------------------------------------------


def start_appender(run: Path, log: Path, mode: str, count: int = 0):
    ready_r, ready_w = os.pipe()
    hold_r, hold_w = os.pipe()
    proc = subprocess.Popen(
        [
            sys.executable,
            str(APPENDER),
            str(run),
            str(log),
            mode,
            str(ready_w),
            str(hold_r),
            str(count),
        ],
        pass_fds=(ready_w, hold_r),
        stderr=subprocess.PIPE,
    )
    os.close(ready_w)
    os.close(hold_r)
    return proc, ready_r, hold_w


def read_exactly(fd: int, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = os.read(fd, n - len(data))
        if not chunk:
            raise AssertionError(f"the appender exited after {len(data)} of {n} signals")
        data += chunk
    return data


def lock_is_free(log: Path) -> bool:
    fd = os.open(log.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)
    return True


@pytest.fixture
def prepared(tmp_path: Path, session_runs):
    """A log with two runs already in it, and a big run file for the appender to add."""
    log = tmp_path / "session.ipynb"
    sl = SessionLog(log)
    sl.append(session_runs[0])
    sl.append(session_runs[1])
    run = save_run(session_runs[2], tmp_path / "run.ipynb")
    return log, run, log.read_bytes()


@pytest.mark.parametrize(("mode", "runs_after"), [("write", 2), ("fsync", 2), ("replace", 3)])
def test_kill_inside_an_append_leaves_a_valid_log(prepared, mode: str, runs_after: int) -> None:
    log, run, before = prepared
    proc, ready, hold = start_appender(run, log, mode)
    try:
        assert read_exactly(ready, 1) == b"!"  # the appender is stopped at that step
        temps = [n for n in os.listdir(log.parent) if n.startswith(".session.ipynb.")]
        if mode == "write":
            # killed with a partly written temporary file beside the log
            assert len(temps) == 1
            partial = (log.parent / temps[0]).read_bytes()
            assert 0 < len(partial) < len(before)
        # the appender holds the log's lock while it writes: another appender would wait
        assert not lock_is_free(log)
        proc.send_signal(signal.SIGKILL)
        assert proc.wait() == -signal.SIGKILL
        assert lock_is_free(log)  # and the kernel released it when the appender died
    finally:
        os.close(ready)
        os.close(hold)
        proc.stderr.close()
    cells = run_cells(log)  # validates
    assert len(cells) == runs_after
    if runs_after == 2:
        assert log.read_bytes() == before  # exactly the log as it was
    # the next append works, numbers on, and removes what the crash left behind
    assert SessionLog(log).append(load_run(run)) == runs_after + 1
    assert [n for n in os.listdir(log.parent) if n.startswith(".session.ipynb.")] == []
    assert len(run_cells(log)) == runs_after + 1


def test_kill_an_appender_in_a_loop_at_any_point(prepared) -> None:
    log, run, _ = prepared
    proc, ready, hold = start_appender(run, log, "loop")
    try:
        read_exactly(ready, 5)  # five appends done; the sixth is under way
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    finally:
        os.close(ready)
        os.close(hold)
        proc.stderr.close()
    cells = run_cells(log)
    assert 2 + 5 <= len(cells) <= 2 + 6
    assert [r.run_number for r in SessionLog(log).runs()] == list(range(1, len(cells) + 1))


def test_two_processes_appending_lose_nothing(prepared) -> None:
    log, run, _ = prepared
    procs = [start_appender(run, log, "loop", count=6) for _ in range(2)]
    try:
        for proc, ready, _ in procs:
            read_exactly(ready, 6)
            assert proc.wait() == 0, proc.stderr.read().decode()
    finally:
        for proc, ready, hold in procs:
            os.close(ready)
            os.close(hold)
            proc.stderr.close()
    assert [r.run_number for r in SessionLog(log).runs()] == list(range(1, 15))
    meta = json.loads(log.read_text())["metadata"]["kernelgate"]
    assert meta["runs"] == 14
