"""The debugger inside a debugged run's child: a tracer speaking a subset of the Debug Adapter
Protocol in PROGRAM coordinates (source path ``"<program>"``, the program's own lines).

Imported only when the run's ``execute_request`` has ``options["debug"]``: an undebugged run
neither imports nor runs any of it. Stdlib only; no file, no socket, no syscall the sandbox
denies (one thread, :mod:`.debugchannel`, and SIGALRM timers while a stopped request runs
the program's reprs; a SIGURG handler the reader "raises" on the main thread with
``_thread.interrupt_main``, no real signal, to trace it again once CPython dropped the
trace function at the recursion limit).

How it runs:

- ``sys.settrace`` on the program's main thread before 3.12 (other threads run untraced;
  threadId is always 1). From 3.12 :mod:`.debugmonitor` runs this same debugger on
  ``sys.monitoring`` events instead (the ``_start_tracer`` ... ``_tracer_off`` switch), with
  no SIGURG nudge: what follows of tracing and retracing is the settrace backend's. Only
  frames whose code comes from ``"<program>"`` are traced, shown or stepped into:
  kernelgate's, asyncio's and the standard library's never are. A program frame is
  traced only while something could stop in it (breakpoints, a step, a pause), so a run with
  no breakpoint costs one check per function call.
- When the main thread stops (breakpoint, step, pause, exception, entry) it sends a
  ``stopped`` event and serves the requests the reader thread queues for it, until a resume
  (``continue``, ``next``, ``stepIn``, ``stepOut``). While the program runs, the reader
  thread answers ``pause``, ``setBreakpoints``, ``setExceptionBreakpoints`` and ``threads``
  itself, and refuses the rest ("the program is running; pause it first").
- Stepping over ``await tools.x(...)`` stops at the next line of the same coroutine frame: a
  coroutine that suspends has not returned (its frame is the same when it resumes), and the
  event loop runs the real call meanwhile.

The program may call ``sys.settrace`` itself: in a debugged run that call is ignored, with
one line on stderr saying so (the debugger needs the trace). It may rebind builtins: this
module uses its own snapshot of them, and while the program is stopped the builtins it
started with are in force (its own come back when it resumes, and for ``evaluate``).

>>> RUNNING
'the program is running; pause it first'
"""

# long: the tracer's events, its stops and the requests that move it (resume, pause,
# breakpoints) share one state machine, read by the reader thread and the main thread under
# one lock: kept in one class. What a stop shows is in .debugstop, values in .debugvalues,
# breakpoints in .debugbreaks.

from __future__ import annotations

import _thread
import asyncio
import builtins
import opcode
import os
import queue
import signal
import sys
import types
from collections.abc import Callable
from typing import Any

from kernelgate.model.constants import FRAME_OVERHEAD
from kernelgate.model.text import cap_text
from kernelgate.wire.events import DebugEvent, DebugReply, DebugRequest
from kernelgate.wire.values import dumps

from .client import CallClient
from .debugbreaks import Breakpoint, code_lines, exc_text, own_lines, parse_breakpoints
from .debugstop import STOPPED_ONLY, StopView
from .debugstuck import StuckWatch
from .debugvalues import (
    ENDS_RUN,
    Deadline,
    DeadlineExpired,
    References,
    bounded_repr,
    program_exc_text,
)
from .program import FILENAME
from .report import restore_builtins

__builtins__ = dict(builtins.__dict__)  # type: ignore[assignment]  # see .debugvalues

__all__ = ["Debugger", "RUNNING", "REQUEST_SECONDS", "EVALUATE_SECONDS"]

#: The reply to a request that needs a stopped program, while it runs.
RUNNING = "the program is running; pause it first"
#: Time for one request served while stopped (the program's reprs run in it).
REQUEST_SECONDS = 5.0
#: Time for one ``evaluate`` (the expression is the program's code too).
EVALUATE_SECONDS = 10.0

