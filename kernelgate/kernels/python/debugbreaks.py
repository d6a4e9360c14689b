"""Breakpoints of a debugged run, in program lines: which lines have code, and DAP's
``setBreakpoints`` arguments as the tracer keeps them. Imported only in a debugged run.

>>> breaks, out, _ = parse_breakpoints([{"line": 2}, {"line": 9}], [1, 3], 1)
>>> sorted(breaks), [b.get("line") for b in out], out[1]["verified"]
([3], [3, 9], False)
"""

from __future__ import annotations

import bisect
import builtins
import types
from typing import Any

from .debugvalues import bounded_repr, exc_text

__builtins__ = dict(builtins.__dict__)  # type: ignore[assignment]  # see .debugvalues

__all__ = ["Breakpoint", "parse_breakpoints", "code_lines", "own_lines", "next_line", "exc_text"]


class Breakpoint:
    """One breakpoint: its id, program line and condition (compiled)."""

    __slots__ = ("id", "line", "condition", "code")

    def __init__(self, bp_id: int, line: int, condition: str | None, code: Any) -> None:
        self.id = bp_id
        self.line = line
        self.condition = condition
        self.code = code


def parse_breakpoints(
    given: Any, lines: list[int], first_id: int
) -> tuple[dict[int, list[Breakpoint]], list[dict[str, Any]], int]:
    """DAP's ``breakpoints`` (``[{line, condition?}]``) as the tracer keeps them (program
    line -> breakpoints), the DAP answer for each, and the next free id. A line with no code
    moves to the next line that has some; a condition must compile; log points are
    refused (they would stop)."""
    next_id = first_id
    breaks: dict[int, list[Breakpoint]] = {}
    out: list[dict[str, Any]] = []
    for bp in given if type(given) is list else []:
        if type(bp) is int:
            bp = {"line": bp}
        line = bp.get("line") if type(bp) is dict else None
        if type(line) is not int or line < 1:
            out.append(
                {
                    "verified": False,
                    "message": f"a breakpoint needs a line number, got {bounded_repr(line, 80)}",
                }
            )
            continue
        condition = bp.get("condition")
        if bp.get("logMessage") is not None:
            out.append(
                {
                    "verified": False,
                    "line": line,
                    "message": "log points are not supported by kernelgate's debugger",
                }
            )
            continue
        code = None
        if condition is not None and condition != "":
            if type(condition) is not str:
                out.append(
                    {"verified": False, "line": line, "message": "a condition must be a string"}
                )
                continue
            try:
                code = compile(condition, "<condition>", "eval", dont_inherit=True)
            except (SyntaxError, ValueError) as exc:
                out.append(
                    {
                        "verified": False,
                        "line": line,
                        "message": f"the condition does not compile: {exc_text(exc)}",
                    }
                )
                continue
        at = next_line(lines, line)
        if at is None:
            out.append(
                {
                    "verified": False,
                    "line": line,
                    "message": f"line {line} has no code the program runs",
                }
            )
            continue
        b = Breakpoint(next_id, at, condition if code is not None else None, code)
        next_id += 1
        breaks.setdefault(at, []).append(b)
        out.append({"verified": True, "line": at, "id": b.id})
    return breaks, out, next_id


def code_lines(code: types.CodeType) -> list[int]:
    """The lines where the program's code (nested functions too) starts a line, sorted."""
    lines: set[int] = set()
    todo = [code]
    while todo:
        c = todo.pop()
        for _start, _end, line in c.co_lines():
            if line is not None:
                lines.add(line)
        todo.extend(k for k in c.co_consts if isinstance(k, types.CodeType))
    return sorted(lines)


def own_lines(code: types.CodeType) -> frozenset[int]:
    """The lines of ``code`` itself (not of the functions defined in it)."""
    return frozenset(line for _start, _end, line in code.co_lines() if line is not None)


def next_line(lines: list[int], line: int) -> int | None:
    """``line`` if code starts there, else the next line that has code (None: none)."""
    i = bisect.bisect_left(lines, line)
    return lines[i] if i < len(lines) else None
