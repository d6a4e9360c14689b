"""GatewayRuntime with a kernel that is there but no longer answers (SIGSTOP: alive, silent).

A real Kernel Gateway on loopback starts the kernels; the test freezes one (SIGSTOP to the
kernel's process, found by its connection file) at each moment that matters: idle in the
pool, just before a run, while a binding call is answered, while the run's output streams,
and before the runtime is closed. Each time the run in flight ends ``worker_exit`` within
the heartbeat's bound (or its budget and reply grace, with the heartbeat off) saying the
kernel stopped answering, the frozen kernel is shut down at the gateway (``DELETE``, which
the gateway answers by killing it) and replaced, the next run gets a working kernel, and
nothing is left: no kernel at the gateway, no process of any kernel, no task.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

import pytest

from kernelgate import Limits, RunResult
from kernelgate.jupyter import GatewayError, GatewayRuntime
from kernelgate.jupyter.gatewayrest import GatewayEndpoint
from tests.procs import descendants, processes_with

from .helpers import wait_gone
from .kernelgateway import KernelGatewayServer, kernel_gateway

pytestmark = pytest.mark.timeout(150)

#: The heartbeat of these tests' runtimes: a kernel silent for HEARTBEAT s is asked, and
#: has HEARTBEAT_TIMEOUT s to answer.
HEARTBEAT = 0.5
HEARTBEAT_TIMEOUT = 5.0
#: How long after a freeze its run may take to end: the heartbeat's bound, RemoteGateway's
#: one-second look at is_alive, and room for a loaded machine.
FOUND_WITHIN = HEARTBEAT + HEARTBEAT_TIMEOUT + 1.0 + 4.0
#: Every scenario's own bound: past it the test fails instead of hanging.
SCENARIO_SECONDS = 90.0

T = TypeVar("T")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KernelGatewayServer]:
    with kernel_gateway(tmp_path_factory.mktemp("gateway-frozen")) as gw:
        yield gw


class Freezer:
    """Stops (SIGSTOP) the kernel processes of a runtime and remembers them, with what
    ran below them, to check they are gone at the end (and to resume any left behind)."""

    def __init__(self) -> None:
        self.frozen: list[int] = []
        self.below: set[int] = set()
        self.at: float | None = None

    def freeze(self, gw: GatewayRuntime, index: int = 0) -> str:
        kid = gw.kernels[index].kernel_id
        assert kid is not None
        (pid,) = processes_with(f"kernel-{kid}.json")
        self.below.update({pid, *descendants(pid)})
        os.kill(pid, signal.SIGSTOP)
        self.frozen.append(pid)
        self.at = time.monotonic()
        return kid

    def since(self) -> float:
        assert self.at is not None
        return time.monotonic() - self.at

    def resume_leftovers(self) -> None:
        for pid in self.frozen:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)


@pytest.fixture
def freezer() -> Iterator[Freezer]:
    f = Freezer()
    try:
        yield f
    finally:
        f.resume_leftovers()


def runtime(server: KernelGatewayServer, **kwargs: Any) -> GatewayRuntime:
    kwargs.setdefault("heartbeat_seconds", HEARTBEAT)
    kwargs.setdefault("heartbeat_timeout", HEARTBEAT_TIMEOUT)
    return GatewayRuntime(server.url, **kwargs)


def bounded(scenario: Callable[[], Awaitable[T]]) -> T:
    """Run ``scenario`` on a new loop, failing (not hanging) past SCENARIO_SECONDS; and
    check it left no task behind on its loop."""

    async def main() -> T:
        result = await asyncio.wait_for(scenario(), SCENARIO_SECONDS)
        left = asyncio.all_tasks() - {asyncio.current_task()}
        assert not left, left
        return result

    return asyncio.run(main())


async def until(condition: Callable[[], bool], seconds: float) -> None:
    """Wait for ``condition`` (looked at every 20 ms), failing past ``seconds``."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        await asyncio.sleep(0.02)


