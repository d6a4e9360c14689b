#!/usr/bin/env python3
"""What the launcher costs a cold Node child: one more exec (medians of repeated rounds).

    python benchmarks/bench_launcher.py [--rounds 21] [--node node] [--json out.json]

Each row is spawn to exit of a child that does nothing (``process.exit`` at once), with
fds 0-3 as a run's child has them:

* the floors: a bare ``node -e 0`` and ``python -I -S -c pass`` (the launcher's interpreter
  with nothing to do);
* ``node`` unconfined, the same empty script from a file (what the launcher execs);
* through the launcher (``spawn_launched_child``) at each level the machine has, with a
  run directory, the run's uid (a root host) and its cgroup, as a run makes them.

"launcher cost" is the launched row minus "run setup + node" (the same uid, run directory
and cgroup around an unconfined ``node``): the interpreter, its imports, the sandbox and
the extra exec. Standard library and kernelgate only; every child is real.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

from kernelgate.gateway.cgroups import RunCgroup  # noqa: E402
from kernelgate.gateway.launch import probe_node, spawn_launched_child  # noqa: E402
from kernelgate.gateway.process import (  # noqa: E402
    ChildProcess,
    make_run_dir,
    remove_tree,
    start_child,
)
from kernelgate.gateway.runids import allocate_ids  # noqa: E402
from kernelgate.gateway.sandbox import LEVELS, plan_sandbox, probe_support  # noqa: E402
from kernelgate.model.limits import Limits  # noqa: E402


def _wait(child: ChildProcess) -> None:
    os.waitpid(child.pid, 0)
    child.reaped = True
    child.close()


def _plain(argv: list[str]) -> float:
    t = time.perf_counter()
    subprocess.run(argv, stdin=subprocess.DEVNULL, check=True, env={"PATH": "/usr/bin:/bin"})
    return time.perf_counter() - t


def _launched(level: str | None, script: str, scripts: str, base: str) -> float:
    """A run's setup (uid, run directory, cgroup), then the launcher at ``level`` (None:
    the same setup around an unconfined ``node``, the row the launcher's cost is read
    against)."""
    node = probe_node()
    limits = Limits()
    plan = plan_sandbox(level or "process", limits, probe_support(sys.executable), (scripts,))
    run_id = uuid.uuid4().hex[:12]
    ids = allocate_ids()
    run_dir = make_run_dir(base, run_id, ids)
    cgroup = None
    try:
        t = time.perf_counter()
        if plan.cgroups is not None:
            cgroup = RunCgroup(plan.cgroups, run_id, plan.pids_max(limits.max_processes))
            cgroup.begin(plan.pids_max(limits.max_processes), limits.memory_bytes)
        command = node.command([script], max_old_space_mib=256)
        if level is None:
            child = start_child(command.executable, list(command.argv), {"PATH": "/usr/bin:/bin"})
            if cgroup is not None:
                cgroup.attach(child.pid)
            _wait(child)
            return time.perf_counter() - t
        child = spawn_launched_child(
            sys.executable,
            {"PATH": "/usr/bin:/bin"},
            run_dir,
            plan.child_options(ids),
            command,
            before_start=(lambda c: cgroup.attach(c.pid)) if cgroup is not None else None,
        )
        _wait(child)
        elapsed = time.perf_counter() - t
    finally:
        if cgroup is not None:
            cgroup.settle_blocking()
        remove_tree(run_dir)
        if ids is not None:
            ids.release()
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--json", help="also write the medians here")
    args = parser.parse_args()
    node = probe_node()
    support = probe_support(sys.executable)
    base = tempfile.mkdtemp(prefix="kg-bench-launcher-")
    os.chmod(base, 0o755)
    scripts = tempfile.mkdtemp(prefix="scripts-", dir=base)
    os.chmod(scripts, 0o755)
    script = os.path.join(scripts, "empty.js")
    with open(script, "w") as f:
        f.write("process.exit(0);\n")
    os.chmod(script, 0o644)
    rows: dict[str, list[float]] = {
        "node -e 0 (bare)": [],
        "python -I -S -c pass": [],
        "node empty.js (unconfined)": [],
        "run setup + node empty.js (unconfined)": [],
    }
    levels = [level for level in LEVELS if not support.missing(level)]
    for level in levels:
        rows[f"launcher -> node empty.js, {level}"] = []
    for _ in range(args.rounds):  # interleaved: load drifts hit every row alike
        rows["node -e 0 (bare)"].append(_plain([node.executable, "-e", "0"]))
        rows["python -I -S -c pass"].append(_plain([sys.executable, "-I", "-S", "-c", "pass"]))
        rows["node empty.js (unconfined)"].append(
            _plain([node.executable, "--openssl-config=/dev/null", script])
        )
        rows["run setup + node empty.js (unconfined)"].append(
            _launched(None, script, scripts, base)
        )
        for level in levels:
            rows[f"launcher -> node empty.js, {level}"].append(
                _launched(level, script, scripts, base)
            )
    remove_tree(base)
    medians = {name: statistics.median(times) * 1000 for name, times in rows.items()}
    floor = medians["run setup + node empty.js (unconfined)"]
    print(
        f"node {'.'.join(map(str, node.version))}, {args.rounds} rounds, "
        f"load {os.getloadavg()[0]:.2f}"
    )
    print("| child | median ms | launcher cost ms |")
    print("| --- | ---: | ---: |")
    for name, ms in medians.items():
        cost = f"{ms - floor:+.1f}" if name.startswith("launcher") else ""
        print(f"| {name} | {ms:.1f} | {cost} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(medians, f, indent=1)


if __name__ == "__main__":
    main()
