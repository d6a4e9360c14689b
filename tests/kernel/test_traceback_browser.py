"""A failing cell's traceback in a real JupyterLab (Debian's Chromium): IPython's form and
colours, ``Cell In[N]`` and ``Setup cell In[N]`` frames, the failing line marked.

Screenshots in the light and the dark theme are written to ``docs/images/`` (what
docs/kernel.md shows) when ``KERNELGATE_SCREENSHOTS`` names that directory, else to the
test's tmp dir (the convention of test_workbench_browser.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from . import test_browser, test_workbench_browser
from .helpers import KERNEL_NAME
from .test_browser import _APP_READY, STEP_MS, Lab

# The same JupyterLab server and Chromium fixtures (a server of this module's own).
lab = test_browser.lab
browser = test_browser.browser

pytestmark = pytest.mark.timeout(300)

_SETUP = "#| setup\ndef mean(values):\n    return sum(values) / len(values)\n"
_CELL = "scores = {'a': [3, 5], 'b': []}\nfor name, values in scores.items():\n    print(name, mean(values))\n"


def _notebook() -> dict[str, Any]:
    def cell(n: int, source: str) -> dict[str, Any]:
        return {
            "cell_type": "code",
            "execution_count": None,
            "id": f"c{n}",
            "metadata": {},
            "outputs": [],
            "source": source,
        }

    return {
        "cells": [cell(1, _SETUP), cell(2, _CELL)],
        "metadata": {
            "kernelspec": {"name": KERNEL_NAME, "display_name": "kernelgate", "language": "python"},
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }


def test_a_failing_cell_shows_an_ipython_traceback(lab: Lab, browser: Any, tmp_path: Path) -> None:
    (lab.root / "failing.ipynb").write_text(json.dumps(_notebook()), encoding="utf-8")
    page = browser.new_page()
    page.set_viewport_size({"width": 1100, "height": 640})
    try:
        page.goto(f"{lab.url}/lab/workspaces/wb-tb/tree/failing.ipynb?reset&token={lab.token}")
        page.wait_for_function(_APP_READY, timeout=STEP_MS)
        # The file browser closed: the picture is the notebook, IPython's 75 columns unwrapped.
        page.evaluate("() => window.jupyterapp.commands.execute('application:toggle-left-area')")
        page.locator(".jp-Cell .cm-content").first.click()
        page.keyboard.press("Shift+Enter")
        page.keyboard.press("Shift+Enter")
        error = page.locator(
            ".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']"
        )
        error.last.wait_for(state="visible", timeout=STEP_MS)
        page.wait_for_function(
            "() => [...document.querySelectorAll('.jp-OutputArea-output')]"
            ".some(e => e.innerText.includes('ZeroDivisionError: division by zero'))",
            timeout=STEP_MS,
        )
        text = error.last.inner_text()
        assert "Cell In[2], line 3" in text, text
        assert "Setup cell In[1], line 3, in mean" in text, text
        assert "----> 3" in text, text
        # Coloured by JupyterLab from the ANSI codes, as an ipykernel traceback is.
        assert error.last.locator("span.ansi-red-fg").count() > 0
        assert error.last.locator("span.ansi-green-fg").count() > 0
        for dark in (False, True):
            test_workbench_browser._theme(page, dark)
            name = f"kernel-traceback-{'dark' if dark else 'light'}.png"
            test_workbench_browser._screenshot(page, tmp_path, name)
        test_workbench_browser._theme(page, False)
    finally:
        page.close()
