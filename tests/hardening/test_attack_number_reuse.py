"""Attacks on numbers the host keeps after the kernel (or the pool) gave them out again.

The host names a child by its pid and its process group by the same number; pid_max is
32,768 here and a busy gateway wraps it in minutes. Once a child is reaped (by us, or by
the zygote that forked it, which frees the number before the host hears of it), that
number may be another process's: a ``killpg`` by it reaches a stranger's whole group.
These tests hand the freed pid to a stranger on purpose (as root, through
``ns_last_pid``), a session leader as every run's child is, and then do what signalled
by number: the stranger must live through each.

A pooled cgroup is a recycled name of the host's own: a finished run's teardown hands its
cgroup back to the pool, which forks the next idle child into it; nothing of the old run
may empty or remove it after that.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from typing import Any

import pytest

from kernelgate import RunResult, inline
from kernelgate.gateway.cgroups import RunCgroup
from kernelgate.gateway.process import start_child
from tests.procs import assert_stranger_alive

from .conftest import SUPPORT

LAST_PID = "/proc/sys/kernel/ns_last_pid"

NEEDS_LAST_PID = pytest.mark.skipif(
    os.geteuid() != 0 or not os.access(LAST_PID, os.W_OK),
    reason=f"handing a chosen pid to a process needs root ({LAST_PID})",
)


def _gone(pid: int, deadline: float = 10.0) -> None:
    """Wait until ``pid`` is free: reaped (by whoever reaps it), and no process left in a
    process group or session of that number (an orphan there waits for init to reap it)."""
    end = time.monotonic() + deadline
    while os.path.exists(f"/proc/{pid}") or _named_by(pid):
        assert time.monotonic() < end, f"{pid} was not free in {deadline} s"
        time.sleep(0.001)


def _named_by(pid: int) -> bool:
    """Whether a process's group or session has the number ``pid``."""
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat", "rb") as f:
                    fields = f.read().rsplit(b")", 1)[1].split()
            except OSError:
                continue
            if pid in (int(fields[2]), int(fields[3])):
                return True
    return False


_TRIES = 200


def _take_pid(pid: int, argv: list[str], **popen: Any) -> subprocess.Popen[bytes] | None:
    """``argv`` started with exactly ``pid`` (None if other processes on the machine took
    the number first every time of :data:`_TRIES`)."""
    for _ in range(_TRIES):
        with open(LAST_PID, "w") as f:
            f.write(str(pid - 1))
        proc = subprocess.Popen(argv, **popen)
        if proc.pid == pid:
            return proc
        proc.kill()
        proc.wait()
    return None


def _stranger_at(pid: int) -> subprocess.Popen[bytes]:
    """A ``sleep`` in a session (and process group) of its own, started with exactly
    ``pid``: what another run's child, or any daemon, looks like."""
    proc = _take_pid(pid, ["sleep", "60"], start_new_session=True)
    if proc is None:
        pytest.skip(f"pid {pid} was taken by other processes {_TRIES} times running")
    return proc


# -- a process group signalled by the number of a reaped child ----------------------------


@pytest.mark.timeout(60)
@NEEDS_LAST_PID
@pytest.mark.parametrize("how", ["signal_group", "kill_all"])
def test_a_reaped_child_signals_no_group_by_its_old_pid(strangers, how):
    """A cold child, reaped: its pid and group id are free. What still holds the
    ChildProcess (a wall-clock or kill-grace timer of its run, an interrupt, a caller's
    cancellation) signals its group by that number: the stranger's group, not ours."""
    child = start_child(sys.executable, [sys.executable, "-c", "pass"], os.environ)
    try:
        assert child.wait_gone(10)
        assert child.try_reap()
        strangers.append(_stranger_at(child.pid))
        if how == "signal_group":
            child.signal_group(signal.SIGKILL)
        else:
            child.kill_all()
    finally:
        child.close()
    assert_stranger_alive(strangers[0])


