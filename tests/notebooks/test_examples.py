"""The example notebooks in notebooks/: valid, exactly as the code writes them, replayable."""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest

from kernelgate.notebooks import SessionLog, load_run, replay
from kernelgate.notebooks.render import run_notebook_dict
from kernelgate.notebooks.store import dumps_notebook, read_notebook, run_cells

EXAMPLES = Path(__file__).resolve().parents[2] / "notebooks"
REGENERATE = "regenerate them with: python notebooks/make_examples.py"
DEMO_TOOLS = {"search", "fetch", "compute"}


def example_paths() -> list[Path]:
    return sorted(EXAMPLES.glob("*.ipynb"))


def test_the_examples_are_there() -> None:
    assert [p.name for p in example_paths()] == ["demo_run.ipynb", "session_log.ipynb"]


@pytest.mark.parametrize("path", example_paths(), ids=lambda p: p.name)
def test_example_validates_and_uses_the_kernelgate_kernel(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    assert nb.metadata.kernelspec == {
        "name": "kernelgate",
        "display_name": "kernelgate (Python)",
        "language": "python",
    }
    for cell in nb.cells:
        if cell.cell_type == "code":
            calls = [
                o.data["application/vnd.kernelgate.call+json"]
                for o in cell.outputs
                if "application/vnd.kernelgate.call+json" in o.get("data", {})
            ]
            assert calls and {c["name"] for c in calls} <= DEMO_TOOLS
            assert {c["namespace"] for c in calls} == {"tools"}


def test_demo_run_is_exactly_what_the_code_writes() -> None:
    path = EXAMPLES / "demo_run.ipynb"
    run = load_run(path)
    assert dumps_notebook(run_notebook_dict(run)) == path.read_bytes(), REGENERATE


def test_session_log_is_exactly_what_the_code_writes(tmp_path: Path) -> None:
    path = EXAMPLES / "session_log.ipynb"
    meta = json.loads(path.read_text())["metadata"]["kernelgate"]
    runs = SessionLog(path).runs()
    assert [r.status for r in runs] == ["ok", "exception", "ok", "ok"]
    again = SessionLog(tmp_path / path.name, title=meta["title"])
    for run in runs:
        again.append(run)
    assert again.path.read_bytes() == path.read_bytes(), REGENERATE


@pytest.mark.parametrize("path", example_paths(), ids=lambda p: p.name)
def test_every_example_run_replays_without_divergence(path: Path) -> None:
    count = len(run_cells(read_notebook(path)))
    assert count >= 1
    for number in range(1, count + 1):
        report = replay(path, cell=number)
        assert report.diverged is False, report.format()
