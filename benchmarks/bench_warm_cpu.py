#!/usr/bin/env python3
"""CPU and page faults per warm run, by where they land: the zygote's tree and the host.

    python benchmarks/bench_warm_cpu.py [--runs 400] [--concurrency 2] [--pool 2] [--json]

Issue 23's measure for a change to the processes of a warm run. A ``Gateway(pool_size=
--pool)`` at the default sandbox level runs ``print('hello')`` 20 times to warm up, then
``--runs`` times with ``--concurrency`` in flight, waiting for the last teardown. Per run:

- **zygote**: the zygote's own user+system CPU and minor faults (``/proc/<zygote>/stat``
  fields 10 and 14-15);
- **children**: every child the zygote reaped, with their reaped children (the namespace
  init and its program): fields 12 and 16-17;
- **tree**: the two together, the warm runs' processes whatever else the machine runs;
- **host**: this process's ``RUSAGE_SELF``; **machine**: every core's busy time from
  ``/proc/stat`` (other work on the machine included); **runs/s**.

CPU in ``/proc/<pid>/stat`` is counted in clock ticks (10 ms): with 400 runs a figure is
good to about 0.03 ms per run. Compare trees by running this script from each tree's
virtualenv in alternation (A/B interleaved), as in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import time
from typing import Any

from kernelgate import Gateway

TICK = os.sysconf("SC_CLK_TCK")


def tree(gw: Any) -> tuple[float, float, int, int]:
    """The zygote's CPU ms, its reaped children's CPU ms, and both their minor faults."""
    zygote = gw._pool._zygote
    with open(f"/proc/{zygote.pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # After the ")": minflt cminflt are fields 10 and 11 of stat(5), at 7 and 8 here;
    # utime stime cutime cstime are 14-17, at 11-14.
    own = (int(fields[11]) + int(fields[12])) * 1e3 / TICK
    children = (int(fields[13]) + int(fields[14])) * 1e3 / TICK
    return own, children, int(fields[7]), int(fields[8])


def machine_ms() -> float:
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + fields[4]
    return (sum(fields[:8]) - idle) * 1e3 / TICK


def host_ms() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return (ru.ru_utime + ru.ru_stime) * 1e3


async def measure(runs: int, concurrency: int, pool: int) -> dict[str, float]:
    async with Gateway(bindings={"noop": lambda: None}, pool_size=pool) as gw:
        for _ in range(20):
            await gw.run("print('hello')")
        await gw.wait_finished()
        await asyncio.sleep(0.5)
        left = runs

        async def worker() -> None:
            nonlocal left
            while left > 0:
                left -= 1
                r = await gw.run("print('hello')")
                if not r.ok:
                    raise RuntimeError(f"run failed: {r.status}: {r.error}")

        z0, h0, m0, t0 = tree(gw), host_ms(), machine_ms(), time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        await gw.wait_finished()
        t1 = time.perf_counter()
        z1, h1, m1 = tree(gw), host_ms(), machine_ms()
    out = {
        "zygote_ms": (z1[0] - z0[0]) / runs,
        "children_ms": (z1[1] - z0[1]) / runs,
        "zygote_faults": (z1[2] - z0[2]) / runs,
        "children_faults": (z1[3] - z0[3]) / runs,
        "host_ms": (h1 - h0) / runs,
        "machine_ms": (m1 - m0) / runs,
        "runs_per_s": runs / (t1 - t0),
    }
    out["tree_ms"] = out["zygote_ms"] + out["children_ms"]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=400)
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--pool", type=int, default=2)
    parser.add_argument("--json", action="store_true", help="one JSON line instead of a table")
    args = parser.parse_args()
    out = asyncio.run(measure(args.runs, args.concurrency, args.pool))
    if args.json:
        print(json.dumps({k: round(v, 3) for k, v in out.items()}))
        return
    load = os.getloadavg()[0]
    print(f"per warm run ({args.runs} runs, {args.concurrency} in flight, load {load:.1f})")
    for key, value in out.items():
        print(f"  {key:16s} {value:9.3f}")


if __name__ == "__main__":
    main()
