"""Attacks on batched binding calls (docs/protocol.md, "Calls started together travel
together"): the calls of one read of fd 3 go to one worker thread, a sweep splits a batch
behind a call that blocks, a batch's calls not started at the run's end are not started.

A program makes batches honestly (an ``asyncio.gather`` of calls leaves in one write), or
forges them (compact frames written straight to fd 3, many in one write). Whatever it
sends, the host keeps its limits per call, answers each call once with its own value,
records what ran, never blocks on a child that does not read, and stays usable.
"""

from __future__ import annotations

import asyncio
import collections
import textwrap
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from kernelgate import Limits, inline

WARM_COLD = pytest.mark.parametrize("warm", [True, False], ids=["warm", "cold"])
SLACK = 5.0

#: Finds the child's CallClient and wire connection; ``forge_calls`` writes compact call
#: frames (after the first honest call agreed them), all in one write.
_PRELUDE = (
    "import asyncio, gc, json, os\n"
    "client = [o for o in gc.get_objects() if type(o).__name__ == 'CallClient'][0]\n"
    "conn = client.conn\n"
    "def forge_calls(name, args_list):\n"
    "    first = conn._next_call_id\n"
    "    lines = [json.dumps(['call', first + k, 'tools', name, a, {}]) for k, a in\n"
    "             enumerate(args_list)]\n"
    "    conn._next_call_id += len(lines)\n"
    "    data = ('\\n'.join(lines) + '\\n').encode()\n"
    "    os.set_blocking(3, True)\n"
    "    while data:\n"
    "        data = data[os.write(3, data):]\n"
    "    os.set_blocking(3, False)\n"
)


def _src(body: str) -> str:
    return _PRELUDE + textwrap.dedent(body)


class Gate:
    """A blocking binding's gate: ``wait`` returns whether it was opened within the
    timeout; the test opens it at the end whatever happened, so no thread stays blocked."""

    def __init__(self) -> None:
        self.event = threading.Event()

    def wait(self, timeout: float = 8.0) -> str:
        return "released" if self.event.wait(timeout) else "timed out"

    def release(self) -> bool:
        self.event.set()
        return True


def _gated_gateway(hostile: Any, gate: Gate, warm: bool) -> Any:
    """A gateway with ``block`` (waits on ``gate``), ``release`` (opens it) and ``add``."""
    return hostile.gateway(
        bindings={"block": gate.wait, "release": gate.release, "add": lambda a, b: a + b},
        pool_size=1 if warm else 0,
    )


@pytest.fixture
def gate() -> Iterator[Gate]:
    g = Gate()
    yield g
    g.event.set()


@pytest.mark.timeout(60)
@WARM_COLD
def test_a_blocked_call_first_in_a_batch_does_not_hold_up_the_calls_behind_it(hostile, gate, warm):
    # [block, release, add] in one write: if the calls behind ``block`` waited for it in
    # its thread, ``release`` would never run and ``block`` would time out.
    gw = _gated_gateway(hostile, gate, warm)
    r = hostile.run(
        _src(
            """
            return await asyncio.gather(tools.block(), tools.release(), tools.add(1, 2))
            """
        ),
        gateway=gw,
        warm=warm,
    )
    assert r.status == "ok", r.message
    assert r.value == ["released", True, 3]
    assert [(c.name, c.ok) for c in sorted(r.calls, key=lambda c: c.id)] == [
        ("block", True),
        ("release", True),
        ("add", True),
    ]


@pytest.mark.timeout(60)
@WARM_COLD
def test_an_answer_ahead_of_a_blocked_call_in_its_batch_reaches_the_program(hostile, gate, warm):
    # [add, block, add] in one write; the program needs the first answer (which waits in
    # the batch's thread behind ``block``) before it makes the call that releases it.
    gw = _gated_gateway(hostile, gate, warm)
    r = hostile.run(
        _src(
            """
            first = asyncio.ensure_future(tools.add(1, 2))
            blocked = asyncio.ensure_future(tools.block())
            last = asyncio.ensure_future(tools.add(3, 4))
            a = await first
            assert not blocked.done()
            await tools.release()
            return [a, await blocked, await last]
            """
        ),
        gateway=gw,
        warm=warm,
    )
    assert r.status == "ok", r.message
    assert r.value == [3, "released", 7]


