"""The debugger's ``sys.monitoring`` (PEP 669) backend, on CPython 3.12 and later: the same
:class:`~.debugger.Debugger` (its stops, requests and state), with events in place of
``sys.settrace``. Imported only in a debugged run; :func:`make_debugger` picks the backend.

How it differs from the settrace backend underneath (what the program sees is the same):

- Events are set per code object, on the program's own code only (``set_local_events``):
  LINE and JUMP while something could stop in it (a breakpoint in its own lines, a step, a
  pause), PY_RETURN while a step waits for one of its frames to end. A line no one wants
  returns ``sys.monitoring.DISABLE`` and costs nothing more until the debugger's state
  changes (``restart_events``): a loop with a breakpoint on a rarely hit line runs at nearly
  full speed.
- Global events (CPython has these only so): PY_START, to find code of ``"<program>"`` made
  at run time (compiled by the program, a function's ``__code__`` replaced: settrace traces
  it) and disabled in any other code at its first call; PY_UNWIND while a step waits for a
  frame to end (it may end by an exception); RAISE while the "raised" filter is on.
- A backward jump to the same line fires no LINE event (settrace calls it a line): the JUMP
  event stands in for it, so a breakpoint on a one-line loop stops at each turn, as there.
- CPython never drops a tool whose callback fails (it drops a trace function): recursion
  to the limit does not end the debugging; settrace's SIGURG nudge and retrace are not needed.
- Events are per interpreter, not per thread: a program function another thread runs calls
  the callbacks too (only the main thread stops, as with settrace; a line no one wants is
  disabled whichever thread reaches it, but one holding a breakpoint costs a callback on
  every thread that runs it).
- 3.12 only: a local of a function frame assigned by ``evaluate`` is written back with
  ``PyFrame_LocalsToFast`` through ctypes (settrace did that after each trace call;
  3.13's ``f_locals`` writes through), ctypes being imported only then.

The debugger's tool id is ``sys.monitoring.DEBUGGER_ID`` (0), or another free one: the
program's ``use_tool_id``, ``free_tool_id``, ``set_events``, ``set_local_events``,
``register_callback`` (``clear_tool_id``) refuse it with a ValueError; its own tools work as
usual. A program that digs the real functions out of this module can switch its own
debugging off (as ``PyEval_SetTrace`` through ctypes can settrace's): it runs on undebugged,
and nothing of it reaches the host but the messages the host checks anyway.

>>> TOOL_NAME
'kernelgate debugger'
"""

from __future__ import annotations

import _thread
import builtins
import opcode
import operator
import sys
import types
from collections.abc import Callable
from typing import Any

from .client import CallClient
from .debugbreaks import exc_text, own_lines
from .debugger import _ANY_LINE, _MECHANICS, _STEP_IN, _STEP_OUT, _STEP_OVER, Debugger
from .debugvalues import ENDS_RUN
from .program import FILENAME

__builtins__ = dict(builtins.__dict__)  # type: ignore[assignment]  # see .debugvalues

__all__ = ["make_debugger", "MonitorDebugger", "TOOL_NAME"]

#: The name the debugger's tool id has (``sys.monitoring.get_tool``).
TOOL_NAME = "kernelgate debugger"

_mon: Any = getattr(sys, "monitoring", None)
_get_ident = _thread.get_ident
_getframe = sys._getframe
_index = operator.index
_OLD_LOCALS = sys.version_info < (3, 13)  # f_locals is a snapshot: see _write_locals
#: 3.13 fires no LINE event for a first line that shares the RESUME's line (the program's
#: first line, a one-line function) unless its PY_START event is on: see _first_on_resume.
_START_FOR_FIRST_LINE = sys.version_info >= (3, 13)
_RESUME = opcode.opmap.get("RESUME", -1)
#: The functions of sys.monitoring that act on a tool id: guarded (see the module's doc).
_GUARDED = ("free_tool_id", "set_events", "set_local_events", "register_callback", "clear_tool_id")
_MISSING = object()
#: The most code objects the debugger takes for the program's (a program compiling code
#: in a loop must not grow its work without end).
_MAX_CODES = 100_000
if _mon is not None:
    _E = _mon.events
    _DISABLE = _mon.DISABLE
    _LINES = _E.LINE | _E.JUMP
    _RETURN, _UNWIND, _RAISE, _START = _E.PY_RETURN, _E.PY_UNWIND, _E.RAISE, _E.PY_START
    _ORIGINAL = {name: getattr(_mon, name) for name in _GUARDED if hasattr(_mon, name)}
    _use_tool_id, _free_tool_id = _mon.use_tool_id, _mon.free_tool_id
    _get_tool, _register = _mon.get_tool, _mon.register_callback
    _set_events, _set_local_events = _mon.set_events, _mon.set_local_events
    _restart_events = _mon.restart_events


