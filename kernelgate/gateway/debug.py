"""The host's end of a debugged run: the Debug Adapter Protocol between a caller and the
child's tracer, with the host as the authority on what the caller is told.

A caller (the Jupyter kernel, ``kernelgate replay --debug``, a test) makes a
:class:`RunDebugger` with breakpoints in *program* lines and passes it to
``Gateway.run(program, debug=...)``. While the run goes on, ``await dbg.request(command,
arguments)`` sends one DAP request to the child and returns its response; ``on_event`` is
told ``stopped``, ``continued`` and ``terminated``.

The child is untrusted, so:

- its only event, ``stopped``, is rebuilt from checked fields (a reason from DAP's list,
  capped texts); a second ``stopped`` while stopped is dropped, so a program cannot flood
  the caller: each one follows a resume the caller asked for;
- ``continued`` and ``terminated`` are the host's: said when the child accepted a resume
  request, and when the run ended;
- a reply answers the request the host sent (the wire checks it is in flight, once) and is
  given back under the host's command name, its message capped; a late reply (after the
  caller stopped waiting) is judged by that command too, never by the one the child names;
- a malformed ``stopped`` ends the run as a protocol violation, as any malformed message.

The wall clock of ``Limits.wall_seconds`` stops while the program is stopped at a line (a
person is reading it); CPU limits hold, and interrupts and cancellation end the run as
always. A stop is the program's word, so a stopped clock has a ceiling of its own,
``max_pause_seconds`` (an hour by default) for each stop: a program that only claims to be
stopped gets that long at most, beyond ``wall_seconds``.

>>> dbg = RunDebugger([{"line": 3}])
>>> dbg.options()
{'breakpoints': [{'line': 3}]}
>>> dbg.stopped, dbg.running
(False, False)
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from kernelgate.wire.errors import ProtocolError
from kernelgate.wire.events import DebugEvent, DebugReply, DebugRequest
from kernelgate.wire.values import dumps

from .outcome import Verdict

__all__ = [
    "RunDebugger",
    "RESUME_COMMANDS",
    "STOP_REASONS",
    "PROGRAM_PATH",
    "EXCEPTION_FILTERS",
    "MAX_BREAKPOINTS",
    "MAX_WAITING",
]

log = logging.getLogger("kernelgate.debug")

#: The path of the program's source in every frame and breakpoint the child speaks of
#: (``kernelgate.kernels.python.program.FILENAME``; a string here: the gateway does not
#: import the child's modules).
PROGRAM_PATH = "<program>"
#: Requests after which the program runs again (when the child accepts them).
RESUME_COMMANDS = frozenset({"continue", "next", "stepIn", "stepOut"})
#: DAP's reasons for a ``stopped`` event.
STOP_REASONS = frozenset(
    {
        "step",
        "breakpoint",
        "exception",
        "pause",
        "entry",
        "goto",
        "function breakpoint",
        "data breakpoint",
        "instruction breakpoint",
    }
)
#: The exception filters a run's debugger takes: stop where an exception is raised in the
#: program's code, or where one is about to end the program.
EXCEPTION_FILTERS = ("raised", "uncaught")
_MAX_TEXT = 2000
#: The most a debug request's arguments may take, as JSON: a request is a person's expression
#: or a list of breakpoints, and the child reads what it is sent whole.
MAX_REQUEST_BYTES = 1 << 20
MAX_BREAKPOINTS = 10_000
#: Requests sent and not answered yet (a timed-out one included, until the child answers or
#: the run ends): beyond it a request is refused, so no caller can grow the host's tables.
MAX_WAITING = 256
_DEFAULT_TIMEOUT = 30.0

EventListener = Callable[[dict[str, Any]], None]


class _Link(Protocol):
    """What a running :class:`~kernelgate.gateway.run.Run` gives its debugger."""

    def send_debug(self, request: DebugRequest) -> None: ...

    def pause_clock(self) -> None: ...

    def resume_clock(self) -> None: ...

    def debug_violation(self, detail: str) -> None: ...


def pause_timeout(seconds: float) -> Verdict:
    """How a run ends whose program stayed stopped longer than ``max_pause_seconds``."""
    return Verdict(
        "timeout",
        "Timeout",
        f"the debugged program stayed stopped at a line for max_pause_seconds={seconds:g} "
        "and was ended; continue it sooner, or raise RunDebugger(max_pause_seconds=...)",
    )


def _breakpoint(bp: Any) -> dict[str, Any]:
    """A breakpoint as the child takes it: ``{"line": N}`` (program line, from 1), with an
    optional ``"condition"`` (a Python expression)."""
    if isinstance(bp, bool) or not isinstance(bp, (int, Mapping)):
        raise TypeError(f"a breakpoint is a line number or {{'line': N}}, got {bp!r:.80}")
    entry = {"line": bp} if isinstance(bp, int) else dict(bp)
    line = entry.get("line")
    if isinstance(line, bool) or not isinstance(line, int) or line < 1:
        raise ValueError(f"a breakpoint's line must be a program line from 1, got {line!r:.80}")
    checked: dict[str, Any] = {"line": line}
    condition = entry.get("condition")
    if condition:
        if not isinstance(condition, str):
            raise TypeError(f"a breakpoint's condition must be a string, got {condition!r:.80}")
        checked["condition"] = condition
    return checked


def _filters(filters: Iterable[Any]) -> tuple[str, ...]:
    if isinstance(filters, str):
        raise TypeError(f"exception filters are a list of names, got the string {filters!r:.80}")
    chosen = tuple(dict.fromkeys(filters))
    for name in chosen:
        if name not in EXCEPTION_FILTERS:
            raise ValueError(
                f"exception filter must be one of {list(EXCEPTION_FILTERS)}, got {name!r:.80}"
            )
    return chosen


def _breakpoints(bps: Iterable[Any]) -> list[dict[str, Any]]:
    checked = [_breakpoint(bp) for bp in bps]
    if len(checked) > MAX_BREAKPOINTS:
        raise ValueError(f"at most {MAX_BREAKPOINTS} breakpoints, got {len(checked)}")
    return checked


def _cap(text: str) -> str:
    return text if len(text) <= _MAX_TEXT else text[: _MAX_TEXT - 1] + "…"


def stopped_body(body: Mapping[str, Any]) -> dict[str, Any]:
    """The ``stopped`` event's body as the host passes it on: every field checked, texts
    capped; raises ValueError naming what was wrong.

    >>> stopped_body({"reason": "breakpoint", "threadId": 1, "hitBreakpointIds": [2]})
    {'reason': 'breakpoint', 'threadId': 1, 'allThreadsStopped': True, 'hitBreakpointIds': [2]}
    """
    reason = body.get("reason")
    if reason not in STOP_REASONS:
        raise ValueError(f"stopped event reason must be one of DAP's, got {reason!r:.80}")
    out: dict[str, Any] = {"reason": reason, "threadId": 1, "allThreadsStopped": True}
    for key in ("description", "text"):
        value = body.get(key)
        if value is not None:
            if not isinstance(value, str):
                raise ValueError(f"stopped event {key} must be a string, got {value!r:.80}")
            out[key] = _cap(value)
    ids = body.get("hitBreakpointIds")
    if ids is not None:
        if not isinstance(ids, list) or len(ids) > 100:
            raise ValueError(
                f"stopped event hitBreakpointIds must be a short list, got {ids!r:.80}"
            )
        if any(isinstance(i, bool) or not isinstance(i, int) for i in ids):
            raise ValueError(f"stopped event hitBreakpointIds must be integers: {ids!r:.80}")
        out["hitBreakpointIds"] = ids
    return out


class RunDebugger:
    """One debugged run as its caller drives it (pass it to ``Gateway.run(debug=...)``).

    ``breakpoints``: program lines (``3`` or ``{"line": 3, "condition": "i > 2"}``).
    ``on_event``: called on the event loop with each DAP event dict the host says
    (``stopped``, ``continued``, ``terminated``). ``timeout``: how long a request waits for
    the child's answer by default. ``max_pause_seconds``: how long one stop may last before
    the run ends as a timeout. One RunDebugger serves one run.

    >>> async def main():
    ...     async with Gateway() as gw:
    ...         dbg = RunDebugger([2], on_event=lambda e: print(e["event"]))
    ...         run = asyncio.create_task(gw.run("x = 1\\ny = x + 1\\ny", debug=dbg))
    ...         ...  # on "stopped": await dbg.request("stackTrace", {"threadId": 1}) ...
    """

    def __init__(
        self,
        breakpoints: Iterable[Any] = (),
        *,
        on_event: EventListener | None = None,
        timeout: float = _DEFAULT_TIMEOUT,
        max_pause_seconds: float = 3600.0,
        exception_filters: Iterable[str] = (),
    ) -> None:
        if not max_pause_seconds > 0:
            raise ValueError(f"max_pause_seconds must be above 0, got {max_pause_seconds!r}")
        self.max_pause_seconds = float(max_pause_seconds)
        self._breakpoints = _breakpoints(breakpoints)
        self._exception_filters = _filters(exception_filters)
        self.on_event = on_event
        self.timeout = timeout
        self._link: _Link | None = None
        self._seqs = itertools.count(1)
        self._waiting: dict[int, tuple[str, asyncio.Future[dict[str, Any]]]] = {}
        # Every request sent and not answered yet, by seq: its command as the HOST sent it.
        # Kept past a caller's timeout, so that a late reply is judged by what was asked,
        # never by the command the child names in it.
        self._sent: dict[int, str] = {}
        self._stopped = False
        self._used = False
        self._ended = False

    # -- what the caller sees --------------------------------------------------------------

    @property
    def breakpoints(self) -> list[dict[str, Any]]:
        """The breakpoints in program lines, as last set."""
        return [dict(bp) for bp in self._breakpoints]

    @property
    def running(self) -> bool:
        """The child has the program and the run has not ended."""
        return self._link is not None and not self._ended

    @property
    def ended(self) -> bool:
        return self._ended

    @property
    def stopped(self) -> bool:
        """The program is stopped at a line (it said so, and no resume was accepted since)."""
        return self._stopped

    def options(self) -> dict[str, Any]:
        """What the child's ``execute_request`` carries as ``options["debug"]``."""
        options: dict[str, Any] = {"breakpoints": self.breakpoints}
        if self._exception_filters:
            options["exceptionFilters"] = list(self._exception_filters)
        return options

    async def request(
        self,
        command: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """Send one DAP request to the child; its response as a DAP dict
        (``success`` False with a ``message`` when it could not be answered: no run, the
        run ended, the child did not answer in time, or the child refused)."""
        args = dict(arguments or {})
        if command == "setBreakpoints":
            try:
                self._breakpoints = _breakpoints(args.get("breakpoints") or ())
            except (TypeError, ValueError) as exc:
                return _failure(command, str(exc))
            args = {"source": {"path": PROGRAM_PATH}, "breakpoints": self.breakpoints}
            if not self.running:
                # Kept for the run to come (or none): verified when the child has them.
                bps = [{"verified": True, **bp} for bp in self._breakpoints]
                return _response(command, True, {"breakpoints": bps})
        elif command == "setExceptionBreakpoints":
            try:
                self._exception_filters = _filters(args.get("filters") or ())
            except (TypeError, ValueError) as exc:
                return _failure(command, str(exc))
            args = {"filters": list(self._exception_filters)}
            if not self.running:
                return _response(command, True, {})
        link = self._link
        if link is None or self._ended:
            why = "the run has ended" if self._ended else "no program is running yet"
            return _failure(command, f"{why}: {command} needs a running program")
        seq = next(self._seqs)
        try:
            request = DebugRequest(seq, command, args)
            size = len(dumps(args))
        except ProtocolError as exc:
            return _failure(command, str(exc))
        except (TypeError, ValueError, RecursionError) as exc:
            return _failure(command, f"{command}'s arguments are not JSON: {exc}")
        if size > MAX_REQUEST_BYTES:
            return _failure(
                command,
                f"{command}'s arguments are {size} bytes of JSON; a debug request carries at "
                f"most {MAX_REQUEST_BYTES} (a shorter expression, or fewer breakpoints)",
            )
        if len(self._sent) >= MAX_WAITING:
            return _failure(
                command,
                f"{len(self._sent)} debug requests are waiting for the program's answer "
                f"(at most {MAX_WAITING}); wait for them, or interrupt the run",
            )
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiting[seq] = (command, fut)
        self._sent[seq] = command
        try:
            link.send_debug(request)
        except ProtocolError as exc:
            self._waiting.pop(seq, None)
            self._sent.pop(seq, None)
            return _failure(command, f"the program cannot take {command} now: {exc}")
        wait = self.timeout if timeout is None else timeout
        try:
            return await asyncio.wait_for(asyncio.shield(fut), wait)
        except asyncio.TimeoutError:
            return _failure(
                command,
                f"the program did not answer {command} within {wait:g} s (it may be busy "
                "outside its own code, e.g. in a long C call); try again or interrupt it",
            )
        finally:
            self._waiting.pop(seq, None)

    # -- what the run tells it -------------------------------------------------------------

    def claim(self) -> None:
        """A run takes this debugger (``Gateway.run`` does, before it starts a child): a
        second run refuses it there, before anything of either run is touched."""
        if self._used:
            raise RuntimeError("a RunDebugger serves one run; make a new one for the next")
        self._used = True

    def attach(self, link: _Link) -> None:
        """The run that claimed it sent the program (with :meth:`options`) to its child."""
        self._link = link

    def on_child_event(self, event: DebugEvent) -> None:
        """The child's ``stopped`` (the wire allows no other)."""
        if self._ended or self._link is None:
            return
        try:
            body = stopped_body(event.body)
        except ValueError as exc:
            self._link.debug_violation(str(exc))
            return
        if self._stopped:
            return  # one stop per resume: a program cannot flood the caller
        self._stopped = True
        self._link.pause_clock()
        self._emit("stopped", body)

    def on_child_reply(self, reply: DebugReply) -> None:
        """The child answered request ``reply.request_seq`` (the wire checked it waits)."""
        entry = self._waiting.pop(reply.request_seq, None)
        command = self._sent.pop(reply.request_seq, None)
        if command is None:  # not one of ours (the wire refuses those): nothing to say
            return
        body = reply.body
        response = _response(command, reply.success, body, _cap(reply.message))
        if reply.success and command in RESUME_COMMANDS and self._stopped and not self._ended:
            self._stopped = False
            if self._link is not None:
                self._link.resume_clock()
            self._emit("continued", {"threadId": 1, "allThreadsContinued": True})
        if entry is not None and not entry[1].done():
            entry[1].set_result(response)

    def end(self) -> None:
        """The run is over: every request waiting fails, ``terminated`` is said once."""
        if self._ended:
            return
        self._ended = True
        self._stopped = False
        for command, fut in self._waiting.values():
            if not fut.done():
                fut.set_result(_failure(command, f"the run ended before {command} was answered"))
        self._waiting.clear()
        self._sent.clear()
        if self._link is not None:
            self._emit("terminated", {})

    def _emit(self, name: str, body: dict[str, Any]) -> None:
        listener = self.on_event
        if listener is None:
            return
        try:
            listener({"type": "event", "event": name, "body": body})
        except Exception:
            # The caller's own hook: its failure must not end the run it watches.
            log.exception("a RunDebugger on_event listener failed on %s", name)


def _response(
    command: str, success: bool, body: dict[str, Any] | None = None, message: str = ""
) -> dict[str, Any]:
    response: dict[str, Any] = {
        "type": "response",
        "command": command,
        "success": success,
        "body": body if body is not None else {},
    }
    if message:
        response["message"] = message
    return response


def _failure(command: str, message: str) -> dict[str, Any]:
    return _response(command, False, {}, message)
