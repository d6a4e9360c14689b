"""``kernelgate replay --debug``: step through a recorded program against its recording.

A terminal debugger in pdb's manner over :class:`kernelgate.gateway.debug.RunDebugger`:
the replay runs in a fresh child as ``kernelgate replay`` runs it (every binding call
answered from the recording, none live), and stops at the breakpoints given with
``--break LINE`` (or, without any, at the program's first statement). At each stop it
prints the line and reads commands from standard input, so a session can be typed or
piped in; the end of input continues the program to its end. When the run ends the
replay's report follows, and the exit status is the replay's (0 matched, 1 diverged).

What the child says (frames, values, messages) and the recording's own text are shown
with control characters escaped: a crafted recording or program cannot drive the terminal.
"""

from __future__ import annotations

import ast
import asyncio
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TextIO

from kernelgate.gateway.debug import RunDebugger
from kernelgate.model.result import CallRecord, RunResult
from kernelgate.notebooks.calls import call_line
from kernelgate.notebooks.replay import replay_async

from .common import shown
from .inputlines import InputLines

__all__ = ["HELP", "check_breakpoint", "debug_replay", "first_statement"]

PROMPT = "(replay) "

HELP = """\
commands (as pdb's):
  n, next          run to the next line in this function (a binding call is answered
                   from the recording as the program makes it)
  s, step          run to the next line, stepping into a function of the program
  r, return        run until this function returns
  c, continue      run to the next breakpoint (or the end)
  p EXPR           evaluate EXPR in the current frame and print its value
  locals, globals  the current frame's variables, or the program's globals
  bt, where        where the program is: its frames, outermost first
  l, list          the program around the current line
  b [LINE]         set a breakpoint at LINE (a program line); without LINE, list them
  cl LINE          clear the breakpoint at LINE
  q, quit          stop the program here (no report: it did not run to its end)
  help             this text
an empty line repeats the last command; the end of input continues to the end"""

_RESUME = {
    "n": "next",
    "next": "next",
    "s": "stepIn",
    "step": "stepIn",
    "r": "stepOut",
    "return": "stepOut",
    "c": "continue",
    "cont": "continue",
    "continue": "continue",
}


def first_statement(program: str) -> int | None:
    """The line of the program's first statement that runs as a line of its own (where
    the debugger stops when no breakpoint is given): not a ``__future__`` import (hoisted
    out of the program's function) nor a bare constant such as a docstring (compiled
    away). ``None`` if the program does not parse (it fails as it starts) or has none.

    >>> first_statement("'Doc.'\\nfrom __future__ import annotations\\n# a comment\\nx = 1")
    4
    """
    try:
        body = ast.parse(program).body
    except (SyntaxError, ValueError):
        return None
    for stmt in body:
        if isinstance(stmt, ast.ImportFrom) and stmt.module == "__future__":
            continue
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
            continue
        return stmt.lineno
    return None


def program_lines(program: str) -> list[str]:
    """The program's lines as Python numbers them (a final newline ends the last)."""
    lines = program.split("\n")
    return lines[:-1] if lines and lines[-1] == "" else lines


def check_breakpoint(lines: list[str], text: str) -> int:
    """``text`` as a breakpoint's line; ``ValueError`` saying why it cannot be one.

    >>> check_breakpoint(["x = 1", "# note"], "2")
    Traceback (most recent call last):
    ...
    ValueError: line 2 is blank or a comment: a breakpoint there is never reached
    """
    try:
        line = int(text)
    except ValueError:
        raise ValueError(f"a breakpoint is a program line number, not {text!r}") from None
    if not 1 <= line <= len(lines):
        raise ValueError(f"no such line {line}: the program has lines 1 to {len(lines)}")
    stripped = lines[line - 1].strip()
    if not stripped or stripped.startswith("#"):
        raise ValueError(f"line {line} is blank or a comment: a breakpoint there is never reached")
    return line


@dataclass
class _Stop:
    """Where the program is stopped: the current frame and its line."""

    frame_id: int | None = None
    line: int | None = None
    name: str = "<module>"


