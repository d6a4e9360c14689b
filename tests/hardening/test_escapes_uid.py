"""A uid of its own for every run on a root host (issue 18, finding 5, and its class).

``execve`` makes a process dumpable again, so what a run execs (a subprocess) is only kept
from other runs by its uid: with one uid shared by every run, a concurrent run read its
environment and memory through /proc, signalled it, and wrote into its run directory.
Each test runs two concurrent runs through two real gateways (two hosts), warm and cold.
"""

from __future__ import annotations

import asyncio
import ctypes
import dataclasses
import errno
import json
import os
import secrets
import signal
import subprocess
import sys
from typing import Any

import pytest

from kernelgate import Limits
from kernelgate.gateway import runids
from kernelgate.gateway import sandbox as host_sandbox
from kernelgate.gateway.sandbox import LEVELS
from kernelgate.kernels.python.syscalls import landlock_abi
from tests.procs import descendants, processes_with, survivors_of_a_dead_host

from .conftest import FORK_UNTIL_REFUSED, ROOT_HOST, at_levels

_libc = ctypes.CDLL(None, use_errno=True)
BOTH = pytest.mark.parametrize("warm", [True, False], ids=["warm", "cold"])
NEEDS_ROOT = pytest.mark.skipif(not ROOT_HOST, reason="a uid per run needs a root host")

#: Run A: exec a subprocess with a secret in its environment, leave files in the shared
#: temporary directories, use up the uid's inotify instances; say where it is, wait.
_VICTIM = """
import ctypes, os, subprocess
libc = ctypes.CDLL(None, use_errno=True)
shared = [f'/tmp/kg-{token}', f'/dev/shm/kg-{token}']
for path in shared:
    with open(path, 'w') as f:
        f.write('a')
notes = []
while len(notes) < 512:  # max_user_instances is per uid (128 by default)
    fd = libc.inotify_init1(0)
    if fd < 0:
        break
    notes.append(fd)
p = subprocess.Popen(['/bin/sleep', '{token}'], env={{'SECRET': '{secret}'}})
# Popen returns once exec is past its point of no return, a moment before the new
# program's arguments are in place: until then the host cannot find it by them.
for _ in range(20000):
    with open(f'/proc/{{p.pid}}/cmdline', 'rb') as f:
        if b'{token}' in f.read():
            break
    os.sched_yield()
await tools.a_started(p.pid, os.getcwd(), os.getuid())
await tools.wait_b()
p.kill()
p.wait()
kept = []
for path in shared:
    kept.append(open(path).read())
    os.unlink(path)
return {{'dir': sorted(os.listdir('.')), 'shared': kept, 'inotify': len(notes)}}
"""

#: Run B: everything a same-uid process could do to run A's exec'd process and files.
_ATTACK = """
import os, signal
pid, a_dir = await tools.wait_a()
out = {'uid': os.getuid(), 'pid': pid}
def attempt(name, act):
    try:
        out[name] = act()
    except OSError as exc:
        out[name] = exc.errno
def found(text):
    i = text.find('kg-secret-')  # only what was found: the whole stack is too big a value
    return text[i:i + 26] if i >= 0 else f'read {len(text)} chars, no secret'
def read(path):
    with open(path, 'rb') as f:
        return found(f.read().decode('latin-1'))
def stack():
    for line in open(f'/proc/{pid}/maps'):
        if line.rstrip().endswith('[stack]'):
            lo, hi = (int(x, 16) for x in line.split()[0].split('-'))
            fd = os.open(f'/proc/{pid}/mem', os.O_RDONLY)
            try:
                return found(os.pread(fd, hi - lo, lo).decode('latin-1'))
            finally:
                os.close(fd)
    return ''
attempt('environ', lambda: read(f'/proc/{pid}/environ'))
attempt('mem', stack)
attempt('mem_open', lambda: os.close(os.open(f'/proc/{pid}/mem', os.O_RDONLY)))
attempt('signal0', lambda: os.kill(pid, 0))
attempt('sigstop', lambda: os.kill(pid, signal.SIGSTOP))
attempt('sigkill', lambda: os.kill(pid, signal.SIGKILL))
if {files}:  # (not where the host's uid is every run's: the files are theirs to write)
    attempt('plant', lambda: open(os.path.join(a_dir, 'planted.txt'), 'w').write('x'))
    for d in ('tmp', 'dev/shm'):
        path = f'/{d}/kg-{token}'
        attempt(f'{d}_write', lambda: open(path, 'r+').write('b'))  # never creates it
        attempt(f'{d}_unlink', lambda: os.unlink(path))
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
fd = libc.inotify_init1(0)
out['inotify'] = 'made' if fd >= 0 else ctypes.get_errno()
await tools.b_done(os.getcwd())
return out
"""


