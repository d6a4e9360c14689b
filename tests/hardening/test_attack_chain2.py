"""Round two on the chain of sequential calls (kernelgate/gateway/calls.py ``_run_chain``,
channel.py ``lend``/``read_lent``/``revoke``/``give_back``): from the second lone
synchronous call in a row, the thread that answered reads the child's next frames from
fd 3 for up to 1 ms and admits a lone sync call itself.

The child is an untrusted peer: it splits frames at every byte across the hold, sends
two frames in one write, interleaves output and forged replies, floods past the limits,
exits or is killed mid-chain; bindings raise, block, return what is not JSON or an
awaitable; the run times out or is interrupted while the thread holds fd 3; two runs
share a gateway's threads. Whatever happens, every call is recorded once, in order,
answered once, within the run's limits, and no run's chain holds another run's calls.
"""

from __future__ import annotations

import asyncio
import contextvars
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from kernelgate import CallRecord, Gateway, Limits, RunResult, inline
from kernelgate.gateway.workers import workers_for

from .conftest import FAST
from .test_attack_threads import _binding_threads, _joined

WARM_COLD = pytest.mark.parametrize("warm", [True, False], ids=["warm", "cold"])

#: Two sequential calls first: from the second on, the thread that answers reads fd 3.
#: ``forge`` writes bytes to fd 3 (blocking); ``expect(id)`` makes the child's client
#: wait for the answer to a call it did not send itself (so the wire accepts the reply).
_PRELUDE = (
    "import asyncio, gc, json, os, time\n"
    "from kernelgate.wire.connection import Connection\n"
    "conn = [o for o in gc.get_objects() if type(o) is Connection][0]\n"
    "client = [o for o in gc.get_objects() if type(o).__name__ == 'CallClient'][0]\n"
    "def forge(data):\n"
    "    os.set_blocking(3, True)\n"
    "    while data:\n"
    "        data = data[os.write(3, data):]\n"
    "def expect(call_id, label='tools.add'):\n"
    "    fut = asyncio.get_running_loop().create_future()\n"
    "    client.pending[call_id] = (fut, label)\n"
    "    client.calls += 1\n"
    "    conn._next_call_id += 1\n"
    "    conn._outstanding.add(call_id)\n"
    "    return fut\n"
    "def frame(call_id, name='add', args=(1, 2), kwargs=None):\n"
    "    return (json.dumps(['call', call_id, 'tools', name, list(args), kwargs or {}])\n"
    "            + '\\n').encode()\n"
    "assert await tools.add(1, 2) == 3\n"
    "assert await tools.add(2, 3) == 5\n"
)


def _prog(body: str) -> str:
    return _PRELUDE + textwrap.dedent(body)


def _ids(calls: list[CallRecord]) -> list[int]:
    return [c.id for c in calls]


def _heard_run(
    gw: Gateway, program: str, limits: Limits | None = None
) -> tuple[RunResult, list[CallRecord]]:
    heard: list[CallRecord] = []

    async def main() -> RunResult:
        try:
            return await gw.run(program, limits=limits, on_call=heard.append)
        finally:
            await gw.runtime.end_loop()

    return asyncio.run(main()), heard


class Gate:
    """A blocking binding's gate, opened by the test at its end whatever happened."""

    def __init__(self) -> None:
        self.event = threading.Event()

    def wait(self, timeout: float = 8.0) -> bool:
        return self.event.wait(timeout)

    def release(self) -> bool:
        self.event.set()
        return True


@pytest.fixture
def gate() -> Iterator[Gate]:
    g = Gate()
    yield g
    g.event.set()


def _counting_gateway(hostile: Any, warm: bool) -> tuple[Gateway, list[int]]:
    """A gateway (a pool of one when ``warm``) whose ``add`` binding records each first
    argument it ran with, in the list returned with it."""
    ran: list[int] = []

    def add(a: int, b: int) -> int:
        ran.append(a)
        return a + b

    return hostile.gateway(bindings={"add": add}, pool_size=1 if warm else 0), ran


def _add(a: int, b: int) -> int:
    return a + b


# -- frames cut, joined, interleaved while fd 3 is lent ----------------------------------


