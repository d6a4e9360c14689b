"""The kernel's side of JupyterLab's debugger: the notebook's debug session.

Each cell is a fresh child, so the *session* lives here, in the kernel: whether the front end
started the debugger (``initialize`` then ``attach``), the breakpoints of every cell (by cell
path, :mod:`.dap`), the cells it dumped. While the debugger is started, every notebook cell
runs debugged: its child gets the breakpoints that fall in its program (setup cells' source,
then the cell's) and answers the runtime requests (``stackTrace``, ``scopes``, ``variables``,
``evaluate``, ``continue``, ``next``, ``stepIn``, ``stepOut``, ``pause``...) through the run's
:class:`~kernelgate.gateway.debug.RunDebugger`, in program coordinates that
:class:`~.dap.ProgramMap` turns into cell paths and lines.

The session is the *notebook's*: private runs (requests with an owner secret,
:mod:`.clients`) are never debugged, and a ``debug_request`` with an owner secret is refused,
so no client reaches a run that is not the notebook's (docs/kernel.md, "Debugging").

What leaves for the front end is inert text (:mod:`.dap`): names, values and types as
escaped, bounded strings; rich views ``text/plain`` alone; ``source`` only from cells this
kernel was given (dumped, or run as a part of a program), never from a file.
"""

# long: one short handler per DAP request of the session (about twenty), all on the
# session's state (cells, breakpoints, filters, the running cell); the mapping is in .dap.

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any

from kernelgate.gateway.debug import EXCEPTION_FILTERS as RUN_EXCEPTION_FILTERS
from kernelgate.gateway.debug import RunDebugger

from .cells import Program
from .dap import (
    HASH_SEED,
    MAX_MESSAGE,
    ProgramMap,
    cell_path,
    clip,
    inert_body,
    inert_event,
    tmp_prefix,
)

__all__ = ["DebugSession", "SESSION_COMMANDS", "RUNTIME_COMMANDS"]

log = logging.getLogger("kernelgate.kernel")

#: Answered by the kernel alone.
SESSION_COMMANDS = frozenset(
    {
        "initialize",
        "attach",
        "disconnect",
        "debugInfo",
        "dumpCell",
        "setBreakpoints",
        "setExceptionBreakpoints",
        "configurationDone",
        "source",
        "modules",
        "threads",
    }
)
#: Forwarded to the debugged run (``inspectVariables`` and ``richInspectVariables`` only
#: while it is stopped; ``threads`` while it runs).
RUNTIME_COMMANDS = frozenset(
    {
        "stackTrace",
        "scopes",
        "variables",
        "evaluate",
        "continue",
        "next",
        "stepIn",
        "stepOut",
        "pause",
        "richInspectVariables",
        "inspectVariables",
    }
)
#: Answered before the debugger is started, as ipykernel does.
_ANY_TIME = frozenset({"initialize", "attach", "debugInfo", "disconnect", "inspectVariables",
                       "richInspectVariables", "modules"})  # fmt: skip

#: Bounds on what the session keeps for the front end.
MAX_CELLS = 1024
MAX_CELL_CHARS = 1 << 20
MAX_KEPT_CHARS = 32 << 20
MAX_BREAKPOINT_PATHS = 4096
MAX_BREAKPOINTS = 1000
#: Breakpoints in all cells together (conditions of up to MAX_CONDITION characters each).
MAX_ALL_BREAKPOINTS = 10_000
MAX_CONDITION = 1000

#: The ``exceptionBreakpointFilters`` the front end offers (JupyterLab's "pause on
#: exceptions" menu): the run's debugger takes them with its breakpoints, and at once while
#: it runs.
EXCEPTION_FILTERS: tuple[dict[str, Any], ...] = (
    {
        "filter": "raised",
        "label": "Raised Exceptions",
        "description": "Stop where an exception is raised in the program's code",
        "default": False,
    },
    {
        "filter": "uncaught",
        "label": "Uncaught Exceptions",
        "description": "Stop where an exception is about to end the program",
        "default": False,
    },
)