#: How often a stopped main thread wakes to run the handlers of signals it was sent.
_WAKE_SECONDS = 0.5
_CONTINUE, _STEP_IN, _STEP_OVER, _STEP_OUT, _ANY_LINE = range(5)
_CO_COROUTINE, _CO_ITERABLE_COROUTINE, _CO_ASYNC_GENERATOR = 0x80, 0x100, 0x200
_SUSPENDS = _CO_COROUTINE | _CO_ITERABLE_COROUTINE | _CO_ASYNC_GENERATOR
#: Where a coroutine's frame is when its ``return`` event is a suspension (an ``await`` or
#: a ``yield``): 3.10 LOAD_CONST (before YIELD_FROM), 3.11/3.12 YIELD_VALUE, 3.13 RESUME. A
#: real return is at a RETURN_* instruction (or unwinds an exception, tracked apart).
_SUSPEND_OPS = frozenset({"YIELD_VALUE", "YIELD_FROM", "LOAD_CONST", "RESUME"})
#: Exceptions that are the machinery of generators and awaits, not the program's errors.
_MECHANICS = (StopIteration, StopAsyncIteration, GeneratorExit)
_RESUMES = {"continue": _CONTINUE, "next": _STEP_OVER, "stepIn": _STEP_IN, "stepOut": _STEP_OUT}
_EXCEPTION_FILTERS = frozenset({"raised", "uncaught"})

_settrace = sys.settrace
_all_tasks = asyncio.all_tasks
_gettrace = sys.gettrace
_getpid = os.getpid
_register_at_fork = os.register_at_fork
_BUILTINS = builtins.__dict__
_current_frames = sys._current_frames
_get_ident = _thread.get_ident
_interrupt_main = _thread.interrupt_main
_signal = signal.signal
# signal.getsignal converts with isinstance, which the program may rebind: the C function
# (only ever compared with a handler of ours), also safe on the reader thread.
_getsignal = sys.modules["_signal"].getsignal
#: The signal the reader thread "raises" on the main thread (``_thread.interrupt_main``: no
#: real signal is sent) to trace it again there: CPython drops the trace function when a
#: call into it fails at the recursion limit, and a busy program never returns to its loop.
_NUDGE = signal.SIGURG
_Empty = queue.Empty
_SimpleQueue = queue.SimpleQueue
_OPNAME = list(opcode.opname)


