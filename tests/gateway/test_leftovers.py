"""Nothing outlives its owner: a host that dies leaves no run directory and no pids cgroup.

A host killed with SIGKILL or SIGTERM (the OOM killer, ``kill``, jupyter_client's
``shutdown_kernel(now=True)``) runs none of its own cleanup. Its zygote sees it go and
removes what it owned before exiting; a new gateway sweeps what hosts that are gone left
(their names carry the owner's pid and start time), never a live host's.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import kernelgate
from kernelgate import Gateway, Limits
from kernelgate.gateway.cgroups import CgroupRoots
from kernelgate.gateway.pool import sweep_leftovers
from kernelgate.gateway.process import owner_prefix, remove_tree
from tests.procs import descendants, pid_alive

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(kernelgate.__file__)))
#: Where the runs' cgroups are made: a directory per controller (pids, memory) under v1.
CGROUP_DIRS = (CgroupRoots.find() or CgroupRoots()).dirs()

#: A host: a gateway with a warm pool that has done a run and filled its pool, and a
#: second run still going. It prints its pid once all that holds, then waits to be killed.
HOST = """
import asyncio, json, os, sys
from kernelgate import Gateway, Limits

async def main() -> None:
    gw = Gateway(pool_size=2, tmp_dir=sys.argv[1], limits=Limits(wall_seconds=60))
    first = await gw.run("1 + 1")
    assert first.ok, first
    await gw.wait_finished()
    pool = gw._pool
    while pool.ready < pool.size:
        await asyncio.shield(pool._filler)
    started = asyncio.get_running_loop().create_future()

    def on_output(out: dict) -> None:
        if not started.done():
            started.set_result(None)

    busy = asyncio.ensure_future(
        gw.run("print('started', flush=True)\\nwhile True:\\n    pass", on_output=on_output)
    )
    await started
    pool.refill()
    while pool.ready < pool.size:
        await asyncio.shield(pool._filler)
    print(json.dumps({"pid": os.getpid(), "zygote": pool._zygote.pid}), flush=True)
    await busy

asyncio.run(main())
"""


def _env(tmp: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": ROOT, "TMPDIR": str(tmp)}


def _ours(directory: str | None, pid: int) -> list[str]:
    """Entries under ``directory`` owned (by name) by process ``pid``."""
    if directory is None:
        return []
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    return sorted(n for n in names if n.startswith(f"kernelgate-{pid}-"))


def _wait_until(check: Any, timeout: float = 15.0) -> Any:
    """Poll ``check()`` until it is falsy (returned) or the deadline passes (its last value)."""
    deadline = time.monotonic() + timeout
    delay = 0.005
    while True:
        found = check()
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(delay)
        delay = min(delay * 2, 0.1)


@pytest.fixture
def tmp(tmp_path: Path) -> Iterator[Path]:
    """The TMPDIR a host gets; it must be empty once the test is over."""
    path = tmp_path / "tmp"
    path.mkdir()
    yield path
    assert os.listdir(path) == [], "left in the host's TMPDIR"


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_a_killed_host_leaves_no_run_directory_or_cgroup(tmp: Path, sig: int) -> None:
    host = subprocess.Popen(
        [sys.executable, "-c", HOST, str(tmp)],
        stdout=subprocess.PIPE,
        env=_env(tmp),
        text=True,
    )
    try:
        assert host.stdout is not None
        line = host.stdout.readline()
        assert line, "the host did not start"
        info = json.loads(line)
        pid = int(info["pid"])
        # What it owns now: the idle children's and the busy run's directories, and (with
        # a pids cgroup here) their cgroups; processes below it, the zygote among them.
        assert len(_ours(str(tmp), pid)) >= 3
        for root in CGROUP_DIRS:
            assert len(_ours(root, pid)) >= 3
        below = descendants(pid)
        assert int(info["zygote"]) in below
        os.kill(pid, sig)
        assert host.wait(timeout=10) == -sig
    finally:
        if host.poll() is None:
            host.kill()
            host.wait(timeout=10)
    assert _wait_until(lambda: _ours(str(tmp), pid)) == []
    for root in CGROUP_DIRS:
        assert _wait_until(lambda: _ours(root, pid)) == []  # noqa: B023 (waited here)
    assert _wait_until(lambda: [p for p in below if pid_alive(p)]) == []


#: The busy run of :data:`HOST` made a tree deeper than any recursion limit first, every
#: level mode 000 (issue 18, finding 1).
DEEP_HOST = HOST.replace(
    "gw.run(\"print('started', flush=True)",
    "gw.run(\"import os\\nfor _ in range(1500):\\n    os.mkdir('d')\\n    os.chdir('d')\\n"
    "for _ in range(1500):\\n    os.chdir('..')\\n    os.chmod('d', 0)\\n"
    "print('started', flush=True)",
)


@pytest.mark.timeout(120)
def test_a_killed_hosts_zygote_removes_a_deep_tree_its_run_left(tmp: Path) -> None:
    assert DEEP_HOST != HOST
    host = subprocess.Popen(
        [sys.executable, "-c", DEEP_HOST, str(tmp)],
        stdout=subprocess.PIPE,
        env=_env(tmp),
        text=True,
    )
    try:
        assert host.stdout is not None
        line = host.stdout.readline()
        assert line, "the host did not start"
        pid = int(json.loads(line)["pid"])
        os.kill(pid, signal.SIGKILL)
        assert host.wait(timeout=10) == -signal.SIGKILL
    finally:
        if host.poll() is None:
            host.kill()
            host.wait(timeout=10)
    assert _wait_until(lambda: _ours(str(tmp), pid), timeout=60) == []


def test_a_zygote_whose_live_host_closed_the_pool_just_exits(tmp: Path, no_fd_leak: None) -> None:
    """fd 3 closing is not enough: the host is alive (it closed the pool and cleans up
    itself), so the zygote exits at once and removes nothing of its host's."""
    import select

    gw = Gateway(pool_size=1, tmp_dir=str(tmp), limits=Limits(wall_seconds=20))

    async def fill() -> None:
        assert (await gw.run("1 + 1")).ok
        await gw.wait_finished()
        pool = gw._pool
        assert pool is not None
        while pool.ready < pool.size:
            assert pool._filler is not None
            await asyncio.shield(pool._filler)

    try:
        asyncio.run(fill())
        assert gw._pool is not None
        zygote = gw._pool._zygote
        assert zygote is not None and not zygote.dead
        before = _ours(str(tmp), os.getpid())
        assert before, "the pool's child has its run directory"
        pidfd = os.pidfd_open(zygote.pid)
        try:
            zygote.sock.close()
            gone, _, _ = select.select([pidfd], [], [], 3.0)
        finally:
            os.close(pidfd)
        assert gone, "the zygote did not exit when its live host closed fd 3"
        assert _ours(str(tmp), os.getpid()) == before
    finally:
        gw.close()


