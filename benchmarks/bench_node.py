"""TypeScript runs (issue 20) next to their floors and the Python runs, at each level.

    python benchmarks/bench_node.py               # 11 rounds
    python benchmarks/bench_node.py --reps 25 --json out.json

One table of medians (ms). Every row is measured once per round, the rows of a round one
after another with a quiet gap before each (so a pool has refilled and its new child has
booted), so the peers share the machine's state. Rows:

- floors: ``node -e 0`` (spawn, start, exit, reaped); the Node kernel started bare
  (``node kernel.js`` with fd 3 at EOF: Node's start plus loading the kernel, which then
  exits); the launcher at a level exec'ing ``node -e 0`` (``python -I -S`` start, the
  sandbox, Node's start); the host's transform of a small TypeScript program
  (``ProgramTransformer``, its helper warm);
- kernelgate, per level: a TypeScript run cold (``pool_size=0``) and pooled
  (``pool_size=1``, its child started ahead) of ``1 + 1``; a pooled run with one binding
  call; the call round trip as the program times it (200 sequential ``await
  tools.add``); and the same for Python (cold and warm, one call, round trip).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kernelgate import Gateway, Limits  # noqa: E402
from kernelgate.gateway.jsprogram import ProgramTransformer  # noqa: E402
from kernelgate.gateway.launch import probe_node, spawn_launched_child  # noqa: E402
from kernelgate.gateway.process import make_run_dir, remove_tree  # noqa: E402
from kernelgate.gateway.runids import allocate_ids  # noqa: E402
from kernelgate.gateway.sandbox import LEVELS, plan_sandbox, probe_support  # noqa: E402
from kernelgate.kernels.node import KERNEL_JS  # noqa: E402

GAP = 0.4  # seconds of quiet before each sample
CALLS = 200
TS_CALLS = (
    f"const t0 = performance.now();\nfor (let i = 0; i < {CALLS}; i++) await tools.add(i, 1);\n"
    f"(performance.now() - t0) / {CALLS}"
)
PY_CALLS = (
    f"import time\nt0 = time.perf_counter()\nfor i in range({CALLS}):\n"
    f"    await tools.add(i, 1)\n(time.perf_counter() - t0) * 1000 / {CALLS}"
)
TS_SMALL = "interface P { a: number }\nconst p: P = { a: 1 };\np.a + 1\n"


def add(a: int, b: int) -> int:
    return a + b


def wall(fn: Callable[[], Any]) -> float:
    t = time.perf_counter()
    fn()
    return (time.perf_counter() - t) * 1000


def spawned(argv: list[str], fd3: int | None = None) -> float:
    """posix_spawn (as kernelgate starts its children) to reaped exit, in ms."""
    actions: list[tuple[Any, ...]] = [(os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0)]
    if fd3 is not None:
        actions.append((os.POSIX_SPAWN_DUP2, fd3, 3))
    t = time.perf_counter()
    pid = os.posix_spawn(argv[0], argv, {"PATH": "/usr/bin:/bin"}, file_actions=actions)
    os.waitpid(pid, 0)
    return (time.perf_counter() - t) * 1000


def node_e0(node: str) -> float:
    return spawned([node, "-e", "0"])


def kernel_bare(node: str) -> float:
    """Node's start plus the kernel's load: fd 3 is a socket at EOF, so the kernel exits
    on its first read."""
    ours, theirs = socket.socketpair()
    ours.close()
    try:
        return spawned([node, "--openssl-config=/dev/null", KERNEL_JS], theirs.fileno())
    finally:
        theirs.close()


def launched_e0(level: str, base: str) -> float:
    """The launcher at ``level`` exec'ing ``node -e 0``: until it is reaped."""
    install = probe_node("node")
    support = probe_support(sys.executable)
    plan = plan_sandbox(level, Limits(), support)
    ids = allocate_ids()
    run_dir = make_run_dir(base, "bench", ids)
    try:
        t = time.perf_counter()
        child = spawn_launched_child(
            sys.executable,
            {"PATH": "/usr/bin:/bin"},
            run_dir,
            plan.child_options(ids),
            install.command(["-e", "0"]),
        )
        os.waitpid(child.pid, 0)
        took = (time.perf_counter() - t) * 1000
        child.reaped = True
        child.close()
        return took
    finally:
        remove_tree(run_dir)
        if ids is not None:
            ids.release()


