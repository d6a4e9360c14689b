"""Notebooks run on the kernelgate kernel with nbclient and ``jupyter nbconvert --execute``."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import nbformat
import pytest
from nbclient import NotebookClient
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from kernelgate.wire.messages import CALL_MIME

from .helpers import KERNEL_NAME

REPO = pathlib.Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))


def _sample() -> nbformat.NotebookNode:
    return new_notebook(
        cells=[
            new_markdown_cell("Every cell is a fresh program."),
            new_code_cell("print('hello from a cell')"),
            new_code_cell(
                "hits = await tools.search('messages')\nprint([h['id'] for h in hits])\nlen(hits)"
            ),
            new_code_cell(
                "class Table:\n"
                "    def _repr_html_(self):\n"
                "        return '<table><tr><td>1</td></tr></table>'\n"
                "display(Table())"
            ),
            new_code_cell("return {'mean': await tools.compute('mean', [1, 2, 3])}"),
        ],
        metadata={
            "kernelspec": {"name": KERNEL_NAME, "display_name": "kernelgate", "language": "python"}
        },
    )


def test_nbclient_executes_a_notebook(tmp_path: pathlib.Path) -> None:
    nb = _sample()
    NotebookClient(
        nb, kernel_name=KERNEL_NAME, timeout=30, resources={"metadata": {"path": str(tmp_path)}}
    ).execute()
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert [c.execution_count for c in code] == [1, 2, 3, 4]
    assert code[0].outputs[0].text == "hello from a cell\n"
    kinds = [o.output_type for o in code[1].outputs]
    # the call, the print, the value, and the run record (the cell is a recording)
    assert kinds == ["display_data", "stream", "execute_result", "display_data"]
    assert code[1].outputs[3].metadata["kernelgate"]["role"] == "run"
    assert code[1].outputs[0].data[CALL_MIME]["name"] == "search"
    assert code[1].outputs[0].data["text/plain"].startswith("tools.search('messages') -> ")
    assert code[1].outputs[2].data["text/plain"] == "2"
    assert code[2].outputs[0].data["text/html"].startswith("<table>")
    # The value is shown as its repr; its JSON is in the run record.
    assert code[3].outputs[-2].data["text/plain"] == "{'mean': 2.0}"
    assert "application/json" not in code[3].outputs[-2].data
    assert code[3].outputs[-1].metadata["kernelgate"]["value"] == {"mean": 2.0}
    assert nb.metadata.language_info.name == "python"
    nbformat.validate(nb)


def test_a_failing_cell_fails_the_notebook(tmp_path: pathlib.Path) -> None:
    from nbclient.exceptions import CellExecutionError

    nb = new_notebook(cells=[new_code_cell("await tools.fetch('no-such-doc')")])
    with pytest.raises(CellExecutionError, match="KeyError"):
        NotebookClient(nb, kernel_name=KERNEL_NAME, timeout=30).execute()
    error, record = nb.cells[0].outputs[-2:]
    assert error.output_type == "error" and error.ename == "ToolError"
    assert record.metadata["kernelgate"]["status"] == "exception"


def _unexpected_errors(nb: nbformat.NotebookNode) -> list[str]:
    return [
        cell.source
        for cell in nb.cells
        if cell.cell_type == "code"
        and "raises-exception" not in cell.get("metadata", {}).get("tags", [])
        and any(o.output_type == "error" for o in cell.get("outputs", []))
    ]


@pytest.mark.skipif(not NOTEBOOKS, reason="notebooks/ holds no notebooks yet")
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_repository_notebooks_execute(path: pathlib.Path) -> None:
    nb = nbformat.read(path, as_version=4)
    NotebookClient(
        nb, kernel_name=KERNEL_NAME, timeout=50, resources={"metadata": {"path": str(path.parent)}}
    ).execute()
    assert _unexpected_errors(nb) == []


@pytest.mark.skipif(not NOTEBOOKS, reason="notebooks/ holds no notebooks yet")
@pytest.mark.timeout(30 + 20 * len(NOTEBOOKS))
def test_jupyter_nbconvert_executes_repository_notebooks(tmp_path: pathlib.Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "jupyter",
            "nbconvert",
            "--to",
            "notebook",
            "--execute",
            f"--ExecutePreprocessor.kernel_name={KERNEL_NAME}",
            "--ExecutePreprocessor.timeout=50",
            "--output-dir",
            str(tmp_path),
            *map(str, NOTEBOOKS),
        ],
        capture_output=True,
        text=True,
        timeout=20 + 20 * len(NOTEBOOKS),
        cwd=str(REPO / "notebooks"),
    )
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in tmp_path.glob("*.ipynb")) == sorted(p.name for p in NOTEBOOKS)


def test_jupyter_nbconvert_execute(tmp_path: pathlib.Path) -> None:
    source = tmp_path / "sample.ipynb"
    nbformat.write(_sample(), source)
    out_dir = tmp_path / "out"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "jupyter",
            "nbconvert",
            "--to",
            "notebook",
            "--execute",
            "--ExecutePreprocessor.timeout=30",
            "--output-dir",
            str(out_dir),
            str(source),
        ],
        capture_output=True,
        text=True,
        timeout=50,
        env=dict(os.environ),
    )
    assert done.returncode == 0, done.stderr
    executed = nbformat.read(out_dir / "sample.ipynb", as_version=4)
    outputs = [c.outputs for c in executed.cells if c.cell_type == "code"]
    assert outputs[0][0].text == "hello from a cell\n"
    assert outputs[3][-1].metadata["kernelgate"]["value"] == {"mean": 2.0}