class Debugger(StopView, StuckWatch):
    """The debugger of one run (the main thread is the program's).

    ``client``: fd 3; ``main_code``: the program's code (its frame is ``<module>``);
    ``globals_``: the program's globals; ``injected``: the names kernelgate put in them;
    ``options``: ``options["debug"]`` of the request; ``max_frame_bytes``: the run's.
    """

    def __init__(
        self,
        client: CallClient,
        main_code: types.CodeType,
        globals_: dict[str, Any],
        injected: dict[str, Any],
        options: Any,
        max_frame_bytes: int,
        original_builtins: dict[str, Any],
    ) -> None:
        self.client = client
        # The builtins before the program ran: in force while the program is stopped (the
        # wire's encoder uses isinstance; the program may have rebound it), the program's
        # own only for what runs as the program (evaluate).
        self.original_builtins = original_builtins
        self._program_builtins: dict[str, Any] = original_builtins
        self.main_code = main_code
        self.globals = globals_
        self.injected = injected
        self.budget = max(max_frame_bytes - FRAME_OVERHEAD, 1024)
        self.main_ident = _get_ident()
        self.lines = code_lines(main_code)
        # The breakpoints (line -> those at it) and, for each code object seen, whether its
        # own lines hold one: replaced together, in one assignment the tracer reads once.
        self._breaks_and_wants: tuple[dict[int, list[Breakpoint]], dict[Any, bool]] = ({}, {})
        self._own_lines: dict[types.CodeType, frozenset[int]] = {}
        self.exception_filters: frozenset[str] = frozenset()
        self.mode = _CONTINUE
        self.step_frame: types.FrameType | None = None
        self.pausing = False
        self.entry = False
        self.unwinding: types.FrameType | None = None  # the last frame a real exception hit
        self.finished = False
        self.tracing = False
        self.pid = _getpid()
        self._next_bp = 1
        self._ops: dict[types.CodeType, bytes] = {}
        # The stop: set by the main thread, read by the reader thread under ``lock``.
        self.lock = _thread.allocate_lock()
        self.stopped = False
        self.requests: queue.SimpleQueue[DebugRequest] = _SimpleQueue()
        self.frames: list[tuple[int, types.FrameType, int]] = []  # (id, frame, line)
        self._frame_ids: dict[int, tuple[types.FrameType, int]] = {}
        self._next_frame = 1
        self._locals: dict[int, Any] = {}
        self.refs = References()
        self.deadline = Deadline()
        self._warned_settrace = False
        self._stderr = client.streams[1] if len(client.streams) > 1 else None
        self._saved_hooks: tuple[Any, Any] = (sys.settrace, sys.breakpointhook)
        self._nudge = self._on_nudge  # one bound method: compared with the handler in force
        self._init_stuck(((_NUDGE, self._nudge),))
        self._old_nudge: Any = None
        opts = options if type(options) is dict else {}
        self.breaks = self._parse(opts.get("breakpoints"))[0]
        self.entry = opts.get("stopOnEntry") is True
        filters = opts.get("exceptionFilters")
        if type(filters) is list:  # "raised", "uncaught": as setExceptionBreakpoints takes
            self.exception_filters = frozenset(f for f in filters if f in _EXCEPTION_FILTERS)

    @property
    def breaks(self) -> dict[int, list[Breakpoint]]:
        """The breakpoints: program line -> those at it."""
        return self._breaks_and_wants[0]

    @breaks.setter
    def breaks(self, breaks: dict[int, list[Breakpoint]]) -> None:
        self._breaks_and_wants = (breaks, {})

    # -- installing ------------------------------------------------------------------------

    def trace(self) -> None:
        """Trace the main thread from now on (call just before the program starts)."""
        self.tracing = True
        self.pid = _getpid()
        _register_at_fork(after_in_child=self._forked)
        self._saved_hooks = sys.settrace, sys.breakpointhook
        sys.settrace = self._refuse_settrace
        sys.breakpointhook = self._breakpointhook
        self._start_tracer()

    # -- the tracer's switch: sys.settrace here; .debugmonitor's backend overrides these ------

    def _start_tracer(self) -> None:
        """Install the tracer (once, from :meth:`trace`)."""
        self._install_nudge()
        _settrace(self._on_call)

    def _end_tracer(self) -> None:
        """Remove what :meth:`_start_tracer` installed (once, from :meth:`untrace`)."""
        self._remove_nudge()

    def _install_nudge(self) -> None:
        """Take the nudge's signal (every backend: the reader wakes late program code
        with it, see :mod:`.debugstuck`)."""
        try:
            self._old_nudge = _signal(_NUDGE, self._nudge)
        except (ValueError, OSError):
            self._old_nudge = None

    def _remove_nudge(self) -> None:
        try:
            if _getsignal(_NUDGE) is self._nudge:
                _signal(_NUDGE, self._old_nudge if self._old_nudge is not None else signal.SIG_DFL)
        except (ValueError, OSError):
            pass

    def _tracer_on(self) -> None:
        """Trace the main thread again after :meth:`_tracer_off`."""
        _settrace(self._on_call)

    def _tracer_off(self) -> None:
        """Trace nothing on the main thread (a stop outside a trace call, the end)."""
        _settrace(None)

    def _on_nudge(self, signum: int, frame: Any) -> None:
        """On the main thread, between two of the program's bytecodes (see _NUDGE)."""
        try:
            self.deadline.interrupt(signum, frame)  # the program's code a request runs is late
            self.retrace()
            if self.pausing:
                self._trace_running_frames()
        except RecursionError:
            pass  # at the limit still: the loop's retrace, or the next nudge, will do

    def retrace(self) -> None:
        """On the main thread (a loop callback): trace again if CPython dropped the trace
        function (it does when one raises, e.g. a program recursing to the limit makes the
        call into it fail)."""
        if self.tracing and _gettrace() is None:
            _settrace(self._on_call)

    def nudge(self) -> None:
        """From the reader thread, now and then: have the main thread trace again if
        CPython dropped its trace function while something could stop it (a RecursionError
        the program caught would otherwise end its debugging for good)."""
        if self.breaks or self.pausing or self.exception_filters or self.mode:
            self._interrupt_main()

    def _interrupt_main(self) -> None:
        try:
            if self.tracing and not self.stopped and _getsignal(_NUDGE) is self._nudge:
                _interrupt_main(_NUDGE)
        except (ValueError, OSError, RuntimeError):
            pass

    def retrace_soon(self) -> None:
        """From the reader thread: :meth:`retrace` when the program's loop next runs, and
        at once on the main thread if the program has not taken the nudge's signal."""
        self._soon(self.retrace)
        self._interrupt_main()

    def _soon(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` on the main thread when the program's loop next runs."""
        loop = self.client.loop
        if loop is not None and self.tracing:
            try:
                loop.call_soon_threadsafe(callback)
            except RuntimeError:
                pass  # the loop is closed: the program is over

    def _pause_waiting(self) -> None:
        """A pause the program's lines have not taken: the loop runs, so no program code
        does (it waits, e.g. for a binding call's answer). Stop where it waits: at the
        ``await`` of its suspended coroutines."""
        if not self.pausing or not self.tracing:
            return
        stack = self._waiting_stack()
        if not stack:
            return  # nothing of the program waits here (e.g. it blocks in another thread)
        self._tracer_off()  # this stop is not inside a trace call: what it runs is not traced
        try:
            self._stop(stack[0][0], "pause", "Paused while waiting", stack=stack)
        finally:
            if self.tracing:
                self._tracer_on()

    def _waiting_stack(self) -> list[tuple[types.FrameType, int]]:
        """The program frames of the suspended coroutine chains of the loop's tasks,
        innermost first: the chain that holds the program's ``<module>`` if one does."""
        loop = self.client.loop
        found: list[tuple[types.FrameType, int]] = []
        for task in _all_tasks(loop):
            chain = []
            coro: Any = task.get_coro()
            for _depth in range(1000):
                if coro is None:
                    break
                frame = _suspended_frame(coro)
                if frame is not None and frame.f_code.co_filename == FILENAME:
                    chain.append((frame, _line_of(frame)))
                coro = _awaited(coro)
            if chain:
                chain.reverse()
                if chain[-1][0].f_code is self.main_code:
                    return chain
                found = found or chain
        return found

    def _forked(self) -> None:
        """The program forked: the new process has no reader thread and must never stop
        (nobody could resume it) nor speak for the program on the fd 3 it shares."""
        self.tracing = False
        self.breaks = {}
        self.mode = _CONTINUE
        self.pausing = self.entry = False
        self.exception_filters = frozenset()
        self._tracer_off()

    def untrace(self) -> None:
        """The program is over: no more tracing, and requests say so."""
        self._tracer_off()
        self.tracing = False
        with self.lock:
            self.finished = True
        sys.settrace, sys.breakpointhook = self._saved_hooks
        self._end_tracer()

    def _refuse_settrace(self, function: Any) -> None:
        if self._warned_settrace:
            return
        self._warned_settrace = True
        try:
            if self._stderr is not None:
                self._stderr.write(
                    "kernelgate: sys.settrace() is ignored in a debugged run (the debugger "
                    "traces this program)\n"
                )
        except ENDS_RUN:
            raise  # an interrupt, or the program's own exit: never swallowed
        except BaseException:
            pass

    def _breakpointhook(self, *_args: Any, **_kwargs: Any) -> None:
        """``breakpoint()`` in the program: stop at its next line."""
        self.pausing = True
        self._trace_running_frames()

    # -- the tracer (main thread) ----------------------------------------------------------

    def _on_call(self, frame: types.FrameType, event: str, arg: Any) -> Any:
        try:
            code = frame.f_code
            if code.co_filename != FILENAME:
                return None
            if self.mode or self.pausing or self.entry or self.exception_filters:
                return self._on_event
            breaks, wants = self._breaks_and_wants
            if breaks:
                # Only a frame whose own lines hold a breakpoint is traced: the others
                # run at full speed (a loop elsewhere costs no trace call per line).
                want = wants.get(code)
                if want is None:
                    own = self._own_lines.get(code)
                    if own is None:
                        own = self._own_lines[code] = own_lines(code)
                    want = wants[code] = any(line in own for line in breaks)
                if want:
                    return self._on_event
        except RecursionError:
            pass
        return None

    def _on_event(self, frame: types.FrameType, event: str, arg: Any) -> Any:
        # A program that recurses to the limit may hit it in here: this trace call must
        # not end the tracing (CPython drops a trace function that raises).
        try:
            if not self.tracing:
                return None
            if event == "line":
                if frame is self.unwinding:
                    self.unwinding = None
                if self.pausing:
                    self._stop(frame, "pause", "Paused")
                elif self.entry:
                    self.entry = False
                    self._stop(frame, "entry", "Paused on entry")
                else:
                    bps = self.breaks.get(frame.f_lineno)
                    hit = self._hits(bps, frame) if bps else None
                    if hit:
                        self._stop(frame, "breakpoint", "Paused on breakpoint", hit_ids=hit)
                    else:
                        mode = self.mode
                        if (
                            mode == _STEP_IN
                            or mode == _ANY_LINE
                            or (mode == _STEP_OVER and frame is self.step_frame)
                        ):
                            self._stop(frame, "step", "Paused after a step")
                return self._on_event
            if event == "return":
                if frame is self.step_frame and self._returns(frame):
                    # Stepped out of this frame: stop in its caller, at the line of the call
                    # (as the caller is, mid-line); with no program caller (a task's coroutine,
                    # the program's end), at the next program line anywhere.
                    self.step_frame = None
                    caller = self._program_caller(frame)
                    if caller is not None:
                        self._stop(caller, "step", "Paused after a step")
                    else:
                        self.mode = _ANY_LINE
                return self._on_event
            if event == "exception":
                exc = arg[1]
                if not isinstance(exc, _MECHANICS):
                    self.unwinding = frame
                    tb = arg[2]
                    if "raised" in self.exception_filters and (tb is None or tb.tb_next is None):
                        self._stop(frame, "exception", "Paused on exception", text=exc_text(exc))
                return self._on_event
            return self._on_event
        except RecursionError:
            return self._on_event

    def _returns(self, frame: types.FrameType) -> bool:
        """The frame is done (not merely suspended at an ``await``/``yield``)."""
        code = frame.f_code
        if not code.co_flags & _SUSPENDS or frame is self.unwinding:
            return True
        ops = self._ops.get(code)
        if ops is None:
            ops = self._ops[code] = code.co_code
        at = frame.f_lasti
        return not (0 <= at < len(ops) and _OPNAME[ops[at]] in _SUSPEND_OPS)

    def _hits(self, bps: list[Breakpoint], frame: types.FrameType) -> list[int]:
        hit = []
        for bp in bps:
            if bp.code is not None:
                try:
                    if not eval(bp.code, frame.f_globals, frame.f_locals):
                        continue
                except ENDS_RUN:
                    raise  # an interrupt, or the program's own exit: never swallowed
                except BaseException:
                    pass  # a condition that fails stops, as in pdb: the user sees why
            hit.append(bp.id)
        return hit

    def _program_caller(self, frame: types.FrameType) -> types.FrameType | None:
        caller = frame.f_back
        while caller is not None:
            if caller.f_code.co_filename == FILENAME:
                return caller
            caller = caller.f_back
        return None

    def _trace_running_frames(self, with_breaks_only: bool = False) -> None:
        """Trace the main thread's program frames now running (from any thread): frames
        entered while nothing could stop in them are not traced yet. ``with_breaks_only``:
        only those whose own lines hold a breakpoint."""
        breaks = self.breaks
        frame = _current_frames().get(self.main_ident)
        while frame is not None:
            code = frame.f_code
            if code.co_filename == FILENAME and (
                not with_breaks_only or any(line in own_lines(code) for line in breaks)
            ):
                frame.f_trace_lines = True
                frame.f_trace = self._on_event
            frame = frame.f_back

    # -- stopping --------------------------------------------------------------------------

    def _stop(
        self,
        frame: types.FrameType,
        reason: str,
        description: str,
        text: str | None = None,
        hit_ids: list[int] | None = None,
        stack: list[tuple[types.FrameType, int]] | None = None,
    ) -> None:
        """Stop the main thread here: say so, serve requests until one resumes."""
        if _get_ident() != self.main_ident or _getpid() != self.pid:
            # A program frame resumed in another thread (which the program traces), or in
            # a forked process (subprocess forks run no at-fork hook).
            return
        client = self.client
        if client._writing and client._wlock._is_owned():  # type: ignore[attr-defined]
            # A signal handler of the program's runs in the middle of a frame this thread
            # is writing: the event could not leave until it is done. Stop later.
            self.pausing = True
            return
        self.pausing = False
        self.entry = False
        self.mode = _CONTINUE
        self.step_frame = None
        if stack is None:
            stack = []
            f: types.FrameType | None = frame
            while f is not None:
                if f.f_code.co_filename == FILENAME:
                    stack.append((f, _line_of(f)))
                    f.f_trace = self._on_event  # stepping may return into it
                f = f.f_back
        for f, line in stack:
            fid = self._next_frame
            self._next_frame += 1
            self.frames.append((fid, f, line))
            self._frame_ids[fid] = (f, line)
        body: dict[str, Any] = {
            "reason": reason,
            "threadId": 1,
            "allThreadsStopped": True,
            "description": description,
        }
        if text is not None:
            body["text"] = text
        if hit_ids:
            body["hitBreakpointIds"] = hit_ids
        self._program_builtins = dict(_BUILTINS)
        restore_builtins(self.original_builtins)
        try:
            with self.lock:
                self.stopped = True
            self._send(DebugEvent("stopped", body))
            try:
                self._serve()
            finally:
                self._resume()
        finally:
            restore_builtins(self._program_builtins)

    def _as_program(self, fn: Callable[..., Any], *args: Any, what: str | None = None) -> Any:
        """``fn(*args)`` with the program's builtins (and the rest of the request's time)."""
        restore_builtins(self._program_builtins)
        try:
            return self.deadline.run(fn, *args, per_call=EVALUATE_SECONDS, what=what)
        finally:
            self._program_builtins = dict(_BUILTINS)
            restore_builtins(self.original_builtins)

    def _serve(self) -> None:
        get = self.requests.get
        self._back()
        while True:
            try:
                # With a timeout: a signal handled just before a blocking wait (the C
                # handler only flags it) would wake nobody; back in Python, its handler
                # runs (an interrupt ends the stopped program).
                request = get(True, _WAKE_SECONDS)
            except _Empty:
                self._back()  # here, not stuck in a handler of the program's (.debugstuck)
                continue
            self._taking(request, _seconds(request.command))
            if self._answer_stopped(request):
                return
            self._back()

    def _resume(self) -> None:
        """Drop the stop's state; answer what was queued as the running program would."""
        with self.lock:
            self.stopped = False
            self.frames = []
            self._frame_ids.clear()
            self._locals.clear()
            self.refs.clear()
            while True:
                try:
                    request = self.requests.get_nowait()
                except _Empty:
                    break
                self._answer_running(request)

    def uncaught(self, exc: BaseException) -> None:
        """The program ends with ``exc``: with the "uncaught" filter, stop where it was
        raised (the frames are those of its traceback) before it is reported."""
        if "uncaught" not in self.exception_filters or isinstance(exc, (SystemExit, GeneratorExit)):
            return
        self._tracer_off()  # the program is over: what runs while stopped must not trace
        self.tracing = False
        stack = []
        tb = exc.__traceback__
        while tb is not None:
            if tb.tb_frame.f_code.co_filename == FILENAME:
                stack.append((tb.tb_frame, tb.tb_lineno))
            tb = tb.tb_next
        if not stack:
            return
        stack.reverse()
        self._stop(
            stack[0][0],
            "exception",
            "Paused on an uncaught exception",
            text=exc_text(exc),
            stack=stack,
        )

    # -- requests --------------------------------------------------------------------------

    def on_request(self, request: DebugRequest) -> None:
        """A request from the host (the reader thread): queued for the stopped main thread,
        or answered here while the program runs."""
        with self.lock:
            if self.stuck is not None:  # the stopped main thread is stuck: see .debugstuck
                self._answer_stuck(request)
            elif self.stopped:
                self._queue(request)
            else:
                self._answer_running(request)

    def _answer_running(self, request: DebugRequest) -> None:
        """Answer while the program runs (the caller holds ``lock``)."""
        command = request.command
        if command == "threads":
            self._reply(request, True, {"threads": [{"id": 1, "name": "MainThread"}]})
        elif command == "setBreakpoints":
            self._set_breakpoints(request)
            if not self.finished:
                self._trace_running_frames(with_breaks_only=True)
                self.retrace_soon()
        elif command == "setExceptionBreakpoints":
            self._set_exception_filters(request)
        elif command == "pause":
            if self.finished:
                self._reply(request, False, message="the program has finished")
                return
            self._reply(request, True)
            # After the reply: the stopped event cannot overtake it (it waits for lock).
            self.pausing = True
            self._trace_running_frames()
            self.retrace_soon()
            self._soon(self._pause_waiting)
        elif command in _NEEDS_STOP:
            message = "the program has finished" if self.finished else RUNNING
            self._reply(request, False, message=message)
        else:
            self._reply(request, False, message=_unhandled(command))

    def _answer_stopped(self, request: DebugRequest) -> bool:
        """Answer on the stopped main thread; True when the request resumes the program."""
        command = request.command
        args = request.arguments
        mode = _RESUMES.get(command)
        if mode is not None:
            self._resume_with(request, mode)
            return True
        if command == "threads":
            self._reply(request, True, {"threads": [{"id": 1, "name": "MainThread"}]})
        elif command == "setBreakpoints":
            self._set_breakpoints(request)
        elif command == "setExceptionBreakpoints":
            self._set_exception_filters(request)
        elif command == "pause":
            self._reply(request, True)  # already stopped
        elif command in STOPPED_ONLY:
            handler = STOPPED_ONLY[command]
            seconds = _seconds(command)
            self.deadline.start(seconds)
            try:
                ok, body, message = handler(self, args)
            except DeadlineExpired:
                ok, body, message = False, {}, f"{command} ran out of time ({seconds:g} s)"
            except ENDS_RUN:
                raise  # an interrupt, or the program's own exit: never swallowed
            except BaseException as exc:
                why = program_exc_text(exc, 1000, self.deadline)
                ok, body, message = False, {}, f"{command} failed: {why}"
            finally:
                self.deadline.stop()
            self._reply(request, ok, body, message)
        else:
            self._reply(request, False, message=_unhandled(command))
        return False

    def _resume_with(self, request: DebugRequest, mode: int) -> None:
        top = self.frames[0][1] if self.frames else None
        if not self.tracing:  # after the program (an uncaught exception): it just ends
            mode = _CONTINUE
        if mode == _CONTINUE:
            self._reply(request, True, {"allThreadsContinued": True})
            return
        self.mode = mode
        self.step_frame = top
        self._reply(request, True)

    def _reply(
        self,
        request: DebugRequest,
        success: bool,
        body: dict[str, Any] | None = None,
        message: str = "",
    ) -> None:
        """Answer ``request`` once, always within max_frame_bytes."""
        if _get_ident() == self.main_ident and not self._claim(request):
            return  # the reader answered it while this thread was stuck (.debugstuck)
        body = body if body is not None else {}
        try:
            size = len(dumps(body).encode("utf-8"))
        except ENDS_RUN:
            raise  # an interrupt, or the program's own exit: never swallowed
        except BaseException as exc:
            success, body, size = False, {}, 2
            message = f"the reply could not be encoded: {exc_text(exc)}"
        if size > self.budget:
            success, body = False, {}
            message = (
                f"the {request.command} reply would be {size} bytes, over the run's "
                f"max_frame_bytes; ask for less (variables: a smaller count)"
            )
        self._send(DebugReply(request.seq, request.command, success, body, cap_text(message, 4000)))

    def _send(self, event: Any) -> None:
        try:
            self.client.send(event)
        except ENDS_RUN:
            raise  # an interrupt, or the program's own exit: never swallowed
        except BaseException:
            pass  # the run is over (its reply went out): nobody waits for this

    # -- breakpoints -----------------------------------------------------------------------

    def _parse(self, given: Any) -> tuple[dict[int, list[Breakpoint]], list[dict[str, Any]]]:
        breaks, out, self._next_bp = parse_breakpoints(given, self.lines, self._next_bp)
        return breaks, out

    def _set_breakpoints(self, request: DebugRequest) -> None:
        args = request.arguments
        source = args.get("source")
        path = source.get("path") if type(source) is dict else None
        given = args.get("breakpoints")
        if given is None and type(args.get("lines")) is list:
            given = [{"line": line} for line in args["lines"]]
        if path != FILENAME:
            n = len(given) if type(given) is list else 0
            message = f"kernelgate's child knows only {FILENAME!r}, not {bounded_repr(path, 200)}"
            self._reply(
                request, True, {"breakpoints": [{"verified": False, "message": message}] * n}
            )
            return
        breaks, out = self._parse(given)
        self.breaks = breaks  # one assignment: the tracer sees the old set or the new
        self._reply(request, True, {"breakpoints": out})

    def _set_exception_filters(self, request: DebugRequest) -> None:
        filters = request.arguments.get("filters")
        if type(filters) is not list:
            filters = []
        self.exception_filters = frozenset(f for f in filters if f in _EXCEPTION_FILTERS)
        if self.exception_filters and not self.finished:
            self._trace_running_frames()
        self._reply(request, True, {})


#: What a running program refuses: the requests a stop answers, and the resumes.
_NEEDS_STOP = frozenset(STOPPED_ONLY) | frozenset(_RESUMES)


def _seconds(command: str) -> float:
    """The time of the program's code a request served while stopped runs."""
    if command == "evaluate":
        return EVALUATE_SECONDS
    return REQUEST_SECONDS if command in STOPPED_ONLY else 0.0


def _unhandled(command: str) -> str:
    return f"kernelgate's debugger does not handle {command}"


def _line_of(frame: types.FrameType) -> int:
    """The frame's line (its first line when CPython has none for where it is)."""
    return frame.f_lineno or frame.f_code.co_firstlineno


def _suspended_frame(coro: Any) -> types.FrameType | None:
    """The frame of a suspended coroutine or generator (None for other awaitables: a
    binding call, a future). Only the native types are asked: a program's own awaitable
    never runs code here."""
    if type(coro) is types.CoroutineType:
        return coro.cr_frame
    if type(coro) is types.GeneratorType:
        return coro.gi_frame
    return None


def _awaited(coro: Any) -> Any:
    """What a suspended native coroutine or generator waits on (None: nothing, or not
    native)."""
    if type(coro) is types.CoroutineType:
        return coro.cr_await
    if type(coro) is types.GeneratorType:
        return coro.gi_yieldfrom
    return None
