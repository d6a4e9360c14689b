"""Calls started together (a gather) travel and run as batches: the child sends the calls
one turn of its loop made in one write, the host runs the synchronous ones of one read of
fd 3 in one worker thread and answers them in one write (kernelgate/gateway/calls.py,
``_Batch``). None of that may change what a call does: each still gets its own answer and
record, a binding that blocks does not hold up the calls batched behind it (the sweep
moves them to threads of their own), and errors stay per call. Warm and cold.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from kernelgate import Gateway, Limits, RunResult

LIMITS = Limits(wall_seconds=20, kill_grace_seconds=0.3)
WARM_COLD = pytest.mark.parametrize("warm", [True, False], ids=["warm", "cold"])


def _run(bindings: dict[str, Any], program: str, warm: bool) -> RunResult:
    async def main() -> RunResult:
        async with Gateway(bindings=bindings, pool_size=1 if warm else 0) as gw:
            return await gw.run(program, limits=LIMITS)

    return asyncio.run(main())


@WARM_COLD
def test_gathered_blocking_calls_still_run_at_once(warm: bool) -> None:
    # Each call waits until all 8 run at the same time: batched behind one another in
    # one thread, they would time out (BrokenBarrierError) instead.
    barrier = threading.Barrier(8, timeout=10)
    threads: set[int] = set()

    def meet(i: int) -> int:
        threads.add(threading.get_ident())
        barrier.wait()
        return i

    program = """
import asyncio
return await asyncio.gather(*[tools.meet(i) for i in range(8)])
"""
    r = _run({"meet": meet}, program, warm)
    assert r.ok, r.error
    assert r.value == list(range(8))
    assert len(threads) == 8
    assert [c.id for c in r.calls] == list(range(8))
    assert all(c.ok and c.value == c.args[0] for c in r.calls)


@WARM_COLD
def test_each_gathered_call_gets_its_own_answer(warm: bool) -> None:
    def echo(x: int) -> int:
        return x

    def boom(x: int) -> int:
        raise ValueError(f"boom {x}")

    def junk(x: int) -> object:
        return {1, 2}  # not JSON: this call alone fails

    program = """
import asyncio
calls = []
for i in range(48):
    calls.append((tools.echo, tools.boom, tools.junk)[i % 3](i))
out = []
for res in await asyncio.gather(*calls, return_exceptions=True):
    out.append(res if isinstance(res, int) else getattr(res, 'ename', repr(res)))
return out
"""
    bindings = {"echo": echo, "boom": boom, "junk": junk}
    r = _run(bindings, program, warm)
    assert r.ok, r.error
    for i, res in enumerate(r.value):
        if i % 3 == 0:
            assert res == i
        elif i % 3 == 1:
            assert res == "ValueError"
        else:
            assert res == "TypeError"
    assert [c.id for c in r.calls] == list(range(48))
    for c in r.calls:
        i = c.args[0]
        assert c.ok == (i % 3 == 0)
        if i % 3 == 1:
            assert c.error is not None and c.error.ename == "ValueError"
        elif i % 3 == 2:
            assert c.error is not None and c.error.ename == "TypeError"


@WARM_COLD
def test_output_between_gathered_calls_keeps_its_order(warm: bool) -> None:
    # A frame the program writes after a call was made (and held for the batch) leaves
    # after it: each call's start comes before the output printed after it.
    def echo(x: int) -> int:
        return x

    program = """
import asyncio
async def one(i):
    fut = asyncio.ensure_future(tools.echo(i))
    await asyncio.sleep(0)  # the call leaves (or is held) in this turn
    print(f"after {i}", flush=True)
    return await fut
return await asyncio.gather(*[one(i) for i in range(6)])
"""
    r = _run({"echo": echo}, program, warm)
    assert r.ok, r.error
    assert r.value == list(range(6))
    assert r.stdout == "".join(f"after {i}\n" for i in range(6))
    assert [c.value for c in r.calls] == list(range(6))


@pytest.mark.parametrize("order", ["block_first", "block_last"])
def test_a_blocked_call_holds_up_no_answer_of_its_batch(order: str) -> None:
    # block() returns only once release() was called, and the program calls release()
    # only after fast()'s answer arrived: fast() is in block()'s batch (behind it, or
    # ahead of it with its answer waiting in the same thread), so this deadlocks (until
    # block() gives up) unless the sweep starts or answers it meanwhile. The slow call
    # first lets the sweep timer back off, as it does while a slow binding runs.
    released = threading.Event()

    def slow() -> str:
        released.wait(0.3)  # not set yet: a slow binding
        return "slow"

    def block() -> str:
        return "released" if released.wait(10) else "never released"

    def fast() -> str:
        return "fast"

    def release() -> None:
        released.set()

    calls = "[block(), fast_then_release()]"
    if order == "block_last":
        calls = "[fast_then_release(), block()]"
    program = f"""
import asyncio
assert await tools.slow() == "slow"
async def block():
    return await tools.block()
async def fast_then_release():
    value = await tools.fast()
    await tools.release()
    return value
return await asyncio.gather(*{calls})
"""
    bindings = {"slow": slow, "block": block, "fast": fast, "release": release}
    r = _run(bindings, program, warm=True)
    assert r.ok, r.error
    assert sorted(r.value) == ["fast", "released"]
    assert [c.name for c in r.calls][:1] == ["slow"]
    assert sorted(c.name for c in r.calls[1:]) == ["block", "fast", "release"]