@pytest.mark.timeout(120)
@WARM_COLD
def test_a_call_frame_cut_at_every_byte_across_the_hold_is_admitted_once(hostile, warm):
    # For each cut k, the first k bytes reach the thread (which waits 1 ms, then gives fd 3
    # back with half a frame in the wire's buffer), the rest comes later: one call each.
    heard: list[CallRecord] = []
    gw = hostile.gateway(bindings={"add": _add}, pool_size=1 if warm else 0)
    program = _prog(
        """
        out = []
        n = len(frame(2, args=(0, 0)))
        for k in range(1, n):
            cid = conn._next_call_id
            fut = expect(cid)
            data = frame(cid, args=(k, 1))
            forge(data[:k])
            time.sleep(0.003)  # past the thread's hold: the cut crosses the hand-back
            forge(data[k:])
            out.append(await fut)
            out.append(await tools.add(k, 2))  # a sequential call: the chain again
        return out
        """
    )
    limits = Limits(wall_seconds=60, kill_grace_seconds=0.3, cpu_seconds=30)

    async def main() -> RunResult:
        if warm:
            assert (await gw.run("'warm-up'")).ok
        try:
            return await gw.run(program, limits=limits, on_call=heard.append)
        finally:
            await gw.runtime.end_loop()

    r = hostile.record(asyncio.run(main()))
    assert r.status == "ok", r.message
    n = len(r.value) // 2
    assert n > 30
    assert r.value == [v for k in range(1, n + 1) for v in (k + 1, k + 2)]
    assert _ids(r.calls) == list(range(2 + 2 * n))
    assert _ids(heard) == list(range(2 + 2 * n))
    assert all(c.ok for c in r.calls)


@pytest.mark.timeout(60)
@WARM_COLD
def test_two_calls_in_one_write_to_the_thread_are_each_answered_once(hostile, warm):
    # The thread reads two call frames at once: it takes neither, the loop admits both.
    r = hostile.run(
        _prog(
            """
            out = []
            for i in range(20):
                a = conn._next_call_id
                fa, fb = expect(a), expect(a + 1)
                forge(frame(a, args=(i, 100)) + frame(a + 1, args=(i, 200)))
                out.append([await fa, await fb, await tools.add(i, 300)])
            return out
            """
        ),
        Limits(wall_seconds=30, kill_grace_seconds=0.3, cpu_seconds=20),
        warm=warm,
    )
    assert r.status == "ok", r.message
    assert r.value == [[i + 100, i + 200, i + 300] for i in range(20)]
    assert _ids(r.calls) == list(range(62))
    assert [c.value for c in r.calls[2:]] == [
        v for i in range(20) for v in (i + 100, i + 200, i + 300)
    ]


@pytest.mark.timeout(60)
@WARM_COLD
def test_a_call_with_output_and_a_comm_close_in_the_same_write_is_refused_in_order(hostile, warm):
    # A call then a comm_close of the calls' comm in one write, to the thread: it takes
    # nothing, the loop answers the call and refuses the close (or accepts it) exactly as
    # it would have read it itself; never a hang, never a call answered twice.
    r = hostile.run(
        _prog(
            """
            print('before', flush=True)
            cid = conn._next_call_id
            fut = expect(cid)
            close = json.dumps({'header': {'msg_type': 'comm_close'},
                                'content': {'comm_id': 'x', 'data': {}}})
            forge(frame(cid, args=(40, 2)) + close.encode() + b'\\n')
            print('after', flush=True)
            return await fut
            """
        ),
        FAST,
        warm=warm,
    )
    assert r.status in ("ok", "protocol"), r.message
    assert _ids(r.calls) == [0, 1, 2]
    assert r.calls[2].ok and r.calls[2].value == 42


@pytest.mark.timeout(60)
@WARM_COLD
def test_a_reply_forged_by_the_child_mid_chain_ends_the_run_as_protocol(hostile, warm):
    # A "reply" goes from the host to the child only: sent by the child while the thread
    # reads fd 3, it is refused as it would be on the loop.
    r = hostile.run(
        _prog(
            """
            forge(b'["reply",1,true,5]\\n')
            time.sleep(2)
            return await tools.add(5, 5)
            """
        ),
        FAST,
        warm=warm,
    )
    assert r.status == "protocol", r.message
    assert _ids(r.calls) == [0, 1]


@pytest.mark.timeout(60)
@WARM_COLD
def test_a_duplicate_call_id_to_the_thread_is_refused(hostile, warm):
    # A call id the child already used (and that was answered): the wire's table refuses
    # it on the thread as it would on the loop; the binding never runs a third time.
    gw, ran = _counting_gateway(hostile, warm)
    r = hostile.run(
        _prog(
            """
            forge(frame(1, args=(7, 7)))
            time.sleep(2)
            return 'not refused'
            """
        ),
        FAST,
        warm=warm,
        gateway=gw,
    )
    assert r.status == "protocol", r.message
    assert ran == [1, 2]
    assert _ids(r.calls) == [0, 1]


