"""The host's end of a debugged run (gateway/debug.py) against a program that speaks the
debugger's messages itself: the host says ``continued`` and ``terminated``, rebuilds
``stopped``, drops a second stop, refuses forgeries, and keeps a stopped clock bounded.

The programs write frames on fd 3 themselves (as an attacker's would), so these tests need
no tracer in the child: they hold whatever the child side does."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from kernelgate import Gateway, Limits
from kernelgate.gateway.debug import RunDebugger, stopped_body

pytestmark = pytest.mark.timeout(90)

_WRITE = (
    "import json, os\n"
    "def frame(msg_type, content):\n"
    "    msg = dict(header=dict(msg_type=msg_type), parent_header={}, metadata={}, "
    "content=content)\n"
    "    os.write(3, (json.dumps(msg) + '\\n').encode())\n"
)


def _stopped(reason: str = "breakpoint", **extra: Any) -> str:
    body = {"reason": reason, "threadId": 1, **extra}
    return f"frame('debug_event', dict(type='event', event='stopped', body={body!r}))\n"


async def _run(gw: Gateway, program: str, dbg: RunDebugger | None, **limits: Any):
    return await gw.run(
        program, debug=dbg, limits=Limits(wall_seconds=20, kill_grace_seconds=0.5, **limits)
    )


def test_a_forged_stop_in_a_run_that_is_not_debugged_ends_it_as_protocol(make_gateway):
    gw = make_gateway()

    async def main():
        return await _run(gw, _WRITE + _stopped() + "import time\ntime.sleep(30)", None)

    r = asyncio.run(main())
    assert r.status == "protocol", r.message
    assert "debug_event in a run that is not debugged" in r.error.evalue


def test_the_host_rebuilds_stopped_and_drops_a_second_one(make_gateway):
    gw = make_gateway()
    events: list[dict[str, Any]] = []
    dbg = RunDebugger(on_event=events.append)
    forged = _stopped("breakpoint", description="x" * 50_000, secret="leak", threadId=99)
    program = _WRITE + forged + _stopped("pause") + "print('after')\n'done'"

    async def main():
        async with gw:
            return await _run(gw, program, dbg)

    r = asyncio.run(main())
    assert r.ok, r.message
    assert r.value == "done" and r.stdout == "after\n"
    names = [e["event"] for e in events]
    assert names == ["stopped", "terminated"], names  # one stop: the second is dropped
    body = events[0]["body"]
    assert set(body) == {"reason", "threadId", "allThreadsStopped", "description"}
    assert body["threadId"] == 1 and len(body["description"]) <= 2000
    assert dbg.ended and not dbg.stopped


@pytest.mark.parametrize(
    ("body", "expect"),
    [
        ({"reason": "owned"}, "stopped event reason must be one of DAP's"),
        ({"reason": "step", "text": ["x"]}, "stopped event text must be a string"),
        ({"reason": "step", "hitBreakpointIds": ["1"]}, "hitBreakpointIds must be integers"),
    ],
)
def test_a_malformed_stop_ends_the_run_as_protocol(make_gateway, body, expect):
    gw = make_gateway()
    line = f"frame('debug_event', dict(type='event', event='stopped', body={body!r}))\n"

    async def main():
        async with gw:
            return await _run(gw, _WRITE + line + "import time\ntime.sleep(30)", RunDebugger())

    r = asyncio.run(main())
    assert r.status == "protocol", r.message
    assert expect in r.error.evalue


@pytest.mark.parametrize("event", ["continued", "terminated", "output", "exited"])
def test_only_the_host_says_continued_or_terminated(make_gateway, event):
    gw = make_gateway()
    line = f"frame('debug_event', dict(type='event', event={event!r}, body={{}}))\n"

    async def main():
        async with gw:
            return await _run(gw, _WRITE + line + "import time\ntime.sleep(30)", RunDebugger())

    r = asyncio.run(main())
    assert r.status == "protocol", r.message
    assert "debug_event event must be one of ['stopped']" in r.error.evalue


def test_a_reply_to_a_request_never_sent_ends_the_run_as_protocol(make_gateway):
    gw = make_gateway()
    reply = (
        "frame('debug_reply', dict(type='response', request_seq=41, command='evaluate', "
        "success=True, body=dict(result='pwned')))\n"
    )

    async def main():
        async with gw:
            return await _run(gw, _WRITE + reply + "import time\ntime.sleep(30)", RunDebugger())

    r = asyncio.run(main())
    assert r.status == "protocol", r.message
    assert "reply to debug request 41, which is not waiting" in r.error.evalue


def test_a_stopped_clock_stands_still_within_its_ceiling(make_gateway):
    """A stop pauses wall_seconds (a person reads the program), but a stop is the program's
    word: one that only claims it is ended after max_pause_seconds."""
    gw = make_gateway()
    program = _WRITE + _stopped() + "import time\ntime.sleep(2.5)\n'woke'"

    async def main():
        async with gw:
            paused = await gw.run(
                program,
                debug=RunDebugger(),
                limits=Limits(wall_seconds=1.5, kill_grace_seconds=0.5),
            )
            ceiling = await gw.run(
                _WRITE + _stopped() + "import time\ntime.sleep(30)",
                debug=RunDebugger(max_pause_seconds=1.0),
                limits=Limits(wall_seconds=20, kill_grace_seconds=0.5),
            )
            plain = await gw.run(
                "import time\ntime.sleep(2.5)\n'woke'",
                limits=Limits(wall_seconds=1.5, kill_grace_seconds=0.5),
            )
            return paused, ceiling, plain

    paused, ceiling, plain = asyncio.run(main())
    assert paused.ok and paused.value == "woke", paused.message
    assert plain.status == "timeout"  # the same program, not debugged
    assert ceiling.status == "timeout", ceiling.message
    assert "max_pause_seconds=1" in ceiling.error.evalue
    assert ceiling.duration_s < 10


def test_requests_before_and_after_the_run_fail_with_a_reason(make_gateway):
    gw = make_gateway()
    dbg = RunDebugger([{"line": 2}])

    async def main():
        before = await dbg.request("stackTrace", {"threadId": 1})
        bps = await dbg.request("setBreakpoints", {"breakpoints": [{"line": 1}, {"line": 3}]})
        options = dbg.options()
        await dbg.request("setBreakpoints", {"breakpoints": []})  # the run must not stop
        async with gw:
            r = await _run(gw, "1", dbg)
        after = await dbg.request("continue", {"threadId": 1})
        return before, bps, options, r, after

    before, bps, options, r, after = asyncio.run(main())
    assert not before["success"] and "no program is running yet" in before["message"]
    assert bps["success"] and [b["line"] for b in bps["body"]["breakpoints"]] == [1, 3]
    assert options == {"breakpoints": [{"line": 1}, {"line": 3}]}
    assert r.ok
    assert not after["success"] and "the run has ended" in after["message"]
    with pytest.raises(RuntimeError, match="serves one run"):
        asyncio.run(make_gateway().run("1", debug=dbg))


@pytest.mark.parametrize(
    ("bps", "error"),
    [
        ([0], ValueError),
        (["3"], TypeError),
        ([{"line": True}], ValueError),
        ([{"line": 2, "condition": 5}], TypeError),
    ],
)
def test_breakpoints_are_checked_where_they_are_given(bps, error):
    with pytest.raises(error, match="breakpoint"):
        RunDebugger(bps)


def test_the_stopped_body_keeps_only_dap_fields():
    body = stopped_body({"reason": "exception", "text": "ValueError: x", "threadId": 7})
    assert body == {
        "reason": "exception",
        "threadId": 1,
        "allThreadsStopped": True,
        "text": "ValueError: x",
    }
    assert json.dumps(body)


def test_a_request_too_big_to_send_is_refused_by_the_host(make_gateway):
    """The host bounds what it sends as the child bounds what it answers: a 2 MB expression
    never reaches the child (before: it did, and the child failed reading it)."""
    gw = make_gateway()
    events: list[dict[str, Any]] = []
    stops: asyncio.Queue[None] = asyncio.Queue()

    def on_event(event: dict[str, Any]) -> None:
        events.append(event)
        if event["event"] == "stopped":
            stops.put_nowait(None)

    async def main():
        async with gw:
            dbg = RunDebugger([2], on_event=on_event)
            run = asyncio.create_task(_run(gw, "x = 1\nx = 2\nx", dbg))
            await asyncio.wait_for(stops.get(), 30)
            big = await dbg.request("evaluate", {"expression": "1+" * 1_000_000 + "1"})
            small = await dbg.request("evaluate", {"expression": "x + 1", "frameId": 1})
            await dbg.request("continue", {"threadId": 1})
            return big, small, await run

    big, small, r = asyncio.run(main())
    assert not big["success"] and "a debug request carries at most" in big["message"]
    assert small["success"] and small["body"]["result"] == "2", small
    assert r.ok and r.value == 2
