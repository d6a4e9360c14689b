"""What a program leaves in its run directory never jams teardown (issue 18, finding 1).

A program may make any tree in its run directory: thousands of levels deep (a recursive
removal overflows), every level mode 000, links to host directories and files, FIFOs,
sockets. After ``aclose()`` nothing of it is left and nothing outside it was touched;
and a dead host's such leftover, found by the sweep of a later gateway, never makes that
gateway's ``run()`` raise: it is removed and the run goes on. At every level, warm and
cold, as root and from an unprivileged host (whose program's files are its own: the modes
must be given back before they can be removed).
"""

from __future__ import annotations

import asyncio
import errno
import os
import signal
import stat
import sys
import time
from dataclasses import replace
from typing import Any

import pytest

from kernelgate import Gateway, Limits, RunResult
from kernelgate.gateway.process import remove_tree
from tests.procs import processes_with
from tests.trees import dead_owner, deep_tree

from .asuser import USER_UID, AsUser
from .conftest import ALL_LEVELS, NEEDS_ROOT_HOST_AT_PROCESS_CASE, Hostile

BOTH = pytest.mark.parametrize("warm", [True, False], ids=["warm", "cold"])
#: Deeper than any recursion limit (CPython's is 1000 frames).
DEPTH = 3000
#: Landlock checks each access against every level above it: a deep chain takes seconds.
SLOW = Limits(wall_seconds=120, kill_grace_seconds=0.3, cpu_seconds=100)

#: The program: a DEPTH-deep chain of directories in its run directory with links to a
#: host directory, a FIFO, a socket and a file at the bottom; it tries to make that file
#: immutable (which would stop root's removal too); ZERO: then mode 000 on every level,
#: the run directory included.
_DEEP = """
import errno, fcntl, os, socket, struct
top = os.getcwd()
for _ in range(DEPTH):
    os.mkdir('d')
    os.chdir('d')
os.symlink(OUTSIDE, 'out')
os.symlink(os.path.join(OUTSIDE, 'secret.txt'), 'secret')
os.mkfifo('fifo')
try:
    with socket.socket(socket.AF_UNIX) as s:
        s.bind('sock')
except OSError:
    open('sock', 'w').close()
with open('leaf', 'w') as f:
    f.write('x')
fd = os.open('leaf', os.O_RDONLY)
try:
    fcntl.ioctl(fd, 0x40086602, struct.pack('i', 0x10))  # FS_IOC_SETFLAGS, FS_IMMUTABLE_FL
    immutable = 'set'
except OSError as exc:
    immutable = exc.errno
os.close(fd)
modes = 'kept'
if ZERO:
    for _ in range(DEPTH):
        os.chdir('..')
        os.chmod('d', 0)
    try:
        os.chmod(top, 0)
        modes = 'all 000'
    except OSError as exc:
        modes = f'chain 000, top: {exc.errno}'
return {'immutable': immutable, 'modes': modes}
"""


def deep_program(outside: str, zero: bool) -> str:
    return (
        _DEEP.replace("DEPTH", str(DEPTH))
        .replace("OUTSIDE", repr(outside))
        .replace("ZERO", str(zero))
    )


def _not_immutable(value: Any) -> None:
    assert value["immutable"] in (errno.EPERM, errno.EACCES, errno.ENOTTY, errno.EOPNOTSUPP)


def _outside_intact(outside: str) -> None:
    assert sorted(os.listdir(outside)) == ["secret.txt"]
    with open(os.path.join(outside, "secret.txt")) as f:
        assert f.read() == "host secret\n"
    assert stat.S_IMODE(os.stat(outside).st_mode) == 0o700  # mkdtemp's, unchanged


async def _run_then_close(gw: Gateway, program: str, warm: bool) -> RunResult:
    if warm:
        first = await gw.run("'warm-up'")
        assert first.ok, first.message
        filler = getattr(getattr(gw, "_pool", None), "_filler", None)
        if filler is not None:
            await asyncio.shield(filler)
    try:
        return await gw.run(program)
    finally:
        await gw.aclose()


@pytest.mark.timeout(180)
@pytest.mark.parametrize("zero", [False, True], ids=["modes-kept", "mode-000"])
@ALL_LEVELS
@BOTH
def test_a_deep_tree_in_the_run_directory_is_gone_after_aclose(
    hostile: Hostile, outside_dir: str, level: str, warm: bool, zero: bool
) -> None:
    gw = hostile.gateway(SLOW, sandbox=level, pool_size=1 if warm else 0, strict=True)
    r = hostile.record(asyncio.run(_run_then_close(gw, deep_program(outside_dir, zero), warm)))
    assert r.status == "ok", r.message
    assert r.isolation == level and r.usage.get("warm") is warm
    _not_immutable(r.value)
    if zero:
        assert r.value["modes"] == "all 000"
    assert os.listdir(hostile.base) == [], "the run directory outlived aclose()"
    _outside_intact(outside_dir)


