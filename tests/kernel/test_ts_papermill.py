"""papermill's ``-p`` parameters with the TypeScript kernel: the translator kernelgate's
``papermill.engine`` entry point registers (kernelgate/jupyter/papermill.py), driven by the
real papermill CLI and ``execute_notebook`` against the real kernel, every JSON type, and
values (and names) that try to become code."""

from __future__ import annotations

import json
import math
import os
import pathlib
import shutil
import subprocess
import sys
from typing import Any

import nbformat
import papermill
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nbformat.v4 import new_code_cell, new_notebook
from papermill.exceptions import PapermillException

from kernelgate.cli import main as kernelgate_main
from kernelgate.jupyter.introspect_ts import is_complete
from kernelgate.jupyter.papermill import ScriptTranslator
from kernelgate.notebooks import load_run

from .conftest import NEEDS_NODE
from .helpers import TS_KERNEL_NAME

#: Every test has its own limit; the kernel tests a longer one.
pytestmark = pytest.mark.timeout(60)

_KERNELSPEC = {
    "name": TS_KERNEL_NAME,
    "display_name": "kernelgate (TypeScript)",
    "language": "typescript",
}

#: The notebook's own parameters cell: a setup cell declaring each parameter with let.
_PARAMETERS = (
    "//| setup\n"
    "let limit: number = 1; // how many results\n"
    "let ratio = 0.5;\n"
    "let flag = false;\n"
    'let name = "default"; // who: a // in a comment\n'
    'let url = "http://example.org/"; // not cut at the //\n'
    'let nothing: string | null = "set";\n'
    "let items: unknown[] = [];\n"
    "let options: Record<string, unknown> = {};\n"
)

#: A cell returning every parameter, non-finite numbers spelled out (JSON has none).
_READ = (
    "const enc = (v: any): any =>\n"
    "  v === undefined ? null\n"
    "  : typeof v === 'number' && !Number.isFinite(v) ? { number: String(v) }\n"
    "  : Array.isArray(v) ? v.map(enc)\n"
    "  : v !== null && typeof v === 'object'\n"
    "    ? Object.fromEntries(Object.entries(v).map(([k, x]) => [k, enc(x)]))\n"
    "  : v;\n"
    "const g = globalThis as any;\n"
    "return enc({ limit, ratio, flag, name, url, nothing, items, options,\n"
    "  big: g.big, pinf: g.pinf, ninf: g.ninf, nan: g.nan,\n"
    "  plain: Object.getPrototypeOf(options) === Object.prototype,\n"
    "  polluted: ({} as any).polluted === undefined ? 'no' : 'yes' });\n"
)


def _notebook(parameters: str = _PARAMETERS) -> nbformat.NotebookNode:
    return new_notebook(
        cells=[
            new_code_cell(parameters, metadata={"tags": ["parameters"]}),
            new_code_cell(_READ),
        ],
        metadata={"kernelspec": dict(_KERNELSPEC)},
    )


def _papermill(*args: str, cwd: pathlib.Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "papermill", *args],
        capture_output=True,
        text=True,
        timeout=150,
        cwd=str(cwd),
        env=dict(os.environ),
    )


def _record(path: pathlib.Path) -> dict[str, Any]:
    """The last cell's run record. Read with nbformat, not load_run: papermill keeps the
    parameters in the notebook's metadata, where it writes a NaN or an Infinity as such,
    and load_run refuses a notebook holding one."""
    cell = nbformat.read(str(path), as_version=4).cells[-1]
    (record,) = [o for o in cell.outputs if o.get("metadata", {}).get("kernelgate")]
    return dict(record.metadata["kernelgate"])


def _num(text: str) -> dict[str, str]:
    return {"number": text}