@pytest.mark.timeout(60)
@WARM_COLD
def test_a_forged_batch_past_max_calls_in_one_write_ends_as_protocol(hostile, warm):
    ran: collections.Counter[int] = collections.Counter()
    lock = threading.Lock()

    def count(i: int) -> int:
        with lock:
            ran[i] += 1
        return i

    limits = Limits(wall_seconds=10, kill_grace_seconds=0.3, cpu_seconds=5, max_calls=5)
    gw = hostile.gateway(bindings={"count": count}, pool_size=1 if warm else 0)
    r = hostile.run(
        _src(
            """
            assert await tools.count(0) == 0   # the full first call: compact from now on
            forge_calls('count', [[i] for i in range(1, 400)])
            import time
            time.sleep(5)
            """
        ),
        limits,
        gateway=gw,
        warm=warm,
    )
    gw.close()  # every binding thread has ended: ``ran`` is final
    assert r.status == "protocol", r.message
    assert "past max_calls=5" in r.error.evalue
    assert all(c.id < 5 for c in r.calls) and len({c.id for c in r.calls}) == len(r.calls)
    assert all(n == 1 for n in ran.values()) and set(ran) <= set(range(5))
    # The record says what ran: every call recorded as answered ran, once.
    assert {c.args[0] for c in r.calls if c.ok} <= set(ran)


@pytest.mark.timeout(90)
@WARM_COLD
def test_a_batch_beyond_the_slots_keeps_max_calls_in_flight_and_answers_each_call(hostile, warm):
    state = {"active": 0, "most": 0}
    lock = threading.Lock()
    ran: collections.Counter[int] = collections.Counter()

    def square(i: int) -> int:
        with lock:
            state["active"] += 1
            state["most"] = max(state["most"], state["active"])
            ran[i] += 1
        try:
            threading.Event().wait(0.005)  # long enough for the sweep to split the batch
            return i * i
        finally:
            with lock:
                state["active"] -= 1

    limits = Limits(wall_seconds=30, kill_grace_seconds=0.3, cpu_seconds=20, max_calls_in_flight=3)
    gw = hostile.gateway(bindings={"square": square}, pool_size=1 if warm else 0)
    r = hostile.run(
        _src(
            """
            return await asyncio.gather(*[tools.square(i) for i in range(60)])
            """
        ),
        limits,
        gateway=gw,
        warm=warm,
    )
    assert r.status == "ok", r.message
    assert r.value == [i * i for i in range(60)]
    assert state["most"] <= 3, state
    assert ran == collections.Counter(range(60))
    records = sorted(r.calls, key=lambda c: c.id)
    assert [c.id for c in records] == list(range(60))
    assert all(c.ok and c.value == c.args[0] ** 2 for c in records)


@pytest.mark.timeout(90)
@WARM_COLD
def test_answers_of_a_mixed_batch_go_to_their_own_calls_once(hostile, warm):
    # Sync, async, inline and failing bindings in one gather, forged too: each answer is
    # its own call's, each binding ran once per call, each record is the call's.
    ran: collections.Counter[tuple[str, int]] = collections.Counter()
    lock = threading.Lock()

    def sync(i: int) -> int:
        with lock:
            ran["sync", i] += 1
        if i % 7 == 0:
            raise ValueError(f"no {i}")
        return i + 1000

    async def coro(i: int) -> int:
        with lock:
            ran["coro", i] += 1
        await asyncio.sleep(0)
        return i + 2000

    @inline
    def quick(i: int) -> int:
        with lock:
            ran["quick", i] += 1
        return i + 3000

    gw = hostile.gateway(
        bindings={"sync": sync, "coro": coro, "quick": quick}, pool_size=1 if warm else 0
    )
    r = hostile.run(
        _src(
            """
            names = ['sync', 'coro', 'quick']
            calls = [getattr(tools, names[i % 3])(i) for i in range(300)]
            out = await asyncio.gather(*calls, return_exceptions=True)
            return [o if isinstance(o, int) else type(o).__name__ + ':' + str(o) for o in out]
            """
        ),
        Limits(wall_seconds=30, kill_grace_seconds=0.3, cpu_seconds=20),
        gateway=gw,
        warm=warm,
    )
    assert r.status == "ok", r.message
    offset = {"sync": 1000, "coro": 2000, "quick": 3000}
    names = ["sync", "coro", "quick"]
    expected = []
    for i in range(300):
        name = names[i % 3]
        if name == "sync" and i % 7 == 0:
            expected.append(f"ToolError:tools.sync: ValueError: no {i}")
        else:
            expected.append(i + offset[name])
    got = [v.split(":", 1)[0] + ":" if isinstance(v, str) else v for v in r.value]
    assert got == [e.split(":", 1)[0] + ":" if isinstance(e, str) else e for e in expected]
    assert ran == collections.Counter((names[i % 3], i) for i in range(300))
    records = sorted(r.calls, key=lambda c: c.id)
    assert [c.id for c in records] == list(range(300))
    for c in records:
        i = c.args[0]
        assert c.name == names[i % 3]
        if c.name == "sync" and i % 7 == 0:
            assert not c.ok and c.error is not None and c.error.ename == "ValueError"
        else:
            assert c.ok and c.value == i + offset[c.name]


