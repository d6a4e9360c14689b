"""Bindings never block or kill the host (issue 10): synchronous bindings run in worker
threads, and whatever a binding raises becomes a ToolError in the program."""

from __future__ import annotations

import asyncio
import textwrap
import threading

import pytest

from kernelgate import Gateway, Limits

pytestmark = pytest.mark.timeout(60)


def test_a_blocking_sync_binding_does_not_stall_other_runs():
    entered = threading.Event()
    other_done = threading.Event()
    unblocked: list[bool] = []

    def blocking() -> str:
        # Blocks its thread until the other run has finished: with the binding called
        # on the event loop, the other run could never finish and this would time out.
        entered.set()
        unblocked.append(other_done.wait(timeout=20))
        return "done"

    async def main() -> tuple[object, object]:
        async with Gateway(bindings={"blocking": blocking}, pool_size=2) as gw:
            slow = asyncio.ensure_future(gw.run("return await tools.blocking()"))
            assert await asyncio.to_thread(entered.wait, 20)  # the binding is blocking now
            quick = await gw.run("return 6 * 7")
            other_done.set()
            first = await slow
            return quick.value, first.value

    quick, first = asyncio.run(main())
    assert quick == 42
    assert first == "done"
    assert unblocked == [True]


def test_wall_seconds_fires_while_a_sync_binding_blocks():
    release = threading.Event()

    def stuck() -> None:
        release.wait(timeout=30)

    try:
        with Gateway(bindings={"stuck": stuck}, pool_size=0) as gw:
            r = gw.run_sync(
                "await tools.stuck()",
                limits=Limits(wall_seconds=1, kill_grace_seconds=0.3),
            )
    finally:
        release.set()
    assert r.status == "timeout", r.message
    assert "wall_seconds=1" in r.message
    assert r.duration_s < 5


def test_sync_bindings_gathered_run_at_once():
    barrier = threading.Barrier(3, timeout=20)

    def meet(i: int) -> int:
        barrier.wait()  # passes only when all three are running at the same time
        return i

    with Gateway(bindings={"meet": meet}, pool_size=0) as gw:
        r = gw.run_sync(
            "import asyncio\nreturn await asyncio.gather(*(tools.meet(i) for i in range(3)))"
        )
    assert r.status == "ok", r.message
    assert r.value == [0, 1, 2]


@pytest.mark.parametrize("kind", ["sync", "async"])
@pytest.mark.parametrize("raised", [SystemExit, KeyboardInterrupt, GeneratorExit])
def test_a_binding_raising_base_exception_is_a_tool_error(kind, raised):
    if kind == "sync":

        def bad() -> None:
            raise raised("from the binding")

        fn = bad
    else:

        async def abad() -> None:
            raise raised("from the binding")

        fn = abad
    program = textwrap.dedent(
        """
        try:
            await tools.bad()
        except ToolError as exc:
            out = exc.ename
        return [out, await tools.ok()]
        """
    )
    with Gateway(bindings={"bad": fn, "ok": lambda: "still here"}, pool_size=0) as gw:
        r = gw.run_sync(program)
        again = gw.run_sync("return 1")
    assert r.status == "ok", r.message
    assert r.value == [raised.__name__, "still here"]
    assert again.value == 1
    failed = [c for c in r.calls if not c.ok]
    assert [c.error.ename for c in failed] == [raised.__name__]
