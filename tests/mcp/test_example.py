"""examples/agent_loop.py runs as the README says: a failing run, a corrected one, the
session notebook, its replay."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from kernelgate.notebooks import SessionLog

EXAMPLE = Path(__file__).parents[2] / "examples" / "agent_loop.py"


def test_agent_loop_example(tmp_path: Path) -> None:
    session = tmp_path / "session.ipynb"
    r = subprocess.run(
        [sys.executable, str(EXAMPLE), str(session)],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "--- run_code (error) ---\nerror (exception): TypeError: tools.search() got an " in out
    assert "--- run_code (ok) ---\nprinted:\n2 documents\nreturned:\n" in out
    assert "Mean stars: 300.0." in out
    assert "replay of run 2: same as recorded, 4 calls answered from the recording" in out
    runs = SessionLog(session).runs()
    assert [run.status for run in runs] == ["exception", "ok"]
    assert runs[1].value["mean_stars"] == 300.0