@pytest.mark.timeout(90)
@WARM_COLD
def test_a_child_that_never_reads_its_answers_does_not_hold_the_host(hostile, warm):
    # 600 calls forged in one write, each answered with 60 kB: ~36 MB of answers for a
    # child that then never reads fd 3. The host must not block a worker thread (or its
    # loop) on the full socket; the run ends at its wall clock; the gateway goes on.
    def big(i: int) -> str:
        return "x" * 60_000

    limits = Limits(wall_seconds=4, kill_grace_seconds=0.3, cpu_seconds=20)
    gw = hostile.gateway(
        bindings={"big": big, "add": lambda a, b: a + b}, pool_size=1 if warm else 0
    )
    r = hostile.run(
        _src(
            """
            assert await tools.add(1, 2) == 3
            forge_calls('big', [[i] for i in range(600)])
            import time
            time.sleep(60)   # the loop never runs again: nothing reads fd 3
            """
        ),
        limits,
        gateway=gw,
        warm=warm,
    )
    assert r.status == "timeout", r.message
    assert r.duration_s < limits.wall_seconds + SLACK
    ids = [c.id for c in r.calls]
    assert len(ids) == len(set(ids)) and max(ids) <= 600
    assert all(c.value is None or len(c.value) == 60_000 for c in r.calls if c.name == "big")
    # The same gateway (its binding threads, its loop) serves the next run.
    after = hostile.run(
        _src("return await asyncio.gather(*[tools.add(i, 1) for i in range(50)])"),
        gateway=gw,
        warm=warm,
    )
    assert after.status == "ok", after.message
    assert after.value == [i + 1 for i in range(50)]


class Blocked:
    """Counts the ``block`` calls waiting at the gate; ``all_in`` (a coroutine binding, on
    the host's loop: it needs no binding thread) returns once ``n`` of them wait."""

    def __init__(self, gate: Gate, n: int) -> None:
        self.gate, self.n, self.waiting = gate, n, 0
        self.lock = threading.Lock()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.ready: asyncio.Event | None = None

    def block(self) -> str:
        with self.lock:
            self.waiting += 1
            if self.waiting == self.n and self.loop is not None and self.ready is not None:
                self.loop.call_soon_threadsafe(self.ready.set)
        return self.gate.wait()

    async def all_in(self) -> int:
        with self.lock:
            self.loop = asyncio.get_running_loop()
            self.ready = asyncio.Event()
            if self.waiting >= self.n:
                self.ready.set()
        await self.ready.wait()
        return self.n


