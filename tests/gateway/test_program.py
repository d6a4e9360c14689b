"""The program contract: async body, values, printing, tracebacks."""

from __future__ import annotations

import pytest


def test_print_and_return(run):
    r = run("print('hello', 'world')\nreturn {'a': [1, 2.5, None, True]}")
    assert r.status == "ok" and r.ok
    assert r.stdout == "hello world\n"
    assert r.value == {"a": [1, 2.5, None, True]}
    assert r.error is None
    assert r.exit_code == 0 and r.signal is None
    assert r.outputs == [
        {"output_type": "stream", "name": "stdout", "text": "hello world\n"},
        {
            "output_type": "execute_result",
            "execution_count": 1,
            "data": {
                "application/json": {"a": [1, 2.5, None, True]},
                "text/plain": "{'a': [1, 2.5, None, True]}",
            },
            "metadata": {},
        },
    ]


def test_last_expression_is_the_value(run):
    assert run("x = 20\nx + 1").value == 21
    assert run("'text'").value == "text"


def test_no_return_no_expression_gives_none(run):
    r = run("x = 1")
    assert r.ok and r.value is None
    assert [o for o in r.outputs if o["output_type"] == "execute_result"] == []


def test_return_wins_over_later_code(run):
    r = run("if True:\n    return 'early'\nprint('never')\n'late'")
    assert r.value == "early" and r.stdout == ""


def test_tuples_become_lists(run):
    assert run("return (1, (2, 3))").value == [1, [2, 3]]


def test_non_json_return_is_invalid_output_naming_type_and_path(run):
    r = run("return {'a': [0, 1, {2}]}")
    assert r.status == "invalid_output"
    assert "value['a'][2]: set is not JSON" in r.error.evalue
    assert r.value is None


@pytest.mark.parametrize(
    "expr, where",
    [
        ("{1: 'x'}", "dict key 1 is int"),
        ("float('nan')", "nan"),
        ("b'bytes'", "bytes is not JSON"),
        ("object()", "object is not JSON"),
    ],
)
def test_non_json_values_refused(run, expr, where):
    r = run(f"return {expr}")
    assert r.status == "invalid_output"
    assert where in r.error.evalue


def test_json_subclass_refused(run):
    r = run("class D(dict):\n    pass\nreturn D(a=1)")
    assert r.status == "invalid_output"
    assert "D is not JSON" in r.error.evalue


def test_non_json_last_expression_shown_as_text(run):
    r = run("{3, 1, 2}")
    assert r.status == "ok" and r.value is None
    results = [o for o in r.outputs if o["output_type"] == "execute_result"]
    assert results == [
        {
            "output_type": "execute_result",
            "execution_count": 1,
            "data": {"text/plain": "{1, 2, 3}"},
            "metadata": {},
        }
    ]


def test_value_over_cap_is_output_limit(gateway):
    from kernelgate import Limits

    r = gateway.run_sync("return 'x' * 5000", limits=Limits(max_value_bytes=1000))
    assert r.status == "output_limit"
    assert "max_value_bytes=1000" in r.error.evalue
    assert r.value is None


def test_top_level_await_async_for_and_with(run):
    program = """
import asyncio, contextlib

@contextlib.asynccontextmanager
async def ctx():
    yield 5

async def gen():
    for i in range(3):
        await asyncio.sleep(0)
        yield i

async with ctx() as five:
    total = five
async for i in gen():
    total += i
return total
"""
    assert run(program).value == 8


def test_globals_behave_as_in_a_module(run):
    program = "count = 0\ndef inc():\n    global count\n    count += 1\ninc()\ninc()\ncount"
    assert run(program).value == 2


def test_future_import_and_docstring(run):
    r = run(
        '"""doc"""\nfrom __future__ import annotations\ndef f(x: Undefined) -> int:\n    return 1\nf(0)'
    )
    assert r.ok and r.value == 1


def test_exception_traceback_shows_program_frames_only(run):
    r = run("x = 1\n\ndef f():\n    return 1 / 0\n\nf()")
    assert r.status == "exception"
    assert r.error.ename == "ZeroDivisionError"
    assert r.error.evalue == "division by zero"
    text = "\n".join(r.error.traceback)
    assert 'File "<program>", line 6, in <module>' in text
    assert 'File "<program>", line 4, in f' in text
    assert "kernelgate" not in text
    assert [o["output_type"] for o in r.outputs] == ["error"]


def test_exception_chain_keeps_program_frames(run):
    r = run("try:\n    {}['k']\nexcept KeyError as e:\n    raise RuntimeError('wrapped') from e")
    text = "\n".join(r.error.traceback)
    assert "KeyError: 'k'" in text and "RuntimeError: wrapped" in text
    assert "direct cause" in text and "kernelgate" not in text