@pytest.mark.timeout(90)
@NEEDS_LAST_PID
@pytest.mark.parametrize("then", ["next_run", "aclose", "close"])
def test_an_idle_child_the_zygote_reaped_is_not_killed_by_its_old_pid(hostile, strangers, then):
    """A parked child dies (the OOM killer, an operator's kill); its zygote reaps it at
    once and the number is free, while the pool still holds it as an idle child. The next
    run finds it dead and discards it, or the close does: none may signal the stranger
    that took its pid (the discard killed "its" group by that number)."""
    gw = hostile.gateway(pool_size=1)

    async def main() -> None:
        assert hostile.record(await gw.run("return 1")).ok
        await gw._pool.filled()
        assert gw._pool.ready == 1, "the pool has no parked child"
        idle = gw._pool._ready[0]
        signal.pidfd_send_signal(idle.pidfd, signal.SIGKILL)
        _gone(idle.pid)  # reaped by the zygote: the pool has not looked
        strangers.append(_stranger_at(idle.pid))
        if then == "next_run":
            assert hostile.record(await gw.run("return 2")).value == 2
            await gw.wait_finished()
        elif then == "aclose":
            await gw.aclose()

    asyncio.run(main())
    gw.close()
    assert_stranger_alive(strangers[0])


# -- a pooled cgroup emptied by the run that gave it back -----------------------------------


_SLOW_ENTERED: list[bool] = []
_LOOP_ENDING: list[bool] = []


async def _slow_to_cancel() -> int:
    """A binding whose cleanup takes its time when cancelled (closing a client, say): the
    run's calls are still being cancelled while the child's teardown goes on. It ends
    when the loop ends (the test says when: it must not hang ``asyncio.run``'s end)."""
    _SLOW_ENTERED.append(True)
    while True:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            if _LOOP_ENDING:
                raise


async def _slow_started() -> int:
    """Answers once ``slow`` runs: the program returns with that call in the binding."""
    end = time.monotonic() + 10
    while not _SLOW_ENTERED and time.monotonic() < end:
        await asyncio.sleep(0.001)
    return len(_SLOW_ENTERED)


# A call left running when the program returns: cancelled by the host as the run ends.
_LEAVES_A_CALL = """
import asyncio
asyncio.ensure_future(tools.slow())
await asyncio.sleep(0)          # its call is sent
return await tools.started()    # answered once slow() runs on the host
"""


async def _until(predicate: Any, what: str, deadline: float = 30.0) -> None:
    end = time.monotonic() + deadline
    while not predicate():
        assert time.monotonic() < end, f"not within {deadline} s: {what}"
        await asyncio.sleep(0.005)


@pytest.mark.timeout(120)
def test_a_cancelled_teardown_never_empties_the_cgroup_it_gave_back(hostile):
    """A warm run returns with a call still being cancelled; its teardown gives its cgroup
    back to the pool and then waits for that call too. The pool forks its next idle
    child into the cgroup. Then the loop ends (``asyncio.run`` returns: the teardown is
    cancelled). The cancelled teardown emptied and removed "its" cgroup: it SIGKILLed the
    pool's new child ("worker_exit, SIGKILL from outside" for the run that takes it) and
    left a removed cgroup on the free list. It must leave both alone."""
    if SUPPORT.cgroups is None:
        pytest.skip("no writable cgroup here: the pool recycles none")
    gw = hostile.gateway(pool_size=1, bindings={"slow": _slow_to_cancel, "started": _slow_started})
    found: dict[str, Any] = {}

    async def main() -> None:
        assert hostile.record(await gw.run("return 0")).ok
        await gw.wait_finished()
        pool = gw._pool
        await pool.filled()
        taken = pool._ready[0]
        assert taken.cgroup is not None
        cgroup = found["cgroup"] = taken.cgroup
        run = asyncio.create_task(gw.run(_LEAVES_A_CALL))
        await _until(lambda: cgroup in pool._free_cgroups, "the run's cgroup given back")
        assert not run.done(), "its calls were cancelled already"
        # The next run takes the parked child; the refill forks one into the cgroup.
        await pool.filled()
        assert hostile.record(await gw.run("return 2")).value == 2
        await pool.filled()
        inside = [c for c in pool._ready if c.cgroup is cgroup]
        assert inside, "no child was forked into the kept cgroup"
        found["child"] = inside[0]

    async def then_end_the_loop() -> None:
        _SLOW_ENTERED.clear()
        _LOOP_ENDING.clear()
        try:
            await main()
        finally:
            # Returning ends the loop: every task left is cancelled, the teardown too.
            _LOOP_ENDING.append(True)

    asyncio.run(then_end_the_loop())
    cgroup, child = found["cgroup"], found["child"]
    assert child.alive(), "the pool's idle child in the kept cgroup was killed"
    assert all(os.path.isdir(path) for path in cgroup.paths), "the kept cgroup was removed"
    warm = hostile.record(gw.run_sync("return 3"))
    assert warm.value == 3 and warm.usage.get("warm") is True, (warm.status, warm.message)