def _starve(hostile: Any, gate: Gate, blocked_calls: int, threads: int) -> tuple[Any, Any]:
    """Run A holds ``blocked_calls`` calls blocked in binding threads (one batch, split by
    the sweep); once they all wait, run B, on the same gateway, makes 200 batched calls,
    then releases A."""
    blocked = Blocked(gate, blocked_calls)
    gw = hostile.gateway(
        bindings={
            "block": blocked.block,
            "all_in": blocked.all_in,
            "release": gate.release,
            "add": lambda a, b: a + b,
        },
        pool_size=2,
        max_threads=threads,
    )
    a_src = _src(f"return await asyncio.gather(*[tools.block() for _ in range({blocked_calls})])")
    b_src = _src(
        """
        await tools.all_in()
        out = await asyncio.gather(*[tools.add(i, 1) for i in range(200)])
        await tools.release()
        return out
        """
    )

    async def both() -> list[Any]:
        try:
            return list(await asyncio.gather(gw.run(a_src), gw.run(b_src)))
        finally:
            await gw.runtime.end_loop()

    a, b = (hostile.record(x) for x in asyncio.run(both()))
    return a, b


@pytest.mark.timeout(90)
def test_one_runs_blocked_batch_does_not_starve_another_runs_calls(hostile, gate):
    # 6 of the gateway's 8 binding threads blocked by run A: run B's batches get the rest.
    a, b = _starve(hostile, gate, blocked_calls=6, threads=8)
    assert b.status == "ok", b.message
    assert b.value == [i + 1 for i in range(200)]
    assert a.status == "ok", a.message
    assert a.value == ["released"] * 6


@pytest.mark.timeout(90)
def test_one_run_cannot_take_every_binding_thread_from_the_other_runs(hostile, gate):
    a, b = _starve(hostile, gate, blocked_calls=8, threads=8)
    assert b.status == "ok", b.message
    assert a.value == ["released"] * 8  # B's calls ran while A's blocked: B released them


@pytest.mark.timeout(60)
@WARM_COLD
def test_calls_in_the_same_write_as_the_reply_are_not_started_after_the_run_ended(hostile, warm):
    """The child's reply ends the run; calls that came in the same read of fd 3 are handed
    to a thread after it. The record must say what ran: a call that ran is recorded as
    answered, or else it never ran (calls.py: a batch's calls not started when the run
    ends are not started). ``hold`` (inline, on the host's loop) keeps the loop busy
    until a ``count`` call starts, as a loaded host's loop would be."""
    started = threading.Event()
    ran: list[int] = []
    lock = threading.Lock()

    def count(i: int) -> int:
        with lock:
            ran.append(i)
        started.set()
        return i

    @inline
    def hold() -> int:
        asyncio.get_running_loop().call_soon(started.wait, 3)
        return 0

    gw = hostile.gateway(bindings={"count": count, "hold": hold}, pool_size=1 if warm else 0)
    r = hostile.run(
        _src(
            """
            client._gathering = True   # the calls below wait for the next frame: the reply
            asyncio.ensure_future(tools.hold())
            for i in range(5):
                asyncio.ensure_future(tools.count(i))
            await asyncio.sleep(0)     # the tasks make their calls
            return 'done'
            """
        ),
        gateway=gw,
        warm=warm,
    )
    gw.close()  # every binding thread has ended: ``ran`` is final
    assert r.status == "ok", r.message
    answered = sorted(c.args[0] for c in r.calls if c.name == "count" and c.ok)
    assert sorted(ran) == answered, f"ran {ran}, recorded as answered {answered}"


@pytest.mark.timeout(60)
@WARM_COLD
def test_os_exit_right_after_a_batch_ends_the_run_and_the_gateway_goes_on(hostile, gate, warm):
    # A batch whose first call blocks in a binding thread, the process gone right after
    # the write: the run ends at once (worker_exit), not when the binding returns; what
    # is recorded as answered ran; the same gateway serves the next run.
    ran: collections.Counter[int] = collections.Counter()
    lock = threading.Lock()

    def count(i: int) -> int:
        with lock:
            ran[i] += 1
        return i

    gw = hostile.gateway(
        bindings={"block": gate.wait, "count": count, "add": lambda a, b: a + b},
        pool_size=1 if warm else 0,
    )
    r = hostile.run(
        _src(
            """
            assert await tools.add(1, 2) == 3
            forge_calls('block', [[]])
            forge_calls('count', [[i] for i in range(50)])
            os._exit(3)
            """
        ),
        gateway=gw,
        warm=warm,
    )
    assert r.status == "worker_exit" and r.exit_code == 3, r.message
    assert r.duration_s < SLACK  # not the 8 s the blocked binding waits
    after = hostile.run(_src("return await tools.add(2, 3)"), gateway=gw, warm=warm)
    assert after.status == "ok" and after.value == 5, after.message
    gate.release()
    gw.close()
    assert all(n == 1 for n in ran.values())
    assert {c.args[0] for c in r.calls if c.name == "count" and c.ok} <= set(ran)


