#!/usr/bin/env python3
"""Soak: many runs of normal and hostile programs against one Gateway, then a leak audit.

    python benchmarks/soak.py [--runs 10000] [--concurrency 8] [--pool-size N] [--json out.json]

The programs are a cheap mix: hello, binding calls, an exception, ``os._exit``, a segfault,
an output flood, garbage on fd 3, a short wall-clock timeout, forking past
``max_processes`` and a memory bomb. Every run's status and result (value, output, exit
code) are checked against what its program must end with. At the end (after
``Gateway.aclose()``) it reports:

* statuses counted per program, and every run that did not end as it must;
* leaked processes: live processes whose command line has this soak's marker, and live
  children of the soak process;
* leaked file descriptors of the soak process (after the warm-up vs after close);
* leaked run directories (a dedicated ``tmp_dir``);
* leftover per-run pids cgroups (``kernelgate-*`` of this soak's runs and pool under the pids
  cgroup root);
* the soak process's RSS at start, after the warm-up and at the end, and runs/s.

Exit status 0 when every run ended as expected and nothing leaked, else 1.
"""

from __future__ import annotations

import argparse
import array
import asyncio
import collections
import json
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

from kernelgate import Gateway, Limits, RunResult  # noqa: E402
from kernelgate.gateway.cgroups import CgroupRoots  # noqa: E402
from kernelgate.gateway.process import owner_prefix  # noqa: E402

MARKER = f"kg-soak-{os.getpid()}"
_FLOOD_LAST = "flood line 2999 " + "x" * 60 + "\n"
_CUT = re.compile(r"\[kernelgate: \d+ bytes \(\d+ lines\) of stdout cut here")

LIMITS = Limits(
    wall_seconds=10,
    kill_grace_seconds=0.3,
    cpu_seconds=5,
    memory_bytes=256 * 1024 * 1024,
    max_processes=8,
    max_output_bytes=16 * 1024,
)
SHORT_WALL = Limits(
    wall_seconds=0.5,
    kill_grace_seconds=0.2,
    cpu_seconds=5,
    memory_bytes=256 * 1024 * 1024,
    max_processes=8,
    max_output_bytes=16 * 1024,
)
SMALL_MEMORY = Limits(
    wall_seconds=10,
    kill_grace_seconds=0.3,
    cpu_seconds=5,
    memory_bytes=128 * 1024 * 1024,
    max_processes=8,
    max_output_bytes=16 * 1024,
)

_SLEEPER = f"subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)', {MARKER!r}])"

#: name -> (program, per-run limits or None, statuses it may end with, check of the result)
PROGRAMS: dict[str, tuple[str, Limits | None, tuple[str, ...], Callable[[RunResult], bool]]] = {
    "hello": ("print('hello')", None, ("ok",), lambda r: r.stdout == "hello\n"),
    "calls": (
        "import asyncio\nx = await tools.add(1, 2)\n"
        "ys = await asyncio.gather(*[tools.add(i, x) for i in range(5)])\n"
        "return [x, ys, await tools.echo('e', k=1)]",
        None,
        ("ok",),
        lambda r: (
            r.value == [3, [3, 4, 5, 6, 7], {"args": ["e"], "kwargs": {"k": 1}}]
            and len(r.calls) == 7
        ),
    ),
    # Sequential calls to a sync binding: from the second on, a chain's thread reads and
    # admits them (gateway/calls.py); every one recorded, in order.
    "chain": (
        "x = 0\nfor i in range(30):\n    x = await tools.add(x, i)\nreturn x",
        None,
        ("ok",),
        lambda r: r.value == 435 and [c.id for c in r.calls] == list(range(30)),
    ),
    "exception": (
        "print('about to fail')\nraise ValueError('planned')",
        None,
        ("exception",),
        lambda r: (
            r.error is not None and r.error.ename == "ValueError" and r.stdout == "about to fail\n"
        ),
    ),
    "os_exit": (
        "print('bye', flush=True)\nimport os\nos._exit(3)",
        None,
        ("worker_exit",),
        lambda r: r.exit_code == 3 and r.stdout == "bye\n",
    ),
    "segfault": (
        "import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)",
        None,
        ("worker_exit",),
        lambda r: r.signal == 11,
    ),
    "flood": (
        "for i in range(3000):\n    print('flood line', i, 'x' * 60)",
        None,
        ("ok",),
        # Head and tail kept, one marker between them saying what was cut (issue 21).
        lambda r: len(_CUT.findall(r.stdout)) == 1 and r.stdout.endswith(_FLOOD_LAST),
    ),
    "garbage": (
        "import os, time\nos.write(3, b'\\x00garbage on fd 3\\n')\ntime.sleep(30)",
        None,
        ("protocol",),
        lambda r: r.error is not None and "fd 3" in r.error.evalue,
    ),
    "wall": (
        "import time\nwhile True:\n    time.sleep(0.01)",
        SHORT_WALL,
        ("timeout",),
        lambda r: r.error is not None and "wall_seconds=0.5" in r.error.evalue,
    ),
    "fork": (
        "import subprocess, sys\nstarted = []\nwhile len(started) < 50:\n    try:\n"
        f"        started.append({_SLEEPER})\n"
        "    except OSError:\n        break\nreturn len(started)",
        None,
        ("ok",),
        lambda r: isinstance(r.value, int) and 1 <= r.value <= LIMITS.max_processes,
    ),
    "memory": (
        "hog = []\nwhile True:\n    hog.append(bytearray(10 ** 7))",
        SMALL_MEMORY,
        ("exception", "worker_exit"),
        lambda r: (
            r.error is not None and (r.error.ename == "MemoryError" or "memory" in r.error.evalue)
        ),
    ),
}