# -- a cgroup's processes killed by numbers read a moment before ----------------------------


@pytest.mark.timeout(60)
@NEEDS_LAST_PID
def test_a_cgroup_kills_no_stranger_that_took_a_listed_pid(strangers):
    """``RunCgroup.settle`` (a run's end, the pool's recycling, the sweep of a dead host's
    cgroups) reads cgroup.procs, then SIGKILLs each pid it read. A listed process may exit
    and be reaped in between (by its parent in the run, or by init: the host does not
    reap the run's processes), and its number be another process's when the kill comes.
    Forced here: the process ends and a stranger outside the cgroup takes its pid right
    after the read. The stranger must live; the cgroup still goes."""
    roots = SUPPORT.cgroups
    if roots is None or roots.pids is None:
        pytest.skip("no writable pids cgroup here")
    cgroup = RunCgroup(roots, f"reuse-{os.getpid()}", 10)
    member = subprocess.Popen(["sleep", "60"])
    try:
        cgroup.attach(member.pid)
        assert cgroup.pids() == [member.pid]
        read = cgroup.pids

        def read_then_reuse() -> list[int]:
            listed = read()
            if listed == [member.pid] and not strangers:  # once: the next reads are honest
                member.kill()
                member.wait()  # reaped: the number is free
                strangers.append(_stranger_at(member.pid))
            return listed

        cgroup.pids = read_then_reuse  # type: ignore[method-assign]
        assert cgroup.settle()
    finally:
        member.kill()
        member.wait()
        for path in cgroup.paths:
            with contextlib.suppress(FileNotFoundError):
                os.rmdir(path)
    assert strangers, "the race was not forced"
    assert_stranger_alive(strangers[0])


# -- a child waited for by number after another reaper had it --------------------------------


@pytest.mark.timeout(120)
@NEEDS_LAST_PID
@pytest.mark.skipif(shutil.which("node") is None, reason="needs node (a Node pool's child)")
def test_a_teardown_finished_off_the_loop_reaps_no_other_child_of_the_host(
    hostile, strangers, monkeypatch
):
    """A warm TypeScript run's child is a launched child: the host is its parent, and its
    close reaps it (or hands it to a thread that does). A run whose teardown task never
    starts (cancelled in the turn the run returned) is finished off the loop: kill, close,
    then a thread waits for the exit and, the child being "ours", waits for its pid. By
    then the close has reaped it, the number is free, and a new child of the host may hold
    it (another run's, any subprocess): that ``waitpid`` reaped the new child, and the
    status it ended with was lost to its owner. Forced here: the stranger, a child of
    this process, takes the number just before that wait."""
    from kernelgate.gateway import teardown

    gw = hostile.gateway(language="typescript", pool_size=1)
    real_waitpid = teardown._waitpid
    seen: list[int] = []
    called: list[int] = []

    def waitpid_after_a_stranger(pid: int, flags: int) -> None:
        called.append(pid)
        if pid in seen and not strangers:
            _gone(pid)  # reaped by the close (or its thread): the number is free
            # It ends at once, with 7: whoever reaps it has that.
            stranger = _take_pid(pid, [sys.executable, "-c", "import sys; sys.exit(7)"])
            if stranger is not None:
                strangers.append(stranger)
        real_waitpid(pid, flags)

    monkeypatch.setattr(teardown, "_waitpid", waitpid_after_a_stranger)

    async def main() -> None:
        first = hostile.record(await gw.run("return 0;"))
        assert first.ok, first.message
        await gw._pool.filled()
        assert gw._pool.ready == 1, "the pool has no started child"
        seen.append(gw._pool._ready[0].pid)
        result = hostile.record(await gw.run("return 1;"))
        assert result.value == 1 and result.usage.get("warm") is True, result.message
        # No await since the run made its teardown task: cancelled now, it never starts.
        pending = [t for t in gw._finishing if not t.done()]
        for task in pending:
            task.cancel()
        assert pending, "the run's teardown had ended already: the test proves nothing"
        await asyncio.gather(*pending, return_exceptions=True)
        await gw.aclose()  # waits for the off-loop threads

    asyncio.run(main())
    if seen[0] in called and not strangers:
        pytest.skip(f"pid {seen[0]} was taken by other processes {_TRIES} times running")
    if strangers:
        assert strangers[0].wait(10) == 7, "the off-loop teardown reaped the host's other child"


