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


def test_inline_bindings_run_on_the_loop_and_others_in_worker_threads():
    from kernelgate import inline

    @inline
    def quick() -> str:
        return threading.current_thread().name

    def plain() -> str:
        return threading.current_thread().name

    async def coro() -> str:
        return threading.current_thread().name

    with Gateway(bindings={"quick": quick, "plain": plain, "coro": coro}, pool_size=0) as gw:
        r = gw.run_sync("return [await tools.quick(), await tools.plain(), await tools.coro()]")
    assert r.status == "ok", r.message
    here = threading.current_thread().name  # run_sync's loop runs in this thread
    assert r.value[0] == here and r.value[2] == here
    assert r.value[1].startswith("kernelgate-binding")


def test_max_threads_bounds_the_sync_bindings_running_at_once():
    running = 0
    most = 0
    lock = threading.Lock()
    both_started = threading.Event()

    def work(i: int) -> int:
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
        both_started.wait(timeout=0.5)  # with one thread, the second never starts meanwhile
        with lock:
            running -= 1
        return i

    with pytest.raises(ValueError, match="max_threads must be an integer >= 1, got 0"):
        Gateway(bindings={"work": work}, max_threads=0)
    with Gateway(bindings={"work": work}, pool_size=0, max_threads=1) as gw:
        r = gw.run_sync("import asyncio\nreturn await asyncio.gather(tools.work(1), tools.work(2))")
    assert r.status == "ok", r.message
    assert r.value == [1, 2]
    assert most == 1


@pytest.mark.parametrize("raised", [SystemExit, KeyboardInterrupt, ValueError])
def test_a_policy_raising_anything_denies_the_call_and_the_host_goes_on(raised):
    def policy(namespace, name, args, kwargs):
        raise raised("policy broke")

    with Gateway(bindings={"add": lambda a, b: a + b}, policy=policy, pool_size=0) as gw:
        r = gw.run_sync(
            "try:\n    await tools.add(1, 2)\nexcept ToolError as exc:\n    return exc.ename"
        )
        again = gw.run_sync("return 1")
    assert r.status == "ok", r.message
    assert r.value == "PolicyDenied"
    assert again.value == 1


def test_an_on_call_hook_that_raises_does_not_end_the_run():
    def hook(record):
        raise SystemExit("the host's hook broke")

    with Gateway(bindings={"add": lambda a, b: a + b}, pool_size=0) as gw:

        async def main():
            return await gw.run("return await tools.add(1, 2)", on_call=hook)

        r = asyncio.run(main())
    assert r.status == "ok", r.message
    assert r.value == 3
    assert "on_call: SystemExit: the host's hook broke" in r.note


def test_a_final_expression_that_is_not_json_says_why_value_is_none():
    with Gateway(pool_size=0) as gw:
        r = gw.run_sync("{1, 2}")
        returned = gw.run_sync("return {1, 2}")
    assert r.status == "ok" and r.value is None
    assert "not JSON" in r.message and "value is None" in r.message
    assert r.message.startswith("ok; ")
    assert returned.status == "invalid_output"  # the same rule, stated by return


def test_a_program_trapping_sigxcpu_past_cpu_seconds_is_judged_by_the_host():
    program = textwrap.dedent(
        """
        import signal, time
        signal.signal(signal.SIGXCPU, signal.SIG_IGN)  # RLIMIT_CPU's soft warning, ignored
        while time.process_time() < 1.5:
            pass
        return 'got away with it'
        """
    )
    with Gateway(pool_size=0) as gw:
        r = gw.run_sync(program, limits=Limits(cpu_seconds=1, wall_seconds=20))
    assert r.status == "timeout", (r.status, r.value)
    assert "cpu_seconds=1" in r.message
