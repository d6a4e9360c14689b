"""A kernelgate kernel behind a real Jupyter Kernel Gateway, started here on loopback.

``RemoteGateway`` drives it through jupyter_server's ``GatewayKernelClient`` over the
gateway's websocket: the kernel's own bindings and the client's (answered here, over the
``kernelgate.bindings`` comm through the gateway) work as with a local kernel, and failures
come back as results.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from jupyter_server.gateway.gateway_client import GatewayClient
from jupyter_server.gateway.managers import GatewayKernelManager

from kernelgate import RemoteGateway, RunResult

from .helpers import KERNEL_NAME
from .kernelgateway import get_json as _get
from .kernelgateway import kernel_gateway as start_gateway

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def kernel_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Kernel Gateway serving this package's kernelspecs (JUPYTER_PATH); its base URL."""
    with start_gateway(tmp_path_factory.mktemp("kernel-gateway")) as server:
        yield server.url


def mul(a: int, b: int) -> int:
    """Multiply, answered by the client."""
    return a * b


async def _through_gateway(url: str, programs: list[str]) -> tuple[dict[str, Any], list[RunResult]]:
    client = GatewayClient.instance()
    client.url = url
    client.init_connection_args()
    km = GatewayKernelManager()
    await km.start_kernel(kernel_name=KERNEL_NAME)
    kc = km.client()
    await kc.start_channels()
    try:
        async with RemoteGateway(kc, namespaces={"mine": {"mul": mul}}) as gw:
            results = [await gw.run(program) for program in programs]
            return gw.kernel_bindings, results
    finally:
        kc.stop_channels()
        await km.shutdown_kernel()


def test_remote_gateway_runs_through_a_kernel_gateway(kernel_gateway: str) -> None:
    try:
        bindings, (ok, failed) = asyncio.run(
            _through_gateway(
                kernel_gateway,
                [
                    "x = await tools.compute('sum', [2, 3])\n"
                    "print('x is', x)\n"
                    "await mine.mul(x, 10)",
                    # mul's hints say int: 'a' (which it once answered with 'aa') is
                    # refused on this side before mul runs (issue 21)
                    "try:\n    await mine.mul(2, 'a')\nexcept ToolError:\n    pass\n"
                    "await mine.mul(2, 3)\n1 / 0",
                ],
            )
        )
    finally:
        GatewayClient.clear_instance()
    assert set(bindings) == {"tools", "mine"}
    assert bindings["mine"] == {"mul": "(a: int, b: int) -> int"}
    assert ok.ok, ok.message
    assert (ok.stdout, ok.value) == ("x is 5.0\n", 50.0)
    assert [(c.namespace, c.name, c.ok) for c in ok.calls] == [
        ("tools", "compute", True),
        ("mine", "mul", True),
    ]
    assert failed.status == "exception" and failed.error is not None
    assert failed.error.ename == "ZeroDivisionError"
    assert [(c.name, c.ok, c.value) for c in failed.calls] == [
        ("mul", False, None),
        ("mul", True, 6),
    ]
    assert "expected int, got str 'a'" in failed.calls[0].error.evalue
    assert _get(f"{kernel_gateway}/api/kernels") == []  # the kernel was shut down
