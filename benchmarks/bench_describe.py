#!/usr/bin/env python3
"""What a model's description costs the host, and the search over bindings, by their number.

    python benchmarks/bench_describe.py [--sizes 10 100 1000] [--rounds 7] [--cpu] [--json]

For gateways of 10, 100 and 1,000 bindings (several namespaces; each binding a typed Python
function with a docstring and an ``Args:`` section, and a tenth of them with an MCP-style
JSON Schema naming types in ``$defs``), rows (median over rounds, milliseconds unless they
say ``us``):

* ``describe() first``: the stub on a new gateway (``describe_json`` of every binding and
  the render; made once per gateway, then cached);
* ``describe() again``: the cached stub (microseconds);
* ``describe(typescript)``: the TypeScript declarations (not cached);
* ``tool_schema(budget)``: the ``run_code`` tool with ``max_description_chars=1024``;
* ``search index``: building the BM25 index (once per gateway, on the first search);
* ``search``: one ``search_bindings`` query once the index is built (microseconds);
* ``search_tools``: one search answered as the stub of its 5 best matches;

and the sizes: the stub's characters, and the description within the budget. No child
process is started: describing and searching happen on the host. Standard library and
kernelgate only; docs/benchmarks.md has the figures.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

from kernelgate import Gateway, input_schema

VERBS = "create list get update delete close search archive export import".split()
NOUNS = (
    "issue label comment user repository branch commit release invoice payment customer "
    "order shipment ticket calendar event meeting message channel file folder document "
    "report metric alert incident deploy build test secret token"
).split()
QUERIES = ["close incident", "export shipment report", "archive invoice", "new message"]

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"item": {"$ref": "#/$defs/Item"}, "state": {"$ref": "#/$defs/State"}},
    "required": ["item"],
    "$defs": {
        "Item": {
            "type": "object",
            "title": "Item",
            "properties": {"id": {"type": "integer"}, "title": {"type": "string"}},
            "required": ["id"],
        },
        "State": {"enum": ["open", "closed"]},
    },
}


def bindings(n: int) -> dict[str, dict[str, Callable[..., Any]]]:
    namespaces: dict[str, dict[str, Callable[..., Any]]] = {}
    for i in range(n):
        verb, noun = VERBS[i % len(VERBS)], NOUNS[(i // len(VERBS)) % len(NOUNS)]

        def fn(ident: str, limit: int = 10, note: str | None = None) -> list[dict[str, Any]]:
            return []

        fn.__doc__ = (
            f"{verb.capitalize()} {noun}s matching the id (variant {i}).\n\n"
            f"Args:\n    ident: The {noun}'s id.\n    limit: How many at most.\n"
        )
        if i % 10 == 9:
            fn = input_schema(SCHEMA)(lambda item, state="open": item)
            fn.__doc__ = f"{verb.capitalize()} an item of {noun} (variant {i})."
        namespaces.setdefault(f"svc{i % 8}", {})[f"{verb}_{noun}_{i}"] = fn
    return namespaces


#: The clock: perf_counter, or process_time with --cpu (this process's CPU time, which a
#: busy machine disturbs much less).
clock = time.perf_counter


def timed(fn: Callable[[], Any], rounds: int, inner: int = 1) -> float:
    """Median milliseconds of ``fn`` over ``rounds`` (each the mean of ``inner`` calls)."""
    samples = []
    for _ in range(rounds):
        t0 = clock()
        for _ in range(inner):
            fn()
        samples.append((clock() - t0) / inner * 1000)
    return statistics.median(samples)


def measure(n: int, rounds: int) -> dict[str, float]:
    namespaces = bindings(n)
    row: dict[str, float] = {}
    row["describe() first"] = timed(lambda: Gateway(namespaces=namespaces).describe(), rounds)
    gw = Gateway(namespaces=namespaces, sandbox="namespaces")
    gw.describe()
    row["describe() again us"] = timed(gw.describe, rounds, 1000) * 1000
    row["describe(typescript)"] = timed(lambda: gw.describe("typescript"), rounds)
    gw.run_rules()  # the sandbox probe, once per interpreter: not what is measured
    row["tool_schema(budget)"] = timed(lambda: gw.tool_schema(max_description_chars=1024), rounds)

    def index() -> None:
        gw._discovery._index = None  # built again on the next search
        gw.search_bindings("x")

    row["search index"] = timed(index, rounds)
    gw.search_bindings("warm")
    row["search us"] = (
        1000 * timed(lambda: [gw.search_bindings(q) for q in QUERIES], rounds, 20) / len(QUERIES)
    )
    row["search_tools"] = timed(lambda: gw.search_tools(QUERIES[0]), rounds, 5)
    row["stub chars"] = len(gw.describe())
    row["budgeted chars"] = len(gw.tool_schema(max_description_chars=1024)["description"])
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10, 100, 1000])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--json", action="store_true", help="print the rows as JSON too")
    parser.add_argument("--cpu", action="store_true", help="time with process_time")
    args = parser.parse_args()
    global clock
    if args.cpu:
        clock = time.process_time
    rows = {n: measure(n, args.rounds) for n in args.sizes}
    names = list(next(iter(rows.values())))
    print("| row | " + " | ".join(f"{n} bindings" for n in args.sizes) + " |")
    print("| --- |" + " ---: |" * len(args.sizes))
    for name in names:
        unit = "" if name.endswith((" us", "chars")) else " ms"
        cells = [
            f"{rows[n][name]:,.0f}" if "chars" in name else f"{rows[n][name]:.3f}"
            for n in args.sizes
        ]
        print(f"| {name}{unit} | " + " | ".join(cells) + " |")
    if args.json:
        print(json.dumps({str(n): r for n, r in rows.items()}, indent=1))


if __name__ == "__main__":
    main()