def make_debugger(
    client: CallClient,
    main_code: types.CodeType,
    globals_: dict[str, Any],
    injected: dict[str, Any],
    options: Any,
    max_frame_bytes: int,
    original_builtins: dict[str, Any],
) -> Debugger:
    """The debugger of one run (arguments as :class:`~.debugger.Debugger`'s): the
    ``sys.monitoring`` backend where the interpreter has it and a tool id is free, else
    ``sys.settrace``'s. ``options["tracer"] == "settrace"`` asks for settrace's (to compare
    the two: the benchmarks, the tests)."""
    args = (client, main_code, globals_, injected, options, max_frame_bytes, original_builtins)
    tool = _free_tool()
    if tool is None or (type(options) is dict and options.get("tracer") == "settrace"):
        return Debugger(*args)
    return MonitorDebugger(*args, tool=tool)


def _free_tool() -> int | None:
    """The debugger's tool id: DEBUGGER_ID if free, else another free one (None: none)."""
    if _mon is None:
        return None
    for tool in (_mon.DEBUGGER_ID, *range(6)):  # 6 and 7 are sys.settrace's and setprofile's
        if _get_tool(tool) is None:
            return int(tool)
    return None


class MonitorDebugger(Debugger):
    """:class:`~.debugger.Debugger` on ``sys.monitoring`` events (``tool``: its tool id)."""

    def __init__(self, *args: Any, tool: int) -> None:
        super().__init__(*args)
        self.tool = tool
        self.codes: list[types.CodeType] = []
        self._known: set[types.CodeType] = set()
        self._first_on_resume: set[types.CodeType] = set()
        self._adopt(self.main_code)
        self._events: dict[types.CodeType, int] = {}  # the local events set now
        self._global_events = 0
        self._offset_lines: dict[types.CodeType, dict[int, int | None]] = {}
        # Bumped (under _arm_lock) each time the state wants more: a callback returns
        # DISABLE only if it did not change while the callback decided.
        self._gen = 0
        self._arm_lock = _thread.allocate_lock()
        self._quiet = False  # a stop outside a callback: the code it runs stops nothing
        self._armed = False
        self._saved_mon: dict[str, Any] = {}

    # -- the switch (see Debugger._start_tracer) --------------------------------------------

    def _start_tracer(self) -> None:
        self._install_nudge()
        tool = self.tool
        _use_tool_id(tool, TOOL_NAME)
        _register(tool, _E.LINE, self._on_line)
        _register(tool, _E.JUMP, self._on_jump)
        _register(tool, _RETURN, self._on_return)
        _register(tool, _UNWIND, self._on_unwind)
        _register(tool, _RAISE, self._on_raise)
        _register(tool, _START, self._on_start)
        self._armed = True
        for name, fn in _ORIGINAL.items():
            self._saved_mon[name] = getattr(_mon, name)
            setattr(_mon, name, _guard(fn, tool))
        self._arm()

    def _end_tracer(self) -> None:
        self._remove_nudge()
        self._disarm()
        for name, fn in self._saved_mon.items():
            setattr(_mon, name, fn)
        self._saved_mon = {}

    def _tracer_on(self) -> None:
        self._quiet = False

    def _tracer_off(self) -> None:
        self._quiet = True

    def retrace(self) -> None:
        """Nothing to do: CPython never drops a monitoring tool (nor :meth:`nudge`,
        :meth:`retrace_soon`: the settrace backend's machinery for that)."""

    nudge = retrace_soon = retrace

    def _forked(self) -> None:
        """The program forked (in the new process): no events, the tool free and
        sys.monitoring's own functions back, as in a process never debugged."""
        # The reader thread may have held the lock at the fork: it is not in this process.
        self._arm_lock = _thread.allocate_lock()
        super()._forked()
        self._end_tracer()

    def _trace_running_frames(self, with_breaks_only: bool = False) -> None:
        # The state wants more events (breakpoints, a pause, exception filters): a code
        # object's events reach its frames that are running too.
        self._arm()

    def _resume(self) -> None:
        if _OLD_LOCALS and self._locals:
            self._write_locals()
        super()._resume()
        self._arm()

    def _stop(self, frame: types.FrameType, *args: Any, **kwargs: Any) -> None:
        super()._stop(frame, *args, **kwargs)
        if self.pausing:
            self._arm()  # the stop was put off (see Debugger._stop): every line may take it

    # -- which events, where ----------------------------------------------------------------

    def _arm(self, new: list[types.CodeType] | None = None) -> None:
        """Set the events the state needs now (any thread), and let every location a
        callback disabled fire again. ``new``: only these code objects, just adopted (they
        have nothing disabled: a program making code in a loop arms only what it made)."""
        with self._arm_lock:
            if new is None:
                self._gen += 1
            if not self._armed:
                return
            if not self.tracing:
                self._set_all(0, 0)
                return
            mode = self.mode
            step = self.step_frame
            # A step's frame that ends stops in its caller, at the line of the call (stepIn
            # too, as with settrace: stepIn at a ``return`` shows the caller next).
            stepping = mode == _STEP_OVER or mode == _STEP_OUT or mode == _STEP_IN
            step_code = step.f_code if step is not None and stepping else None
            every = self.pausing or self.entry or mode == _STEP_IN or mode == _ANY_LINE
            breaks = self.breaks
            events = {}
            for code in self.codes if new is None else new:
                ev = _LINES if every or (breaks and self._holds_break(code, breaks)) else 0
                if code is step_code:
                    ev |= _RETURN | (_LINES if mode == _STEP_OVER else 0)
                if ev & _LINES and code in self._first_on_resume:
                    ev |= _START
                events[code] = ev
            glob = (
                _START
                | (_RAISE if "raised" in self.exception_filters else 0)
                | (_UNWIND if step_code is not None else 0)
            )
            self._set(events, glob)
            if new is None:
                _restart_events()

    def _holds_break(self, code: types.CodeType, breaks: dict[int, Any]) -> bool:
        own = self._own_lines.get(code)
        if own is None:
            own = self._own_lines[code] = own_lines(code)
        return any(line in own for line in breaks)

    def _set(self, events: dict[types.CodeType, int], glob: int) -> None:
        tool = self.tool
        for code, ev in events.items():
            if self._events.get(code, 0) != ev:
                _set_local_events(tool, code, ev)
                self._events[code] = ev
        if glob != self._global_events:
            _set_events(tool, glob)
            self._global_events = glob

    def _set_all(self, ev: int, glob: int) -> None:
        self._set(dict.fromkeys(self.codes, ev), glob)

    def _disarm(self) -> None:
        """No event, no callback, the tool id free (the end, or a forked process)."""
        with self._arm_lock:
            self._gen += 1
            if not self._armed:
                return
            self._armed = False
            self._set_all(0, 0)
            for event in (_E.LINE, _E.JUMP, _RETURN, _UNWIND, _RAISE, _START):
                _register(self.tool, event, None)
            _free_tool_id(self.tool)

    def _adopt(self, code: types.CodeType) -> list[types.CodeType]:
        """``code`` and the code objects nested in it are the program's (those new)."""
        new = []
        for c in _all_codes(code):
            if c not in self._known and len(self.codes) < _MAX_CODES:
                self._known.add(c)
                self.codes.append(c)
                new.append(c)
                if _START_FOR_FIRST_LINE and _first_on_resume(c):
                    self._first_on_resume.add(c)
        return new

    # -- the callbacks (main thread; any thread runs them, only the main one stops) ---------

    def _on_start(self, code: types.CodeType, _offset: int) -> Any:
        """A call starts: a code object of ``"<program>"`` not seen yet (made at run time:
        compiled by the program, or a function's ``__code__`` replaced) becomes the
        program's, as settrace would trace it; any other code is disabled here."""
        if code.co_filename != FILENAME:
            return _DISABLE
        gen = self._gen
        try:
            if code not in self._known and self.tracing:
                self._arm(self._adopt(code))
                return None
            if code in self._first_on_resume and self._events.get(code, 0) & _E.LINE:
                return None  # 3.13: the first line's LINE event needs this one on
        except RecursionError:
            return None
        if gen == self._gen:
            return _DISABLE
        return None

    def _on_line(self, code: types.CodeType, line: int) -> Any:
        if self._quiet:
            return None
        gen = self._gen
        try:
            main = _get_ident() == self.main_ident
            if self.tracing and self._at_line(_getframe(1), code, line, main):
                return None
        except RecursionError:
            return None  # the program is at the limit: this line is not lost for good
        if gen == self._gen:  # nothing between here and the return lets another thread run
            return _DISABLE
        return None

    def _on_jump(self, code: types.CodeType, src: int, dest: int) -> Any:
        if dest >= src or self._quiet:  # only a backward jump can stand for a line
            return _DISABLE if dest >= src else None
        gen = self._gen
        try:
            lines = self._offset_lines.get(code)
            if lines is None:
                lines = self._offset_lines[code] = _lines_by_offset(code)
            line = lines.get(dest)
            if line is None or line != lines.get(src):
                return _DISABLE  # to another line: its LINE event comes
            main = _get_ident() == self.main_ident
            if self.tracing and self._at_line(_getframe(1), code, line, main):
                return None
        except RecursionError:
            return None
        if gen == self._gen:
            return _DISABLE
        return None

    def _at_line(self, frame: types.FrameType, code: types.CodeType, line: int, main: bool) -> bool:
        """A line starts in ``frame``: stop if something wants to (on the main thread
        only). False: nothing wants this location now, on any thread (it may be disabled:
        a loop in another thread runs at full speed too)."""
        if frame.f_code is not code:
            return True
        if self.pausing:
            if main:
                self._stop(frame, "pause", "Paused")
            return True
        if self.entry:
            if main:
                self.entry = False
                self._stop(frame, "entry", "Paused on entry")
            return True
        bps = self.breaks.get(line)
        if bps:
            if main:
                hit = self._hits(bps, frame)
                if hit:
                    self._stop(frame, "breakpoint", "Paused on breakpoint", hit_ids=hit)
            return True
        mode = self.mode
        if mode == _STEP_IN or mode == _ANY_LINE:
            if main:
                self._stop(frame, "step", "Paused after a step")
            return True
        if mode == _STEP_OVER:
            step = self.step_frame
            if frame is step and main:
                self._stop(frame, "step", "Paused after a step")
                return True
            return step is not None and step.f_code is code
        return False

    def _on_return(self, code: types.CodeType, _offset: int, _value: Any) -> Any:
        if self._quiet:
            return None
        gen = self._gen
        try:
            frame = _getframe(1)
            step = self.step_frame
            if self.tracing and step is not None:
                if frame is step and _get_ident() == self.main_ident:
                    self._stepped_out(frame)
                    return None
                if step.f_code is code:
                    return None
        except RecursionError:
            return None
        if gen == self._gen:
            return _DISABLE
        return None

    def _on_unwind(self, code: types.CodeType, _offset: int, _exc: BaseException) -> Any:
        # A global event: never DISABLE (CPython would drop the callback).
        if self._quiet or not self.tracing or _get_ident() != self.main_ident:
            return None
        try:
            frame = _getframe(1)
            if frame is self.step_frame and code.co_filename == FILENAME:
                self._stepped_out(frame)
        except RecursionError:
            pass
        return None

    def _stepped_out(self, frame: types.FrameType) -> None:
        """The step's frame ended: stop in its program caller, at the line of the call;
        with none (a task's coroutine, the program's end), at the next program line."""
        self.step_frame = None
        caller = self._program_caller(frame)
        if caller is not None:
            self._stop(caller, "step", "Paused after a step")
        else:
            self.mode = _ANY_LINE
            self._arm()

    def _on_raise(self, code: types.CodeType, _offset: int, exc: BaseException) -> Any:
        # A global event: never DISABLE (CPython would drop the callback).
        if self._quiet or not self.tracing or _get_ident() != self.main_ident:
            return None
        try:
            if code.co_filename != FILENAME or "raised" not in self.exception_filters:
                return None
            if isinstance(exc, _MECHANICS):
                return None
            tb = exc.__traceback__
            if tb is None or tb.tb_next is None:  # raised here, not passing through
                self._stop(_getframe(1), "exception", "Paused on exception", text=exc_text(exc))
        except RecursionError:
            pass
        return None

    # -- 3.12: evaluate's assignments to a function's locals ---------------------------------

    def _write_locals(self) -> None:
        """Write back what ``evaluate`` assigned in the locals dict of a function frame: on
        3.12 ``f_locals`` is a snapshot that only a trace call (settrace's) writes back."""
        changed = []
        for fid, loc in self._locals.items():
            got = self._frame_ids.get(fid)
            if got is None or type(loc) is not dict:
                continue
            frame = got[0]
            mine = dict(loc)
            fresh = frame.f_locals  # the same dict, refreshed from the frame's variables
            if any(fresh.get(k, _MISSING) is not v for k, v in mine.items()):
                fresh.update(mine)
                changed.append(frame)
        if changed:
            _locals_to_fast(changed, self._stderr)


