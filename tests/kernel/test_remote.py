"""RemoteGateway: the kernel runs the program, this process answers the binding calls."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Awaitable, Callable
from typing import Any, Literal

import pytest
from jupyter_client.asynchronous import AsyncKernelClient
from jupyter_client.manager import AsyncKernelManager

from kernelgate import CallRecord, CodeGateway, Limits, RemoteGateway, RunResult
from tests.gateway.test_binding_types import Point

from .helpers import KERNEL_NAME

Body = Callable[[Any], Awaitable[None]]


def with_kernel(body: Body) -> None:
    """Run ``body(kernel_client)`` against a fresh kernel, shut down afterwards."""

    async def main() -> None:
        km = AsyncKernelManager(kernel_name=KERNEL_NAME)
        await km.start_kernel()
        kc = km.client()
        kc.start_channels()
        try:
            await asyncio.wait_for(body(kc), 45)
        finally:
            kc.stop_channels()
            await km.shutdown_kernel()
        assert not await km.is_alive()

    asyncio.run(main())


def test_gather_of_client_answered_calls() -> None:
    n = 8
    arrived: list[int] = []
    all_in = asyncio.Event()

    async def lookup(key: int, scale: int = 1) -> dict[str, int]:
        """Answer only once every call of the gather has arrived: proves they overlap."""
        arrived.append(key)
        if len(arrived) == n:
            all_in.set()
        await asyncio.wait_for(all_in.wait(), 20)
        return {"key": key, "value": key * scale}

    program = (
        "import asyncio\n"
        "print('gathering')\n"
        f"got = await asyncio.gather(*(agent.lookup(i, scale=10) for i in range({n})))\n"
        "hits = await tools.search('messages')\n"  # the kernel's own binding, still there
        "print('done', len(got))\n"
        "return {'values': [g['value'] for g in got], 'hits': len(hits)}\n"
    )
    live: list[dict[str, Any]] = []
    calls_seen: list[CallRecord] = []

    async def body(kc: Any) -> None:
        async with RemoteGateway(kc, bindings={"lookup": lookup}, namespace="agent") as gw:
            assert gw.kernel_bindings["agent"] == {
                "lookup": "(key: int, scale: int = 1) -> dict[str, int]"
            }
            assert set(gw.kernel_bindings["tools"]) == {"search", "fetch", "compute"}
            result = await gw.run(program, on_output=live.append, on_call=calls_seen.append)
            check(result)
            again = await gw.run("return await agent.lookup(1) if False else 'no calls'")
            assert again.ok and again.value == "no calls" and again.calls == []

    def check(result: RunResult) -> None:
        assert result.status == "ok", result.error
        assert result.value == {"values": [i * 10 for i in range(n)], "hits": 2}
        assert result.stdout == f"gathering\ndone {n}\n"
        assert sorted(arrived) == list(range(n))
        lookups = [c for c in result.calls if c.name == "lookup"]
        assert len(lookups) == n and all(c.namespace == "agent" and c.ok for c in lookups)
        assert sorted(c.value["key"] for c in lookups) == list(range(n))
        assert all(c.kwargs == {"scale": 10} for c in lookups)
        assert [c.name for c in result.calls][-1] == "search"
        assert calls_seen == result.calls  # on_call saw each as it completed
        assert [o["output_type"] for o in live] == ["stream", "stream", "execute_result"]
        # As in Gateway.run, calls are not outputs: the two prints make one stream output.
        assert result.outputs[0] == {
            "output_type": "stream",
            "name": "stdout",
            "text": f"gathering\ndone {n}\n",
        }
        assert [o["output_type"] for o in result.outputs] == ["stream", "execute_result"]
        assert result.run_id and result.started_at and result.duration_s > 0
        assert result.bindings["agent"]["lookup"].startswith("(key: int")

    with_kernel(body)


def test_failures_come_back_as_results() -> None:
    async def broken(x: int) -> int:
        raise LookupError(f"no {x}")

    def not_json() -> Any:
        return {1, 2}

    async def forever() -> None:
        await asyncio.Event().wait()

    async def body(kc: Any) -> None:
        gw = RemoteGateway(
            kc, namespaces={"agent": {"broken": broken, "not_json": not_json, "forever": forever}}
        )
        try:
            r = await gw.run(
                "try:\n    await agent.broken(3)\nexcept ToolError as e:\n    print(e.ename, e)\n"
                "try:\n    await agent.not_json()\nexcept ToolError as e:\n    print(e.ename)\n"
            )
            assert r.ok, r.error
            assert r.stdout.splitlines() == [
                "LookupError agent.broken failed: LookupError: no 3",
                "TypeError",
            ]
            assert [(c.name, c.ok, c.error.ename if c.error else None) for c in r.calls] == [
                ("broken", False, "LookupError"),
                ("not_json", False, "TypeError"),
            ]

            r = await gw.run("await agent.broken()")  # refused in the child: wrong arguments
            assert r.status == "exception" and r.error is not None
            assert r.error.ename == "TypeError"
            assert r.error.traceback[0].startswith("Traceback")

            r = await gw.run(
                "await agent.forever()", limits=Limits(wall_seconds=1, kill_grace_seconds=0.2)
            )
            assert r.status == "timeout", r
            assert r.limits["wall_seconds"] == 1

            # Cancelling run() interrupts the kernel's cell.
            started = asyncio.Event()
            task = asyncio.create_task(
                gw.run(
                    "print('spin')\nwhile True:\n    pass",
                    on_output=lambda o: started.set(),
                )
            )
            await asyncio.wait_for(started.wait(), 20)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            r = await gw.run("'after the cancel'")
            assert r.ok and r.value == "after the cancel"
        finally:
            await gw.aclose()
        assert gw.closed
        with pytest.raises(RuntimeError, match="closed"):
            await gw.run("1")

        # No client bindings: nothing is announced, cells see the kernel's own.
        async with RemoteGateway(kc) as plain:
            r = await plain.run("len(await tools.search('messages'))")
            assert r.ok and r.value == 2 and [c.name for c in r.calls] == ["search"]

    with_kernel(body)


def test_invalid_bindings_are_refused_before_anything_is_sent() -> None:
    with pytest.raises(ValueError, match="not a valid Python identifier"):
        RemoteGateway(object(), namespaces={"my-ns": {}})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="must be callable"):
        RemoteGateway(object(), bindings={"f": 3})  # type: ignore[arg-type, dict-item]
    with pytest.raises(ValueError, match="not both"):
        RemoteGateway(object(), bindings={}, namespaces={})  # type: ignore[arg-type]


def test_a_kernel_that_is_not_kernelgate_refuses_the_bindings() -> None:
    async def main() -> None:
        km = AsyncKernelManager(kernel_name="python3")  # ipykernel's own kernelspec
        await km.start_kernel()
        kc = km.client()
        kc.start_channels()
        try:
            gw = RemoteGateway(kc, bindings={"f": lambda: 1}, ready_timeout=20)
            with pytest.raises(RuntimeError, match="refused the bindings"):
                await gw.run("1")
            with pytest.raises(RuntimeError, match="refused the bindings"):
                await gw.open()  # the refusal sticks
            await gw.aclose()
        finally:
            kc.stop_channels()
            await km.shutdown_kernel()

    asyncio.run(main())


def test_a_remote_gateway_is_a_code_gateway() -> None:
    """The protocol's other half, against a real kernel: language, describe (the kernel's
    bindings and the client's), run_sync from synchronous code (twice: it opens and lets go
    each time, on a loop of its own), and close from synchronous code."""

    def lookup(key: int) -> int:
        """Look a key up."""
        return key * 2

    async def main() -> None:
        km = AsyncKernelManager(kernel_name=KERNEL_NAME)
        await km.start_kernel()
        try:
            await asyncio.to_thread(sync_part, km)
        finally:
            await km.shutdown_kernel()

    def sync_part(km: AsyncKernelManager) -> None:
        kc = km.client()
        kc.start_channels()
        try:
            gw: CodeGateway = RemoteGateway(kc, bindings={"lookup": lookup}, namespace="agent")
            assert gw.language == "python"
            assert "lookup" in gw.describe()
            for n in (1, 2):
                r = gw.run_sync(f"return await agent.lookup({n})")
                assert r.ok and r.value == 2 * n, r.error
                assert r.language == "python"
            # The kernel's own bindings came with the ready of the last announcement.
            text = gw.describe()
            assert "class agent:" in text and "class tools:" in text and "search" in text
            names = {(e["namespace"], e["name"]) for e in gw.describe("json")}
            assert {("agent", "lookup"), ("tools", "search")} <= names
            gw.close()
            with pytest.raises(RuntimeError, match="closed"):
                gw.run_sync("1")
        finally:
            kc.stop_channels()

    asyncio.run(main())


def test_close_from_sync_code_on_the_gateway_s_loop() -> None:
    async def body(kc: Any) -> None:
        gw = RemoteGateway(kc, bindings={"f": lambda: 1})
        r = await gw.run("return await tools.f()")
        assert r.ok and r.value == 1 and gw.language == "python"
        gw.close()  # from a synchronous callback on the loop: finished by aclose here
        await gw.aclose()
        assert gw.closed
        with pytest.raises(RuntimeError, match="closed"):
            await gw.run("1")

    with_kernel(body)


def test_describe_remote_doctests() -> None:
    import doctest

    from kernelgate.jupyter import remotedescribe

    result = doctest.testmod(remotedescribe)
    assert result.attempted > 0 and result.failed == 0


def test_a_client_bindings_type_hints_are_enforced_and_converted_on_the_client() -> None:
    """The client answers its bindings' calls as a Gateway would: arguments checked and
    converted by the hints before the binding runs, the result converted back."""
    seen: list[Any] = []

    def plot(p: Point, state: Literal["open", "closed"]) -> Point:
        seen.append(p)
        return Point(p.x + 1, p.y)

    program = (
        "out = []\n"
        "try:\n"
        "    await agent.plot({'x': 1}, 'merged')\n"
        "except ToolError as e:\n"
        "    out.append([e.ename, str(e)])\n"
        "out.append(await agent.plot({'x': 2}, 'open'))\n"
        "return out\n"
    )

    async def body(kc: Any) -> None:
        async with RemoteGateway(kc, bindings={"plot": plot}, namespace="agent") as gw:
            result = await gw.run(program)
            assert result.status == "ok", result.error
            refused, point = result.value
            assert refused[0] == "TypeError"
            assert (
                "agent.plot() argument state: expected 'open' or 'closed', got str " in (refused[1])
            )
            assert point == {"x": 3, "y": 0}
            assert seen == [Point(2, 0)]

    with_kernel(body)


def test_a_reply_the_kernel_never_sends_ends_the_run_past_its_budget() -> None:
    """A kernel frozen mid-run (SIGSTOP: alive, silent) never replies. The client gives the
    run up as worker_exit once the kernel's budget for it (wall time and kill grace) and
    ``reply_grace_seconds`` have passed; before, it waited for ever (the kernel was alive)."""

    async def main() -> None:
        km = AsyncKernelManager(kernel_name=KERNEL_NAME)
        await km.start_kernel()
        kc = km.client()
        kc.start_channels()
        pid = km.provisioner.pid  # type: ignore[union-attr]

        def freeze() -> str:
            os.kill(pid, signal.SIGSTOP)  # the kernel gets this answer, and says nothing more
            return "frozen"

        try:
            gw = RemoteGateway(kc, bindings={"freeze": freeze}, reply_grace_seconds=1)
            async with gw:
                assert gw._kernel_budget == Limits().wall_seconds + Limits().kill_grace_seconds
                limits = Limits(wall_seconds=2, kill_grace_seconds=0.5)
                result = await asyncio.wait_for(gw.run("await tools.freeze()", limits=limits), 30)
                assert result.status == "worker_exit", result
                assert "no reply" in result.message and "run again" in result.message
        finally:
            os.kill(pid, signal.SIGCONT)
            kc.stop_channels()
            await km.shutdown_kernel()
        assert not await km.is_alive()

    asyncio.run(main())


@pytest.mark.timeout(90)
def test_open_ends_soon_when_the_kernel_freezes_before_it_answers_the_bindings() -> None:
    """A kernel that answered kernel_info and then froze before it answered the bindings'
    comm_open: open() says so within seconds (its heartbeat stops), not after
    ready_timeout. The client is one of the kernel's own connection file (no manager), so
    it tells a frozen kernel by its heartbeat, as a remote client does."""

    async def main() -> None:
        km = AsyncKernelManager(kernel_name=KERNEL_NAME)
        await km.start_kernel()
        kc = AsyncKernelClient()
        kc.load_connection_info(km.get_connection_info())
        kc.start_channels()
        pid = km.provisioner.pid
        answered = kc.wait_for_ready

        async def then_freeze(timeout: float | None = None) -> None:
            await answered(timeout=timeout)
            os.kill(pid, signal.SIGSTOP)  # it answered kernel_info; it never answers again

        kc.wait_for_ready = then_freeze  # type: ignore[method-assign]
        try:
            gw = RemoteGateway(kc, bindings={"f": lambda: 1}, ready_timeout=60)
            loop = asyncio.get_running_loop()
            began = loop.time()
            with pytest.raises(RuntimeError, match=r"could not open: .* comm_open"):
                await asyncio.wait_for(gw.open(), 45)
            assert loop.time() - began < 30
            await gw.aclose()
        finally:
            os.kill(pid, signal.SIGCONT)
            kc.stop_channels()
            await km.shutdown_kernel(now=True)

    asyncio.run(main())
