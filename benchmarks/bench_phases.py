#!/usr/bin/env python3
"""Where a warm one-call run's time goes, phase by phase, for the median and the slow tail.

    python benchmarks/bench_phases.py [--runs 300] [--idle-runs 30] [--idle 1.0] [--bursts 10]
                                      [--burst 6] [--json out.json]

Issue 23's first step: measure before changing. A ``Gateway(pool_size=4)`` at the default
sandbox level runs ``return await tools.echo(1)`` ``--runs`` times back to back (each run's
teardown awaited before the next, as ``benchmarks/run.py`` does), then ``--idle-runs`` times
after ``--idle`` seconds of nothing, then ``--runs`` times back to back without awaiting
each teardown (as an agent host would), then ``--bursts`` bursts of ``--burst`` runs after
the idle spell (more runs than the pool holds: the refill is then on the path). Every run
gets a host-side timeline, and the script prints, per phase, the median run's figure, the
p90 run's and the mean over the slowest 1% of runs (by the latency the caller sees), and
each phase's own median, next to the floors measured in the same process.

The timestamps come from wrappers this script installs on kernelgate's host-side methods
(``Run``, ``WarmPool``, ``Zygote``, ``RunCgroup``, ``ChildChannel``, ``Teardown``): nothing
in kernelgate changes, and nothing is recorded unless this script runs. The wrappers cost
a few microseconds per run (two ``perf_counter_ns`` and a list append per boundary).

Since issue 23's pool change a child is ready once it has parked (``pool.booted``), not at
the zygote's ``Forked``: the script also wraps ``booted``, shows how long the child taken had
been parked, and counts a refill as in flight from its fork request until its child parked
(against older code, which has no ``booted``, only the fork is counted).

Also measured here, host side: the write of a process into a run cgroup's ``cgroup.procs``
(what the zygote's child does for itself as it boots), back to back and after the idle
spell, per controller; garbage collections (``gc.callbacks``) inside each run; and from
``/proc/PID/schedstat`` the CPU time and the run-queue wait (runnable, not running) during
each run of the host's event-loop thread, of the run's own processes (read at its reply, a
read shown as its own row and kept out of the phases) and of the rest of the pool (the
zygote and children booting).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import gc
import json
import os
import signal
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
    sys.path.insert(0, REPO)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from run import (  # noqa: E402  (benchmarks/run.py: the floors, the bindings, the load)
    BINDINGS,
    ONE_CALL,
    fork_exit_wait,
    loadavg,
    zygote_fork_floor,
)

from kernelgate import Gateway  # noqa: E402
from kernelgate.gateway import cgroups as cg_mod  # noqa: E402
from kernelgate.gateway import channel as ch_mod  # noqa: E402
from kernelgate.gateway import pool as pool_mod  # noqa: E402
from kernelgate.gateway import run as run_mod  # noqa: E402
from kernelgate.gateway import teardown as td_mod  # noqa: E402
from kernelgate.wire.events import CallReply, CallRequest, ExecuteReply  # noqa: E402

now = time.perf_counter_ns


# -- the recorder ------------------------------------------------------------------------------


class Rec:
    """One run's timeline: named timestamps (ns) and a few facts."""

    def __init__(self) -> None:
        self.t: dict[str, int] = {}
        self.facts: dict[str, Any] = {}

    def mark(self, name: str, t: int | None = None) -> None:
        self.t.setdefault(name, now() if t is None else t)