#: One cycle of the mix: about half normal programs, half hostile ones.
MIX = ["hello"] * 4 + ["calls"] * 4 + [k for k in PROGRAMS if k not in ("hello", "calls")]


def add(a: int, b: int) -> int:
    return a + b


def echo(*args: Any, **kwargs: Any) -> dict[str, Any]:
    return {"args": list(args), "kwargs": kwargs}


# -- what the process holds ----------------------------------------------------------------


def rss_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def open_fds() -> dict[str, str]:
    found = {}
    for fd in os.listdir("/proc/self/fd"):
        try:
            found[fd] = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            pass
    return found


def _stat(pid: str) -> tuple[str, int] | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    rest = data[data.rfind(b")") + 2 :].split()
    return rest[0].decode(), int(rest[1])


def children_of(pid: int) -> dict[str, list[int]]:
    """Children of ``pid``: live ones and zombies."""
    live, zombies = [], []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        st = _stat(name)
        if st is None or st[1] != pid:
            continue
        (zombies if st[0] in ("Z", "X") else live).append(int(name))
    return {"live": live, "zombies": zombies}


def marked_processes(marker: str) -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                cmdline = f.read()
        except OSError:
            continue
        st = _stat(name)
        if marker.encode() in cmdline and st is not None and st[0] not in ("Z", "X"):
            found.append(int(name))
    return found


def our_cgroups(root: str | None, seen_after_runs: list[str]) -> list[str]:
    """This soak's pids cgroups still there: its pool's, and runs' seen right after them."""
    if root is None:
        return []
    try:
        entries = set(os.listdir(root))
    except OSError:
        return []
    # Every pids cgroup this process makes (its pool's, its runs') starts with its owner
    # prefix (kernelgate-<pid>-<start>-<pidns>-).
    ours = owner_prefix()
    return sorted({e for e in entries if e.startswith(ours)} | (set(seen_after_runs) & entries))


# -- the soak ------------------------------------------------------------------------------


