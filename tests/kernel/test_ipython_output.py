"""What a Jupyter user sees as in IPython, through real clients and a real kernel: a failing
cell's coloured ``Cell In[N], line L`` traceback (inert whatever the exception says), plain
text for agents and recordings read back, and completion items with the binding's
signature and doc.

Setup cells are kept for the kernel's life, so each test here uses names of its own.
"""

from __future__ import annotations

import asyncio
import pathlib
import re
from typing import Any

import nbformat
from jupyter_client.blocking.client import BlockingKernelClient
from jupyter_client.manager import AsyncKernelManager
from nbclient import NotebookClient
from nbformat.v4 import new_code_cell, new_notebook

from kernelgate import RemoteGateway
from kernelgate.model.text import strip_ansi
from kernelgate.notebooks import load_run, replay

from .helpers import KERNEL_NAME, TIMEOUT, execute

#: The colours the kernel's traceback uses (IPython's); no other escape sequence may appear.
_OURS = re.compile(r"\x1b\[(?:0;31|0;32|1;32|0;36|43|49|0)m")


def _error_lines(cell: Any) -> list[str]:
    [error] = cell.outputs("error")
    lines: list[str] = error["content"]["traceback"]
    assert cell.reply is not None and cell.reply["content"]["traceback"] == lines
    return lines


def _record_error(cell: Any) -> dict[str, Any]:
    last = cell.outputs("display_data")[-1]["content"]["metadata"]["kernelgate"]
    assert last["role"] == "run"
    error: dict[str, Any] = last["error"]
    return error


def test_a_failing_cell_shows_an_ipython_traceback(kc: BlockingKernelClient) -> None:
    setup = execute(kc, "#| setup\ndef ipy_g(n):\n    return n / 0\n")
    assert setup.status == "ok"
    setup_count = setup.reply["content"]["execution_count"]  # type: ignore[index]
    cell = execute(kc, "def ipy_f(x):\n    y = 1\n    return ipy_g(x) + y\n\nprint(1)\nipy_f(2)")
    assert cell.status == "error"
    count = cell.reply["content"]["execution_count"]  # type: ignore[index]
    lines = _error_lines(cell)
    assert any("\x1b[" in line for line in lines), lines  # coloured, as IPython's
    plain = [strip_ansi(line) for line in lines]
    assert plain[0] == "-" * 75
    assert plain[1].startswith("ZeroDivisionError ")
    assert plain[1].endswith("Traceback (most recent call last)")
    assert plain[-1] == "ZeroDivisionError: division by zero"
    frames = plain[2:-1]
    assert [f.split("\n", 1)[0] for f in frames] == [
        f"Cell In[{count}], line 6",
        f"Cell In[{count}], line 3, in ipy_f",
        f"Setup cell In[{setup_count}], line 3, in ipy_g",
    ]
    # Context lines numbered as the cell's own, the failing line marked.
    assert frames[0].split("\n")[1:] == [
        "      3     return ipy_g(x) + y",
        "      5 print(1)",
        "----> 6 ipy_f(2)",
        "",
    ]
    assert "----> 3     return n / 0" in frames[2]
    # The failing expression is highlighted, as IPython does.
    assert "\x1b[43mipy_g(x)\x1b[49m" in lines[3]
    # Plain for everything but the notebook's view: the run record keeps the run's error.
    recorded = _record_error(cell)
    assert recorded["ename"] == "ZeroDivisionError"
    assert not any("\x1b" in line for line in recorded["traceback"])
    assert recorded["traceback"][0] == "Traceback (most recent call last):"


def test_a_syntax_error_points_into_the_cell(kc: BlockingKernelClient) -> None:
    execute(kc, "#| setup\nipy_limit = 1\n")
    cell = execute(kc, "x = (")
    count = cell.reply["content"]["execution_count"]  # type: ignore[index]
    plain = [strip_ansi(line) for line in _error_lines(cell)]
    assert plain[0].split("\n")[0] == f"  Cell In[{count}], line 1"
    assert plain[-1].startswith("SyntaxError: ")


