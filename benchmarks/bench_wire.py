#!/usr/bin/env python3
"""The wire's own cost per binding call, sans-I/O: no processes, no sockets, no event loop.

    python benchmarks/bench_wire.py [--calls 2000] [--rounds 15] [--cpu] [--json]
    PYTHONPATH=/path/to/other/checkout python benchmarks/bench_wire.py   # another version

One *call* is what both ends do for a binding call: the child encodes a ``CallRequest``, the
host decodes it, encodes the ``CallReply``, the child decodes that (four Jupyter messages).
Rows (median over rounds of the mean per call, in microseconds):

* ``call round trip``: a small call (``add(i, 1)``) and its reply, both sides, as full
  Jupyter messages;
* ``compact round trip``: the same after the agreement on compact call frames (every call
  of a real run but its first), with ``compact host decode call`` and
  ``compact child decode reply`` (a version without compact frames skips these rows);
* ``host decode call``: the host's share of receiving it (``receive_data`` + ``next_event``);
* ``child decode reply``: the child's share of receiving the reply;
* ``stream frame``: the child encodes one ``Stream`` and the host decodes it;
* ``events made``: constructing ``CallRequest`` + ``CallReply`` alone (validation).

``--cpu`` times with ``time.process_time`` instead of ``perf_counter``: this process's CPU
time, which other processes on a busy machine disturb much less than the wall clock.
Standard library only. Compare two versions by running this file once with each on
``PYTHONPATH`` (it imports ``kernelgate`` from there); docs/benchmarks.md has the figures.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

from kernelgate.wire import (
    CHILD,
    HOST,
    CallReply,
    CallRequest,
    Connection,
    ExecuteRequest,
    OpenBindings,
    Stream,
)

SPECS = {"tools": {"add": {"params": [["a", "POSITIONAL_OR_KEYWORD", False]], "signature": "(a)"}}}


def pair(compact: bool = False) -> tuple[Connection, Connection]:
    """A host that sent OpenBindings and ExecuteRequest, and a child that received them;
    with ``compact``, they also agreed on compact call frames (call 0, answered)."""
    kw: dict[str, Any] = {"compact": True} if compact else {}
    host = Connection(HOST, session="bench-host", **kw)
    child = Connection(CHILD, session="bench-child", **kw)
    for event in (OpenBindings("bindings-bench", SPECS), ExecuteRequest("pass", {})):
        child.receive_data(host.send(event))
    while child.next_event() is not None:
        pass
    if compact:
        host.receive_data(child.send(CallRequest(0, "tools", "add", [0, 1], {})))
        host.next_event()
        child.receive_data(host.send(CallReply(0, True, 1)))
        child.next_event()
    return host, child


def compact_round_trips(n: int) -> dict[str, float]:
    rows = round_trips(n, compact=True)
    return {
        f"compact {k}" if k != "call round trip" else "compact round trip": v
        for k, v in rows.items()
    }


def has_compact() -> bool:
    try:
        Connection(HOST, session="probe", compact=True)  # type: ignore[call-arg]
    except TypeError:
        return False
    return True


#: The clock: perf_counter, or process_time with --cpu.
clock = time.perf_counter


def round_trips(n: int, compact: bool = False) -> dict[str, float]:
    host, child = pair(compact)
    host_decode = child_decode = 0.0
    pc = clock
    t0 = pc()
    for i in range(n):
        frame = child.send(CallRequest(child.next_call_id, "tools", "add", [i, 1], {}))
        t = pc()
        host.receive_data(frame)
        request = host.next_event()
        host_decode += pc() - t
        assert type(request) is CallRequest
        reply = host.send(CallReply(request.call_id, True, i + 1))
        t = pc()
        child.receive_data(reply)
        answer = child.next_event()
        child_decode += pc() - t
        assert type(answer) is CallReply
    total = pc() - t0
    return {
        "call round trip": total / n * 1e6,
        "host decode call": host_decode / n * 1e6,
        "child decode reply": child_decode / n * 1e6,
    }


def streams(n: int) -> dict[str, float]:
    host, child = pair()
    pc = clock
    t0 = pc()
    for _ in range(n):
        host.receive_data(child.send(Stream("stdout", "a line of output\n")))
        host.next_event()
    return {"stream frame": (pc() - t0) / n * 1e6}


def events(n: int) -> dict[str, float]:
    pc = clock
    args: list[Any] = [1, 1]
    kwargs: dict[str, Any] = {}
    t0 = pc()
    for i in range(n):
        CallRequest(i, "tools", "add", args, kwargs)
        CallReply(i, True, i)
    return {"events made": (pc() - t0) / n * 1e6}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--calls", type=int, default=2000, help="calls per round")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--cpu", action="store_true", help="time CPU (process_time), not wall")
    ap.add_argument("--json", action="store_true", help="print the samples as JSON too")
    args = ap.parse_args()
    global clock
    if args.cpu:
        clock = time.process_time
    benches: list[Callable[[int], dict[str, float]]] = [round_trips, streams, events]
    if has_compact():
        benches.insert(1, compact_round_trips)
    for bench in benches:  # warm-up: imports, first code paths
        bench(200)
    samples: dict[str, list[float]] = {}
    for _ in range(args.rounds):
        for bench in benches:
            for row, value in bench(args.calls).items():
                samples.setdefault(row, []).append(value)
    print(f"median us per operation over {args.rounds} rounds of {args.calls}")
    for row, values in samples.items():
        print(f"{row:<20}{statistics.median(values):>10.2f}")
    if args.json:
        print(json.dumps(samples))


if __name__ == "__main__":
    main()
