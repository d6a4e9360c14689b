"""Round four: attacks on the binding threads' lanes (kernelgate/gateway/workers.py) and on
the run writer (kernelgate/gateway/recording/), as a program and as a host's user would.

Threads: a gateway of one thread still serves every run; threads beyond the pool end with
their run's last job; a run that ended leaves nothing of its own queued on the gateway's
threads (its calls, and everything they reach: its channel, its outputs); an answer that
comes after its run ended reaches no other run.

Recording: a crafted run id writes nowhere but the directory; ``record_to`` that is not a
directory is refused when the gateway is made; a run whose notebook cannot be written is
not lost; concurrent runs record to one directory; what a program displays, and the
arguments it calls with, stay inert in the notebook; a RunResult copies, pickles and
answers ``hasattr`` as a dataclass does despite its ``__getattr__``.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import html.parser
import json
import os
import pickle
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kernelgate import Limits, RunResult, save_run
from kernelgate.gateway.recording.store import RunDirectory
from kernelgate.gateway.workers import workers_for
from kernelgate.model.result import CallRecord
from kernelgate.notebooks import load_run
from kernelgate.wire.messages import CALL_MIME

from ..procs import kernelgate_command
from .test_attack_batches import WARM_COLD, Gate, _src
from .test_attack_threads import _VICTIM, Holds, _attacker, _binding_threads, _joined, _together


@pytest.fixture
def gate() -> Iterator[Gate]:
    g = Gate()
    yield g
    g.event.set()


def _extras() -> list[threading.Thread]:
    return [t for t in _binding_threads() if "-extra_" in t.name]


# -- threads ------------------------------------------------------------------------------


@pytest.mark.timeout(90)
@WARM_COLD
def test_a_gateway_of_one_thread_serves_three_runs_and_their_extra_threads_end(hostile, gate, warm):
    # max_threads=1: two attackers block (one holds the pool's thread, the other its extra
    # one); the victim's 100 calls still run, on a thread of its own. Once every run is
    # over, the threads beyond the pool end by themselves (no close needed).
    holds = Holds(gate, total=2, tags=2)
    gw = hostile.gateway(bindings=holds.bindings(), pool_size=1 if warm else 0, max_threads=1)
    *attackers, victim = _together(
        gw, hostile, (_attacker("x", 3), None), (_attacker("y", 3), None), (_VICTIM, None)
    )
    assert victim.status == "ok", victim.message
    ok, threads = victim.value
    assert ok and threads <= 1 + 3, threads
    for r in attackers:
        assert r.status == "ok", r.message
        assert r.value == ["released"] * 3
    assert not _joined(_extras())  # each ended IDLE_S after its run's last job
    workers = workers_for(gw._executor)
    assert workers._extras == 0 and not workers._ready


@pytest.mark.timeout(90)
@pytest.mark.parametrize("policy", [False, True], ids=["batched", "queued"])
def test_a_run_that_ended_leaves_none_of_its_calls_queued_on_the_threads(hostile, gate, policy):
    # The attacker ends at its wall clock with the pool blocked and 12 calls waiting for a
    # thread. Its lane is emptied as it ends: nothing of the ended run (its dispatcher,
    # channel, outputs) is kept alive by the gateway's queues while the pool stays blocked.
    holds = Holds(gate, total=4, tags=1)
    gw = hostile.gateway(
        bindings=holds.bindings(),
        pool_size=0,
        max_threads=4,
        policy=(lambda namespace, name, args, kwargs: True) if policy else None,
    )
    short = Limits(wall_seconds=2, kill_grace_seconds=0.3, cpu_seconds=5, max_calls_in_flight=16)
    attacker = hostile.record(gw.run_sync(_attacker("a", 16), limits=short))
    assert attacker.status == "timeout", attacker.message
    workers = workers_for(gw._executor)
    with workers._lock:
        queued = sum(len(lane.waiting) for lane in workers._ready)
    assert queued == 0, f"{queued} calls of an ended run still queued for a thread"
    gate.release()
    assert holds.started == 4


@pytest.mark.timeout(90)
@WARM_COLD
def test_late_answers_of_an_ended_run_reach_no_other_run(hostile, gate, warm):
    # The attacker's four blocked calls answer (the gate opens) while the next run is
    # making calls on the same threads: each of the victim's calls gets its own answer,
    # nothing else arrives (an answer to an id it never sent would be a protocol error),
    # and the ended run's record gains nothing.
    holds = Holds(gate, total=4, tags=1)
    gw = hostile.gateway(bindings=holds.bindings(), pool_size=1 if warm else 0, max_threads=4)
    short = Limits(wall_seconds=2, kill_grace_seconds=0.3, cpu_seconds=5)
    attacker = hostile.record(gw.run_sync(_attacker("a", 4), limits=short))
    assert attacker.status == "timeout", attacker.message
    calls_before = [dataclasses.replace(c) for c in attacker.calls]
    victim = hostile.record(
        gw.run_sync(
            _src(
                """
                first = await asyncio.gather(*[tools.add(i, 0) for i in range(50)])
                await tools.release()
                rest = await asyncio.gather(*[tools.add(i, 1) for i in range(200)])
                return first == list(range(50)) and rest == [i + 1 for i in range(200)]
                """
            )
        )
    )
    assert victim.status == "ok", victim.message
    assert victim.value is True
    assert len(victim.calls) == 251 and all(c.ok for c in victim.calls)
    assert attacker.calls == calls_before


@pytest.mark.timeout(90)
@pytest.mark.parametrize("policy", [False, True], ids=["batched", "queued"])
def test_a_run_cancelled_while_its_calls_wait_for_threads_leaves_them_behind(hostile, gate, policy):
    # The caller cancels gw.run while the run's calls hold the pool and 12 more wait: the
    # run ends, nothing of it stays queued, the next run gets a thread, and once the gate
    # opens the cancelled run's waiting calls never start.
    holds = Holds(gate, total=4, tags=1)
    gw = hostile.gateway(
        bindings=holds.bindings(),
        pool_size=0,
        max_threads=4,
        policy=(lambda namespace, name, args, kwargs: True) if policy else None,
    )
    limits = Limits(wall_seconds=20, kill_grace_seconds=0.3, cpu_seconds=5, max_calls_in_flight=16)
    workers = workers_for(gw._binding_threads())
    queued: list[int] = []

    async def cancel_then_run() -> Any:
        try:
            task = asyncio.ensure_future(gw.run(_attacker("a", 16), limits=limits))
            await holds.all_in()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            await gw.wait_finished()
            with workers._lock:  # checked before the victim opens the gate
                queued.append(sum(len(lane.waiting) for lane in workers._ready))
            return await gw.run(_VICTIM)
        finally:
            await gw.runtime.end_loop()

    victim = hostile.record(asyncio.run(cancel_then_run()))
    assert victim.status == "ok", victim.message
    assert victim.value[0]
    assert queued == [0], f"{queued} calls of a cancelled run still queued for a thread"
    gw.close()
    assert not _joined(_binding_threads())
    assert holds.started == 4


@pytest.mark.timeout(120)
def test_many_runs_at_once_take_at_most_one_thread_each_beyond_the_pool(hostile, gate):
    # Eight runs, each with more blocked calls than the pool has threads: threads stay
    # within the pool and one per run, and all of them end once the gateway closes.
    runs = 8
    holds = Holds(gate, total=2 + runs - 1, tags=runs)
    gw = hostile.gateway(bindings=holds.bindings(), pool_size=0, max_threads=2)
    before = set(_binding_threads())
    peak = [0]

    async def all_of_them() -> list[Any]:
        tasks = [asyncio.ensure_future(gw.run(_attacker(f"t{i}", 5))) for i in range(runs)]
        await holds.all_in()
        peak[0] = len(_binding_threads())
        gate.release()
        try:
            return list(await asyncio.gather(*tasks))
        finally:
            await gw.runtime.end_loop()

    results = [hostile.record(r) for r in asyncio.run(all_of_them())]
    for r in results:
        assert r.status == "ok", r.message
        assert r.value == ["released"] * 5
    assert peak[0] <= 2 + runs, peak[0]
    made = [t for t in _binding_threads() if t not in before]
    gw.close()
    assert not _joined(made)


# -- recording ----------------------------------------------------------------------------


def _result(run_id: str, **kwargs: Any) -> RunResult:
    return RunResult(status="ok", value=1, run_id=run_id, program="1", **kwargs)


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    "run_id", ["../escaped", "<absolute>", "a/../../escaped", "", ".hidden", ".."]
)
def test_a_crafted_run_id_writes_nowhere_but_the_directory(tmp_path, run_id):
    # A RunResult read back from a crafted recording carries its run id from the file:
    # saved into a directory, by save_run or a RunDirectory, it lands in that directory.
    runs = tmp_path / "a" / "runs"
    runs.mkdir(parents=True)
    if run_id == "<absolute>":
        run_id = str(tmp_path / "elsewhere" / "escaped")
    for write in (lambda r: save_run(r, runs), RunDirectory(runs).append):
        path = write(_result(run_id))
        assert path.parent == runs, path
        assert not path.name.startswith("."), path
        assert load_run(path).value == 1
    assert sorted(p.name for p in tmp_path.rglob("*") if p.is_file()) == sorted(
        p.name for p in runs.iterdir()
    )


@pytest.mark.timeout(30)
def test_record_to_a_file_is_refused_when_the_gateway_is_made(hostile, tmp_path):
    target = tmp_path / "not-a-dir"
    target.write_text("x")
    with pytest.raises(NotADirectoryError, match="record_to"):
        hostile.gateway(record_to=target)
    assert target.read_text() == "x"


@pytest.mark.timeout(60)
def test_a_run_whose_notebook_cannot_be_written_is_not_lost(hostile, tmp_path):
    # The directory becomes a file after the gateway was made: the error names where the
    # notebook was to go and holds the run's result.
    runs = tmp_path / "recorded"
    gw = hostile.gateway(record_to=runs)
    runs.write_text("in the way")
    with pytest.raises(OSError, match="recorded") as info:
        gw.run_sync("print('kept')\n42")
    result = info.value.result  # type: ignore[attr-defined]
    again = pickle.loads(pickle.dumps(info.value))  # an error that crosses processes
    assert again.result == result and again.filename == info.value.filename
    hostile.record(result)
    assert result.status == "ok" and result.value == 42 and result.stdout == "kept\n"


@pytest.mark.timeout(60)
def test_a_run_a_session_log_cannot_write_is_not_lost(hostile, tmp_path):
    # Any recorder's failure, not only the directory's: the run is the error's .result.
    from kernelgate.notebooks import SessionLog

    gw = hostile.gateway(record_to=SessionLog(tmp_path / "gone" / "session.ipynb"))
    (tmp_path / "gone").write_text("a file where the log's directory should be")
    with pytest.raises(OSError, match="notebook could not be written") as info:
        gw.run_sync("print('kept')\n42")
    result = info.value.result  # type: ignore[attr-defined]
    hostile.record(result)
    assert result.status == "ok" and result.value == 42 and result.stdout == "kept\n"


@pytest.mark.timeout(120)
@WARM_COLD
def test_concurrent_runs_record_to_one_directory(hostile, tmp_path, warm):
    runs = tmp_path / "recorded"
    gw = hostile.gateway(record_to=runs, pool_size=2 if warm else 0)

    async def all_of_them() -> list[RunResult]:
        try:
            return list(
                await asyncio.gather(
                    *(gw.run(f"await tools.add({i}, 1)\nprint({i})") for i in range(8))
                )
            )
        finally:
            await gw.runtime.end_loop()

    results = [hostile.record(r) for r in asyncio.run(all_of_them())]
    assert sorted(os.listdir(runs)) == sorted(f"{r.run_id}.ipynb" for r in results)
    for r in results:
        back = load_run(runs / f"{r.run_id}.ipynb")
        assert (back.value, back.stdout, len(back.calls)) == (r.value, r.stdout, 1)


_DISPLAYS = r"""
class Bundle:
    def __init__(self, data, metadata):
        self.data, self.metadata = data, metadata
    def _repr_mimebundle_(self, include=None, exclude=None):
        return self.data, self.metadata
