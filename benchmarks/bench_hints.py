#!/usr/bin/env python3
"""The host's cost per binding call of enforcing type hints (kernelgate.gateway.typecheck).

    python benchmarks/bench_hints.py [--rounds 15] [--calls 2000]

Rows (median over rounds, microseconds per call):

* ``signature only``: ``Binding.check_arguments`` (what a call cost before hints were
  enforced) for ``add(a: int, b: int) -> int``;
* ``hints, ints``: ``load_arguments`` + ``dump_result`` for the same binding;
* ``hints, unannotated``: the same for ``add(a, b)`` (nothing to check);
* ``hints, rich``: a dataclass, a date and an Enum in, a dataclass out;
* ``end to end``: a program making ``--calls`` calls of ``add`` through a real Gateway
  (cold child, ``process`` level), per call: what a program sees.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import enum
import statistics
import time
from collections.abc import Callable
from typing import Any

from kernelgate import Gateway, Limits
from kernelgate.gateway.bindings import BindingRegistry


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


@dataclasses.dataclass
class Point:
    x: int
    y: int = 0


def add(a: int, b: int) -> int:
    return a + b


def add_plain(a, b):  # type: ignore[no-untyped-def]
    return a + b


def draw(p: Point, when: datetime.date, color: Color) -> Point:
    return p


def _timed(fn: Callable[[], Any], n: int) -> float:
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t0) / n


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--calls", type=int, default=2000)
    args = ap.parse_args()
    reg = BindingRegistry({"tools": {"add": add, "plain": add_plain, "draw": draw}})
    typed, plain, rich = (reg.lookup("tools", n) for n in ("add", "plain", "draw"))
    assert typed is not None and plain is not None and rich is not None
    n = 50_000

    def both(b: Any, a: list[Any]) -> Callable[[], Any]:
        def call() -> Any:
            x, _k = b.load_arguments(a, {})
            return b.dump_result(x[0] if b is rich else 3)

        return call

    rows = {
        "signature only": [_timed(lambda: typed.check_arguments([1, 2], {}), n)],
        "hints, ints": [_timed(both(typed, [1, 2]), n)],
        "hints, unannotated": [_timed(both(plain, [1, 2]), n)],
        "hints, rich": [_timed(both(rich, [{"x": 1, "y": 2}, "2024-01-02", "red"]), n // 5)],
    }
    for _ in range(args.rounds - 1):
        rows["signature only"].append(_timed(lambda: typed.check_arguments([1, 2], {}), n))
        rows["hints, ints"].append(_timed(both(typed, [1, 2]), n))
        rows["hints, unannotated"].append(_timed(both(plain, [1, 2]), n))
        rows["hints, rich"].append(
            _timed(both(rich, [{"x": 1, "y": 2}, "2024-01-02", "red"]), n // 5)
        )
    program = f"for i in range({args.calls}):\n    await tools.add(i, 1)"
    with Gateway(bindings={"add": add}, limits=Limits(wall_seconds=120), pool_size=0) as gw:
        gw.run_sync("0")
        ends = []
        for _ in range(max(3, args.rounds // 3)):
            t0 = time.perf_counter()
            r = gw.run_sync(program)
            assert r.ok, r.error
            ends.append((time.perf_counter() - t0) / args.calls)
    rows["end to end"] = ends
    for name, samples in rows.items():
        print(f"{name:22s} {statistics.median(samples) * 1e6:8.2f} us")


if __name__ == "__main__":
    main()