@pytest.mark.timeout(60)
@WARM_COLD
def test_a_frame_over_max_frame_bytes_to_the_thread_ends_the_run_at_once(hostile, warm):
    # Three MiB without a newline, streamed while the thread holds fd 3 (the ceiling is
    # one MiB): refused as protocol as soon as the tail passes it, not at wall_seconds.
    limits = Limits(
        wall_seconds=20, kill_grace_seconds=0.3, cpu_seconds=10, max_frame_bytes=1 << 20
    )
    t0 = time.monotonic()
    r = hostile.run(
        _prog(
            """
            try:
                forge(b'["call",2,"tools","add",["' + b'x' * (3 << 20))
            except OSError:
                pass  # the host stopped reading and killed us
            time.sleep(30)
            """
        ),
        limits,
        warm=warm,
    )
    assert r.status == "protocol", r.message
    assert "max_frame_bytes" in r.error.evalue
    assert time.monotonic() - t0 < 15
    assert _ids(r.calls) == [0, 1]


@pytest.mark.timeout(60)
@WARM_COLD
def test_a_frame_just_under_max_frame_bytes_to_the_thread_is_one_call(hostile, warm):
    # A call of almost max_frame_bytes, written in one go while the thread reads: the
    # thread reads it in chunks past its 1 ms hold (or gives the rest to the loop), and
    # it is admitted once, whole.
    sizes: list[int] = []

    def size(s: str) -> int:
        sizes.append(len(s))
        return len(s)

    gw = hostile.gateway(bindings={"add": _add, "size": size}, pool_size=1 if warm else 0)
    limits = Limits(
        wall_seconds=20, kill_grace_seconds=0.3, cpu_seconds=10, max_frame_bytes=2 << 20
    )
    r = hostile.run(
        _prog(
            """
            big = 'y' * ((2 << 20) - 200)
            cid = conn._next_call_id
            fut = expect(cid, 'tools.size')
            forge(frame(cid, 'size', [big]))
            return [await fut, await tools.add(1, 1)]
            """
        ),
        limits,
        warm=warm,
        gateway=gw,
    )
    assert r.status == "ok", r.message
    assert r.value == [(2 << 20) - 200, 2]
    assert sizes == [(2 << 20) - 200]
    assert _ids(r.calls) == [0, 1, 2, 3]


@pytest.mark.timeout(60)
@WARM_COLD
def test_a_flood_past_max_calls_in_one_write_to_the_thread(hostile, warm):
    # Fifty call frames in one write with max_calls=4: the thread takes none of them (it
    # read more than one event), the loop refuses the one past the budget.
    limits = Limits(wall_seconds=10, kill_grace_seconds=0.3, cpu_seconds=5, max_calls=4)
    r = hostile.run(
        _prog(
            """
            forge(b''.join(frame(i) for i in range(2, 52)))
            time.sleep(5)
            """
        ),
        limits,
        warm=warm,
    )
    assert r.status == "protocol", r.message
    assert "past max_calls=4" in r.error.evalue
    assert _ids(r.calls) == [0, 1, 2, 3]


# -- bindings in a chain --------------------------------------------------------------


@pytest.mark.timeout(60)
@WARM_COLD
def test_bindings_that_fail_in_every_way_in_a_chain(hostile, warm):
    # Raises, SystemExit, a set, a coroutine from a plain function, a result over the
    # frame, a slow one: each answered once, recorded once, in order; the chain goes on.
    async def coro() -> int:
        return 9

    def awaitable() -> Any:
        return coro()

    def sysexit() -> None:
        raise SystemExit(3)

    def slow() -> str:
        time.sleep(0.02)  # longer than a sweep: fd 3 goes back to the loop meanwhile
        return "slow"

    bindings = {
        "add": _add,
        "boom": lambda: 1 / 0,
        "sysexit": sysexit,
        "aset": lambda: {1},
        "awaitable": awaitable,
        "huge": lambda: "z" * (2 << 20),
        "slow": slow,
    }
    gw = hostile.gateway(bindings=bindings, pool_size=1 if warm else 0)
    program = _prog(
        """
        out = []
        for round in range(3):
            for name in ('boom', 'sysexit', 'aset', 'awaitable', 'huge', 'slow'):
                try:
                    out.append(await getattr(tools, name)())
                except ToolError as exc:
                    out.append(exc.ename)
                out.append(await tools.add(round, 1))
        return out
        """
    )
    limits = Limits(
        wall_seconds=30,
        kill_grace_seconds=0.3,
        cpu_seconds=20,
        max_frame_bytes=1 << 20,
        max_calls_in_flight=1,
    )
    if warm:
        assert hostile.record(gw.run_sync("'warm-up'")).ok
    r, heard = _heard_run(gw, program, limits)
    hostile.record(r)
    assert r.status == "ok", r.message
    one = ["ZeroDivisionError", "SystemExit", "TypeError", 9, "ValueError", "slow"]
    assert r.value == [v for round in range(3) for name in one for v in (name, round + 1)]
    assert _ids(r.calls) == list(range(2 + 36))
    assert _ids(heard) == list(range(2 + 36))