@dataclass
class DebugSession:
    """One ``kernelgate replay --debug``: the program, its breakpoints, the terminal."""

    program: str
    breakpoints: list[int]
    out: TextIO
    err: TextIO
    stdin: TextIO
    echo: bool
    lines: list[str] = field(init=False)
    entry: int | None = None
    last: str = ""
    quit: bool = False
    #: Stops on an uncaught exception were asked for (at the first stop: a request needs
    #: a running program, and the run's options carry only breakpoints).
    catching: bool = False

    def __post_init__(self) -> None:
        self.lines = program_lines(self.program)
        if not self.breakpoints:
            self.entry = first_statement(self.program)

    def say(self, text: str = "") -> None:
        self.out.write(text + "\n")
        self.out.flush()

    def source(self, line: int | None) -> str:
        if line is None or not 1 <= line <= len(self.lines):
            return ""
        return shown(self.lines[line - 1])

    # -- what the run shows as it goes -----------------------------------------------------

    def on_output(self, output: dict[str, Any]) -> None:
        kind = output.get("output_type")
        if kind == "stream":
            # The program is the recording's (a file anyone may have written), so its
            # output too is shown escaped, unlike `kernelgate run`'s of your own program.
            stream = self.out if output.get("name") == "stdout" else self.err
            stream.write(shown(str(output.get("text", ""))))
            stream.flush()
        elif kind == "error":
            trace = output.get("traceback")
            lines = trace if isinstance(trace, list) and trace else [output.get("evalue", "")]
            self.say(shown("\n".join(str(line) for line in lines)))
        elif kind in ("display_data", "execute_result"):
            data = output.get("data")
            text = data.get("text/plain") if isinstance(data, dict) else None
            if isinstance(text, str):
                self.say(shown(text))

    def on_call(self, record: CallRecord) -> None:
        self.say(f"call: {shown(call_line(record))}")

    # -- the session -------------------------------------------------------------------------

    def debugger(self, on_event: Callable[[dict[str, Any]], None]) -> RunDebugger:
        lines = list(self.breakpoints)
        if self.entry is not None:
            lines.append(self.entry)
        return RunDebugger(sorted(set(lines)), on_event=on_event, max_pause_seconds=24 * 3600)

    async def run(self, start: Callable[..., Any]) -> Any:
        """Run the replay (``start(debug=, on_output=, on_call=)``), answering each stop;
        the replay's report, or ``None`` after ``quit``."""
        events: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        dbg = self.debugger(events.put_nowait)
        commands = InputLines(self.stdin)
        task = asyncio.ensure_future(
            start(debug=dbg, on_output=self.on_output, on_call=self.on_call)
        )
        try:
            while True:
                getter = asyncio.ensure_future(events.get())
                done, _ = await asyncio.wait({getter, task}, return_when=asyncio.FIRST_COMPLETED)
                if getter not in done:
                    getter.cancel()
                    return await task
                event = getter.result()
                if event.get("event") == "stopped":
                    await self.stopped(dbg, event.get("body") or {}, commands, task)
                    if self.quit:
                        task.cancel()
                        await asyncio.gather(task, return_exceptions=True)
                        return None
        finally:
            if not task.done():
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)

    async def where(self, dbg: RunDebugger) -> tuple[_Stop, list[dict[str, Any]]]:
        reply = await dbg.request("stackTrace", {"threadId": 1})
        frames = reply.get("body", {}).get("stackFrames") if reply.get("success") else None
        if not isinstance(frames, list) or not frames:
            message = reply.get("message") or "no frames"
            self.say(f"*** the program did not say where it is: {shown(str(message))}")
            return _Stop(), []
        top = frames[0]
        line = top.get("line") if isinstance(top.get("line"), int) else None
        stop = _Stop(top.get("id") if isinstance(top.get("id"), int) else None, line)
        stop.name = str(top.get("name", "<module>"))
        return stop, [f for f in frames if isinstance(f, dict)]

    async def stopped(
        self,
        dbg: RunDebugger,
        body: dict[str, Any],
        commands: InputLines,
        task: asyncio.Future[Any],
    ) -> None:
        """The program stopped: say where, then take commands until one resumes it."""
        stop, _ = await self.where(dbg)
        if not self.catching:
            self.catching = True
            await dbg.request("setExceptionBreakpoints", {"filters": ["uncaught"]})
        reason = str(body.get("reason", "step"))
        if self.entry is not None and stop.line == self.entry and reason == "breakpoint":
            # The stop at the first statement is the session's, not the user's: gone once
            # used, so a loop at the top does not stop there again.
            reason = "entry"
            self.entry = None
            await dbg.request("setBreakpoints", {"breakpoints": self.user_breakpoints()})
        detail = body.get("text") or body.get("description")
        more = f": {shown(str(detail))}" if detail and reason == "exception" else ""
        place = f"line {stop.line}" if stop.line is not None else "an unknown line"
        if stop.name != "<module>":
            place += f" in {shown(stop.name)}()"
        self.say(f"stopped at {place} ({reason}{more})")
        if stop.line is not None:
            self.say(f"{stop.line:>5} -> {self.source(stop.line)}")
        while True:
            if commands.ended:
                await self.go_on(dbg)
                return
            if not self.echo:
                self.out.write(PROMPT)
                self.out.flush()
            reading = asyncio.ensure_future(commands.line())
            await asyncio.wait({reading, task}, return_when=asyncio.FIRST_COMPLETED)
            if not reading.done():
                # The run ended while stopped (killed, a limit): nothing left to command.
                reading.cancel()
                self.say("")
                return
            line = reading.result()
            if line is None:
                self.say("(end of input: the program continues to its end)")
                await self.go_on(dbg)
                return
            if self.echo:
                self.say(PROMPT + shown(line))
            if not line.strip():
                line = self.last
            else:
                self.last = line
            if await self.command(dbg, stop, line.strip()):
                return

    def user_breakpoints(self) -> list[dict[str, Any]]:
        return [{"line": n} for n in sorted(set(self.breakpoints))]

    async def resume(self, dbg: RunDebugger, command: str) -> bool:
        reply = await dbg.request(command, {"threadId": 1})
        if reply.get("success"):
            return True
        self.say(f"*** {command}: {shown(str(reply.get('message', 'refused')))}")
        return not dbg.running  # the run has ended: nothing to wait for here

    async def go_on(self, dbg: RunDebugger) -> None:
        """Continue with nobody left to type: a program that will not go on is stopped
        (as ``q``), never left waiting for a command that cannot come."""
        if not await self.resume(dbg, "continue"):
            self.quit = True

    async def command(self, dbg: RunDebugger, stop: _Stop, line: str) -> bool:
        """Do one command; True when the program was resumed (or told to quit)."""
        word, _, arg = line.partition(" ")
        word, arg = word.lower(), arg.strip()
        if not word:
            return False
        if word in _RESUME:
            return await self.resume(dbg, _RESUME[word])
        if word in ("q", "quit", "exit"):
            self.quit = True
            return True
        if word in ("h", "help", "?"):
            self.say(HELP)
        elif word in ("p", "print", "pp"):
            await self.evaluate(dbg, stop, arg)
        elif word in ("locals", "globals"):
            await self.variables(dbg, stop, "Locals" if word == "locals" else "Globals")
        elif word in ("bt", "where", "w"):
            await self.backtrace(dbg)
        elif word in ("l", "list"):
            self.listing(stop.line)
        elif word in ("b", "break"):
            await self.set_breakpoint(dbg, arg)
        elif word in ("cl", "clear"):
            await self.clear_breakpoint(dbg, arg)
        else:
            self.say(f"*** unknown command {shown(word)!r}: type help for the commands")
        return False

    async def evaluate(self, dbg: RunDebugger, stop: _Stop, expression: str) -> None:
        if not expression:
            self.say("*** p needs an expression: p EXPR")
            return
        args: dict[str, Any] = {"expression": expression, "context": "repl"}
        if stop.frame_id is not None:
            args["frameId"] = stop.frame_id
        reply = await dbg.request("evaluate", args)
        if reply.get("success"):
            self.say(shown(str(reply.get("body", {}).get("result", ""))))
        else:
            self.say(f"*** {shown(str(reply.get('message', 'it could not be evaluated')))}")

    async def variables(self, dbg: RunDebugger, stop: _Stop, scope: str) -> None:
        if stop.frame_id is None:
            self.say("*** no frame to read variables from")
            return
        reply = await dbg.request("scopes", {"frameId": stop.frame_id})
        scopes = reply.get("body", {}).get("scopes") if reply.get("success") else None
        ref = next(
            (
                s.get("variablesReference")
                for s in scopes or []
                if isinstance(s, dict) and s.get("name") == scope
            ),
            None,
        )
        if not isinstance(ref, int):
            self.say(f"*** {scope.lower()}: {shown(str(reply.get('message', 'not available')))}")
            return
        reply = await dbg.request("variables", {"variablesReference": ref})
        found = reply.get("body", {}).get("variables") if reply.get("success") else None
        if not isinstance(found, list):
            self.say(f"*** {scope.lower()}: {shown(str(reply.get('message', 'not available')))}")
            return
        if not found:
            self.say(f"({scope.lower()}: none)")
        for v in found:
            if isinstance(v, dict):
                kind = f"  ({shown(str(v['type']))})" if v.get("type") else ""
                self.say(f"{shown(str(v.get('name')))} = {shown(str(v.get('value')))}{kind}")

    async def backtrace(self, dbg: RunDebugger) -> None:
        _, frames = await self.where(dbg)
        for n, frame in enumerate(reversed(frames)):
            line = frame.get("line") if isinstance(frame.get("line"), int) else None
            mark = ">" if n == len(frames) - 1 else " "
            name = shown(str(frame.get("name", "?")))
            self.say(f"{mark} line {line} in {name}: {self.source(line).strip()}")

    def listing(self, current: int | None) -> None:
        centre = current or 1
        first, last = max(1, centre - 5), min(len(self.lines), centre + 5)
        marks = set(self.breakpoints)
        for n in range(first, last + 1):
            mark = ("B" if n in marks else " ") + ("->" if n == current else "  ")
            self.say(f"{n:>5} {mark} {self.source(n)}")

    async def set_breakpoint(self, dbg: RunDebugger, arg: str) -> None:
        if not arg:
            if not self.breakpoints:
                self.say("no breakpoints")
            for n in sorted(set(self.breakpoints)):
                self.say(f"breakpoint at line {n}: {self.source(n).strip()}")
            return
        try:
            line = check_breakpoint(self.lines, arg)
        except ValueError as exc:
            self.say(f"*** {exc}")
            return
        self.breakpoints.append(line)
        await self.send_breakpoints(dbg, line)

    async def clear_breakpoint(self, dbg: RunDebugger, arg: str) -> None:
        try:
            line = int(arg)
        except ValueError:
            self.say(f"*** cl needs a line number: cl LINE (not {shown(arg)!r})")
            return
        if line not in self.breakpoints:
            self.say(f"*** there is no breakpoint at line {line}")
            return
        self.breakpoints = [n for n in self.breakpoints if n != line]
        await self.send_breakpoints(dbg, None)
        self.say(f"cleared the breakpoint at line {line}")

    async def send_breakpoints(self, dbg: RunDebugger, added: int | None) -> None:
        reply = await dbg.request("setBreakpoints", {"breakpoints": self.user_breakpoints()})
        if not reply.get("success"):
            self.say(f"*** breakpoints: {shown(str(reply.get('message', 'refused')))}")
            return
        if added is None:
            return
        for bp in reply.get("body", {}).get("breakpoints") or []:
            if isinstance(bp, dict) and bp.get("line") == added:
                if bp.get("verified", True):
                    self.say(f"breakpoint at line {added}: {self.source(added).strip()}")
                else:
                    why = shown(str(bp.get("message") or "the program cannot stop there"))
                    self.say(f"*** line {added}: {why}")
                return
        self.say(f"breakpoint at line {added}: {self.source(added).strip()}")


