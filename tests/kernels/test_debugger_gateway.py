"""The child's debugger end to end through the gateway (``Gateway.run(debug=RunDebugger)``),
at every sandbox level, warm and cold: the tracer, its reader thread and its SIGALRM timers
add nothing the sandbox denies, and an undebugged run loads none of it."""

from __future__ import annotations

import asyncio
import glob
import os
import shutil
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from kernelgate import Gateway, Limits
from kernelgate.gateway.debug import RunDebugger
from tests.gateway.conftest import make_gateway, run_dir_base, warmed_up  # noqa: F401
from tests.hardening.asuser import AsUser, make_as_user, unavailable
from tests.hardening.conftest import ALL_LEVELS

pytestmark = pytest.mark.timeout(120)

LIMITS = Limits(wall_seconds=30, kill_grace_seconds=0.5)

PROGRAM = """\
import os
async def fetch(q):
    got = await tools.search(q)
    return got
class Slow:
    def __repr__(self):
        import time; time.sleep(100)
slow = Slow()
tasks = len(os.listdir("/proc/self/task"))
first = await fetch("a")
n = 0
while n < 3:
    n += 1
print(first, tasks)
"""


def search(q: str) -> list[str]:
    return [q]


class Session:
    """A debugged run on its gateway: ``stopped`` events come through a queue."""

    def __init__(self, gw: Gateway, program: str, breakpoints: list[Any], **debug: Any) -> None:
        self.events: list[dict[str, Any]] = []
        self.stops: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.dbg = RunDebugger(breakpoints, on_event=self._on_event, **debug)
        self.run = asyncio.create_task(gw.run(program, debug=self.dbg, limits=LIMITS))

    def _on_event(self, event: dict[str, Any]) -> None:
        self.events.append(event)
        if event["event"] == "stopped":
            self.stops.put_nowait(event["body"])

    async def stopped(self) -> dict[str, Any]:
        waiter = asyncio.ensure_future(self.stops.get())
        done, _ = await asyncio.wait({waiter, self.run}, timeout=30, return_when="FIRST_COMPLETED")
        assert waiter in done, f"no stop: {self.run.result() if self.run.done() else 'timeout'}"
        return waiter.result()

    async def ok(self, command: str, arguments: dict[str, Any] | None = None) -> dict[str, Any]:
        reply = await self.dbg.request(command, arguments or {"threadId": 1})
        assert reply["success"], reply
        return reply["body"]

    async def where(self) -> list[tuple[str, int]]:
        body = await self.ok("stackTrace")
        return [(f["name"], f["line"]) for f in body["stackFrames"]]

    async def step(self, command: str) -> list[tuple[str, int]]:
        await self.ok(command)
        await self.stopped()
        return await self.where()

    async def globals_(self) -> dict[str, str]:
        frames = (await self.ok("stackTrace"))["stackFrames"]
        scopes = (await self.ok("scopes", {"frameId": frames[-1]["id"]}))["scopes"]
        ref = next(s["variablesReference"] for s in scopes if s["name"] == "Globals")
        got = await self.ok("variables", {"variablesReference": ref})
        return {v["name"]: v["value"] for v in got["variables"]}


async def _gateway(make: Callable[..., Gateway], level: str, warm: bool) -> Gateway:
    gw = make(bindings={"search": search}, sandbox=level, limits=LIMITS, pool_size=1 if warm else 0)
    if warm:
        await warmed_up(gw)
    return gw