@pytest.mark.timeout(60)
@WARM_COLD
def test_max_calls_in_flight_holds_while_the_chain_runs_a_slow_binding(hostile, warm):
    # A chained call blocks (fd 3 goes back to the loop); the child forges more calls
    # meanwhile: with max_calls_in_flight=2, never more than two bindings run at once.
    lock = threading.Lock()
    now_most = [0, 0]
    release = threading.Event()

    def step(i: int) -> int:
        with lock:
            now_most[0] += 1
            now_most[1] = max(now_most)
        try:
            if i == 0:
                release.wait(5)
            return i
        finally:
            with lock:
                now_most[0] -= 1

    def open_() -> bool:
        release.set()
        return True

    gw = hostile.gateway(
        bindings={"add": _add, "step": step, "open": open_}, pool_size=1 if warm else 0
    )
    limits = Limits(wall_seconds=20, kill_grace_seconds=0.3, cpu_seconds=10, max_calls_in_flight=2)
    r = hostile.run(
        _prog(
            """
            first = asyncio.ensure_future(tools.step(0))
            await asyncio.sleep(0.05)
            rest = [tools.step(i) for i in range(1, 8)]
            got = await asyncio.gather(*rest)
            await tools.open()
            return [await first, *got]
            """
        ),
        limits,
        warm=warm,
        gateway=gw,
    )
    release.set()
    assert r.status == "ok", r.message
    assert r.value == list(range(8))
    assert now_most[1] <= 2


# -- the run ends while the thread holds fd 3 -----------------------------------------


@pytest.mark.timeout(60)
@WARM_COLD
def test_wall_seconds_while_a_chained_binding_blocks(hostile, gate, warm):
    # The chain's binding blocks past the run's wall clock: the run ends as a timeout at
    # its deadline (not when the binding returns), the blocked call is recorded as
    # admitted, and the late answer reaches nobody.
    gw = hostile.gateway(bindings={"add": _add, "block": gate.wait}, pool_size=1 if warm else 0)
    limits = Limits(wall_seconds=2, kill_grace_seconds=0.3, cpu_seconds=5)
    t0 = time.monotonic()
    r = hostile.run(_prog("return await tools.block()\n"), limits, warm=warm, gateway=gw)
    took = time.monotonic() - t0
    gate.release()
    assert r.status == "timeout", r.message
    assert took < 7.0
    assert _ids(r.calls) == [0, 1, 2]
    assert r.calls[2].ok is None or r.calls[2].ok is False or r.calls[2].duration_s is None


@pytest.mark.timeout(60)
@WARM_COLD
def test_wall_seconds_while_the_thread_reads_a_trickle(hostile, warm):
    # The child sends a call frame a byte per 0.5 ms forever (never a newline): the
    # thread holds no longer than its hold per frame part, and the run ends at its wall
    # clock as a timeout.
    limits = Limits(wall_seconds=2, kill_grace_seconds=0.3, cpu_seconds=5)
    t0 = time.monotonic()
    r = hostile.run(
        _prog(
            """
            forge(b'["call",2,"tools","add",["')
            while True:
                forge(b'x')
                time.sleep(0.0005)
            """
        ),
        limits,
        warm=warm,
    )
    assert r.status == "timeout", r.message
    assert time.monotonic() - t0 < 8
    assert _ids(r.calls) == [0, 1]


@pytest.mark.timeout(60)
@WARM_COLD
def test_the_child_exits_right_after_a_call_the_thread_takes(hostile, warm):
    # A call written then the child gone at once (os._exit): the call, if the thread
    # took it, is recorded once; the run ends as the child's exit, never a hang.
    gw, ran = _counting_gateway(hostile, warm)
    r = hostile.run(
        _prog(
            """
            cid = conn._next_call_id
            expect(cid)
            forge(frame(cid, args=(9, 9)))
            os._exit(7)
            """
        ),
        FAST,
        warm=warm,
        gateway=gw,
    )
    assert r.status != "ok", r.message
    assert _ids(r.calls) in ([0, 1], [0, 1, 2])
    assert ran.count(9) <= 1
    assert len(ran) == len(r.calls)


@pytest.mark.timeout(60)
@WARM_COLD
def test_the_child_killed_mid_chain(hostile, warm):
    # SIGKILL to itself between sequential calls, many times faster than a sweep.
    r = hostile.run(
        _prog(
            """
            import signal
            for i in range(200):
                await tools.add(i, i)
            os.kill(os.getpid(), signal.SIGKILL)
            """
        ),
        FAST,
        warm=warm,
    )
    assert r.status != "ok"
    assert _ids(r.calls) == list(range(202))
    assert all(c.ok for c in r.calls)


