"""A cell's traceback as IPython shows it: coloured, ``Cell In[N], line L``, context lines.

The run reports Python's plain, program-only traceback (``File "<program>", line N``); the
kernel knows the program it ran (setup cells, then the cell) and the cell's number, so it
rebuilds what Jupyter users expect from IPython (``IPython.core.ultratb``): a header
naming the exception, each of the program's frames as ``Cell In[N], line L`` (a setup
cell's as ``Setup cell In[N], line L``) with a few lines of context and the failing line
marked ``---->``, and the exception last. Pure: text in, text out, no I/O.

Only the notebook's front end gets this text: :attr:`RunResult.error` and everything
agents read stay plain (a private run's error is sent as the run gave it).

**Inert.** Everything in the text that the program chose (exception messages, notes, even
source lines) has its control characters written as escapes (``\\x1b``), so an exception
message cannot colour, move the cursor, set a terminal's title or clipboard, or end the
kernel's own colours early; the only escape sequences in the result are the colours added
here. A frame is drawn only where Python's structure puts one (after a ``Traceback`` line,
before the exception), the last exception's message (known from the run's ``evalue``) is
never read for frames, and a frame's source is the program's own text at that line.

>>> from kernelgate.jupyter.cells import Program
>>> lines = ipython_traceback("ZeroDivisionError", "division by zero", [
...     "Traceback (most recent call last):",
...     '  File "<program>", line 2, in <module>',
...     "    1 / 0",
...     "ZeroDivisionError: division by zero"], Program("x = 1\\n1 / 0"), 3)
>>> from kernelgate.model.text import strip_ansi
>>> print("\\n".join(strip_ansi(line) for line in lines))
---------------------------------------------------------------------------
ZeroDivisionError                         Traceback (most recent call last)
Cell In[3], line 2
      1 x = 1
----> 2 1 / 0
<BLANKLINE>
ZeroDivisionError: division by zero
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from kernelgate.model.text import escape_controls

from .cells import Program

__all__ = ["inert", "ipython_traceback"]

# IPython's (ultratb's "Linux" scheme) colours.
_RED = "\x1b[0;31m"
_GREEN = "\x1b[0;32m"
_BOLD_GREEN = "\x1b[1;32m"
_CYAN = "\x1b[0;36m"
_HIGHLIGHT = "\x1b[43m"
_HIGHLIGHT_END = "\x1b[49m"
_RESET = "\x1b[0m"

_WIDTH = 75
_TITLE = "Traceback (most recent call last)"
_HEAD = "Traceback (most recent call last):"
_FRAME = re.compile(r'^  File "(?P<file>[^"]*)", line (?P<line>\d+)(?:, in (?P<func>.+))?$')
_ENAME = re.compile(r"^(?P<name>[A-Za-z_][\w.]*)(?P<rest>:.*)?$")
#: Context lines shown before a frame's failing line (IPython shows a few).
_BEFORE = 3
_PROGRAM = "<program>"


def inert(text: str) -> str:
    """``text`` with every control character but tab and newline written as its escape
    (:func:`kernelgate.model.text.escape_controls`).

    >>> inert("\\x1b[2J\\x1b]0;pwned\\x07ok")
    '\\\\x1b[2J\\\\x1b]0;pwned\\\\x07ok'
    """
    return escape_controls(text)


@dataclass
class _Frame:
    file: str
    line: int
    func: str | None
    body: list[str] = field(default_factory=list)


@dataclass
class _Block:
    """One exception of the chain: its frames, then its own text (exception line, notes,
    the separator before the next exception)."""

    frames: list[_Frame] = field(default_factory=list)
    text: list[str] = field(default_factory=list)
    headed: bool = False


def ipython_traceback(
    ename: str, evalue: str, traceback: list[str], program: Program | None, count: int
) -> list[str]:
    """IPython-style, coloured traceback lines (one string per header line, per frame and
    for the exception, as ipykernel sends them) for a run's plain ``traceback``.

    ``program`` is what ran (``None``: frames are shown without their cell), ``count`` the
    cell's execution count. A traceback of another shape (no ``Traceback`` line: a worker
    exit, a refusal) is kept as it is, made inert, its exception name coloured.
    """
    head, tail = _split_tail(traceback, evalue)
    # A SyntaxError of the program's source has no frames, only its location.
    located = bool(head) and _FRAME.match(head[0]) is not None
    if _HEAD not in head and not located:
        # An exception group's box, a worker's exit, a refusal: kept as they are, the
        # program's locations named as the cells they are in.
        lines = [_located(inert(line), program, count) for line in traceback]
        lines = lines or [inert(f"{ename}: {evalue}")]
        return [*lines[:-1], _exception_line(lines[-1])]
    blocks = _parse(head, in_frames=located)
    source = program.text.split("\n") if program is not None else []
    out: list[str] = []
    for n, block in enumerate(blocks):
        last = n == len(blocks) - 1
        if block.headed:
            name = ename if last and tail else _block_name(block)
            out.append(f"{_RED}{'-' * _WIDTH}{_RESET}")
            pad = " " * max(1, _WIDTH - len(name) - len(_TITLE))
            out.append(f"{_RED}{inert(name)}{_RESET}{pad}{_TITLE}")
        for frame in block.frames:
            out.append(_frame_text(frame, program, source, count))
        text = [inert(line) for line in block.text]
        if text and block.frames:
            text[0] = _exception_line(text[0])
        out.extend(text)
    if tail:
        out.append(_exception_line(inert(tail[0])))
        out.extend(inert(line) for line in tail[1:])
    return out


def _split_tail(lines: list[str], evalue: str) -> tuple[list[str], list[str]]:
    """``(head, tail)``: the tail is the last exception's line and what follows it (notes),
    found from the run's ``evalue``, so nothing the message says is read as structure."""
    wanted = evalue.split("\n")
    for i in range(len(lines) - len(wanted), -1, -1):
        first = lines[i]
        if (first.endswith(": " + wanted[0]) or (not evalue and _ENAME.match(first))) and lines[
            i + 1 : i + len(wanted)
        ] == wanted[1:]:
            if i > 0 and _ENAME.match(first.split(":", 1)[0]):
                return lines[:i], lines[i:]
    return lines, []


