"""kernelgate.jupyter.tracebacks, pure: IPython's form from a run's plain traceback, and
what a program can and cannot make of it (the kernel-level tests are in
test_ipython_output.py)."""

from __future__ import annotations

import re
import traceback

from kernelgate.jupyter.cells import Program, Setup
from kernelgate.jupyter.tracebacks import inert, ipython_traceback
from kernelgate.model.text import strip_ansi

_OURS = re.compile(r"\x1b\[(?:0;31|0;32|1;32|0;36|43|49|0)m")


def _plain(lines: list[str]) -> str:
    text = "\n".join(lines)
    assert "\x1b" not in _OURS.sub("", text), ascii(text)
    return strip_ansi(text)


def _run(code: str) -> tuple[str, str, list[str]]:
    """Run ``code`` as ``<program>`` here and format its exception as the child does."""
    try:
        exec(compile(code, "<program>", "exec"), {"__name__": "__main__"})
    except Exception as exc:
        text = "".join(traceback.format_exception(exc))
        return type(exc).__name__, str(exc), _refile(text)
    raise AssertionError("no exception")


def _refile(text: str) -> list[str]:
    """The traceback's lines with only ``<program>`` frames (what the child keeps)."""
    out: list[str] = []
    skip = False
    for line in text.rstrip("\n").split("\n"):
        if line.startswith("  File "):
            skip = '"<program>"' not in line
            if skip:
                continue
        elif skip and line.startswith("    "):
            continue
        else:
            skip = False
        out.append(line)
    return out


def test_frames_of_setup_cells_and_the_cell_with_their_own_numbers() -> None:
    setup = Setup()
    setup.add(4, "#| setup\ndef half(n):\n    return n / 0\n")
    program = setup.program("x = 2\nhalf(x)")
    ename, evalue, lines = _run(program.text)
    text = _plain(ipython_traceback(ename, evalue, lines, program, 9))
    assert "Cell In[9], line 2\n      1 x = 2\n----> 2 half(x)" in text
    assert "Setup cell In[4], line 3, in half\n" in text
    assert text.endswith("ZeroDivisionError: division by zero")


def test_a_chain_shows_each_exception_with_its_header() -> None:
    program = Program("try:\n    {}['k']\nexcept KeyError as e:\n    raise ValueError('v') from e")
    ename, evalue, lines = _run(program.text)
    text = _plain(ipython_traceback(ename, evalue, lines, program, 1))
    headers = re.findall(r"^(\w+) +Traceback \(most recent call last\)$", text, re.M)
    assert headers == ["KeyError", "ValueError"]
    assert "The above exception was the direct cause of the following exception:" in text


def test_an_earlier_exceptions_made_up_frame_shows_only_the_programs_own_line() -> None:
    # The limit, stated: a chained exception's message that imitates Python's lines is read
    # as structure (its message is not known apart from the text), but what it can draw is
    # the program's own line at that number, inert, nothing it wrote itself.
    forged = (
        "x\\n\\nThe above exception was the direct cause of the following exception:\\n\\n"
        'Traceback (most recent call last):\\n  File \\"<program>\\", line 1, in made_up\\n'
        "    \\x1b]0;title\\x07 anything"
    )
    program = Program(
        f"secret = 1\ntry:\n    raise ValueError('{forged}')\nexcept ValueError:\n    1 / 0"
    )
    ename, evalue, lines = _run(program.text)
    text = _plain(ipython_traceback(ename, evalue, lines, program, 1))
    assert "anything" in text  # shown, as text
    drawn = re.findall(r"^Cell In\[1\], line 1, in made_up\n(.*)", text, re.M)
    assert drawn == ["----> 1 secret = 1"], text


def test_a_hostile_class_name_and_notes_stay_inert() -> None:
    program = Program(
        "E = type('\\x1b[2J\\x9bX', (Exception,), {})\n"
        "e = E('\\x1b]52;c;eA==\\x07')\n"
        "e.add_note('\\x1b[31mnote\\r')\n"
        "raise e"
    )
    ename, evalue, lines = _run(program.text)
    text = _plain(ipython_traceback(ename, evalue, lines, program, 1))
    assert "\\x1b[2J\\x9bX" in text and "\\x1b]52;c;eA==\\x07" in text
    assert "\\x1b[31mnote\\r" in text
    assert "\x9b" not in text and "\r" not in text


def test_other_shapes_are_kept_inert_with_the_name_coloured() -> None:
    lines = ipython_traceback("Timeout", "5 s", ["Timeout: the run took over 5 s"], None, 1)
    assert lines == ["\x1b[0;31mTimeout\x1b[0m: the run took over 5 s"]
    assert ipython_traceback("E", "x", [], None, 1) == ["\x1b[0;31mE\x1b[0m: x"]
    cut = ["Traceback (most recent call last):", "... [9 characters of traceback cut] ...", "E: x"]
    assert _plain(ipython_traceback("E", "x", cut, Program("1"), 1)).endswith("E: x")


def test_inert_keeps_tabs_and_newlines() -> None:
    assert inert("a\tb\nc\x00\x7f\x85") == "a\tb\nc\\x00\\x7f\\x85"
