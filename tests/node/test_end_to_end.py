"""TypeScript and JavaScript source through the host's transform (kernelgate/gateway/jsprogram.py)
into the real Node kernel: the value is the program's last expression, and the lines in a
traceback are the TypeScript source's own (the transform keeps them; the kernel shows them).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from kernelgate.gateway.jsprogram import Language, ProgramTransformer

from .nodechild import NODE, KernelRun, needs_node
from .tscorpus import RUNS

Make = Callable[..., KernelRun]

pytestmark = [pytest.mark.timeout(120), needs_node]

TOOLS_TS = """interface Hit { title: string }
const hits = (await tools.search("q", {limit: 2})) as string[];
function pick(h: string[]): Hit {
  return { title: h[5]!.toUpperCase() };
}
console.log(hits.length satisfies number);
pick(hits)
"""

PROGRAMS: dict[str, tuple[str, Language]] = {
    **{f"corpus: {name}": (source, "typescript") for name, (source, _) in RUNS.items()},
    "tools, typescript": (TOOLS_TS, "typescript"),
    "last expression, javascript": ("const x = 2\n\nx * 21", "javascript"),
}


@pytest.fixture(scope="module")
def stripped() -> Iterator[dict[str, str]]:
    """Every program as the host sends it, made by one transformer (one helper process)."""
    assert NODE is not None

    async def all_of_them() -> dict[str, str]:
        async with ProgramTransformer(NODE) as transformer:
            return {
                name: await transformer.transform(source, language)
                for name, (source, language) in PROGRAMS.items()
            }

    yield asyncio.run(all_of_them())


@pytest.mark.parametrize("name", sorted(RUNS))
def test_the_corpus_gives_its_values(kernel: Make, stripped: dict[str, str], name: str) -> None:
    out = kernel().run(stripped[f"corpus: {name}"])
    assert out.status == "ok", (out.events, out.stderr_raw)
    results = out.of("ExecuteResult")
    value = results[0].data["application/json"] if results else None
    assert value == RUNS[name][1]


def test_a_typescript_error_shows_the_sources_lines(kernel: Make, stripped: dict[str, str]) -> None:
    out = kernel().run(stripped["tools, typescript"])
    assert out.status == "exception"
    assert out.text("stdout") == "2\n"
    error = out.of("ErrorOutput")[0]
    assert error.ename == "TypeError"
    frames = error.traceback[1:]
    assert frames[0].startswith("    at pick (<program>:4:"), error.traceback
    assert frames[-1].startswith("    at <program>:7:"), error.traceback


def test_the_last_expression_is_the_value(kernel: Make, stripped: dict[str, str]) -> None:
    out = kernel().run(stripped["last expression, javascript"])
    value: Any = out.of("ExecuteResult")[0].data["application/json"]
    assert value == 42
