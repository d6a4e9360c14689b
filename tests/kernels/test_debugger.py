"""The debugger inside a debugged run's child (kernels/python/debugger.py), driven over fd 3
by a host ``Connection`` of the test's own, in a real child process (tests/kernels/debugchild).

Everything is in PROGRAM coordinates: source ``"<program>"``, the program's own lines.
"""

from __future__ import annotations

import glob
import os
import signal
from collections.abc import Iterator
from typing import Any

import pytest

from kernelgate.kernels.python.debugger import RUNNING

from .debugchild import DebugChild

pytestmark = pytest.mark.timeout(60)


#: The child's interpreters: settrace's backend before 3.12, sys.monitoring's from 3.12.
MINORS = [10, 11, 12, 13]


class Children:
    """Makes debugged children on one interpreter (``minor``: 3.minor)."""

    def __init__(self, minor: int) -> None:
        self.minor = minor
        self.python = _python(minor)
        self.made: list[DebugChild] = []

    def __call__(
        self, program: str, breakpoints: list[Any] | None = None, **kwargs: Any
    ) -> DebugChild:
        kwargs.setdefault("python", self.python)
        c = DebugChild(program, breakpoints, **kwargs)
        self.made.append(c)
        return c


@pytest.fixture(params=MINORS, ids=[f"py3.{m}" for m in MINORS])
def child(request, no_fd_leak) -> Iterator[Children]:
    """Every test of this file runs its child on each interpreter (skipped where missing)."""
    children = Children(request.param)
    yield children
    for c in children.made:
        c.close()


def _python(minor: int) -> str:
    found = sorted(glob.glob(f"/root/.pyenv/versions/3.{minor}.*/bin/python3.{minor}"))
    found += [p for p in (f"/usr/bin/python3.{minor}",) if os.path.exists(p)]
    if not found:
        pytest.skip(f"python3.{minor} is not installed here")
    return found[-1]


AWAITS = """\
import json
async def fetch(q):
    got = await tools.search(q)
    return got[0]
first = (await tools.search("a"))[0]
second = await fetch("b")
text = json.dumps([first, second])
print(text)
"""


# -- breakpoints, stepping --------------------------------------------------------------------


def test_breakpoint_next_over_an_await_and_step_in(child):
    c = child(AWAITS, [{"line": 5}])
    stop = c.wait_stopped()
    assert stop["reason"] == "breakpoint" and stop["threadId"] == 1 and stop["hitBreakpointIds"]
    frames = c.ok("stackTrace", {"threadId": 1})
    assert frames["totalFrames"] == 1
    top = frames["stackFrames"][0]
    assert top["name"] == "<module>" and top["line"] == 5
    assert top["source"] == {"path": "<program>", "name": "<program>"}
    # next over a real binding call: the call is made, the stop is the next line.
    assert c.step("next")["reason"] == "step"
    assert c.where() == [("<module>", 6)] and len(c.calls) == 1
    assert c.scope_vars("Globals")["first"]["value"] == "'result for a'"
    # stepIn enters the program's coroutine, never asyncio's or kernelgate's frames.
    c.step("stepIn")
    assert c.where() == [("fetch", 3), ("<module>", 6)]
    c.step("next")  # over the await inside fetch
    assert c.where() == [("fetch", 4), ("<module>", 6)]
    c.step("stepOut")
    assert c.where() == [("<module>", 6)]
    c.step("next")
    assert c.where() == [("<module>", 7)]
    c.step("stepIn")  # json.dumps is the standard library's: not entered
    assert c.where() == [("<module>", 8)]
    assert c.ok("continue", {"threadId": 1}) == {"allThreadsContinued": True}
    assert c.wait_done().status == "ok"
    assert c.stdout == '["result for a", "result for b"]\n'


def test_next_waits_for_the_call_while_the_loop_runs(child):
    """Stepping over ``await tools.search(...)``: the program's coroutine waits for the
    real call (the host holds its answer); meanwhile the program is running, not stopped."""
    c = child(AWAITS, [{"line": 5}], hold_calls=True)
    c.wait_stopped()
    c.ok("next", {"threadId": 1})
    c.pump(lambda: bool(c.held))  # the call left: the loop runs it
    assert len(c.stops()) == 1
    reply = c.request("stackTrace", {"threadId": 1})
    assert not reply.success and reply.message == RUNNING
    assert c.ok("threads") == {"threads": [{"id": 1, "name": "MainThread"}]}
    c.answer_held()
    assert c.wait_stopped()["reason"] == "step"
    assert c.where() == [("<module>", 6)]
    c.ok("continue")
    c.pump(lambda: bool(c.held))
    c.answer_held()
    assert c.wait_done().status == "ok"


