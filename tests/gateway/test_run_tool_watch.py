"""``Gateway.run_tool(on_output=, on_call=)``: the developer watches the run a model asked
for while it runs, not only its text at the end."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from kernelgate import Gateway

from .conftest import FAST

# Prints, then waits in a binding until the host has seen that print: the binding returns
# whether it was let go (it was only if the print reached on_output while the run was live).
PROGRAM = "print('step 1', flush=True)\nseen = await tools.gate()\nprint('step 2')\nreturn seen"


@pytest.mark.parametrize("pool_size", [0, 1], ids=["cold", "warm"])
def test_run_tool_streams_outputs_and_calls_while_it_runs(
    make_gateway: Any, pool_size: int
) -> None:
    async def main() -> tuple[Any, list[dict[str, Any]], list[Any]]:
        printed = asyncio.Event()

        async def gate() -> bool:
            try:
                await asyncio.wait_for(printed.wait(), 15)
            except asyncio.TimeoutError:
                return False
            return True

        outputs: list[dict[str, Any]] = []
        calls: list[Any] = []

        def on_output(output: dict[str, Any]) -> None:
            outputs.append(output)
            if "step 1" in output.get("text", ""):
                printed.set()

        gw: Gateway = make_gateway(bindings={"gate": gate}, limits=FAST, pool_size=pool_size)
        async with gw:
            out = await gw.run_tool(PROGRAM, on_output=on_output, on_call=calls.append)
        return out, outputs, calls

    out, outputs, calls = asyncio.run(main())
    assert out.is_error is False, out.text
    assert out.text == "printed:\nstep 1\nstep 2\nreturned:\ntrue"
    texts = [o["text"] for o in outputs if o["output_type"] == "stream"]
    assert "".join(texts) == "step 1\nstep 2\n"
    assert [(c.name, c.ok, c.value) for c in calls] == [("gate", True, True)]