@ALL_LEVELS
@pytest.mark.parametrize("warm", [True, False], ids=["warm", "cold"])
def test_a_debugged_run_at_every_level(make_gateway, level, warm):  # noqa: F811
    async def main() -> None:
        gw = await _gateway(make_gateway, level, warm)
        s = Session(gw, PROGRAM, [{"line": 10}])
        body = await s.stopped()
        assert body["reason"] == "breakpoint"
        assert await s.where() == [("<module>", 10)]
        assert await s.step("stepIn") == [("fetch", 3), ("<module>", 10)]
        assert await s.step("next") == [("fetch", 4), ("<module>", 10)]  # a real call
        assert await s.step("stepOut") == [("<module>", 10)]
        assert await s.step("next") == [("<module>", 11)]
        shown = await s.globals_()
        assert shown["first"] == "['a']"
        assert shown["tasks"] == "2"  # the program's thread and the debugger's reader
        assert shown["slow"] == "<not shown: its repr took too long>"  # SIGALRM works here
        await s.ok("pause")  # already stopped: nothing to do
        await s.ok("continue")
        result = await s.run
        assert result.ok, result.message
        assert result.stdout == "['a'] 2\n"
        names = [e["event"] for e in s.events]
        assert names == ["stopped", "continued"] * 5 + ["terminated"], names
        if warm:
            assert result.usage["warm"]

    asyncio.run(main())


@ALL_LEVELS
@pytest.mark.parametrize("warm", [True, False], ids=["warm", "cold"])
def test_pause_a_busy_program_at_every_level(make_gateway, level, warm):  # noqa: F811
    async def main() -> None:
        started = asyncio.Event()

        async def ready() -> None:
            started.set()

        gw = make_gateway(
            bindings={"ready": ready}, sandbox=level, limits=LIMITS, pool_size=1 if warm else 0
        )
        if warm:
            await warmed_up(gw)
        program = "await tools.ready()\nn = 0\nwhile 'stop' not in globals():\n    n += 1\nn >= 0"
        s = Session(gw, program, [])
        await asyncio.wait_for(started.wait(), 30)  # the program runs: pause it
        await s.ok("pause")
        assert (await s.stopped())["reason"] == "pause"
        # The program's next line, or its await if it still waits for the call.
        assert (await s.where())[0][1] in (1, 2, 3, 4)
        reply = await s.dbg.request("evaluate", {"expression": "stop = 1"})
        assert reply["success"], reply
        await s.ok("continue")
        result = await s.run
        assert result.ok and result.value is True, result.message

    asyncio.run(main())


@ALL_LEVELS
@pytest.mark.parametrize("warm", [True, False], ids=["warm", "cold"])
def test_an_undebugged_run_loads_nothing_of_the_debugger(make_gateway, level, warm):  # noqa: F811
    program = (
        "import sys, os\n"
        "return [sorted(m for m in sys.modules if 'debug' in m), "
        "len(os.listdir('/proc/self/task')), sys.gettrace() is None]"
    )

    async def main() -> Any:
        gw = await _gateway(make_gateway, level, warm)
        return await gw.run(program)

    result = asyncio.run(main())
    assert result.ok, result.message
    assert result.value == [[], 1, True]


@ALL_LEVELS
@pytest.mark.parametrize("warm", [True, False], ids=["warm", "cold"])
def test_no_room_for_the_debuggers_thread_fails_clearly(make_gateway, level, warm):  # noqa: F811
    """The reader thread is a task of the run: at ``max_processes=1`` there is no room for
    it, and the run says so instead of running undebugged or hanging."""
    limits = Limits(wall_seconds=30, kill_grace_seconds=0.5, max_processes=1)

    async def main() -> Any:
        gw = make_gateway(sandbox=level, limits=limits, pool_size=1 if warm else 0)
        if warm:
            await warmed_up(gw)
        return await gw.run("1", debug=RunDebugger([1]))

    result = asyncio.run(main())
    assert result.status == "exception", result.message
    assert result.error.ename == "DebuggerUnavailable"
    assert "the debugger could not start" in result.error.evalue


@pytest.fixture(scope="module")
def as_user() -> Iterator[AsUser]:
    why = unavailable()
    if why:
        pytest.skip(why)
    user, base = make_as_user()
    yield user
    shutil.rmtree(base, ignore_errors=True)


