"""The kernel's reading of a cell (setup cells, help lines, IPython syntax, names) and its
history, as pure functions."""

from __future__ import annotations

import doctest

import pytest

from kernelgate.jupyter import cells, history
from kernelgate.jupyter.cells import (
    Setup,
    assigned_names,
    help_requests,
    ipython_syntax_error,
    is_setup_cell,
    name_error_hint,
)
from kernelgate.jupyter.history import History, history_reply


@pytest.mark.parametrize("module", [cells, history])
def test_doctests(module: object) -> None:
    assert doctest.testmod(module).failed == 0  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("code", "setup"),
    [
        ("#| setup\nx = 1", True),
        ("#|setup\nx = 1", True),
        ("\n#| setup\nx = 1", True),
        ("# Parameters\nlimit = 2\n", True),  # what papermill writes
        ("# parameters", True),
        ("x = 1\n#| setup", False),
        ("#| setupx", False),
        ("# Parameters are below", False),
        ("", False),
    ],
)
def test_setup_cells_are_known_by_their_first_line(code: str, setup: bool) -> None:
    assert is_setup_cell(code) is setup


def test_setup_sources_come_first_in_order_and_a_rerun_moves_to_the_end() -> None:
    s = Setup()
    s.add(1, "#| setup\ndef helper():\n    return 1\n")
    s.add(3, "# Parameters\nlimit = 2")
    p = s.program("x = helper()\nraise ValueError(limit)")
    assert p.text == "#| setup\ndef helper():\n    return 1\n# Parameters\nlimit = 2\nx = helper()\nraise ValueError(limit)"
    assert p.offset == 5
    assert p.where(3) == ("<setup cell 1>", 3)
    assert p.where(5) == ("<setup cell 3>", 2)
    assert p.where(7) == ("<cell>", 2)
    tb = ['  File "<program>", line 7, in <module>', '  File "<program>", line 3, in helper']
    assert p.map_traceback(tb) == [
        '  File "<cell>", line 2, in <module>',
        '  File "<setup cell 1>", line 3, in helper',
    ]
    assert p.map_message("invalid syntax (<program>, line 6)") == "invalid syntax (<cell>, line 1)"
    # Run again, setup cell 1 now comes after cell 3 (a later assignment wins).
    s.add(1, "#| setup\nlimit = 5")
    assert s.program("limit").text == "# Parameters\nlimit = 2\n#| setup\nlimit = 5\nlimit"


def test_without_setup_cells_the_program_is_the_cell() -> None:
    p = Setup().program("1 + 1")
    assert p.text == "1 + 1" and p.offset == 0
    assert p.map_traceback(['File "<program>", line 1']) == ['File "<program>", line 1']


@pytest.mark.parametrize(
    ("code", "names", "detail", "rest"),
    [
        ("tools.search?", ["tools.search"], 0, ""),
        ("tools.search??", ["tools.search"], 1, ""),
        ("  len ?  ", ["len"], 0, ""),
        ("x = 1\ntools?\n", ["tools"], 0, "x = 1"),
        ("print('?')", [], 0, "print('?')"),
        ("a ? b", [], 0, "a ? b"),
        ("x = y?.z", [], 0, "x = y?.z"),
    ],
)
def test_help_lines(code: str, names: list[str], detail: int, rest: str) -> None:
    assert help_requests(code) == (names, detail, rest)


@pytest.mark.parametrize(
    ("code", "words"),
    [
        ("%timeit 1 + 1", ["IPython magic", "plain Python", "perf_counter"]),
        ("x = 1\n%%bash\nls", ["line 2", "IPython magic"]),
        ("!pip install requests", ["shell escape", "no shell"]),
        ("  !ls -la", ["line 1", "shell escape"]),
    ],
)
def test_ipython_lines_get_a_clear_error(code: str, words: list[str]) -> None:
    message = ipython_syntax_error(code)
    assert message is not None
    for word in words:
        assert word in message


@pytest.mark.parametrize("code", ["x = 1", "x = (", "s = '%d' % 3", "print(!x)"])
def test_plain_python_and_other_errors_are_left_alone(code: str) -> None:
    assert ipython_syntax_error(code) is None


def test_assigned_names_are_the_cells_top_level_bindings() -> None:
    code = (
        "import os.path as p, json\nfrom x import (a as b, c)\nfor i, (j, k) in z: pass\n"
        "with open(f) as fh: pass\nclass C:\n    inner = 1\nasync def g(): local = 2\n"
        "n: int = 3\nm += 1\n[w for w in q]\nif (v := 1): pass\ndel gone\n"
    )
    assert assigned_names(code) == {"p", "json", "b", "c", "i", "j", "k", "fh", "C", "g", "n", "m", "v"}
    assert assigned_names("x = (") == set()


def test_name_error_hint() -> None:
    hint = name_error_hint("name 'df' is not defined", {"df": 4})
    assert hint is not None and "cell [4]" in hint and "#| setup" in hint
    assert name_error_hint("name 'other' is not defined", {"df": 4}) is None
    assert name_error_hint("free variable 'df' referenced", {"df": 4}) is None


def test_history_tail_range_search_and_output_pairs() -> None:
    h = History()
    for src in ("a = 1", "print(a)", "a = 2", "print(a)"):
        h.add(src)
    assert history_reply(h, {"hist_access_type": "tail", "n": 2})["history"] == [
        [1, 3, "a = 2"],
        [1, 4, "print(a)"],
    ]
    assert history_reply(h, {"hist_access_type": "range", "session": 0, "start": 2, "stop": 4})[
        "history"
    ] == [[1, 2, "print(a)"], [1, 3, "a = 2"]]
    assert history_reply(
        h, {"hist_access_type": "search", "pattern": "print*", "unique": True}
    )["history"] == [[1, 4, "print(a)"]]
    assert history_reply(h, {"hist_access_type": "tail", "n": 1, "output": True})["history"] == [
        [1, 4, ["print(a)", None]]
    ]
    bad = history_reply(h, {"hist_access_type": "nonsense"})
    assert bad["status"] == "error" and "nonsense" in bad["evalue"]