def _dead_process() -> tuple[int, int]:
    """The pid and start time of a process that has exited (and been reaped)."""
    proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=-1)
    with open(f"/proc/{proc.pid}/stat", "rb") as f:
        data = f.read()
    start = int(data[data.rfind(b")") + 2 :].split()[19])
    assert proc.stdin is not None
    proc.stdin.close()
    proc.wait(timeout=10)
    return proc.pid, start


def _pidns() -> int:
    return os.stat("/proc/self/ns/pid").st_ino


def test_a_new_gateway_removes_what_dead_hosts_left_and_nothing_else(
    tmp: Path, tmp_path: Path, no_fd_leak: None
) -> None:
    pid, start = _dead_process()
    dead = f"kernelgate-{pid}-{start}-{_pidns()}-"
    me = os.getpid()
    reused = f"kernelgate-{me}-{int(owner_prefix().split('-')[2]) + 1}-{_pidns()}-"
    live = owner_prefix()  # this test process: alive
    other_ns = f"kernelgate-{pid}-{start}-{_pidns() + 1}-"  # we cannot tell: untouched
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("host file\n")

    gone = [f"{dead}pool-ab12cd34-0-x1y2z3", f"{dead}20250101T000000-0a1b2c3d-q", f"{reused}r"]
    kept = [f"{live}pool-live-0-x", f"{other_ns}r", "kernelgate-pool-old-0-x", "tmp-not-ours"]
    for name in gone + kept:
        (tmp / name / "sub").mkdir(parents=True)
        (tmp / name / "sub" / "file.txt").write_text("x")
    os.chmod(tmp / gone[0] / "sub", 0)  # a program changed its modes
    # A dead host's name on a link: only the link may go, never what it points to.
    os.symlink(outside, tmp / f"{dead}link")
    cgroups_gone = [f"{dead}pool-ab12cd34-0", f"{dead}20250101T000000-0a1b2c3d"]
    cgroups_kept = [f"{live}pool-live-0", f"{other_ns}x"]
    made = []
    for root in CGROUP_DIRS:
        for name in cgroups_gone + cgroups_kept:
            os.mkdir(os.path.join(root, name))
            made.append(os.path.join(root, name))
    try:
        gw = Gateway(pool_size=1, tmp_dir=str(tmp), limits=Limits(wall_seconds=20))
        try:
            r = gw.run_sync("1 + 1")
            assert r.ok, r.message
        finally:
            gw.close()
        left = set(os.listdir(tmp))
        assert left & set(gone) == set()
        assert set(kept) <= left
        assert (outside / "keep.txt").read_text() == "host file\n"
        for root in CGROUP_DIRS:
            there = set(os.listdir(root))
            assert there & set(cgroups_gone) == set()
            assert set(cgroups_kept) <= there
    finally:
        for cgroup in made:
            if os.path.isdir(cgroup):
                os.rmdir(cgroup)
        for entry in tmp.iterdir():
            if entry.is_symlink():
                entry.unlink()
            else:
                subprocess.run(["rm", "-rf", str(entry)], check=True, timeout=30)