@pytest.mark.timeout(60)
@WARM_COLD
def test_interrupt_while_a_chained_binding_blocks(hostile, gate, warm):
    # Run.interrupt from the blocked binding's side (another thread): the run ends as
    # interrupted at once, not when the binding returns.
    gw = hostile.gateway(bindings={"add": _add, "block": gate.wait}, pool_size=1 if warm else 0)
    limits = Limits(wall_seconds=30, kill_grace_seconds=0.3, cpu_seconds=10)
    program = _prog("return await tools.block()\n")

    async def main() -> tuple[RunResult, float]:
        if warm:
            assert (await gw.run("'warm-up'")).ok
        try:
            started = asyncio.Event()
            loop = asyncio.get_running_loop()

            def on_call(record: CallRecord) -> None:
                if record.id == 1:
                    loop.call_later(0.2, started.set)

            run = asyncio.ensure_future(gw.run(program, limits=limits, on_call=on_call))
            await asyncio.wait_for(started.wait(), 20)
            t0 = time.monotonic()
            gw.interrupt()
            result = await asyncio.wait_for(run, 20)
            return result, time.monotonic() - t0
        finally:
            await gw.runtime.end_loop()

    r, took = asyncio.run(main())
    hostile.record(r)
    gate.release()
    assert r.status == "interrupted", r.message
    assert took < 5
    assert _ids(r.calls) == [0, 1, 2]


# -- runs side by side ------------------------------------------------------------------


_ROUNDS = 6


@pytest.mark.timeout(120)
@WARM_COLD
def test_a_chaining_run_does_not_hold_a_pool_thread_from_another_runs_waiting_call(hostile, warm):
    # Two pool threads. Run B, six times: gathers hold(r) and mark(r); hold(r) blocks a
    # pool thread until mark(r) has run, and mark(r) waits in B's lane for a pool thread
    # (B has one already: the fairness rule queues it for the next thread that ends a
    # job). Run A makes sequential tick() calls on the other pool thread. Before the
    # chain each tick was a job, and the first to end handed its thread to mark(r): at
    # most a tick or two ran while B's job waited. A chain never ends a job while A keeps
    # calling: mark(r) waits until A's chain happens to break (a gap of over 1 ms), or
    # until hold(r) gives up.
    marks = [threading.Event() for _ in range(_ROUNDS)]
    gws: list[Gateway] = []
    while_waiting = [0]

    def hold(r: int) -> bool:
        return marks[r].wait(8)

    def mark(r: int) -> bool:
        marks[r].set()
        return True

    def tick() -> bool:
        # The dispatcher of the run this tick belongs to: the CallDispatcher method that
        # called the binding, up the stack.
        frame = sys._getframe(1)
        while type(frame.f_locals.get("self")).__name__ != "CallDispatcher":
            frame = frame.f_back
        mine = frame.f_locals["self"]
        w = workers_for(gws[0]._executor)
        with w._lock:
            others = [
                job
                for lane in w._ready
                for job in lane.waiting
                if getattr(job, "func", None) is not None and job.func.__self__ is not mine
            ]
        if others:  # another run's job waits for a pool thread
            while_waiting[0] += 1
        return marks[-1].is_set()

    gw = hostile.gateway(
        bindings={"add": _add, "hold": hold, "mark": mark, "tick": tick},
        pool_size=2 if warm else 0,
        max_threads=2,
    )
    gws.append(gw)
    chainer = _prog(
        """
        n = 0
        t0 = time.monotonic()
        while time.monotonic() - t0 < 20:
            n += 1
            if await tools.tick():
                return n
        return -n
        """
    )
    victim = (
        "import asyncio\n"
        f"return [list(await asyncio.gather(tools.hold(r), tools.mark(r))) for r in range({_ROUNDS})]\n"
    )
    limits = Limits(wall_seconds=40, kill_grace_seconds=0.3, cpu_seconds=35, max_calls=10**6)

    async def main() -> list[RunResult]:
        if warm:
            assert (await gw.run("'warm-up'")).ok
        try:
            return list(
                await asyncio.gather(gw.run(chainer, limits=limits), gw.run(victim, limits=limits))
            )
        finally:
            await gw.runtime.end_loop()

    a, b = (hostile.record(r) for r in asyncio.run(main()))
    for m in marks:
        m.set()
    assert a.status == "ok", a.message
    assert b.status == "ok", b.message
    assert a.value > 0
    assert b.value == [[True, True]] * _ROUNDS
    assert while_waiting[0] <= 2 * _ROUNDS, (
        f"{while_waiting[0]} of the chaining run's calls ran while another run's call "
        "waited for a pool thread"
    )


