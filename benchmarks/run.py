#!/usr/bin/env python3
"""kernelgate benchmarks: one command, one table, every peer measured side by side.

    python benchmarks/run.py [--quick] [--reps N] [--json out.json]

Measures, in one process and one run:

* run latency (hello world, and one binding call) of kernelgate's warm pool (when
  ``Gateway.__init__`` accepts ``pool_size``) and cold spawn, against the floors
  (``python -I -S -c pass``, ``python -I -c pass``, ``python -I -c "import asyncio"``,
  fork + _exit + waitpid of a warm process) and the peers (ipykernel through jupyter_client,
  pydantic-monty when importable);
* the binding-call round trip (sequential, timed inside the child) and calls/s with 16 in
  flight, against raw socketpair ping-pong floors;
* sustained fresh-process runs/s at concurrency 1, 2, 8 and 32;
* the memory of an idle child (RSS, and PSS from /proc/PID/smaps_rollup);
* what a cold child imports, with the top costs (``-X importtime``).

Standard library and jupyter_client only (and pydantic-monty if it is already installed).
Every child is real: no mocks. All interpreters are ``sys.executable`` itself.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import inspect
import io
import itertools
import json
import math
import os
import platform
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

from kernelgate import Gateway, Limits  # noqa: E402
from kernelgate.gateway.process import stat_fields  # noqa: E402

EXE = sys.executable
ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}
TIMES = "\u00d7"
MICRO = "\u00b5"

HELLO = "print('hello')"
ONE_CALL = "return await tools.echo(1)"
PHASES = "import time\nreturn time.monotonic()"
MEM_PROGRAM = "return await tools.mem()"
SEQ_PROGRAM = """\
import time
pc = time.perf_counter
noop = tools.noop
ts = []
for _ in range({n}):
    t = pc()
    await noop()
    ts.append(pc() - t)