@pytest.mark.timeout(60)
def test_closing_the_gateway_while_a_batch_blocks_returns_and_leaves_nothing(hostile, gate):
    blocked = Blocked(gate, 4)
    gw = hostile.gateway(bindings={"block": blocked.block, "add": lambda a, b: a + b}, pool_size=0)
    src = _src("return await asyncio.gather(*[tools.block() for _ in range(4)])")

    async def close_mid_batch() -> tuple[Any, float]:
        loop = asyncio.get_running_loop()
        run = asyncio.ensure_future(gw.run(src))
        await blocked.all_in()
        t0 = loop.time()
        await gw.aclose()
        closed_in = loop.time() - t0
        return await run, closed_in

    r, closed_in = asyncio.run(close_mid_batch())
    hostile.record(r)
    assert r.status == "interrupted", r.message
    assert closed_in < SLACK  # not the 8 s the blocked bindings wait
    gate.release()


@pytest.mark.timeout(60)
@WARM_COLD
def test_held_calls_keep_their_place_among_stdout_and_displays(hostile, warm):
    # A gather whose tasks print and display before and after their call: held calls never
    # pass a later frame, so each call is recorded after its own "before" output and no
    # later than its "after" output.
    r = hostile.run(
        _src(
            """
            async def one(i):
                print('before', i)
                display({'text/plain': f'before {i}'}, raw=True)
                v = await tools.add(i, 0)
                display({'text/plain': f'after {i}'}, raw=True)
                print('after', i)
                return v
            return await asyncio.gather(*[one(i) for i in range(12)])
            """
        ),
        warm=warm,
    )
    assert r.status == "ok", r.message
    assert r.value == list(range(12))
    shown = [
        o["data"]["text/plain"] if o["output_type"] == "display_data" else None for o in r.outputs
    ]

    def at(text: str) -> int:
        return shown.index(repr({"text/plain": text}))

    for c in r.calls:
        i = c.args[0]
        assert at(f"before {i}") < c.output_index <= at(f"after {i}"), (i, c.output_index)
    for i in range(12):
        assert r.stdout.index(f"before {i}\n") < r.stdout.index(f"after {i}\n")


def _forge_lines(body: str) -> str:
    """A program that, after one honest call, writes ``data`` (built by ``body``) to fd 3
    in one write, then waits."""
    head = """
        from kernelgate.wire.events import ExecuteReply
        assert await tools.scount(0) == 0
        n = conn._next_call_id
        """
    tail = """
        os.set_blocking(3, True)
        while data:
            data = data[os.write(3, data):]
        import time
        time.sleep(5)
        """
    return _src(textwrap.dedent(head) + textwrap.dedent(body) + textwrap.dedent(tail))


def _counting() -> tuple[list[tuple[str, int]], dict[str, Any]]:
    ran: list[tuple[str, int]] = []
    lock = threading.Lock()

    def scount(i: int) -> int:
        with lock:
            ran.append(("sync", i))
        return i

    async def acount(i: int) -> int:
        ran.append(("async", i))
        return i

    @inline
    def icount(i: int) -> int:
        ran.append(("inline", i))
        return i

    return ran, {"scount": scount, "acount": acount, "icount": icount}


@pytest.mark.timeout(60)
@WARM_COLD
def test_calls_forged_after_the_reply_in_the_same_write_never_run(hostile, warm):
    ran, bindings = _counting()
    gw = hostile.gateway(bindings=bindings, pool_size=1 if warm else 0)
    r = hostile.run(
        _forge_lines(
            """
            lines = [json.dumps(['call', n + k, 'tools', name, [100 + k], {}])
                     for k, name in enumerate(['icount', 'acount', 'scount'] * 20)]
            data = conn.send(ExecuteReply('ok', usage={})) + ('\\n'.join(lines) + '\\n').encode()
            """
        ),
        gateway=gw,
        warm=warm,
    )
    gw.close()
    assert r.status == "ok", r.message
    assert [(c.id, c.name, c.ok) for c in r.calls] == [(0, "scount", True)]
    assert ran == [("sync", 0)]


