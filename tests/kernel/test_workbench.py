"""The kernel as a notebook user expects it (a real kernel, this module's own): setup cells,
``obj?`` help, IPython syntax refused clearly, the NameError hint, history.

Setup cells are kept for the kernel's life, so each test here uses names of its own.
"""

from __future__ import annotations

from typing import Any

from jupyter_client.blocking.client import BlockingKernelClient

from kernelgate.model.text import strip_ansi

from .helpers import execute


def _record(cell: Any) -> dict[str, Any]:
    """The run record: the last display_data, whose metadata is the run's."""
    last = cell.outputs("display_data")[-1]["content"]
    meta: dict[str, Any] = last["metadata"]["kernelgate"]
    assert meta["role"] == "run"
    return meta


def test_a_setup_cell_is_kept_and_runs_before_later_cells(kc: BlockingKernelClient) -> None:
    setup = execute(kc, "#| setup\ndef twice(n):\n    return 2 * n\nlimit_a = 3\n")
    assert setup.status == "ok"
    # Not run on its own: no run record, one note saying what happened.
    [note] = setup.outputs("display_data")
    assert note["content"]["metadata"]["kernelgate"]["role"] == "setup"
    assert "runs before every later cell" in note["content"]["data"]["text/plain"]
    cell = execute(kc, "print(twice(limit_a))")
    assert cell.status == "ok" and cell.stdout() == "6\n"
    record = _record(cell)
    # The recorded program is the one that ran: setup, then the cell.
    assert record["program"].startswith("#| setup\ndef twice(n):")
    assert record["program"].endswith("print(twice(limit_a))")


def test_a_later_setup_cell_wins_and_papermill_parameters_count(kc: BlockingKernelClient) -> None:
    execute(kc, "#| setup\nlimit_b = 1")
    execute(kc, "# Parameters\nlimit_b = 5\n")  # what papermill injects
    assert execute(kc, "limit_b").outputs("execute_result")[0]["content"]["data"] == {
        "text/plain": "5"
    }


def test_errors_keep_the_cells_own_line_numbers(kc: BlockingKernelClient) -> None:
    execute(kc, "#| setup\nlimit_c = 1\nlimit_c2 = 2\n")
    cell = execute(kc, "x = 1\nraise ValueError('line two')")
    assert cell.status == "error"
    traceback = strip_ansi("\n".join(cell.reply["content"]["traceback"] if cell.reply else []))
    count = cell.reply["content"]["execution_count"]  # type: ignore[index]
    assert f"Cell In[{count}], line 2" in traceback, traceback
    [error] = cell.outputs("error")
    assert error["content"]["traceback"] == cell.reply["content"]["traceback"]  # type: ignore[index]
    # The run record keeps the run's own error (a replay of its program compares equal).
    assert _record(cell)["error"]["ename"] == "ValueError"


def test_a_setup_cell_that_does_not_parse_is_refused(kc: BlockingKernelClient) -> None:
    cell = execute(kc, "#| setup\nlimit_d = (")
    assert cell.status == "error"
    assert "setup cell" in cell.reply["content"]["evalue"]  # type: ignore[index]
    assert "not kept" in cell.reply["content"]["evalue"]  # type: ignore[index]
    assert execute(kc, "1 + 1").status == "ok"  # later cells are not broken by it


def test_help_with_a_question_mark_uses_the_pager(kc: BlockingKernelClient) -> None:
    for code, wanted in (
        ("tools.search?", "async def search("),
        ("len??", "Return the number of items"),
        ("json.dumps?", "Serialize"),
        ("tools?", "class tools"),
    ):
        cell = execute(kc, code)
        assert cell.status == "ok", code
        [page] = cell.reply["content"]["payload"]  # type: ignore[index]
        assert page["source"] == "page" and wanted in page["data"]["text/plain"], code
        assert "``" not in page["data"]["text/plain"]
        assert cell.outputs() == []  # nothing ran


def test_help_for_a_name_the_cell_defines_says_why_not(kc: BlockingKernelClient) -> None:
    cell = execute(kc, "def mine():\n    'doc'\nmine?")
    [page] = cell.reply["content"]["payload"]  # type: ignore[index]
    assert "defined by this cell" in page["data"]["text/plain"]
    assert cell.status == "ok"  # the rest of the cell ran
    assert _record(cell)["status"] == "ok"


def test_magics_and_shell_escapes_are_refused_clearly(kc: BlockingKernelClient) -> None:
    for code, wanted in (
        ("%timeit sum(range(9))", "is an IPython magic; this kernel runs plain Python"),
        ("x = 1\n!ls -l", "is an IPython shell escape"),
    ):
        cell = execute(kc, code)
        assert cell.status == "error"
        assert cell.reply is not None and wanted in cell.reply["content"]["evalue"]
        [error] = cell.outputs("error")
        assert wanted in error["content"]["evalue"]
        assert cell.outputs("display_data") == []  # no child ran: no run record


def test_history_tail_range_and_search(kc: BlockingKernelClient) -> None:
    for code in ("'h1'", "'h2'", "'h1'"):
        execute(kc, code)
    kc.history(hist_access_type="tail", n=3)
    tail = kc.get_shell_msg(timeout=10)["content"]["history"]
    assert [h[2] for h in tail] == ["'h1'", "'h2'", "'h1'"]
    kc.history(hist_access_type="search", pattern="'h*", unique=True)
    found = kc.get_shell_msg(timeout=10)["content"]["history"]
    assert [h[2] for h in found] == ["'h2'", "'h1'"]
    start = tail[0][1]
    kc.history(hist_access_type="range", session=0, start=start, stop=start + 2)
    assert [h[2] for h in kc.get_shell_msg(timeout=10)["content"]["history"]] == ["'h1'", "'h2'"]


def test_a_rich_final_expression_renders_and_its_value_stays_none(
    kc: BlockingKernelClient,
) -> None:
    code = (
        "class Table:\n"
        "    def _repr_html_(self):\n"
        "        return '<table><tr><td>1</td></tr></table><script>x()</script>'\n"
        "    def _repr_json_(self):\n"
        "        return {'rows': 1}\n"
        "Table()"
    )
    cell = execute(kc, code)
    assert cell.status == "ok"
    [result] = cell.outputs("execute_result")
    data = result["content"]["data"]
    # The object's HTML (sanitized, as every output), its repr; not taken for the value.
    assert "<td>1</td>" in data["text/html"] and "script" not in data["text/html"]
    assert data["text/plain"].startswith("<__main__.Table object at ")
    assert "application/json" not in data
    record = _record(cell)
    assert "value" not in record and "is not JSON, so value is None" in record["note"]