def test_step_out_of_a_function_stops_in_the_caller_at_the_call(child):
    program = "def f(a):\n    b = a * 2\n    return b\nz = f(3)\nprint(z)\n"
    c = child(program, [{"line": 2}])
    c.wait_stopped()
    assert c.where() == [("f", 2), ("<module>", 4)]
    assert c.scope_vars()["a"]["value"] == "3"
    c.step("stepOut")
    assert c.where() == [("<module>", 4)]
    assert "z" not in c.scope_vars("Globals")  # the assignment has not run yet
    c.step("next")
    assert c.where() == [("<module>", 5)]
    assert c.scope_vars("Globals")["z"]["value"] == "6"
    c.ok("continue")
    assert c.wait_done().status == "ok" and c.stdout == "6\n"


def test_breakpoints_in_tasks_and_nested_coroutines(child):
    program = """\
import asyncio
async def work(n):
    await asyncio.sleep(0)
    return n * 10
results = await asyncio.gather(work(1), work(2))
results
"""
    c = child(program, [{"line": 4}])
    c.wait_stopped()
    assert c.where() == [("work", 4)]  # a task's coroutine: no program caller frame
    assert c.scope_vars()["n"]["value"] == "1"
    c.ok("continue")
    c.wait_stopped()
    assert c.scope_vars()["n"]["value"] == "2"
    c.ok("continue")
    assert c.wait_done().status == "ok"


def test_conditions_and_lines_without_code(child):
    program = (
        "await tools.search(0)\ntotal = 0\nfor i in range(10):\n\n    total += i\nprint(total)\n"
    )
    c = child(program, [], hold_calls=True)
    c.pump(lambda: bool(c.held))  # the program waits for its call: set breakpoints now
    body = c.ok(
        "setBreakpoints",
        {
            "source": {"path": "<program>"},
            "breakpoints": [
                {"line": 4, "condition": "i == 4"},  # blank: moves to line 5
                {"line": 5, "condition": "i ==="},
                {"line": 99},
                {"line": 6, "logMessage": "x"},
                {"line": 6, "condition": "1/0"},
            ],
        },
    )["breakpoints"]
    assert body[0]["verified"] and body[0]["line"] == 5
    assert not body[1]["verified"] and "does not compile" in body[1]["message"]
    assert not body[2]["verified"] and "line 99 has no code" in body[2]["message"]
    assert not body[3]["verified"] and "log points" in body[3]["message"]
    assert body[4]["verified"]
    other = c.ok(
        "setBreakpoints", {"source": {"path": "/elsewhere.py"}, "breakpoints": [{"line": 1}]}
    )
    assert not other["breakpoints"][0]["verified"]
    c.answer_held()
    stop = c.wait_stopped()
    assert stop["reason"] == "breakpoint" and stop["hitBreakpointIds"] == [body[0]["id"]]
    assert c.scope_vars("Globals")["i"]["value"] == "4"
    c.ok("continue")
    c.wait_stopped()  # a condition that raises stops (as pdb does): the user sees it
    assert c.line() == 6
    c.ok("continue")
    assert c.wait_done().status == "ok" and c.stdout == "45\n"


def test_set_breakpoints_while_running_takes_effect(child):
    program = """\
for i in range(3):
    r = await tools.search(i)
    last = i
last
"""
    c = child(program, [], hold_calls=True)
    c.pump(lambda: bool(c.held))
    body = c.ok("setBreakpoints", {"source": {"path": "<program>"}, "breakpoints": [{"line": 3}]})
    assert body["breakpoints"][0]["verified"]
    c.answer_held()
    c.wait_stopped()
    assert c.where() == [("<module>", 3)]
    c.ok("setBreakpoints", {"source": {"path": "<program>"}, "breakpoints": []})
    c.ok("continue")
    for _ in range(2):
        c.pump(lambda: bool(c.held))
        c.answer_held()
    assert c.wait_done().status == "ok" and len(c.stops()) == 1


# -- pause ------------------------------------------------------------------------------------


def test_pause_a_while_true_loop(child):
    program = "n = 0\ndone = False\nwhile not done:\n    n += 1\nprint('out', n > 0)\n"
    c = child(program, [])
    assert c.ok("threads")["threads"] == [{"id": 1, "name": "MainThread"}]
    assert c.ok("pause", {"threadId": 1}) == {}
    stop = c.wait_stopped()
    assert stop["reason"] == "pause"
    assert c.where()[0][1] in (3, 4)
    assert c.evaluate("n > 0").body["result"] == "True"
    assert c.evaluate("done = True").success
    c.ok("continue")
    assert c.wait_done().status == "ok"
    assert c.stdout == "out True\n"


