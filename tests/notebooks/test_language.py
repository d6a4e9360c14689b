"""A run's language: recorded, written into notebooks, read back (older records: Python)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from kernelgate import Gateway, RunResult, save_run
from kernelgate.gateway.launch import NodeUnavailable
from kernelgate.model.codec import RecordingError, decode_run, encode_metadata, encode_run
from kernelgate.model.language import LANGUAGES, language_info, language_of_notebook
from kernelgate.notebooks import SessionLog, load_run, run_to_notebook
from kernelgate.notebooks.replay import replay
from kernelgate.notebooks.store import dumps_notebook


def _ts_run(**fields: object) -> RunResult:
    return RunResult(
        "ok",
        value=3,
        stdout="hi\n",
        outputs=[{"output_type": "stream", "name": "stdout", "text": "hi\n"}],
        program="const x: number = 3;\nconsole.log('hi');\nx",
        run_id="20260101T000000-ts000001",
        language="typescript",
        **fields,  # type: ignore[arg-type]
    )


def test_a_python_run_records_no_language_and_reads_back_as_python() -> None:
    result = RunResult("ok", value=1, run_id="r1")
    assert result.language == "python"
    assert "language" not in encode_metadata(result)  # recordings made before: identical
    assert decode_run(json.loads(json.dumps(encode_run(result)))).language == "python"


@pytest.mark.parametrize("language", LANGUAGES)
def test_every_language_survives_the_codec(language: str) -> None:
    result = RunResult("ok", run_id="r1", language=language)  # type: ignore[arg-type]
    assert decode_run(json.loads(json.dumps(encode_run(result)))).language == language


@pytest.mark.parametrize("bad", ["ruby", 3, None, ["python"]])
def test_a_language_kernelgate_does_not_run_is_refused_naming_the_field(bad: object) -> None:
    data = {**encode_run(RunResult("ok", run_id="r1")), "language": bad}
    with pytest.raises(RecordingError, match="language") as caught:
        decode_run(data, "run r1")
    assert "python, typescript, javascript" in str(caught.value)


def test_a_typescript_run_saves_as_a_typescript_notebook(tmp_path: Path) -> None:
    path = save_run(_ts_run(), tmp_path / "run.ipynb")
    nb = json.loads(Path(path).read_text())
    assert nb["metadata"]["language_info"]["name"] == "typescript"
    assert nb["metadata"]["language_info"]["file_extension"] == ".ts"
    assert nb["metadata"]["kernelspec"] == {
        "name": "kernelgate-typescript",
        "display_name": "kernelgate (TypeScript)",
        "language": "typescript",
    }
    assert language_of_notebook(nb["metadata"]) == "typescript"
    run = load_run(path)
    assert run.language == "typescript" and run.value == 3 and run.stdout == "hi\n"


def test_a_session_log_takes_its_first_run_s_language(tmp_path: Path) -> None:
    log = SessionLog(tmp_path / "session.ipynb")
    log.append(_ts_run())
    log.append(RunResult("ok", value=1, run_id="py1"))  # a Python run in the same log
    nb = json.loads((tmp_path / "session.ipynb").read_text())
    assert nb["metadata"]["kernelspec"]["language"] == "typescript"
    # Each run says its own language: the cell's record, not the notebook's.
    assert [r.language for r in log.runs()] == ["typescript", "python"]


def test_a_python_recording_is_as_before() -> None:
    with Gateway(pool_size=0) as gw:
        result = gw.run_sync("1 + 1")
    nb = json.loads(dumps_notebook(run_to_notebook(result)))
    assert nb["metadata"]["language_info"] == language_info("python")
    assert nb["metadata"]["kernelspec"]["name"] == "kernelgate"
    assert "language" not in nb["cells"][0]["metadata"]["kernelgate"]


def test_replay_of_a_typescript_recording_runs_on_node(tmp_path: Path) -> None:
    path = save_run(_ts_run(), tmp_path / "run.ipynb")
    if shutil.which("node") is not None:
        report = replay(path)
        assert report.ok, report.format()
        assert report.result.language == "typescript"
    with pytest.raises(NodeUnavailable, match="no-node"):
        replay(path, node=str(tmp_path / "no-node"))
    with pytest.raises(TypeError, match="node="):
        replay(path, python="python3")  # Python's interpreter for a TypeScript run


def test_a_replay_cell_of_a_typescript_recording_in_a_python_kernel(tmp_path: Path) -> None:
    """A Python kernel's ``#| replay`` cell of a TypeScript recording runs it in its own
    language, on Node (the kernel's Python runtime is not lent to it): the marker line is
    made a TypeScript comment (``#`` is none), and the replay matches the recording."""
    import asyncio

    from kernelgate.gateway.launch import NodeUnavailable, probe_node
    from kernelgate.jupyter.replaycell import replay_marker, run_replay_cell

    try:
        probe_node("node")
    except NodeUnavailable:
        pytest.skip("node (>= 18) is not installed: a TypeScript recording replays on Node")
    save_run(_ts_run(), tmp_path / "ts.ipynb")
    code = "#| replay ts.ipynb\n"
    marker = replay_marker(code)
    assert marker is not None
    kernel = Gateway(pool_size=0)
    payload: list[dict[str, object]] = []

    async def main() -> RunResult:
        return await run_replay_cell(
            marker, code, limits=None, cwd=str(tmp_path), like=kernel, payload=payload
        )

    result = asyncio.run(main())
    assert result.status == "ok", result.error
    assert result.language == "typescript" and result.value == 3 and result.stdout == "hi\n"
    assert result.program is not None and result.program.startswith("//#| replay ts.ipynb\n")


def test_replay_on_a_given_runtime_of_the_recording_s_language(tmp_path: Path) -> None:
    from kernelgate.gateway.runtime import PythonRuntime

    class Lent(PythonRuntime):
        ended = 0

        async def end_loop(self) -> None:
            Lent.ended += 1

    with Gateway(bindings={"add": lambda a, b: a + b}, pool_size=0) as gw:
        path = save_run(gw.run_sync("return await tools.add(1, 2)"), tmp_path / "run.ipynb")
    report = replay(path, runtime=Lent())
    assert not report.diverged and report.result.value == 3
    assert Lent.ended == 1  # replay()'s loop was its own: the runtime heard it end
    with pytest.raises(ValueError, match="typescript program"):
        replay(save_run(_ts_run(), tmp_path / "ts.ipynb"), runtime=PythonRuntime())
