"""Every kernel cell is a recording: a notebook executed by nbclient or papermill with the
kernelgate kernel loads, replays (exit 0) and draws a timeline cell by cell."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import nbformat
import pytest
from nbclient import NotebookClient
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from kernelgate import save_run
from kernelgate.model.codec import NotARunError
from kernelgate.notebooks import load_run

from .helpers import KERNEL_NAME

pytestmark = pytest.mark.timeout(180)

_KERNELSPEC = {"name": KERNEL_NAME, "display_name": "kernelgate", "language": "python"}


def _session() -> nbformat.NotebookNode:
    return new_notebook(
        cells=[
            new_markdown_cell("A session: setup once, then cells that use it."),
            new_code_cell(
                "#| setup\nlimit = 2\ndef titles(docs):\n    return [d['title'] for d in docs]"
            ),
            new_code_cell(
                "docs = await tools.search('messages', limit=limit)\n"
                "print(len(docs), 'found')\n"
                "titles(docs)"
            ),
            new_code_cell(
                "import asyncio\n"
                "a, b = await asyncio.gather(tools.compute('mean', [1, 2, 3]),"
                " tools.compute('max', [1, 5]))\n"
                "{'mean': a, 'max': b}"
            ),
            new_code_cell("print('no calls, no value')"),
        ],
        metadata={"kernelspec": dict(_KERNELSPEC)},
    )


def _kernelgate(*args: str, cwd: pathlib.Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kernelgate.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=str(cwd),
        env=dict(os.environ),
    )


@pytest.fixture(scope="module")
def executed(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    where = tmp_path_factory.mktemp("recorded")
    nb = _session()
    NotebookClient(nb, kernel_name=KERNEL_NAME, timeout=60).execute()
    path = where / "session.ipynb"
    nbformat.write(nb, path)
    return path


def test_each_executed_cell_loads_as_its_run(executed: pathlib.Path) -> None:
    run = load_run(executed, cell=2)  # [2]: the cell's execution count, as Jupyter shows it
    assert run.status == "ok" and run.stdout == "2 found\n"
    assert [c.name for c in run.calls] == ["search"]
    assert run.value == [d["title"] for d in run.calls[0].value]
    # The program that ran: the setup cell, then the cell.
    assert run.program.startswith("#| setup\nlimit = 2\n") and "tools.search" in run.program
    assert load_run(executed, cell=3).value == {"mean": 2.0, "max": 5.0}
    quiet = load_run(executed, cell=4)  # no output but its print: still a run
    assert quiet.status == "ok" and quiet.value is None and quiet.calls == []


def test_cells_without_a_run_are_said_plainly(
    executed: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    with pytest.raises(NotARunError, match=r"cell \[1\] is a setup cell"):
        load_run(executed, cell=1)
    with pytest.raises(NotARunError, match="has no run 9"):
        load_run(executed, cell=9)
    with pytest.raises(NotARunError, match="holds 3 runs; choose one by its number"):
        load_run(executed)
    nb = nbformat.read(executed, as_version=4)
    nb.cells[2].source += "\nprint('edited')"
    edited = tmp_path / "edited.ipynb"
    nbformat.write(nb, edited)
    with pytest.raises(NotARunError, match="edited after it ran"):
        load_run(edited, cell=2)


def test_replay_and_timeline_commands_per_cell(executed: pathlib.Path) -> None:
    for cell in ("2", "3", "4"):
        done = _kernelgate("replay", str(executed), "--cell", cell, cwd=executed.parent)
        assert done.returncode == 0, done.stdout + done.stderr
    svg = executed.parent / "t.svg"
    done = _kernelgate(
        "timeline", str(executed), "--cell", "3", "-o", str(svg), cwd=executed.parent
    )
    assert done.returncode == 0, done.stderr
    assert svg.read_text().count('class="call') == 2


def test_replay_of_an_edited_program_diverges(executed: pathlib.Path) -> None:
    program = executed.parent / "edited.py"
    program.write_text(load_run(executed, cell=2).program.replace("limit = 2", "limit = 3"))
    done = _kernelgate(
        "replay", str(executed), "--cell", "2", "--program", str(program), cwd=executed.parent
    )
    assert done.returncode == 1, done.stdout + done.stderr


def test_papermill_parameters_reach_every_cell(tmp_path: pathlib.Path) -> None:
    nb = new_notebook(
        cells=[
            new_code_cell("#| setup\nlimit = 1", metadata={"tags": ["parameters"]}),
            new_code_cell("docs = await tools.search('messages', limit=limit)\nlen(docs)"),
        ],
        metadata={"kernelspec": dict(_KERNELSPEC)},
    )
    source, out = tmp_path / "in.ipynb", tmp_path / "out.ipynb"
    nbformat.write(nb, source)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "papermill",
            str(source),
            str(out),
            "-k",
            KERNEL_NAME,
            "-p",
            "limit",
            "2",
        ],
        capture_output=True,
        text=True,
        timeout=150,
        cwd=str(tmp_path),
        env=dict(os.environ),
    )
    assert done.returncode == 0, done.stderr
    cells = nbformat.read(out, as_version=4).cells
    # papermill's injected cell ("# Parameters") came after ours, and won.
    assert cells[1].source.startswith("# Parameters")
    run = load_run(out, cell=-1)
    assert run.status == "ok" and run.value == 2
    assert "limit = 2" in run.program


def test_a_recorded_cell_run_again_loads_as_its_newest_run(tmp_path: pathlib.Path) -> None:
    # Recorded by `kernelgate run --record` (the cell's metadata holds run 1), edited, then
    # run by nbclient (what nbconvert --execute uses): the cell's new run record must win.
    from kernelgate import Gateway

    first = Gateway(pool_size=0).run_sync("return 1")
    path = tmp_path / "recorded.ipynb"
    save_run(first, str(path))
    nb = nbformat.read(path, as_version=4)
    (code,) = [c for c in nb.cells if c.cell_type == "code"]
    code.source = "print('again')\nreturn 2"
    NotebookClient(nb, kernel_name=KERNEL_NAME, timeout=60).execute()
    nbformat.write(nb, path)
    run = load_run(path)
    assert run.value == 2 and run.stdout == "again\n"
    assert run.run_id != first.run_id and run.program == "print('again')\nreturn 2"
    done = _kernelgate("replay", str(path), cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "DIVERGED" not in done.stdout


def test_a_number_two_cells_share_after_a_restart_is_refused_and_ids_choose(
    tmp_path: pathlib.Path,
) -> None:
    # Two executions in two kernels (what a restart does): both first cells are [1].
    first = new_notebook(
        cells=[new_code_cell("return 'before'")], metadata={"kernelspec": dict(_KERNELSPEC)}
    )
    second = new_notebook(
        cells=[new_code_cell("return 'after'")], metadata={"kernelspec": dict(_KERNELSPEC)}
    )
    for nb in (first, second):
        NotebookClient(nb, kernel_name=KERNEL_NAME, timeout=60).execute()
    first.cells += second.cells
    path = tmp_path / "restarted.ipynb"
    nbformat.write(first, path)
    assert [c.execution_count for c in first.cells] == [1, 1]
    with pytest.raises(NotARunError, match=r"2 cells are \[1\] \(the kernel restarted") as err:
        load_run(path, cell=1)
    assert first.cells[0].id in str(err.value) and first.cells[1].id in str(err.value)
    assert load_run(path, cell_id=first.cells[1].id).value == "after"
    assert load_run(path, position=1).value == "before"
    done = _kernelgate("replay", str(path), "--cell", "1", cwd=tmp_path)
    assert done.returncode == 2 and "--cell-id" in done.stderr
    done = _kernelgate("replay", str(path), "--cell-id", first.cells[1].id, cwd=tmp_path)
    assert done.returncode == 0 and "MATCHES" in done.stdout, done.stdout + done.stderr


def test_a_live_cell_s_run_record_opens_onto_timeline_usage_isolation_and_limits(
    executed: pathlib.Path,
) -> None:
    import html as html_lib
    import re

    from kernelgate.gateway.sanitize import sanitize_output

    nb = nbformat.read(executed, as_version=4)
    records = [
        o
        for c in nb.cells
        if c.cell_type == "code"
        for o in c.outputs
        if o.get("metadata", {}).get("kernelgate", {}).get("role") == "run"
    ]
    assert len(records) == 3
    with_calls = records[0]["data"]["text/html"]
    assert with_calls.startswith('<details class="kernelgate-run"><summary>')
    assert "run ok · 1 call · " in with_calls
    assert 'src="data:image/svg+xml;base64,' in with_calls  # the timeline picture
    for row in ("run id", "isolation", "CPU", "peak memory", "limits", "wall_seconds"):
        assert row in with_calls, row
    run_id = records[0]["metadata"]["kernelgate"]["run_id"]
    assert html_lib.escape(run_id) in with_calls
    assert "data:image" not in records[2]["data"]["text/html"]  # no calls: no picture
    # Inert: nothing in it the sanitiser every program output passes would take away
    # but the table's inline alignment, and no script or handler at all.
    kept = sanitize_output(records[0])["data"]["text/html"]
    assert "<details" in kept and "<table" in kept and "data:image/svg+xml" in kept
    assert not re.search(r"<script|\son\w+=|javascript:", with_calls, re.I)


def test_a_run_record_escapes_what_the_program_wrote() -> None:
    from kernelgate.model.result import ErrorInfo, RunResult
    from kernelgate.notebooks.cellrun import run_record_output

    evil = "<img src=x onerror=alert(1)>"
    result = RunResult(
        "exception", error=ErrorInfo("ValueError", evil, [evil]), duration_s=0.01
    )
    text = run_record_output(result, "raise ValueError()", "raise ValueError()")["data"][
        "text/html"
    ]
    assert "<img src=x" not in text and "&lt;img src=x onerror=alert(1)&gt;" in text