def test_pause_inside_a_function_shows_the_whole_program_stack(child):
    program = "def spin():\n    k = 0\n    while True:\n        k += 1\nspin()\n"
    c = child(program, [])
    for _ in range(5):  # a pause that comes before the program is in spin() stops before it
        c.ok("pause", {"threadId": 1})
        c.wait_stopped()
        where = c.where()
        if where[0][0] == "spin":
            break
        c.ok("continue")
    assert [name for name, _ in where] == ["spin", "<module>"] and where[1][1] == 5


def test_pause_while_the_program_waits_for_a_call(child):
    """A program waiting for a binding call's answer runs no line: the pause stops it where
    it waits, at the ``await`` of its suspended coroutines; stepping goes on from there
    when the answer comes."""
    c = child(AWAITS, [], hold_calls=True)
    c.pump(lambda: bool(c.held))  # waiting at line 5 for tools.search("a")
    c.ok("pause", {"threadId": 1})
    assert c.wait_stopped()["reason"] == "pause"
    assert c.where() == [("<module>", 5)]
    c.ok("next", {"threadId": 1})
    c.answer_held()
    c.wait_stopped()
    assert c.where() == [("<module>", 6)]
    c.ok("continue")
    c.pump(lambda: bool(c.held))  # now inside fetch("b"), line 3
    c.ok("pause", {"threadId": 1})
    c.wait_stopped()
    assert c.where() == [("fetch", 3), ("<module>", 6)]
    assert c.scope_vars()["q"]["value"] == "'b'"
    c.ok("stepOut")
    c.answer_held()
    c.wait_stopped()
    assert c.where() == [("<module>", 6)]
    c.ok("continue")
    assert c.wait_done().status == "ok"


def test_pause_a_one_line_busy_loop(child):
    """A loop on one line runs no new line: the pause takes a backward jump for one (the
    settrace backend's "line" event, sys.monitoring's JUMP)."""
    program = "import time\nwhile 'stop' not in globals(): pass\nprint('out')\n"
    c = child(program, [])
    c.ok("pause", {"threadId": 1})
    assert c.wait_stopped()["reason"] == "pause"
    if c.where() == [("<module>", 1)]:  # the pause came before the loop
        assert c.step("next")["reason"] == "step" and c.line() == 2
        c.ok("continue")  # into the loop, which it leaves on a pause only
        c.ok("pause", {"threadId": 1})
        assert c.wait_stopped()["reason"] == "pause"
    assert c.where() == [("<module>", 2)]
    assert c.evaluate("stop = 1").success
    c.ok("continue")
    assert c.wait_done().status == "ok" and c.stdout == "out\n"


def test_breakpoints_stop_the_main_thread_only(child):
    """A program function another thread runs passes its breakpoint by (threadId is 1, the
    main thread's); the main thread stops there."""
    program = """\
import threading
def work(n):
    return n * 2
out = []
t = threading.Thread(target=lambda: out.append(work(1)))
t.start()
t.join()
y = work(5)
"""
    c = child(program, [{"line": 3}])
    c.wait_stopped()
    assert c.where() == [("work", 3), ("<module>", 8)]
    assert c.scope_vars()["n"]["value"] == "5"
    c.ok("continue")
    assert c.wait_done().status == "ok" and len(c.stops()) == 1


# -- values -----------------------------------------------------------------------------------


VALUES = """\
class Box:
    def __init__(self):
        self.inner = {"k": [1, 2, 3]}
data = {"a": 1, "b": [1, 2], 3: "three"}
box = Box()
def f(x, *rest):
    local_only = x + 1
    return local_only
f(41)
"""


