"""Run a plain Node script through the launcher, as a run's child is started (or without it,
as the control that shows an attack works on an unconfined Node). No pytest here: the
unprivileged host scripts (tests/hardening/asuser.py) import this too.

A run here is what ``Run._start_child`` makes for a cold child: a uid of its own (a root
host), a run directory for it, a per-run cgroup (pids and memory) the launcher is put in
before it goes on, then the launcher with the run's sandbox options. The script's last
stdout line is its JSON answer.
"""

from __future__ import annotations

import json
import os
import select
import signal
import sys
import tempfile
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kernelgate.gateway.cgroups import RunCgroup
from kernelgate.gateway.launch import NodeInstall, NodeUnavailable, probe_node, spawn_launched_child
from kernelgate.gateway.process import ChildProcess, make_run_dir, remove_tree, start_child
from kernelgate.gateway.runids import RunIds, allocate_ids
from kernelgate.gateway.sandbox import plan_sandbox, probe_support
from kernelgate.model.limits import Limits

__all__ = ["NODE", "NODE_MISSING", "Ended", "NodeRun", "script_dir", "run_script"]

try:
    NODE: NodeInstall | None = probe_node()
    NODE_MISSING = ""
except NodeUnavailable as exc:
    NODE = None
    NODE_MISSING = str(exc)

FAST = Limits(wall_seconds=15, kill_grace_seconds=0.3, cpu_seconds=10, max_processes=32)


@dataclass
class Ended:
    """How a script ended: exit code (``-N``: signal N), its output, its JSON answer."""

    returncode: int | None
    stdout: str
    stderr: str
    timed_out: bool = False
    answer: Any = field(default=None)

    def __post_init__(self) -> None:
        lines = self.stdout.strip().splitlines()
        try:
            self.answer = json.loads(lines[-1]) if lines else None
        except ValueError:
            self.answer = None

    def why(self) -> str:
        return f"exit {self.returncode}, stdout {self.stdout[-1500:]!r}, stderr {self.stderr[-1500:]!r}"


def script_dir(base: str | None = None) -> str:
    """A directory for scripts that any run's uid may read (0755, outside /tmp's private
    view only when ``base`` is)."""
    path = tempfile.mkdtemp(prefix="kg-node-scripts-", dir=base)
    os.chmod(path, 0o755)
    return path


def write_script(directory: str, source: str, name: str = "attack.js") -> str:
    path = os.path.join(directory, name)
    with open(path, "w") as f:
        f.write(source)
    os.chmod(path, 0o644)
    return path


class NodeRun:
    """One run of a Node script: started by :meth:`start`, ended by :meth:`finish`, all of
    it gone after :meth:`close` (processes, cgroup, run directory, uid)."""

    def __init__(
        self,
        level: str,
        base: str | None = None,
        limits: Limits = FAST,
        read_paths: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        confined: bool = True,
        python: str = sys.executable,
        cgroup: bool = True,
    ) -> None:
        if NODE is None:
            raise NodeUnavailable(NODE_MISSING)
        self.node = NODE
        self.level = level
        self.limits = limits
        self.confined = confined
        self.python = python
        self.env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", **(env or {})}
        support = probe_support(python)
        self.plan = plan_sandbox(level, limits, support, tuple(read_paths))
        self.use_cgroup = cgroup
        self.run_id = uuid.uuid4().hex[:12]
        self.ids: RunIds | None = allocate_ids() if confined else None
        self.run_dir = make_run_dir(base, self.run_id, self.ids)
        self.cgroup: RunCgroup | None = None
        self.child: ChildProcess | None = None

    @property
    def pids_max(self) -> int:
        return self.plan.pids_max(self.limits.max_processes)

    def start(
        self, script: str, args: Sequence[str] = (), node_flags: Sequence[str] = ()
    ) -> ChildProcess:
        argv = [*node_flags, script, *args]
        if not self.confined:
            command = self.node.command(argv)
            # In the run directory, as a launched child is (start_child keeps our cwd: the
            # control's writes would land wherever the tests run, the checkout).
            self.child = start_child(
                "/usr/bin/env",
                ["/usr/bin/env", f"--chdir={self.run_dir}", *command.argv],
                {**self.env, "TMPDIR": self.run_dir},
            )
            return self.child
        roots = self.plan.cgroups
        if roots is not None and self.use_cgroup:
            self.cgroup = RunCgroup(roots, self.run_id, self.pids_max, self.limits.memory_bytes)
            self.cgroup.begin(self.pids_max, self.limits.memory_bytes)
        cgroup = self.cgroup

        def into_cgroup(child: ChildProcess) -> None:
            if cgroup is not None:
                cgroup.attach(child.pid)

        heap = max(16, self.limits.memory_bytes // (1024 * 1024) // 2)
        self.child = spawn_launched_child(
            self.python,
            self.env,
            self.run_dir,
            self.plan.child_options(self.ids),
            self.node.command(argv, max_old_space_mib=heap),
            before_start=into_cgroup,
        )
        self.child.ids = self.ids
        return self.child

    def finish(self, timeout: float = 20.0) -> Ended:
        """Read stdout and stderr until both close and the child exits (or ``timeout``:
        then everything is killed)."""
        child = self.child
        assert child is not None
        out, err = bytearray(), bytearray()
        open_fds = {child.stdout_fd: out, child.stderr_fd: err}
        deadline = time.monotonic() + timeout
        timed_out = False
        while open_fds or not child.try_reap():
            left = deadline - time.monotonic()
            if left <= 0:
                timed_out = True
                break
            fds = list(open_fds) or [child.pidfd]
            ready, _, _ = select.select(fds, [], [], min(left, 0.5))
            for fd in ready:
                if fd == child.pidfd:
                    continue
                try:
                    data = os.read(fd, 65536)
                except BlockingIOError:
                    continue
                if data:
                    open_fds[fd] += data
                else:
                    del open_fds[fd]
        self.kill()
        return Ended(
            child.returncode, out.decode(errors="replace"), err.decode(errors="replace"), timed_out
        )

    def kill(self) -> None:
        child = self.child
        if child is None:
            return
        child.kill_all()
        if self.cgroup is not None:
            self.cgroup.settle(remove=False)
        deadline = time.monotonic() + 10
        while not child.try_reap() and time.monotonic() < deadline:
            child.wait_gone(0.1)

    def close(self) -> None:
        self.kill()
        if self.child is not None:
            self.child.close()
        if self.cgroup is not None:
            self.cgroup.settle_blocking(10)
        remove_tree(self.run_dir)
        if self.ids is not None:
            self.ids.release()

    def __enter__(self) -> NodeRun:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def run_script(
    source: str,
    level: str,
    *,
    args: Sequence[str] = (),
    confined: bool = True,
    base: str | None = None,
    limits: Limits = FAST,
    read_paths: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    python: str = sys.executable,
    timeout: float = 20.0,
) -> Ended:
    """``source`` run once through the launcher at ``level`` (or unconfined), cold."""
    scripts = script_dir(base)
    try:
        script = write_script(scripts, source)
        with NodeRun(level, base, limits, (scripts, *read_paths), env, confined, python) as run:
            run.start(script, args)
            return run.finish(timeout)
    finally:
        remove_tree(scripts)


def kill_quietly(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
