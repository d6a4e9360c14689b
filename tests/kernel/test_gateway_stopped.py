"""The Kernel Gateway itself goes away mid-run (its own gateway: this test stops it).

The run in flight ends ``worker_exit`` once reconnecting has failed (never a hang), the
next run is a :class:`GatewayError` naming the unreachable gateway, closing does not hang
or raise, and no kernel process is left (the gateway shut its kernels down as it stopped).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from kernelgate import RunResult
from kernelgate.jupyter import GatewayError, GatewayRuntime
from tests.procs import descendants, processes_with

from .helpers import wait_gone
from .kernelgateway import KernelGatewayServer, kernel_gateway

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KernelGatewayServer]:
    with kernel_gateway(tmp_path_factory.mktemp("gateway-stopped")) as gw:
        yield gw


def test_a_gateway_stopped_mid_run_ends_the_run_and_the_runtime_cleanly(
    server: KernelGatewayServer,
) -> None:
    below: set[int] = set()
    box: list[GatewayRuntime] = []

    async def stop_gateway() -> None:
        (kid,) = box[0].kernel_ids
        for pid in processes_with(f"kernel-{kid}.json"):
            below.update({pid, *descendants(pid)})
        await asyncio.to_thread(server.stop)

    gw = GatewayRuntime(server.url, bindings={"stop_gateway": stop_gateway}, reconnect_timeout=3)
    box.append(gw)

    async def main() -> tuple[RunResult, str]:
        async with gw:
            died = await gw.run("await tools.stop_gateway()\nimport time\ntime.sleep(60)")
            with pytest.raises(GatewayError) as caught:
                await gw.run("1")
        return died, str(caught.value)

    died, refused = asyncio.run(main())
    assert below
    assert died.status == "worker_exit" and died.error is not None, died
    assert "kernel" in died.error.evalue, died.error
    assert server.url in refused and "could not reach the kernel gateway" in refused, refused
    assert wait_gone(below) == set()
