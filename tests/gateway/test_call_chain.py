"""Sequential calls to synchronous bindings run as a chain: the worker thread that
answered a call reads the child's next one from fd 3 itself, lent by the loop
(kernelgate/gateway/calls.py, ``_run_chain``; channel.py, ``lend``). None of that may
change what a call does: every call is admitted, recorded, answered and heard by
``on_call`` in order, anything but a plain synchronous call goes back to the loop, and a
binding that blocks in a chain does not keep the child's other calls unread. Warm and cold.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from kernelgate import CallRecord, Gateway, Limits, RunResult

LIMITS = Limits(wall_seconds=20, kill_grace_seconds=0.3)
WARM_COLD = pytest.mark.parametrize("warm", [True, False], ids=["warm", "cold"])


def _run(
    bindings: dict[str, Any], program: str, warm: bool, **kw: Any
) -> tuple[RunResult, list[CallRecord]]:
    heard: list[CallRecord] = []

    async def main() -> RunResult:
        async with Gateway(bindings=bindings, pool_size=1 if warm else 0) as gw:
            return await gw.run(program, limits=kw.pop("limits", LIMITS), on_call=heard.append)

    return asyncio.run(main()), heard


@WARM_COLD
def test_sequential_calls_are_each_admitted_recorded_and_answered(warm: bool) -> None:
    ran: list[int] = []

    def echo(x: int) -> int:
        ran.append(x)
        return x

    async def aecho(x: int) -> int:
        return x

    def boom(x: int) -> int:
        raise ValueError(f"boom {x}")

    def junk() -> object:
        return {1, 2}  # not JSON

    program = """
out = []
for i in range(40):
    out.append(await tools.echo(i))
    print(i, end=' ', flush=True)
for name, args in (('boom', (1,)), ('junk', ())):
    try:
        await getattr(tools, name)(*args)
    except ToolError as exc:
        out.append(exc.ename)
out.append(await tools.aecho(41))
out.append(await tools.echo(42))
return out
"""
    bindings = {"echo": echo, "aecho": aecho, "boom": boom, "junk": junk}
    r, heard = _run(bindings, program, warm)
    assert r.ok, r.error
    assert r.value == [*range(40), "ValueError", "TypeError", 41, 42]
    assert r.stdout == "".join(f"{i} " for i in range(40))
    assert ran == [*range(40), 42]
    assert [c.id for c in r.calls] == list(range(44))
    assert [c.id for c in heard] == list(range(44))
    assert [c.ok for c in r.calls] == [True] * 40 + [False, False, True, True]
    assert [c.value for c in r.calls[:40]] == list(range(40))
    assert all(c.duration_s is not None and c.duration_s >= 0 for c in r.calls)
    starts = [c.start_s for c in r.calls]
    assert starts == sorted(starts)


@WARM_COLD
def test_a_blocking_call_in_a_chain_does_not_keep_the_next_call_unread(warm: bool) -> None:
    # wait() blocks until release() runs: had the thread running wait() kept fd 3, the
    # child's release() call would sit unread and wait() would time out (False).
    event = threading.Event()

    def noop() -> None:
        return None

    def wait() -> bool:
        return event.wait(10)

    def release() -> bool:
        event.set()
        return True

    program = """
import asyncio
await tools.noop()
await tools.noop()  # a second lone call in a row: its thread reads the next call itself
waiting = asyncio.ensure_future(tools.wait())
await asyncio.sleep(0)  # wait() leaves alone
return [await tools.release(), await waiting]
"""
    r, _ = _run({"noop": noop, "wait": wait, "release": release}, program, warm)
    assert r.ok, r.error
    assert r.value == [True, True]
    assert [c.name for c in r.calls] == ["noop", "noop", "wait", "release"]
    assert all(c.ok for c in r.calls)


@WARM_COLD
def test_calls_in_flight_past_a_chain_are_bounded_as_ever(warm: bool) -> None:
    # A chain holds one slot: with max_calls_in_flight=1, the calls gathered after a
    # sequential one still run one at a time.
    lock = threading.Lock()
    running: list[int] = [0, 0]  # now, most at once

    def step(i: int) -> int:
        with lock:
            running[0] += 1
            running[1] = max(running)
        with lock:
            running[0] -= 1
        return i

    program = """
import asyncio
first = [await tools.step(i) for i in range(5)]
return first + list(await asyncio.gather(*[tools.step(i) for i in range(5, 10)]))
"""
    limits = Limits(wall_seconds=20, kill_grace_seconds=0.3, max_calls_in_flight=1)
    r, heard = _run({"step": step}, program, warm, limits=limits)
    assert r.ok, r.error
    assert r.value == list(range(10))
    assert running[1] == 1
    assert [c.id for c in heard] == list(range(10))