def test_scopes_variables_and_evaluate(child):
    c = child(VALUES, [{"line": 8}])
    c.wait_stopped()
    frames = c.ok("stackTrace", {"threadId": 1})["stackFrames"]
    assert [f["name"] for f in frames] == ["f", "<module>"]
    local = c.scope_vars("Locals")
    assert set(local) == {"x", "rest", "local_only"} and local["local_only"]["value"] == "42"
    glob = c.scope_vars("Globals")
    # The program's own names, and its namespaces; none of what kernelgate put there.
    assert {"Box", "data", "box", "f", "tools"} <= set(glob)
    for hidden in ("display", "help", "ToolError", "clear_output", "update_display"):
        assert hidden not in glob
    assert not [n for n in glob if n.startswith("__")]
    # Children of a dict, of an object, of a namespace.
    kids = c.ok("variables", {"variablesReference": glob["data"]["variablesReference"]})
    named = {v["name"]: v for v in kids["variables"]}
    assert named["'b'"]["value"] == "[1, 2]" and named["'b'"]["evaluateName"] == "data['b']"
    assert named["3"]["value"] == "'three'"
    kids = c.ok("variables", {"variablesReference": glob["box"]["variablesReference"]})
    assert kids["variables"][0]["name"] == "inner"
    assert kids["variables"][0]["evaluateName"] == "box.inner"
    kids = c.ok("variables", {"variablesReference": glob["tools"]["variablesReference"]})
    assert [v["name"] for v in kids["variables"]] == ["search"]
    # evaluate: expressions, statements, errors, in the frame asked for.
    assert c.evaluate("local_only * 2").body["result"] == "84"
    assert c.evaluate("box.inner['k']").body["type"] == "list"
    bad = c.evaluate("nope + 1")
    assert not bad.success and "NameError" in bad.message
    awaited = c.evaluate("await tools.search('x')")
    assert (
        not awaited.success and "`await` cannot run while the program is stopped" in awaited.message
    )
    assert not c.calls  # nothing was sent
    caller = frames[1]["id"]
    reply = c.request(
        "evaluate", {"expression": "data['a']", "frameId": caller, "context": "watch"}
    )
    assert reply.body["result"] == "1"
    assert c.evaluate("data['a'] = 100").success  # a statement, in the program's globals
    rich = c.ok("richInspectVariables", {"variableName": "local_only", "frameId": frames[0]["id"]})
    assert rich["data"]["text/plain"] == "42"
    inspected = c.ok("inspectVariables")
    assert "data" in {v["name"] for v in inspected["variables"]}
    stale_ref = glob["data"]["variablesReference"]
    c.step("next")
    # Ids of the last stop are gone once the program resumed.
    reply = c.request("variables", {"variablesReference": stale_ref})
    assert not reply.success and "valid only until the program resumes" in reply.message
    reply = c.request("scopes", {"frameId": caller})
    assert not reply.success and "valid only until the program resumes" in reply.message
    c.ok("continue")
    assert c.wait_done().status == "ok"


def test_assignments_by_evaluate_reach_the_program(child):
    program = "x = 1\ny = x + 1\ndef f(a):\n    b = a\n    return b\nprint(y, f(5))\n"
    c = child(program, [{"line": 2}, {"line": 5}])
    c.wait_stopped()
    c.evaluate("x = 10")
    c.ok("continue")
    c.wait_stopped()
    c.evaluate("b = 'changed'")
    c.ok("continue")
    c.wait_done()
    assert c.stdout == "11 changed\n"


HUGE = """\
import time
class Slow:
    def __repr__(self):
        time.sleep(1000)
class Raises:
    def __repr__(self):
        raise RuntimeError("no repr for you")
class Swallows:
    def __repr__(self):
        while True:
            try:
                time.sleep(1000)
            except BaseException:
                return "gave up"
big_list = list(range(1_000_000))
big_text = "x" * 10_000_000
big_dict = {i: str(i) * 100 for i in range(100_000)}
big_int = 7 ** 100_000
nested = [[[[[[1]]]]]]
slow = Slow()
raises = Raises()
swallows = Swallows()
done = 1
"""


def test_huge_and_hostile_values_stay_within_the_frame(child):
    """Reprs are cut to 1000 characters, pages to 300 variables and to max_frame_bytes (the
    host's Connection refuses a bigger frame: the test would fail with a protocol error);
    a repr that raises or hangs is reported, and the debugger goes on answering."""
    c = child(HUGE, [{"line": 23}], max_frame_bytes=80_000)
    c.wait_stopped()
    glob = c.scope_vars("Globals")
    assert glob["big_list"]["value"].endswith("(1000000 items)")
    assert len(glob["big_list"]["value"]) < 1100
    assert "more characters of 10000000 cut" in glob["big_text"]["value"]
    assert glob["big_int"]["value"].startswith("<int of ")
    assert glob["raises"]["value"] == "<repr() failed: RuntimeError: no repr for you>"
    # A repr that hangs is cut off (even one that swallows the interruption once).
    assert glob["slow"]["value"] == "<not shown: its repr took too long>"
    assert glob["swallows"]["value"] == "gave up"
    ref = glob["big_dict"]["variablesReference"]
    page = c.ok("variables", {"variablesReference": ref})["variables"]
    assert page[-1]["name"] == "..." and "ask with start=" in page[-1]["value"]
    assert len(page) <= 301
    nxt = int(page[-1]["value"].rsplit("start=", 1)[1])
    page2 = c.ok("variables", {"variablesReference": ref, "start": nxt, "count": 5})["variables"]
    assert page2[0]["name"] == str(nxt)
    page = c.ok("variables", {"variablesReference": glob["big_list"]["variablesReference"]})
    assert len(page["variables"]) == 301  # 300 and the note
    # The debugger still answers, and the program still runs to its end.
    assert c.evaluate("len(big_list) + 1").body["result"] == "1000001"
    slow = c.evaluate("slow")
    assert slow.body["result"] == "<not shown: its repr took too long>"
    hang = c.evaluate("time.sleep(1000)")
    assert not hang.success and hang.message == "evaluate ran out of time (10 s)"
    c.ok("continue")
    assert c.wait_done(60).status == "ok"


