"""What a run and a binding call cost through a Jupyter Kernel Gateway, beside the local paths.

Three ways to run the same programs, each answering the same binding (``tools.echo``) in
this process:

- ``Gateway`` -- in-process: the child's calls come over its fd 3;
- ``RemoteGateway`` over ZMQ -- a kernelgate kernel on this machine (jupyter_client), the
  binding answered over the ``kernelgate.bindings`` comm;
- ``GatewayRuntime`` -- a kernelgate kernel behind a real Kernel Gateway on 127.0.0.1, the
  same comm over the gateway's websocket.

For each: the median of a run of ``1+1`` (``--reps`` times, after a warm-up), and the cost
of one binding call (a run making ``--calls`` calls one after another, less the empty run,
divided by the calls). Then runs/s through the Kernel Gateway with N kernels (``--kernels``):
``--burst`` runs of ``1+1`` at once over a pool of N.

    python benchmarks/bench_scale.py [--reps 20] [--calls 20] [--kernels 1,2,4] [--json]

Figures: docs/benchmarks.md ("Past one machine").
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from jupyter_client.manager import AsyncKernelManager

from kernelgate import Gateway, RemoteGateway
from kernelgate.jupyter import GatewayRuntime
from kernelgate.jupyter.spec import install_kernel_spec


def echo(x: int) -> int:
    """The binding every path answers in this process."""
    return x


Run = Callable[[str], Awaitable[Any]]


async def measure(run: Run, reps: int, calls: int) -> dict[str, float]:
    empty = "1+1"
    many = f"for i in range({calls}):\n    await tools.echo(i)\n1+1"
    for _ in range(3):  # warm-up (pools, connections, first-call costs)
        await run(empty)
        await run(many)
    t_empty: list[float] = []
    t_many: list[float] = []
    for _ in range(reps):  # alternated, so both see the same noise
        t0 = time.perf_counter()
        result = await run(empty)
        t_empty.append(time.perf_counter() - t0)
        assert result.ok, result
        t0 = time.perf_counter()
        result = await run(many)
        t_many.append(time.perf_counter() - t0)
        assert result.ok and len(result.calls) == calls, result
    run_ms = statistics.median(t_empty) * 1e3
    per_call_ms = (statistics.median(t_many) * 1e3 - run_ms) / calls
    return {"run_ms": round(run_ms, 2), "call_ms": round(per_call_ms, 3)}


async def in_process(reps: int, calls: int) -> dict[str, float]:
    async with Gateway(bindings={"echo": echo}) as gw:
        return await measure(gw.run, reps, calls)


async def over_zmq(reps: int, calls: int) -> dict[str, float]:
    km = AsyncKernelManager(kernel_name="kernelgate-bench")
    await km.start_kernel()
    kc = km.client()
    kc.start_channels()
    try:
        async with RemoteGateway(kc, bindings={"echo": echo}) as gw:
            return await measure(gw.run, reps, calls)
    finally:
        kc.stop_channels()
        await km.shutdown_kernel(now=True)


async def through_gateway(url: str, reps: int, calls: int) -> dict[str, float]:
    async with GatewayRuntime(url, "kernelgate-bench", bindings={"echo": echo}) as gw:
        return await measure(gw.run, reps, calls)


async def throughput(url: str, kernels: int, burst: int) -> float:
    async with GatewayRuntime(
        url, "kernelgate-bench", bindings={"echo": echo}, pool_size=kernels
    ) as gw:
        await asyncio.gather(*(gw.run("1+1") for _ in range(kernels * 2)))  # warm-up
        t0 = time.perf_counter()
        results = await asyncio.gather(*(gw.run("await tools.echo(1)") for _ in range(burst)))
        elapsed = time.perf_counter() - t0
    assert all(r.ok for r in results), [r for r in results if not r.ok][:1]
    return round(burst / elapsed, 1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--kernels", default="1,2,4")
    parser.add_argument("--burst", type=int, default=40)
    parser.add_argument("--json", action="store_true")
    opts = parser.parse_args()

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout's tests/
    from tests.kernel.kernelgateway import kernel_gateway  # the tests' own launcher

    report: dict[str, Any] = {"cpus": os.cpu_count()}
    with tempfile.TemporaryDirectory(prefix="kernelgate-bench-scale-") as tmp:
        install_kernel_spec("kernelgate-bench", prefix=tmp)
        os.environ["JUPYTER_PATH"] = os.path.join(tmp, "share", "jupyter")
        report["in-process Gateway"] = asyncio.run(in_process(opts.reps, opts.calls))
        report["RemoteGateway over ZMQ"] = asyncio.run(over_zmq(opts.reps, opts.calls))
        with kernel_gateway(Path(tmp), kernel_name="kernelgate-bench") as server:
            report["GatewayRuntime via Kernel Gateway"] = asyncio.run(
                through_gateway(server.url, opts.reps, opts.calls)
            )
            report["runs/s"] = {
                n: asyncio.run(throughput(server.url, n, opts.burst))
                for n in (int(k) for k in opts.kernels.split(","))
            }
    if opts.json:
        print(json.dumps(report, indent=1))
    else:
        for name, value in report.items():
            print(f"{name}: {value}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