class DebugRequestError(ValueError):
    """A debug request the session refuses (its message goes in the reply)."""


@dataclass
class _Run:
    """The debugged run of the cell running now."""

    debugger: RunDebugger
    where: ProgramMap
    parent: dict[str, Any]
    stopped: bool = False
    attached: bool = True


@dataclass
class _Cells:
    """Sources the front end may ask for (``source``), newest last, within bounds."""

    by_path: collections.OrderedDict[str, str] = field(default_factory=collections.OrderedDict)
    chars: int = 0

    def keep(self, path: str, code: str) -> None:
        if len(code) > MAX_CELL_CHARS:
            return
        old = self.by_path.pop(path, None)
        if old is not None:
            self.chars -= len(old)
        self.by_path[path] = code
        self.chars += len(code)
        while self.by_path and (len(self.by_path) > MAX_CELLS or self.chars > MAX_KEPT_CHARS):
            _, dropped = self.by_path.popitem(last=False)
            self.chars -= len(dropped)

    def get(self, path: str) -> str | None:
        return self.by_path.get(path)


def _response(
    request: Mapping[str, Any],
    body: Mapping[str, Any] | None = None,
    *,
    message: str | None = None,
) -> dict[str, Any]:
    reply: dict[str, Any] = {
        "type": "response",
        "request_seq": request.get("seq", 0) if isinstance(request.get("seq"), int) else 0,
        "command": clip(request.get("command"), 100),
        "success": message is None,
        "body": dict(body or {}),
    }
    if message is not None:
        reply["message"] = clip(message, MAX_MESSAGE)
    return reply


def _checked_breakpoints(raw: object) -> list[dict[str, Any]]:
    if not isinstance(raw, list):
        raise DebugRequestError("setBreakpoints: arguments.breakpoints must be a list")
    if len(raw) > MAX_BREAKPOINTS:
        raise DebugRequestError(
            f"setBreakpoints: {len(raw)} breakpoints in one cell; at most {MAX_BREAKPOINTS}"
        )
    out = []
    for bp in raw:
        line = bp.get("line") if isinstance(bp, Mapping) else None
        if isinstance(line, bool) or not isinstance(line, int) or not 1 <= line < 2**31:
            raise DebugRequestError(
                f"setBreakpoints: each breakpoint needs a line number >= 1, got {clip(bp, 80)}"
            )
        kept: dict[str, Any] = {"line": line}
        condition = bp.get("condition")
        if isinstance(condition, str) and condition.strip():
            if len(condition) > MAX_CONDITION:
                raise DebugRequestError(
                    f"setBreakpoints: a condition of {len(condition)} characters; at most "
                    f"{MAX_CONDITION}"
                )
            kept["condition"] = condition
        out.append(kept)
    return out


