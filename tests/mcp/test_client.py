"""MCP servers as bindings: kernelgate.mcp.connect against a real SDK server subprocess."""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

import pytest

import kernelgate.mcp
from kernelgate import Gateway, Limits, RunResult
from kernelgate.gateway.bindings import BindingRegistry

from .conftest import TOOLS_SERVER

FAST = Limits(wall_seconds=30, kill_grace_seconds=0.5)


async def _run(program: str, server: Any = None, limits: Limits = FAST, **connect: Any) -> RunResult:
    async with kernelgate.mcp.connect(server or TOOLS_SERVER, **connect) as t:
        async with Gateway(namespaces={"t": t}, pool_size=0) as gw:
            return await gw.run(program, limits=limits)


def run(program: str, **kwargs: Any) -> RunResult:
    return asyncio.run(_run(program, **kwargs))


def test_each_tool_is_a_binding_with_signature_doc_and_schema() -> None:
    async def main() -> dict[str, Any]:
        async with kernelgate.mcp.connect(TOOLS_SERVER) as t:
            return dict(t)

    t = asyncio.run(main())
    assert sorted(t) == [
        "add", "die", "environ", "explode", "greet", "hang", "history", "meet", "pid", "stats"
    ]
    shown = BindingRegistry({"t": t}).signatures()["t"]
    # The SDK wraps a plain return value as {"result": ...}: the binding shows what the
    # program gets, the value itself.
    assert shown["add"] == "(a: int, b: int = 2) -> int"
    assert shown["greet"] == "(name: str, style: Literal['plain', 'loud'] = 'plain') -> str"
    assert shown["die"] == "() -> str"
    assert shown["environ"] == "(name: str) -> str | None"
    assert shown["history"] == "(values: list[float]) -> list[{'count': int, 'mean': float}]"
    assert shown["stats"] == "(values: list[float]) -> {'count': int, 'mean': float}"
    returns = t["history"].__kernelgate_output_schema__
    assert returns["type"] == "array" and returns["items"] == {"$ref": "#/$defs/Stats"}
    assert returns["$defs"]["Stats"]["required"] == ["count", "mean"]
    assert list(inspect.signature(t["add"]).parameters) == ["a", "b"]
    assert inspect.getdoc(t["add"]).startswith("Add two integers.")
    schema = t["stats"].__kernelgate_schema__
    assert schema["properties"]["values"]["type"] == "array" and schema["required"] == ["values"]


def test_programs_call_tools_concurrently_and_get_json_back() -> None:
    # meet() answers only once 3 calls of the party are in flight at the same time on the
    # server: the gather below can only succeed if the calls really are concurrent.
    r = run(
        "import asyncio\n"
        "met = await asyncio.gather(*(t.meet('p', 3) for _ in range(3)))\n"
        "a, g, s = await asyncio.gather(t.add(1), t.greet('bob', style='loud'), t.stats([1, 2, 3]))\n"
        "return {'met': met, 'add': a, 'greet': g, 'stats': s}"
    )
    assert r.status == "ok", r.message
    assert r.value == {
        "met": [3] * 3,
        "add": 3,
        "greet": "HELLO BOB",
        "stats": {"count": 3, "mean": 2.0},
    }
    assert [c.name for c in r.calls[:3]] == ["meet"] * 3


def test_a_wrong_argument_is_a_type_error_before_any_message_is_sent() -> None:
    r = run("x = 1\nawait t.greet('bob', style='shout')")
    assert r.status == "exception"
    assert r.error is not None and r.error.ename == "TypeError"
    assert r.error.evalue.startswith(
        "t.greet() argument style: str 'shout' is not one of 'plain', 'loud'"
    )
    assert 'line 2' in "\n".join(r.error.traceback)
    assert r.calls == []  # the child refused it: nothing went to the host or the server
    r = run("await t.add('1')")
    assert r.error is not None and "argument a: expected integer, got str '1'" in r.error.evalue
    assert r.calls == []


def test_a_raising_tool_is_a_tool_error() -> None:
    r = run(
        "try:\n"
        "    await t.explode('boom')\n"
        "except ToolError as exc:\n"
        "    return [exc.tool, exc.ename, str(exc)]"
    )
    assert r.status == "ok", r.message
    assert r.value == ["t.explode", "McpToolError", "t.explode failed: McpToolError: Error executing tool explode: exploded: boom"]
    r = run("await t.explode('boom')")
    assert r.status == "exception" and r.error is not None and r.error.ename == "ToolError"


def test_a_hung_server_gives_tool_errors_within_call_timeout_and_a_clean_result() -> None:
    r = run(
        "try:\n"
        "    await t.hang('x')\n"
        "except ToolError as exc:\n"
        "    first = [exc.ename, str(exc)]\n"
        "return first, await t.add(1)",
        call_timeout=1.0,
    )
    assert r.status == "ok", r.message
    (ename, message), after = r.value
    assert ename == "McpServerError"
    assert "did not answer within 1 s" in message and "call_timeout" in message
    assert after == 3  # the server still serves other calls


def test_a_run_that_times_out_during_a_hung_call_ends_cleanly() -> None:
    r = run("await t.hang('x')", limits=Limits(wall_seconds=2, kill_grace_seconds=0.5))
    assert r.status == "timeout"
    assert r.calls[0].name == "hang" and not r.calls[0].ok


def test_streamable_http_server(http_tools_server: str) -> None:
    r = run(
        "import asyncio\n"
        "return await asyncio.gather(t.add(2, b=5), t.meet('h', 2), t.meet('h', 2))",
        server=http_tools_server,
    )
    assert r.status == "ok", r.message
    assert r.value == [7, 2, 2]


def test_env_reaches_a_command_server_and_the_host_environment_does_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("KG_TEST_SECRET", "s3cret")

    async def main() -> list[Any]:
        async with kernelgate.mcp.connect(TOOLS_SERVER, env={"KG_TEST_GIVEN": "a=b"}) as t:
            return [await t["environ"](n) for n in ("KG_TEST_GIVEN", "KG_TEST_SECRET", "HOME")]

    given, secret, home = asyncio.run(main())
    assert given == "a=b" and secret is None and home is not None

    async def refused(server: Any, **kwargs: Any) -> None:
        async with kernelgate.mcp.connect(server, **kwargs):
            raise AssertionError("connected")

    with pytest.raises(ValueError, match="not an environment variable name"):
        asyncio.run(refused(TOOLS_SERVER, env={"A=B": "x"}))
    with pytest.raises(TypeError, match="maps names to strings"):
        asyncio.run(refused(TOOLS_SERVER, env={"A": 1}))
    with pytest.raises(ValueError, match="for a server started as a command"):
        asyncio.run(refused("http://127.0.0.1:9/mcp", env={"A": "1"}))
