"""kernels/python/program.py in-process: the program as the body of an async function, its
syntax errors, and tracebacks that keep only the program's frames."""

from __future__ import annotations

import ast
import asyncio
import json
import linecache
import sys
from typing import Any

import pytest

from kernelgate.kernels.python.program import (
    FILENAME,
    LAST_EXPRESSION,
    _Bound,
    bind_globals,
    bound_names,
    compile_program,
    forget_source,
    format_exception,
)


def run(source: str, globals_: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
    """Compile and run ``source`` as the child does; its outcome and its globals."""
    g: dict[str, Any] = {"__name__": "__main__"} if globals_ is None else globals_
    fn = compile_program(source)
    outcome = asyncio.run(bind_globals(fn, g)())
    return outcome, g


def failure(source: str) -> BaseException:
    """The exception ``source`` raises when run."""
    with pytest.raises(BaseException) as info:
        run(source)
    return info.value


@pytest.fixture(autouse=True)
def _no_source_left():
    yield
    forget_source()


# -- what a program's function returns -----------------------------------------------------


def test_return_gives_the_value_itself():
    assert run("return {'a': [1, 2]}")[0] == {"a": [1, 2]}


def test_a_final_expression_is_marked_as_such():
    outcome, _ = run("x = 20\nx + 1")
    assert outcome == (LAST_EXPRESSION, 21)


def test_no_return_and_no_final_expression_is_none():
    assert run("x = 1")[0] is None
    assert run("")[0] is None
    assert run("# only a comment\n")[0] is None


def test_return_inside_a_branch_wins_over_the_final_expression():
    outcome, _ = run("if True:\n    return 'early'\n'late'")
    assert outcome == "early"


def test_top_level_await_and_async_for_and_with():
    source = (
        "import asyncio, contextlib\n"
        "async def gen():\n"
        "    for i in range(3):\n"
        "        await asyncio.sleep(0)\n"
        "        yield i\n"
        "@contextlib.asynccontextmanager\n"
        "async def ctx():\n"
        "    yield 10\n"
        "async with ctx() as base:\n"
        "    got = [base + i async for i in gen()]\n"
        "await asyncio.sleep(0)\n"
        "return got"
    )
    assert run(source)[0] == [10, 11, 12]


# -- the program's names are module globals ------------------------------------------------


def test_top_level_names_land_in_the_globals():
    _, g = run(
        "import json as j\n"
        "from os import path\n"
        "a = 1\n"
        "b, (c, d) = 2, (3, 4)\n"
        "def f(): return a\n"
        "class K: pass\n"
        "for i in range(2): pass\n"
        "try:\n    raise ValueError\nexcept ValueError as e:\n    caught = True\n"
        "with open(__file__ if False else '/dev/null') as fh: pass\n"
        "[w := 5 for _ in range(1)]\n"
    )
    for name in ("j", "path", "a", "b", "c", "d", "f", "K", "i", "caught", "fh", "w"):
        assert name in g, name
    assert "e" not in g  # deleted at the end of the except clause, as in a module
    assert g["f"]() == 1


def test_global_in_a_function_rebinds_the_program_s_name():
    outcome, g = run("n = 0\ndef bump():\n    global n\n    n += 1\nbump()\nbump()\nreturn n")
    assert outcome == 2 and g["n"] == 2


def test_functions_see_names_bound_later_at_top_level():
    assert run("def f():\n    return later\nlater = 'seen'\nreturn f()")[0] == "seen"


def test_comprehension_variables_stay_local_but_walrus_escapes():
    outcome, g = run("xs = [y * 2 for y in range(3)]\n[last := y for y in range(4)]\nreturn xs")
    assert outcome == [0, 2, 4]
    assert "y" not in g and g["last"] == 3


_BINDINGS = [
    "return await tools.echo(1)",
    "print(1)\nx = 1\ny += x\nz: int\nw: int = 2\na, (b, *c) = 1, (2, 3)\nd[0] = e.f = 1",
    "f = lambda q=1: q\ng = [h for h in range(3)]\nreturn {k: v for k, v in {}.items()}",
    "import os.path, sys as system\nfrom json import dumps as d, loads\ndel d",
    "for i in range(2):\n    j = i\nelse:\n    k = 1\nwhile False:\n    m = 1",
    "with open('x') as (fh, gh), open('y') as ih:\n    pass\nasync with a as b:\n    pass",
    "try:\n    pass\nexcept E as err:\n    inner = 1\nfinally:\n    fin = 1",
    "@deco(dv := 1)\nclass C(B, metaclass=M):\n    attr = 1\n@d\nasync def f(a=(dflt := 2)):\n    loc = 1",
    "if (n := 10) > 5:\n    x = [last := y for y in range(n)]\nreturn (r := 1)",
    "x = (w := 3)\ny += (v := 4)\nz: int = (u := 5)\nreturn ':='",
    "s = ':='\nreturn s",
    "match v:\n    case {'k': [first, *rest], **others} | [first, *rest] if g:\n        pass\n"
    "    case Point(x=px) as pt:\n        pass",
    "global gx\ngx = 1\nasync for ai in it:\n    pass",
]


@pytest.mark.parametrize("source", _BINDINGS)
def test_bound_names_skips_only_expressions_that_cannot_bind(source):
    """The fast path (no ``:=`` in the source: statements' expressions are not visited)
    finds exactly the names the full visit finds, in the same order."""
    body = ast.parse(source).body
    full = _Bound()
    for stmt in body:
        full.visit(stmt)
    assert bound_names(body, source) == full.names
    # Forced through the fast path where the source has no walrus outside a string.
    if ":=" not in source.replace("':='", ""):
        assert bound_names(body, source.replace("':='", "''")) == full.names


def test_match_captures_are_globals():
    _, g = run("match {'k': [1, 2, 3]}:\n    case {'k': [first, *rest], **others}:\n        pass\n")
    assert g["first"] == 1 and g["rest"] == [2, 3] and g["others"] == {}


def test_future_imports_are_hoisted_even_after_a_docstring():
    outcome, g = run('"""doc"""\nfrom __future__ import annotations\ndef f(x: Undefined): pass\n1')
    assert outcome == (LAST_EXPRESSION, 1)
    assert g["f"].__annotations__ == {"x": "Undefined"}


def test_the_code_object_is_named_module():
    fn = compile_program("1")
    assert fn.__code__.co_name == "<module>"
    assert fn.__code__.co_filename == FILENAME


# -- syntax errors -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "source, line, text",
    [
        ("x = 1\ny = (\n", 2, "never closed"),
        ("x = 1\n\nif x\n    pass", 3, "expected ':'"),
        ("ok = 1\nyield 5", 2, "'yield' outside function"),
        ("ok = 1\nx = yield\nx", 2, "'yield' outside function"),
        ("def f():\n    yield 1\nfor i in f():\n    yield from f()", 4, "'yield from'"),
        ("a = 1\nnonlocal a", None, "nonlocal declaration not allowed at module level"),
        ("def f():\n    await g()", 2, "'await' outside async function"),
    ],
    ids=[
        "unclosed",
        "missing-colon",
        "yield-last",
        "yield",
        "yield-from",
        "nonlocal",
        "await-in-def",
    ],
)
def test_syntax_errors_name_the_program_s_own_line(source, line, text):
    with pytest.raises(SyntaxError) as info:
        compile_program(source)
    assert text in str(info.value)
    if line is not None:
        assert info.value.lineno == line
        assert info.value.filename == FILENAME


