"""What IPython users expect, in a real JupyterLab (Debian's Chromium): a failing cell's
traceback in IPython's form and colours (``Cell In[N]`` and ``Setup cell In[N]`` frames,
the failing line marked), and completion items that show a binding's signature and doc.

Screenshots in the light and the dark theme are written to ``docs/images/`` (what
docs/kernel.md shows) when ``KERNELGATE_SCREENSHOTS`` names that directory, else to the
test's tmp dir (the convention of test_workbench_browser.py).
"""

from __future__ import annotations

import json
import urllib.request
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


def _show_documentation_panel(lab: Lab) -> None:
    """Turn on the completer's documentation panel (Settings, Code Completion), off by
    default, through the server's settings API as the Settings editor does."""
    raw = json.dumps({"showDocumentationPanel": True})
    request = urllib.request.Request(
        f"{lab.url}/lab/api/settings/@jupyterlab/completer-extension:manager",
        data=json.dumps({"raw": raw}).encode(),
        method="PUT",
        headers={"Authorization": f"token {lab.token}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.status in (200, 204)


def test_completion_items_show_the_signature_and_doc(
    lab: Lab, browser: Any, tmp_path: Path
) -> None:
    (lab.root / "complete.ipynb").write_text(
        json.dumps(test_workbench_browser._empty_notebook()), encoding="utf-8"
    )
    _show_documentation_panel(lab)
    page = browser.new_page()
    page.set_viewport_size({"width": 1100, "height": 420})
    try:
        page.goto(f"{lab.url}/lab/workspaces/wb-co/tree/complete.ipynb?reset&token={lab.token}")
        page.wait_for_function(_APP_READY, timeout=STEP_MS)
        page.evaluate("() => window.jupyterapp.commands.execute('application:toggle-left-area')")
        page.locator(".jp-Cell .cm-content").first.click()
        page.keyboard.type("await tools.")
        page.keyboard.press("Tab")
        item = page.locator(".jp-Completer-item", has_text="search").first
        item.wait_for(state="visible", timeout=STEP_MS)
        # JupyterLab shows the item's `type` beside it (lowercased) and in full as its tooltip,
        # on one line; the doc in its documentation panel (the kernel's inspect_reply).
        shown = item.locator(".jp-Completer-typeExtended")
        text = shown.inner_text().replace("\u00a0", " ")
        assert text == "function search(query: str, limit: int = 3)"
        height = shown.evaluate("(e) => e.getBoundingClientRect().height")
        assert height <= item.evaluate("(e) => e.getBoundingClientRect().height")
        assert item.locator(".jp-Completer-monogram").inner_text() == "f"
        # The list is compute, fetch, search: make search the active item.
        page.keyboard.press("ArrowDown")
        page.keyboard.press("ArrowDown")
        active = page.locator(".jp-Completer-item.jp-mod-active")
        assert active.get_attribute("data-value") == "search"
        doc = page.locator(".jp-Completer-docpanel")
        doc.wait_for(state="visible", timeout=STEP_MS)
        page.wait_for_function(
            "() => document.querySelector('.jp-Completer-docpanel').innerText"
            ".includes('Find documents whose title')",
            timeout=STEP_MS,
        )
        for dark in (False, True):
            test_workbench_browser._theme(page, dark)
            if not item.is_visible():  # a theme change may close the completer: open it again
                page.locator(".jp-Cell .cm-content").first.click()
                page.keyboard.press("End")
                page.keyboard.press("Tab")
                item.wait_for(state="visible", timeout=STEP_MS)
                page.keyboard.press("ArrowDown")
                page.keyboard.press("ArrowDown")
            name = f"kernel-completion-{'dark' if dark else 'light'}.png"
            test_workbench_browser._screenshot(page, tmp_path, name)
        test_workbench_browser._theme(page, False)
    finally:
        page.close()