class DebugSession:
    """The notebook's debug session: answers ``debug_request`` contents with DAP responses.

    ``publish_event(event, parent)`` sends a ``debug_event`` on iopub (``parent``: the
    running cell's request header, or ``None``).
    """

    def __init__(
        self,
        publish_event: Callable[[dict[str, Any], dict[str, Any] | None], None],
        *,
        prefix: str | None = None,
    ) -> None:
        self.publish_event = publish_event
        self.prefix = prefix if prefix is not None else tmp_prefix()
        self.initialized = False
        self.started = False
        #: cell path -> its breakpoints (``[{line, condition?}]``, cell lines).
        self.breakpoints: dict[str, list[dict[str, Any]]] = {}
        self.exception_filters: list[str] = []
        self.cells = _Cells()
        self.run: _Run | None = None
        self._seq = 0
        self._handlers: dict[str, Callable[[Mapping[str, Any]], dict[str, Any]]] = {
            "initialize": self._initialize,
            "attach": self._attach,
            "disconnect": self._disconnect,
            "debugInfo": self._debug_info,
            "dumpCell": self._dump_cell,
            "setBreakpoints": self._set_breakpoints,
            "setExceptionBreakpoints": self._set_exception_breakpoints,
            "configurationDone": self._configuration_done,
            "source": self._source,
            "modules": self._modules,
            "threads": self._threads,
        }
        assert set(self._handlers) == SESSION_COMMANDS

    # -- runs ----------------------------------------------------------------------------------

    def begin_run(self, program: Program, parent: dict[str, Any]) -> RunDebugger | None:
        """The debugger for a notebook cell about to run ``program`` (``None``: the
        debugger is not started, and the cell runs as it would without one)."""
        if not self.started:
            return None
        where = ProgramMap.of(program, self.prefix)
        for part in where.parts:
            self.cells.keep(part.path, part.source)
        run: _Run | None = None

        def on_event(event: dict[str, Any]) -> None:
            if run is not None:
                self._on_run_event(run, event)

        debugger = RunDebugger(
            where.program_breakpoints(self.breakpoints),
            on_event=on_event,
            exception_filters=self.exception_filters,
        )
        run = _Run(debugger, where, parent)
        self.run = run
        return debugger

    def end_run(self, debugger: RunDebugger | None) -> None:
        """The run of ``debugger`` is over: a front end that saw it stopped is told it
        goes on (JupyterLab clears its call stack and variables only on ``continued``)."""
        run = self.run
        if run is None or debugger is None or run.debugger is not debugger:
            return
        self.run = None
        if run.stopped and run.attached:
            run.stopped = False
            self._publish("continued", {"threadId": 1, "allThreadsContinued": True}, run.parent)

    def _on_run_event(self, run: _Run, event: dict[str, Any]) -> None:
        if self.run is not run:
            return
        if not run.attached:
            # Let go by disconnect, yet stopped by what was on its way (a breakpoint hit or
            # a pause before the clearing arrived): nobody would continue it, and it would
            # hold the kernel's queue until its stop's ceiling.
            if event.get("event") == "stopped":
                _in_background(run.debugger.request("continue", {"threadId": 1}))
            return
        shown = inert_event(event)
        if shown is None:  # terminated: the run's end, which end_run sees to
            if event.get("event") == "terminated":
                self.end_run(run.debugger)
            return
        if shown["event"] == "stopped":
            run.stopped = True
        elif not run.stopped:
            return  # a continued with nothing stopped: nothing to clear
        else:
            run.stopped = False
        self._publish(shown["event"], shown["body"], run.parent)

    def _publish(self, name: str, body: dict[str, Any], parent: dict[str, Any] | None) -> None:
        self._seq += 1
        event = {"type": "event", "seq": self._seq, "event": name, "body": body}
        self.publish_event(event, parent)

    # -- requests ------------------------------------------------------------------------------

    @staticmethod
    def refusal(request: Mapping[str, Any], why: str) -> dict[str, Any]:
        """A failed reply to ``request`` saying ``why``."""
        return _response(request, message=why)

    def answer_now(self, request: Mapping[str, Any]) -> dict[str, Any] | None:
        """The reply to a request the session answers at once (None: it must be forwarded
        to the running cell, :meth:`forward`)."""
        command = request.get("command")
        if not isinstance(command, str):
            return _response(request, message="a debug request needs a 'command' string")
        arguments = request.get("arguments", {})
        if arguments is None:
            arguments = {}
        if not isinstance(arguments, Mapping):
            return _response(request, message=f"{clip(command, 100)}: arguments must be an object")
        if not self.started and command not in _ANY_TIME:
            return _response(
                request,
                message=f"the debugger is not started: send initialize and attach before "
                f"{clip(command, 100)}",
            )
        run = self.run
        if command in RUNTIME_COMMANDS:
            if run is not None and run.attached and (run.stopped or command == "pause"):
                return None
            if command == "inspectVariables":
                return _response(request, {"variables": []})
            if command == "richInspectVariables":
                return _response(
                    request,
                    message="no cell is stopped: a kernelgate cell keeps no variables once it "
                    "has run (each is a fresh program); set a breakpoint and run it",
                )
            if run is None:
                return _response(
                    request, message=f"{command}: no cell is running under the debugger"
                )
            return _response(request, message=f"{command}: the program is running; pause it first")
        handler = self._handlers.get(command)
        if handler is None:
            return _response(
                request, message=f"kernelgate's debugger does not handle {clip(command, 100)}"
            )
        try:
            body = handler(arguments)
        except DebugRequestError as exc:
            return _response(request, message=str(exc))
        return _response(request, body)

    async def forward(self, request: Mapping[str, Any]) -> dict[str, Any]:
        """Forward a runtime request to the running cell; its reply, made inert."""
        command = str(request.get("command"))
        arguments = dict(request.get("arguments") or {})
        run = self.run
        if run is None or not run.attached:
            return _response(request, message=f"{command}: no cell is running under the debugger")
        reply = await run.debugger.request(command, arguments)
        if not isinstance(reply, Mapping) or reply.get("success") is not True:
            why = reply.get("message") if isinstance(reply, Mapping) else None
            return _response(request, message=str(why or f"{command} failed in the program"))
        body = reply.get("body")
        shown = inert_body(command, body if isinstance(body, Mapping) else {}, run.where)
        return _response(request, shown)

    # -- the session's own requests ------------------------------------------------------------

    def _initialize(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        self.initialized = True
        return {
            "supportsConfigurationDoneRequest": True,
            "supportsConditionalBreakpoints": True,
            "supportsEvaluateForHovers": False,
            "supportsSetVariable": False,
            "supportsStepBack": False,
            "supportsDelayedStackTraceLoading": False,
            "supportsExceptionInfoRequest": False,
            "supportsTerminateRequest": False,
            "supportsModulesRequest": True,
            "exceptionBreakpointFilters": [dict(f) for f in EXCEPTION_FILTERS],
        }

    def _attach(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        if not self.initialized:
            raise DebugRequestError("attach: send initialize first")
        self.started = True
        # debugpy says "initialized" once attached; JupyterLab opens its panel on it.
        self._publish("initialized", {}, None)
        return {}

    def _disconnect(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """Stop debugging: breakpoints forgotten; a running cell goes on undebugged (its
        breakpoints cleared, resumed if stopped)."""
        self.initialized = self.started = False
        self.breakpoints.clear()
        self.exception_filters = []
        run = self.run
        if run is not None:
            _in_background(run.debugger.request("setBreakpoints", {"breakpoints": []}))
            _in_background(run.debugger.request("setExceptionBreakpoints", {"filters": []}))
            if run.stopped:
                run.stopped = False
                _in_background(run.debugger.request("continue", {"threadId": 1}))
                # The front end saw it stopped: say it goes on, as end_run does (JupyterLab's
                # "Paused in Debugger" overlay leaves only on continued or terminated).
                self._publish("continued", {"threadId": 1, "allThreadsContinued": True}, run.parent)
            run.attached = False
        return {}

    def _debug_info(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        run = self.run
        return {
            "isStarted": self.started,
            "hashMethod": "Murmur2",
            "hashSeed": HASH_SEED,
            "tmpFilePrefix": self.prefix,
            "tmpFileSuffix": ".py",
            "breakpoints": [
                {"source": path, "breakpoints": [dict(bp) for bp in bps]}
                for path, bps in self.breakpoints.items()
            ],
            "stoppedThreads": [1] if run is not None and run.stopped else [],
            "richRendering": True,
            "exceptionPaths": ["Python Exceptions"],
            "copyToGlobals": False,
        }

    def _dump_cell(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        code = arguments.get("code")
        if not isinstance(code, str):
            raise DebugRequestError("dumpCell: arguments.code must be the cell's source")
        path = cell_path(code, self.prefix)
        self.cells.keep(path, code)
        return {"sourcePath": path}

    def _set_breakpoints(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        source = arguments.get("source")
        path = source.get("path") if isinstance(source, Mapping) else None
        if not isinstance(path, str) or not path:
            raise DebugRequestError("setBreakpoints: arguments.source.path must be a cell path")
        breakpoints = _checked_breakpoints(arguments.get("breakpoints", []))
        others = sum(len(bps) for p, bps in self.breakpoints.items() if p != path)
        if others + len(breakpoints) > MAX_ALL_BREAKPOINTS:
            raise DebugRequestError(
                f"setBreakpoints: {others + len(breakpoints)} breakpoints in all; at most "
                f"{MAX_ALL_BREAKPOINTS} (clear some first)"
            )
        if not breakpoints:
            self.breakpoints.pop(path, None)
        elif path not in self.breakpoints and len(self.breakpoints) >= MAX_BREAKPOINT_PATHS:
            raise DebugRequestError(
                f"setBreakpoints: breakpoints in {MAX_BREAKPOINT_PATHS} cells already; clear "
                "some first"
            )
        else:
            self.breakpoints[path] = breakpoints
        run = self.run
        if run is not None and run.attached:
            # The running cell gets them at once (in order: each request is sent when its
            # task first runs, and tasks start in the order they were made).
            bps = run.where.program_breakpoints(self.breakpoints)
            _in_background(run.debugger.request("setBreakpoints", {"breakpoints": bps}))
        code = self.cells.get(path)
        lines = code.count("\n") + 1 if code is not None else None
        shown = []
        for bp in breakpoints:
            verified = lines is None or bp["line"] <= lines
            # With its source, as debugpy answers: JupyterLab's Breakpoints panel names
            # each breakpoint by its source's path, and fails to draw without one.
            item: dict[str, Any] = {
                "verified": verified,
                "line": bp["line"],
                "source": {"path": path},
            }
            if not verified:
                item["message"] = f"the cell has {lines} lines"
            shown.append(item)
        return {"breakpoints": shown}

    def _set_exception_breakpoints(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        filters = arguments.get("filters", [])
        known = set(RUN_EXCEPTION_FILTERS)  # what a run's debugger takes
        if not isinstance(filters, list) or not all(
            isinstance(f, str) and f in known for f in filters
        ):
            raise DebugRequestError(
                f"setExceptionBreakpoints: filters must be a list of {sorted(known)}"
            )
        self.exception_filters = list(dict.fromkeys(filters))
        run = self.run
        if run is not None and run.attached:
            filters_now = {"filters": list(self.exception_filters)}
            _in_background(run.debugger.request("setExceptionBreakpoints", filters_now))
        return {}

    def _configuration_done(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        return {}

    def _source(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        source = arguments.get("source")
        path = source.get("path") if isinstance(source, Mapping) else None
        code = self.cells.get(path) if isinstance(path, str) else None
        if code is None:
            raise DebugRequestError(
                "source unavailable: the kernel shows only cells it was given (dumped or run)"
            )
        return {"content": code, "mimeType": "text/x-python"}

    def _modules(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        # The program's modules are in the child; the kernel's own are none of its business.
        return {"modules": [], "totalModules": 0}

    def _threads(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        threads = [{"id": 1, "name": "MainThread"}] if self.run is not None else []
        return {"threads": threads}


#: Tasks the session started and no one awaits (kept so they are not collected early).
_background: set[asyncio.Task[Any]] = set()


def _in_background(work: Coroutine[Any, Any, Any]) -> None:
    """Run ``work`` (a run's request whose answer nobody waits for) in a task."""
    task = asyncio.get_running_loop().create_task(work)
    _background.add(task)
    task.add_done_callback(_background.discard)