@NEEDS_NODE
@pytest.mark.timeout(180)
def test_cli_parameters_of_every_type_win_over_the_notebooks(tmp_path: pathlib.Path) -> None:
    source, out = tmp_path / "in.ipynb", tmp_path / "out.ipynb"
    nbformat.write(_notebook(), str(source))
    # String keys: papermill saves the parameters in the notebook's metadata, sorted.
    options = "options: {'1': one, 'true': t, __proto__: {polluted: 1}, x: .nan}"
    done = _papermill(
        str(source), str(out), "-k", TS_KERNEL_NAME,
        "-p", "limit", "2",
        "-p", "ratio", "0.25",
        "-p", "flag", "True",
        "-p", "name", 'it\'s "quoted"\n${process.exit(3)}`',
        "-p", "nothing", "None",
        "-p", "big", "12345678901",  # not in the parameters cell: papermill warns
        "-p", "pinf", "inf",
        "-p", "ninf", "-inf",
        "-p", "nan", "nan",
        "-y", "items: [1, 'a', null, [true, 1.5]]",
        "-y", options,
        cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "Passed unknown parameter: big" in done.stderr
    assert "does not support parameter introspection" not in done.stderr
    cells = nbformat.read(str(out), as_version=4).cells
    injected = cells[1]
    assert injected.metadata["tags"] == ["injected-parameters"]
    assert injected.source.startswith("// Parameters\n") and "\nlimit = 2;\n" in injected.source
    run = _record(out)
    assert run["status"] == "ok", run["error"]
    assert run["value"] == {
        "limit": 2,
        "ratio": 0.25,
        "flag": True,
        "name": 'it\'s "quoted"\n${process.exit(3)}`',
        "url": "http://example.org/",
        "nothing": None,
        "items": [1, "a", None, [True, 1.5]],
        "options": {"1": "one", "true": "t", "__proto__": {"polluted": 1},
                    "x": _num("NaN")},
        "big": 12345678901,
        "pinf": _num("Infinity"),
        "ninf": _num("-Infinity"),
        "nan": _num("NaN"),
        "plain": True,
        "polluted": "no",
    }  # fmt: skip
    # The program that ran: the notebook's setup cell, then papermill's, then the cell.
    assert run["program"].index("let limit") < run["program"].index("limit = 2;")


#: Strings that would be code if a translation let them out of their literal.
_HOSTILE = [
    '"; process.exit(); "',
    "'; process.exit(); '",
    "`${process.exit()}`",
    "${process.exit()}",
    "\\",
    '\\"); process.exit(); ("',
    "*/ process.exit(); /*",
    "line\n// Parameters\nprocess.exit();",
    "\r\nprocess.exit();\u2028process.exit();\u2029process.exit();",
    "\x00\x1b[2J\x7f\u202e",
    "</script><script>process.exit()</script>",
    "caf\u00e9 \u65e5\u672c \U0001f389",
]


@NEEDS_NODE
@pytest.mark.timeout(180)
def test_execute_notebook_keeps_hostile_values_values(tmp_path: pathlib.Path) -> None:
    """``papermill.execute_notebook(parameters=...)``: every hostile string, as a value and
    as an object's key, arrives as the same string; nothing it holds runs."""
    source, out = tmp_path / "in.ipynb", tmp_path / "out.ipynb"
    nbformat.write(_notebook(), str(source))
    keys = {text: i for i, text in enumerate(_HOSTILE)}
    papermill.execute_notebook(
        str(source),
        str(out),
        kernel_name=TS_KERNEL_NAME,
        parameters={"items": _HOSTILE, "options": keys, "name": _HOSTILE[0]},
        progress_bar=False,
    )
    run = load_run(str(out), cell=-1)
    assert run.status == "ok", run.error
    assert run.value["items"] == _HOSTILE
    assert run.value["options"] == keys
    assert run.value["name"] == _HOSTILE[0]
    assert run.value["limit"] == 1  # not passed: the notebook's own


@NEEDS_NODE
@pytest.mark.timeout(180)
def test_parameters_without_a_parameters_cell_and_a_const_one(tmp_path: pathlib.Path) -> None:
    """With no ``parameters`` cell papermill injects at the top, and an undeclared name is a
    global of each later cell; a ``const`` parameter cannot be assigned, and papermill
    says so before the run (and the run fails saying where)."""
    bare = new_notebook(
        cells=[new_code_cell("return [limit, typeof limit];")],
        metadata={"kernelspec": dict(_KERNELSPEC)},
    )
    source, out = tmp_path / "bare.ipynb", tmp_path / "bare-out.ipynb"
    nbformat.write(bare, str(source))
    papermill.execute_notebook(
        str(source), str(out), kernel_name=TS_KERNEL_NAME, parameters={"limit": 3},
        progress_bar=False,
    )  # fmt: skip
    assert load_run(str(out), cell=-1).value == [3, "number"]

    source, out = tmp_path / "const.ipynb", tmp_path / "const-out.ipynb"
    nbformat.write(_notebook("//| setup\nconst limit = 1;\n"), str(source))
    done = _papermill(str(source), str(out), "-p", "limit", "2", cwd=tmp_path)
    assert done.returncode != 0
    assert "'limit' is declared with const" in done.stderr
    assert "Assignment to constant variable" in done.stderr


@NEEDS_NODE
@pytest.mark.timeout(180)
def test_the_javascript_kernel_takes_parameters_too(
    kernelspec: str, tmp_path: pathlib.Path
) -> None:
    """A ``--language javascript`` kernel, under its default name, in the same prefix."""
    prefix = pathlib.Path(kernelspec).parent.parent
    code = kernelgate_main(
        ["kernel", "install", "--prefix", str(prefix), "--language", "javascript",
         "--bindings", "kernelgate.demo:BINDINGS"]
    )  # fmt: skip
    assert code == 0
    nb = new_notebook(
        cells=[
            new_code_cell("//| setup\nlet limit = 1;\n", metadata={"tags": ["parameters"]}),
            new_code_cell("return [limit, name];"),
        ],
        metadata={"kernelspec": {"name": "kernelgate-javascript", "language": "javascript",
                                 "display_name": "kernelgate (JavaScript)"}},
    )  # fmt: skip
    source, out = tmp_path / "in.ipynb", tmp_path / "out.ipynb"
    nbformat.write(nb, str(source))
    papermill.execute_notebook(
        str(source), str(out), parameters={"limit": 5, "name": _HOSTILE[0]}, progress_bar=False
    )
    assert _record(out)["value"] == [5, _HOSTILE[0]]


@NEEDS_NODE
@pytest.mark.timeout(120)
def test_help_notebook_lists_the_typescript_parameters(tmp_path: pathlib.Path) -> None:
    source = tmp_path / "in.ipynb"
    nbformat.write(_notebook(), str(source))
    done = _papermill("--help-notebook", str(source), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "limit: number (default 1)" in done.stdout and "how many results" in done.stdout
    assert 'name: string (default "default")' in done.stdout
    assert "who: a // in a comment" in done.stdout
    assert 'url: string (default "http://example.org/")' in done.stdout
    assert "nothing: string | null" in done.stdout
    assert papermill.inspect_notebook(str(source))["ratio"]["inferred_type_name"] == "number"


@pytest.mark.timeout(60)
def test_papermill_loads_the_translator_and_keeps_its_default_engine() -> None:
    """A fresh interpreter: importing papermill (or kernelgate's module first) registers the
    translator; papermill's default engine stays its own, and ``kernelgate`` is that one."""
    check = (
        "import papermill.engines as e, papermill.translators as t, sys\n"
        "from kernelgate.jupyter.papermill import ScriptTranslator\n"
        "for name in ('kernelgate-typescript', 'kernelgate-javascript'):\n"
        "    assert t.papermill_translators.find_translator(name, '?') is ScriptTranslator\n"
        "assert t.papermill_translators.find_translator('k', 'typescript') is ScriptTranslator\n"
        "assert t.papermill_translators.find_translator('k', 'python').__name__ == 'PythonTranslator'\n"
        "assert e.papermill_engines.get_engine(None) is e.NBClientEngine\n"
        "mine = e.papermill_engines.get_engine('kernelgate')\n"
        "assert mine.execute_notebook == e.NBClientEngine.execute_notebook\n"
        "assert mine.nb_language == e.NBClientEngine.nb_language\n"
        "print(sorted(m for m in sys.modules if m.startswith('kernelgate')))\n"
    )
    for first in ("import papermill", "import kernelgate.jupyter.papermill"):
        done = subprocess.run(
            [sys.executable, "-c", f"{first}\n{check}"],
            capture_output=True,
            text=True,
            timeout=50,
        )
        assert done.returncode == 0, done.stderr
        # Nothing of kernelgate's but the module and its packages' (lazy) __init__s.
        assert done.stdout.strip() == str(
            ["kernelgate", "kernelgate.jupyter", "kernelgate.jupyter.papermill"]
        )


def test_the_injected_cell_is_assignments_under_a_setup_marker() -> None:
    cell = ScriptTranslator.codify(
        {"a": None, "b": True, "c": -7, "d": -0.0, "e": 1e300, "f": [], "g": {}, "h": "\u00e9"}
    )
    assert cell == (
        "// Parameters\na = null;\nb = true;\nc = -7;\nd = -0.0;\ne = 1e+300;\nf = [];\n"
        'g = {};\nh = "\\u00e9";\n'
    )
    # Keys that are not strings (the Python API's) become JavaScript's strings for them.
    keys = {1: 0, None: 0, False: 0, 1.5: 0, (1, '"'): 0, "__proto__": 0}
    assert ScriptTranslator.translate(keys) == (
        '{[1]: 0, [null]: 0, [false]: 0, [1.5]: 0, ["(1, \'\\"\')"]: 0, ["__proto__"]: 0}'
    )
    # Another comment (papermill's parameterize_notebook takes one) is still a setup cell,
    # and its newlines cannot end the comment.
    other = ScriptTranslator.codify({"a": 1}, comment="mine\nprocess.exit()")
    assert other == "//| setup\n// mine\n// process.exit()\na = 1;\n"


@pytest.mark.parametrize(
    "name",
    [
        "x; process.exit()",
        "1x",
        "a-b",
        "caf\u00e9",
        "",
        "let",
        "undefined",
        "NaN",
        "eval",
        "__proto__",
    ],
)
def test_a_name_that_is_not_an_assignable_identifier_is_refused(name: str) -> None:
    with pytest.raises(PapermillException, match="parameter name"):
        ScriptTranslator.codify({name: 1})


@pytest.mark.timeout(60)
def test_a_const_parameter_is_reported_and_warned_of(caplog: pytest.LogCaptureFixture) -> None:
    cell = {
        "source": "//| setup\nconst limit = 1; // max\nlet q: string = 'x';\nconst f = () => 1;"
    }
    found = ScriptTranslator.inspect(cell)
    assert [(p.name, p.inferred_type_name, p.default, p.help) for p in found] == [
        ("limit", "number", "1", "max"),
        ("q", "string", "'x'", ""),
        ("f", "None", "() => 1", ""),
    ]
    assert "'limit' is declared with const" in caplog.text


#: Any text, lone surrogates included (a Python str may hold one).
_TEXT = st.text(st.characters(exclude_categories=()))
_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**53), max_value=2**53)
    | st.floats()
    | _TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_TEXT, inner, max_size=4),
    max_leaves=12,
)
#: Node's view of a value: a number as its String() (exact, and NaN, -0 and Infinity kept),
#: an object as [whether its prototype is Object's, its own entries].
_ENCODE = (
    "const enc = (v) => typeof v === 'number' ? (Object.is(v, -0) ? '-0' : String(v))\n"
    "  : Array.isArray(v) ? v.map(enc)\n"
    "  : v !== null && typeof v === 'object'\n"
    "    ? [Object.getPrototypeOf(v) === Object.prototype,\n"
    "       Object.fromEntries(Object.entries(v).map(([k, x]) => [k, enc(x)]))]\n"
    "  : v;\n"
)