async def main(reps: int, levels: list[str], out: str | None) -> None:
    base = os.environ.get("TMPDIR", "/tmp")
    node = probe_node("node").executable
    rows: dict[str, list[float]] = {}
    samples: list[tuple[str, Callable[[], Awaitable[float]]]] = []
    gateways: list[Gateway] = []
    transformer = ProgramTransformer(node)
    await transformer.transform(TS_SMALL, "typescript")

    def gw(language: str, level: str, pool: int) -> Gateway:
        made = Gateway(
            language=language,
            sandbox=level,
            pool_size=pool,
            bindings={"add": add},
            limits=Limits(wall_seconds=60),
            tmp_dir=base,
        )
        gateways.append(made)
        return made

    async def timed(g: Gateway, code: str, want_warm: bool | None) -> float:
        t = time.perf_counter()
        result = await g.run(code)
        took = (time.perf_counter() - t) * 1000
        assert result.status == "ok", (result.status, result.error)
        if want_warm is not None and bool(result.usage.get("warm")) != want_warm:
            return float("nan")  # the pool had no child ready: not this row's case
        return took

    async def inside(g: Gateway, code: str) -> float:
        result = await g.run(code)
        assert result.status == "ok", (result.status, result.error)
        return float(result.value)

    async def in_thread(fn: Callable[[], float]) -> float:
        return await asyncio.to_thread(fn)

    async def strip() -> float:
        t = time.perf_counter()
        await transformer.transform(TS_SMALL, "typescript")
        return (time.perf_counter() - t) * 1000

    samples += [
        ("floor: node -e 0", lambda: in_thread(lambda: node_e0(node))),
        (
            "floor: node kernel.js (start + kernel load, exits at EOF)",
            lambda: in_thread(lambda: kernel_bare(node)),
        ),
        ("floor: transform of a 3-line TypeScript program (helper warm)", strip),
    ]
    for level in levels:
        ts_cold, ts_pool = gw("typescript", level, 0), gw("typescript", level, 1)
        py_cold, py_warm = gw("python", level, 0), gw("python", level, 1)
        samples += [
            (
                f"{level}: floor: launcher + node -e 0",
                lambda lv=level: in_thread(lambda: launched_e0(lv, base)),
            ),
            (f"{level}: TypeScript run, cold", lambda g=ts_cold: timed(g, "1 + 1", None)),
            (f"{level}: TypeScript run, pooled", lambda g=ts_pool: timed(g, "1 + 1", True)),
            (
                f"{level}: TypeScript run with a call, pooled",
                lambda g=ts_pool: timed(g, "await tools.add(1, 2)", True),
            ),
            (
                f"{level}: TypeScript call round trip (in the program)",
                lambda g=ts_pool: inside(g, TS_CALLS),
            ),
            (f"{level}: Python run, cold", lambda g=py_cold: timed(g, "1 + 1", None)),
            (f"{level}: Python run, warm", lambda g=py_warm: timed(g, "1 + 1", True)),
            (
                f"{level}: Python run with a call, warm",
                lambda g=py_warm: timed(g, "await tools.add(1, 2)", True),
            ),
            (
                f"{level}: Python call round trip (in the program)",
                lambda g=py_warm: inside(g, PY_CALLS),
            ),
        ]
    try:
        # One round to start the pools and warm every path, not counted.
        for _, sample in samples:
            await asyncio.sleep(GAP)
            await sample()
        for rep in range(reps):
            print(f"round {rep + 1}/{reps}", file=sys.stderr)
            for name, sample in samples:
                await asyncio.sleep(GAP)
                rows.setdefault(name, []).append(await sample())
    finally:
        for g in gateways:
            await g.aclose()
        await transformer.aclose()
    load = os.getloadavg()
    print(f"\n{reps} rounds, medians in ms; load average at the end {load[0]:.2f}\n")
    print("| row | median ms | min | max | n |\n| --- | ---: | ---: | ---: | ---: |")
    for name, values in rows.items():
        good = [v for v in values if v == v]
        if not good:
            print(f"| {name} | - | - | - | 0 |")
            continue
        unit = 1000 if "round trip" in name else 1
        med = statistics.median(good) * unit
        label = name + (" (us)" if unit == 1000 else "")
        low, high = min(good) * unit, max(good) * unit
        print(f"| {label} | {med:.1f} | {low:.1f} | {high:.1f} | {len(good)} |")
    if out:
        Path(out).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=11)
    parser.add_argument("--levels", nargs="*", default=None)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    support = probe_support(sys.executable)
    levels = args.levels or [lv for lv in LEVELS if not support.missing(lv)]
    asyncio.run(main(args.reps, levels, args.json))
