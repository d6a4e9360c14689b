"""A call's reply waited for blocked on fd 3 (kernels/python/client.py ``_wait_here``) only
while nothing else in the program's loop could run: a timer, an fd the program watches, a
callback from another thread each still run while the call is in flight.

Each program here deadlocks if the child waited on fd 3 regardless: ``tools.hold()`` is
answered only after ``tools.release()`` was called, and only the loop's other work (the
timer, the fd's reader, the thread's callback) calls it. Warm and cold.
"""

from __future__ import annotations

import asyncio
import threading

import pytest

from kernelgate import Gateway, Limits, RunResult

LIMITS = Limits(wall_seconds=15, kill_grace_seconds=0.3)


def _gateway(warm: bool) -> tuple[Gateway, list[str]]:
    released = threading.Event()
    seen: list[str] = []

    def hold() -> str:
        # In a worker thread: waits for release() (another worker thread), bounded.
        seen.append("hold")
        return "released" if released.wait(10) else "never released"

    def release() -> str:
        seen.append("release")
        released.set()
        return "ok"

    gw = Gateway(bindings={"hold": hold, "release": release}, pool_size=1 if warm else 0)
    return gw, seen


async def _run(gw: Gateway, program: str, warm: bool) -> RunResult:
    async with gw:
        if warm:
            assert (await gw.run("1")).ok  # the next run takes a warm child
        return await gw.run(program, limits=LIMITS)


WARM_COLD = pytest.mark.parametrize("warm", [True, False], ids=["warm", "cold"])

PROGRAMS = {
    "timer": """
import asyncio
loop = asyncio.get_running_loop()
loop.call_later(0.02, lambda: asyncio.ensure_future(tools.release()))
return await tools.hold()
""",
    "fd": """
import asyncio, os
loop = asyncio.get_running_loop()
r, w = os.pipe()
def readable():
    loop.remove_reader(r)
    os.read(r, 1)
    asyncio.ensure_future(tools.release())
loop.add_reader(r, readable)
os.write(w, b"x")
return await tools.hold()
""",
    "thread": """
import asyncio, threading
loop = asyncio.get_running_loop()
started = threading.Event()
def other():
    started.wait()
    loop.call_soon_threadsafe(lambda: asyncio.ensure_future(tools.release()))
threading.Thread(target=other).start()
loop.call_soon(started.set)
return await tools.hold()
""",
    "task": """
import asyncio
async def later():
    await asyncio.sleep(0)
    return await tools.release()
task = asyncio.ensure_future(later())
value = await tools.hold()
return [value, await task]
""",
}


@pytest.mark.timeout(120)
@WARM_COLD
@pytest.mark.parametrize("what", sorted(PROGRAMS))
def test_the_loops_other_work_runs_while_a_call_waits(warm, what):
    gw, seen = _gateway(warm)
    r = asyncio.run(_run(gw, PROGRAMS[what], warm))
    assert r.status == "ok", r.message
    assert r.value in ("released", ["released", "ok"])
    assert sorted(seen) == ["hold", "release"]
    if warm:
        assert r.usage.get("warm") is True


@pytest.mark.timeout(120)
@WARM_COLD
def test_sequential_calls_and_gathered_calls_all_answer_in_order(warm):
    def echo(x: int) -> int:
        return x

    gw = Gateway(bindings={"echo": echo}, pool_size=1 if warm else 0)
    program = """
import asyncio
seq = [await tools.echo(i) for i in range(50)]
par = await asyncio.gather(*[tools.echo(i) for i in range(50)])
return [seq, par]
"""
    r = asyncio.run(_run(gw, program, warm))
    assert r.status == "ok", r.message
    assert r.value == [list(range(50)), list(range(50))]
    assert [c.id for c in r.calls] == list(range(100))


# -- the host: a synchronous binding answered from its worker thread ---------------------------


@pytest.mark.timeout(120)
@WARM_COLD
def test_answers_written_from_the_worker_thread_keep_the_outputs_in_order(warm):
    """Each answer leaves the binding's thread before the loop records the call: the call
    must still sit between the prints around it, every time."""

    def echo(x: int) -> int:
        return x

    gw = Gateway(bindings={"echo": echo}, pool_size=1 if warm else 0)
    program = """
for i in range(40):
    print(i)
    assert await tools.echo(i) == i
print('end')
"""
    r = asyncio.run(_run(gw, program, warm))
    assert r.status == "ok", r.message
    assert [o["text"] for o in r.outputs] == [f"{i}\n" for i in range(40)] + ["end\n"]
    assert [c.output_index for c in r.calls] == list(range(1, 41))
    assert all(c.ok and c.value == c.id for c in r.calls)


@pytest.mark.timeout(120)
@WARM_COLD
def test_an_answer_larger_than_the_socket_buffer_arrives_whole(warm):
    """A worker thread's write that fd 3 takes only in part: the loop writes the rest."""

    def big(n: int) -> str:
        return "x" * n

    gw = Gateway(bindings={"big": big}, pool_size=1 if warm else 0)
    program = """
import asyncio
sizes = [3_000_000, 10, 2_500_000]
got = [len(await tools.big(n)) for n in sizes]
got += [len(v) for v in await asyncio.gather(*[tools.big(n) for n in sizes])]
return got
"""
    r = asyncio.run(_run(gw, program, warm))
    assert r.status == "ok", r.message
    assert r.value == [3_000_000, 10, 2_500_000] * 2


@pytest.mark.timeout(120)
@WARM_COLD
def test_a_result_that_cannot_be_sent_is_still_answered(warm):
    """Results that fail the host's checks in the worker thread answer with the error."""

    def bad(kind: str) -> object:
        return {"set": {1, 2}, "nan": float("nan"), "ok": [1]}[kind]

    gw = Gateway(bindings={"bad": bad}, pool_size=1 if warm else 0)
    program = """
out = []
for kind in ("set", "ok", "nan"):
    try:
        out.append(await tools.bad(kind))
    except ToolError as exc:
        out.append(exc.ename)
return out
"""
    r = asyncio.run(_run(gw, program, warm))
    assert r.status == "ok", r.message
    assert r.value == ["TypeError", [1], "TypeError"]
    assert [c.ok for c in r.calls] == [False, True, False]


@pytest.mark.timeout(120)
@WARM_COLD
def test_a_call_answered_from_a_thread_is_recorded_live_while_the_child_is_quiet(warm):
    """A call answered from the binding's thread is recorded when the child next sends
    something, or by a timer: a child that sends nothing for a while after its answer
    must not hold back the live ``on_call`` (nor the call's slot) until it does."""

    def echo(x: int) -> int:
        return x

    async def main() -> tuple[RunResult, list[float], float]:
        seen: list[float] = []
        gw = Gateway(bindings={"echo": echo}, pool_size=1 if warm else 0)
        async with gw:
            if warm:
                assert (await gw.run("1")).ok
            loop = asyncio.get_running_loop()
            r = await gw.run(
                "import time\nassert await tools.echo(7) == 7\ntime.sleep(1.5)\nreturn 1",
                limits=LIMITS,
                on_call=lambda record: seen.append(loop.time()),
            )
            return r, seen, loop.time()

    r, seen, ended = asyncio.run(main())
    assert r.status == "ok", r.message
    assert [c.value for c in r.calls] == [7] and len(seen) == 1
    assert ended - seen[0] > 1.0, "on_call waited for the child's next frame"