async def soak(args: argparse.Namespace) -> dict[str, Any]:
    tmp_dir = tempfile.mkdtemp(prefix="kg-soak-runs-")
    kwargs: dict[str, Any] = {}
    if args.pool_size is not None:
        kwargs["pool_size"] = args.pool_size
    report: dict[str, Any] = {
        "runs": args.runs,
        "concurrency": args.concurrency,
        "pool_size": args.pool_size,
        "python": sys.version.split()[0],
        "kernel": os.uname().release,
        "cpus": os.cpu_count(),
        "rss_start": rss_bytes(),
    }
    gw = Gateway(bindings={"add": add, "echo": echo}, limits=LIMITS, tmp_dir=tmp_dir, **kwargs)
    statuses: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    # Compact bookkeeping, so that the soak's own memory does not look like a host leak.
    durations: dict[str, array.array[float]] = collections.defaultdict(lambda: array.array("d"))
    unexpected: list[dict[str, Any]] = []
    cgroup_root = (CgroupRoots.find() or CgroupRoots()).pids
    cgroups_left_after_run: list[str] = []  # a run's cgroup still there when run() returned
    fork_started: collections.Counter[Any] = collections.Counter()  # processes a fork run got
    warm_runs = 0
    samples: list[dict[str, Any]] = []
    warmup = min(args.warmup, args.runs)
    done = 0
    next_index = 0
    fds_after_warmup: dict[str, str] | None = None
    t_start = time.monotonic()
    t_after_warmup = t_start

    async def one(index: int) -> None:
        nonlocal done, warm_runs
        kind = MIX[index % len(MIX)]
        source, limits, expected, check = PROGRAMS[kind]
        r = await gw.run(source, limits=limits)
        if cgroup_root is not None:
            name = f"{owner_prefix()}{r.run_id}"
            if os.path.exists(os.path.join(cgroup_root, name)):
                cgroups_left_after_run.append(name)
        statuses[kind][r.status] += 1
        if kind == "fork":
            fork_started[r.value] += 1
        durations[kind].append(r.duration_s)
        warm_runs += bool(r.usage.get("warm"))
        if r.status not in expected or not check(r):
            entry: dict[str, Any] = {"kind": kind, "status": r.status}
            if len(unexpected) < 50:
                entry.update(message=r.message[:300], value=repr(r.value)[:100], run=r.run_id)
            unexpected.append(entry)
        done += 1

    async def worker(stop: int) -> None:
        nonlocal next_index
        while next_index < stop:
            index = next_index
            next_index += 1
            await one(index)

    async def phase(stop: int) -> None:
        await asyncio.gather(*[worker(stop) for _ in range(args.concurrency)])

    # Warm-up, then the measured part in slices (to sample RSS and fds along the way).
    await phase(warmup)
    t_after_warmup = time.monotonic()
    report["rss_after_warmup"] = rss_bytes()
    fds_after_warmup = open_fds()
    slice_size = max(1, (args.runs - warmup) // 10)
    while next_index < args.runs:
        await phase(min(args.runs, next_index + slice_size))
        samples.append(
            {
                "runs": done,
                "rss": rss_bytes(),
                "fds": len(open_fds()),
                "elapsed_s": round(time.monotonic() - t_start, 1),
            }
        )
        if args.progress:
            print(
                f"  {done:>6} runs  {samples[-1]['elapsed_s']:>7.1f} s  "
                f"rss {samples[-1]['rss'] / 2**20:.1f} MiB  fds {samples[-1]['fds']}",
                file=sys.stderr,
                flush=True,
            )
    t_end = time.monotonic()
    fds_before_close = open_fds()
    await gw.aclose()
    # The audit: nothing the runs started may be left.
    fds_end = open_fds()
    base_fds = fds_after_warmup if fds_after_warmup is not None else {}
    report.update(
        {
            "elapsed_s": round(t_end - t_start, 2),
            "runs_per_s": round(args.runs / (t_end - t_start), 1),
            "runs_per_s_after_warmup": round(
                (args.runs - warmup) / max(t_end - t_after_warmup, 1e-9), 1
            ),
            "warm_runs": warm_runs,
            "statuses": {k: dict(v) for k, v in sorted(statuses.items())},
            "duration_s": {
                k: {
                    "median": round(statistics.median(v), 3),
                    "p99": round(sorted(v)[int(len(v) * 0.99) - 1 if len(v) > 1 else 0], 3),
                    "max": round(max(v), 3),
                }
                for k, v in sorted(durations.items())
            },
            "fork_started": {str(k): v for k, v in sorted(fork_started.items(), key=str)},
            "unexpected": len(unexpected),
            "unexpected_examples": [u for u in unexpected if "message" in u][:10],
            "leaked_processes_marked": marked_processes(MARKER),
            "children_after_close": children_of(os.getpid()),
            "fds_after_warmup": len(base_fds),
            "fds_before_close": len(fds_before_close),
            "fds_after_close": len(fds_end),
            "leaked_fds": {fd: t for fd, t in fds_end.items() if fd not in base_fds},
            "leaked_run_dirs": sorted(os.listdir(tmp_dir)),
            "pids_cgroup_root": cgroup_root,
            "leftover_cgroups": our_cgroups(cgroup_root, cgroups_left_after_run),
            "rss_end": rss_bytes(),
            "samples": samples,
        }
    )
    report["rss_growth_after_warmup"] = report["rss_end"] - report["rss_after_warmup"]
    shutil.rmtree(tmp_dir, ignore_errors=True)
    return report


def verdict(report: dict[str, Any]) -> list[str]:
    problems = []
    if report["unexpected"]:
        problems.append(f"{report['unexpected']} runs did not end as their program must")
    if report["leaked_processes_marked"]:
        problems.append(f"marked processes left: {report['leaked_processes_marked']}")
    if report["children_after_close"]["live"]:
        problems.append(f"live children left: {report['children_after_close']['live']}")
    if report["children_after_close"]["zombies"]:
        problems.append(f"unreaped children: {report['children_after_close']['zombies']}")
    if report["leaked_fds"]:
        problems.append(f"file descriptors left: {report['leaked_fds']}")
    if report["leaked_run_dirs"]:
        problems.append(f"{len(report['leaked_run_dirs'])} run directories left")
    if report["leftover_cgroups"]:
        problems.append(f"{len(report['leftover_cgroups'])} pids cgroups left")
    return problems


def print_report(report: dict[str, Any]) -> None:
    mib = 2**20
    print(
        f"kernelgate soak: {report['runs']} runs, concurrency {report['concurrency']}, "
        f"pool_size {report['pool_size'] if report['pool_size'] is not None else 'default'}, "
        f"Python {report['python']}, Linux {report['kernel']}, {report['cpus']} CPUs"
    )
    print(
        f"  {report['elapsed_s']} s, {report['runs_per_s']} runs/s "
        f"({report['runs_per_s_after_warmup']} after warm-up), "
        f"{report['warm_runs']} runs in warm children"
    )
    print("  statuses (program: status count, median / p99 / max duration s):")
    for kind, counts in report["statuses"].items():
        d = report["duration_s"][kind]
        shown = ", ".join(f"{s} {n}" for s, n in sorted(counts.items()))
        print(f"    {kind:<10} {shown:<34} {d['median']:.3f} / {d['p99']:.3f} / {d['max']:.3f}")
    print(f"  runs not ending as expected (status or result): {report['unexpected']}")
    print(
        f"  fork runs, processes started before EAGAIN (max_processes={LIMITS.max_processes}): "
        f"{report['fork_started']}"
    )
    for example in report["unexpected_examples"]:
        print(f"    {example}")
    children = report["children_after_close"]
    print(
        f"  leaked processes: {len(report['leaked_processes_marked'])} marked, "
        f"{len(children['live'])} live children, {len(children['zombies'])} zombies"
    )
    print(
        f"  file descriptors: {report['fds_after_warmup']} after warm-up, "
        f"{report['fds_before_close']} before close, {report['fds_after_close']} after close; "
        f"leaked {len(report['leaked_fds'])}"
    )
    print(f"  leaked run directories: {len(report['leaked_run_dirs'])}")
    print(
        f"  leftover pids cgroups: {len(report['leftover_cgroups'])} "
        f"(root {report['pids_cgroup_root']})"
    )
    print(
        f"  host RSS: {report['rss_start'] / mib:.1f} MiB at start, "
        f"{report['rss_after_warmup'] / mib:.1f} MiB after warm-up, "
        f"{report['rss_end'] / mib:.1f} MiB at the end "
        f"(growth after warm-up {report['rss_growth_after_warmup'] / mib:+.1f} MiB)"
    )
    problems = verdict(report)
    print("  verdict: " + ("clean" if not problems else "; ".join(problems)))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--warmup", type=int, default=200, help="runs before the RSS baseline")
    parser.add_argument("--pool-size", type=int, default=None, help="Gateway(pool_size=...)")
    parser.add_argument("--json", help="also write the report here")
    parser.add_argument("--progress", action="store_true", help="print samples as it goes")
    args = parser.parse_args()
    if args.runs < 1 or args.concurrency < 1:
        parser.error("--runs and --concurrency must be positive")
    report = asyncio.run(soak(args))
    print_report(report)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
    return 1 if verdict(report) else 0


if __name__ == "__main__":
    sys.exit(main())
