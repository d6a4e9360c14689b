"""The host-side program transform (kernelgate/gateway/jsprogram.py), with a real ``node``.

What the transform gives is run by a real ``node`` as the body of an async function (what the
Node child does with it), so "strips types" means "the program gives its value"; the helper is
a real process, and the hang/leak tests stop, kill and cancel it for real.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import re
import shutil
import signal
import subprocess
import time
from typing import Any

import pytest

from kernelgate.gateway.jsprogram import (
    MAX_SOURCE_CHARS,
    RECYCLE_AFTER_CHARS,
    ProgramSyntaxError,
    ProgramTransformer,
    ProgramTransformError,
    transform_program,
)
from tests.node.tscorpus import REFUSED, RUNS
from tests.procs import live_children, pid_alive

NODE = shutil.which("node")
pytestmark = pytest.mark.skipif(NODE is None, reason="node is not on PATH (the transform runs it)")

LINE_BREAK = re.compile(r"\r\n|[\n\r\u2028\u2029]")

# Runs each program as the Node child will: the body of an async function, compiled with
# vm.Script under the name <program> with the opening on the program's first line (so its
# line numbers are the program's). Prints one JSON answer per program.
RUNNER = r"""
const vm = require("node:vm");
const programs = JSON.parse(require("node:fs").readFileSync(0, "utf8"));
(async () => {
  const out = [];
  for (const code of programs) {
    try {
      const fn = new vm.Script("(async function () {" + code + "\n})", { filename: "<program>" })
        .runInThisContext();
      const value = await fn();
      out.push(value === undefined ? { undefined: true } : { value });
    } catch (error) {
      const at = /<program>:(\d+)/.exec(String(error.stack));
      out.push({ error: String(error), line: at ? Number(at[1]) : null });
    }
  }
  process.stdout.write(JSON.stringify(out));
})();
"""


def run_in_node(codes: list[str]) -> list[dict[str, Any]]:
    assert NODE is not None
    done = subprocess.run(
        [NODE, "-e", RUNNER],
        input=json.dumps(codes),
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    answers: list[dict[str, Any]] = json.loads(done.stdout)
    return answers


def transform_all(sources: list[str], language: str) -> list[str]:
    async def main() -> list[str]:
        async with ProgramTransformer() as transformer:
            return [await transformer.transform(s, language) for s in sources]  # type: ignore[arg-type]

    return asyncio.run(main())


def js_lines(text: str) -> list[str]:
    return LINE_BREAK.split(text)


def assert_lines_kept(source: str, code: str) -> None:
    """Same line count; every line the same length (types become blanks), except the one
    that got `return ` (7 more), at most one."""
    before, after = js_lines(source), js_lines(code)
    assert len(before) == len(after), (source, code)
    changed = [i for i, (a, b) in enumerate(zip(before, after, strict=True)) if len(a) != len(b)]
    assert len(changed) <= 1, (source, code)
    for i in changed:
        assert len(after[i]) == len(before[i]) + len("return "), (before[i], after[i])
        assert "return " in after[i]


# -- fidelity: the corpus of TypeScript an agent writes ----------------------------------


def test_typescript_corpus_runs_with_its_values() -> None:
    names = list(RUNS)
    sources = [RUNS[n][0] for n in names]
    codes = transform_all(sources, "typescript")
    for source, code in zip(sources, codes, strict=True):
        assert_lines_kept(source, code)
    for name, answer in zip(names, run_in_node(codes), strict=True):
        assert answer == {"value": RUNS[name][1]}, (name, codes[names.index(name)], answer)


@pytest.mark.parametrize("name", list(REFUSED))
def test_refused_typescript_says_what_and_where(name: str) -> None:
    source, (line, column), piece = REFUSED[name]
    with pytest.raises(ProgramSyntaxError) as caught:
        transform_program(source, "typescript")
    error = caught.value
    assert (error.line, error.column) == (line, column), str(error)
    assert piece in error.message
    assert f"(line {line}, column {column})" in str(error)


def test_javascript_is_parsed_not_stripped() -> None:
    # A type annotation is no JavaScript: refused where it stands.
    with pytest.raises(ProgramSyntaxError) as caught:
        transform_program("let a = 1;\nlet b: number = 2", "javascript")
    assert (caught.value.line, caught.value.column) == (2, 6)
    assert transform_program("let a = 1;\na", "javascript") == "let a = 1;\nreturn a"


# -- line numbers --------------------------------------------------------------------------


@pytest.mark.parametrize("language", ["typescript", "javascript"])
def test_runtime_errors_name_the_source_line(language: str) -> None:
    typed = ": number" if language == "typescript" else ""
    source = (
        f"// a comment\nconst xs{typed} = [1,\n  2,\n  3];\n\n"
        f"function boom(n{typed}) {{\n  if (n > 2)\n    throw new Error('line 8');\n}}\n"
        "xs.map(\n  boom\n)"
    )
    (code,) = transform_all([source], language)
    assert_lines_kept(source, code)
    (answer,) = run_in_node([code])
    assert answer["error"] == "Error: line 8" and answer["line"] == 8, answer


def test_line_terminators_are_javascripts() -> None:
    # CRLF, lone CR and U+2028 each end a line for V8; every one is kept.
    source = (
        "let a: number = 1;\r\nlet b: number = 2;\rlet c = 3;\u2028let d: string = 'x';\na + b + c"
    )
    (code,) = transform_all([source], "typescript")
    assert_lines_kept(source, code)
    assert run_in_node([code]) == [{"value": 6}]


# -- the last expression --------------------------------------------------------------------

LAST: dict[str, tuple[str, Any]] = {
    "expression last": ("const a = 2;\na * 21", {"value": 42}),
    "declaration last": ("const a = 2;\nlet b = a", {"undefined": True}),
    "function declaration last": ("function f() { return 1 }", {"undefined": True}),
    "class last": ("class A {}", {"undefined": True}),
    "if last": ("if (true) { 5 }", {"undefined": True}),
    "for last": ("for (const i of [1, 2]) i", {"undefined": True}),
    "block last": ("{ 5 }", {"undefined": True}),
    "labelled last": ("x: 1", {"undefined": True}),
    "explicit return kept": ("if (1) return 7;\n8", {"value": 7}),
    "return last": ("return 9", {"value": 9}),
    "comments after": (
        "const v = 3;\nv // the value\n/* more\n   lines */\n// end\n",
        {"value": 3},
    ),
    "await last": ("await new Promise((r) => setTimeout(() => r(4), 1))", {"value": 4}),
    "object literal last": ("({ a: 1, b: [2] })", {"value": {"a": 1, "b": [2]}}),
    "empty statements after": ("5;;\n;", {"value": 5}),
    "comma expression": ("1, 2", {"value": 2}),
    "multi-line expression": (
        "[1,\n 2,\n 3].map((x) => x * 2)\n  .reduce((a, b) => a + b)",
        {"value": 12},
    ),
    "after a semicolon on the same line": ("let q = 2; q + 1", {"value": 3}),
    "assignment last": ("let z;\nz = 6", {"value": 6}),
    "empty program": ("", {"undefined": True}),
    "only comments": ("// nothing\n/* here */", {"undefined": True}),
    "string last": ("'text'", {"value": "text"}),
    "hashbang line": ("#!/usr/bin/env node\n1 + 1", {"value": 2}),
}


@pytest.mark.parametrize("language", ["typescript", "javascript"])
def test_last_expression_rules(language: str) -> None:
    names = list(LAST)
    sources = [LAST[n][0] for n in names]
    codes = transform_all(sources, language)
    for source, code in zip(sources, codes, strict=True):
        assert_lines_kept(source, code)
    for name, code, answer in zip(names, codes, run_in_node(codes), strict=True):
        assert answer == LAST[name][1], (name, code, answer)


def test_return_goes_before_the_statement_on_its_line() -> None:
    assert transform_program("f(1);\n\n  (a)\n", "javascript") == "f(1);\n\n  return (a)\n"
    # No semicolon: one statement, the call f(1)(a), as JavaScript reads it.
    assert transform_program("f(1)\n\n  (a)\n", "javascript") == "return f(1)\n\n  (a)\n"
    assert transform_program("let x = 1\nx  ", "typescript") == "let x = 1\nreturn x  "


# -- error positions ------------------------------------------------------------------------


@pytest.mark.parametrize("prefix", ["", "é", "😀", "中中", "\t", "e\u0301", "𐀀"])
def test_error_columns_count_characters(prefix: str) -> None:
    # swc's own columns are display widths, acorn's UTF-16 units: both come back as the
    # column of the source's characters (what Python's str indexes).
    source = f'let s = "{prefix}"; let y: = 3;'
    with pytest.raises(ProgramSyntaxError) as caught:
        transform_program(source, "typescript")
    assert (caught.value.line, caught.value.column) == (1, source.index(": =") + 3)
    source = f'const s = "{prefix}";\nlet t = "{prefix}"; @dec class K {{}}'
    with pytest.raises(ProgramSyntaxError) as caught:
        transform_program(source, "typescript")
    assert (caught.value.line, caught.value.column) == (2, js_lines(source)[1].index("@") + 1)


def test_error_lines_after_line_separators() -> None:
    for source in (
        "let a = 1;\u2028let b = 2;\nlet c: = 3",
        "let a = 1;\r\nlet b = 2;\rlet c: = 3",
    ):
        with pytest.raises(ProgramSyntaxError) as caught:
            transform_program(source, "typescript")
        assert (caught.value.line, caught.value.column) == (3, 8)
        with pytest.raises(ProgramSyntaxError) as caught:
            transform_program(source.replace("c: =", "c = ="), "javascript")
        assert (caught.value.line, caught.value.column) == (3, 9)


# -- hostile and huge input -------------------------------------------------------------------


def test_too_large_a_program_is_refused_before_any_helper_starts() -> None:
    async def main() -> None:
        async with ProgramTransformer() as transformer:
            with pytest.raises(ProgramSyntaxError, match="more than the 4,194,304"):
                await transformer.transform("x;" * (5 * 1024 * 1024), "typescript")
            assert transformer.pid is None

    asyncio.run(main())


@pytest.mark.timeout(120)
def test_the_largest_program_is_transformed_in_bounded_time() -> None:
    line = "v = (1 as number) + v; // padding padding padding padding\n"
    source = "let v: number = 0;\n" + line * (MAX_SOURCE_CHARS // len(line) - 1) + "v"
    started = time.monotonic()
    code = transform_program(source, "typescript")
    assert code.endswith("\nreturn v") and len(code) == len(source) + len("return ")
    assert time.monotonic() - started < 30


@pytest.mark.parametrize("opening", ["(", "[", "{", "a(", "-", "!"])
@pytest.mark.parametrize("language", ["typescript", "javascript"])
def test_deep_nesting_is_a_clear_error_and_the_next_program_works(
    opening: str, language: str
) -> None:
    closing = {"(": ")", "[": "]", "{": "}", "a(": ")", "-": "", "!": ""}[opening]
    source = opening * 200_000 + "1" + closing * 200_000

    async def main() -> None:
        async with ProgramTransformer() as transformer:
            with pytest.raises(ProgramSyntaxError) as caught:
                await transformer.transform(source, language)  # type: ignore[arg-type]
            assert (
                "nested too deeply" in caught.value.message or "Unexpected" in caught.value.message
            )
            assert await transformer.transform("let a: number = 1; a", "typescript") == (
                "let a         = 1; return a"
            )

    asyncio.run(main())


def test_nesting_as_deep_as_pythons_limit_is_fine() -> None:
    # CPython refuses 200 nested brackets; nothing an agent writes comes near that, and the
    # transform (swc's wasm stack) goes further for every kind of nesting.
    depth = 200
    sources = {
        "(" * depth + "1" + ")" * depth: 1,
        "[" * depth + "]" * depth + ".length": 1,
        "const o: any = " + "{a:" * depth + "1" + "}" * depth + ";\no" + ".a" * depth: 1,
        "const f = " + "() => " * depth + "1;\nf" + "()" * depth: 1,
        "let n = 0;\n" + "if (1) {" * depth + "n++" + "}" * depth + "\nn": 1,
        "let v: number = 1;\n" + "v" + " < v" * depth: True,
    }
    answers = run_in_node(transform_all(list(sources), "typescript"))
    assert answers == [{"value": value} for value in sources.values()]


def test_lone_surrogates_are_refused_where_they_are() -> None:
    with pytest.raises(ProgramSyntaxError, match="lone surrogate U\\+DC00") as caught:
        transform_program("let a = 1;\nlet b = '\udc00';", "typescript")
    assert (caught.value.line, caught.value.column) == (2, 10)


def test_bad_arguments_are_the_callers_error() -> None:
    with pytest.raises(ValueError, match="'python'"):
        transform_program("1", "python")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="bytes"):
        transform_program(b"1", "typescript")  # type: ignore[arg-type]


def test_the_helper_gets_no_node_options_from_the_host(monkeypatch: pytest.MonkeyPatch) -> None:
    # NODE_OPTIONS=--require would run a file inside the helper; here it would stop it.
    monkeypatch.setenv("NODE_OPTIONS", "--require /nonexistent/kernelgate-attack.js")
    assert transform_program("1 as number", "typescript") == "return 1          "


# -- the helper process: concurrency, hangs, leaks --------------------------------------------


def test_concurrent_transforms_each_get_their_own_answer(no_fd_leak: None) -> None:
    async def main() -> None:
        async with ProgramTransformer() as transformer:
            sources = [
                f"const v{i}: number = {i};\nv{i}" if i % 3 else f"let v{i}: = {i};"
                for i in range(60)
            ]
            results = await asyncio.gather(
                *(transformer.transform(s, "typescript") for s in sources), return_exceptions=True
            )
            pids = {transformer.pid}
            for i, result in enumerate(results):
                if i % 3:
                    assert result == f"const v{i}         = {i};\nreturn v{i}"
                else:
                    assert isinstance(result, ProgramSyntaxError) and result.line == 1
            assert len(pids) == 1 and None not in pids

    asyncio.run(main())


def test_close_kills_and_reaps_the_helper(no_fd_leak: None) -> None:
    async def main() -> int:
        transformer = ProgramTransformer()
        await transformer.transform("1", "javascript")
        pid = transformer.pid
        assert pid is not None and pid in live_children(os.getpid())
        await transformer.aclose()
        await transformer.aclose()  # idempotent
        with pytest.raises(ProgramTransformError, match="closed"):
            await transformer.transform("1", "javascript")
        return pid

    pid = asyncio.run(main())
    assert not os.path.exists(f"/proc/{pid}"), "the helper is still there (or a zombie)"


def test_a_helper_that_died_is_restarted() -> None:
    async def main() -> None:
        async with ProgramTransformer() as transformer:
            await transformer.transform("1", "typescript")
            first = transformer.pid
            assert first is not None
            os.kill(first, signal.SIGKILL)
            while pid_alive(first):
                await asyncio.sleep(0.01)
            # The first program after the death may find the dead pipe; it says so, clearly,
            # or (if the exit was seen first) just works. The one after works in any case.
            try:
                await transformer.transform("2", "typescript")
            except ProgramTransformError as error:
                assert "exited" in str(error)
            assert await transformer.transform("3", "typescript") == "return 3"
            assert transformer.pid not in (None, first)

    asyncio.run(main())


def test_a_hung_helper_is_killed_at_the_timeout(no_fd_leak: None) -> None:
    async def main() -> None:
        async with ProgramTransformer(timeout=1.0) as transformer:
            await transformer.transform("1", "typescript")
            stuck = transformer.pid
            assert stuck is not None
            os.kill(stuck, signal.SIGSTOP)  # a real helper that no longer answers
            started = time.monotonic()
            with pytest.raises(ProgramTransformError, match="took more than 1 s"):
                await transformer.transform("2", "typescript")
            assert time.monotonic() - started < 5
            assert await transformer.transform("3", "typescript") == "return 3"
            assert transformer.pid != stuck
        assert not os.path.exists(f"/proc/{stuck}")

    asyncio.run(main())


def test_cancelling_a_transform_kills_its_helper_and_the_next_one_works(no_fd_leak: None) -> None:
    async def main() -> None:
        async with ProgramTransformer() as transformer:
            await transformer.transform("1", "typescript")
            stuck = transformer.pid
            assert stuck is not None
            os.kill(stuck, signal.SIGSTOP)
            task = asyncio.ensure_future(transformer.transform("2", "typescript"))
            await asyncio.sleep(0.2)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert await transformer.transform("3", "typescript") == "return 3"
        assert not os.path.exists(f"/proc/{stuck}")

    asyncio.run(main())


def helpers_of_this_process() -> list[int]:
    found = []
    for pid in live_children(os.getpid()):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if b"jsstrip/helper.js" in f.read():
                    found.append(pid)
        except OSError:
            pass
    return found


def test_cancelled_at_any_step_leaves_no_helper(no_fd_leak: None) -> None:
    # Cancel the first transform (which starts the helper) after 0, 1, 2, ... loop steps:
    # while spawning, writing, waiting. Whatever step it was at, nothing is left.
    async def main() -> None:
        for steps in range(40):
            transformer = ProgramTransformer()
            task = asyncio.ensure_future(transformer.transform("1 as number", "typescript"))
            for _ in range(steps):
                await asyncio.sleep(0)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await transformer.aclose()
            # A process whose spawn was cancelled is killed when it comes; wait for that.
            deadline = time.monotonic() + 10
            while helpers_of_this_process() and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            assert helpers_of_this_process() == [], f"left behind after {steps} steps"

    asyncio.run(main())


def test_a_helper_is_replaced_after_a_large_program() -> None:
    # swc's wasm memory never shrinks: after a large program the helper goes, and the next
    # program starts a fresh one.
    large = "let v: number = 0;\n" + "v += 1 as number;\n" * (RECYCLE_AFTER_CHARS // 18 + 1) + "v"

    async def main() -> int | None:
        async with ProgramTransformer() as transformer:
            await transformer.transform("1", "typescript")
            first = transformer.pid
            assert (await transformer.transform(large, "typescript")).endswith("\nreturn v")
            assert transformer.pid is None
            assert await transformer.transform("2", "typescript") == "return 2"
            assert transformer.pid not in (None, first)
        return first

    first = asyncio.run(main())
    assert first is not None and not os.path.exists(f"/proc/{first}")


def test_one_transformer_serves_one_event_loop() -> None:
    transformer = ProgramTransformer()

    async def first() -> str:
        try:
            return await transformer.transform("1", "javascript")
        finally:
            await transformer.aclose()

    async def second() -> str:
        return await transformer.transform("1", "javascript")

    assert asyncio.run(first()) == "return 1"
    with pytest.raises(ProgramTransformError, match="one per event loop"):
        asyncio.run(second())


def test_missing_node_is_a_clear_error_at_use() -> None:
    transformer = ProgramTransformer(node="/nonexistent/bin/node")  # nothing happens yet

    async def main() -> None:
        with pytest.raises(ProgramTransformError, match=r"'/nonexistent/bin/node'.*node >= 18"):
            await transformer.transform("1", "typescript")
        await transformer.aclose()

    asyncio.run(main())


def test_importing_starts_nothing() -> None:
    code = (
        "import os, kernelgate.gateway.jsprogram as j; "
        "print(len([p for p in os.listdir(f'/proc/{os.getpid()}/task')]))"
    )
    done = subprocess.run(
        [os.sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,  # type: ignore[attr-defined]
    )
    assert done.stdout.strip() == "1"  # one thread, no helper, no watcher


def test_the_sync_convenience() -> None:
    assert transform_program("const a: string = 'x';\na", "typescript") == (
        "const a         = 'x';\nreturn a"
    )


def test_a_transformer_dropped_without_close_takes_its_helper_with_it() -> None:
    """A gateway never closed (its runtime's transformer collected): no helper is left."""

    async def main() -> int:
        transformer = ProgramTransformer()
        await transformer.transform("1", "typescript")
        pid = transformer.pid
        assert pid is not None and pid_alive(pid)
        del transformer
        gc.collect()
        deadline = time.monotonic() + 10
        while pid_alive(pid) and time.monotonic() < deadline:
            await asyncio.sleep(0.01)  # the loop reaps the killed helper
        return pid

    pid = asyncio.run(main())
    assert not pid_alive(pid)