# -- a booting child's processes put back to nice 0 by its number --------------------------


@pytest.mark.timeout(120)
@NEEDS_LAST_PID
def test_a_dead_booting_child_renices_no_stranger_by_its_old_pid(hostile, strangers):
    """On a root host a child forked while two others are parked boots at a low priority;
    a run that finds none parked puts the booting ones back to nice 0 (``in_foreground``:
    every thread of the child's process and of every process below it, found from its
    pid). A booting child that died (killed, or its boot failed), reaped by the zygote
    before its boot task has looked, left its number free: a stranger's tree there was
    reniced to 0 by the host (root may raise any process's priority)."""
    from kernelgate.gateway.teardown import discard

    gw = hostile.gateway(pool_size=3)

    async def main() -> None:
        assert hostile.record(await gw.run("return 0")).ok
        pool = gw._pool
        await pool.filled()
        assert pool.ready == 3, "the pool did not fill"
        taken = [await pool.acquire()]  # two left parked: the refill forks in the background
        try:
            await _until(lambda: any(c.background for c in pool._booting), "a background boot")
            booting = next(c for c in pool._booting if c.background)
            # From here on the loop does not run: its boot task cannot look.
            signal.pidfd_send_signal(booting.pidfd, signal.SIGKILL)
            _gone(booting.pid)  # reaped by the zygote
            proc = _take_pid(
                booting.pid, ["nice", "-n", "10", "sleep", "60"], start_new_session=True
            )
            if proc is None:
                pytest.skip(f"pid {booting.pid} was taken by other processes {_TRIES} times")
            strangers.append(proc)
            # None parked after these: the booting children are put in the foreground.
            end = time.monotonic() + 10  # `nice` has set its niceness, and exec'd sleep
            while os.getpriority(os.PRIO_PROCESS, strangers[0].pid) != 10:
                assert time.monotonic() < end, "the stranger never got nice 10"
                time.sleep(0.001)
            taken += [await pool.acquire(), await pool.acquire()]
            assert pool.ready == 0
        finally:
            for child in taken:
                if child is not None:
                    await discard(child)

    asyncio.run(main())
    assert os.getpriority(os.PRIO_PROCESS, strangers[0].pid) == 10, "the stranger was reniced"
    assert_stranger_alive(strangers[0])


# -- a run's usage read from /proc by the number of a child the zygote reaped ------------


_FREED: dict[str, Any] = {}


@inline
def _hold_until_a_stranger_has_its_pid() -> int:
    """On the host's loop (the run's reply waits behind it): until the run's child has
    exited after its reply and the zygote has reaped it, and a stranger that has used a
    second of CPU holds its pid."""
    pid = _FREED["pid"]
    _gone(pid)
    proc = _take_pid(pid, [sys.executable, "-c", _BURN], start_new_session=True)
    if proc is None:
        return 0
    _FREED["stranger"] = proc
    end = time.monotonic() + 30
    while _cpu_s(pid) < 1.0:
        assert time.monotonic() < end, "the stranger never used its second of CPU"
        time.sleep(0.01)
    return 1


