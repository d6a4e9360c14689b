"""The stub of a real MCP SDK server's tools: pydantic's named types (``$defs``) defined
once, and a parameter Python cannot name (``from``) shown with how to pass it (issue 21)."""

from __future__ import annotations

import ast
import asyncio
import shutil
import sys
from pathlib import Path

import pytest

import kernelgate.mcp
from kernelgate import Gateway, Limits
from kernelgate.gateway.jsprogram import transform_program

SERVER = [sys.executable, str(Path(__file__).with_name("describe_server.py"))]
FAST = Limits(wall_seconds=30, kill_grace_seconds=0.5)


def described() -> tuple[str, str, object, object]:
    async def main() -> tuple[str, str, object, object]:
        async with kernelgate.mcp.connect(SERVER) as tracker:
            async with Gateway(namespaces={"tracker": tracker}, pool_size=0) as gw:
                run = await gw.run(
                    'return await tracker.send(to="ann", **{"from": "bob"})', limits=FAST
                )
            ts_value: object = None
            if shutil.which("node"):  # the declared keywords object works as declared
                async with Gateway(
                    namespaces={"tracker": tracker}, pool_size=0, language="typescript"
                ) as ts_gw:
                    program = 'await tracker.send("ann", {from: "bob"})'
                    ts_value = (await ts_gw.run(program, limits=FAST)).value
            return gw.describe(), gw.describe(format="typescript"), run.value, ts_value

    return asyncio.run(main())


@pytest.mark.timeout(60)
def test_an_mcp_servers_named_types_and_unspellable_parameter() -> None:
    stub, ts, value, ts_value = described()
    ast.parse(stub)
    # pydantic's $defs: each defined once, on top; the tools use them by name.
    assert stub.count("Color = Literal['red', 'green']") == 1
    assert stub.count("class Point(TypedDict):\n    x: float\n    y: float\n") == 1
    assert stub.count("class Issue(TypedDict):") == 1
    assert (
        '    """An issue of the tracker."""\n    number: int\n    title: str  # One line.\n' in stub
    )
    assert "    children: NotRequired[list[Issue]]\n" in stub
    assert "async def create_issue(title: str, color: Color, where: Point) -> Issue:" in stub
    # ``from``: a note with the way to pass it, and its type and description.
    assert (
        "    # 'from' is not a Python name, so pass it as "
        "`await tracker.send(..., **{'from': ...})`\n    async def send(to: str, **kwargs)"
    ) in stub
    assert "            'from' (str, required; pass as **{'from': ...}): Who sends it.\n" in stub
    assert value == {"result": "bob->ann"} or value == "bob->ann"  # the way shown works
    assert ts.count("interface Issue {") == 1 and 'type Color = "red" | "green";' in ts
    assert "create_issue(title: string, color: Color, where: Point): Promise<Issue>;" in ts
    assert "send(to: string, keywords: { from: string; [key: string]: unknown })" in ts
    if shutil.which("node"):
        transform_program(ts + "\n1", "typescript")
        assert ts_value == value