return [round(t * 1e6, 3) for t in ts]
"""
B16_PROGRAM = """\
import asyncio, time
pc = time.perf_counter
noop = tools.noop
rates = []
for _ in range({samples}):
    t = pc()
    for _ in range({per_sample} // 16):
        await asyncio.gather(*[noop() for _ in range(16)])
    rates.append({per_sample} / (pc() - t))
return rates
"""

# The floor for the call path: the same round trip on a raw socketpair, no protocol.
PINGPONG_CHILD = r"""
import asyncio, collections, json, os, sys, time
mode, n, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
fd = 3
pc = time.perf_counter
res = []
if mode == "block":
    w, r = os.write, os.read
    for _ in range(n):
        t = pc()
        w(fd, b"x")
        r(fd, 1)
        res.append((pc() - t) * 1e6)
else:
    os.set_blocking(fd, False)

    async def main():
        loop = asyncio.get_running_loop()
        waiters = collections.deque()

        def on_readable():
            data = os.read(fd, 65536)
            for _ in range(len(data)):
                waiters.popleft().set_result(None)

        loop.add_reader(fd, on_readable)

        def call():
            f = loop.create_future()
            waiters.append(f)
            os.write(fd, b"x")
            return f

        if mode == "seq":
            for _ in range(n):
                t = pc()
                await call()
                res.append((pc() - t) * 1e6)
        else:
            k = 320
            for _ in range(n):
                t = pc()
                for _ in range(k // 16):
                    await asyncio.gather(*[call() for _ in range(16)])
                res.append(k / (pc() - t))

    asyncio.run(main())
with open(out, "w") as f:
    json.dump(res, f)
"""


# -- bindings used by the benchmark programs --------------------------------------------------


def noop() -> None:
    """Do nothing (the trivial sync binding)."""
    return None


def echo(x: Any) -> Any:
    """Return the argument."""
    return x


def mem() -> list[float | None]:
    """Measure the calling run's processes while the program waits for this reply.

    The program may sit in a pid namespace (its os.getpid() means nothing here), so the
    host looks at its own descendants: with one run live, they are that run's processes.
    Returns [program RSS, program PSS, tree RSS, tree PSS, number of processes]; the
    program's process is the deepest one.
    """
    procs = descendants(os.getpid())
    if not procs:
        return [None, None, None, None, 0]
    rss, pss = proc_mem(procs[-1])
    tree_rss, tree_pss = _sum_mem([proc_mem(p) for p in procs])
    return [rss, pss, tree_rss, tree_pss, len(procs)]


BINDINGS: dict[str, Callable[..., Any]] = {"noop": noop, "echo": echo, "mem": mem}


# -- statistics and the table ----------------------------------------------------------------


@dataclass
class Row:
    section: str
    name: str
    unit: str  # "ms", "us", "runs/s", "calls/s", "MiB"
    samples: list[float] = field(default_factory=list)
    vs: str = ""
    note: str = ""
    key: str = ""

    @property
    def ok(self) -> bool:
        return bool(self.samples)

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    def pct(self, q: float) -> float:
        s = sorted(self.samples)
        return s[max(0, math.ceil(q * len(s)) - 1)]

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "key": self.key,
            "section": self.section,
            "name": self.name,
            "unit": self.unit,
            "n": len(self.samples),
            "vs_floor": self.vs,
            "note": self.note,
        }
        if self.samples:
            d.update(
                median=self.median,
                min=min(self.samples),
                max=max(self.samples),
                p99=self.pct(0.99) if len(self.samples) >= 100 else None,
            )
        return d


def fmt(value: float, unit: str) -> str:
    if unit == "us":
        return f"{value:,.1f} {MICRO}s"
    if unit == "ms":
        if value >= 100:
            return f"{value:,.0f} ms"
        if value >= 10:
            return f"{value:.1f} ms"
        return f"{value:.2f} ms"
    if unit == "MiB":
        return f"{value:.1f} MiB"
    return f"{value:,.0f} {unit}"


class Table:
    def __init__(self) -> None:
        self.rows: list[Row] = []
        self.by_key: dict[str, Row] = {}

    def add(self, row: Row) -> Row:
        self.rows.append(row)
        if row.key:
            self.by_key[row.key] = row
        return row

    def get(self, key: str) -> Row | None:
        row = self.by_key.get(key)
        return row if row is not None and row.ok else None

    def median(self, key: str) -> float | None:
        row = self.get(key)
        return row.median if row is not None else None

    def render(self) -> str:
        lines = [
            "| Section | Measurement | n | median | min | max | p99 | vs floor |",
            "|---|---|--:|--:|--:|--:|--:|---|",
        ]
        for r in self.rows:
            if r.ok:
                p99 = fmt(r.pct(0.99), r.unit) if len(r.samples) >= 100 else "-"
                cells = [
                    str(len(r.samples)),
                    fmt(r.median, r.unit),
                    fmt(min(r.samples), r.unit),
                    fmt(max(r.samples), r.unit),
                    p99,
                ]
                vs = "; ".join(x for x in (r.vs, r.note) if x)
            else:
                cells = ["0", "-", "-", "-", "-"]
                vs = r.note or "not measured"
            lines.append(f"| {r.section} | {r.name} | " + " | ".join(cells) + f" | {vs} |")
        return "\n".join(lines)


def ratio(a: float | None, b: float | None, label: str, digits: int = 2) -> str:
    if a is None or b is None or b == 0:
        return ""
    return f"{a / b:.{digits}f}{TIMES} {label}"


_T0 = time.perf_counter()
#: Failed runs by row key: a benchmark row reports them instead of hiding them.
FAILURES: dict[str, list[str]] = {}
QUICK = False


def log(msg: str) -> None:
    print(f"  [{time.perf_counter() - _T0:5.0f} s] {msg}", file=sys.stderr, flush=True)


# -- machine and /proc helpers ---------------------------------------------------------------


def machine() -> dict[str, Any]:
    cpu = "unknown"
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    try:
        rev = subprocess.run(
            ["git", "-C", REPO, "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", REPO, "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
        rev = rev + ("+dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        rev = "unknown"
    mem_total = "unknown"
    with contextlib.suppress(OSError), open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal"):
                mem_total = f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
                break
    import kernelgate

    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "cores_usable": len(os.sched_getaffinity(0)),
        "memory": mem_total,
        "kernel": f"{platform.system()} {platform.release()}",
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "executable": EXE,
        "kernelgate": f"{getattr(kernelgate, '__version__', '?')} ({rev})",
        "loadavg_start": loadavg(),
    }


def loadavg() -> str:
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "unknown"


def proc_mem(pid: int) -> tuple[float | None, float | None]:
    """(RSS, PSS) in MiB; PSS is None when smaps_rollup is not readable."""
    rss = pss = None
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    rss = int(line.split()[1]) / 1024
                    break
    except OSError:
        pass
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    pss = int(line.split()[1]) / 1024
                    break
    except OSError:
        pass
    return rss, pss


def wait_idle(pid: int, timeout: float = 10.0) -> bool:
    """Wait until ``pid`` sleeps with its CPU time unchanged over three polls."""
    deadline = time.monotonic() + timeout
    last: tuple[bytes, bytes] | None = None
    stable = 0
    while time.monotonic() < deadline:
        rest = stat_fields(pid)
        if rest is None:
            return False
        cpu = (rest[11], rest[12])
        stable = stable + 1 if rest[0] == b"S" and cpu == last else 0
        if stable >= 3:
            return True
        last = cpu
        time.sleep(0.02)
    return False


def descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        rest = stat_fields(int(name))
        if rest is not None and len(rest) > 1:
            children.setdefault(int(rest[1]), []).append(int(name))
    out: list[int] = []
    todo = [root]
    while todo:  # breadth first: the deepest processes come last
        for kid in children.get(todo.pop(0), []):
            out.append(kid)
            todo.append(kid)
    return out


def _sum_mem(values: list[tuple[float | None, float | None]]) -> tuple[float, float | None]:
    rss = sum(r or 0.0 for r, _ in values)
    pss = sum(p or 0.0 for _, p in values) if all(p is not None for _, p in values) else None
    return rss, pss


def pool_layout(pids: list[int]) -> tuple[list[tuple[int, list[int]]], list[int]]:
    """Split a pool's processes into slots (one waiting child and the processes only it
    uses, e.g. its namespace init) and shared ones (a zygote): ``([(leaf, members)], shared)``.
    """
    parent: dict[int, int] = {}
    for p in pids:
        rest = stat_fields(p)
        if rest is not None:
            parent[p] = int(rest[1])
    inside = set(parent)
    leaves = [p for p in inside if p not in set(parent.values())]
    count: dict[int, int] = dict.fromkeys(inside, 0)
    for leaf in leaves:
        q = leaf
        while q in inside:
            count[q] += 1
            q = parent[q]
    slots = []
    for leaf in leaves:
        members = [leaf]
        q = parent[leaf]
        while q in inside and count[q] == 1:
            members.append(q)
            q = parent[q]
        slots.append((leaf, members))
    shared = [p for p in inside if count[p] > 1]
    return slots, shared


def cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            parts = f.read().split(b"\0")
    except OSError:
        return "?"
    text = " ".join(p.decode(errors="replace") for p in parts if p)
    return text if len(text) <= 70 else text[:67] + "..."


# -- spawning floors -------------------------------------------------------------------------


def _devnull_actions(stdin_fd: int | None = None) -> list[tuple[Any, ...]]:
    acts: list[tuple[Any, ...]] = []
    if stdin_fd is None:
        acts.append((os.POSIX_SPAWN_OPEN, 0, "/dev/null", os.O_RDONLY, 0))
    else:
        acts.append((os.POSIX_SPAWN_DUP2, stdin_fd, 0))
    acts.append((os.POSIX_SPAWN_OPEN, 1, "/dev/null", os.O_WRONLY, 0))
    acts.append((os.POSIX_SPAWN_OPEN, 2, "/dev/null", os.O_WRONLY, 0))
    return acts


async def wait_pid(pid: int) -> int:
    """Wait for ``pid`` on the event loop (pidfd), reap it, return its exit code."""
    loop = asyncio.get_running_loop()
    pidfd = os.pidfd_open(pid)
    fut: asyncio.Future[None] = loop.create_future()

    def ready() -> None:
        if not fut.done():
            fut.set_result(None)

    loop.add_reader(pidfd, ready)
    try:
        await fut
    finally:
        loop.remove_reader(pidfd)
        os.close(pidfd)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


async def spawn_and_wait(argv: list[str]) -> float:
    """Seconds from posix_spawn to reaped exit, like a cold run without the protocol."""
    t0 = time.perf_counter()
    pid = os.posix_spawn(argv[0], argv, ENV, file_actions=_devnull_actions())
    code = await wait_pid(pid)
    dt = time.perf_counter() - t0
    if code != 0:
        raise RuntimeError(f"{argv} exited with {code}")
    return dt


def fork_exit_wait() -> float:
    t0 = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    return time.perf_counter() - t0


FLOOR_BARE = [EXE, "-I", "-S", "-c", "pass"]
FLOOR_SITE = [EXE, "-I", "-c", "pass"]
FLOOR_ASYNCIO = [EXE, "-I", "-c", "import asyncio"]
# What a cold child starts as since it skips site (kernelgate.model.site.SiteState).
FLOOR_ASYNCIO_NOSITE = [EXE, "-I", "-S", "-c", "import asyncio"]


# -- gateways --------------------------------------------------------------------------------


@dataclass
class Paths:
    """Which kernelgate paths exist: cold spawn always, the warm pool when it is there."""

    pool_param: bool
    pool_default: Any
    pool_size: int | None  # what the warm rows use (None: no pool)
    pool_label: str
    sandbox_param: bool = False
    isolation: str = ""  # the level the default Gateway's runs get (RunResult.isolation)

    def cold(self, **kw: Any) -> Gateway:
        if self.pool_param:
            kw["pool_size"] = 0
        return Gateway(bindings=BINDINGS, **kw)

    def warm(self, **kw: Any) -> Gateway:
        assert self.pool_size is not None
        if self.pool_default != self.pool_size:
            kw["pool_size"] = self.pool_size
        return Gateway(bindings=BINDINGS, **kw)


def detect_paths() -> Paths:
    try:
        params = inspect.signature(Gateway.__init__).parameters
    except (TypeError, ValueError):
        params = {}  # type: ignore[assignment]
    sandbox = "sandbox" in params
    p = params.get("pool_size")
    if p is None:
        return Paths(False, None, None, "not available yet (Gateway has no pool_size)", sandbox)
    default = p.default
    if isinstance(default, int) and not isinstance(default, bool) and default > 0:
        return Paths(True, default, default, f"pool_size={default} (the default)", sandbox)
    size = os.cpu_count() or 2
    label = f"pool_size={size} (default is {default!r}, not a pool)"
    return Paths(True, default, size, label, sandbox)


async def kg_run(gw: Gateway, program: str, **kw: Any) -> Any:
    r = await gw.run(program, **kw)
    if not r.ok:
        raise RuntimeError(f"run failed: {r.status}: {r.error}")
    return r


async def finished(gw: Gateway) -> None:
    """Wait for the teardown of runs that returned on their reply (kernelgate >= the early
    reply): it must not overlap the next measurement, and a cold child is only counted in
    RUSAGE_CHILDREN once reaped."""
    wait = getattr(gw, "wait_finished", None)
    if wait is not None:
        await wait()


async def timed_run(gw: Gateway, program: str) -> tuple[float, float | None]:
    """Seconds for one run, and the child's CPU ms as kernelgate reports it (if it does)."""
    t0 = time.perf_counter()
    r = await kg_run(gw, program)
    dt = time.perf_counter() - t0
    await finished(gw)
    usage = getattr(r, "usage", None) or {}
    cpu = None
    if "cpu_user_s" in usage:
        cpu = (usage["cpu_user_s"] + usage.get("cpu_system_s", 0.0)) * 1e3
    return dt, cpu


async def settle(gw: Gateway, seconds: float = 0.3) -> None:
    """First run of a gateway (discarded), then let any pool fill up."""
    await kg_run(gw, HELLO)
    await asyncio.sleep(seconds)


# -- section 1: run latency ------------------------------------------------------------------


@dataclass
class Item:
    key: str
    fn: Callable[[], Any]
    samples: list[float] = field(default_factory=list)
    error: str = ""
    cpu_child: list[float] = field(default_factory=list)  # ms of reaped children, per sample
    cpu_host: list[float] = field(default_factory=list)  # ms of this process, per sample
    cpu_reported: list[float] = field(default_factory=list)  # RunResult.usage CPU ms


def _cpu() -> tuple[float, float]:
    c = resource.getrusage(resource.RUSAGE_CHILDREN)
    h = resource.getrusage(resource.RUSAGE_SELF)
    return (c.ru_utime + c.ru_stime) * 1e3, (h.ru_utime + h.ru_stime) * 1e3


async def round_robin(items: list[Item], reps: int) -> None:
    """Measure every item once per round, in turn, so drift hits all of them alike.

    Also records the CPU each measurement cost: the children reaped meanwhile (the run's
    child tree, or the floor's process) and this process (the gateway's own work).
    """
    for _ in range(reps):
        for it in items:
            if it.error:
                continue
            try:
                c0, h0 = _cpu()
                v = it.fn()
                if inspect.isawaitable(v):
                    v = await v
                c1, h1 = _cpu()
                reported = None
                if isinstance(v, tuple):  # (value, child CPU as kernelgate reports it)
                    v, reported = v
                it.samples.append(float(v))
                it.cpu_child.append(c1 - c0)
                it.cpu_host.append(h1 - h0)
                if reported is not None:
                    it.cpu_reported.append(reported)
            except Exception as exc:
                failed = FAILURES.setdefault(it.key, [])
                failed.append(f"{type(exc).__name__}: {str(exc)[:160]}")
                if len(failed) >= 3:
                    it.error = f"stopped after 3 FAILED runs ({failed[0][:120]})"


ZYGOTE_FORK = r"""
import json, os, sys, time
sys.path.insert(0, sys.argv[2])
import kernelgate.kernels.python.bootstrap  # what a zygote would hold
idle = float(sys.argv[3])  # seconds asleep before each fork (0: back to back)
out = []
for _ in range(int(sys.argv[1])):
    if idle:
        time.sleep(idle)
    t = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    out.append((time.perf_counter() - t) * 1e3)
print(json.dumps(out))
"""


def zygote_fork_floor(n: int, idle: float = 0.0) -> list[float]:
    from kernelgate.kernels.python import package_root

    p = subprocess.run(
        [EXE, "-I", "-c", ZYGOTE_FORK, str(n), package_root(), str(idle)],
        env=ENV,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return [float(x) for x in json.loads(p.stdout)]


async def bench_latency(
    paths: Paths, reps: int, cheap_reps: int, extras: bool = True
) -> dict[str, Item]:
    """Latency rows; ``extras`` adds the attribution rows (warm phases, sandbox='process')."""
    items: dict[str, Item] = {}
    async with contextlib.AsyncExitStack() as stack:
        cold = await stack.enter_async_context(paths.cold())
        first = await kg_run(cold, HELLO)
        paths.isolation = getattr(first, "isolation", "") or ""
        phase_samples: dict[str, list[float]] = {"start": [], "end": []}

        async def phases(gw: Gateway, into: dict[str, list[float]]) -> float:
            t0 = time.monotonic()
            r = await kg_run(gw, PHASES)
            t1 = time.monotonic()
            await finished(gw)
            into["start"].append((r.value - t0) * 1e3)
            into["end"].append((t1 - r.value) * 1e3)
            return (t1 - t0) * 1e3

        group = [
            Item("floor_bare", lambda: _ms(spawn_and_wait(FLOOR_BARE))),
            Item("floor_site", lambda: _ms(spawn_and_wait(FLOOR_SITE))),
            Item("floor_asyncio", lambda: _ms(spawn_and_wait(FLOOR_ASYNCIO))),
            Item("floor_asyncio_nosite", lambda: _ms(spawn_and_wait(FLOOR_ASYNCIO_NOSITE))),
            Item("kg_cold_hello", lambda: _ms(timed_run(cold, HELLO))),
            Item("kg_cold_call", lambda: _ms(timed_run(cold, ONE_CALL))),
            Item("kg_cold_phases", lambda: phases(cold, phase_samples)),
        ]
        if paths.sandbox_param and paths.isolation not in ("", "process"):
            plain = await stack.enter_async_context(paths.cold(sandbox="process"))
            group.append(Item("kg_cold_plain_hello", lambda: _ms(timed_run(plain, HELLO))))
        for it in group:  # warm the page cache and the code paths once
            await round_robin([it], 1)
            it.samples.clear()
            it.cpu_child.clear()
            it.cpu_host.clear()
            it.cpu_reported.clear()
        log(f"latency: {reps} rounds of floors + kernelgate cold")
        await round_robin(group, reps)
        for it in group:
            items[it.key] = it
        items["kg_cold_phase_start"] = Item("", _none, phase_samples["start"])
        items["kg_cold_phase_end"] = Item("", _none, phase_samples["end"])

        cheap = [Item("floor_fork", lambda: fork_exit_wait() * 1e3)]
        warm_phases: dict[str, list[float]] = {"start": [], "end": []}
        if paths.pool_size is not None:
            try:
                warm = await stack.enter_async_context(paths.warm())
                await settle(warm, 1.0)
                cheap += [
                    Item("kg_warm_hello", lambda: _ms(timed_run(warm, HELLO))),
                    Item("kg_warm_call", lambda: _ms(timed_run(warm, ONE_CALL))),
                ]
                if extras:
                    cheap.append(Item("kg_warm_phases", lambda: phases(warm, warm_phases)))
                    cheap.append(Item("kg_warm_call_idle", lambda: _ms(idle_then_run(warm))))
                if extras and paths.sandbox_param and paths.isolation not in ("", "process"):
                    wplain = await stack.enter_async_context(paths.warm(sandbox="process"))
                    await settle(wplain, 1.0)
                    cheap.append(Item("kg_warm_plain_hello", lambda: _ms(timed_run(wplain, HELLO))))
            except Exception as exc:
                items["kg_warm_hello"] = Item("", _none, error=f"error: {exc!r}"[:160])
        log(f"latency: {cheap_reps} rounds of fork floor + kernelgate warm pool")
        await round_robin(cheap, cheap_reps)
        for it in cheap:
            items[it.key] = it
        if warm_phases["start"]:
            items["kg_warm_phase_start"] = Item("", _none, warm_phases["start"])
            items["kg_warm_phase_end"] = Item("", _none, warm_phases["end"])
    try:
        items["floor_zygote_fork"] = Item("", _none, zygote_fork_floor(cheap_reps))
        if extras:  # the after-idle goal's floor: the machine wakes from idle for it too
            idle_forks = zygote_fork_floor(cheap_reps, IDLE_BEFORE_RUN)
            items["floor_zygote_fork_idle"] = Item("", _none, idle_forks)
    except Exception as exc:
        items["floor_zygote_fork"] = Item("", _none, error=f"error: {exc!r}"[:160])
    return items


def _none() -> float:
    return 0.0


#: Untimed pause before a run in the "after idle time" row: long enough for the pool to
#: boot the child that replaces the last one taken, as an agent's think time would allow.
IDLE_BEFORE_RUN = 0.06


async def idle_then_run(gw: Gateway) -> tuple[float, float | None]:
    await asyncio.sleep(IDLE_BEFORE_RUN)
    return await timed_run(gw, ONE_CALL)


async def _ms(aw: Awaitable[Any]) -> Any:
    v = await aw
    if isinstance(v, tuple):
        return v[0] * 1e3, v[1]
    return v * 1e3


# -- peers: ipykernel and pydantic-monty -----------------------------------------------------


def bench_ipykernel(cold_reps: int, warm_reps: int) -> tuple[dict[str, list[float]], str]:
    """Synchronous (jupyter_client's blocking client): call outside the event loop."""
    try:
        from jupyter_client.manager import KernelManager
    except ImportError as exc:
        return {}, f"jupyter_client not importable: {exc}"
    out: dict[str, list[float]] = {
        "ik_cold_hello": [],
        "ik_cold_call": [],
        "ik_warm_hello": [],
        "ik_warm_call": [],
    }
    note = ""

    def start() -> tuple[Any, Any]:
        nonlocal note
        km = KernelManager(kernel_name="python3")
        km.start_kernel(stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=dict(ENV))
        if not note:
            with contextlib.suppress(Exception):
                note = f"kernel argv[0]={km.provisioner.process.args[0]}"
        kc = km.client()
        kc.start_channels()
        kc.wait_for_ready(timeout=60)
        return km, kc

    def execute(kc: Any, call: bool) -> None:
        if call:  # the nearest thing to a binding call: input() answered by the client
            reply = kc.execute_interactive(
                "input()",
                allow_stdin=True,
                stdin_hook=lambda msg: kc.input("1"),
                output_hook=lambda msg: None,
                timeout=60,
            )
        else:
            reply = kc.execute_interactive(HELLO, output_hook=lambda msg: None, timeout=60)
        if reply["content"]["status"] != "ok":
            raise RuntimeError(f"ipykernel execute failed: {reply['content']}")

    def stop(km: Any, kc: Any) -> None:
        kc.stop_channels()
        km.shutdown_kernel(now=False)

    try:
        km, kc = start()  # warm-up kernel: also the one the warm rows use
        try:
            execute(kc, False)
            execute(kc, True)
            log(f"ipykernel: {warm_reps} warm executes of each program")
            for _ in range(warm_reps):
                for key, call in (("ik_warm_hello", False), ("ik_warm_call", True)):
                    t0 = time.perf_counter()
                    execute(kc, call)
                    out[key].append((time.perf_counter() - t0) * 1e3)
        finally:
            stop(km, kc)
        log(f"ipykernel: {cold_reps} cold start + execute + shutdown of each program")
        for _ in range(cold_reps):
            for key, call in (("ik_cold_hello", False), ("ik_cold_call", True)):
                t0 = time.perf_counter()
                km, kc = start()
                try:
                    execute(kc, call)
                finally:
                    stop(km, kc)
                out[key].append((time.perf_counter() - t0) * 1e3)
    except Exception as exc:
        note = f"error: {type(exc).__name__}: {str(exc)[:150]}"
    return out, note


def bench_monty(reps: int) -> tuple[dict[str, list[float]], str]:
    """pydantic-monty, when importable: its pool API (1.x: workers, sessions) or the older
    in-process ``Monty(code).run()``. Rows: a session on a warm worker reused between
    programs, and (pool API) a fresh worker per program, kernelgate's own guarantee."""
    try:
        import pydantic_monty  # type: ignore[import-not-found]
    except ImportError:
        return {}, "skipped: pydantic-monty is not importable in this environment"
    version = getattr(pydantic_monty, "__version__", "?")
    out: dict[str, list[float]] = {}
    try:
        if hasattr(pydantic_monty.Monty, "checkout"):
            for kind, extra in (("warm", {}), ("fresh", {"max_checkouts_per_worker": 1})):
                with pydantic_monty.Monty(min_processes=2, **extra) as pool:

                    def feed(code: str, pool: Any = pool, **kw: Any) -> None:
                        with pool.checkout() as session:
                            session.feed_run(
                                code, print_callback=pydantic_monty.CollectString(), **kw
                            )

                    runs = {
                        "hello": lambda: feed("print('hello')"),
                        "call": lambda: feed("echo(1)", external_lookup={"echo": echo}),
                    }
                    for fn in runs.values():
                        fn()  # warm-up
                    for _ in range(reps):
                        for prog, fn in runs.items():
                            t0 = time.perf_counter()
                            fn()
                            out.setdefault(f"monty_{kind}_{prog}", []).append(
                                (time.perf_counter() - t0) * 1e3
                            )
            return out, f"pydantic-monty {version}"
        monty = pydantic_monty.Monty
        sink = io.StringIO()
        with contextlib.redirect_stdout(sink):
            for _ in range(reps + 1):
                for prog, code, kw in (
                    ("hello", "print('hello')", {}),
                    ("call", "echo(1)", {"external_functions": {"echo": echo}}),
                ):
                    t0 = time.perf_counter()
                    monty(code).run(**kw)
                    out.setdefault(f"monty_warm_{prog}", []).append(
                        (time.perf_counter() - t0) * 1e3
                    )
        return {k: v[1:] for k, v in out.items()}, f"pydantic-monty {version}, in-process"
    except Exception as exc:
        return {}, f"skipped: pydantic-monty API not recognised ({type(exc).__name__}: {exc})"[:200]


# -- section 2: binding calls ----------------------------------------------------------------


async def pingpong_floor(mode: str, n: int, asyncio_host: bool) -> list[float]:
    """Round trips (us) or messages/s of a raw socketpair to a ``python -I -S`` child."""
    ours, theirs = socket.socketpair()
    tfd = theirs.fileno()
    if tfd == 3:
        tfd = os.dup(tfd)
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as tf:
        out_path = tf.name
    try:
        argv = [EXE, "-I", "-S", "-c", PINGPONG_CHILD, mode, str(n), out_path]
        acts = [*_devnull_actions(), (os.POSIX_SPAWN_DUP2, tfd, 3)]
        pid = os.posix_spawn(EXE, argv, ENV, file_actions=acts)
        if tfd != theirs.fileno():
            os.close(tfd)
        theirs.close()
        if asyncio_host:
            loop = asyncio.get_running_loop()
            ours.setblocking(False)

            def on_readable() -> None:
                try:
                    data = ours.recv(65536)
                except BlockingIOError:
                    return
                if not data:
                    loop.remove_reader(ours.fileno())
                    return
                ours.sendall(data)

            loop.add_reader(ours.fileno(), on_readable)
            try:
                code = await wait_pid(pid)
            finally:
                loop.remove_reader(ours.fileno())
        else:
            while True:
                data = ours.recv(65536)
                if not data:
                    break
                ours.sendall(data)
            _, status = os.waitpid(pid, 0)
            code = os.waitstatus_to_exitcode(status)
        if code != 0:
            raise RuntimeError(f"ping-pong child exited with {code}")
        with open(out_path) as f:
            return [float(x) for x in json.load(f)]
    finally:
        ours.close()
        os.unlink(out_path)


async def cpu_run(gw: Gateway, program: str, limits: Limits) -> tuple[Any, float, float]:
    """A run, with the CPU ms it cost this process and its child (RunResult.usage when
    kernelgate reports it, else the children this process reaped meanwhile)."""
    c0, h0 = _cpu()
    r = await gw.run(program, limits=limits)
    await finished(gw)
    c1, h1 = _cpu()
    if not r.ok:
        raise RuntimeError(f"run failed: {r.status}: {r.error}")
    usage = getattr(r, "usage", None) or {}
    child = c1 - c0
    if "cpu_user_s" in usage:
        child = (usage["cpu_user_s"] + usage.get("cpu_system_s", 0.0)) * 1e3
    return r, h1 - h0, child


async def bench_calls(paths: Paths, seq_runs: int, seq_n: int, b16_runs: int) -> dict[str, Any]:
    out: dict[str, Any] = {"seq_child": [], "seq_host": [], "b16": []}
    skip = 20  # the first calls of a run warm the code paths
    limits = Limits(max_value_bytes=2 * 1024 * 1024, max_calls=100_000)
    use_warm = paths.pool_size is not None
    gw = paths.warm() if use_warm else paths.cold()
    out["path"] = "warm pool" if use_warm else "cold spawn"
    async with gw:
        await settle(gw)
        log(f"calls: {seq_runs} runs of {seq_n} sequential calls")
        out["cpu_call_host"], out["cpu_call_child"] = [], []
        for _ in range(seq_runs):
            _, h_base, c_base = await cpu_run(gw, SEQ_PROGRAM.format(n=0), limits)
            r, h_cpu, c_cpu = await cpu_run(gw, SEQ_PROGRAM.format(n=seq_n), limits)
            out["cpu_call_host"].append((h_cpu - h_base) / seq_n * 1e3)
            out["cpu_call_child"].append((c_cpu - c_base) / seq_n * 1e3)
            out["seq_child"] += r.value[skip:]
            starts = [c.start_s for c in r.calls]
            out["seq_host"] += [(b - a) * 1e6 for a, b in itertools.pairwise(starts)][skip:]
        log(f"calls: {b16_runs} runs of 16-in-flight batches")
        for _ in range(b16_runs):
            r = await gw.run(B16_PROGRAM.format(samples=10, per_sample=320), limits=limits)
            if not r.ok:
                raise RuntimeError(f"16-in-flight run failed: {r.status}: {r.error}")
            out["b16"] += r.value[1:]
    log("calls: socketpair ping-pong floors")
    n = seq_runs * seq_n
    out["pp_block"] = (await pingpong_floor("block", n, asyncio_host=False))[skip:]
    out["pp_async"] = (await pingpong_floor("seq", n, asyncio_host=True))[skip:]
    # The call path's own floor: the host answers on its event loop, the child blocks on
    # its socket while it waits (nothing else can run in a program awaiting one call).
    out["pp_ahost"] = (await pingpong_floor("block", n, asyncio_host=True))[skip:]
    out["pp_b16"] = (await pingpong_floor("b16", 10 * b16_runs + 1, asyncio_host=True))[1:]
    return out


# -- section 3: sustained runs/s -------------------------------------------------------------


def machine_busy_ms() -> float:
    """CPU time the whole machine has spent busy (all cores, every process and the kernel),
    from /proc/stat: what a run really costs, wherever the work lands."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    busy = sum(fields[:8]) - idle  # user nice system idle iowait irq softirq steal
    return busy * 1e3 / os.sysconf("SC_CLK_TCK")


def zygote_tree_ms(gw: Any) -> float:
    """CPU of a warm gateway's zygote and every child it has reaped (each child's own
    reaped processes included: a warm run's init reaps its program), from /proc: what the
    warm runs' processes cost, whatever else the machine runs. 0 without a zygote."""
    zygote = getattr(getattr(gw, "_pool", None), "_zygote", None)
    if zygote is None:
        return 0.0
    try:
        with open(f"/proc/{zygote.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    # utime stime cutime cstime: fields 14-17 of stat(5), 12-15 after the ")".
    return sum(int(x) for x in fields[11:15]) * 1e3 / os.sysconf("SC_CLK_TCK")


async def sustained(
    work: Callable[[], Awaitable[Any]],
    total: int,
    conc: int,
    failures: list[str],
    drain: Callable[[], Awaitable[Any]] | None = None,
) -> float:
    """Successful runs/s of ``total`` runs with ``conc`` of them in flight at all times.

    A failed run counts as not done; its error is appended to ``failures``. ``drain``
    (counted in the time) waits for work the runs left behind, such as their teardown.
    """
    left = total
    ok = 0

    async def worker() -> None:
        nonlocal left, ok
        while left > 0:
            left -= 1
            try:
                await work()
                ok += 1
            except Exception as exc:
                failures.append(f"{type(exc).__name__}: {str(exc)[:160]}")

    t0 = time.perf_counter()
    await asyncio.gather(*[worker() for _ in range(conc)])
    if drain is not None:
        await drain()
    return ok / (time.perf_counter() - t0)


async def bench_throughput(
    paths: Paths, concs: list[int], batches: int, seconds: float, latency: dict[str, float]
) -> dict[str, list[float]]:
    """runs/s per kind and concurrency; each batch is a fixed number of runs, sized from the
    measured single-run latency to take about ``seconds`` (and at least ``c`` runs)."""
    out: dict[str, list[float]] = {}
    errors = FAILURES
    cores = len(os.sched_getaffinity(0))
    async with contextlib.AsyncExitStack() as stack:
        cold = await stack.enter_async_context(paths.cold())
        await settle(cold)
        warm = None
        if paths.pool_size is not None:
            warm = await stack.enter_async_context(paths.warm())
            await settle(warm, 1.0)
        for c in concs:
            plan: list[tuple[str, str, Callable[[], Awaitable[Any]], Any]] = [
                (f"floor_rps_{c}", "floor_asyncio", lambda: spawn_and_wait(FLOOR_ASYNCIO), None),
                (f"kg_cold_rps_{c}", "kg_cold_hello", lambda: kg_run(cold, HELLO), cold),
            ]
            if warm is not None:
                w = warm
                plan.append((f"kg_warm_rps_{c}", "kg_warm_hello", lambda w=w: kg_run(w, HELLO), w))
            sizes = {}
            for key, lat_key, _, _gw in plan:
                lat_ms = latency.get(lat_key) or 100.0
                est = min(c, cores) * 1e3 / lat_ms
                sizes[key] = max(c, 4, min(5000, round(est * seconds)))
            log(f"sustained: concurrency {c}, {batches} batches of {sorted(sizes.values())} runs")
            for _ in range(batches):
                for key, _lat, work, gw in plan:
                    failed: list[str] = []
                    h0, m0 = _cpu()[1], machine_busy_ms()
                    z0 = zygote_tree_ms(gw) if gw is warm else 0.0
                    drain = functools.partial(finished, gw) if gw is not None else None
                    rate = await sustained(work, sizes[key], c, failed, drain)
                    out.setdefault(key, []).append(rate)
                    host_ms = (_cpu()[1] - h0) / sizes[key]
                    out.setdefault(key + "_hostcpu", []).append(host_ms)
                    if gw is warm and warm is not None:
                        tree = (zygote_tree_ms(gw) - z0) / sizes[key]
                        out.setdefault(key + "_ourcpu", []).append(host_ms + tree)
                    out.setdefault(key + "_machinecpu", []).append(
                        (machine_busy_ms() - m0) / sizes[key]
                    )
                    out.setdefault(key + "_runs", []).append(sizes[key])
                    if failed:
                        log(f"{key}: {len(failed)} of {sizes[key]} runs failed: {failed[0]}")
                        errors.setdefault(key, []).extend(failed)
    return out


# -- section 4: memory of an idle child ------------------------------------------------------


def mem_floor(argv: list[str]) -> tuple[float | None, float | None]:
    """RSS/PSS of ``argv`` blocked reading its stdin (a pipe we hold open)."""
    r, w = os.pipe()
    try:
        pid = os.posix_spawn(argv[0], argv, ENV, file_actions=_devnull_actions(stdin_fd=r))
    finally:
        os.close(r)
    try:
        wait_idle(pid)
        return proc_mem(pid)
    finally:
        os.close(w)
        os.waitpid(pid, 0)


def _kg_site(python: str) -> dict[str, Any]:
    """``spawn_child``'s ``site`` argument as kernelgate's cold path passes it (none in
    versions that start cold children with site)."""
    from kernelgate.gateway import process as kgproc

    if "site" not in inspect.signature(kgproc.spawn_child).parameters:
        return {}
    from kernelgate.gateway import sandbox as kgsandbox

    return {"site": kgsandbox.probe_support(python).site}


def mem_kg_before_program(python: str, env: dict[str, str]) -> tuple[float | None, float | None]:
    """A cold child from kernelgate's own spawn_child, blocked waiting for its program."""
    from kernelgate.gateway import process as kgproc

    run_dir = tempfile.mkdtemp(prefix="kernelgate-bench-")
    child = kgproc.spawn_child(python, env, run_dir, **_kg_site(python))
    try:
        wait_idle(child.pid)
        return proc_mem(child.pid)
    finally:
        child.signal_group(signal.SIGKILL)
        os.waitpid(child.pid, 0)
        child.close()
        shutil.rmtree(run_dir, ignore_errors=True)


async def bench_memory(paths: Paths, reps: int) -> dict[str, Any]:
    out: dict[str, Any] = {}

    def add(key: str, rp: tuple[float | None, float | None]) -> None:
        for suffix, v in zip(("rss", "pss"), rp, strict=True):
            if v is not None:
                out.setdefault(f"{key}_{suffix}", []).append(v)

    log(f"memory: {reps} idle children of each kind")
    for _ in range(reps):
        add("mem_floor_bare", mem_floor([EXE, "-I", "-S", "-c", "import os; os.read(0, 1)"]))
        add(
            "mem_floor_asyncio",
            mem_floor([EXE, "-I", "-c", "import asyncio, os; os.read(0, 1)"]),
        )
    async with paths.cold() as cold:
        await settle(cold)
        try:
            for _ in range(reps):
                add("mem_kg_waiting", mem_kg_before_program(cold.python, cold.env))
        except Exception as exc:
            out["mem_kg_waiting_error"] = f"error: {type(exc).__name__}: {exc}"[:160]
        for _ in range(reps):
            r = await kg_run(cold, MEM_PROGRAM)
            add("mem_kg_in_call", (r.value[0], r.value[1]))
            add("mem_kg_tree", (r.value[2], r.value[3]))
            out["mem_kg_tree_procs"] = r.value[4]
    if paths.pool_size is not None:
        before = set(descendants(os.getpid()))
        async with paths.warm() as warm:
            await settle(warm, 1.5)
            for i in range(3 if reps > 3 else 2):
                if i:
                    await asyncio.sleep(0.3)
                pids = [p for p in descendants(os.getpid()) if p not in before]
                slots, shared = pool_layout(pids)
                for leaf, members in slots:
                    add("mem_pool_leaf", proc_mem(leaf))
                    both = [proc_mem(m) for m in members]
                    add("mem_pool_slot", _sum_mem(both))
                    out["pool_slot_procs"] = len(members)
                for p in shared:
                    add("mem_pool_shared", proc_mem(p))
                out["pool_procs"] = [
                    {"pid": p, "cmd": cmdline(p), "shared": p in shared} for p in pids
                ]
    return out


# -- imports of a cold child -----------------------------------------------------------------


def _parse_importtime(text: str) -> list[tuple[str, int, int, int]]:
    rows = []
    for line in text.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        fields = line[len("import time:") :].split("|", 2)
        if len(fields) != 3:
            continue
        name = fields[2]
        depth = (len(name) - len(name.lstrip(" ")) - 1) // 2
        rows.append((name.strip(), int(fields[0]), int(fields[1]), depth))
    return rows


def importtime_of(argv: list[str]) -> str:
    """stderr of ``argv`` (run with -X importtime), which must exit by itself."""
    proc = subprocess.run(
        argv,
        env=ENV,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        timeout=60,
    )
    return proc.stderr.decode(errors="replace")


def kg_child_importtime() -> tuple[str, str]:
    """stderr of kernelgate's child started with ``-X importtime``, up to its wait on fd 3."""
    from kernelgate.gateway import process as kgproc

    run_dir = tempfile.mkdtemp(prefix="kernelgate-bench-")
    how = "kernelgate's spawn_child(..., extra_args=('-X', 'importtime'))"
    child = kgproc.spawn_child(
        EXE, dict(ENV), run_dir, extra_args=("-X", "importtime"), **_kg_site(EXE)
    )
    chunks: list[bytes] = []
    try:
        wait_idle(child.pid)
        child.control.close()  # EOF on fd 3: the child exits without a program
        os.set_blocking(child.stderr_fd, True)
        while True:
            data = os.read(child.stderr_fd, 65536)
            if not data:
                break
            chunks.append(data)
        os.waitpid(child.pid, 0)
    finally:
        child.signal_group(signal.SIGKILL)
        child.close()
        shutil.rmtree(run_dir, ignore_errors=True)
    return b"".join(chunks).decode(errors="replace"), how


async def bench_imports(paths: Paths) -> dict[str, Any]:
    out: dict[str, Any] = {}
    async with paths.cold() as gw:
        r = await kg_run(gw, "import sys\nreturn sorted(sys.modules)")
        out["kg_modules"] = r.value
    for key, argv in (
        ("bare_modules", [EXE, "-I", "-S", "-c", "import sys; print(*sorted(sys.modules))"]),
        (
            "asyncio_modules",
            [EXE, "-I", "-c", "import asyncio, sys; print(*sorted(sys.modules))"],
        ),
    ):
        p = subprocess.run(argv, env=ENV, capture_output=True, text=True, timeout=60)
        out[key] = p.stdout.split()
    try:
        text, how = kg_child_importtime()
    except Exception as exc:
        text, how = "", f"(spawn_child not usable: {exc!r}; used a plain loader)"
        from kernelgate.kernels.python import LOADER, package_root

        argv = [EXE, "-I", "-X", "importtime", "-c", LOADER, package_root()]
        text = importtime_of(argv)  # no fd 3: exits after importing
    out["importtime_how"] = how
    out["importtime"] = _parse_importtime(text)
    floor = _parse_importtime(importtime_of([EXE, "-I", "-X", "importtime", "-c", "pass"]))
    out["site_importtime"] = floor
    return out


def _tree_cut(rows: list[tuple[str, int, int, int]]) -> float:
    return max(1000.0, 0.02 * sum(r[1] for r in rows))


def _import_tree(rows: list[tuple[str, int, int, int]], max_depth: int = 2) -> list[str]:
    """Render -X importtime's post-order list (children before their parent) as a tree."""
    pending: dict[int, list[Any]] = {}
    roots: list[Any] = []
    for name, self_us, cum_us, depth in rows:
        node = (name, self_us, cum_us, pending.pop(depth + 1, []))
        if depth == 0:
            roots.append(node)
        else:
            pending.setdefault(depth, []).append(node)
    cut = _tree_cut(rows)
    out: list[str] = []

    def walk(nodes: list[Any], depth: int) -> None:
        for name, self_us, cum_us, kids in sorted(nodes, key=lambda n: -n[2]):
            if cum_us < cut:
                continue
            out.append(f"{cum_us / 1e3:7.1f} ms  {'  ' * depth}{name} [{self_us / 1e3:.1f}]")
            if depth < max_depth:
                walk(kids, depth + 1)

    walk(roots, 0)
    return out


def render_imports(info: dict[str, Any]) -> str:
    kg, bare, aio = info["kg_modules"], info["bare_modules"], info["asyncio_modules"]
    extra = sorted(set(kg) - set(aio))
    ours = [m for m in extra if m.startswith("kernelgate")]
    other = [m for m in extra if not m.startswith("kernelgate")]
    rows: list[tuple[str, int, int, int]] = info["importtime"]
    lines = [
        "## What a cold child imports",
        "",
        f"- `sys.modules` when the program starts: **{len(kg)}** modules "
        f"(`python -I -S -c pass`: {len(bare)}; `python -I -c 'import asyncio'`: {len(aio)}).",
        f"- Beyond the asyncio floor: {len(ours)} kernelgate modules and {len(other)} others: "
        + ", ".join(f"`{m}`" for m in other[:40])
        + (" ..." if len(other) > 40 else ""),
    ]
    if rows:
        total = sum(r[1] for r in rows)
        site_ms = sum(r[2] for r in info["site_importtime"] if r[3] == 0) / 1e3
        lines += [
            f"- `-X importtime` of the child up to its wait on fd 3 ({info['importtime_how']}): "
            f"{len(rows)} imports, **{total / 1e3:.1f} ms** of import time in all "
            f"(importtime's own overhead inflates this); `python -I -c pass` alone spends "
            f"{site_ms:.1f} ms importing (`site` and the .pth files it runs).",
            "",
            "Import tree, cumulative time (self time in brackets), branches of at least "
            f"{_tree_cut(rows) / 1e3:.1f} ms, three levels deep: what to cut or defer first.",
            "",
            "```",
        ]
        lines += _import_tree(rows)
        lines += ["```", "", "Single modules by self time:", "", "```"]
        for name, self_us, _cum, depth in sorted(rows, key=lambda r: -r[1])[:12]:
            lines.append(f"{self_us / 1e3:6.1f} ms  {name}  (depth {depth})")
        lines.append("```")
    return "\n".join(lines)


# -- assembling the table --------------------------------------------------------------------


def _med(samples: list[float] | None) -> float | None:
    return statistics.median(samples) if samples else None


def build_table(
    paths: Paths,
    lat: dict[str, Item],
    ik: tuple[dict[str, list[float]], str],
    monty: tuple[dict[str, list[float]], str],
    calls: dict[str, Any] | str,
    thr: dict[str, list[float]],
    memo: dict[str, Any],
    concs: list[int],
) -> Table:
    t = Table()
    na = paths.pool_label if paths.pool_size is None else ""

    skipped = "not measured (--quick skips this row)" if QUICK else "not measured"

    def item(key: str) -> Item:
        return lat.get(key) or Item(key, _none, error=na if na and "warm" in key else skipped)

    f_bare = _med(item("floor_bare").samples)
    f_aio = _med(item("floor_asyncio").samples)
    f_fork = _med(item("floor_fork").samples)

    def vs_lat(samples: list[float]) -> str:
        m = _med(samples)
        parts = [
            ratio(m, f_aio, "asyncio floor"),
            ratio(m, f_bare, "-S floor", 1),
            ratio(m, f_fork, "fork", 0),
        ]
        return ", ".join(p for p in parts if p)

    def add_lat(sec: str, key: str, name: str, note: str = "") -> None:
        it = item(key)
        err = it.error or ("" if it.samples else note)
        if key in FAILURES and not it.error:
            err = f"{len(FAILURES[key])} FAILED runs ({FAILURES[key][0][:120]})"
        t.add(Row(sec, name, "ms", it.samples, vs_lat(it.samples), err, key=key))

    ik_s, ik_note = ik
    mo_s, mo_note = monty
    iso = f", sandbox {paths.isolation!r}" if paths.isolation else ""
    cold_label = ("pool_size=0" if paths.pool_param else "the only path today") + iso
    warm_name = "kernelgate warm pool" + (f" ({paths.pool_label}{iso})" if not na else "")
    for prog, label in (("hello", f"hello world `{HELLO}`"), ("call", f"one call `{ONE_CALL}`")):
        sec = f"Run latency: {label}"
        add_lat(sec, f"kg_warm_{prog}", warm_name)
        if prog == "call" and "kg_warm_call_idle" in lat:
            add_lat(
                sec,
                "kg_warm_call_idle",
                f"kernelgate warm pool, {IDLE_BEFORE_RUN * 1e3:.0f} ms idle before each run "
                "(the refill done, as with an agent's think time)",
            )
        if prog == "hello" and "kg_warm_plain_hello" in lat:
            add_lat(sec, "kg_warm_plain_hello", "kernelgate warm pool, sandbox='process'")
        add_lat(sec, f"kg_cold_{prog}", f"kernelgate cold spawn ({cold_label})")
        if prog == "hello" and "kg_cold_plain_hello" in lat:
            add_lat(sec, "kg_cold_plain_hello", "kernelgate cold spawn, sandbox='process'")
        what = "`input()` answered over stdin" if prog == "call" else "`print('hello')`"
        for kind, name in (
            ("cold", f"ipykernel: start + execute {what} + shutdown"),
            ("warm", f"ipykernel: execute {what} on a running kernel"),
        ):
            s = ik_s.get(f"ik_{kind}_{prog}", [])
            note = ik_note if kind == "cold" or not s else ""
            t.add(Row(sec, name, "ms", s, vs_lat(s), note, key=f"ik_{kind}_{prog}"))
        for kind, name in (
            ("warm", "pydantic-monty: a session on a warm worker (reused between programs)"),
            ("fresh", "pydantic-monty: a fresh worker per program (max_checkouts_per_worker=1)"),
        ):
            s = mo_s.get(f"monty_{kind}_{prog}", [])
            if s or kind == "warm":
                key = f"monty_{kind}_{prog}"
                t.add(Row(sec, name, "ms", s, vs_lat(s), mo_note, key=key))

    sec = "Run latency: floors and phases"
    for key, name in (
        ("floor_bare", "`python -I -S -c pass` (posix_spawn + wait)"),
        ("floor_site", "`python -I -c pass` (adds site and its .pth files)"),
        ("floor_asyncio", "`python -I -c 'import asyncio'` (the cold goal's floor)"),
        ("floor_asyncio_nosite", "`python -I -S -c 'import asyncio'` (how a cold child starts)"),
        ("floor_fork", "fork + `os._exit(0)` + waitpid, in this benchmark process"),
        ("floor_zygote_fork", "the same fork, in a zygote-sized process (child modules loaded)"),
        (
            "floor_zygote_fork_idle",
            f"the same zygote-sized fork, {IDLE_BEFORE_RUN * 1e3:.0f} ms asleep before each",
        ),
    ):
        it = item(key)
        vs = ratio(_med(it.samples), f_aio, "asyncio floor") if key != "floor_asyncio" else ""
        t.add(Row(sec, name, "ms", it.samples, vs, it.error, key=key))
    for path in ("cold", "warm"):
        for ph, name in (
            ("start", "run() called -> program starts"),
            ("end", "program returns -> run() returns"),
        ):
            it = item(f"kg_{path}_phase_{ph}")
            t.add(
                Row(
                    sec,
                    f"kernelgate {path}: {name}",
                    "ms",
                    it.samples,
                    "",
                    it.error,
                    key=f"kg_{path}_phase_{ph}",
                )
            )

    sec = "CPU per run (user+sys; robust to machine load)"
    f_cpu = _med(item("floor_asyncio").cpu_child)
    for key, name in (
        ("kg_cold_hello", "kernelgate cold hello: child process tree"),
        ("kg_cold_hello", "kernelgate cold hello: host (this process, the gateway)"),
        ("kg_cold_call", "kernelgate cold one call: child process tree"),
        ("kg_cold_call", "kernelgate cold one call: host (this process, the gateway)"),
        ("kg_cold_plain_hello", "kernelgate cold hello, sandbox='process': child"),
        (
            "kg_warm_hello",
            "kernelgate warm hello: the program's process (RunResult.usage, the child's own)",
        ),
        ("kg_warm_hello", "kernelgate warm hello: host (this process, the gateway)"),
        ("floor_asyncio", "floor `python -I -c 'import asyncio'`: child"),
        ("floor_bare", "floor `python -I -S -c pass`: child"),
    ):
        if key not in lat and key in ("kg_cold_plain_hello",):
            continue
        it = item(key)
        if "RunResult.usage" in name:
            s = it.cpu_reported
        else:
            s = it.cpu_host if "host" in name else it.cpu_child
        vs = ratio(_med(s), f_cpu, "asyncio floor CPU") if "host" not in name else ""
        t.add(
            Row(
                sec,
                name,
                "ms",
                s,
                vs,
                it.error if not s else "",
                key=f"cpu_{'host' if 'host' in name else 'child'}_{key}",
            )
        )

    sec = "Binding calls"
    if isinstance(calls, str):
        for name in ("sequential round trip", "16 in flight"):
            t.add(Row(sec, name, "us", [], note=calls))
    else:
        pb, pa, p16 = _med(calls["pp_block"]), _med(calls["pp_async"]), _med(calls["pp_b16"])
        ph = _med(calls.get("pp_ahost"))

        def vs_call(s: list[float]) -> str:
            m = _med(s)
            parts = (
                ratio(m, pb, "blocking ping-pong", 1),
                ratio(m, ph, "asyncio-host/blocking-child ping-pong", 1),
                ratio(m, pa, "asyncio ping-pong", 1),
            )
            return ", ".join(x for x in parts if x)

        via = calls["path"]
        for key, name in (
            (
                "seq_child",
                f"kernelgate sequential `await tools.noop()`, timed in the child ({via})",
            ),
            ("seq_host", "kernelgate sequential, host view (gap between consecutive calls)"),
        ):
            t.add(Row(sec, name, "us", calls[key], vs_call(calls[key]), key=key))
        for key, name in (
            ("cpu_call_host", "CPU per sequential call: host (the gateway's event loop)"),
            ("cpu_call_child", "CPU per sequential call: child (the program's process)"),
        ):
            t.add(Row(sec, name, "us", calls.get(key, []), key=key))
        t.add(
            Row(
                sec,
                "floor: socketpair 1-byte ping-pong, blocking both ends",
                "us",
                calls["pp_block"],
                key="pp_block",
            )
        )
        t.add(
            Row(
                sec,
                "floor: socketpair ping-pong, asyncio host, blocking child",
                "us",
                calls.get("pp_ahost", []),
                ratio(ph, pb, "blocking ping-pong", 1),
                key="pp_ahost",
            )
        )
        t.add(
            Row(
                sec,
                "floor: socketpair ping-pong, asyncio both ends (a future per call)",
                "us",
                calls["pp_async"],
                ratio(pa, pb, "blocking ping-pong", 1),
                key="pp_async",
            )
        )
        t.add(
            Row(
                sec,
                "kernelgate calls/s, 16 in flight (`asyncio.gather` batches of 16)",
                "calls/s",
                calls["b16"],
                ratio(_med(calls["b16"]), p16, "asyncio ping-pong"),
                key="b16",
            )
        )
        t.add(
            Row(
                sec,
                "floor: socketpair asyncio ping-pong, 16 in flight",
                "calls/s",
                calls["pp_b16"],
                key="pp_b16",
            )
        )

    sec = "Sustained fresh-process runs/s (hello world)"
    for c in concs:
        fm = _med(thr.get(f"floor_rps_{c}"))
        for kind, name in (("kg_warm", "kernelgate warm pool"), ("kg_cold", "kernelgate cold")):
            key = f"{kind}_rps_{c}"
            s = thr.get(key, [])
            note = na if kind == "kg_warm" and na else ""
            if key in FAILURES:
                runs = int(sum(thr.get(key + "_runs", [])))
                note = f"{len(FAILURES[key])} of {runs} runs FAILED ({FAILURES[key][0][:120]})"
            vs = ratio(_med(s), fm, "spawn floor")
            hc = _med(thr.get(key + "_hostcpu"))
            if s and hc is not None:
                vs += f"; host CPU {hc:.1f} ms/run"
            mc = _med(thr.get(key + "_machinecpu"))
            if s and mc is not None:
                vs += f"; whole machine {mc:.1f} ms CPU/run"
            t.add(Row(sec, f"{name}, concurrency {c}", "runs/s", s, vs, note, key=key))
            if kind == "kg_warm" and s:
                fc = _med(thr.get(f"floor_rps_{c}_machinecpu"))
                t.add(
                    Row(
                        sec,
                        f"{name}, concurrency {c}: whole-machine CPU per run",
                        "ms",
                        thr.get(key + "_machinecpu", []),
                        ratio(mc, fc, "spawn floor's CPU"),
                        key=key + "_machinecpu",
                    )
                )
                if thr.get(key + "_ourcpu"):
                    t.add(
                        Row(
                            sec,
                            f"{name}, concurrency {c}: CPU of kernelgate's processes per run",
                            "ms",
                            thr[key + "_ourcpu"],
                            "host + zygote + the run's processes, from /proc: "
                            "no kernel threads, no other processes",
                            key=key + "_ourcpu",
                        )
                    )
        t.add(
            Row(
                sec,
                f"floor: spawn `python -I -c 'import asyncio'`, concurrency {c}",
                "runs/s",
                thr.get(f"floor_rps_{c}", []),
                key=f"floor_rps_{c}",
            )
        )

    sec = "Memory of an idle child"
    fam = _med(memo.get("mem_floor_asyncio_pss"))
    procs = memo.get("mem_kg_tree_procs")
    slot_procs = memo.get("pool_slot_procs", "")
    for key, name, note in (
        ("mem_pool_leaf", "kernelgate pooled idle child: the waiting process", na),
        ("mem_pool_slot", f"kernelgate pooled idle child: all {slot_procs} of its processes", na),
        ("mem_pool_shared", "kernelgate pool: shared parent (the zygote)", na),
        (
            "mem_kg_waiting",
            "kernelgate cold child waiting for its program (spawn_child)",
            memo.get("mem_kg_waiting_error", ""),
        ),
        ("mem_kg_in_call", "kernelgate cold run blocked in a call: the program's process", ""),
        ("mem_kg_tree", f"kernelgate cold run blocked in a call: all {procs} processes", ""),
        ("mem_floor_asyncio", "floor: `python -I` + asyncio, blocked on a read", ""),
        ("mem_floor_bare", "floor: `python -I -S`, blocked on a read", ""),
    ):
        for suffix in ("pss", "rss"):
            s = memo.get(f"{key}_{suffix}", [])
            vs = ratio(_med(s), fam, "asyncio floor PSS") if suffix == "pss" else ""
            if not s and not note and key.startswith("mem_pool"):
                note = "no such process found"
            t.add(
                Row(
                    sec,
                    f"{name}: {suffix.upper()}",
                    "MiB",
                    s,
                    vs,
                    "" if s else note,
                    key=f"{key}_{suffix}",
                )
            )
    return t


def goals(t: Table, paths: Paths, concs: list[int]) -> list[tuple[str, str, str]]:
    """The goals of the "Speed, round two" issue (23), each against its floor in this run."""
    out: list[tuple[str, str, str]] = []

    def verdict(ok: bool | None) -> str:
        return "not measurable yet" if ok is None else ("MET" if ok else "NOT MET")

    goal = (
        "Warm one-call run: p50 <= 1.2 ms after idle, <= 1.5x the fork floor back to back, "
        "back-to-back p99 <= 3x p50"
    )
    warm, idle, fork = t.get("kg_warm_call"), t.get("kg_warm_call_idle"), t.median("floor_fork")
    if warm is None or not warm.samples:
        out.append((goal, f"{paths.pool_label}", verdict(None)))
    else:
        p50, p99 = warm.median, warm.pct(0.99)
        parts = [f"back to back p50 {p50:.2f} ms, p99 {p99:.2f} ms = {p99 / p50:.1f}x p50"]
        ok = p99 <= 3 * p50
        if fork:
            parts.append(f"fork floor {fork:.2f} ms: {p50 / fork:.2f}x")
            ok = ok and p50 <= 1.5 * fork
        if idle is not None and idle.samples:
            parts.append(
                f"after {IDLE_BEFORE_RUN * 1e3:.0f} ms idle p50 {idle.median:.2f} ms, "
                f"p99 {idle.pct(0.99):.2f} ms"
            )
            idle_fork = t.median("floor_zygote_fork_idle")
            if idle_fork:  # what waking from idle costs a bare fork on this machine
                parts.append(
                    f"a zygote-sized fork after the same idle {idle_fork:.2f} ms: "
                    f"{idle.median / idle_fork:.1f}x"
                )
            ok = ok and idle.median <= 1.2
        else:
            parts.append("after idle: not measured (--quick)")
            ok = False
        out.append((goal, "; ".join(parts) + f" (n={len(warm.samples)})", verdict(ok)))

    seq, floor = t.median("seq_child"), t.median("pp_ahost")
    out.append(
        (
            "Sequential call round trip <= 1.3x the asyncio-host/blocking-child socketpair "
            "floor (<= 60 us here)",
            (f"{seq:.0f} us median in the child" if seq else "unmeasured")
            + (f", floor {floor:.0f} us: {seq / floor:.2f}x" if seq and floor else ""),
            verdict(seq <= 1.3 * floor if seq and floor else None),
        )
    )
    b16 = t.median("b16")
    out.append(
        (
            ">= 40,000 calls/s with 16 in flight",
            f"{b16:,.0f} calls/s median" if b16 else "unmeasured",
            verdict(b16 >= 40_000 if b16 else None),
        )
    )
    cpu = [(t.median(f"kg_warm_rps_{c}_machinecpu"), c) for c in concs]
    rps = [(t.median(f"kg_warm_rps_{c}"), c) for c in concs]
    cpu2 = [(v, c) for v, c in cpu if v]
    rps2 = [(v, c) for v, c in rps if v]
    if cpu2 and rps2:
        low, lc = min(cpu2)
        best, bc = max(rps2)
        out.append(
            (
                "<= 6 ms of whole-machine CPU per warm run; >= 250 sustained warm runs/s",
                f"{low:.1f} ms CPU/run at concurrency {lc} ("
                + ", ".join(f"{v:.1f} at {c}" for v, c in cpu2)
                + f"); best {best:,.0f} runs/s (concurrency {bc})",
                verdict(low <= 6.0 and best >= 250),
            )
        )
    else:
        out.append(
            (
                "<= 6 ms of whole-machine CPU per warm run; >= 250 sustained warm runs/s",
                paths.pool_label,
                verdict(None),
            )
        )
    cold, floor_a = t.median("kg_cold_hello"), t.median("floor_asyncio")
    cold_call = t.median("kg_cold_call")
    cpu_kg, cpu_fl = t.median("cpu_child_kg_cold_hello"), t.median("cpu_child_floor_asyncio")
    if cold and floor_a:
        out.append(
            (
                "Cold stays <= 1.1x the `python -I -c 'import asyncio'` floor",
                f"hello {cold:.1f} ms vs floor {floor_a:.1f} ms = {cold / floor_a:.2f}x"
                + (f"; one call {cold_call / floor_a:.2f}x" if cold_call else "")
                + (
                    f"; child CPU {cpu_kg:.0f} ms vs floor {cpu_fl:.0f} ms = {cpu_kg / cpu_fl:.2f}x"
                    if cpu_kg and cpu_fl
                    else ""
                ),
                verdict(cold / floor_a <= 1.1),
            )
        )
    return out


# -- main ------------------------------------------------------------------------------------


async def async_main(args: argparse.Namespace, paths: Paths, results: dict[str, Any]) -> None:
    q = args.quick
    reps = args.reps
    cheap = max(100, 5 * reps)
    results["lat"] = await bench_latency(paths, reps, cheap, extras=not q)
    try:
        results["calls"] = await bench_calls(
            paths, seq_runs=1 if q else 3, seq_n=500 if q else 1000, b16_runs=1 if q else 3
        )
    except Exception as exc:
        results["calls"] = f"error: {type(exc).__name__}: {str(exc)[:150]}"
    lat = {k: statistics.median(v.samples) for k, v in results["lat"].items() if v.samples}
    results["thr"] = await bench_throughput(
        paths, results["concs"], batches=1 if q else 3, seconds=0.3 if q else 1.5, latency=lat
    )
    results["mem"] = await bench_memory(paths, 2 if q else 5)
    try:
        results["imports"] = await bench_imports(paths)
    except Exception as exc:
        results["imports"] = f"error: {type(exc).__name__}: {exc}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer repetitions (under ~40 s)")
    ap.add_argument("--reps", type=int, default=None, help="rounds of the cold latency rows")
    ap.add_argument("--json", metavar="PATH", help="also write every row as JSON here")
    args = ap.parse_args(argv)
    global QUICK
    QUICK = args.quick
    if args.reps is None:
        args.reps = 6 if args.quick else 30
    if args.reps < 1:
        ap.error("--reps must be at least 1")
    t_start = time.perf_counter()
    info = machine()
    paths = detect_paths()
    concs = [1, 2, 8, 32]
    results: dict[str, Any] = {"concs": concs}
    log(f"kernelgate paths: cold spawn; warm pool: {paths.pool_label}")

    # The peers that own their event loop (jupyter_client's blocking client) run first,
    # outside ours; then everything kernelgate in one loop.
    warm_reps = 30 if args.quick else max(100, 5 * args.reps)
    ik = bench_ipykernel(cold_reps=max(2, args.reps // 6), warm_reps=warm_reps)
    monty = bench_monty(warm_reps)
    asyncio.run(async_main(args, paths, results))

    table = build_table(
        paths, results["lat"], ik, monty, results["calls"], results["thr"], results["mem"], concs
    )
    goal_rows = goals(table, paths, concs)
    elapsed = time.perf_counter() - t_start
    info["loadavg_end"] = loadavg()

    out = io.StringIO()
    w = out.write
    w("# kernelgate benchmarks\n\n")
    w(
        f"- CPU: {info['cpu']}, {info['cores']} cores ({info['cores_usable']} usable), "
        f"{info['memory']} RAM\n"
    )
    w(f"- Kernel: {info['kernel']}\n")
    w(f"- Python: {info['python']} at `{info['executable']}` (every child runs this binary)\n")
    w(
        f"- kernelgate {info['kernelgate']}; warm pool: {paths.pool_label}; "
        f"isolation of a default run: {paths.isolation or 'unknown'}\n"
    )
    w(f"- Load average at start / end: {info['loadavg_start']} / {info['loadavg_end']}\n")
    busy = float(info["loadavg_start"].split()[0]) if info["loadavg_start"][0].isdigit() else 0
    if busy > info["cores_usable"] / 2:
        w(
            f"- **Warning: the machine was busy when this started (1-min load {busy:.1f} on "
            f"{info['cores_usable']} cores): absolute times are inflated, ratios less so.**\n"
        )
    w(
        f"- Mode: {'--quick' if args.quick else 'default'}, --reps {args.reps}; "
        f"took {elapsed:.0f} s\n\n"
    )
    w(table.render() + "\n\n")
    w(
        "Ratios compare medians. p99 is shown for rows with at least 100 samples. "
        "Latency is host-side wall time from the call to its return, cold rows and floors "
        "measured in interleaved rounds.\n\n"
    )
    w("## Goals\n\n")
    for goal, measured, verdict in goal_rows:
        w(f"- **{verdict}**: {goal}: {measured}\n")
    w("\n")
    imports = results.get("imports")
    if isinstance(imports, dict):
        w(render_imports(imports) + "\n")
    else:
        w(f"## What a cold child imports\n\n{imports}\n")
    if isinstance(results["mem"], dict) and results["mem"].get("pool_procs"):
        procs = results["mem"]["pool_procs"]
        shared = sum(1 for p in procs if p["shared"])
        w(
            f"\nWarm pool processes found: {len(procs)} ({shared} shared, the rest in "
            f"slots of {results['mem'].get('pool_slot_procs', '?')} per pooled child).\n"
        )
    sys.stdout.write(out.getvalue())
    sys.stdout.flush()

    if args.json:
        doc = {
            "machine": info,
            "mode": {"quick": args.quick, "reps": args.reps, "elapsed_s": elapsed},
            "warm_pool": paths.pool_label,
            "rows": [r.to_dict() for r in table.rows],
            "goals": [{"goal": g, "measured": m, "verdict": v} for g, m, v in goal_rows],
            "imports": imports if isinstance(imports, dict) else str(imports),
        }
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