# -- the program against the debugger ---------------------------------------------------------


def test_a_program_that_calls_settrace_itself_is_still_debugged(child):
    program = """\
import sys, threading
seen = []
def mine(frame, event, arg):
    seen.append(event)
    return mine
sys.settrace(mine)
sys.settrace(None)
threading.settrace(mine)
after = 1
print("seen", seen)
"""
    c = child(program, [{"line": 9}])
    assert c.wait_stopped()["reason"] == "breakpoint"
    assert c.line() == 9
    c.ok("continue")
    assert c.wait_done().status == "ok"
    assert c.stdout == "seen []\n"
    assert c.stderr.count("sys.settrace() is ignored in a debugged run") == 1


def test_a_program_that_rebinds_builtins_and_stdout(child):
    program = """\
import builtins, sys, io
builtins.repr = lambda o: 1 / 0
builtins.len = None
builtins.isinstance = None
sys.stdout = io.StringIO()
value = [1, 2, 3]
print("hidden")
"""
    c = child(program, [{"line": 7}])
    c.wait_stopped()
    assert c.scope_vars("Globals")["value"]["value"] == "[1, 2, 3]"
    assert c.evaluate("value[1]").body["result"] == "2"
    c.ok("continue")
    assert c.wait_done().status == "ok"


def test_breakpoint_builtin_stops_in_the_debugger(child):
    c = child("a = 1\nbreakpoint()\nb = 2\n", [])
    stop = c.wait_stopped()
    assert stop["reason"] == "pause" and c.line() == 3
    c.ok("continue")
    assert c.wait_done().status == "ok"


# -- requests while running, resumes ----------------------------------------------------------


def test_requests_while_running_and_unknown_requests(child):
    c = child(AWAITS, [], hold_calls=True)
    c.pump(lambda: bool(c.held))
    for command in (
        "stackTrace",
        "scopes",
        "variables",
        "evaluate",
        "continue",
        "next",
        "stepIn",
        "stepOut",
        "richInspectVariables",
        "inspectVariables",
    ):
        reply = c.request(command, {"threadId": 1})
        assert not reply.success and reply.message == RUNNING, command
    reply = c.request("attach", {})
    assert not reply.success and reply.message == "kernelgate's debugger does not handle attach"
    assert c.ok("setExceptionBreakpoints", {"filters": ["raised", "other"]}) == {}
    c.answer_held()
    c.pump(lambda: bool(c.held))
    c.answer_held()
    assert c.wait_done().status == "ok"


def test_requests_queued_behind_a_resume_are_answered_not_lost(child):
    c = child(AWAITS, [{"line": 5}], hold_calls=True)
    c.wait_stopped()
    seqs = [c.send_request("continue", {"threadId": 1})]
    seqs += [c.send_request("stackTrace", {"threadId": 1}) for _ in range(5)]
    seqs.append(c.send_request("threads"))
    replies = [c.wait_reply(s) for s in seqs]
    assert replies[0].success
    for reply in replies[1:-1]:
        assert not reply.success and reply.message == RUNNING
    assert replies[-1].success
    c.pump(lambda: bool(c.held))
    c.answer_held()
    c.pump(lambda: bool(c.held))
    c.answer_held()
    assert c.wait_done().status == "ok"


# -- exceptions -------------------------------------------------------------------------------


RAISES = """\
def f(n):
    secret = n * 2
    raise ValueError(f"boom {secret}")
try:
    f(1)
except ValueError:
    pass
f(2)
"""