class Recorder:
    def __init__(self) -> None:
        self.current: Rec | None = None  # the run in progress (runs are sequential here)
        self.by_teardown: dict[int, Rec] = {}
        self.forks: list[tuple[int, int, int]] = []  # (start, end, pid) of every zygote fork
        self.forked_at: dict[int, int] = {}  # pid -> when its Forked reply arrived
        self.booted_at: dict[int, int] = {}  # pid -> when the pool saw it parked
        self.gcs: list[tuple[int, int]] = []
        self.pool: Any = None  # the gateway's WarmPool, seen at its first acquire
        self.channel: Any = None  # the current run's ChildChannel
        self._gc_start = 0

    def mark(self, name: str) -> None:
        if self.current is not None:
            self.current.mark(name)

    def on_gc(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._gc_start = now()
        else:
            self.gcs.append((self._gc_start, now()))


R = Recorder()


def wrap_async(
    cls: Any, name: str, before: Callable[..., None], after: Callable[..., None]
) -> None:
    orig = getattr(cls, name)

    @functools.wraps(orig)
    async def wrapper(self: Any, *a: Any, **kw: Any) -> Any:
        before(self, *a)
        try:
            result = await orig(self, *a, **kw)
        finally:
            pass
        after(self, result)
        return result

    setattr(cls, name, wrapper)


def wrap_sync(cls: Any, name: str, before: Callable[..., None], after: Callable[..., None]) -> None:
    orig = getattr(cls, name)

    @functools.wraps(orig)
    def wrapper(self: Any, *a: Any, **kw: Any) -> Any:
        before(self, *a)
        result = orig(self, *a, **kw)
        after(self, result)
        return result

    setattr(cls, name, wrapper)


def _nop(*_: Any) -> None:
    return None


def install() -> None:
    """The wrappers: each marks a boundary of the current run (or a teardown's run)."""
    m = R.mark

    # Run(): from Gateway.run's entry to Run._execute.
    wrap_async(run_mod.Run, "_execute", lambda s: m("execute"), _nop)

    def acq_before(pool: Any, *a: Any) -> None:
        m("acquire")
        R.pool = pool
        if R.current is not None:
            R.current.facts["ready_at_acquire"] = pool.ready
            R.current.facts["filling_at_acquire"] = pool._filling()

    def acq_after(pool: Any, child: Any) -> None:
        m("acquired")
        if R.current is not None and child is not None:
            born = R.forked_at.get(child.pid)
            if born is not None:
                R.current.facts["child_age_ms"] = (now() - born) / 1e6
            parked = R.booted_at.get(child.pid)
            if parked is not None:
                R.current.facts["child_parked_ms"] = (now() - parked) / 1e6
        if R.current is not None and child is not None:
            R.current.facts["child_pid"] = child.pid

    wrap_async(pool_mod.WarmPool, "acquire", acq_before, acq_after)
    wrap_sync(cg_mod.RunCgroup, "begin", lambda s, *a: m("cg_begin"), lambda s, r: m("cg_begun"))
    wrap_sync(run_mod.Run, "_open", lambda s, *a: m("open"), _nop)
    wrap_sync(td_mod.Teardown, "watch", _nop, lambda s, r: m("watched"))
    wrap_sync(run_mod.Run, "_send_program", lambda s, *a: m("send"), lambda s, r: m("sent"))

    def control_before(ch: Any, *a: Any) -> None:
        rec = R.current
        if rec is None or ch is not R.channel:
            return  # another run's channel (a teardown draining it while this one runs)
        rec.mark("first_wake")
        rec.facts["wakeups"] = rec.facts.get("wakeups", 0) + 1

    wrap_sync(ch_mod.ChildChannel, "_on_control", control_before, _nop)

    orig_handle = run_mod.Run._handle

    def handle(self: Any, event: Any) -> None:
        rec = R.current
        if rec is not None and self._channel is R.channel:
            t = now()
            rec.mark("first_event", t)
            if type(event) is CallRequest:
                rec.mark("call_req", t)
            elif type(event) is ExecuteReply:
                rec.mark("reply", t)
        orig_handle(self, event)

    run_mod.Run._handle = handle  # type: ignore[method-assign]

    orig_send = ch_mod.ChildChannel.send

    def send(self: Any, event: Any) -> None:
        orig_send(self, event)
        if type(event) is CallReply and self is R.channel:
            m("call_reply_sent")

    ch_mod.ChildChannel.send = send  # type: ignore[method-assign]

    def measured(run: Any, _: Any) -> None:
        # The run's processes are still there at its reply (they exit right after): take
        # their CPU figures now, outside the phases (the bench's own reads, "stat_done").
        m("measured")
        rec = R.current
        if rec is not None and run.child is not None and run._channel is R.channel:
            pids = {run.child.pid} | set(run._cgroup.pids() if run._cgroup is not None else ())
            rec.facts["run_end_stat"] = snapshot(dict.fromkeys(pids, ""))
        m("stat_done")

    wrap_sync(run_mod.Run, "_measure", lambda s: m("measure"), measured)

    def open_after(run: Any, end: Any) -> None:
        if R.current is not None:
            R.by_teardown[id(end)] = R.current
            R.channel = run._channel

    wrap_sync(run_mod.Run, "_open", _nop, open_after)

    # Teardown (after the reply; run.py awaits it before the next run).
    def td(name: str) -> Callable[..., None]:
        def mark(end: Any, *_: Any) -> None:
            rec = R.by_teardown.get(id(end))
            if rec is not None:
                rec.mark(name)

        return mark

    wrap_sync(
        td_mod.Teardown, "_on_exit", _nop, lambda s, r: td("exited")(s) if s.exited.done() else None
    )
    wrap_async(td_mod.Teardown, "settle", td("settle"), td("settled"))
    wrap_async(td_mod.Teardown, "release", td("release"), td("released"))

    def recycle_before(pool: Any, cgroup: Any) -> None:
        pass

    # The pool's refill: every zygote fork, and when its child was handed over.
    orig_fork = pool_mod.Zygote.fork

    async def fork(self: Any, *a: Any, **kw: Any) -> Any:
        t0 = now()
        child = await orig_fork(self, *a, **kw)
        t1 = now()
        R.forks.append((t0, t1, child.pid))
        R.forked_at[child.pid] = t1
        return child

    pool_mod.Zygote.fork = fork  # type: ignore[method-assign]

    # A child is ready once booted and parked (its byte on fd 3, issue 23): the refill is
    # in flight from its fork request until then.
    orig_booted = getattr(pool_mod, "booted", None)
    if orig_booted is not None:

        async def booted(child: Any, timeout: float) -> bool:
            ok = await orig_booted(child, timeout)
            t1 = now()
            R.booted_at[child.pid] = t1
            for i, (t0, _, pid) in enumerate(R.forks):
                if pid == child.pid:
                    R.forks[i] = (t0, t1, pid)
            return ok

        pool_mod.booted = booted
    wrap_async(pool_mod.WarmPool, "recycle_cgroup", td_rc("recycle"), td_rc("recycled"))
    gc.callbacks.append(R.on_gc)


def td_rc(name: str) -> Callable[..., None]:
    """recycle_cgroup runs inside a teardown's settle: the run whose settle is open."""

    def mark(pool: Any, *_: Any) -> None:
        for rec in reversed(list(R.by_teardown.values())[-4:]):
            if "settle" in rec.t and "settled" not in rec.t:
                rec.mark(name)
                return

    return mark


# -- CPU and run-queue wait per process (/proc/PID/schedstat: ns on CPU, ns runnable) ------------


def schedstat(path: str) -> tuple[int, int] | None:
    try:
        with open(path, "rb") as f:
            on_cpu, waiting, _ = f.read().split()
    except (OSError, ValueError):
        return None
    return int(on_cpu), int(waiting)


def pool_pids(pool: Any) -> dict[int, str]:
    """The pool's processes: each ready child's cgroup members (a child, its namespace's
    init, ...) and the zygote, labelled by the pooled child they belong to."""
    found: dict[int, str] = {}
    zygote = pool._zygote
    if zygote is not None:
        found[zygote.pid] = "zygote"
    for child in pool._ready:
        found[child.pid] = str(child.pid)
        if child.cgroup is not None:
            for pid in child.cgroup.pids():
                found.setdefault(pid, str(child.pid))
    return found


def snapshot(pids: dict[int, str]) -> dict[int, tuple[int, int]]:
    out = {}
    for pid in pids:
        got = schedstat(f"/proc/{pid}/schedstat")
        if got is not None:
            out[pid] = got
    return out


# -- a run, measured ---------------------------------------------------------------------------


async def one_run(gw: Gateway, wait: bool = True) -> Rec:
    rec = Rec()
    pool = R.pool
    pids = pool_pids(pool) if pool is not None else {}
    before = snapshot(pids)
    host0 = schedstat("/proc/thread-self/schedstat")
    R.current = rec
    rec.mark("call")
    r = await gw.run(ONE_CALL)
    rec.mark("returned")
    R.current = None
    host1 = schedstat("/proc/thread-self/schedstat")
    mine_end: dict[int, tuple[int, int]] = rec.facts.pop("run_end_stat", {})
    if pool is not None:
        # The run's own processes at its reply; the rest of the pool (and children forked
        # meanwhile) now.
        born = {pid for pid, t in R.forked_at.items() if t >= rec.t["call"]}
        others = snapshot(dict.fromkeys((set(before) | born) - set(mine_end), ""))
        run_cpu = run_wait = other_cpu = other_wait = 0
        matched = 0
        for pid, (cpu1, wait1) in mine_end.items():
            # A process not seen before the run was made during it (or while its child
            # was still booting): its whole life counts.
            cpu0, wait0 = before.get(pid, (0, 0))
            matched += 1
            run_cpu += cpu1 - cpu0
            run_wait += wait1 - wait0
        rec.facts["run_pids"] = f"{len(set(mine_end) & set(before))}/{len(mine_end)}"
        for pid, (cpu1, wait1) in others.items():
            cpu0, wait0 = before.get(pid, (0, 0))
            other_cpu += cpu1 - cpu0
            other_wait += wait1 - wait0
        if matched and run_cpu > 0:  # 0: the program had exited before _measure (lost)
            rec.facts["run_cpu_ms"] = run_cpu / 1e6
            rec.facts["run_wait_ms"] = run_wait / 1e6
        rec.facts["pool_cpu_ms"] = other_cpu / 1e6
        rec.facts["pool_wait_ms"] = other_wait / 1e6
    if host0 is not None and host1 is not None:
        rec.facts["host_thread_cpu_ms"] = (host1[0] - host0[0]) / 1e6
        rec.facts["host_thread_wait_ms"] = (host1[1] - host0[1]) / 1e6
    if wait:
        await gw.wait_finished()
        rec.mark("finished")
    warm = (r.usage or {}).get("warm")
    if not r.ok or not warm:
        rec.facts["bad"] = f"{r.status} warm={warm}: {r.error}"
    gcs = [(a, b) for a, b in R.gcs if a >= rec.t["call"] and b <= rec.t["returned"]]
    rec.facts["gc_ms"] = sum(b - a for a, b in gcs) / 1e6
    rec.facts["gcs"] = len(gcs)
    lo, hi = rec.t["call"], rec.t["returned"]
    overlap = sum(max(0, min(b, hi) - max(a, lo)) for a, b, _ in R.forks)
    rec.facts["fork_overlap_ms"] = overlap / 1e6  # a refill's fork request in flight meanwhile
    return rec


#: (label, from, to): the critical path of a run as the caller sees it, then its teardown.
PHASES: list[tuple[str, str, str]] = [
    ("gw.run() -> Run._execute (plan, Run())", "call", "execute"),
    ("Run._execute -> pool.acquire()", "execute", "acquire"),
    ("pool.acquire()", "acquire", "acquired"),
    ("cgroup.begin() (pids.max, memory limit)", "cg_begin", "cg_begun"),
    ("acquired -> _open (rest of _start_child)", "cg_begun", "open"),
    ("_open + watch (channel, readers)", "open", "watched"),
    ("watch -> send (comm_open+execute_request)", "watched", "send"),
    ("send comm_open + execute_request", "send", "sent"),
    ("child: sent -> first fd-3 wakeup", "sent", "first_wake"),
    ("first wakeup -> CallRequest handled", "first_wake", "call_req"),
    ("call: host (thread hop, echo, reply sent)", "call_req", "call_reply_sent"),
    ("child: call reply -> execute_reply", "call_reply_sent", "reply"),
    ("reply -> _measure (/proc, memory)", "reply", "measure"),
    ("_measure", "measure", "measured"),
    ("measured -> gw.run() returns (result)", "stat_done", "returned"),
    ("TOTAL as the caller sees it", "call", "returned"),
    ("  of which this bench's own /proc reads", "measured", "stat_done"),
    ("teardown: return -> child exited", "returned", "exited"),
    ("teardown: exited -> settle", "exited", "settle"),
    ("teardown: settle (reap, recycle cgroup)", "settle", "settled"),
    ("  of which recycle_cgroup", "recycle", "recycled"),
    ("teardown: settled -> released (run dir)", "settled", "released"),
    ("teardown: return -> finished", "returned", "finished"),
]
FACTS = [
    ("ready children at acquire", "ready_at_acquire"),
    ("age of the child taken (ms since Forked)", "child_age_ms"),
    ("parked for (ms since booted, issue 23)", "child_parked_ms"),
    ("refill fork (+ boot, issue 23) in flight during run (ms)", "fork_overlap_ms"),
    ("GC inside the run (ms)", "gc_ms"),
    ("fd-3 wakeups", "wakeups"),
    ("host main thread: CPU (ms)", "host_thread_cpu_ms"),
    ("host main thread: runnable, not running (ms)", "host_thread_wait_ms"),
    ("the run's processes: CPU (ms)", "run_cpu_ms"),
    ("the run's processes: runnable, not running (ms)", "run_wait_ms"),
    ("other pool processes (zygote, booting): CPU (ms)", "pool_cpu_ms"),
    ("other pool processes: runnable, not running (ms)", "pool_wait_ms"),
]


def span(rec: Rec, a: str, b: str) -> float | None:
    if a in rec.t and b in rec.t:
        return (rec.t[b] - rec.t[a]) / 1e6
    return None


def summarize(recs: list[Rec]) -> dict[str, dict[str, float | None]]:
    """Per phase: the median run's, the p90 run's, and the mean of the slowest 1% (by total)."""
    ordered = sorted(recs, key=lambda r: span(r, "call", "returned") or 0.0)
    n = len(ordered)
    med = ordered[n // 2]
    p90 = ordered[min(n - 1, int(n * 0.9))]
    tail = ordered[-max(1, n // 100) :]
    out: dict[str, dict[str, float | None]] = {}

    def mean(values: list[float | None]) -> float | None:
        got = [v for v in values if v is not None]
        return statistics.fmean(got) if got else None

    def all_median(values: list[float | None]) -> float | None:
        got = [v for v in values if v is not None]
        return statistics.median(got) if got else None

    for label, a, b in PHASES:
        out[label] = {
            "median_run": span(med, a, b),
            "p90_run": span(p90, a, b),
            "slowest_1pct": mean([span(r, a, b) for r in tail]),
            "phase_median": all_median([span(r, a, b) for r in recs]),
        }
    for label, key in FACTS:
        out[label] = {
            "median_run": med.facts.get(key),
            "p90_run": p90.facts.get(key),
            "slowest_1pct": mean([r.facts.get(key) for r in tail]),
            "phase_median": all_median([r.facts.get(key) for r in recs]),
        }
    return out


def fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}"


def table(title: str, s: dict[str, dict[str, float | None]], n: int) -> str:
    lines = [
        f"\n### {title} ({n} runs)\n",
        "| phase (ms) | median run | p90 run | slowest 1% (mean) | phase's own median |",
        "|---|---:|---:|---:|---:|",
    ]
    for label, row in s.items():
        lines.append(
            f"| {label} | {fmt(row['median_run'])} | {fmt(row['p90_run'])} | "
            f"{fmt(row['slowest_1pct'])} | {fmt(row['phase_median'])} |"
        )
    return "\n".join(lines)


def tail_detail(recs: list[Rec], k: int) -> str:
    """The slowest runs one by one: their three largest phases."""
    ordered = sorted(recs, key=lambda r: span(r, "call", "returned") or 0.0)[-k:]
    lines = []
    for r in reversed(ordered):
        parts = []
        for label, a, b in PHASES[:15]:  # the critical path's phases, not the total
            v = span(r, a, b)
            if v is not None:
                parts.append((v, label))
        top = ", ".join(f"{lab.split(' (')[0]} {v:.2f}" for v, lab in sorted(parts)[-3:][::-1])
        f = r.facts
        lines.append(
            f"- {span(r, 'call', 'returned'):.2f} ms: {top}; ready={f.get('ready_at_acquire')}"
            f" age={f.get('child_age_ms', 0):.1f}ms fork_overlap={f.get('fork_overlap_ms'):.2f}"
            f" gc={f.get('gc_ms'):.2f} host_wait={f.get('host_thread_wait_ms', 0):.2f}"
            f" run_cpu={f.get('run_cpu_ms', 0):.2f} run_wait={f.get('run_wait_ms', 0):.2f}"
            f" pool_cpu={f.get('pool_cpu_ms', 0):.2f}"
        )
    return "\n".join(lines)


# -- floors and the cgroup.procs probe ---------------------------------------------------------


def procs_write_probe(reps: int, idle: float, idle_reps: int) -> dict[str, list[float]]:
    """ms to write a parked process into a run cgroup's cgroup.procs, per controller: back
    to back, and after ``idle`` seconds of nothing (the issue's suspect)."""
    roots = cg_mod.CgroupRoots.find()
    out: dict[str, list[float]] = {}
    if roots is None:
        return out
    cgroup = cg_mod.RunCgroup(roots, f"phases-probe-{os.getpid()}", 64)
    try:
        for mode, n, pause in (("b2b", reps, 0.0), ("idle", idle_reps, idle)):
            for _ in range(n):
                if pause:
                    time.sleep(pause)
                pid = os.fork()
                if pid == 0:
                    signal.pause()
                    os._exit(0)
                for order, path in enumerate(cgroup.paths):
                    # /sys/fs/cgroup/<controller>/...: the first write is the one that waits
                    ctl = f"{order + 1}. {path.split(os.sep)[4]}"
                    t0 = now()
                    with open(os.path.join(path, "cgroup.procs"), "w") as f:
                        f.write(str(pid))
                    out.setdefault(f"{mode} {ctl}", []).append((now() - t0) / 1e6)
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
    finally:
        cgroup.settle_blocking()
    return out


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(len(s) * q))]


# -- main --------------------------------------------------------------------------------------


async def measure(args: argparse.Namespace) -> dict[str, list[Rec]]:
    out: dict[str, list[Rec]] = {"b2b": [], "idle": [], "nowait": [], "burst": []}
    async with Gateway(bindings=BINDINGS, pool_size=4) as gw:
        for _ in range(5):  # first runs: imports, the zygote, the pool filling
            await one_run(gw)
        await asyncio.sleep(0.5)
        R.forks.clear()
        log(f"{args.runs} warm one-call runs back to back (teardown awaited, as run.py)")
        for _ in range(args.runs):
            out["b2b"].append(await one_run(gw))
        log(f"{args.idle_runs} warm one-call runs after {args.idle}s idle")
        for _ in range(args.idle_runs):
            await asyncio.sleep(args.idle)
            out["idle"].append(await one_run(gw))
        await asyncio.sleep(0.5)
        log(f"{args.runs} warm one-call runs back to back, teardown not awaited")
        for _ in range(args.runs):
            out["nowait"].append(await one_run(gw, wait=False))
        await gw.wait_finished()
        log(f"{args.bursts} bursts of {args.burst} runs (teardown not awaited) after idle")
        for _ in range(args.bursts):
            await gw.wait_finished()
            await asyncio.sleep(args.idle)
            for i in range(args.burst):
                rec = await one_run(gw, wait=False)
                rec.facts["position"] = i + 1
                out["burst"].append(rec)
    return out


def log(msg: str) -> None:
    print(f"# {msg}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=300, help="back-to-back runs (300)")
    p.add_argument("--idle-runs", type=int, default=30, help="runs after an idle spell (30)")
    p.add_argument("--idle", type=float, default=1.0, help="seconds of idle before each (1.0)")
    p.add_argument("--burst", type=int, default=6, help="runs per burst after idle (6)")
    p.add_argument("--bursts", type=int, default=10, help="bursts after idle (10)")
    p.add_argument("--tail", type=int, default=6, help="slowest runs listed one by one (6)")
    p.add_argument("--json", help="write the timelines here")
    args = p.parse_args(argv)
    load0 = loadavg()
    install()
    recs = asyncio.run(measure(args))
    fork_floor = [fork_exit_wait() * 1e3 for _ in range(200)]
    zfork = zygote_fork_floor(200)
    probe = procs_write_probe(100, args.idle, min(args.idle_runs, 10))
    load1 = loadavg()
    print(f"load average: start {load0}, end {load1}; cpus {os.cpu_count()}")
    print(
        f"floors: fork+exit+wait p50 {statistics.median(fork_floor):.3f} ms, p99 "
        f"{pct(fork_floor, 0.99):.3f}; zygote-sized fork+exit+wait p50 "
        f"{statistics.median(zfork):.3f} ms, p99 {pct(zfork, 0.99):.3f}"
    )
    for key, values in probe.items():
        print(
            f"cgroup.procs write ({key}): p50 {statistics.median(values):.3f} ms,"
            f" p90 {pct(values, 0.9):.3f}, max {max(values):.3f} (n={len(values)})"
        )
    for mode, title in (
        ("b2b", "back to back, teardown awaited"),
        ("idle", f"after {args.idle}s idle"),
        ("nowait", "back to back, teardown not awaited"),
        ("burst", f"bursts of {args.burst} after {args.idle}s idle"),
    ):
        rs = recs[mode]
        bad = [r.facts["bad"] for r in rs if "bad" in r.facts]
        totals = [span(r, "call", "returned") or 0.0 for r in rs]
        print(
            f"\n{title}: p50 {statistics.median(totals):.3f} ms, p90 {pct(totals, 0.9):.3f},"
            f" p99 {pct(totals, 0.99):.3f}, max {max(totals):.3f}"
            + (f"; {len(bad)} not warm/ok: {bad[:2]}" if bad else "")
        )
        print(table(title, summarize(rs), len(rs)))
        if mode == "burst":
            for i in range(1, args.burst + 1):
                at = [r for r in rs if r.facts.get("position") == i]
                tot = [span(r, "call", "returned") or 0.0 for r in at]
                acq = [span(r, "acquire", "acquired") or 0.0 for r in at]
                rdy = [r.facts.get("ready_at_acquire", 0) for r in at]
                print(
                    f"burst run {i}: total p50 {statistics.median(tot):.2f} max {max(tot):.2f}"
                    f" ms; acquire p50 {statistics.median(acq):.2f} max {max(acq):.2f} ms;"
                    f" ready at acquire min {min(rdy)}"
                )
        print(f"\nslowest {args.tail} ({title}):")
        print(tail_detail(rs, args.tail))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {mode: [{"t": r.t, "facts": r.facts} for r in rs] for mode, rs in recs.items()}
                | {"probe": probe, "fork_floor": fork_floor, "zygote_fork": zfork},
                f,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
