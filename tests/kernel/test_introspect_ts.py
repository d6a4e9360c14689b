"""Completion, inspection and is_complete of TypeScript cells (jupyter/introspect_ts.py),
and how a TypeScript notebook's cells are read (jupyter/workbench_ts.py): pure, no kernel."""

from __future__ import annotations

from typing import Any

import pytest

from kernelgate.gateway.bindings import BindingRegistry
from kernelgate.jupyter.introspect_ts import complete, inspect_code, is_complete
from kernelgate.jupyter.workbench_ts import ScriptWorkbench
from kernelgate.model.result import ErrorInfo


async def search(query: str, limit: int = 3) -> list[str]:
    """Search the corpus.

    Returns ids, best first."""
    return [query] * limit


async def web_search(q: str, *, region: str = "eu") -> dict[str, Any]:
    """Search the web."""
    return {}


def _namespaces() -> Any:
    registry = BindingRegistry.from_arguments(
        {"search": search, "web-search": web_search}, "tools", None
    )
    return registry.namespaces


def test_tools_dot_completes_bindings_with_their_typescript_signature() -> None:
    reply = complete("const r = await tools.se", None, _namespaces())
    assert reply["matches"] == ["search"]
    assert reply["cursor_start"] == len("const r = await tools.")
    (item,) = reply["metadata"]["_jupyter_types_experimental"]
    assert item["signature"] == "search(query: string, limit?: number): Promise<string[]>"
    assert item["type"].replace("\u00a0", " ") == "function search(query: string, limit?: number)"
    # A name that is not an identifier is reached by subscript only.
    assert "web-search" not in complete("tools.", None, _namespaces())["matches"]


def test_tools_subscript_completes_every_name() -> None:
    reply = complete('await tools["we', None, _namespaces())
    assert reply["matches"] == ["web-search"]
    assert reply["cursor_start"] == len('await tools["')
    sig = reply["metadata"]["_jupyter_types_experimental"][0]["signature"]
    assert "keywords?: { region?: string }" in sig


def test_names_globals_keywords_and_the_cell_s_own() -> None:
    code = "const total = 1;\nlet [first, second] = [1, 2];\nfunction helper() {}\n"
    matches = set(complete(code + "t", None, _namespaces())["matches"])
    assert {"total", "tools", "typeof", "throw", "true"} <= matches
    assert {"first"} <= set(complete(code + "fi", None, _namespaces())["matches"])
    assert {"helper"} <= set(complete(code + "hel", None, _namespaces())["matches"])
    assert set(complete("Pro", None, {})["matches"]) >= {"Promise"}
    assert set(complete("aw", None, {})["matches"]) == {"await"}
    assert complete("JSON.str", None, {})["matches"] == ["stringify"]
    # No Python here: no 'def', no 'print' builtin.
    assert "def" not in complete("de", None, {})["matches"]
    assert "print" not in complete("pri", None, {})["matches"]


def test_inspect_gives_the_typescript_declaration_and_whole_doc() -> None:
    reply = inspect_code("tools.search", None, _namespaces())
    text = reply["data"]["text/plain"]
    assert text.startswith("tools.search(query: string, limit?: number): Promise<string[]>;")
    assert "Returns ids, best first." in text
    # Inside a call, the callee; by subscript; the namespace; a global.
    inside = inspect_code('await tools.search("x", ', None, _namespaces())
    assert inside["found"] and "Promise<string[]>" in inside["data"]["text/plain"]
    sub = inspect_code('tools["web-search"]', None, _namespaces())
    assert sub["found"] and "Search the web." in sub["data"]["text/plain"]
    ns = inspect_code("tools", None, _namespaces())["data"]["text/plain"]
    assert "declare const tools: {" in ns and '"web-search"(q: string' in ns
    assert "ToolError" in inspect_code("ToolError", None, {})["data"]["text/plain"]
    assert inspect_code("nothing.here", None, _namespaces())["found"] is False


@pytest.mark.parametrize(
    ("code", "status"),
    [
        ("1", "complete"),
        ("const a = [1, 2];", "complete"),
        ("const r = /[)]/.test('x'); r", "complete"),  # a regex holding a bracket
        ("const half = 4 / 2; (half)", "complete"),
        ("const s = `${[1].map(x => `${x}`)}`;", "complete"),  # nested templates
        ("// a comment with ( and '\nconst x = 1", "complete"),
        ("const o = {a: {b: 1}}", "complete"),
        ("function f() {\n  return 1;", "incomplete"),
        ("const s = `line one\nline two", "incomplete"),
        ("const s = `${ [1, ", "incomplete"),
        ("/* open", "incomplete"),
        ("console.log('abc", "incomplete"),
        ("let x = )", "invalid"),
        ("const o = {a: 1]", "invalid"),
        ("const s = 'a\nb'", "invalid"),
    ],
)
def test_is_complete_balances_without_running(code: str, status: str) -> None:
    assert is_complete(code)["status"] == status


def test_incomplete_gives_the_next_indent() -> None:
    assert is_complete("if (x) {")["indent"] == "  "
    assert is_complete("if (x) {\n    f(1,")["indent"] == "    "


def test_setup_cells_and_the_reference_error_hint() -> None:
    bench = ScriptWorkbench()
    assert bench.plan("//| setup\nconst limit = 2;", 1, {}).setup
    bad = bench.plan("//| setup\nconst broken = (1;", 2, {})
    assert bad.refusal is not None and "not kept" in bad.refusal[1]
    plan = bench.plan("const n = limit + 1;\nn", 3, {})
    assert plan.program is not None
    assert plan.program.text == "//| setup\nconst limit = 2;\nconst n = limit + 1;\nn"
    bench.ran("const n = limit + 1;\nn", 3)
    # Python's %magic refusal does not apply: '!' and '%' are JavaScript operators.
    assert bench.plan("!false", 4, {}).refusal is None
    error = ErrorInfo(
        "ReferenceError",
        "n is not defined",
        ["ReferenceError: n is not defined", "    at <program>:3:1"],
    )
    program = bench.plan("n", 5, {}).program
    shown = bench.shown_error(program, error, 5)
    text = "\n".join(shown.traceback)
    assert "Cell In[5]:1:1" in text and "<program>" not in text
    assert "'n' was declared in cell [3]" in text and "//| setup" in text


def test_a_hostile_error_message_stays_inert() -> None:
    """Escape sequences in a TypeScript program's error (message or stack) are shown as
    text: an error cannot clear the screen, set the title or cancel the kernel's colours."""
    evil = "\x1b[2J\x1b]0;pwned\x07\x9b31m"
    error = ErrorInfo("Error", evil, [f"Error: {evil}", f"    at f{evil} (<program>:1:7)"])
    shown = ScriptWorkbench().shown_error(None, error, 1)
    for line in shown.traceback:
        cleaned = line
        for colour in ("\x1b[0;31m", "\x1b[0;32m", "\x1b[0m"):
            cleaned = cleaned.replace(colour, "")
        assert "\x1b" not in cleaned and "\x07" not in cleaned and "\x9b" not in cleaned
    assert any("\\x1b[2J" in line for line in shown.traceback)