def test_a_debugged_run_that_raises(child):
    c = child(RAISES, [])
    reply = c.wait_done()
    assert reply.status == "error" and reply.ename == "ValueError"
    assert not c.stops()
    assert "kernelgate" not in "\n".join(reply.traceback)


def test_uncaught_exceptions_stop_before_the_run_reports(child):
    c = child("x = 1\n" + RAISES, [{"line": 1}])
    c.wait_stopped()
    c.ok("setExceptionBreakpoints", {"filters": ["uncaught"]})
    c.ok("continue")
    stop = c.wait_stopped()
    assert stop["reason"] == "exception" and stop["text"] == "ValueError: boom 4"
    assert c.where() == [("f", 4), ("<module>", 9)]
    assert c.scope_vars()["secret"]["value"] == "4"
    c.ok("continue")
    reply = c.wait_done()
    assert reply.status == "error" and reply.evalue == "boom 4"


def test_raised_exceptions_stop_where_they_are_raised(child):
    c = child("x = 1\n" + RAISES, [{"line": 1}])
    c.wait_stopped()
    c.ok("setExceptionBreakpoints", {"filters": ["raised"]})
    c.ok("continue")
    stop = c.wait_stopped()
    assert stop["reason"] == "exception" and stop["text"] == "ValueError: boom 2"
    assert c.where() == [("f", 4), ("<module>", 6)]
    c.ok("continue")
    assert c.wait_stopped()["text"] == "ValueError: boom 4"  # raised, then uncaught
    c.ok("continue")
    assert c.wait_done().ename == "ValueError"


def test_stop_on_entry(child):
    c = child("a = 1\nb = 2\n", debug={"breakpoints": [], "stopOnEntry": True})
    assert c.wait_stopped()["reason"] == "entry"
    assert c.line() == 1
    c.ok("continue")
    assert c.wait_done().status == "ok"


def test_a_forked_process_never_stops_nor_speaks_for_the_program(child):
    """A process the program forks shares fd 3 but has no reader thread: stopped there,
    nobody could resume it (and its parent would wait for it forever)."""
    program = """\
import os
pid = os.fork()
if pid == 0:
    x = 1
    os._exit(0)
os.waitpid(pid, 0)
y = 2
"""
    c = child(program, [{"line": 4}, {"line": 7}])
    c.wait_stopped()
    assert c.where() == [("<module>", 7)]
    c.ok("continue")
    assert c.wait_done().status == "ok"
    assert len(c.stops()) == 1


def test_a_forked_process_is_not_debugged_at_all(child):
    """3.12+: a process the program forks has no debugger events, the tool id free and
    sys.monitoring's own functions (the debugger's guard is the parent's only)."""
    if child.minor < 12:
        pytest.skip("sys.monitoring is 3.12's")
    program = """\
import os, sys
mon = sys.monitoring
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    here = sys._getframe().f_code
    seen = [mon.get_tool(0), mon.get_events(0), mon.get_local_events(0, here),
            type(mon.set_events).__name__]
    os.write(w, repr(seen).encode())
    os._exit(0)
os.waitpid(pid, 0)
got = os.read(r, 1000).decode()
print(got, mon.get_tool(0))
"""
    c = child(program, [{"line": 7}, {"line": 13}])
    c.wait_stopped()
    assert c.line() == 13
    c.ok("continue")
    assert c.wait_done().status == "ok"
    assert c.stdout == "[None, 0, 0, 'builtin_function_or_method'] kernelgate debugger\n"


def test_a_program_that_blocks_sigalrm_still_gets_its_slow_repr_cut(child):
    program = """\
import signal, time
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
class Slow:
    def __repr__(self):
        time.sleep(1000)
slow = Slow()
print(signal.SIGALRM in signal.pthread_sigmask(signal.SIG_BLOCK, []))
"""
    c = child(program, [{"line": 7}])
    c.wait_stopped()
    assert c.scope_vars("Globals")["slow"]["value"] == "<not shown: its repr took too long>"
    c.ok("continue")
    assert c.wait_done().status == "ok"
    assert c.stdout == "True\n"  # the program's mask is back


def test_recursion_to_the_limit_does_not_end_the_debugging(child):
    """CPython drops a trace function that raises, and a program recursing to the limit
    makes the call into it raise: the debugger traces again when the program's loop next
    runs (here, when its binding call is answered)."""
    program = """\
def down(n):
    return down(n + 1)
try:
    down(0)
except RecursionError:
    pass
await tools.search(1)
after = 1
"""
    c = child(program, [{"line": 8}])
    assert c.wait_stopped()["reason"] == "breakpoint"
    assert c.line() == 8
    c.ok("continue")
    assert c.wait_done().status == "ok"