def test_source_with_a_nul_byte_is_a_value_error():
    with pytest.raises((ValueError, SyntaxError)):
        compile_program("x = 1\0")


# -- runtime line numbers and tracebacks -----------------------------------------------------


def test_a_runtime_error_reports_the_program_s_line_and_source():
    exc = failure("a = 1\nb = 2\nraise ValueError(f'boom {a + b}')")
    ename, evalue, tb = format_exception(exc)
    assert (ename, evalue) == ("ValueError", "boom 3")
    assert tb[0] == "Traceback (most recent call last):"
    assert f'  File "{FILENAME}", line 3, in <module>' in tb
    assert "    raise ValueError(f'boom {a + b}')" in tb  # the source line, from linecache
    assert tb[-1] == "ValueError: boom 3"


def test_tracebacks_keep_only_the_program_s_frames():
    exc = failure("import json\ndef parse(text):\n    return json.loads(text)\nparse('{bad')")
    ename, _, tb = format_exception(exc)
    assert ename == "JSONDecodeError"
    frames = [line for line in tb if line.startswith("  File ")]
    assert frames == [
        f'  File "{FILENAME}", line 4, in <module>',
        f'  File "{FILENAME}", line 3, in parse',
    ]
    assert not any("json" in f and FILENAME not in f for f in frames)
    assert "decoder.py" not in "\n".join(tb)