def _same(seen: Any, value: Any) -> bool:
    """Whether :data:`_ENCODE`'s view ``seen`` is ``value``, bit for bit."""
    if isinstance(value, bool) or value is None:
        return seen is value
    if isinstance(value, (int, float)):
        number = float("-0" if seen == "-0" else seen)
        if math.isnan(value):
            return math.isnan(number)
        return number == value and math.copysign(1, number) == math.copysign(1, value)
    if isinstance(value, list):
        return len(seen) == len(value) and all(map(_same, seen, value))
    if isinstance(value, dict):
        plain, entries = seen
        return (
            plain is True
            and entries.keys() == value.keys()
            and all(_same(entries[k], v) for k, v in value.items())
        )
    return bool(seen == value)


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
@pytest.mark.timeout(120)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_JSON, min_size=1, max_size=8))
def test_any_json_value_reads_back_equal_in_node(values: list[Any]) -> None:
    """Any JSON value (any string, float and key) translates to a cell the kernel keeps as a
    setup cell and that Node evaluates back to the same value."""
    names = [f"p{i}" for i in range(len(values))]
    cell = ScriptTranslator.codify(dict(zip(names, values, strict=True)))
    assert is_complete(cell)["status"] == "complete"
    assert cell.isascii()
    program = f"{cell}{_ENCODE}process.stdout.write(JSON.stringify([{', '.join(names)}].map(enc)));"
    done = subprocess.run(["node", "-e", program], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert _same(json.loads(done.stdout), values), (done.stdout, values)
