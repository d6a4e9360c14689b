#!/usr/bin/env python3
"""What a debugged run costs a hot loop: the debugger's two backends side by side.

    python benchmarks/bench_debug.py [--reps 5] [--n 1000000] [--minors 11,12,13]

The program runs a loop of ``--n`` turns in a function that holds a breakpoint on a line it
never reaches (the common case of a breakpoint set "further down"), and again with the
breakpoint in another function. Each row is the median, over ``--reps`` fresh children, of the
loop's own time (``time.perf_counter`` around it, inside the child), for: the run undebugged,
the ``sys.settrace`` backend (forced with ``options["debug"]["tracer"] = "settrace"`` on 3.12
and later, the only one before), and the ``sys.monitoring`` backend (3.12 and later). Rounds
alternate between the cases so that all see the same machine. Every child is real (the
tests' ``DebugChild``: ``python -I -c LOADER`` with fd 3, the gateway's spawn); figures are in
docs/benchmarks.md, "What the debugger cost".
"""

from __future__ import annotations

import argparse
import glob
import os
import statistics
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

from tests.kernels.debugchild import DebugChild  # noqa: E402  (after the path above)

PROGRAM = """\
import time
def work(n):
    total = 0
    for i in range(n):
        total += i
        if i < 0:
            total = -1
    return total
def elsewhere():
    return 0
t0 = time.perf_counter()
work(N)
print(time.perf_counter() - t0)
"""
IN_LOOP, ELSEWHERE = 7, 10  # never reached: a line of the loop's function; of another one


def python(minor: int) -> str | None:
    found = sorted(glob.glob(f"/root/.pyenv/versions/3.{minor}.*/bin/python3.{minor}"))
    found += [p for p in (f"/usr/bin/python3.{minor}",) if os.path.exists(p)]
    return found[-1] if found else None


def once(py: str, n: int, debug: dict | bool) -> float:
    child = DebugChild(PROGRAM.replace("N", str(n)), python=py, debug=debug)
    try:
        reply = child.wait_done(timeout=300)
        assert reply.status == "ok", (reply, child.stderr)
        assert not child.stops(), child.stops()
        return float(child.stdout.split()[0])
    finally:
        child.close()


def cases(minor: int) -> list[tuple[str, dict | bool]]:
    rows: list[tuple[str, dict | bool]] = [("undebugged", False)]
    for where, line in (("in the loop's function", IN_LOOP), ("in another function", ELSEWHERE)):
        bps = [{"line": line}]
        rows.append((f"settrace, breakpoint {where}", {"breakpoints": bps, "tracer": "settrace"}))
        if minor >= 12:
            rows.append((f"sys.monitoring, breakpoint {where}", {"breakpoints": bps}))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--minors", default="11,12,13")
    args = parser.parse_args()
    print(f"load average at the start: {os.getloadavg()[0]:.2f}")
    print(f"\n| Python | case | loop of {args.n:,} turns (median of {args.reps}) | vs undebugged |")
    print("| --- | --- | --- | --- |")
    for minor in (int(m) for m in args.minors.split(",")):
        py = python(minor)
        if py is None:
            print(f"| 3.{minor} | not installed here | | |")
            continue
        rows = cases(minor)
        times: dict[str, list[float]] = {name: [] for name, _ in rows}
        for _ in range(args.reps):
            for name, debug in rows:
                times[name].append(once(py, args.n, debug))
        base = statistics.median(times["undebugged"])
        for name, _ in rows:
            t = statistics.median(times[name])
            print(f"| 3.{minor} | {name} | {t * 1000:.1f} ms | x{t / base:.2f} |")
    print(f"\nload average at the end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