@pytest.mark.timeout(180)
@ALL_LEVELS
@BOTH
def test_a_dead_hosts_deep_leftover_never_stops_a_new_gateway(
    hostile: Hostile, outside_dir: str, level: str, warm: bool
) -> None:
    """The leftover of a host that died (its zygote killed too, so nobody removed it):
    the first ``run()`` of a later gateway sweeps it and runs."""
    left = os.path.join(hostile.base, f"{dead_owner()}20250101T000000-0a1b2c3d-x1y2z3")
    os.mkdir(left)
    deep_tree(left, DEPTH, outside=outside_dir, zero=True)
    gw = hostile.gateway(sandbox=level, pool_size=1 if warm else 0, strict=True)
    r = hostile.record(asyncio.run(_run_then_close(gw, "1 + 1", warm)))
    assert r.status == "ok", r.message
    assert r.value == 2 and r.isolation == level
    assert not os.path.lexists(left), "the dead host's leftover is still there"
    _outside_intact(outside_dir)


# -- from an unprivileged host: the program's files are the host user's own ------------------


@pytest.mark.timeout(180)
@ALL_LEVELS
@BOTH
def test_an_unprivileged_hosts_deep_000_tree_is_removed(
    as_user: AsUser, level: str, warm: bool
) -> None:
    """Mode 000 on every level stops a non-root host's removal unless it gives the modes
    back (root needs no such help): the run directory is still gone after the run."""
    outside = as_user.home  # a directory of the user's (mode 0700), a link's target
    program = deep_program(outside, zero=True)
    body = """
    limits = Limits(wall_seconds=120, kill_grace_seconds=0.3, cpu_seconds=100)
    print(json.dumps(run_one(ARGS["program"], ARGS["level"], ARGS["warm"], limits=limits)))
    """
    r = as_user.run_script(body, {"program": program, "level": level, "warm": warm}, 240)
    assert r["status"] == "ok", r["message"]
    assert r["isolation"] == level and r["warm"] is warm
    _not_immutable(r["value"])
    assert r["value"]["modes"] == "all 000"
    assert os.listdir(as_user.tmp_dir) == [], "the run directory outlived the gateway"
    assert os.path.isfile(os.path.join(as_user.home, "host.py"))


@pytest.mark.timeout(180)
@BOTH
def test_an_unprivileged_hosts_sweep_removes_a_deep_000_leftover(
    as_user: AsUser, warm: bool
) -> None:
    left = os.path.join(as_user.tmp_dir, f"{dead_owner()}20250101T000000-0a1b2c3d-x1y2z3")
    os.mkdir(left)
    deep_tree(left, DEPTH, outside=as_user.home, zero=True, uid=USER_UID)
    try:
        body = """
        print(json.dumps(run_one("1 + 1", None, ARGS["warm"])))
        """
        r = as_user.run_script(body, {"warm": warm})
        assert r["status"] == "ok", r["message"]
        assert r["value"] == 2
        assert os.listdir(as_user.tmp_dir) == [], "the dead host's leftover is still there"
    finally:
        if os.path.lexists(left):
            remove_tree(left)


# -- mounts: a program's are in its own mount namespace, never the host's --------------------

#: The program mounts a tmpfs on a directory of its run directory (as it may, root in its
#: own user and mount namespaces; at ``process`` level after making such namespaces
#: itself), fills it, and asks the host (a binding) what the host sees mounted there.
_MOUNT = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
os.mkdir('m')
out = {}
if libc.mount(b'none', b'm', b'tmpfs', 0, None) != 0:
    out['mount'] = ctypes.get_errno()
    if libc.unshare(0x10000000 | 0x00020000) != 0:  # CLONE_NEWUSER | CLONE_NEWNS
        out['unshare'] = ctypes.get_errno()
    elif libc.mount(b'none', b'm', b'tmpfs', 0, None) != 0:
        out['own_ns_mount'] = ctypes.get_errno()
    else:
        out['own_ns_mount'] = 'mounted'
else:
    out['mount'] = 'mounted'
with open('m/inside', 'w') as f:
    f.write('x')