def test_chained_exceptions_keep_only_program_frames_in_every_link():
    exc = failure(
        "import json\n"
        "try:\n"
        "    json.loads('x')\n"
        "except ValueError as e:\n"
        "    raise KeyError('outer') from e"
    )
    _, _, tb = format_exception(exc)
    text = "\n".join(tb)
    assert "The above exception was the direct cause" in text
    assert "decoder.py" not in text and "__init__.py" not in text
    assert text.count(f'File "{FILENAME}"') == 2


@pytest.mark.skipif(sys.version_info < (3, 11), reason="ExceptionGroup is Python 3.11+")
def test_exception_group_members_keep_only_program_frames():
    exc = failure(
        "import json\n"
        "errors = []\n"
        "for text in ['x', 'y']:\n"
        "    try:\n"
        "        json.loads(text)\n"
        "    except ValueError as e:\n"
        "        errors.append(e)\n"
        "raise ExceptionGroup('two', errors)"
    )
    ename, _, tb = format_exception(exc)
    text = "\n".join(tb)
    assert ename == "ExceptionGroup"
    assert "decoder.py" not in text
    assert text.count(f'File "{FILENAME}", line 5') == 2


def test_long_tracebacks_and_chains_are_cut_with_one_marker():
    # Two functions in turn: Python does not fold their frames into "repeated" lines.
    exc = failure("def f(n):\n    return g(n)\ndef g(n):\n    return f(n + 1)\nf(0)")
    ename, _, tb = format_exception(exc, max_chars=4000)
    assert ename == "RecursionError"
    text = "\n".join(tb)
    assert len(text) < 4200
    assert text.count("characters of traceback cut") == 1

    chain = failure(
        "e = None\n"
        "for i in range(300):\n"
        "    try:\n"
        "        raise ValueError(i) from e\n"
        "    except ValueError as new:\n"
        "        e = new\n"
        "raise e"
    )
    _, _, tb = format_exception(chain, max_links=10)
    assert "\n".join(tb).count("direct cause") < 10


def test_an_exception_whose_str_fails_is_still_reported():
    exc = failure(
        "class E(Exception):\n    def __str__(self):\n        raise RuntimeError('no')\nraise E()"
    )
    ename, evalue, tb = format_exception(exc)
    assert ename == "E"
    assert "str() failed" in evalue
    assert tb  # rendered, or the fixed line saying rendering failed: never raises


def test_a_huge_message_is_capped():
    exc = failure("raise ValueError('v' * 1_000_000)")
    _, evalue, tb = format_exception(exc, max_chars=10_000)
    assert len(evalue) <= 10_100 and "characters cut" in evalue
    assert len("\n".join(tb)) <= 10_200


def test_lone_surrogates_in_a_traceback_are_escaped():
    exc = failure("raise ValueError('bad \\ud800')")
    _, evalue, tb = format_exception(exc)
    assert evalue == "bad \\ud800"
    json.dumps(tb, ensure_ascii=False).encode("utf-8")  # every line can be sent


def test_forget_source_drops_the_program_s_lines():
    compile_program("x = 1")
    assert FILENAME in linecache.cache
    forget_source()
    assert FILENAME not in linecache.cache