@pytest.mark.timeout(60)
@WARM_COLD
def test_a_repeated_call_id_inside_a_batch_ends_as_protocol_and_runs_once(hostile, warm):
    ran, bindings = _counting()
    gw = hostile.gateway(bindings=bindings, pool_size=1 if warm else 0)
    r = hostile.run(
        _forge_lines(
            """
            ids = [n, n + 1, n + 1, n + 2] + list(range(n + 3, n + 40))
            lines = [json.dumps(['call', i, 'tools', 'scount', [i], {}]) for i in ids]
            data = ('\\n'.join(lines) + '\\n').encode()
            """
        ),
        gateway=gw,
        warm=warm,
    )
    gw.close()
    assert r.status == "protocol", r.message
    assert "out of sequence" in r.error.evalue
    ids = [c.id for c in r.calls]
    assert len(ids) == len(set(ids)) and set(ids) <= {0, 1, 2}
    assert sorted(ran) == sorted(set(ran)) and {i for _, i in ran} <= {0, 1, 2}
    assert {c.id for c in r.calls if c.ok} <= {i for _, i in ran}


@pytest.mark.timeout(60)
@WARM_COLD
def test_a_batch_with_answers_that_cannot_be_sent_answers_every_call(hostile, warm):
    # In one batch: answers over the frame, not JSON, a lone surrogate, NaN, and plain
    # ones. Each call gets one answer: the bad ones an error, the others their value.
    def odd(i: int) -> Any:
        kind = i % 5
        if kind == 0:
            return "y" * 300_000  # over max_frame_bytes below
        if kind == 1:
            return {1, 2}
        if kind == 2:
            return "\ud800"
        if kind == 3:
            return float("nan")
        return i

    limits = Limits(
        wall_seconds=20, kill_grace_seconds=0.3, max_frame_bytes=200_000, max_value_bytes=1000
    )
    gw = hostile.gateway(bindings={"odd": odd}, pool_size=1 if warm else 0)
    r = hostile.run(
        _src(
            """
            out = await asyncio.gather(*[tools.odd(i) for i in range(40)], return_exceptions=True)
            return [o if isinstance(o, int) else type(o).__name__ for o in out]
            """
        ),
        limits,
        gateway=gw,
        warm=warm,
    )
    assert r.status == "ok", r.message
    assert r.value == [i if i % 5 == 4 else "ToolError" for i in range(40)]
    records = sorted(r.calls, key=lambda c: c.id)
    assert [c.id for c in records] == list(range(40))
    assert [c.ok for c in records] == [i % 5 == 4 for i in range(40)]


@pytest.mark.timeout(60)
def test_a_call_queued_for_a_thread_does_not_wait_behind_a_parked_one(hostile, gate, monkeypatch):
    from kernelgate.gateway import workers

    monkeypatch.setattr(workers, "IDLE_S", 8.0)  # the wait it costs, made unmissable

    async def opener() -> bool:
        # Once ``x`` was split off the batch behind ``block`` and waits for a thread (the
        # only one runs ``block``: in the workers' queue, or the executor's), let ``block``
        # return.
        def waiting() -> bool:
            executor = gw._executor
            if executor is None:
                return False
            return bool(executor._work_queue.qsize() or workers.workers_for(executor)._ready)

        while not waiting():
            await asyncio.sleep(0)
        gate.release()
        return True

    gw = hostile.gateway(
        bindings={"block": gate.wait, "x": lambda: "x", "opener": opener},
        pool_size=0,
        max_threads=1,
    )
    r = hostile.run(
        _src("return await asyncio.gather(tools.block(), tools.x(), tools.opener())"),
        Limits(wall_seconds=5, kill_grace_seconds=0.3, cpu_seconds=5),
        gateway=gw,
        warm=False,
    )
    assert r.status == "ok", r.message  # not a timeout: ``x`` waited for the parked thread
    assert r.value == ["released", "x", True]