@pytest.mark.timeout(120)
@pytest.mark.parametrize("tracing", [False, True], ids=["plain", "traced"])
def test_many_runs_chaining_on_one_thread_beside_a_blocked_run(hostile, gate, tracing):
    # max_threads=1, one run blocks its call on the gate, six runs make 200 sequential
    # calls each: every run finishes, records its own calls in order, and sees only
    # its own answers; then the gate opens.
    kw: dict[str, Any] = {}
    if tracing:
        pytest.importorskip("opentelemetry")
        kw["tracing"] = True
    gw = hostile.gateway(
        bindings={"add": _add, "block": gate.wait, "release": gate.release},
        pool_size=0,
        max_threads=1,
        **kw,
    )
    chain = "return [await tools.add({k}, i) for i in range(200)]\n"
    limits = Limits(wall_seconds=60, kill_grace_seconds=0.3, cpu_seconds=40)
    heard: dict[int, list[CallRecord]] = {k: [] for k in range(7)}

    async def main() -> list[RunResult]:
        try:
            blocked = asyncio.ensure_future(
                gw.run("return await tools.block()\n", limits=limits, on_call=heard[6].append)
            )
            runs = [
                gw.run(chain.format(k=k * 1000), limits=limits, on_call=heard[k].append)
                for k in range(6)
            ]
            done = list(await asyncio.gather(*runs))
            gate.release()
            return [*done, await blocked]
        finally:
            await gw.runtime.end_loop()

    results = [hostile.record(r) for r in asyncio.run(main())]
    for k, r in enumerate(results[:6]):
        assert r.status == "ok", r.message
        assert r.value == [k * 1000 + i for i in range(200)]
        assert _ids(r.calls) == list(range(200))
        assert [c.value for c in r.calls] == r.value
        assert _ids(heard[k]) == list(range(200))
    assert results[6].status == "ok", results[6].message
    assert results[6].value is True


# -- the gateway and the host's hooks ---------------------------------------------------


@pytest.mark.timeout(60)
def test_a_gateway_closed_while_a_chained_binding_blocks(hostile, gate):
    # aclose() while the chain's thread is in a binding: the run ends as interrupted, the
    # late answer goes nowhere (the loop may be gone), and every binding thread ends once
    # the binding returns.
    gw = hostile.gateway(bindings={"add": _add, "block": gate.wait}, pool_size=0)
    limits = Limits(wall_seconds=30, kill_grace_seconds=0.3, cpu_seconds=10)

    async def main() -> RunResult:
        blocked = asyncio.Event()
        loop = asyncio.get_running_loop()

        def on_call(record: CallRecord) -> None:
            if record.id == 1:
                # the chain's thread answered call 1 and reads call 2 (block) next
                loop.call_later(0.2, blocked.set)

        run = asyncio.ensure_future(
            gw.run(_prog("return await tools.block()\n"), limits=limits, on_call=on_call)
        )
        await asyncio.wait_for(blocked.wait(), 20)
        await asyncio.wait_for(gw.aclose(), 20)
        return await asyncio.wait_for(run, 20)

    r = hostile.record(asyncio.run(main()))
    gate.release()
    assert r.status == "interrupted", r.message
    assert _ids(r.calls) == [0, 1, 2]
    assert not _joined(_binding_threads())


@pytest.mark.timeout(60)
@WARM_COLD
def test_a_chained_binding_that_runs_another_run_on_the_same_gateway(hostile, warm):
    # One thread (max_threads=1): the chain's binding starts a run on the host's loop and
    # waits for it; that run's calls get a thread of their own, and both runs record
    # their own calls.
    gws: list[Gateway] = []
    loops: list[asyncio.AbstractEventLoop] = []
    inner: list[RunResult] = []

    def nested(k: int) -> int:
        fut = asyncio.run_coroutine_threadsafe(
            gws[0].run(f"return [await tools.add({k}, i) for i in range(5)]\n"), loops[0]
        )
        result = fut.result(20)
        inner.append(result)
        return sum(result.value)

    gw = hostile.gateway(
        bindings={"add": _add, "nested": nested}, pool_size=1 if warm else 0, max_threads=1
    )
    gws.append(gw)
    limits = Limits(wall_seconds=40, kill_grace_seconds=0.3, cpu_seconds=20)

    async def main() -> RunResult:
        loops.append(asyncio.get_running_loop())
        try:
            return await gw.run(
                _prog("return [await tools.nested(10 * k) for k in range(3)]\n"), limits=limits
            )
        finally:
            await gw.runtime.end_loop()

    r = hostile.record(asyncio.run(main()))
    for res in inner:
        hostile.record(res)
    assert r.status == "ok", r.message
    assert r.value == [sum(10 * k + i for i in range(5)) for k in range(3)]
    assert _ids(r.calls) == [0, 1, 2, 3, 4]
    assert [_ids(res.calls) for res in inner] == [list(range(5))] * 3


