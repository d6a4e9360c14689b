"""What a stopped program shows: its stack, scopes, variables, and expressions evaluated in
its frames (DAP's stackTrace, scopes, variables, evaluate, richInspectVariables,
inspectVariables). Served on the stopped main thread only; imported only in a debugged run.

Frame ids and variable references are those of one stop: valid until the program resumes.

>>> sorted(STOPPED_ONLY)[:3]
['evaluate', 'inspectVariables', 'richInspectVariables']
"""

from __future__ import annotations

import ast
import builtins
import types
from collections.abc import Callable
from typing import Any

from kernelgate.model.text import cap_text
from kernelgate.wire.values import dumps

from .debugbreaks import exc_text
from .debugvalues import (
    ENDS_RUN,
    Deadline,
    DeadlineExpired,
    References,
    bounded_repr,
    children,
    fit_page,
    listing,
    program_exc_text,
    program_globals,
    type_label,
)
from .display import display_bundle
from .program import FILENAME

__builtins__ = dict(builtins.__dict__)  # type: ignore[assignment]  # see .debugvalues

__all__ = ["StopView", "STOPPED_ONLY", "Refused"]

_ALLOW_AWAIT = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
_CO_COROUTINE = 0x80


class StopView:
    """The requests a stop answers, over the stop's state (the :class:`~.debugger.Debugger`
    fills it when the program stops and clears it when it resumes)."""

    main_code: types.CodeType
    globals: dict[str, Any]
    injected: dict[str, Any]
    budget: int
    frames: list[tuple[int, types.FrameType, int]]  # (id, frame, line), innermost first
    _frame_ids: dict[int, tuple[types.FrameType, int]]
    _locals: dict[int, Any]
    refs: References
    deadline: Deadline

    def _as_program(self, fn: Callable[..., Any], *args: Any, what: str | None = None) -> Any:
        raise NotImplementedError

    def _frame(
        self, args: dict[str, Any], key: str = "frameId"
    ) -> tuple[types.FrameType, int, int]:
        fid = args.get(key)
        if fid is None and self.frames:
            fid = self.frames[0][0]
        got = self._frame_ids.get(fid) if type(fid) is int else None
        if got is None:
            raise Refused(
                f"frame {bounded_repr(fid, 40)} is not a frame of this stop (frame ids are "
                "valid only until the program resumes)"
            )
        return got[0], got[1], fid  # type: ignore[return-value]

    def _namespaces(self, frame: types.FrameType, fid: int) -> tuple[dict[str, Any], Any]:
        """The frame's globals and locals, the same locals object for the whole stop (so an
        assignment made by evaluate is what a later request sees)."""
        if frame.f_code is self.main_code:
            return frame.f_globals, frame.f_globals
        loc = self._locals.get(fid)
        if loc is None:
            loc = self._locals[fid] = frame.f_locals
        return frame.f_globals, loc

    def stack_trace(self, args: dict[str, Any]) -> tuple[bool, dict[str, Any], str]:
        start = args.get("startFrame") or 0
        levels = args.get("levels") or 0
        if type(start) is not int or type(levels) is not int or start < 0 or levels < 0:
            return False, {}, "startFrame and levels must be integers from 0"
        chosen = self.frames[start : start + levels] if levels else self.frames[start:]
        frames = []
        room = self.budget - 1024
        for fid, f, line in chosen:
            entry = {
                "id": fid,
                "name": "<module>"
                if f.f_code is self.main_code
                else cap_text(f.f_code.co_name, 200),
                "line": line,
                "column": 1,
                "source": {"path": FILENAME, "name": FILENAME},
            }
            room -= len(dumps(entry).encode("utf-8")) + 1
            if room < 0:
                break  # a deep stack: the innermost frames that fit (totalFrames says all)
            frames.append(entry)
        return True, {"stackFrames": frames, "totalFrames": len(self.frames)}, ""

    def scopes(self, args: dict[str, Any]) -> tuple[bool, dict[str, Any], str]:
        frame, _line, fid = self._frame(args)
        g, loc = self._namespaces(frame, fid)
        glob = listing(program_globals(g, self.injected))
        if loc is g:
            local = glob
        else:
            local = listing([(str(k), v, str(k)) for k, v in list(dict(loc).items())])
        scopes = [
            {"name": "Locals", "variablesReference": self.refs.add(local), "expensive": False},
            {"name": "Globals", "variablesReference": self.refs.add(glob), "expensive": False},
        ]
        return True, {"scopes": scopes}, ""

    def variables(self, args: dict[str, Any]) -> tuple[bool, dict[str, Any], str]:
        ref = args.get("variablesReference")
        kids = self.refs.get(ref)
        if kids is None:
            return (
                False,
                {},
                (
                    f"variablesReference {bounded_repr(ref, 40)} is not one of this stop (they are "
                    "valid only until the program resumes)"
                ),
            )
        start, count = args.get("start") or 0, args.get("count") or 0
        if type(start) is not int or type(count) is not int or start < 0 or count < 0:
            return False, {}, "start and count must be integers from 0"
        page = fit_page(kids, start, count, self.budget - 1024, self.refs, self.deadline)
        return True, {"variables": page}, ""

    def evaluate(self, args: dict[str, Any]) -> tuple[bool, dict[str, Any], str]:
        expression = args.get("expression")
        if type(expression) is not str:
            return False, {}, "evaluate needs an expression (a string)"
        frame, _line, fid = self._frame(args)
        g, loc = self._namespaces(frame, fid)
        try:
            code = compile(expression, "<debug>", "eval", _ALLOW_AWAIT, dont_inherit=True)
        except SyntaxError:
            try:
                code = compile(expression, "<debug>", "exec", _ALLOW_AWAIT, dont_inherit=True)
            except (SyntaxError, ValueError) as exc:
                return False, {}, exc_text(exc)
        except ValueError as exc:
            return False, {}, exc_text(exc)
        if code.co_flags & _CO_COROUTINE:
            return (
                False,
                {},
                (
                    "`await` cannot run while the program is stopped: its event loop is stopped "
                    "with it. Step over the line that awaits instead (next), or evaluate "
                    "without await"
                ),
            )
        try:
            value = self._as_program(
                eval, code, g, loc, what=f"the expression {cap_text(expression, 200)!r}"
            )
        except DeadlineExpired:
            raise
        except ENDS_RUN:
            raise  # an interrupt, or the program's own exit: never swallowed
        except BaseException as exc:
            return False, {}, program_exc_text(exc, 1000, self.deadline)
        kids = children(value, expression if len(expression) <= 1000 else None)
        return (
            True,
            {
                "result": bounded_repr(value, 1000, self.deadline),
                "type": type_label(value),
                "variablesReference": self.refs.add(kids),
            },
            "",
        )

    def rich_inspect(self, args: dict[str, Any]) -> tuple[bool, dict[str, Any], str]:
        name = args.get("variableName")
        if type(name) is not str or not name.isidentifier():
            return False, {}, "richInspectVariables needs a variableName (a name)"
        frame, _line, fid = self._frame(args)
        g, loc = self._namespaces(frame, fid)
        missing = object()
        value = loc.get(name, missing) if hasattr(loc, "get") else missing
        if value is missing:
            value = g.get(name, missing)
        if value is missing:
            return False, {}, f"no variable {name!r} in this frame"
        data, metadata = self.deadline.run(
            display_bundle,
            value,
            self.budget - 1024,
            per_call=3.0,
            what=f"the display methods (`_repr_*_`, `__repr__`) of a {type_label(value)}",
        )
        return True, {"data": data, "metadata": metadata}, ""

    def inspect_variables(self, args: dict[str, Any]) -> tuple[bool, dict[str, Any], str]:
        glob = listing(program_globals(self.globals, self.injected))
        page = fit_page(glob, 0, 0, self.budget - 1024, self.refs, self.deadline)
        return True, {"variables": page}, ""


class Refused(Exception):
    """A request that cannot be answered: its message is the reply's."""


def _guard(
    method: Callable[[StopView, dict[str, Any]], tuple[bool, dict[str, Any], str]],
) -> Callable[[StopView, dict[str, Any]], tuple[bool, dict[str, Any], str]]:
    def run(self: StopView, args: dict[str, Any]) -> tuple[bool, dict[str, Any], str]:
        try:
            return method(self, args)
        except Refused as exc:
            return False, {}, str(exc)

    return run


#: Requests only a stopped program answers.
STOPPED_ONLY: dict[str, Callable[[StopView, dict[str, Any]], tuple[bool, dict[str, Any], str]]] = {
    "stackTrace": _guard(StopView.stack_trace),
    "scopes": _guard(StopView.scopes),
    "variables": _guard(StopView.variables),
    "evaluate": _guard(StopView.evaluate),
    "richInspectVariables": _guard(StopView.rich_inspect),
    "inspectVariables": _guard(StopView.inspect_variables),
}
