"""Attacks on a run's teardown (gateway/cleanups.py guarded_task, Teardown.finish_in_task):
the caller cancels a run at any turn of the loop, or ends its loop in the turn a run
returned, while the program leaves as much as it can to tear down (forked processes that
ignore SIGTERM, files in its run directory). Nothing is left once the gateway is closed
(the ``hostile`` fixture checks processes, children, run directories, cgroups and fds),
and the gateway serves the next run.
"""

from __future__ import annotations

import asyncio

import pytest

WARM_COLD = pytest.mark.parametrize("warm", [True, False], ids=["warm", "cold"])

#: Leaves what a teardown must clean: children that ignore SIGTERM and spin, a file tree.
_LITTER = """
import os, signal
os.makedirs('litter/a/b', exist_ok=True)
for i in range(50):
    with open(f'litter/a/b/{i}', 'w') as f:
        f.write('x' * 1000)
kids = []
for _ in range(4):
    pid = os.fork()
    if pid == 0:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        while True:
            pass
    kids.append(pid)
print('littered', flush=True)
await tools.littered()
return len(kids)
"""


class Littered:
    """The ``littered`` binding: the program has made what its teardown must clean."""

    def __init__(self) -> None:
        self.event: asyncio.Event | None = None

    async def littered(self) -> bool:
        if self.event is not None:
            self.event.set()
        return True


@pytest.mark.timeout(180)
@WARM_COLD
def test_cancelling_a_run_at_any_turn_leaves_nothing(hostile, warm):
    mark = Littered()
    gw = hostile.gateway(bindings={"littered": mark.littered}, pool_size=1 if warm else 0)

    async def cancel_after(turns: int, littered: bool) -> str:
        mark.event = asyncio.Event()
        task = asyncio.ensure_future(gw.run(_LITTER))
        if littered:  # from the moment the program has littered, to past its reply
            await asyncio.wait_for(mark.event.wait(), 30)
        for _ in range(turns):
            await asyncio.sleep(0)  # one turn of the loop: where the cancel lands
            if task.done():
                break
        task.cancel()
        try:
            r = await task
        except asyncio.CancelledError:
            return "cancelled"
        hostile.record(r)
        return r.status

    async def main() -> list[str]:
        try:
            seen = [await cancel_after(turns, False) for turns in range(0, 12, 3)]
            # From the moment the program has littered, later and later, until cancels
            # land after the result too (on the teardown task): the run's length in turns
            # depends on the machine, so the steps grow until two results come back.
            turns = 0
            while seen.count("ok") < 2 and turns < 200_000:
                seen.append(await cancel_after(turns, True))
                turns = turns + 1 if turns < 16 else turns * 3 // 2
            last = hostile.record(await gw.run("return 'after'"))
            assert last.status == "ok" and last.value == "after", last.message
            return seen
        finally:
            await gw.aclose()

    seen = asyncio.run(main())
    assert set(seen) <= {"cancelled", "ok"}, seen
    assert "ok" in seen  # some cancels landed after the result, on the teardown
    assert "cancelled" in seen[4:]  # and some while the littered program ran


@pytest.mark.timeout(180)
@WARM_COLD
def test_a_loop_ended_in_the_turn_its_run_returned_leaves_nothing(hostile, warm):
    # No aclose: each asyncio.run ends right after the run's result, its teardown task
    # (finishing the child, its processes, cgroup and directory) cancelled or not started.
    gw = hostile.gateway(bindings={"littered": Littered().littered}, pool_size=1 if warm else 0)
    for _ in range(4):
        r = hostile.record(asyncio.run(gw.run(_LITTER)))
        assert r.status == "ok" and r.value == 4, r.message
        assert r.stdout == "littered\n"
    gw.close()  # waits for the cleanups left to threads; then the fixture checks