def assert_frozen_run(result: RunResult, took: float, bound: float = FOUND_WITHIN) -> None:
    assert result.status == "worker_exit", result
    assert result.error is not None and result.error.ename == "WorkerExit"
    assert took < bound, f"the run took {took:.1f} s after its kernel froze"


def assert_nothing_left(server: KernelGatewayServer, gw: GatewayRuntime, f: Freezer) -> None:
    assert server.kernels() == []
    assert all(k.client is None and k.gateway is None for k in gw.kernels)
    assert f.frozen
    assert wait_gone(f.below | descendants(server.proc.pid)) == set()


def test_a_kernel_frozen_just_before_a_run_ends_that_run_and_is_replaced(
    server: KernelGatewayServer, freezer: Freezer
) -> None:
    """Frozen the moment before the run takes it (its last message just came): the
    execute_request is never acknowledged; the heartbeat finds the kernel silent."""
    gw = runtime(server)

    async def main() -> tuple[RunResult, float, RunResult, set[str]]:
        async with gw:
            assert (await gw.run("1 + 1")).value == 2
            old = freezer.freeze(gw)
            frozen = await gw.run("6 * 7")
            took = freezer.since()
            after = await gw.run("6 * 7")
            assert gw.kernel_ids != [old]
            assert old not in [k["id"] for k in server.kernels()]
            return frozen, took, after, {old, *gw.kernel_ids}

    frozen, took, after, ids = bounded(main)
    assert_frozen_run(frozen, took)
    assert "stopped answering" in frozen.message and "frozen" in frozen.message, frozen.message
    assert after.ok and after.value == 42, after
    assert gw.replaced == 1 and len(ids) == 2
    assert_nothing_left(server, gw, freezer)


def test_a_kernel_frozen_idle_in_the_pool_is_replaced_before_a_run_takes_it(
    server: KernelGatewayServer, freezer: Freezer
) -> None:
    """Idle kernels are asked now and then: one that froze in the pool is taken out and
    replaced in the background, and the run after that never sees it."""
    gw = runtime(server, pool_size=2)

    async def main() -> tuple[list[RunResult], set[str]]:
        async with gw:
            old = freezer.freeze(gw, 1)
            await until(lambda: gw.replaced == 1, FOUND_WITHIN)
            took = freezer.since()
            assert took < FOUND_WITHIN
            # The fresh kernel started and connected (the other one never stopped working).
            await until(lambda: all(k.usable for k in gw.kernels), 60)
            assert old not in gw.kernel_ids and len(gw.kernel_ids) == 2
            results = await asyncio.gather(*(gw.run(f"{i} * 2") for i in range(4)))
            return list(results), {old, *gw.kernel_ids}

    results, ids = bounded(main)
    assert [r.value for r in results] == [0, 2, 4, 6], results
    assert gw.replaced == 1 and len(ids) == 3
    assert_nothing_left(server, gw, freezer)


def test_a_kernel_frozen_during_a_binding_call_ends_the_run_and_is_replaced(
    server: KernelGatewayServer, freezer: Freezer
) -> None:
    """The binding (answered here) freezes the kernel before answering: the kernel never
    reads the answer, the run is given up, the next run gets a fresh kernel."""
    box: list[GatewayRuntime] = []

    def freeze() -> str:
        freezer.freeze(box[0])
        return "frozen"

    gw = runtime(server, bindings={"freeze": freeze})
    box.append(gw)

    async def main() -> tuple[RunResult, float, RunResult]:
        async with gw:
            frozen = await gw.run("print('before')\nr = await tools.freeze()\nprint(r)\n7")
            took = freezer.since()
            after = await gw.run("6 * 7")
            return frozen, took, after

    frozen, took, after = bounded(main)
    assert_frozen_run(frozen, took)
    assert frozen.stdout == "before\n", frozen.stdout  # what came before the freeze is kept
    assert [c.name for c in frozen.calls] == [], frozen.calls  # its record never came
    assert after.ok and after.value == 42, after
    assert gw.replaced == 1
    assert_nothing_left(server, gw, freezer)


