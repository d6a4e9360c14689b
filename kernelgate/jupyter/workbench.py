"""What the kernel remembers across cells, and what it makes of each cell before running it.

No program state survives a cell (each is a fresh child); what the kernel keeps is about
the *notebook*: the setup cells (their source comes before every later cell's program),
the execute history, and which cell assigned which name (for the ``NameError`` hint).
:meth:`Workbench.plan` reads a cell (pure, from its source alone, via :mod:`.cells`) and
says what to do with it: remember it as setup, refuse it (IPython syntax), answer ``obj?``
with the pager, or run a :class:`~.cells.Program`.

>>> bench = Workbench()
>>> bench.plan("#| setup\\nlimit = 2", 1, {}).setup
True
>>> plan = bench.plan("print(limit)", 2, {})
>>> plan.program.text
'#| setup\\nlimit = 2\\nprint(limit)'
>>> bench.plan("%timeit 1", 3, {}).refusal[0]
'SyntaxError'
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kernelgate.model.result import ErrorInfo

from .cells import (
    Program,
    Setup,
    assigned_names,
    help_requests,
    ipython_syntax_error,
    is_setup_cell,
    name_error_hint,
)
from .history import History
from .introspect import Namespaces, describe_name
from .tracebacks import ipython_traceback

__all__ = ["Plan", "Workbench", "pager_text"]


@dataclass
class Plan:
    """What to do with one cell: exactly one of ``setup``, ``refusal``, or a ``program``
    to run (``None`` when the cell only asked for help; with ``replay``, against a
    recording's answers); ``payload`` goes on the reply."""

    setup: bool = False
    refusal: tuple[str, str] | None = None
    program: Program | None = None
    payload: list[dict[str, Any]] = field(default_factory=list)
    #: A replay cell's marker (``#| replay PATH``): the program runs against a recording.
    replay: Any = None


def pager_text(names: list[str], code: str, namespaces: Namespaces) -> str:
    """What ``obj?`` shows for each name: the text ``inspect_request`` gives, or why not."""
    defined = assigned_names(code)
    parts = []
    for name in names:
        text = describe_name(name, namespaces)
        if text is None:
            head = name.split(".")[0]
            if head in defined:
                text = (
                    f"{name}: defined by this cell; a kernelgate cell is a fresh program, so "
                    "there is nothing live to inspect before it runs. Run the cell with "
                    f"help({name}) or print({name}) instead"
                )
            else:
                text = (
                    f"{name}: no help found. '?' knows the bindings ({', '.join(namespaces)}), "
                    "ToolError, display and Python's builtins; for anything else run "
                    f"help({name}) in a cell"
                )
        parts.append(text)
    return "\n\n".join(parts)


class Workbench:
    """The kernel's memory of the notebook: setup cells, history, who assigned what."""

    def __init__(self) -> None:
        self.setup = Setup()
        self.history = History()
        #: name -> execution count of the latest non-setup cell that assigned it.
        self.assigned: dict[str, int] = {}

    def plan(self, code: str, count: int, metadata: Mapping[str, Any]) -> Plan:
        """Read cell ``[count]``; a setup cell is remembered here (if it parses)."""
        tags = metadata.get("tags") if isinstance(metadata, Mapping) else None
        magic = ipython_syntax_error(code)
        if magic is not None:
            return Plan(refusal=("SyntaxError", magic))
        if is_setup_cell(code, tags or ()):
            try:
                ast.parse(code)
            except SyntaxError as exc:
                # Refused now: kept, it would break every later cell.
                where = f" (line {exc.lineno})" if exc.lineno else ""
                return Plan(refusal=("SyntaxError", f"setup cell: {exc.msg}{where}; not kept"))
            except (ValueError, MemoryError, RecursionError) as exc:
                return Plan(refusal=(type(exc).__name__, f"setup cell: {exc}; not kept"))
            self.setup.add(count, code)
            return Plan(setup=True)
        return Plan(program=self.setup.program(code))

    def help_plan(self, code: str, namespaces: Namespaces) -> Plan | None:
        """For a cell with ``obj?`` lines: the pager payload, and what else to run."""
        names, _detail, rest = help_requests(code)
        if not names:
            return None
        text = pager_text(names, rest, namespaces)
        payload = [{"source": "page", "data": {"text/plain": text}, "start": 0}]
        program = self.setup.program(rest) if rest.strip() else None
        return Plan(program=program, payload=payload)

    def ran(self, code: str, count: int) -> None:
        """Cell ``[count]`` ran ``code`` (not a setup cell): remember what it assigned."""
        for name in assigned_names(code):
            self.assigned[name] = count

    def shown_error(self, program: Program | None, error: ErrorInfo, count: int) -> ErrorInfo:
        """The error as the front end shows it: IPython's coloured traceback
        (:func:`~.tracebacks.ipython_traceback`: ``Cell In[N], line L``, setup cells named,
        context lines), the message's line numbers the cell's, and for a ``NameError`` of a
        name an earlier cell assigned, one more line saying why. The run record keeps the
        run's own plain error (so a replay of the recorded program compares equal)."""
        evalue = program.map_message(error.evalue) if program is not None else error.evalue
        traceback = ipython_traceback(error.ename, error.evalue, error.traceback, program, count)
        if error.ename == "NameError":
            earlier = {n: c for n, c in self.assigned.items() if c != count}
            hint = name_error_hint(error.evalue, earlier)
            if hint is not None:
                traceback = [*traceback, hint]
        return ErrorInfo(error.ename, evalue, traceback)