_AS_USER_SCRIPT = """
from kernelgate.gateway.debug import RunDebugger

PROGRAM = ARGS["program"]


async def main():
    async with gateway(sandbox=ARGS["level"], pool_size=1 if ARGS["warm"] else 0,
                       bindings={"search": lambda q: [q]}) as gw:
        if ARGS["warm"]:
            await warmed(gw)
        stops = asyncio.Queue()
        dbg = RunDebugger([{"line": 5}], on_event=lambda e: e["event"] == "stopped"
                          and stops.put_nowait(e["body"]))
        run = asyncio.create_task(gw.run(PROGRAM, debug=dbg))
        seen = {"first": (await asyncio.wait_for(stops.get(), 30))["reason"]}
        frames = (await dbg.request("stackTrace", {"threadId": 1}))["body"]["stackFrames"]
        seen["where"] = [f["line"] for f in frames]
        await dbg.request("next", {"threadId": 1})
        await asyncio.wait_for(stops.get(), 30)
        frames = (await dbg.request("stackTrace", {"threadId": 1}))["body"]["stackFrames"]
        scopes = (await dbg.request("scopes", {"frameId": frames[0]["id"]}))["body"]["scopes"]
        ref = scopes[1]["variablesReference"]
        got = (await dbg.request("variables", {"variablesReference": ref}))["body"]
        seen["vars"] = {v["name"]: v["value"] for v in got["variables"]}
        await dbg.request("continue", {"threadId": 1})
        seen["result"] = encode(await run)
        return seen


print(json.dumps(asyncio.run(main())))
"""


@ALL_LEVELS
@pytest.mark.parametrize("warm", [True, False], ids=["warm", "cold"])
def test_a_debugged_run_from_an_unprivileged_host(as_user, level, warm):
    program = (
        "class Slow:\n    def __repr__(self):\n        import time; time.sleep(100)\n"
        "slow = Slow()\ngot = await tools.search('q')\ndone = 1\n"
    )
    seen = as_user.run_script(
        _AS_USER_SCRIPT, {"program": program, "level": level, "warm": warm}, timeout=120
    )
    assert seen["first"] == "breakpoint" and seen["where"] == [5]
    assert seen["vars"]["got"] == "['q']"
    assert seen["vars"]["slow"] == "<not shown: its repr took too long>"
    assert seen["result"]["status"] == "ok", seen["result"]
    assert seen["result"]["warm"] is warm


def test_the_zygote_writes_the_debuggers_bytecode_once(make_gateway):  # noqa: F811
    """A debugged run's child imports the debugger writing no bytecode: the zygote writes
    it beforehand (as the host), so debugged runs do not compile it each time."""
    import importlib.util

    from kernelgate.kernels.python import runner

    here = os.path.dirname(runner.__file__)
    cached = [
        importlib.util.cache_from_source(os.path.join(here, f"{name}.py"))
        for name in runner.DEBUGGER_MODULES
    ]
    if not os.access(os.path.dirname(cached[0]), os.W_OK):
        pytest.skip("the package's __pycache__ is not writable here (an installed package)")
    for path in cached:
        if os.path.exists(path):
            os.unlink(path)

    async def main() -> Any:
        gw = make_gateway(pool_size=1, limits=LIMITS)
        await warmed_up(gw)
        return await gw.run("import sys\nreturn 'py_compile' in sys.modules")

    result = asyncio.run(main())
    assert result.ok and result.value is False, result.message
    assert all(os.path.exists(path) for path in cached)


@pytest.mark.parametrize("minor", [10, 12, 13])
@pytest.mark.parametrize("warm", [True, False], ids=["warm", "cold"])
def test_a_debugged_run_on_another_python(make_gateway, minor, warm):  # noqa: F811
    """The gateway's child on 3.10, 3.12 and 3.13 (its zygote writes that interpreter's
    bytecode of the debugger; settrace's backend on 3.10, sys.monitoring's from 3.12):
    breakpoint, a step into the program's coroutine over a real call."""
    python = _python(minor)

    async def main() -> None:
        gw = make_gateway(
            python=python, bindings={"search": search}, limits=LIMITS, pool_size=1 if warm else 0
        )
        if warm:
            await warmed_up(gw)
        s = Session(gw, "import sys\n" + PROGRAM, [{"line": 11}])
        await s.stopped()
        assert await s.where() == [("<module>", 11)]
        assert await s.step("stepIn") == [("fetch", 4), ("<module>", 11)]
        assert await s.step("next") == [("fetch", 5), ("<module>", 11)]
        reply = await s.dbg.request("evaluate", {"expression": "sys.version_info[1]"})
        assert reply["body"]["result"] == str(minor)
        await s.ok("continue")
        result = await s.run
        assert result.ok, result.message
        assert bool(result.usage["warm"]) is warm

    asyncio.run(main())