def test_a_kernel_frozen_while_the_runs_output_streams_ends_the_run_and_is_replaced(
    server: KernelGatewayServer, freezer: Freezer
) -> None:
    """Frozen while the run prints, line after line: the output stops coming, the run ends
    with what arrived, and the run's own process goes with the kernel."""
    box: list[GatewayRuntime] = []
    seen: list[str] = []

    def on_output(output: dict[str, Any]) -> None:
        seen.append(str(output.get("text", "")))
        if len("".join(seen).splitlines()) >= 5 and not freezer.frozen:
            freezer.freeze(box[0])

    gw = runtime(server)
    box.append(gw)
    program = "import time\nfor i in range(100000):\n    print(i, flush=True)\n    time.sleep(0.01)"

    async def main() -> tuple[RunResult, float, RunResult]:
        async with gw:
            frozen = await gw.run(program, on_output=on_output)
            took = freezer.since()
            after = await gw.run("6 * 7")
            return frozen, took, after

    frozen, took, after = bounded(main)
    assert_frozen_run(frozen, took)
    lines = frozen.stdout.splitlines()
    assert len(lines) >= 5 and lines == [str(i) for i in range(len(lines))], frozen.stdout[-200:]
    assert after.ok and after.value == 42, after
    assert gw.replaced == 1
    assert_nothing_left(server, gw, freezer)


def test_without_the_heartbeat_a_frozen_run_ends_past_its_budget_and_reply_grace(
    server: KernelGatewayServer, freezer: Freezer
) -> None:
    """The heartbeat off: the run is given up once its budget (wall time and kill grace)
    and the reply grace have passed, and the kernel, which never replied, is replaced."""
    box: list[GatewayRuntime] = []

    def freeze() -> None:
        freezer.freeze(box[0])

    gw = runtime(server, bindings={"freeze": freeze}, heartbeat_seconds=None, reply_grace_seconds=2)
    box.append(gw)
    limits = Limits(wall_seconds=2, kill_grace_seconds=0.5)

    async def main() -> tuple[RunResult, float, RunResult]:
        async with gw:
            frozen = await gw.run("await tools.freeze()", limits=limits)
            took = freezer.since()
            after = await gw.run("6 * 7")
            return frozen, took, after

    frozen, took, after = bounded(main)
    budget = limits.wall_seconds + limits.kill_grace_seconds + 2
    assert_frozen_run(frozen, took, budget + 1.0 + 4.0)
    assert took >= budget - 0.5, took  # not before the kernel's own deadline
    assert "no reply" in frozen.message, frozen.message
    assert after.ok and after.value == 42, after
    assert gw.replaced == 1
    assert_nothing_left(server, gw, freezer)


@pytest.mark.parametrize("busy", [False, True], ids=["idle", "mid-run"])
def test_closing_a_runtime_whose_kernel_is_frozen_does_not_hang(
    server: KernelGatewayServer, freezer: Freezer, busy: bool
) -> None:
    """Frozen, then the runtime closed at once (idle; or while its run waits on the frozen
    kernel, before the heartbeat found it): aclose() returns within the bounds of its
    waits, the run in flight ends, and the gateway kills the kernel it is told to delete."""
    started = asyncio.Event()

    def freeze_me() -> None:
        freezer.freeze(gw)
        started.set()

    gw = runtime(
        server, bindings={"freeze_me": freeze_me}, heartbeat_seconds=60, shutdown_timeout=15
    )

    async def main() -> tuple[float, RunResult | None]:
        await gw.open()
        task = None
        if busy:
            task = asyncio.create_task(gw.run("await tools.freeze_me()\n1"))
            await started.wait()
        else:
            freezer.freeze(gw)
        t0 = time.monotonic()
        await gw.aclose()
        took = time.monotonic() - t0
        return took, (await task if task is not None else None)

    took, run = bounded(main)
    # The run's wait (10 s at most: RemoteGateway's close grace) and the DELETE's.
    assert took < 10 + 15 + 4, took
    if run is not None:
        assert run.status == "worker_exit", run
    assert_nothing_left(server, gw, freezer)


