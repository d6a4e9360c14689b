"""TypeScript and JavaScript programs through ``Gateway(language=...)``: the host's
transform, the launcher's sandbox and the Node kernel together, at every level, cold.

What the Python suite shows of a run (values, errors, calls, concurrency, limits, output
order, the JSON boundary) shown for Node programs, through the same Gateway.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import Iterator
from typing import Any

import pytest

from kernelgate import Gateway, Limits, RunResult
from tests.hardening.conftest import ALL_LEVELS, live_children

pytestmark = [
    pytest.mark.skipif(shutil.which("node") is None, reason="node (>= 18) is not installed"),
    pytest.mark.timeout(120),
]

FAST = Limits(wall_seconds=30)


def search(query: str, limit: int = 2) -> list[str]:
    """Search the corpus."""
    return [f"{query}-{i}" for i in range(limit)]


def fail(message: str) -> None:
    raise LookupError(message)


class Barrier:
    """Two calls that each wait for the other: they finish only if both are in flight."""

    def __init__(self) -> None:
        self.arrived = 0
        self.event: asyncio.Event | None = None

    async def __call__(self, name: str) -> str:
        if self.event is None:
            self.event = asyncio.Event()
        self.arrived += 1
        if self.arrived == 2:
            self.event.set()
        await asyncio.wait_for(self.event.wait(), 20)
        return name


@pytest.fixture
def runs(tmp_path: Any) -> Iterator[str]:
    base = tmp_path / "runs"
    base.mkdir()
    yield str(base)
    assert os.listdir(base) == [], "run directories are left"
    assert live_children(os.getpid()) == [], "child processes of the test process are left"


def run(
    base: str,
    code: str,
    *,
    level: str = "process",
    language: str = "typescript",
    limits: Limits = FAST,
    warm: bool = False,
    **bindings: Any,
) -> RunResult:
    """One run, cold (the warm pool's own behaviour is tests/node/test_pool.py's); with
    ``warm`` on a child of the pool, once it has one (the result says which it was)."""
    gateway = Gateway(
        language=language,
        bindings=bindings or {"search": search, "fail": fail},
        sandbox=level,
        limits=limits,
        tmp_dir=base,
        pool_size=1 if warm else 0,
    )

    async def main() -> RunResult:
        async with gateway as gw:
            if warm:
                await gw.run("0")  # makes the pool
                pool = gw._pool
                assert pool is not None
                await pool.filled()  # type: ignore[attr-defined]
            result = await gw.run(code)
            assert result.usage["warm"] is warm
            return result

    return asyncio.run(main())


@ALL_LEVELS
def test_a_typescript_program_calls_a_binding_and_returns_its_last_expression(
    runs: str, level: str
) -> None:
    result = run(
        runs,
        'interface Hit { n: number }\nconst found: string[] = await tools.search("q", {limit: 3});\n'
        'console.log("found", found.length);\nprocess.stdout.write("raw\\n");\n'
        'console.error("to stderr");\n({hits: found.length} satisfies Record<string, number>)',
        level=level,
    )
    assert result.status == "ok", result.error
    assert result.value == {"hits": 3}
    assert result.stdout == "found 3\nraw\n"
    assert result.stderr == "to stderr\n"
    assert [c.name for c in result.calls] == ["search"]
    assert result.calls[0].kwargs == {"limit": 3}
    assert result.language == "typescript"


@ALL_LEVELS
def test_calls_under_promise_all_are_in_flight_together(runs: str, level: str) -> None:
    result = run(
        runs,
        'const [a, b] = await Promise.all([tools.meet("a"), tools.meet("b")]);\nreturn a + b',
        level=level,
        meet=Barrier(),
    )
    assert result.status == "ok", result.error
    assert result.value == "ab"


def test_a_syntax_error_names_the_line_and_column_of_the_source_and_starts_no_child(
    runs: str,
) -> None:
    result = run(runs, "const a: number = 1;\nlet b: string = ;\n")
    assert result.status == "exception"
    assert result.error is not None and result.error.ename == "SyntaxError"
    assert "line 2, column 17" in result.error.evalue
    assert result.error.traceback[-2:] == ["    let b: string = ;", "                    ^"]


def test_javascript_programs_refuse_type_annotations(runs: str) -> None:
    assert run(runs, "1 + 1", language="javascript").value == 2
    result = run(runs, "const a: number = 1; a", language="javascript")
    assert result.status == "exception" and result.error is not None
    assert result.error.ename == "SyntaxError"
    assert result.language == "javascript"


def test_an_uncaught_error_shows_the_program_line_only(runs: str) -> None:
    result = run(
        runs,
        'const x: number = 1;\nfunction f(): never {\n  throw new RangeError("no " + x)\n}\nf()',
    )
    assert result.status == "exception" and result.error is not None
    assert (result.error.ename, result.error.evalue) == ("RangeError", "no 1")
    text = "\n".join(result.error.traceback)
    assert "<program>:3" in text
    assert "kernel" not in text and "node:" not in text


def test_a_failing_binding_is_a_tool_error_the_program_can_catch(runs: str) -> None:
    result = run(
        runs,
        'try {\n  await tools.fail("gone")\n} catch (e) {\n'
        "  if (!(e instanceof ToolError)) throw e;\n  return [e.tool, e.ename, e.message]\n}",
    )
    assert result.status == "ok", result.error
    assert result.value[:2] == ["tools.fail", "LookupError"] and "gone" in result.value[2]


def test_values_that_json_cannot_carry_are_refused_naming_the_path(runs: str) -> None:
    result = run(runs, "return {a: [1, new Map()]}")
    assert result.status != "ok"
    assert result.error is not None and "a[1]" in result.error.evalue.replace("'", "")


def test_arguments_that_do_not_fit_fail_at_the_program_line_before_the_call(runs: str) -> None:
    result = run(runs, 'const a = 1;\nawait tools.search("q", 1, 2)')
    assert result.status == "exception" and result.error is not None
    assert result.error.ename == "TypeError" and "search" in result.error.evalue
    assert "<program>:2" in "\n".join(result.error.traceback)
    assert result.calls == []


@ALL_LEVELS
def test_the_wall_clock_ends_a_busy_program(runs: str, level: str) -> None:
    result = run(runs, "while (true) {}", level=level, limits=Limits(wall_seconds=2))
    assert result.status == "timeout"


def test_the_call_limit_holds(runs: str) -> None:
    result = run(
        runs,
        'for (let i = 0; i < 5; i++) await tools.search("q")',
        limits=Limits(wall_seconds=30, max_calls=3),
    )
    assert result.status == "exception" and result.error is not None
    assert "max_calls" in result.error.evalue
    assert len(result.calls) == 3


def test_output_past_the_limit_keeps_head_and_tail_with_one_exact_marker(runs: str) -> None:
    result = run(
        runs,
        'for (let i = 0; i < 20000; i++) console.log("line " + i)\nconsole.log("FINAL ANSWER: 42")',
        limits=Limits(wall_seconds=30, max_output_bytes=10_000),
    )
    assert result.status == "ok"
    marker = result.output_cut["text"]
    head, tail = result.stdout.split(marker)
    whole = "".join(f"line {i}\n" for i in range(20000)) + "FINAL ANSWER: 42\n"
    assert head.startswith("line 0\n") and tail.endswith("line 19999\nFINAL ANSWER: 42\n")
    assert whole.startswith(head) and whole.endswith(tail)
    assert len((head + tail).encode()) <= 10_000
    cut = result.output_cut["stdout"]
    assert len(head) + cut["chars"] + len(tail) == len(whole)
    assert cut["lines"] == whole.count("\n") - (head + tail).count("\n")


def test_the_heap_is_bounded_by_memory_bytes(runs: str) -> None:
    result = run(
        runs,
        "const keep: string[] = [];\nwhile (true) keep.push('x'.repeat(1 << 20) + keep.length)",
        limits=Limits(wall_seconds=60, memory_bytes=256 << 20),
    )
    assert result.status not in ("ok", "timeout")
    assert result.error is not None and "memory_bytes" in result.error.evalue


def test_node_options_of_the_host_do_not_reach_the_child(
    runs: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    planted = tmp_path / "planted.js"
    planted.write_text("globalThis.PLANTED = 1;\n")
    monkeypatch.setenv("NODE_OPTIONS", f"--require {planted}")
    result = run(runs, "typeof (globalThis as any).PLANTED")
    assert result.status == "ok", result.error
    assert result.value == "undefined"


def test_describe_gives_typescript_declarations() -> None:
    with Gateway(language="typescript", bindings={"search": search}) as gw:
        text = gw.describe()
    assert "declare const tools: {" in text
    assert "search(query: string, limit?: number): Promise<string[]>;" in text


def test_run_code_for_a_typescript_gateway_says_typescript_and_returns_what_a_model_reads(
    runs: str,
) -> None:
    async def main() -> None:
        async with Gateway(language="typescript", bindings={"search": search}, tmp_dir=runs) as gw:
            tool = gw.tool_schema("anthropic")
            assert tool["description"].startswith("Run a TypeScript program")
            assert (
                "search(query: string, limit?: number): Promise<string[]>;" in (tool["description"])
            )
            assert "TypeScript" in tool["input_schema"]["properties"]["code"]["description"]
            out = await gw.run_tool('console.log("hi");\n(await tools.search("q")).length')
            assert (out.text, out.is_error) == ("printed:\nhi\nreturned:\n2", False)
            bad = await gw.run_tool("let x: = 1")
            assert bad.is_error and "line 1, column 8" in bad.text

    asyncio.run(main())


@ALL_LEVELS
@pytest.mark.parametrize("warm", [False, True], ids=["cold", "warm"])
def test_node_s_own_threads_do_not_count_against_max_processes(
    runs: str, level: str, warm: bool
) -> None:
    """Node holds threads of its own (V8's workers, libuv's pool): a run with
    max_processes=1 still starts, reads files and answers."""
    result = run(
        runs,
        'const fs = require("fs");\nawait fs.promises.writeFile("a.txt", "x");\n'
        'const text = await fs.promises.readFile("a.txt", "utf8");\n'
        'await tools.search("q");\nreturn text',
        level=level,
        limits=Limits(wall_seconds=30, max_processes=1),
        warm=warm,
    )
    assert (result.status, result.value) == ("ok", "x"), result.error


@ALL_LEVELS
@pytest.mark.parametrize("warm", [False, True], ids=["cold", "warm"])
def test_processes_the_program_starts_stop_at_max_processes(
    runs: str, level: str, warm: bool
) -> None:
    result = run(
        runs,
        'const { spawn } = require("child_process");\nlet started = 0, failed = 0;\n'
        "const kids = [];\nfor (let i = 0; i < 12; i++) {\n"
        '  try { const k = spawn("/bin/sleep", ["5"]); k.on("error", () => failed++);'
        " kids.push(k); started++ } catch { failed++ }\n}\n"
        "await new Promise((r) => setTimeout(r, 300));\n"
        "const alive = kids.filter((k) => k.pid !== undefined && k.exitCode === null"
        " && k.signalCode === null).length;\nkids.forEach((k) => k.kill());\nreturn alive",
        level=level,
        limits=Limits(wall_seconds=30, max_processes=3),
        warm=warm,
    )
    assert result.status == "ok", result.error
    assert result.value == 2  # and the program itself: max_processes=3, as for Python


@pytest.mark.filterwarnings("error::pytest.PytestUnraisableExceptionWarning")
def test_a_runs_loop_ending_without_aclose_ends_the_type_stripping_helper(runs: str) -> None:
    """``asyncio.run(gw.run(...))`` without ``aclose()``: the helper started in that loop
    goes with it, reaped while the loop still runs (before, it lived on, with its pipes,
    until the runtime was collected); ``close()`` after it has nothing left to do."""
    gateway = Gateway(language="typescript", tmp_dir=runs, pool_size=0, limits=FAST)

    async def main() -> tuple[RunResult, int | None]:
        result = await gateway.run("const x: number = 2; x")
        helpers = list(gateway.runtime._transformers.values())  # type: ignore[attr-defined]
        return result, helpers[0].pid if len(helpers) == 1 else None

    result, pid = asyncio.run(main())
    assert result.value == 2, result
    assert pid is not None
    assert not os.path.exists(f"/proc/{pid}"), "the helper is left (alive or a zombie)"
    gateway.close()


def test_an_image_a_typescript_program_displays_reaches_the_model(runs: str) -> None:
    import base64

    from tests.gateway.test_tool_output import png

    data = base64.b64encode(png(5, 7)).decode()
    program = (
        f'display({{ [Symbol.for("Jupyter.display")]() {{ return {{ "image/png": "{data}" }}; }} }});\n'
        '"drawn"'
    )

    async def main() -> Any:
        async with Gateway(language="typescript", tmp_dir=runs, pool_size=0) as gw:
            return await gw.run_tool(program, limits=FAST)

    out = asyncio.run(main())
    assert not out.is_error, out.text
    (image,) = out.images
    assert image.attached and (image.width, image.height) == (5, 7) and image.data == data
    assert "[image 1: image/png 5x7, " in out.text
    assert out.to_anthropic("t")["content"][1]["source"]["data"] == data