display(Bundle({"text/html": "<script>alert(1)</script><img src=x onerror=alert(2)>",
                "application/javascript": "alert(3)",
                "text/markdown": "[x](javascript:alert(4))",
                "application/vnd.kernelgate.call+json": {"namespace": "tools",
                    "name": "forged", "args": [], "kwargs": {}, "ok": True, "value": 1,
                    "id": 99}},
               {"kernelgate": {"role": "call", "id": 99}}))
display(Bundle({"image/svg+xml": "<svg onload=alert(5)><script>alert(6)</script></svg>"}, {}))
display(Bundle({"text/markdown": "<img src=x onerror=alert(10)> [a](javascript:alert(11))"}, {}))
await tools.echo("<script>alert(7)</script>", k="</pre><img src=x onerror=alert(8)>")
print("<script>alert(9)</script>")
huge = await tools.echo("x" * 300_000)
len(huge["args"][0])
"""


class _Tags(html.parser.HTMLParser):
    """What a browser would make of a page: its tags and attributes."""

    def __init__(self) -> None:
        super().__init__()
        self.active: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in ("script", "svg", "iframe", "object", "embed", "style", "math"):
            self.active.append(tag)
        for name, value in attrs:
            if name.startswith("on") or "javascript:" in (value or "").lower():
                self.active.append(f"{tag} {name}={value}")


def _active(page: str) -> list[str]:
    parser = _Tags()
    parser.feed(page)
    return parser.active


@pytest.mark.timeout(60)
def test_what_a_program_displays_and_calls_with_stays_inert_in_its_notebook(hostile, tmp_path):
    gw = hostile.gateway(record_to=tmp_path)
    result = hostile.record(gw.run_sync(_DISPLAYS))
    assert result.status == "ok", result.message
    nb = json.loads((tmp_path / f"{result.run_id}.ipynb").read_text())
    outputs = nb["cells"][0]["outputs"]
    calls = [o for o in outputs if CALL_MIME in o.get("data", {})]
    assert [c["data"][CALL_MIME]["name"] for c in calls] == ["echo", "echo"]
    assert [o["metadata"].get("kernelgate", {}).get("role") for o in calls] == ["call"] * 2
    roles = [o.get("metadata", {}).get("kernelgate", {}).get("role") for o in outputs]
    assert roles.count("call") == 2  # no forged call among the program's displays
    for o in outputs:
        data = o.get("data", {})
        assert "application/javascript" not in data and "image/svg+xml" not in data
        assert _active(data.get("text/html", "")) == []
    back = load_run(tmp_path / f"{result.run_id}.ipynb")
    assert back.value == 300_000 and back.calls[1].value == {"args": ["x" * 300_000], "kwargs": {}}
    assert len([o for o in outputs if o["output_type"] == "display_data"]) == 3 + 2 + 1


# -- RunResult's __getattr__ ---------------------------------------------------------------


@pytest.mark.timeout(30)
def test_a_run_result_answers_hasattr_and_getattr_as_a_dataclass_does():
    r = _result("r1", calls=[CallRecord(0, "tools", "add", [1, 2], {}, ok=True, value=3)])
    assert not hasattr(r, "anything") and not hasattr(r, "save")
    assert getattr(r, "save", None) is None and getattr(r, "to_notebook", 7) == 7
    with pytest.raises(AttributeError, match=r"kernelgate\.save_run") as info:
        r.save("x.ipynb")  # type: ignore[attr-defined]
    assert info.value.name == "save"
    with pytest.raises(AttributeError, match="'RunResult' object has no attribute 'nope'"):
        r.nope  # type: ignore[attr-defined]  # noqa: B018
    assert copy.copy(r) == r and copy.deepcopy(r) == r
    assert dataclasses.replace(r, value=2).value == 2
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        assert pickle.loads(pickle.dumps(r, protocol)) == r


@pytest.mark.timeout(60)
def test_a_run_result_pickled_by_one_process_loads_in_another(tmp_path):
    r = _result("r2", stdout="hi\n", calls=[CallRecord(0, "tools", "add", [1, 2], {}, ok=True)])
    blob = tmp_path / "r.pickle"
    blob.write_bytes(pickle.dumps(r))
    code = (
        "import pickle, sys\n"
        "r = pickle.loads(open(sys.argv[1], 'rb').read())\n"
        "print(r.run_id, r.stdout.strip(), r.calls[0].name, hasattr(r, 'save'))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(blob)], capture_output=True, text=True, timeout=50
    )
    assert out.stdout.split() == ["r2", "hi", "add", "False"], out.stderr


@pytest.mark.timeout(60)
def test_a_recorded_run_has_no_temp_files_left_and_reloads(tmp_path):
    text = "x" * 2_000_000
    stream = {"output_type": "stream", "name": "stdout", "text": text}
    r = _result("20260101T000000-deadbeef", stdout=text, outputs=[stream])
    path = RunDirectory(tmp_path).append(r)
    assert os.listdir(tmp_path) == [path.name]
    assert load_run(Path(path)).stdout == r.stdout


@pytest.mark.timeout(120)
def test_kernelgate_replay_reads_what_record_to_wrote(hostile, tmp_path):
    # The CLI replays a recorded run (its calls answered from the recording) and says it
    # matches; a crafted run id in the file changes nothing of that.
    runs = tmp_path / "recorded"
    gw = hostile.gateway(record_to=runs)
    r = hostile.record(gw.run_sync("print(await tools.add(1, 2))\nawait tools.echo('<b>')"))
    assert r.status == "ok", r.message
    path = runs / f"{r.run_id}.ipynb"
    nb = json.loads(path.read_text())
    nb["cells"][0]["metadata"]["kernelgate"]["run_id"] = "../../crafted"
    path.write_text(json.dumps(nb))
    assert load_run(path).run_id == "../../crafted"
    out = subprocess.run(
        [*kernelgate_command(), "replay", str(path)],
        capture_output=True,
        text=True,
        timeout=100,
        env={**os.environ, "TMPDIR": str(tmp_path)},
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "MATCHES" in out.stdout
    assert sorted(os.listdir(runs)) == [path.name]


@pytest.mark.timeout(90)
@pytest.mark.parametrize("policy", [False, True], ids=["batched", "queued"])
@WARM_COLD
def test_calls_a_program_floods_after_its_reply_are_recorded_if_they_ran(hostile, warm, policy):
    # A thread of the program writes call frames to fd 3 in a loop, never reading an
    # answer, on and on after the program's reply. Every call whose binding returned is in
    # the result with its value (the program must not make the host act and hide it: a
    # call it left unanswered is not one that never ran), but for the few in a thread as
    # the run ended; and once the run has returned, at most one call per binding thread
    # (each already running then) ends in a binding.
    returned: set[int] = set()
    lock = threading.Lock()

    def tick() -> int:
        with lock:
            returned.add(len(returned))
            return len(returned) - 1

    threads = 4
    gw = hostile.gateway(
        bindings={"tick": tick},
        pool_size=1 if warm else 0,
        max_threads=threads,
        policy=(lambda namespace, name, args, kwargs: True) if policy else None,
    )
    program = _src(
        """
        import threading
        first = await tools.tick()  # the first honest call agrees compact frames
        def flood():
            while True:
                try:
                    forge_calls('tick', [[]] * 20)
                except OSError:
                    return
        threading.Thread(target=flood, daemon=True).start()
        first
        """
    )
    for _ in range(5):
        r = hostile.record(gw.run_sync(program))
        with lock:
            at_return = set(returned)
        asyncio.run(gw.wait_finished())
        with lock:
            after, returned = len(returned) - len(at_return), set()
        assert r.calls[0].ok, r.message
        recorded = {c.value for c in r.calls if c.ok}
        assert recorded <= at_return
        unrecorded = len(at_return - recorded)
        assert unrecorded <= 2 * threads, f"{unrecorded} calls ran but are not recorded"
        assert after <= 2 * threads, after  # the pool and its extras