def _parse(lines: list[str], *, in_frames: bool) -> list[_Block]:
    blocks = [_Block()]
    for line in lines:
        block = blocks[-1]
        if line == _HEAD:
            if block.frames or block.text or block.headed:
                blocks.append(_Block())
            blocks[-1].headed = True
            in_frames = True
            continue
        m = _FRAME.match(line) if in_frames else None
        if m is not None:
            block.frames.append(_Frame(m.group("file"), int(m.group("line")), m.group("func")))
        elif in_frames and block.frames and line.startswith("    "):
            block.frames[-1].body.append(line)
        else:
            in_frames = False
            block.text.append(line)
    return [b for b in blocks if b.frames or b.text or b.headed]


def _block_name(block: _Block) -> str:
    for line in block.text:
        m = _ENAME.match(line)
        if m:
            return m.group("name")
    return "Exception"


def _exception_line(line: str) -> str:
    m = _ENAME.match(line)
    if m is None:
        return line
    return f"{_RED}{m.group('name')}{_RESET}{m.group('rest') or ''}"


def _frame_text(frame: _Frame, program: Program | None, source: list[str], count: int) -> str:
    """One frame: where, then context lines with the failing one marked (IPython's form).
    ``source`` is the program's text as lines."""
    func = ""
    if frame.func and frame.func != "<module>":
        func = f", in {_CYAN}{inert(frame.func)}{_RESET}"
    if frame.file != _PROGRAM or program is None or not 1 <= frame.line <= len(source):
        where = f"File {_GREEN}{inert(frame.file)}:{frame.line}{_RESET}{func}"
        return "\n".join([where, *(inert(line) for line in frame.body)]) + "\n"
    part, local = program.where(frame.line)
    label = _part_label(part, count)
    where = f"{label}, line {local}{_RESET}{func}"
    if frame.func is None:
        # A SyntaxError's location: Python's own lines, whose caret points into them.
        return "\n".join(["  " + where, *(inert(line) for line in frame.body)])
    first = frame.line - local + 1  # the part's first line in the program
    shown: list[str] = []
    for number in range(max(first, frame.line - _BEFORE), frame.line + 1):
        text = source[number - 1]
        shown_number = number - first + 1
        if number == frame.line:
            marker = "-" * (7 - len(str(shown_number)) - 2) + "> " + str(shown_number)
            line = _highlighted(text, frame.body)
            shown.append(f"{_GREEN}{marker}{_RESET} {line}")
        elif text.strip():
            shown.append(f"{_BOLD_GREEN}{shown_number:>7}{_RESET} {inert(text)}")
    return "\n".join([where, *shown]) + "\n"


_LOCATION = re.compile(r'File "<program>", line (\d+)')


def _located(line: str, program: Program | None, count: int) -> str:
    """``line`` with each ``File "<program>", line N`` as ``Cell In[N], line L``."""
    if program is None:
        return line

    def where(m: re.Match[str]) -> str:
        part, local = program.where(int(m.group(1)))
        return f"{_part_label(part, count)}, line {local}{_RESET}"

    return _LOCATION.sub(where, line)


def _part_label(part: str, count: int) -> str:
    m = re.fullmatch(r"<setup cell (\d+)>", part)
    if m:
        return f"Setup cell {_GREEN}In[{m.group(1)}]"
    return f"Cell {_GREEN}In[{count}]"


def _highlighted(text: str, body: list[str]) -> str:
    """The failing line, its failing expression on a highlight where Python's carets
    (``~~~^^^``, under the dedented line) say which it is."""
    carets = next((b[4:] for b in body[1:] if set(b[4:].strip()) <= set("~^") and b.strip()), "")
    if not carets:
        return inert(text)
    indent = len(text) - len(text.lstrip())
    start = indent + len(carets) - len(carets.lstrip())
    end = indent + len(carets.rstrip())
    if end > len(text) or start >= end:
        return inert(text)
    return (
        inert(text[:start])
        + _HIGHLIGHT
        + inert(text[start:end])
        + _HIGHLIGHT_END
        + inert(text[end:])
    )
