#!/usr/bin/env python3
"""What the sandbox's pieces cost, each measured alone (medians of repeated rounds).

    python benchmarks/bench_sandbox.py [--rounds 9]

* the seccomp filter: building a program, installing it in a fresh fork, and the time a
  system call (``getpid``) takes without and with it, side by side in the same fork;
* the output sanitiser: ``sanitize_output`` of a 108 KiB ``text/html`` table and of a
  ``text/plain`` output, next to ``json.dumps`` of the same output as a floor;
* the host's signature check of one call (plain signature, and ``Signature.bind``).

Standard library and kernelgate only; every fork is real.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

from kernelgate.gateway.bindings import BindingRegistry  # noqa: E402
from kernelgate.gateway.sanitize import sanitize_output  # noqa: E402
from kernelgate.kernels.python import seccomp  # noqa: E402


def _seccomp_round(level: str, calls: int) -> dict[str, float]:
    """One fork: getpid without the filter, install it, getpid with it."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the measuring fork
        os.close(r)
        t = time.perf_counter()
        for _ in range(calls):
            os.getpid()
        before = (time.perf_counter() - t) / calls
        t = time.perf_counter()
        seccomp.apply(level)
        applied = time.perf_counter() - t
        t = time.perf_counter()
        for _ in range(calls):
            os.getpid()
        after = (time.perf_counter() - t) / calls
        os.write(w, json.dumps({"apply": applied, "before": before, "after": after}).encode())
        os._exit(0)
    os.close(w)
    data = b""
    while chunk := os.read(r, 4096):
        data += chunk
    os.close(r)
    os.waitpid(pid, 0)
    result: dict[str, float] = json.loads(data)
    return result


def _timed(fn: object, n: int) -> float:
    t = time.perf_counter()
    for _ in range(n):
        fn()  # type: ignore[operator]
    return (time.perf_counter() - t) / n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=9)
    args = ap.parse_args()
    level = "namespaces+landlock"

    builds = []
    for _ in range(args.rounds):
        seccomp._built.clear()  # build() caches: measure a fresh build each round
        t = time.perf_counter()
        seccomp.build(level)
        builds.append(time.perf_counter() - t)
    seccomp.warm()
    rounds = [_seccomp_round(level, 200_000) for _ in range(args.rounds)]

    row = "<tr><td><b>{0}</b></td><td style='color:red'>{0}</td><td><code>x &lt; y</code></td></tr>"
    html = f"<table>{''.join(row.format(i) for i in range(1250))}</table>"
    rich = {
        "output_type": "display_data",
        "data": {"text/html": html, "text/plain": "t"},
        "metadata": {},
    }
    plain = {"output_type": "display_data", "data": {"text/plain": "x" * 1000}, "metadata": {}}
    sanitize_output(rich)  # the cleaner is built once
    san_html = [_timed(lambda: sanitize_output(rich), 10) for _ in range(args.rounds)]
    san_plain = [_timed(lambda: sanitize_output(plain), 2000) for _ in range(args.rounds)]
    dumps = [_timed(lambda: json.dumps(rich), 10) for _ in range(args.rounds)]

    def search(query: str, limit: int = 5) -> list[str]:
        return []

    def star(*args: int) -> int:
        return 0

    reg = BindingRegistry({"tools": {"search": search, "star": star}})
    simple, bound = reg.lookup("tools", "search"), reg.lookup("tools", "star")
    assert simple is not None and bound is not None
    check_simple = [
        _timed(lambda: simple.check_arguments(["q"], {"limit": 3}), 100_000)
        for _ in range(args.rounds)
    ]
    check_bind = [
        _timed(lambda: bound.check_arguments([1, 2], {}), 100_000) for _ in range(args.rounds)
    ]

    med = statistics.median
    us, ns, ms = 1e6, 1e9, 1e3
    print(f"medians of {args.rounds} rounds, Python {sys.version.split()[0]}, {os.uname().machine}")
    print(f"seccomp: build one program            {med(builds) * ms:8.3f} ms")
    print(f"seccomp: install in a fork            {med(r['apply'] for r in rounds) * ms:8.3f} ms")
    print(
        f"seccomp: getpid without / with        {med(r['before'] for r in rounds) * ns:8.0f} ns"
        f" / {med(r['after'] for r in rounds) * ns:.0f} ns"
    )
    print(
        f"sanitize_output: {len(html) / 1024:.0f} KiB text/html      "
        f"{med(san_html) * ms:8.3f} ms   (json.dumps of it: {med(dumps) * ms:.3f} ms)"
    )
    print(f"sanitize_output: 1 KB text/plain      {med(san_plain) * us:8.2f} us")
    print(f"signature check: plain signature      {med(check_simple) * us:8.2f} us")
    print(f"signature check: Signature.bind       {med(check_bind) * us:8.2f} us")


if __name__ == "__main__":
    main()