def test_removing_a_run_directory_replaced_by_a_link_touches_nothing_else(
    tmp_path: Path,
) -> None:
    """A program that owns its run directory (``process`` level on a root host) may swap
    it for a link: only the link goes; its parent (the tmp dir) keeps its mode."""
    parent = tmp_path / "tmp"
    parent.mkdir()
    os.chmod(parent, 0o1777)
    target = tmp_path / "target"
    target.mkdir()
    (target / "keep.txt").write_text("x")
    link = parent / f"{owner_prefix()}run-abc"
    link.symlink_to(target)
    remove_tree(str(link))
    assert not os.path.lexists(link)
    assert (target / "keep.txt").read_text() == "x"
    assert os.stat(parent).st_mode & 0o7777 == 0o1777


def test_the_sweep_is_cheap(tmp: Path) -> None:
    """A sweep of a directory holding nothing of ours costs one listdir: it never reads
    /proc for names that are not marked."""
    for n in range(200):
        (tmp / f"tmp{n}").mkdir()
    try:
        t0 = time.perf_counter()
        assert sweep_leftovers(str(tmp), CgroupRoots.find()) == []
        elapsed = time.perf_counter() - t0
        assert elapsed < 0.5, f"a sweep of 200 entries took {elapsed:.3f} s"
    finally:
        for n in range(200):
            (tmp / f"tmp{n}").rmdir()


# -- the kernel front ------------------------------------------------------------------------


@pytest.fixture
def kernel_name(tmp_path: Path, tmp: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A kernelspec running this checkout's kernel with ``tmp`` as its TMPDIR."""
    name = "kernelgate-leftovers"
    spec_dir = tmp_path / "jupyter" / "kernels" / name
    spec_dir.mkdir(parents=True)
    spec = {
        "argv": [sys.executable, "-m", "kernelgate.cli", "kernel", "run", "-f", "{connection_file}"],
        "display_name": name,
        "language": "python",
        "interrupt_mode": "signal",
        "env": {"PYTHONPATH": ROOT, "TMPDIR": str(tmp)},
    }
    (spec_dir / "kernel.json").write_text(json.dumps(spec))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    return name


@pytest.mark.parametrize("how", ["shutdown_now", "SIGTERM"])
def test_a_stopped_kernel_leaves_nothing(
    kernel_name: str, tmp: Path, tmp_path: Path, how: str
) -> None:
    """``shutdown_kernel(now=True)`` kills the kernel (SIGKILL): its zygote cleans up.
    SIGTERM (what a supervisor sends) is a clean shutdown: the kernel closes its gateway
    and exits 0, a cell still running."""
    from jupyter_client.manager import KernelManager

    km = KernelManager(kernel_name=kernel_name, connection_file=str(tmp_path / "kernel.json"))
    km.start_kernel(cwd=str(tmp_path))
    kc = km.client()
    try:
        kc.start_channels()
        kc.wait_for_ready(timeout=30)
        reply = kc.execute_interactive("1 + 1", timeout=30)
        assert reply["content"]["status"] == "ok"
        pid = km.provisioner.pid  # type: ignore[union-attr]
        assert isinstance(pid, int)
        # The pool refills after the cell: wait (bounded) until its children are booted.
        assert _wait_until(lambda: len(_ours(str(tmp), pid)) < 4, timeout=30) is False
        kc.execute("while True:\n    pass")  # a cell still running when it is stopped
        below = descendants(pid)
        assert below, "the kernel has a zygote and warm children"
        if how == "SIGTERM":
            km.signal_kernel(signal.SIGTERM)
            process = km.provisioner.process  # type: ignore[union-attr]
            assert process.wait(timeout=30) == 0
            # Removed by the kernel itself before it exited, not by what outlives it.
            assert _ours(str(tmp), pid) == []
            for root in CGROUP_DIRS:
                assert _ours(root, pid) == []
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    assert _wait_until(lambda: _ours(str(tmp), pid)) == []
    for root in CGROUP_DIRS:
        assert _wait_until(lambda: _ours(root, pid)) == []  # noqa: B023 (waited here)
    assert _wait_until(lambda: [p for p in below if pid_alive(p)]) == []
