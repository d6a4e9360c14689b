"""The kernel's memory of a TypeScript or JavaScript notebook (:class:`ScriptWorkbench`).

What :class:`~.workbench.Workbench` is for Python cells, with the other language's
habits: a setup cell's first line is ``//| setup`` (Quarto's cell options for JavaScript
and TypeScript cells) or ``// Parameters``; ``obj?`` lines still ask for help (a line
``tools.search?`` is not TypeScript, so nothing valid is taken from a program); no
IPython ``%magic`` or ``!cmd`` refusal (``!done`` is a JavaScript expression), no Python
parse; a failure shows Node's stack with each ``<program>:L:C`` named by its cell
(``Cell In[5]:2:7``), and a ``ReferenceError`` for a name an earlier cell declared says
that cells do not share state.

>>> bench = ScriptWorkbench()
>>> bench.plan("//| setup\\nconst limit = 2", 1, {}).setup
True
>>> bench.plan("limit + 1", 2, {}).program.text
'//| setup\\nconst limit = 2\\nlimit + 1'
>>> bench.plan("!ready", 3, {}).refusal is None
True
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from kernelgate.model.result import ErrorInfo

from .cells import Program, help_requests
from .introspect import Namespaces
from .introspect_ts import bound_names, describe_name, is_complete
from .tracebacks import inert
from .workbench import Plan, Workbench

__all__ = ["SETUP_MARKERS", "ScriptWorkbench", "is_setup_cell"]

#: First lines that make a TypeScript/JavaScript cell a setup cell (compared without
#: spaces, case-insensitively).
SETUP_MARKERS = ("//|setup", "//parameters")

_RED = "\x1b[0;31m"
_GREEN = "\x1b[0;32m"
_RESET = "\x1b[0m"
_STACK_PLACE = re.compile(r"<program>:(\d+)(?::(\d+))?")
_FILE_LINE = re.compile(r'File "<program>", line (\d+)')
_SOURCE_PLACE = re.compile(r"\(line (\d+), column (\d+) of the program\)")
_NOT_DEFINED = re.compile(r"^([A-Za-z_$][\w$]*) is not defined")


def is_setup_cell(code: str, tags: object = ()) -> bool:
    """Whether a TypeScript/JavaScript cell is a setup cell (its first line, or a tag).

    >>> is_setup_cell("//| setup\\nconst a = 1"), is_setup_cell("// Parameters\\nconst a = 1")
    (True, True)
    >>> is_setup_cell("#| setup\\nconst a = 1")
    False
    """
    if isinstance(tags, (list, tuple)) and "setup" in tags:
        return True
    first = code.lstrip("\n").split("\n", 1)[0].strip().lower().replace(" ", "")
    return first in SETUP_MARKERS


def _place(program: Program | None, count: int, line: int) -> tuple[str, int]:
    """The cell label and its own line for line ``line`` of the program."""
    if program is None:
        return f"Cell In[{count}]", line
    part, local = program.where(line)
    if part.startswith("<setup cell "):
        return f"Setup cell In[{part[len('<setup cell ') : -1]}]", local
    return f"Cell In[{count}]", local


class ScriptWorkbench(Workbench):
    """:class:`~.workbench.Workbench` for a kernel whose cells are TypeScript or JavaScript
    (see the module's doc)."""

    def plan(self, code: str, count: int, metadata: Mapping[str, Any]) -> Plan:
        tags = metadata.get("tags") if isinstance(metadata, Mapping) else None
        if is_setup_cell(code, tags or ()):
            if is_complete(code)["status"] != "complete":
                # Kept, an unbalanced setup cell would break every later cell.
                return Plan(
                    refusal=(
                        "SyntaxError",
                        "setup cell: a bracket, string, template or comment is left open "
                        "(or one closes that was never opened); not kept",
                    )
                )
            self.setup.add(count, code)
            return Plan(setup=True)
        return Plan(program=self.setup.program(code))

    def help_plan(self, code: str, namespaces: Namespaces) -> Plan | None:
        names, _detail, rest = help_requests(code)
        if not names:
            return None
        parts = []
        for name in names:
            text = describe_name(name, namespaces)
            if text is None:
                text = (
                    f"{name}: no help found. '?' knows the bindings ({', '.join(namespaces)}), "
                    "ToolError, display and console; a name a cell defines has nothing live "
                    f"to inspect before it runs: console.log({name}) in a cell instead"
                )
            parts.append(text)
        payload = [{"source": "page", "data": {"text/plain": "\n\n".join(parts)}, "start": 0}]
        program = self.setup.program(rest) if rest.strip() else None
        return Plan(program=program, payload=payload)

    def ran(self, code: str, count: int) -> None:
        for name in bound_names(code):
            self.assigned[name] = count

    def shown_error(self, program: Program | None, error: ErrorInfo, count: int) -> ErrorInfo:
        """Node's stack as the front end shows it: inert (the program's text cannot drive
        the terminal), ``<program>:L:C`` as ``Cell In[N]:L:C`` (or the setup cell's), the
        exception line in red; the run record keeps the run's own error."""

        def stack(m: re.Match[str]) -> str:
            label, line = _place(program, count, int(m.group(1)))
            column = f":{m.group(2)}" if m.group(2) else ""
            return f"{_GREEN}{label}:{line}{column}{_RESET}"

        def file_line(m: re.Match[str]) -> str:
            label, line = _place(program, count, int(m.group(1)))
            return f"{_GREEN}{label}, line {line}{_RESET}"

        def source_place(m: re.Match[str]) -> str:
            label, line = _place(program, count, int(m.group(1)))
            return f"(line {line}, column {m.group(2)} of {label})"

        evalue = _SOURCE_PLACE.sub(source_place, error.evalue)
        lines = [inert(line) for line in (error.traceback or [f"{error.ename}: {error.evalue}"])]
        shown: list[str] = []
        for line in lines:
            line = _FILE_LINE.sub(file_line, _STACK_PLACE.sub(stack, line))
            if line.startswith(f"{error.ename}:") or line == error.ename:
                line = f"{_RED}{error.ename}{_RESET}{line[len(error.ename) :]}"
            shown.append(line)
        if not any(line.startswith(f"{_RED}{error.ename}") for line in shown):
            shown.append(f"{_RED}{inert(error.ename)}{_RESET}: {inert(evalue)}")
        if error.ename == "ReferenceError":
            m = _NOT_DEFINED.match(error.evalue)
            earlier = self.assigned.get(m.group(1)) if m else None
            if m and earlier is not None and earlier != count:
                shown.append(
                    f"cells do not share state: {m.group(1)!r} was declared in cell "
                    f"[{earlier}], which ran as its own program; mark that cell '//| setup' "
                    "(its code then runs before every later cell) or repeat the code here"
                )
        return ErrorInfo(error.ename, evalue, shown)