@pytest.mark.timeout(60)
@WARM_COLD
def test_an_on_call_hook_that_raises_and_one_that_reads_the_record_in_a_chain(hostile, warm):
    # on_call raises for every call: the run goes on, every call is heard once, in id
    # order, with its answer in the record when heard.
    heard: list[tuple[int, Any, bool | None]] = []

    def on_call(record: CallRecord) -> None:
        heard.append((record.id, record.value, record.ok))
        raise RuntimeError(f"hook {record.id}")

    gw = hostile.gateway(bindings={"add": _add}, pool_size=1 if warm else 0)
    program = "return [await tools.add(i, i) for i in range(300)]\n"

    async def main() -> RunResult:
        if warm:
            assert (await gw.run("'warm-up'")).ok
        try:
            return await gw.run(program, limits=FAST, on_call=on_call)
        finally:
            await gw.runtime.end_loop()

    r = hostile.record(asyncio.run(main()))
    assert r.status == "ok", r.message
    assert r.value == [2 * i for i in range(300)]
    assert heard == [(i, 2 * i, True) for i in range(300)]
    assert "on_call: RuntimeError: hook 0" in r.note
    assert "on_call: RuntimeError: hook 299" in r.note


@pytest.mark.timeout(60)
@WARM_COLD
def test_chained_calls_sit_between_the_output_printed_around_them(hostile, warm):
    # print(i) then call i, 300 times: the thread answers call i (and may answer the
    # next ones) before the loop reads the pipe; still each call is placed after the
    # text printed before it and before the text printed after it.
    r = hostile.run(
        "for i in range(300):\n    print(f'p{i}', flush=True)\n    await tools.add(i, 0)\n",
        Limits(wall_seconds=30, kill_grace_seconds=0.3, cpu_seconds=20),
        warm=warm,
    )
    assert r.status == "ok", r.message
    where = {}
    for k, output in enumerate(r.outputs):
        for word in output.get("text", "").split():
            where[word] = k
    assert _ids(r.calls) == list(range(300))
    for c in r.calls:
        assert c.output_index is not None
        assert c.output_index > where[f"p{c.id}"], c
        if c.id + 1 < 300:
            assert c.output_index <= where[f"p{c.id + 1}"], c


_USER: contextvars.ContextVar[str] = contextvars.ContextVar("_USER")


@pytest.mark.timeout(60)
@WARM_COLD
def test_bindings_see_the_hosts_context_after_a_chain_ends(hostile, warm):
    # As asyncio.to_thread: a binding runs in the context gw.run was called in (a
    # request's user, say). A chain, then a pause that ends it (fd 3 back to the loop),
    # then more calls, sync and async: every one sees the host's context.
    def who() -> str:
        return _USER.get("UNSET")

    async def awho() -> str:
        return _USER.get("UNSET")

    gw = hostile.gateway(bindings={"who": who, "awho": awho}, pool_size=1 if warm else 0)
    program = """
import time
out = []
for k in range(3):
    out.append([await tools.who() for i in range(5)])
    time.sleep(0.02)  # longer than the thread's hold: the chain ends
out.append(await tools.awho())
return out
"""

    async def main() -> RunResult:
        if warm:
            assert (await gw.run("'warm-up'")).ok
        try:
            _USER.set("alice")
            return await gw.run(program, limits=FAST)
        finally:
            await gw.runtime.end_loop()

    r = hostile.record(asyncio.run(main()))
    assert r.status == "ok", r.message
    assert r.value == [["alice"] * 5] * 3 + ["alice"]


@pytest.mark.timeout(60)
@WARM_COLD
def test_a_whole_call_and_half_the_next_in_one_write_to_the_thread(hostile, warm):
    # The thread reads a whole call and the start of the next: it takes the first, runs
    # it, and the second, completed later (past its hold, or within it), once.
    r = hostile.run(
        _prog(
            """
            out = []
            for k in (1, 5, 17, 30):
                a = conn._next_call_id
                fa, fb = expect(a), expect(a + 1)
                second = frame(a + 1, args=(k, 200))
                forge(frame(a, args=(k, 100)) + second[:k])
                time.sleep(0.003)
                forge(second[k:])
                out.append([await fa, await fb, await tools.add(k, 300)])
            return out
            """
        ),
        Limits(wall_seconds=30, kill_grace_seconds=0.3, cpu_seconds=20),
        warm=warm,
    )
    assert r.status == "ok", r.message
    assert r.value == [[k + 100, k + 200, k + 300] for k in (1, 5, 17, 30)]
    assert _ids(r.calls) == list(range(14))