def _locals_to_fast(frames: list[types.FrameType], stderr: Any) -> None:
    try:
        # Here, not at the top: only a 3.12 run whose evaluate assigned a local needs it.
        import ctypes

        to_fast = ctypes.pythonapi.PyFrame_LocalsToFast
        to_fast.argtypes = (ctypes.py_object, ctypes.c_int)
        to_fast.restype = None
        for frame in frames:
            to_fast(frame, 0)
    except ENDS_RUN:
        raise  # an interrupt, or the program's own exit: never swallowed
    except BaseException as exc:
        try:
            if stderr is not None:
                stderr.write(
                    f"kernelgate: the debugger could not write back a local that evaluate "
                    f"assigned ({exc_text(exc)})\n"
                )
        except ENDS_RUN:
            raise
        except BaseException:
            pass


def _first_on_resume(code: types.CodeType) -> bool:
    """The code's first instruction after its RESUME is on the RESUME's line."""
    ops = code.co_code
    lines = _lines_by_offset(code)
    for at in range(0, len(ops) - 2, 2):
        if ops[at] == _RESUME:
            return lines.get(at) is not None and lines.get(at) == lines.get(at + 2)
    return False


def _guard(fn: Callable[..., Any], tool: int) -> Callable[..., Any]:
    """``fn`` (a function of sys.monitoring taking a tool id first), refusing ``tool``."""

    def guarded(tool_id: Any, *args: Any) -> Any:
        tool_id = _index(tool_id)  # what CPython would take: an int subclass cannot slip by
        if tool_id == tool:
            raise ValueError(
                f"sys.monitoring tool {tool} is kernelgate's debugger's in a debugged run; "
                "use another tool id (any free one of 0-5)"
            )
        return fn(tool_id, *args)

    guarded.__name__ = guarded.__qualname__ = fn.__name__
    guarded.__doc__ = fn.__doc__
    return guarded


def _all_codes(main: types.CodeType) -> list[types.CodeType]:
    """The program's code objects: ``main`` and those nested in it (functions, classes,
    lambdas, generator expressions)."""
    found = [main]
    todo = [main]
    while todo:
        for k in todo.pop().co_consts:
            if type(k) is types.CodeType:
                found.append(k)
                todo.append(k)
    return found


def _lines_by_offset(code: types.CodeType) -> dict[int, int | None]:
    return {offset: line for start, end, line in code.co_lines() for offset in range(start, end, 2)}