def _attack(token: str, files: bool = True) -> str:
    return _ATTACK.replace("{token}", token).replace("{files}", str(files))


def _host_pid(token: str) -> int:
    """The host's pid of run A's ``sleep`` (the run may see another in its pid namespace)."""
    found = [p for p in processes_with(token) if _comm(p) == "sleep"]
    assert len(found) == 1, found
    return found[0]


def _comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""


def _uid_of(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("Uid:"):
                return int(line.split()[1])
    raise AssertionError(f"no Uid line for {pid}")


def _two_runs(hostile: Any, level: str, warm: bool) -> dict[str, Any]:
    """Run the victim and the attack concurrently on two gateways; what each saw."""
    token = f"29.{secrets.randbelow(10**9):09d}"  # a sleep length that marks A's process
    secret = f"kg-secret-{secrets.token_hex(8)}"
    seen: dict[str, Any] = {"token": token, "secret": secret}

    async def main() -> tuple[Any, Any]:
        a_ready: asyncio.Future[tuple[int, str]] = asyncio.get_running_loop().create_future()
        b_finished = asyncio.Event()

        async def a_started(pid: int, cwd: str, uid: int) -> None:
            host_pid = _host_pid(token)
            seen.update(a_pid=pid, a_host_pid=host_pid, a_dir=cwd, a_uid=uid)
            seen["a_dir_uid"] = os.stat(cwd).st_uid
            seen["a_sleep_uid"] = _uid_of(host_pid)  # as the host sees it, outside
            # At a namespace level, B gets the host's number: its own would mean nothing.
            a_ready.set_result((host_pid if level != "process" else pid, cwd))

        async def wait_a() -> tuple[int, str]:
            return await a_ready

        async def b_done(cwd: str) -> None:
            seen["a_alive_after_b"] = bool(processes_with(token))
            seen["b_dir_uid"] = os.stat(cwd).st_uid  # B's uid outside (a_dir: A's)
            b_finished.set()

        async def wait_b() -> None:
            await b_finished.wait()

        limits = Limits(wall_seconds=20, kill_grace_seconds=0.3)
        common = {"sandbox": level, "strict": True, "pool_size": 1 if warm else 0}
        gw_a = hostile.gateway(
            limits, bindings={"a_started": a_started, "wait_b": wait_b}, **common
        )
        gw_b = hostile.gateway(limits, bindings={"wait_a": wait_a, "b_done": b_done}, **common)
        if warm:
            for gw in (gw_a, gw_b):
                first = hostile.record(await gw.run("'warm-up'"))
                assert first.ok, first.message
                filler = getattr(getattr(gw, "_pool", None), "_filler", None)
                if filler is not None:
                    await asyncio.shield(filler)
        a, b = await asyncio.gather(
            gw_a.run(_VICTIM.format(token=token, secret=secret)),
            gw_b.run(_attack(token)),
        )
        for r in (a, b):
            hostile.record(r)
            assert r.usage.get("warm") is warm, r.usage
        return a, b

    a, b = asyncio.run(main())
    assert a.status == "ok" and b.status == "ok", (a.message, b.message)
    seen["a"], seen["b"] = a.value, b.value
    return seen


def _assert_refused(seen: dict[str, Any]) -> None:
    b = seen["b"]
    secret = seen["secret"]
    for what in ("environ", "mem"):
        assert secret not in str(b[what]), f"run B read run A's {what}: {b}"
    assert b["environ"] in (errno.EACCES, errno.EPERM, errno.ENOENT), b
    assert b["mem"] in (errno.EACCES, errno.EPERM, errno.ENOENT), b
    assert b["mem_open"] in (errno.EACCES, errno.EPERM, errno.ENOENT), b
    for sig in ("signal0", "sigstop", "sigkill"):
        assert b[sig] in (errno.EPERM, errno.ESRCH), (sig, b)
    assert b["plant"] in (errno.EACCES, errno.ENOENT, errno.EROFS), b
    assert seen["a_alive_after_b"], "run B killed run A's process"
    assert seen["a"]["dir"] == [], "run B planted a file in run A's run directory"
    for d in ("tmp", "dev/shm"):  # the host's at process level, private at the others
        assert b[f"{d}_write"] in (errno.EACCES, errno.ENOENT), b
        assert b[f"{d}_unlink"] in (errno.EPERM, errno.EACCES, errno.ENOENT), b
    assert seen["a"]["shared"] == ["a", "a"], "run B changed run A's files in /tmp, /dev/shm"
    # A used up its uid's inotify instances (a per-uid quota): B's are its own.
    assert seen["a"]["inotify"] > 0 and b["inotify"] == "made", (seen["a"], b)


@NEEDS_ROOT
@at_levels("process")
@BOTH
def test_a_concurrent_run_cannot_reach_what_another_run_execs(hostile, level, warm):
    seen = _two_runs(hostile, level, warm)
    b = seen["b"]
    # The attack reached the kernel with A's real pid and directory, as a different uid.
    assert b["pid"] == seen["a_host_pid"]
    _assert_refused(seen)
    assert seen["a_uid"] != b["uid"], "two concurrent runs had one uid"
    assert runids.in_range(seen["a_uid"]) and runids.in_range(b["uid"])
    assert seen["a_sleep_uid"] == seen["a_uid"] == seen["a_dir_uid"]
    assert seen["b_dir_uid"] == b["uid"]


@NEEDS_ROOT
@at_levels("namespaces", "namespaces+landlock")
@BOTH
def test_concurrent_runs_have_different_uids_outside_at_namespace_levels(hostile, level, warm):
    seen = _two_runs(hostile, level, warm)
    b = seen["b"]
    assert seen["a_uid"] == 0 and b["uid"] == 0  # root inside, each in its own namespace
    _assert_refused(seen)
    outside = seen["a_sleep_uid"]  # what A's exec'd process is on the host
    assert runids.in_range(outside), outside
    assert outside == seen["a_dir_uid"]  # inside-root is the run's own uid outside
    assert runids.in_range(seen["b_dir_uid"]) and seen["b_dir_uid"] != outside


@NEEDS_ROOT
@pytest.mark.parametrize("level", LEVELS)
def test_run_directories_belong_to_the_runs_own_uid(hostile, level):
    gw = hostile.gateway(sandbox=level, pool_size=0, bindings={"stat": _stat})
    src = "import os\nreturn [os.getuid(), await tools.stat(os.getcwd())]"
    ids = []
    for _ in range(2):
        r = hostile.record(gw.run_sync(src))
        assert r.status == "ok", r.message
        inside, (owner, group, mode) = r.value
        assert runids.in_range(owner) and group == owner and mode & 0o777 == 0o700
        assert inside == (owner if level == "process" else 0)
        ids.append(owner)


def _stat(path: str) -> list[int]:
    st = os.stat(path)
    return [st.st_uid, st.st_gid, st.st_mode]


def test_ids_are_unique_while_held_and_come_back_when_released():
    if not ROOT_HOST:
        pytest.skip("a uid per run needs a root host")
    held = [runids.allocate_ids() for _ in range(200)]
    uids = [ids.uid for ids in held if ids is not None]
    assert len(set(uids)) == 200 and all(runids.in_range(u) for u in uids)
    for ids in held:
        assert ids is not None
        ids.release()
        ids.release()  # idempotent


_INOTIFY = """
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
made = []
while len(made) < 512:  # max_user_instances is per user (128 by default)
    fd = libc.inotify_init1(0)
    if fd < 0:
        break
    made.append(fd)
return [len(made), await tools.host_inotify()]
"""


def _host_inotify() -> str:
    fd = _libc.inotify_init1(0)
    if fd < 0:
        return f"errno {ctypes.get_errno()}"
    os.close(fd)
    return "made"


@NEEDS_ROOT
@at_levels(*LEVELS)
@BOTH
def test_a_run_cannot_use_up_the_hosts_per_user_counts(hostile, level, warm):
    # A user namespace's per-user counts are charged to its owner outside: owned by root,
    # a run used up root's inotify instances on the whole host.
    r = hostile.run(
        _INOTIFY, warm=warm, sandbox=level, strict=True, bindings={"host_inotify": _host_inotify}
    )
    assert r.status == "ok", r.message
    made, host = r.value
    assert made >= 100  # the run reached its own limit
    assert host == "made", "the run used up the host's inotify instances"


#: A host with a busy cold run: prints its pid once the program runs, then waits to die.
_COLD_HOST = """
import asyncio, dataclasses, json, os, sys
from kernelgate import Gateway, Limits
from kernelgate.gateway import sandbox

# No pids cgroup: another host's sweep of a dead host's cgroup must not be what ends it.
for python in {sys.executable, os.path.realpath(sys.executable)}:
    support = sandbox.probe_support(python)
    sandbox._cache[python] = dataclasses.replace(support, cgroups=None)

async def main() -> None:
    gw = Gateway(pool_size=0, tmp_dir=sys.argv[1], sandbox=sys.argv[2], strict=True,
                 limits=Limits(wall_seconds=60))
    started = asyncio.get_running_loop().create_future()

    def on_output(out: dict) -> None:
        if not started.done():
            started.set_result(None)

    busy = asyncio.ensure_future(gw.run(
        # Holding the GIL: the child's own watch on fd 3 cannot run, only the kernel's
        # parent-death signal ends it.
        "import ctypes\\nprint('started', flush=True)\\nctypes.PyDLL(None).sleep(40)",
        on_output=on_output,
    ))
    await started
    print(json.dumps({"pid": os.getpid()}), flush=True)
    await busy

asyncio.run(main())
"""


@NEEDS_ROOT
@at_levels(*LEVELS)
@pytest.mark.timeout(60)
def test_a_cold_run_dies_with_its_host_after_taking_its_uid(tmp_path, level):
    # Changing the effective uid makes the kernel forget the parent-death signal: a cold
    # run that took on its uid outlived a host killed with SIGKILL (for ever, at process
    # level without a pids cgroup sweep).
    root = os.path.dirname(os.path.dirname(os.path.abspath(runids.__file__)))
    env = {**os.environ, "PYTHONPATH": os.path.dirname(root)}
    host = subprocess.Popen(
        [sys.executable, "-c", _COLD_HOST, str(tmp_path), level],
        stdout=subprocess.PIPE,
        env=env,
        text=True,
    )
    try:
        assert host.stdout is not None
        line = host.stdout.readline()
        assert line, "the host did not start"
        pid = int(json.loads(line)["pid"])
        below = descendants(pid)
        assert below, "no run below the host"
        os.kill(pid, signal.SIGKILL)
        assert host.wait(timeout=10) == -signal.SIGKILL
    finally:
        if host.poll() is None:
            host.kill()
            host.wait(timeout=10)
    alive = survivors_of_a_dead_host(below, tmp_path)  # the program would sleep 40 s
    assert alive == [], "the run outlived its host"


@pytest.fixture
def no_pids_cgroup() -> Any:
    """This process's gateways plan as on a machine without a writable pids cgroup."""
    pythons = {sys.executable, os.path.realpath(sys.executable)}
    saved = {python: host_sandbox.probe_support(python) for python in pythons}
    with host_sandbox._cache_lock:
        for python, support in saved.items():
            host_sandbox._cache[python] = dataclasses.replace(support, cgroups=None)
    yield
    with host_sandbox._cache_lock:
        host_sandbox._cache.update(saved)


@NEEDS_ROOT
@BOTH
def test_max_processes_holds_at_process_level_without_a_pids_cgroup(hostile, no_pids_cgroup, warm):
    # RLIMIT_NPROC counts a uid's processes: with a uid of its own, only the run's.
    limits = Limits(wall_seconds=10, kill_grace_seconds=0.3, max_processes=6)
    r = hostile.run(FORK_UNTIL_REFUSED, limits, warm=warm, sandbox="process", strict=True)
    assert r.status == "ok", r.message
    forked, err = r.value
    assert err == errno.EAGAIN and 0 < forked < 6, r.value


#: Two concurrent runs on two gateways of an unprivileged host: both have the host's uid
#: outside, so only their pid namespaces keep B from what A execs.
_UNPRIVILEGED_TWO_RUNS = """
import secrets
token = ARGS["token"]

def host_pid():
    for name in os.listdir('/proc'):
        if name.isdigit() and int(name) != os.getpid():  # our argv holds the token too
            try:
                with open(f'/proc/{name}/comm') as f:
                    if f.read().strip() != 'sleep':
                        continue
                with open(f'/proc/{name}/cmdline', 'rb') as f:
                    if token.encode() in f.read():
                        return int(name)
            except OSError:
                pass
    return -1

async def main():
    ready = asyncio.get_running_loop().create_future()
    done = asyncio.Event()

    async def a_started(pid, cwd, uid):
        ready.set_result((host_pid(), cwd))

    async def wait_a():
        return await ready

    async def b_done(cwd):
        done.set()

    async def wait_b():
        await done.wait()

    level, warm = ARGS["level"], ARGS["warm"]
    kw = dict(sandbox=level, pool_size=1 if warm else 0)
    kw["limits"] = Limits(wall_seconds=20, kill_grace_seconds=0.3)
    async with gateway(bindings={"a_started": a_started, "wait_b": wait_b}, **kw) as gw_a:
        async with gateway(bindings={"wait_a": wait_a, "b_done": b_done}, **kw) as gw_b:
            if warm:
                await warmed(gw_a)
                await warmed(gw_b)
            a, b = await asyncio.gather(gw_a.run(ARGS["victim"]), gw_b.run(ARGS["attack"]))
            return [encode(a), encode(b)]

print(json.dumps(asyncio.run(main())))
"""


@at_levels(*LEVELS)
@BOTH
def test_an_unprivileged_hosts_runs_cannot_reach_what_another_execs(as_user, level, warm):
    # Both runs have the host's uid outside: at the namespace levels their pid namespaces
    # keep them apart; at process level their landlock domains (ptrace access; with ABI
    # 6+ signals too), which hold across execve as the dumpable flag does not.
    if level == "process" and landlock_abi() < 1:
        pytest.skip("needs landlock at the 'process' level on a non-root host")
    token = f"29.{secrets.randbelow(10**9):09d}"
    secret = f"kg-secret-{secrets.token_hex(8)}"
    a, b = as_user.run_script(
        _UNPRIVILEGED_TWO_RUNS,
        {
            "token": token,
            "level": level,
            "warm": warm,
            "victim": _VICTIM.format(token=token, secret=secret),
            "attack": _attack(token, files=level != "process"),
        },
    )
    assert a["status"] == "ok" and b["status"] == "ok", (a["message"], b["message"])
    assert a["warm"] is warm and b["warm"] is warm
    v = b["value"]
    assert v["pid"] > 0  # the host found A's process, and gave B its number
    for what in ("environ", "mem"):
        assert secret not in str(v[what]), f"run B read run A's {what}: {v}"
        assert v[what] in (errno.ENOENT, errno.EACCES, errno.EPERM), v
    signals = ("signal0", "sigstop", "sigkill")
    if level == "process" and landlock_abi() < 6:
        signals = ()  # same uid, and no landlock signal scope: signals are not promised
    for sig in signals:
        assert v[sig] in (errno.ESRCH, errno.EPERM), (sig, v)
    if level != "process":
        assert a["value"]["dir"] == [] and a["value"]["shared"] == ["a", "a"]