def debug_replay(
    recorded: RunResult,
    program: str | None,
    breakpoints: list[str],
    *,
    limits: Any,
    python: str | None,
    run: Callable[[Callable[[], Any]], Any],
) -> int:
    """Debug one replay in the terminal; the exit status (0 matched, 1 diverged or quit).
    ``run`` runs the session's coroutine (:func:`~kernelgate.cli.common.run_stoppable`).
    ``ValueError`` for a breakpoint that is not a line of the program."""
    code = recorded.program if program is None else program
    lines = program_lines(code)
    session = DebugSession(
        program=code,
        breakpoints=[check_breakpoint(lines, b) for b in breakpoints],
        out=sys.stdout,
        err=sys.stderr,
        stdin=sys.stdin,
        echo=not _interactive(sys.stdin),
    )
    where = getattr(recorded, "source", "") or "the recording"
    stops = (
        f"breakpoints at line{'s' if len(session.breakpoints) > 1 else ''} "
        + ", ".join(str(n) for n in sorted(set(session.breakpoints)))
        if session.breakpoints
        else f"stopping at the first statement (line {session.entry})"
        if session.entry is not None
        else "the program does not parse: it will fail as it starts"
    )
    session.say(f"debugging a replay of {shown(where)}: {stops}; type help for the commands")

    async def start(**hooks: Any) -> Any:
        return await replay_async(recorded, program=program, limits=limits, python=python, **hooks)

    report = run(lambda: session.run(start))
    if report is None:
        session.say("quit: the program was stopped before its end; no replay report")
        return 1
    session.say("")
    session.say(shown(report.format()))
    return 1 if report.diverged else 0


def _interactive(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
