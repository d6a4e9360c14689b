"""save_run / load_run: saved runs validate and read back as the same RunResult."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import nbformat
import pytest

from kernelgate import Gateway, RunResult
from kernelgate.notebooks import NotARunError, RecordedRun, load_run, save_run
from kernelgate.notebooks.store import run_result

from .conftest import demo_gateway


def test_saved_run_validates_and_round_trips(saved_demo: Path, demo_run: RunResult) -> None:
    nbformat.validate(nbformat.read(saved_demo, as_version=4))
    loaded = load_run(saved_demo)
    assert isinstance(loaded, RecordedRun) and isinstance(loaded, RunResult)
    assert run_result(loaded).to_dict() == demo_run.to_dict()
    assert loaded.source == str(saved_demo) and loaded.run_number == 1
    # dict key order of binding answers survives too (programs may iterate them)
    for a, b in zip(loaded.calls, demo_run.calls, strict=True):
        assert json.dumps(a.value) == json.dumps(b.value)


def test_round_trip_of_failed_run_keeps_error_and_streams(tmp_path: Path) -> None:
    r = demo_gateway().run_sync(
        "import sys\nprint('out')\nprint('err', file=sys.stderr)\nawait tools.fetch('nope')\n"
    )
    assert r.status == "exception"
    loaded = load_run(save_run(r, tmp_path / "failed.ipynb"))
    assert run_result(loaded).to_dict() == r.to_dict()
    assert loaded.error is not None and loaded.error.ename == "ToolError"
    assert loaded.stdout == "out\n" and loaded.stderr == "err\n"


def test_save_into_a_directory_and_missing_parents(tmp_path: Path, demo_run: RunResult) -> None:
    p = save_run(demo_run, tmp_path)
    assert p == tmp_path / f"{demo_run.run_id}.ipynb" and p.exists()
    deep = save_run(demo_run, tmp_path / "a" / "b" / "run.ipynb")
    assert load_run(deep).run_id == demo_run.run_id
    assert sorted(os.listdir(tmp_path / "a" / "b")) == ["run.ipynb"]  # no temp file left


def test_save_replaces_existing_file_keeping_its_mode(tmp_path: Path, demo_run: RunResult) -> None:
    p = tmp_path / "run.ipynb"
    p.write_text("old")
    os.chmod(p, 0o640)
    save_run(demo_run, p)
    assert stat.S_IMODE(os.stat(p).st_mode) == 0o640
    assert load_run(p).run_id == demo_run.run_id


def test_gateway_record_to_writes_one_notebook_per_run(tmp_path: Path) -> None:
    gw = demo_gateway(record_to=tmp_path / "runs")
    assert gw.record_to == str(tmp_path / "runs")  # what was given, as a path string
    first = gw.run_sync("await tools.compute('sum', [1, 2])")
    second = gw.run_sync("print('second')")
    names = sorted(os.listdir(tmp_path / "runs"))
    assert names == sorted([f"{first.run_id}.ipynb", f"{second.run_id}.ipynb"])
    assert names[0] <= names[1]  # named by time, then run id
    again = [load_run(tmp_path / "runs" / n) for n in names]
    assert {r.run_id for r in again} == {first.run_id, second.run_id}
    by_id = {r.run_id: r for r in again}
    assert by_id[first.run_id].value == 3.0 and by_id[second.run_id].stdout == "second\n"


def test_the_writers_that_were_methods_say_where_they_went(
    saved_demo: Path, demo_run: RunResult
) -> None:
    # RunResult.save() and to_notebook() imported the notebooks from the model, upward;
    # they are functions now, and a caller of the old methods is told which.
    import kernelgate
    import kernelgate.notebooks

    for run in (demo_run, load_run(saved_demo)):
        with pytest.raises(AttributeError, match=r"use kernelgate\.save_run\(result, path\)"):
            run.save(saved_demo)  # type: ignore[attr-defined]
        with pytest.raises(AttributeError, match=r"kernelgate\.notebooks\.run_to_notebook\("):
            run.to_notebook()  # type: ignore[attr-defined]
        assert not hasattr(run, "save")
    with pytest.raises(AttributeError, match="'RunResult' object has no attribute 'nope'"):
        demo_run.nope  # type: ignore[attr-defined]  # noqa: B018
    assert kernelgate.save_run is kernelgate.notebooks.save_run is save_run


def test_saved_after_jupyter_resave_keeps_answer_key_order(saved_demo: Path) -> None:
    # Jupyter writes notebooks with sorted keys; the recorded key order must survive.
    nb = nbformat.read(saved_demo, as_version=4)
    nbformat.write(nb, saved_demo)
    assert '"key_order"' in saved_demo.read_text()
    fetched = next(c for c in load_run(saved_demo).calls if c.name == "fetch" and c.ok)
    assert list(fetched.value) == ["id", "title", "text", "year", "stars"]


def test_load_refuses_files_that_are_not_runs(tmp_path: Path) -> None:
    text = tmp_path / "prog.py"
    text.write_text("print('hi')\n")
    with pytest.raises(NotARunError, match=r"prog\.py is not a notebook: it is not JSON"):
        load_run(text)

    other_json = tmp_path / "data.json"
    other_json.write_text('{"a": 1}')
    with pytest.raises(NotARunError, match="is not a Jupyter notebook"):
        load_run(other_json)

    plain = tmp_path / "plain.ipynb"
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1 + 1")])
    nbformat.write(nb, plain)
    with pytest.raises(NotARunError, match="is a notebook but not a kernelgate run") as info:
        load_run(plain)
    assert "kernelgate run PROGRAM --record PATH" in str(info.value)

    v3 = tmp_path / "v3.ipynb"
    v3.write_text('{"nbformat": 3, "cells": []}')
    with pytest.raises(NotARunError, match="notebook format 3"):
        load_run(v3)

    with pytest.raises(FileNotFoundError):
        load_run(tmp_path / "missing.ipynb")


def test_load_detects_cleared_outputs(saved_demo: Path) -> None:
    nb = nbformat.read(saved_demo, as_version=4)
    nb.cells[0].outputs = []  # "Clear All Outputs" in Jupyter, then save
    nbformat.write(nb, saved_demo)
    with pytest.raises(NotARunError, match=r"recorded 5 binding calls but its cell holds 0"):
        load_run(saved_demo)


def test_load_refuses_newer_format(saved_demo: Path) -> None:
    nb = json.loads(saved_demo.read_text())
    nb["cells"][0]["metadata"]["kernelgate"]["format"] = 99
    saved_demo.write_text(json.dumps(nb))
    with pytest.raises(NotARunError, match=r"format 99.*upgrade"):
        load_run(saved_demo)


def test_single_run_file_answers_cell_1_and_minus_1_only(saved_demo: Path) -> None:
    assert load_run(saved_demo, 1).run_number == 1
    assert load_run(saved_demo, -1).run_number == 1
    with pytest.raises(NotARunError, match="has no run 2: it holds runs 1"):
        load_run(saved_demo, 2)


def test_edited_program_in_cell_is_what_load_returns(saved_demo: Path) -> None:
    nb = nbformat.read(saved_demo, as_version=4)
    nb.cells[0].source = "print('edited')\n"
    nbformat.write(nb, saved_demo)
    assert load_run(saved_demo).program == "print('edited')\n"


def test_result_save_returns_path_and_gateway_run_is_real(tmp_path: Path) -> None:
    r = Gateway(bindings={"add": lambda a, b: a + b}).run_sync("await tools.add(2, 3)")
    p = save_run(r, tmp_path / "x.ipynb")
    assert Path(p) == tmp_path / "x.ipynb"
    assert load_run(p).calls[0].value == 5


def test_papermills_nan_parameters_load_and_a_nan_elsewhere_is_refused(saved_demo: Path) -> None:
    """papermill writes ``-p x nan`` into ``metadata.papermill`` as a bare NaN; that is
    not part of the run, so the notebook loads. A NaN anywhere else is still refused."""
    from kernelgate.notebooks.store import RecordingError

    nb = json.loads(saved_demo.read_text())
    nb["metadata"]["papermill"] = {"parameters": {"x": float("nan"), "y": float("inf")}}
    saved_demo.write_text(json.dumps(nb))
    assert load_run(saved_demo).program == load_run(saved_demo).program  # it loads
    nb["cells"][-1]["metadata"]["planted"] = float("nan")
    saved_demo.write_text(json.dumps(nb))
    with pytest.raises(RecordingError, match="NaN is not JSON"):
        load_run(saved_demo)