def test_close_from_sync_code_with_a_frozen_kernel_does_not_hang(
    server: KernelGatewayServer, freezer: Freezer
) -> None:
    gw = runtime(server)
    first = gw.run_sync("6 * 7")
    assert first.value == 42
    freezer.freeze(gw)
    t0 = time.monotonic()
    gw.close()
    assert time.monotonic() - t0 < 20 + 4
    assert_nothing_left(server, gw, freezer)


def test_run_sync_on_a_kernel_frozen_between_calls_gets_a_fresh_kernel(
    server: KernelGatewayServer, freezer: Freezer
) -> None:
    """run_sync reconnects each call: a kernel frozen between calls never answers the
    reconnect; the heartbeat finds it, and the call starts a fresh kernel and runs there."""
    gw = runtime(server)
    assert gw.run_sync("6 * 7").value == 42
    old = freezer.freeze(gw)
    t0 = time.monotonic()
    after = gw.run_sync("6 * 7")
    assert time.monotonic() - t0 < FOUND_WITHIN + 15
    assert after.ok and after.value == 42, after
    assert gw.kernel_ids != [old]
    gw.close()
    assert_nothing_left(server, gw, freezer)


def test_a_delete_the_gateway_never_answers_is_given_up_saying_so() -> None:
    """A gateway whose DELETE hangs (its link to the kernel stalled, or itself stuck): the
    runtime stops waiting after ``shutdown_timeout`` with an error naming the request."""
    with socket.socket() as listener:  # takes the connection, never answers
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        endpoint = GatewayEndpoint(
            f"http://127.0.0.1:{listener.getsockname()[1]}", shutdown_timeout=1
        )
        t0 = time.monotonic()
        with pytest.raises(GatewayError) as caught:
            asyncio.run(asyncio.wait_for(endpoint.shutdown_kernel("k1"), 30))
        took = time.monotonic() - t0
    assert "did not answer DELETE /api/kernels/k1 within 1 s" in str(caught.value), caught.value
    assert took < 1 + 4, took


@pytest.fixture
def own_server(tmp_path: Any) -> Iterator[KernelGatewayServer]:
    """A gateway of the test's own: it is frozen (SIGSTOP), then resumed."""
    with kernel_gateway(tmp_path) as gw:
        try:
            yield gw
        finally:
            os.kill(gw.proc.pid, signal.SIGCONT)


def test_a_frozen_gateway_ends_the_run_and_no_kernel_is_started_there_blind(
    own_server: KernelGatewayServer,
) -> None:
    """The gateway itself stopped mid-run (its link to the kernel stalled, as seen from
    here): the heartbeat ends the run; replacing the kernel gives up at the DELETE the
    gateway does not answer, and sends no start it would act on later (a kernel nobody
    knows of). Once the gateway is back, the next run starts a fresh kernel and works."""
    gateway_pid = own_server.proc.pid

    def stop_gateway() -> None:
        os.kill(gateway_pid, signal.SIGSTOP)

    gw = runtime(own_server, bindings={"stop": stop_gateway}, shutdown_timeout=3)

    async def main() -> tuple[RunResult, float, RunResult, set[str]]:
        async with gw:
            old = set(gw.kernel_ids)
            t0 = time.monotonic()
            frozen = await gw.run("await tools.stop()\nimport time\ntime.sleep(60)")
            took = time.monotonic() - t0
            refills = set(gw._refills)
            await asyncio.gather(*refills)  # gave up: the DELETE went unanswered
            assert gw.kernel_ids == []
            os.kill(gateway_pid, signal.SIGCONT)
            after = await gw.run("6 * 7")
            return frozen, took, after, old | set(gw.kernel_ids)

    frozen, took, after, ids = bounded(main)
    assert_frozen_run(frozen, took)
    assert after.ok and after.value == 42, after
    assert len(ids) == 2
    deadline = time.monotonic() + 30
    while own_server.kernels() and time.monotonic() < deadline:
        time.sleep(0.1)  # the DELETE the gateway took while stopped, done once it is back
    assert own_server.kernels() == []
    assert wait_gone(descendants(own_server.proc.pid)) == set()