@pytest.mark.timeout(120)
def test_two_gateways_on_one_loop_each_with_runs_chaining(hostile):
    # Two gateways (two executors), three runs each, side by side on one loop: each run
    # gets its own answers, recorded in order.
    gws = [hostile.gateway(bindings={"add": _add}, pool_size=0, max_threads=2) for _ in range(2)]
    chain = "return [await tools.add({k}, i) for i in range(150)]\n"
    limits = Limits(wall_seconds=60, kill_grace_seconds=0.3, cpu_seconds=40)

    async def main() -> list[RunResult]:
        try:
            return list(
                await asyncio.gather(
                    *[
                        gws[g].run(chain.format(k=(g * 3 + k) * 1000), limits=limits)
                        for g in range(2)
                        for k in range(3)
                    ]
                )
            )
        finally:
            for gw in gws:
                await gw.runtime.end_loop()

    results = [hostile.record(r) for r in asyncio.run(main())]
    for n, r in enumerate(results):
        assert r.status == "ok", r.message
        assert r.value == [n * 1000 + i for i in range(150)]
        assert _ids(r.calls) == list(range(150))
        assert [c.value for c in r.calls] == r.value


@pytest.mark.timeout(60)
@WARM_COLD
def test_bindings_see_the_hosts_context_after_fd_3_was_paused(hostile, warm):
    # max_calls_in_flight=2 and three calls gathered: the third waits for a slot and fd 3
    # is paused; once the first two answered it is read again. Every call after that
    # still sees the context gw.run was called in.
    def who() -> str:
        return _USER.get("UNSET")

    gw = hostile.gateway(bindings={"who": who}, pool_size=1 if warm else 0)
    program = """
import asyncio
out = []
for k in range(3):
    out.append(list(await asyncio.gather(*[tools.who() for i in range(3)])))
    out.append(await tools.who())
return out
"""
    limits = Limits(wall_seconds=10, kill_grace_seconds=0.3, cpu_seconds=5, max_calls_in_flight=2)

    async def main() -> RunResult:
        if warm:
            assert (await gw.run("'warm-up'")).ok
        try:
            _USER.set("alice")
            return await gw.run(program, limits=limits)
        finally:
            await gw.runtime.end_loop()

    r = hostile.record(asyncio.run(main()))
    assert r.status == "ok", r.message
    assert r.value == [["alice"] * 3, "alice"] * 3


@pytest.mark.timeout(60)
@WARM_COLD
def test_unknown_inline_and_keyboard_interrupt_calls_amid_a_chain(hostile, warm):
    # An unknown binding (forged: the child's client would refuse it), an inline one, and
    # a binding raising KeyboardInterrupt, each between sequential calls: each answered
    # once; the host goes on; the chain starts again after each.
    def kbint() -> None:
        raise KeyboardInterrupt

    gw = hostile.gateway(
        bindings={"add": _add, "fast": inline(lambda x: x * 2), "kbint": kbint},
        pool_size=1 if warm else 0,
    )
    r = hostile.run(
        _prog(
            """
            out = []
            for i in range(5):
                cid = conn._next_call_id
                fut = expect(cid, 'tools.nope')
                forge(frame(cid, 'nope'))
                try:
                    await fut
                except ToolError as exc:
                    out.append(exc.ename)
                out.append(await tools.add(i, 0))
                out.append(await tools.fast(i))
                out.append(await tools.add(i, 1))
                try:
                    await tools.kbint()
                except ToolError as exc:
                    out.append(exc.ename)
                out.append(await tools.add(i, 2))
            return out
            """
        ),
        FAST,
        warm=warm,
        gateway=gw,
    )
    assert r.status == "ok", r.message
    assert r.value == [
        v for i in range(5) for v in ("LookupError", i, 2 * i, i + 1, "KeyboardInterrupt", i + 2)
    ]
    assert _ids(r.calls) == list(range(2 + 30))


@pytest.mark.timeout(60)
@WARM_COLD
def test_a_chain_up_to_max_calls_exactly(hostile, warm):
    # max_calls=12: the twelfth call is taken by the chain's thread; the thirteenth is
    # refused by the child itself, never reaching the host.
    limits = Limits(wall_seconds=10, kill_grace_seconds=0.3, cpu_seconds=5, max_calls=12)
    r = hostile.run(
        """
out = [await tools.add(i, 0) for i in range(12)]
try:
    await tools.add(99, 0)
except Exception as exc:
    out.append(type(exc).__name__)
return out
""",
        limits,
        warm=warm,
    )
    assert r.status == "ok", r.message
    assert r.value[:12] == list(range(12))
    assert len(r.value) == 13 and r.value[12] != 99
    assert _ids(r.calls) == list(range(12))