def test_calls_from_another_threads_loop_are_answered_through_the_reader(child):
    """In a debugged run no loop watches fd 3: the reader thread hands each reply to the
    loop that made the call, here one in another thread while the main thread is blocked
    in join()."""
    program = """\
import asyncio, threading
out = []
def worker():
    out.append(asyncio.run(tools.search("t")))
t = threading.Thread(target=worker)
t.start()
t.join()
print(out)
"""
    c = child(program, [{"line": 8}])
    c.wait_stopped()
    assert c.scope_vars("Globals")["out"]["value"] == "[['result for t']]"
    c.ok("continue")
    assert c.wait_done().status == "ok"


def test_a_deep_stack_is_cut_to_fit_the_frame(child):
    program = "def down(n):\n    if n == 0:\n        return 0\n    return down(n - 1)\ndown(900)\n"
    c = child(program, [{"line": 3}], max_frame_bytes=80_000)
    c.wait_stopped()
    body = c.ok("stackTrace", {"threadId": 1})
    assert body["totalFrames"] == 902
    assert 100 < len(body["stackFrames"]) < 902  # the innermost that fit
    rest = c.ok("stackTrace", {"threadId": 1, "startFrame": 900, "levels": 5})["stackFrames"]
    assert [f["name"] for f in rest] == ["down", "<module>"]
    c.ok("continue")
    assert c.wait_done().status == "ok"


def test_an_interrupt_ends_a_stopped_program(child):
    """The host's interrupt (SIGINT) reaches a program stopped at a breakpoint: it ends
    with KeyboardInterrupt, the debugger in the way of nothing."""
    c = child("x = 1\ny = 2\n", [{"line": 2}])
    c.wait_stopped()
    os.kill(c.proc.pid, signal.SIGINT)
    reply = c.wait_done()
    assert reply.status == "error" and reply.ename == "KeyboardInterrupt"


# -- the backends: sys.settrace before 3.12, sys.monitoring from 3.12 ---------------------------


BACKEND = """\
import sys, json
mon = getattr(sys, "monitoring", None)
here = sys._getframe().f_code
seen = [
    sys.gettrace() is None,
    mon and mon.get_tool(0),
    mon and bool(mon.get_local_events(0, here) & mon.events.LINE),
    mon and mon.get_local_events(0, json.dumps.__code__),
    mon and mon.get_events(0) == mon.events.PY_START,
]
x = 1
"""


def test_which_backend_traces_the_program(child):
    """From 3.12 the debugger uses sys.monitoring (tool 0), never sys.settrace: the program
    sees no trace function, LINE events on its own code only, and one global event, PY_START
    (disabled in code not the program's at its first call); before
    3.12 it sees the settrace backend's trace function. ``tracer: settrace`` (the
    benchmarks' comparison) asks for settrace's on any version."""
    c = child(BACKEND, [{"line": 11}])
    c.wait_stopped()
    seen = c.evaluate("seen").body["result"]
    if child.minor >= 12:
        assert seen == "[True, 'kernelgate debugger', True, 0, True]"
    else:
        assert seen == "[False, None, None, None, None]"
    c.ok("continue")
    assert c.wait_done().status == "ok"
    forced = child(BACKEND, debug={"breakpoints": [{"line": 11}], "tracer": "settrace"})
    forced.wait_stopped()
    seen = forced.evaluate("seen").body["result"]
    assert seen.startswith("[False, None, ") and "kernelgate" not in seen
    forced.ok("continue")
    assert forced.wait_done().status == "ok"