MONITORED = """\
import sys
def f(a):
    b = a
    return b
got = f(5)
n = 0
while 'stop' not in globals(): n += 1
print(got, sys.gettrace() is None, sys.monitoring.get_tool(0))
"""


@ALL_LEVELS
@pytest.mark.parametrize("minor", [12, 13])
@pytest.mark.parametrize("warm", [True, False], ids=["warm", "cold"])
def test_the_monitoring_backend_at_every_level(make_gateway, level, minor, warm):  # noqa: F811
    """sys.monitoring's backend in the sandbox: a breakpoint in a function, a local that
    evaluate assigns (3.12 writes it back through ctypes), a pause of a one-line busy loop
    (a JUMP event), and no trace function in sight."""
    python = _python(minor)

    async def main() -> None:
        gw = make_gateway(
            python=python,
            bindings={"search": search},
            sandbox=level,
            limits=LIMITS,
            pool_size=1 if warm else 0,
        )
        if warm:
            await warmed_up(gw)
        s = Session(gw, MONITORED, [{"line": 4}])
        await s.stopped()
        assert await s.where() == [("f", 4), ("<module>", 5)]
        await s.ok("evaluate", {"expression": "b = 'changed'", "context": "repl"})
        await s.ok("continue")
        await s.ok("pause")
        assert (await s.stopped())["reason"] == "pause"
        if await s.where() == [("<module>", 6)]:  # the pause came before the loop
            assert await s.step("next") == [("<module>", 7)]
            await s.ok("continue")  # into the loop, which it leaves on a pause only
            await s.ok("pause")
            assert (await s.stopped())["reason"] == "pause"
        assert await s.where() == [("<module>", 7)]
        await s.ok("evaluate", {"expression": "stop = 1", "context": "repl"})
        await s.ok("continue")
        result = await s.run
        assert result.ok, result.message
        assert result.stdout == "changed True kernelgate debugger\n"
        assert bool(result.usage["warm"]) is warm

    asyncio.run(main())


def _python(minor: int) -> str:
    found = sorted(glob.glob(f"/root/.pyenv/versions/3.{minor}.*/bin/python3.{minor}"))
    if not found:
        pytest.skip(f"python3.{minor} is not installed here")
    return found[-1]


def test_exception_filters_given_with_the_run_stop_where_it_raises(make_gateway):  # noqa: F811
    """``RunDebugger(exception_filters=...)`` reaches the child with its program, so even an
    exception on the program's first line stops; ``setExceptionBreakpoints`` turns it off."""
    gw = make_gateway(bindings={"search": search}, limits=LIMITS)
    program = "def f(x):\n    return {}[x]\nf('missing')\n"

    async def main() -> tuple[Any, ...]:
        async with gw:
            s = Session(gw, program, [], exception_filters=["uncaught"])
            stop = await s.stopped()
            where = await s.where()
            off = await s.dbg.request("setExceptionBreakpoints", {"filters": []})
            await s.ok("continue")
            result = await s.run
            return stop, where, off, result

    stop, where, off, result = asyncio.run(main())
    assert stop["reason"] == "exception" and "KeyError" in stop.get("text", ""), stop
    assert where[0] == ("f", 2), where
    assert off["success"]
    assert result.status == "exception" and result.error.ename == "KeyError"
    with pytest.raises(ValueError, match="exception filter must be one of"):
        RunDebugger(exception_filters=["everything"])
