#!/usr/bin/env python3
"""What OpenTelemetry tracing costs a run and a binding call: off, on without an SDK, on.

    python benchmarks/bench_tracing.py [--reps 7] [--calls 500] [--runs 40]

Three gateways side by side, each with a warm pool:

* ``off``: ``Gateway()`` (the default: OpenTelemetry is not imported);
* ``api only``: ``Gateway(tracing=True)`` with no SDK installed as the global provider
  (OpenTelemetry's API hands out non-recording spans: what an application pays that
  leaves tracing on in code but configures no SDK);
* ``sdk``: ``Gateway(tracing=provider)``, an SDK ``TracerProvider`` with a
  ``BatchSpanProcessor`` whose exporter drops the spans (what recording and handing
  off costs, without a backend's I/O).

Per call: the host's CPU (``time.process_time``, the gateway's event loop and its
threads) of a run of ``--calls`` sequential ``await tools.noop()`` minus that of a run
with none, divided by ``--calls``; and the child's view of one call's round trip
(``time.perf_counter`` around each ``await``, median). Per run: the host's CPU and the
wall time of ``return 1``. Each row is the median over ``--reps`` rounds; the rounds
alternate between the gateways so that all see the same machine. Figures are in
docs/benchmarks.md, "What tracing costs".
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from collections.abc import Sequence
from typing import Any

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import (  # noqa: E402
    BatchSpanProcessor,
    SpanExporter,
    SpanExportResult,
)

from kernelgate import Gateway, Limits, inline  # noqa: E402
from kernelgate.gateway.bindings import BindingRegistry  # noqa: E402
from kernelgate.gateway.plan import RunPlan  # noqa: E402
from kernelgate.gateway.runtime import PythonRuntime  # noqa: E402
from kernelgate.gateway.tracing import Tracing  # noqa: E402
from kernelgate.model.result import CallRecord, RunResult  # noqa: E402
from kernelgate.wire.events import CallRequest  # noqa: E402

CALLS = """\
import statistics, time
pc = time.perf_counter
noop = tools.noop
ts = []
for _ in range({n}):
    t = pc()
    await noop()
    ts.append(pc() - t)
return statistics.median(ts) if ts else 0.0
"""


@inline
def noop() -> None:
    """On the event loop, as the fastest binding runs: what is left is kernelgate's."""
    return None


class Drop(SpanExporter):
    """An exporter that takes the spans and keeps nothing."""

    def __init__(self) -> None:
        self.spans = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.spans += len(spans)
        return SpanExportResult.SUCCESS


async def _cpu(gw: Gateway, program: str) -> tuple[float, float, Any]:
    cpu, wall = time.process_time(), time.perf_counter()
    result = await gw.run(program)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    assert result.ok, result.error
    return cpu, wall, result.value


def machinery(tracing: Any, n: int = 20_000) -> tuple[float, float]:
    """The span machinery alone, in this process (no child, no event loop): CPU per call
    of what a traced call adds (its span started and made current around the admission,
    then ended), and per run of a run's span started and ended."""
    tracer = Tracing(tracing)
    registry = BindingRegistry.from_arguments({"noop": noop}, "tools", None)
    plan = RunPlan(registry, Limits(), PythonRuntime())
    run = tracer.start_run(plan)
    request = CallRequest(0, "tools", "noop", [], {})
    record = CallRecord(0, "tools", "noop", [], {}, ok=True)
    cpu = time.process_time()
    for _ in range(n):
        run.admit(lambda _request: None, request)
        run.call_ended(record)
    per_call = (time.process_time() - cpu) / n
    result = RunResult(status="ok", run_id="r")
    cpu = time.process_time()
    for _ in range(n // 10):
        tracer.start_run(plan).finish(result)
    return per_call, (time.process_time() - cpu) / (n // 10)


async def main(reps: int, calls: int, runs: int) -> None:
    exporter = Drop()
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(exporter))
    limits = Limits(wall_seconds=300)
    gateways = {
        "off": Gateway(bindings={"noop": noop}, limits=limits, pool_size=2),
        "api only": Gateway(bindings={"noop": noop}, limits=limits, pool_size=2, tracing=True),
        "sdk": Gateway(bindings={"noop": noop}, limits=limits, pool_size=2, tracing=provider),
    }
    per_call: dict[str, list[float]] = {k: [] for k in gateways}
    child_call: dict[str, list[float]] = {k: [] for k in gateways}
    run_cpu: dict[str, list[float]] = {k: [] for k in gateways}
    run_wall: dict[str, list[float]] = {k: [] for k in gateways}
    many, none = CALLS.format(n=calls), CALLS.format(n=0)
    for gw in gateways.values():  # warm up: the pool, the first run's probe
        for _ in range(3):
            await _cpu(gw, none)
    for r in range(reps):
        print(f"round {r + 1}/{reps}", file=sys.stderr)
        for name, gw in gateways.items():
            cpu_many, _, median = await _cpu(gw, many)
            cpu_none, _, _ = await _cpu(gw, none)
            per_call[name].append((cpu_many - cpu_none) / calls)
            child_call[name].append(median)
            cpus, walls = [], []
            for _ in range(runs):
                cpu, wall, _ = await _cpu(gw, "return 1")
                cpus.append(cpu)
                walls.append(wall)
            run_cpu[name].append(statistics.median(cpus))
            run_wall[name].append(statistics.median(walls))
    for gw in gateways.values():
        await gw.aclose()
    alone = {"api only": machinery(True), "sdk": machinery(provider)}
    provider.shutdown()
    us = "\u00b5s"
    print(f"\n{reps} rounds; {calls} calls per call run; {runs} runs per run round;")
    print(f"{exporter.spans} spans through the SDK provider (runs, calls, machinery)\n")
    print(
        "| tracing | host CPU per call | call round trip (child) | host CPU per run | run (wall) |"
    )
    print("|---|---|---|---|---|")
    for name in gateways:
        print(
            f"| {name} | {statistics.median(per_call[name]) * 1e6:.1f} {us} "
            f"| {statistics.median(child_call[name]) * 1e6:.1f} {us} "
            f"| {statistics.median(run_cpu[name]) * 1e6:.0f} {us} "
            f"| {statistics.median(run_wall[name]) * 1e3:.2f} ms |"
        )
    print("\nThe span machinery alone (in process, no child):\n")
    print("| tracing | CPU per call | CPU per run |")
    print("|---|---|---|")
    for name, (call, run) in alone.items():
        print(f"| {name} | {call * 1e6:.1f} {us} | {run * 1e6:.1f} {us} |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--runs", type=int, default=40)
    args = parser.parse_args()
    asyncio.run(main(args.reps, args.calls, args.runs))
