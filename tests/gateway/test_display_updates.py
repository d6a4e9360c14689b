"""clear_output(), display(..., display_id=...) and update_display(): IPython's display
habits in a program, as the run's outputs and as what ``on_output`` sees (warm and cold)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from kernelgate import Gateway
from kernelgate.notebooks import run_to_notebook

pytestmark = pytest.mark.timeout(60)

WARM = pytest.mark.parametrize("warm", [True, False], ids=["warm", "cold"])


def run(program: str, warm: bool) -> tuple[Any, list[dict[str, Any]]]:
    seen: list[dict[str, Any]] = []

    async def main() -> Any:
        async with Gateway(pool_size=1 if warm else 0) as gw:
            return await gw.run(program, on_output=seen.append)

    return asyncio.run(main()), seen


@WARM
def test_a_display_id_output_is_updated_in_place(warm: bool) -> None:
    r, seen = run(
        "h = display('loading', display_id=True)\n"
        "print('working')\n"
        "h.update('done')\n"
        "display(1, display_id='n')\n"
        "update_display(2, display_id='n')\n"
        "h.display_id",
        warm,
    )
    assert r.ok, r.message
    shown = [o["data"]["text/plain"] for o in r.outputs if o["output_type"] == "display_data"]
    assert shown == ["'done'", "2"]
    handle_id = r.value
    assert isinstance(handle_id, str) and len(handle_id) == 16
    kinds = [o["output_type"] for o in seen]
    assert kinds == [
        "display_data",
        "stream",
        "update_display_data",
        "display_data",
        "update_display_data",
        "execute_result",
    ]
    # A live front end is told which output to update; what it was shown first stays.
    assert seen[2]["transient"] == {"display_id": handle_id}
    assert seen[0]["data"]["text/plain"] == "'loading'"


@WARM
def test_clear_output_removes_what_was_shown_but_not_what_was_printed(warm: bool) -> None:
    r, seen = run(
        "print('before')\ndisplay('old')\nclear_output()\nprint('after')\n'value'",
        warm,
    )
    assert r.ok, r.message
    assert [o["output_type"] for o in r.outputs] == ["stream", "execute_result"]
    assert r.outputs[0]["text"] == "after\n"
    assert r.stdout == "before\nafter\n"  # stdout is what the program printed, all of it
    assert {"output_type": "clear_output", "wait": False} in seen


@WARM
def test_a_call_before_a_clear_comes_before_what_is_left(warm: bool) -> None:
    async def main() -> Any:
        async with Gateway(pool_size=1 if warm else 0, bindings={"add": lambda a, b: a + b}) as gw:
            return await gw.run(
                "print('a')\nx = await tools.add(1, 2)\ndisplay('old')\nclear_output()\n"
                "print('after')\ny = await tools.add(x, 1)\nprint('end')"
            )

    r = asyncio.run(main())
    assert r.ok, r.message
    assert [o["text"] for o in r.outputs] == ["after\n", "end\n"]
    assert [c.output_index for c in r.calls] == [0, 1]
    cell = run_to_notebook(r).cells[0]
    shown = [o.get("text") or next(iter(o.get("data", {})), "") for o in cell.outputs]
    call = "application/vnd.kernelgate.call+json"
    assert shown[:4] == [call, "after\n", call, "end\n"]  # then the timeline


@WARM
def test_clear_output_wait_clears_when_the_next_output_comes(warm: bool) -> None:
    r, _ = run("display('a')\nclear_output(wait=True)\ndisplay('b')\nclear_output(wait=True)", warm)
    assert r.ok, r.message
    # The first wait cleared at 'b'; the last one had nothing after it, so 'b' stays.
    assert [o["data"]["text/plain"] for o in r.outputs] == ["'b'"]


@pytest.mark.parametrize(
    ("call", "message"),
    [
        ("display('x', display_id=5)", "display_id must be a string"),
        ("update_display('x', display_id='')", "display_id must be a string"),
        ("update_display('x')", "display_id"),
    ],
)
def test_a_bad_display_id_is_a_type_error_at_the_programs_line(call: str, message: str) -> None:
    r = Gateway(pool_size=0).run_sync(f"x = 1\n{call}")
    assert r.status == "exception"
    assert r.error is not None and r.error.ename == "TypeError"
    assert message in r.error.evalue
    assert any('line 2' in line for line in r.error.traceback)


def test_updates_are_metered_as_displays() -> None:
    from kernelgate import Limits

    big = "'x' * 40_000"
    r = Gateway(pool_size=0).run_sync(
        f"display(1, display_id='d')\nfor _ in range(20):\n    update_display({big}, display_id='d')",
        limits=Limits(max_display_bytes=100_000),
    )
    assert r.ok, r.message
    # The budget ran out: a marker says so, and nothing more was kept or passed on.
    texts = " ".join(str(o.get("data", {}).get("text/plain", "")) for o in r.outputs)
    assert "kernelgate" in texts and "display" in texts
