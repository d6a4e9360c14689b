"""What a notebook cell asks of the kernel, read from its source alone (pure, no I/O).

Every cell is one fresh program, so the kernel reads each cell before running it:

- **setup cells** (first line ``#| setup``, Quarto's and nbdev's cell-option style, or
  ``# Parameters``, the first line papermill writes into the cell it injects) are not run
  alone: their source is put before every later cell's program, so helpers and parameters
  are written once while each cell still runs in a fresh process;
- ``obj?`` and ``obj??`` lines ask for help, as in IPython (answered with a pager payload);
- ``%magic`` and ``!cmd`` lines are IPython syntax, refused with a clear error;
- the names a cell assigns are remembered, so a later ``NameError`` for one of them can say
  that cells do not share state.

>>> setup = Setup()
>>> setup.add(1, "#| setup\\nlimit = 2\\n")
>>> program = setup.program("print(limit)")
>>> program.text
'#| setup\\nlimit = 2\\nprint(limit)'
>>> program.where(3), program.where(2)
(('<cell>', 1), ('<setup cell 1>', 2))
>>> help_requests("tools.search?")
(['tools.search'], 0, '')
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

__all__ = [
    "SETUP_MARKERS",
    "Program",
    "Setup",
    "assigned_names",
    "help_requests",
    "ipython_syntax_error",
    "is_setup_cell",
    "name_error_hint",
]

#: First lines that make a cell a setup cell (compared stripped, case-insensitively).
SETUP_MARKERS = ("#| setup", "# parameters")

_HELP_LINE = re.compile(r"^\s*([A-Za-z_][\w.]*)\s*(\?{1,2})\s*$")
_IPYTHON_LINE = re.compile(r"^\s*(%{1,2}|!)(\w*)")


def is_setup_cell(code: str, tags: object = ()) -> bool:
    """Whether a cell is a setup cell: by its first line, or a ``setup`` tag where the front
    end sends cell metadata (nbclient and papermill send only the source).

    >>> is_setup_cell("#| setup\\nx = 1"), is_setup_cell("# Parameters\\nx = 1")
    (True, True)
    >>> is_setup_cell("x = 1"), is_setup_cell("x = 1", tags=["setup"])
    (False, True)
    """
    if isinstance(tags, (list, tuple)) and "setup" in tags:
        return True
    first = code.lstrip("\n").split("\n", 1)[0].strip().lower()
    return first in SETUP_MARKERS or first.replace(" ", "") == "#|setup"


@dataclass(frozen=True)
class Program:
    """A cell's program: the setup cells' source, then the cell's, and where each line is
    from (so tracebacks can name the setup cell and keep the cell's own line numbers)."""

    text: str
    #: (name, number of lines) of each part, in order; the cell's part is ``<cell>``.
    parts: tuple[tuple[str, int], ...] = ()
    #: Each part's source as the front end has it (a setup cell's text before the newline
    #: added to end it), aligned with :attr:`parts`: the debugger names a part by its hash.
    sources: tuple[str, ...] = ()

    def segments(self) -> list[tuple[str, str, int, int]]:
        """``(part name, source, first program line, number of lines)`` of each part; a
        program made of one text alone (a private run, a replay cell) is one ``<cell>``.

        >>> Setup({1: "a = 1"}).program("b = a\\nprint(b)").segments()
        [('<setup cell 1>', 'a = 1', 1, 1), ('<cell>', 'b = a\\nprint(b)', 2, 2)]
        """
        if not self.parts or len(self.sources) != len(self.parts):
            return [("<cell>", self.text, 1, self.text.count("\n") + 1)]
        out: list[tuple[str, str, int, int]] = []
        start = 1
        for (name, count), source in zip(self.parts, self.sources, strict=True):
            out.append((name, source, start, count))
            start += count
        return out

    def where(self, line: int) -> tuple[str, int]:
        """``(part name, line within it)`` for line ``line`` (1-based) of :attr:`text`."""
        start = 0
        for name, count in self.parts:
            if line <= start + count:
                return name, line - start
            start += count
        return "<cell>", line - start + (self.parts[-1][1] if self.parts else 0)

    @property
    def offset(self) -> int:
        """How many lines come before the cell's own first line."""
        return sum(count for name, count in self.parts if name != "<cell>")

    def map_traceback(self, lines: list[str]) -> list[str]:
        """``lines`` with each ``File "<program>", line N`` naming its part and local line."""
        if not self.offset:
            return lines
        return [_FRAME.sub(lambda m: self._frame(int(m.group(1))), line) for line in lines]

    def map_message(self, text: str) -> str:
        """A SyntaxError's message (``... (<program>, line N)``) with the local line."""
        if not self.offset:
            return text
        return _MESSAGE_LINE.sub(lambda m: self._message(int(m.group(1))), text)

    def _frame(self, line: int) -> str:
        name, local = self.where(line)
        return f'File "{name}", line {local}'

    def _message(self, line: int) -> str:
        name, local = self.where(line)
        return f"({name}, line {local})"


_FRAME = re.compile(r'File "<program>", line (\d+)')
_MESSAGE_LINE = re.compile(r"\(<program>, line (\d+)\)")


@dataclass
class Setup:
    """The setup cells run so far, in order: each one's source comes before every later
    cell's program. A setup cell run again (same cell number) replaces its earlier text."""

    cells: dict[int, str] = field(default_factory=dict)

    def add(self, number: int, code: str) -> None:
        self.cells.pop(number, None)  # re-running a setup cell moves it to the end
        self.cells[number] = code

    def program(self, code: str) -> Program:
        """The program a cell runs: every setup cell's source, then ``code``."""
        parts: list[tuple[str, int]] = []
        chunks: list[str] = []
        for number, text in self.cells.items():
            body = text if text.endswith("\n") else text + "\n"
            chunks.append(body)
            parts.append((f"<setup cell {number}>", body.count("\n")))
        parts.append(("<cell>", code.count("\n") + 1))
        sources = (*self.cells.values(), code)
        return Program("".join(chunks) + code, tuple(parts), sources)


def help_requests(code: str) -> tuple[list[str], int, str]:
    """The ``obj?``/``obj??`` lines of a cell: (the names asked about, 0 or 1 for ``??``,
    the cell's other lines as code to run, empty if there are none).

    >>> help_requests("x = 1\\nlen??")
    (['len'], 1, 'x = 1')
    >>> help_requests("print('what?')")
    ([], 0, "print('what?')")
    """
    names: list[str] = []
    detail = 0
    rest: list[str] = []
    for line in code.split("\n"):
        m = _HELP_LINE.match(line)
        if m:
            names.append(m.group(1))
            detail = max(detail, len(m.group(2)) - 1)
        else:
            rest.append(line)
    if not names:
        return [], 0, code
    remaining = "\n".join(rest).strip("\n")
    return names, detail, remaining


def ipython_syntax_error(code: str) -> str | None:
    """If ``code`` does not parse because of an IPython ``%magic`` or ``!shell`` line, the
    message saying so (with the line); ``None`` otherwise (plain Python, or another error).

    >>> print(ipython_syntax_error("%timeit sum(range(9))")[:60])
    line 1: '%timeit sum(range(9))' is an IPython magic; this ke
    """
    try:
        ast.parse(code)
        return None
    except SyntaxError:
        pass
    except (ValueError, MemoryError, RecursionError):
        return None
    for number, line in enumerate(code.split("\n"), 1):
        m = _IPYTHON_LINE.match(line)
        if not m:
            continue
        shown = line.strip()
        if len(shown) > 80:
            shown = shown[:77] + "..."
        if m.group(1) == "!":
            return (
                f"line {number}: {shown!r} is an IPython shell escape; this kernel runs plain "
                "Python in a sandbox with no shell: call a binding, or use subprocess where "
                "the sandbox allows it"
            )
        hint = " (e.g. time it with time.perf_counter())" if "time" in m.group(2) else ""
        return (
            f"line {number}: {shown!r} is an IPython magic; this kernel runs plain Python "
            "(every cell a fresh program in a sandbox), so magics are not available: write "
            f"it as Python{hint}"
        )
    return None


def assigned_names(code: str) -> set[str]:
    """The names a cell binds at its top level (assignments, imports, defs, for, with...).

    >>> sorted(assigned_names("import os\\nx, y = 1, 2\\ndef f(): z = 3"))
    ['f', 'os', 'x', 'y']
    """
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return set()
    names: set[str] = set()
    for stmt in tree.body:
        for node in _top_level_nodes(stmt):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                for alias in node.names:
                    if alias.name != "*":
                        names.add((alias.asname or alias.name).split(".")[0])
    return names


#: Nodes whose names are their own (a function's locals, a comprehension's variables).
_OWN_SCOPE = (
    ast.FunctionDef,
    ast.AsyncFunctionDef,
    ast.ClassDef,
    ast.Lambda,
    ast.ListComp,
    ast.SetComp,
    ast.DictComp,
    ast.GeneratorExp,
)


def _top_level_nodes(stmt: ast.stmt) -> list[ast.AST]:
    """``stmt`` and what it contains, without entering function or class bodies (names
    bound there are not the cell's)."""
    out: list[ast.AST] = []
    todo: list[ast.AST] = [stmt]
    while todo:
        node = todo.pop()
        out.append(node)
        if isinstance(node, _OWN_SCOPE):
            continue
        todo.extend(ast.iter_child_nodes(node))
    return out


_NAME_ERROR = re.compile(r"^name '([A-Za-z_]\w*)' is not defined")


def name_error_hint(evalue: str, earlier: dict[str, int]) -> str | None:
    """For ``NameError: name 'x' is not defined`` where an earlier non-setup cell (number
    ``earlier[x]``) assigned ``x``: the line that explains why.

    >>> name_error_hint("name 'df' is not defined", {"df": 3})[:60]
    "cells do not share state: 'df' was assigned in cell [3], whi"
    """
    m = _NAME_ERROR.match(evalue)
    if not m or m.group(1) not in earlier:
        return None
    name = m.group(1)
    return (
        f"cells do not share state: {name!r} was assigned in cell [{earlier[name]}], which "
        "ran as its own program; mark that cell '#| setup' (its code then runs before every "
        "later cell) or repeat the code here"
    )