out['host_sees'] = await tools.mounts_under(os.getcwd())
return out
"""


@pytest.mark.timeout(120)
@ALL_LEVELS
@BOTH
def test_a_programs_mounts_never_reach_the_hosts_view_of_its_run_directory(
    hostile: Hostile, level: str, warm: bool
) -> None:
    base = hostile.base

    def mounts_under(_: str) -> list[str]:
        with open("/proc/self/mountinfo") as f:
            return [line for line in f.read().splitlines() if base in line]

    r = hostile.run(
        _MOUNT,
        warm=warm,
        sandbox=level,
        strict=True,
        bindings={"mounts_under": mounts_under},
    )
    assert r.status == "ok", r.message
    v = r.value
    assert v["host_sees"] == [], v  # the teardown then removes a plain directory
    if level != "process":
        assert v["mount"] in ("mounted", errno.EPERM), v


# -- a program that outlives its run, racing its own teardown ------------------------------

#: Started by the program in a session of its own, it survives the run where nothing kills
#: what leaves the process group (``process`` level without a pids cgroup, documented): it
#: swaps its run directory's ``x`` for a link to a host directory (renameat2
#: RENAME_EXCHANGE) as fast as it can, refilling ``x/y``, while the host removes the tree.
_RACER = """
import ctypes, os, sys
marker, outside = sys.argv[1:3]
libc = ctypes.CDLL(None, use_errno=True)
x, link = 'x', 'l'  # in its working directory, the run directory (its path may be closed)
n = 0
while True:
    n += 1
    try:
        os.makedirs(os.path.join(x, 'y', 'z'), exist_ok=True)
        open(os.path.join(x, 'y', f'f{n}'), 'w').close()
        if not os.path.lexists(link):
            os.symlink(outside, link)
        if n == 1:
            open('started', 'w').close()
        libc.renameat2(-100, x.encode(), -100, link.encode(), 2)
        libc.renameat2(-100, x.encode(), -100, link.encode(), 2)
    except OSError:
        pass
"""

_START_RACER = """
import os, subprocess, sys, time
subprocess.Popen([sys.executable, '-c', RACER, MARKER, OUTSIDE],
                 start_new_session=True, stdin=subprocess.DEVNULL,
                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
while not os.path.exists('started'):
    time.sleep(0.01)
return 'racing'
"""


@pytest.fixture
def no_pids_cgroup(monkeypatch: pytest.MonkeyPatch) -> None:
    """This process's gateways plan as on a machine without a writable pids cgroup."""
    from kernelgate.gateway import sandbox as host_sandbox

    for python in {sys.executable, os.path.realpath(sys.executable)}:
        support = host_sandbox.probe_support(python)
        monkeypatch.setitem(host_sandbox._cache, python, replace(support, cgroups=None))


@pytest.mark.timeout(120)
@NEEDS_ROOT_HOST_AT_PROCESS_CASE
@BOTH
def test_a_program_racing_its_teardown_never_reaches_the_host(
    hostile: Hostile, outside_dir: str, no_pids_cgroup: None, warm: bool
) -> None:
    os.chmod(outside_dir, 0o755)
    os.makedirs(os.path.join(outside_dir, "y", "z"))
    with open(os.path.join(outside_dir, "y", "keep"), "w") as f:
        f.write("x")
    before = sorted(os.walk(outside_dir))
    program = (
        _START_RACER.replace("RACER", repr(_RACER))
        .replace("MARKER", repr(hostile.marker))
        .replace("OUTSIDE", repr(outside_dir))
    )
    gw = hostile.gateway(sandbox="process", pool_size=1 if warm else 0, strict=True)
    try:
        r = hostile.record(asyncio.run(_run_then_close(gw, program, warm)))
        assert r.status == "ok" and r.value == "racing", r.message
        assert processes_with(hostile.marker), "the racer did not outlive its run"
        time.sleep(0.5)  # not a wait for anything: the racer races whatever is left
        assert stat.S_IMODE(os.stat(outside_dir).st_mode) == 0o755
        assert sorted(os.walk(outside_dir)) == before
    finally:
        for pid in processes_with(hostile.marker):
            os.kill(pid, signal.SIGKILL)
        _wait_gone(hostile.marker)
        for name in os.listdir(hostile.base):
            remove_tree(os.path.join(hostile.base, name))
    assert stat.S_IMODE(os.stat(outside_dir).st_mode) == 0o755
    assert sorted(os.walk(outside_dir)) == before


def _wait_gone(marker: str) -> None:
    deadline = time.monotonic() + 10
    while processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.02)
