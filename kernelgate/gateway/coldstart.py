"""A run's cold child: its uid, run directory and cgroup, then the child, in that order.

The run's cgroup exists before its child does and the child enters it before it runs
anything (``CodeRuntime.spawn``'s ``before_start``): a launched runtime's sandbox and
everything a program forks or fills are counted from the start.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from .cgroups import RunCgroup
from .outcome import Verdict, interpreter_failed, sandbox_unavailable
from .plan import RunPlan
from .process import ChildProcess, make_run_dir, remove_tree
from .runids import allocate_ids

__all__ = ["ColdStart", "start_cold"]


@dataclass(frozen=True)
class ColdStart:
    """A started cold child, its run directory, and the cgroup it is in (None: none)."""

    child: ChildProcess
    run_dir: str
    cgroup: RunCgroup | None


def start_cold(plan: RunPlan, run_id: str, max_pids: int, memory_bytes: int) -> ColdStart | Verdict:
    """Start the cold child of run ``run_id``; or the verdict that ends the run without
    one (no uid of its own, or the runtime's binary could not be started)."""
    try:
        ids = allocate_ids()  # a uid of its own on a root host (see .runids)
    except OSError as exc:
        return sandbox_unavailable(f"the run could not get a uid of its own: {exc}")
    try:
        run_dir = make_run_dir(plan.base_dir, run_id, ids)
    except BaseException:
        if ids is not None:
            ids.release()
        raise
    cgroup: RunCgroup | None = None
    if plan.cgroup_roots is not None:
        with contextlib.suppress(OSError):
            made = RunCgroup(plan.cgroup_roots, run_id, max_pids, None)
            try:
                made.begin(max_pids, memory_bytes)
            except OSError:
                made.settle()  # made and empty: its directories and kept files go at once
                raise
            cgroup = made
    entered: list[RunCgroup] = []

    def enter_cgroup(child: ChildProcess) -> None:
        with contextlib.suppress(OSError):
            if cgroup is not None:
                cgroup.attach(child.pid)
                entered.append(cgroup)

    try:
        child = plan.runtime.spawn(
            env=plan.env, run_dir=run_dir, sandbox=plan.sandbox, ids=ids, before_start=enter_cgroup
        )
    except OSError as exc:
        remove_tree(run_dir)
        if cgroup is not None:
            cgroup.settle()
        if ids is not None:
            ids.release()
        return interpreter_failed(plan.runtime.interpreter, exc)
    except BaseException:
        remove_tree(run_dir)
        if cgroup is not None:
            cgroup.settle()
        if ids is not None:
            ids.release()
        raise
    child.ids = ids
    if cgroup is not None and not entered:
        cgroup.settle()  # not entered: empty, removed at once
    return ColdStart(child, run_dir, entered[0] if entered else None)