_BURN = "import time\nt = time.process_time()\nwhile time.process_time() - t < 1.1: pass\ntime.sleep(60)"


def _cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat", "rb") as f:
        fields = f.read().rsplit(b")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # user + system


@pytest.mark.timeout(120)
@NEEDS_LAST_PID
def test_a_runs_usage_is_not_read_from_a_stranger_that_took_its_childs_pid(hostile, strangers):
    """The host measures a run's CPU and peak from /proc when its reply arrives: its
    cgroup's processes, or, when the cgroup is empty, its child and what is below it, by
    the child's pid. A warm child writes its reply and exits; if the loop reads the reply
    late (busy: here an inline binding of the run holds it), the zygote has reaped the
    child and its number may be a stranger's: the stranger's CPU was the run's usage."""
    gw = hostile.gateway(pool_size=1, bindings={"hold": _hold_until_a_stranger_has_its_pid})
    program = (
        "import asyncio\nasyncio.ensure_future(tools.hold())\nawait asyncio.sleep(0)\nreturn 1"
    )

    async def main() -> RunResult:
        assert hostile.record(await gw.run("return 0")).ok
        await gw._pool.filled()
        assert gw._pool.ready == 1, "the pool has no parked child"
        _FREED.clear()
        _FREED["pid"] = gw._pool._ready[0].pid
        return hostile.record(await gw.run(program))

    result = asyncio.run(main())
    if "stranger" in _FREED:
        strangers.append(_FREED["stranger"])
    if not strangers:
        pytest.skip(f"pid {_FREED['pid']} was taken by other processes {_TRIES} times running")
    assert result.ok and result.usage.get("warm") is True, result.message
    cpu = result.usage["cpu_user_s"] + result.usage["cpu_system_s"]
    assert cpu < 0.5, f"a stranger's CPU counted as the run's: {result.usage}"


# -- a warm child's exit status looked up by its pid ----------------------------------------


@pytest.mark.timeout(120)
@NEEDS_LAST_PID
def test_a_warm_childs_exit_status_is_its_own_not_an_earlier_holders_of_its_pid(hostile):
    """The zygote reports each child's end as (pid, status); the host keeps them by pid
    until a run asks. A child whose status no run asked for (an idle child that died and
    was discarded, a teardown finished off the loop) left it there, and the pid, once the
    zygote forked a new child with it, named that one: its run, ending without a reply,
    took the dead child's status (SIGKILL "from outside") for its own exit. Forced here:
    the new child gets the old number through ``ns_last_pid``, and the zygote is stopped
    while the run ends, so that the host sees the exit before the true status."""
    from kernelgate.gateway.teardown import discard

    gw = hostile.gateway(pool_size=1)

    async def main() -> RunResult | None:
        assert hostile.record(await gw.run("return 0")).ok
        pool = gw._pool
        await pool.filled()
        zygote = pool._zygote
        old = pool._ready.pop(0)  # as the pool takes a dead idle child off to discard it
        pid = old.pid
        signal.pidfd_send_signal(old.pidfd, signal.SIGKILL)
        _gone(pid)
        await _until(lambda: zygote.poll() or pid in zygote._statuses, "its status")
        await discard(old)  # its status is never asked for
        for _ in range(_TRIES):
            with open(LAST_PID, "w") as f:
                f.write(str(pid - 1))
            pool.refill()
            await pool.filled()
            new = pool._ready[-1]
            if new.pid == pid:
                break
            pool._ready.remove(new)
            await discard(new)
        else:
            return None
        os.kill(zygote.pid, signal.SIGSTOP)  # its word on the exit comes after the exit
        try:
            run = asyncio.create_task(gw.run("import os\nos._exit(3)"))
            await asyncio.wait([run], timeout=3)  # an old status ends it at once
        finally:
            os.kill(zygote.pid, signal.SIGCONT)
        return hostile.record(await run)

    result = asyncio.run(main())
    if result is None:
        pytest.skip(f"the pid was taken by other processes {_TRIES} times running")
    assert result.usage.get("warm") is True
    assert (result.exit_code, result.signal) == (3, None), (result.status, result.message)