def test_syntax_error_has_program_line(run):
    r = run("x = 1\ny = (\n")
    assert r.status == "exception"
    assert r.error.ename == "SyntaxError"
    assert any('File "<program>", line 2' in line for line in r.error.traceback)


def test_output_before_failure_is_kept(run):
    r = run("print('before')\nimport sys\nsys.stderr.write('err\\n')\nraise ValueError('boom')")
    assert r.status == "exception"
    assert r.stdout == "before\n" and r.stderr == "err\n"


def test_prints_are_lines_and_tail_is_flushed(run):
    r = run("print('a', end='')\nprint('b')\nprint('c', end='')")
    assert r.stdout == "ab\nc"


def test_raw_fd_output_is_captured(run):
    r = run("import os\nos.write(1, b'raw out\\n')\nos.write(2, b'bad \\xff utf8\\n')")
    assert "raw out\n" in r.stdout
    assert r.stderr == "bad \ufffd utf8\n"


def test_subprocess_output_is_captured(run):
    r = run("import subprocess, sys\nsubprocess.run([sys.executable, '-c', 'print(42)'])")
    assert r.ok and "42\n" in r.stdout


def test_lone_surrogates_in_output_are_escaped(run):
    r = run("print('a\\ud800b')")
    assert r.stdout == "a\\ud800b\n"


def test_output_budget_keeps_head_and_tail_and_the_run_goes_on(gateway):
    from kernelgate import Limits

    r = gateway.run_sync(
        "for i in range(1000):\n    print('line', i)\nreturn 'done'",
        limits=Limits(max_output_bytes=100),
    )
    assert r.ok and r.value == "done"
    marker = r.output_cut["text"]
    assert r.stdout.count("[kernelgate: ") == 1 and r.stdout.count(marker) == 1
    head, tail = r.stdout.split(marker)
    whole = "".join(f"line {i}\n" for i in range(1000))
    assert head.startswith("line 0\n") and tail.endswith("line 999\n")
    assert whole.startswith(head) and whole.endswith(tail)
    assert len(head.encode()) <= 50 and len(tail.encode()) <= 50
    cut = r.output_cut["stdout"]
    assert len(head) + cut["chars"] + len(tail) == len(whole)
    dropped = whole[len(head) : len(whole) - len(tail)]
    assert f"{cut['bytes']} bytes ({dropped.count(chr(10))} lines) of stdout cut here" in marker


def test_newline_free_flood_is_cut(gateway):
    from kernelgate import Limits

    r = gateway.run_sync(
        "import sys\nfor i in range(10000):\n    sys.stdout.write('x' * 1000)\nreturn 1",
        limits=Limits(max_output_bytes=5000),
    )
    assert r.ok and r.value == 1
    marker = r.output_cut["text"]
    assert r.stdout == "x" * 2500 + marker + "x" * 2500
    assert r.output_cut["stdout"]["bytes"] == 10_000_000 - 5000


def test_system_exit_zero_is_ok_and_nonzero_is_exception(run):
    assert run("import sys\nprint('x')\nsys.exit(0)").status == "ok"
    r = run("import sys\nsys.exit(3)")
    assert r.status == "exception" and r.error.ename == "SystemExit"


def test_display_sends_rich_output(run):
    program = """
class Rich:
    def _repr_html_(self):
        return '<b>hi</b>'
    def __repr__(self):
        return 'Rich()'
display(Rich(), {'k': 1})
"""
    r = run(program)
    shown = [o for o in r.outputs if o["output_type"] == "display_data"]
    assert shown[0]["data"] == {"text/html": "<b>hi</b>", "text/plain": "Rich()"}
    assert shown[1]["data"] == {"text/plain": "{'k': 1}"}


def test_rebinding_builtins_does_not_break_reporting(run):
    r = run(
        "import builtins\nbuiltins.len = None\nbuiltins.isinstance = None\nbuiltins.str = None\nreturn [1, 2]"
    )
    assert r.ok and r.value == [1, 2]


def test_exception_whose_str_raises(run):
    r = run("class E(Exception):\n    def __str__(self):\n        raise RuntimeError\nraise E()")
    assert r.status == "exception" and r.error.ename == "E"
    assert "str() failed" in r.error.evalue


def test_deep_value_is_invalid_output(run):
    r = run("v = []\nfor _ in range(2000):\n    v = [v]\nreturn v")
    assert r.status == "invalid_output"
    assert "nested deeper than 500 levels" in r.error.evalue