#: Programs, their debug options, the resume to send at each stop and an expression to show:
#: each backend must stop at the same places, with the same values.
SCENARIOS: dict[str, tuple[str, dict[str, Any], str, str]] = {
    "one-line loop": (
        "n = 0\nwhile n < 4: n += 1\nprint(n)\n",
        {"breakpoints": [{"line": 2}]},
        "continue",
        "n",
    ),
    "for loop on one line with a condition": (
        "t = 0\nfor i in range(6): t += i\nt\n",
        {"breakpoints": [{"line": 2, "condition": "t > 3"}]},
        "continue",
        "t",
    ),
    "next through raises": (
        "def f(n):\n    raise ValueError(n)\ndef g():\n    try:\n        f(1)\n"
        "    except ValueError:\n        pass\n    return 2\ny = g()\nf(3)\n",
        {"breakpoints": [{"line": 5}]},
        "next",
        "1",
    ),
    "step in everywhere": (
        AWAITS.replace("import json\n", "import json\ndef one(a): return a\n") + "z = one(2)\n",
        {"breakpoints": [{"line": 1}]},
        "stepIn",
        "1",
    ),
    "step out of recursion": (
        "def down(n):\n    if n == 0:\n        return 0\n    return down(n - 1) + 1\n"
        "r = down(3)\nprint(r)\n",
        {"breakpoints": [{"line": 3}]},
        "stepOut",
        "1",
    ),
    "next over awaits and generators": (
        AWAITS.replace(
            "print(text)\n", "def gen():\n    yield 1\n    yield 2\nall_ = list(gen())\n"
        ),
        {"breakpoints": [{"line": 3}, {"line": 10}]},
        "next",
        "1",
    ),
    "raised and uncaught": (RAISES, {"exceptionFilters": ["raised", "uncaught"]}, "next", "1"),
    "code made at run time": (
        "def f(a):\n    b = a + 1\n    return b\n"
        "f.__code__ = f.__code__.replace(co_name='g')\nx = f(1)\n"
        "exec(compile('def h():\\n    return 5\\n', '<program>', 'exec'))\ny = h()\n",
        {"breakpoints": [{"line": 2}]},
        "next",
        "1",
    ),
    "entry, then stepIn": (
        "def f():\n    return 1\nx = f()\n",
        {"stopOnEntry": True},
        "stepIn",
        "1",
    ),
}


def _walk(c: DebugChild, resume: str, probe: str) -> list[Any]:
    """Every stop of the run until it ends, as (reason, stack, value of ``probe``)."""
    seen = []
    for _ in range(60):
        c.pump(lambda: c.reply is not None or len(c.stops()) > c._seen_stops)
        if c.reply is not None and len(c.stops()) == c._seen_stops:
            break
        stop = c.wait_stopped()
        value = c.evaluate(probe)
        seen.append((stop["reason"], c.where(), value.body.get("result", value.message)))
        c.ok(resume, {"threadId": 1})
    assert c.wait_done().status in ("ok", "error")
    return seen


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_both_backends_stop_at_the_same_places(child, scenario):
    if child.minor < 12:
        pytest.skip("before 3.12 there is one backend (sys.settrace)")
    program, debug, resume, probe = SCENARIOS[scenario]
    monitored = _walk(child(program, debug={"breakpoints": [], **debug}), resume, probe)
    forced = {"breakpoints": [], **debug, "tracer": "settrace"}
    traced = _walk(child(program, debug=forced), resume, probe)
    assert monitored == traced
    assert len(monitored) >= 2, monitored


@pytest.mark.timeout(120)
@pytest.mark.parametrize("trap", ["swallow", "disarm"])
def test_a_value_whose_repr_fights_the_deadline_does_not_wedge_either_backend(child, trap):
    """The repr traps of tests/hardening/test_debug_attacks.py, on every interpreter: the
    settrace backend (3.10, 3.11) and sys.monitoring's (3.12+). The host is always
    answered: the trap is cut off ("took too long"), or, where CPython lets a repr that
    swallows every interruption loop on (a ``while True`` over ``try: ... except
    BaseException: pass`` on 3.10 and 3.12), the reader thread answers that the program is
    stuck, and the next request is answered too."""
    reprs = {
        "swallow": "        while True:\n            try:\n                time.sleep(1000)\n"
        "            except BaseException:\n                pass\n",
        "disarm": "        signal.setitimer(signal.ITIMER_REAL, 0)\n        time.sleep(1000)\n",
    }
    program = (
        "import signal, time\nclass T:\n    def __repr__(self):\n"
        + reprs[trap]
        + "trap = T()\nafter = 1\n"
    )
    c = child(program, [{"line": 10 if trap == "swallow" else 7}])
    c.wait_stopped()
    reply = c.request("scopes", {"frameId": c.ok("stackTrace")["stackFrames"][0]["id"]})
    ref = next(s["variablesReference"] for s in reply.body["scopes"] if s["name"] == "Globals")
    answer = c.request("variables", {"variablesReference": ref}, timeout=30)
    if answer.success:
        shown = {v["name"]: v["value"] for v in answer.body["variables"]}["trap"]
        assert "took too long" in shown or "ran out of time" in shown, shown
        c.ok("continue")
        assert c.wait_done().status == "ok"
    else:
        assert trap == "swallow", answer.message
        assert "stuck in its own code" in answer.message and "__repr__" in answer.message
        assert c.request("threads").success  # the stop still answers
