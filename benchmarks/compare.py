#!/usr/bin/env python3
"""Two versions of kernelgate side by side in one run: what a change costs a warm and a cold run.

    python benchmarks/compare.py --before 880633a [--after WORKTREE|REV] [--rounds 5] [--runs 40]

Each version runs in its own process from its own checkout (``git worktree`` of the revision
in a temporary directory; the working tree itself for ``--after`` by default). Rounds
alternate between the versions so that both see the same machine; every row is the median
over all rounds of ``run()`` called to returned, measured in the measuring process:

* ``warm hello``: ``print('hello')`` on a gateway with a warm pool (one run at a time, the
  refill done before each run);
* ``warm 1 call``: one binding call, same gateway;
* ``cold hello``: ``pool_size=0`` (a fresh interpreter per run);
* ``call, sync`` / ``call, async`` / ``call, inline``: one binding call's round trip, timed
  inside the child over 200 sequential calls, to a plain function, a coroutine function, and
  a plain function marked ``kernelgate.inline`` (a plain one in versions without it).

Standard library only; every child is real.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Runs inside each checkout: prints {"row": [seconds, ...]} as JSON.
_MEASURE = r"""
import asyncio, json, sys, time
import kernelgate
from kernelgate import Gateway, Limits

def add(a: int, b: int) -> int:
    return a + b

async def aadd(a: int, b: int) -> int:
    return a + b

def iadd(a: int, b: int) -> int:
    return a + b

inline = getattr(kernelgate, "inline", None)  # older versions: a plain sync binding
if inline is not None:
    iadd = inline(iadd)

SEQUENTIAL = (
    "import time\nt = time.perf_counter()\nfor i in range(200):\n"
    "    await tools.NAME(i, 1)\nreturn (time.perf_counter() - t) / 200\n"
)

# name: (pool_size, program, what is measured: run() latency, or the program's own figure)
CASES = {
    "warm hello": (4, "print('hello')", "latency"),
    "warm 1 call": (4, "return await tools.add(1, 2)", "latency"),
    "cold hello": (0, "print('hello')", "latency"),
    "call, sync": (4, SEQUENTIAL.replace("NAME", "add"), "inside"),
    "call, async": (4, SEQUENTIAL.replace("NAME", "aadd"), "inside"),
    "call, inline": (4, SEQUENTIAL.replace("NAME", "iadd"), "inside"),
}

async def settle(gw):
    pool = getattr(gw, "_pool", None)
    filler = getattr(pool, "_filler", None)
    if filler is not None:
        await asyncio.shield(filler)
    await gw.wait_finished()

async def main(runs):
    out = {}
    bindings = {"add": add, "aadd": aadd, "iadd": iadd}
    for name, (pool_size, program, kind) in CASES.items():
        async with Gateway(bindings=bindings, pool_size=pool_size,
                           limits=Limits(wall_seconds=30)) as gw:
            for _ in range(3):  # warm-up: the pool, the probe, the first imports
                assert (await gw.run(program)).ok
                await settle(gw)
            times = []
            for _ in range(runs if kind == "latency" else max(3, runs // 8)):
                t0 = time.perf_counter()
                r = await gw.run(program)
                elapsed = time.perf_counter() - t0
                assert r.ok, r.message
                times.append(elapsed if kind == "latency" else r.value)
                await settle(gw)
            out[name] = times
    print(json.dumps(out))

asyncio.run(main(int(sys.argv[1])))
"""


def _checkout(rev: str, into: str) -> str:
    subprocess.run(
        ["git", "-C", REPO, "worktree", "add", "--detach", "-q", into, rev], check=True
    )
    return into


def _measure(tree: str, runs: int) -> dict[str, list[float]]:
    env = {**os.environ, "PYTHONPATH": tree}
    out = subprocess.run(
        [sys.executable, "-c", _MEASURE, str(runs)],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if out.returncode != 0:
        raise SystemExit(f"measuring {tree} failed:\n{out.stderr[-3000:]}")
    result: dict[str, list[float]] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--before", required=True, help="the older revision (e.g. a commit)")
    ap.add_argument("--after", default=None, help="a revision (default: this working tree)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--runs", type=int, default=40, help="runs per case and round")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="kg-compare-")
    trees: dict[str, str] = {}
    try:
        trees[f"before ({args.before})"] = _checkout(args.before, os.path.join(tmp, "before"))
        trees[f"after ({args.after or 'working tree'})"] = (
            _checkout(args.after, os.path.join(tmp, "after")) if args.after else REPO
        )
        samples: dict[str, dict[str, list[float]]] = {name: {} for name in trees}
        for i in range(args.rounds):
            order = list(trees.items()) if i % 2 == 0 else list(reversed(trees.items()))
            for name, tree in order:
                for case, times in _measure(tree, args.runs).items():
                    samples[name].setdefault(case, []).extend(times)
        cases = list(next(iter(samples.values())))
        names = list(trees)
        print(f"median ms over {args.rounds} rounds (x {args.runs} runs for latencies)")
        print(f"{'case':<14}" + "".join(f"{n:>28}" for n in names) + f"{'change':>10}")
        for case in cases:
            medians = [statistics.median(samples[n][case]) * 1000 for n in names]
            change = (medians[1] - medians[0]) / medians[0] * 100
            print(
                f"{case:<14}"
                + "".join(f"{m:>28.2f}" for m in medians)
                + f"{change:>+9.1f}%"
            )
    finally:
        for tree in trees.values():
            if tree != REPO:
                subprocess.run(
                    ["git", "-C", REPO, "worktree", "remove", "--force", tree], check=False
                )
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