def test_a_hostile_exception_message_stays_inert(kc: BlockingKernelClient) -> None:
    # Clear the screen, set the title, write the clipboard (OSC 52), an 8-bit CSI, a
    # carriage return, and lines made up as frames and as a new exception of the chain.
    message = (
        "\\x1b[2J\\x1b]0;owned\\x07\\x1b]52;c;ZXZpbA==\\x07\\x9b31m\\rpadding\\n"
        "Traceback (most recent call last):\\n"
        '  File \\"<program>\\", line 1, in forged\\n'
        "    nothing = 1\\n"
        "FakeError: \\x1b[0m"
    )
    notes = (
        "e.add_note('Traceback (most recent call last):\\n  File \"<program>\", line 1, in noted')"
    )
    cell = execute(kc, f"e = ValueError('{message}')\n{notes}\nraise e")
    assert cell.status == "error"
    lines = _error_lines(cell)
    text = "\n".join(lines)
    # The only escape sequences are the kernel's own colours; no C1 CSI, no CR.
    assert "\x1b" not in _OURS.sub("", text), ascii(text)
    assert "\x9b" not in text and "\r" not in text and "\x07" not in text
    plain = strip_ansi(text)
    assert "\\x1b]52;c;ZXZpbA==\\x07" in plain and "\\x9b31m\\rpadding" in plain
    # One frame only: the message's and the note's made-up frames are shown as text.
    assert re.findall(r"^Cell In\[\d+\], line \d+.*$", plain, re.M) == [
        f"Cell In[{cell.reply['content']['execution_count']}], line 3"  # type: ignore[index]
    ]
    assert "In[" not in plain.split("ValueError: ", 1)[1]


def test_agents_get_plain_text_from_remote_gateway() -> None:
    async def main() -> None:
        km = AsyncKernelManager(kernel_name=KERNEL_NAME)
        await km.start_kernel()
        kc = km.client()
        kc.start_channels()
        try:
            async with RemoteGateway(kc) as gw:
                r = await asyncio.wait_for(gw.run("def f():\n    1 / 0\nf()"), TIMEOUT)
        finally:
            kc.stop_channels()
            await km.shutdown_kernel()
        assert r.status == "exception" and r.error is not None
        assert r.error.traceback[0] == "Traceback (most recent call last):"
        assert r.error.traceback[-1] == "ZeroDivisionError: division by zero"
        [shown] = [o for o in r.outputs if o["output_type"] == "error"]
        for line in [*r.error.traceback, *shown["traceback"]]:
            assert "\x1b" not in line, line

    asyncio.run(main())


def test_a_saved_notebook_reads_its_error_back_plainly(tmp_path: pathlib.Path) -> None:
    nb = new_notebook(
        cells=[new_code_cell("#| setup\nk = 0"), new_code_cell("x = 1\n1 / k")],
        metadata={
            "kernelspec": {"name": KERNEL_NAME, "display_name": "kernelgate", "language": "python"}
        },
    )
    NotebookClient(nb, kernel_name=KERNEL_NAME, timeout=60, allow_errors=True).execute()
    [error] = [o for o in nb.cells[1].outputs if o.output_type == "error"]
    assert any("\x1b[" in line for line in error.traceback)  # what JupyterLab shows
    path = tmp_path / "failed.ipynb"
    nbformat.write(nb, path)
    run = load_run(path, cell=2)
    assert run.status == "exception" and run.error is not None
    assert run.error.traceback[-1] == "ZeroDivisionError: division by zero"
    [read] = [o for o in run.outputs if o["output_type"] == "error"]
    for line in [*run.error.traceback, *read["traceback"]]:
        assert "\x1b" not in line, line
    assert strip_ansi(read["traceback"][-1]) == read["traceback"][-1]
    assert read["traceback"][-1] == "ZeroDivisionError: division by zero"
    # Replayed, the failing run compares equal to its recording (the record is plain).
    report = replay(path, cell=2)
    assert not report.diverged, report.differences
    assert report.result.error is not None
    assert not any("\x1b" in line for line in report.result.error.traceback)


def test_completion_items_carry_the_signature_and_the_doc(kc: BlockingKernelClient) -> None:
    signature = "(query: str, limit: int = 3) -> list[dict[str, Any]]"
    for code in ("tools.se", "tools['se"):
        msg_id = kc.complete(code, len(code))
        reply = kc.get_shell_msg(timeout=TIMEOUT)
        assert reply["parent_header"]["msg_id"] == msg_id
        content = reply["content"]
        assert content["matches"] == ["search"]  # what is inserted stays the name
        [item] = content["metadata"]["_jupyter_types_experimental"]
        assert item["signature"] == signature
        # JupyterLab 4 shows `type` (its first letter as the icon): the kind, then the
        # parameters, with no-break spaces (its column would wrap the text onto itself).
        params = "(query: str, limit: int = 3)"
        assert item["type"] == "function\u00a0search" + params.replace(" ", "\u00a0")
        assert item["text"] == "search" and item["end"] == len(code)
    # The doc: what JupyterLab's completer shows in its documentation panel, the
    # inspect_reply for the completed name (the binding's stub and whole doc).
    msg_id = kc.inspect("await tools.search", len("await tools.search"))
    reply = kc.get_shell_msg(timeout=TIMEOUT)
    assert reply["parent_header"]["msg_id"] == msg_id
    text = reply["content"]["data"]["text/plain"]
    assert "async def search(query: str, limit: int = 3)" in text
    assert "Find documents whose title or text mentions every word of query." in text
