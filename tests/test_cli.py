"""`kernelgate run` and `kernelgate demo`, run as a user would: the installed command."""

from __future__ import annotations

import json
import subprocess

import nbformat
import pytest

from tests.procs import kernelgate_command

pytestmark = pytest.mark.timeout(120)


def kernelgate(*args: str, stdin: str = "", cwd: str | None = None) -> subprocess.CompletedProcess:
    argv = kernelgate_command()
    return subprocess.run(
        [*argv, *args], input=stdin, capture_output=True, text=True, timeout=100, cwd=cwd
    )


def test_run_from_stdin_prints_output_then_the_value():
    p = kernelgate("run", "-", stdin="print('hi')\nreturn {'answer': 6 * 7}")
    assert p.returncode == 0, p.stderr
    assert p.stdout == 'hi\n{\n  "answer": 42\n}\n'


def test_run_json_is_the_run_result(tmp_path):
    src = tmp_path / "program.py"
    src.write_text("import sys\nprint('to stderr', file=sys.stderr)\nreturn [1, 2]\n")
    p = kernelgate("run", str(src), "--json")
    assert p.returncode == 0, p.stderr
    result = json.loads(p.stdout)
    assert result["status"] == "ok" and result["value"] == [1, 2]
    assert result["stderr"] == "to stderr\n"
    assert result["exit_code"] == 0


def test_run_with_bindings_and_a_record(tmp_path):
    record = tmp_path / "run.ipynb"
    p = kernelgate(
        "run",
        "-",
        "--bindings",
        "kernelgate.demo:BINDINGS",
        "--record",
        str(record),
        stdin="docs = await tools.search('jupyter', limit=1)\nreturn len(docs)",
    )
    assert p.returncode == 0, p.stderr
    assert p.stdout == "1\n"
    nb = nbformat.read(record, as_version=4)
    nbformat.validate(nb)
    assert nb.metadata["kernelgate"]["status"] == "ok"


def test_a_failing_program_exits_1_with_the_traceback():
    p = kernelgate("run", "-", stdin="x = 1\n1 / 0\n")
    assert p.returncode == 1
    assert "Error: the program failed (exception): ZeroDivisionError" in p.stderr
    assert 'File "<program>", line 2' in p.stderr


def test_misuse_exits_2_and_says_what_was_wrong(tmp_path):
    p = kernelgate("run", str(tmp_path / "missing.py"))
    assert p.returncode == 2
    assert "cannot read program" in p.stderr and "missing.py" in p.stderr
    p = kernelgate("run", "-", "--timeout", "-1", stdin="1")
    assert p.returncode == 2 and "positive number of seconds" in p.stderr
    assert kernelgate().returncode == 2


def test_demo_runs_the_sample_agent_program():
    p = kernelgate("demo", "--json")
    assert p.returncode == 0, p.stderr
    result = json.loads(p.stdout)
    assert result["status"] == "ok"
    assert [c["name"] for c in result["calls"]][:1] == ["search"]
    p = kernelgate("demo")
    assert p.returncode == 0, p.stderr
    assert "-- program --" in p.stdout and "binding calls --" in p.stdout


def test_a_final_value_that_is_not_json_is_said_on_stderr_with_its_repr():
    p = kernelgate("run", "-", stdin="{1,2}\n")
    assert p.returncode == 0 and p.stdout == ""
    assert "not JSON" in p.stderr and "its repr: {1, 2}" in p.stderr


def test_a_run_without_bindings_that_calls_one_is_told_to_pass_bindings():
    p = kernelgate("run", "-", stdin="await tools.search('x')\n")
    assert p.returncode == 1
    assert "has no binding 'search'" in p.stderr and "pass --bindings" in p.stderr


def test_a_forgotten_await_says_so():
    for program in ("tools.search('x')\n", "r = tools.search('x')\nr['id']\n"):
        p = kernelgate("run", "-", "--bindings", "kernelgate.demo:BINDINGS", stdin=program)
        assert p.returncode == 1, (program, p.stderr)
        assert "did you forget `await`?" in p.stderr, (program, p.stderr)
