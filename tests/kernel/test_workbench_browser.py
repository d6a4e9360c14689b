"""The notebook as the workbench, in a real JupyterLab driven by Debian's Chromium.

1. Live: a new kernelgate notebook; type ``await tools.``, accept a completion, run the
   cell; the call display and the value show, readable (text contrast of at least 4.5:1)
   in the light and the dark theme.
2. Recorded: a saved run opens untrusted (as any downloaded notebook does); its calls, its
   output and its timeline show all the same, in both themes, and opening it leaves it
   unmodified.

Screenshots of both, in both themes, are written to ``docs/images/`` (what docs/kernel.md
shows) when ``KERNELGATE_SCREENSHOTS`` names that directory, else to the test's tmp dir.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
from pathlib import Path
from typing import Any

import pytest

from kernelgate import save_run

from . import test_browser
from .conftest import NEEDS_CHROMIUM
from .helpers import KERNEL_NAME
from .test_browser import _APP_READY, STEP_MS, Lab

# The same JupyterLab server and Chromium fixtures (a server of this module's own).
lab = test_browser.lab
browser = test_browser.browser

pytestmark = [pytest.mark.timeout(300), NEEDS_CHROMIUM]

# WCAG contrast of an element's text against the first opaque background behind it.
_CONTRAST = """(el) => {
  const parse = (c) => { const m = c.match(/[\\d.]+/g).map(Number);
                         return {r: m[0], g: m[1], b: m[2], a: m.length > 3 ? m[3] : 1}; };
  const lum = (c) => { const f = (v) => { v /= 255;
      return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); };
    return 0.2126 * f(c.r) + 0.7152 * f(c.g) + 0.0722 * f(c.b); };
  let bg = null;
  for (let n = el; n; n = n.parentElement) {
    const c = parse(getComputedStyle(n).backgroundColor);
    if (c.a > 0.5) { bg = c; break; }
  }
  if (!bg) bg = parse(getComputedStyle(document.body).backgroundColor);
  const fg = parse(getComputedStyle(el).color);
  const [hi, lo] = [lum(fg), lum(bg)].sort((a, b) => b - a);
  return (hi + 0.05) / (lo + 0.05);
}"""


def _shots() -> Path | None:
    where = os.environ.get("KERNELGATE_SCREENSHOTS")
    return Path(where) if where else None


def _theme(page: Any, dark: bool) -> None:
    name = "JupyterLab Dark" if dark else "JupyterLab Light"
    page.evaluate(
        "(t) => window.jupyterapp.commands.execute('apputils:change-theme', {theme: t})", name
    )
    page.wait_for_function(
        "(light) => document.body.dataset.jpThemeLight === light", arg=str(not dark).lower()
    )
    # Changing the theme shows JupyterLab's splash until the new one is in: wait it out, so
    # contrast is measured (and screenshots taken) on the page, not on the overlay.
    page.wait_for_selector("#jupyterlab-splash", state="detached", timeout=STEP_MS)


def _screenshot(page: Any, tmp: Path, name: str) -> None:
    # JupyterLab's "get notified about news?" toast would sit over the outputs: hidden
    # from the picture only (the page's state is left alone).
    page.add_style_tag(content=".Toastify { display: none !important; }")
    target = _shots() or tmp
    target.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(target / name), full_page=False)


def _empty_notebook() -> dict[str, Any]:
    return {
        "cells": [
            {
                "cell_type": "code",
                "execution_count": None,
                "id": "c1",
                "metadata": {},
                "outputs": [],
                "source": "",
            },
        ],
        "metadata": {
            "kernelspec": {"name": KERNEL_NAME, "display_name": "kernelgate", "language": "python"},
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }


_NO_CELL_TRUSTED = """() => {
  const cells = window.jupyterapp.shell.currentWidget.content.model.cells;
  for (let i = 0; i < cells.length; i++) if (cells.get(i).trusted) return false;
  return true;
}"""


def _min_contrast(page: Any, selector: str) -> float:
    elements = page.locator(selector)
    assert elements.count() > 0, f"nothing matches {selector!r}"
    return min(elements.nth(i).evaluate(_CONTRAST) for i in range(elements.count()))


def test_live_completion_call_and_value(lab: Lab, browser: Any, tmp_path: Path) -> None:
    (lab.root / "explore.ipynb").write_text(json.dumps(_empty_notebook()), encoding="utf-8")
    page = browser.new_page()
    page.set_viewport_size({"width": 1100, "height": 760})
    try:
        page.goto(f"{lab.url}/lab/workspaces/wb-live/tree/explore.ipynb?reset&token={lab.token}")
        page.wait_for_function(_APP_READY, timeout=STEP_MS)
        editor = page.locator(".jp-Cell .cm-content").first
        editor.click()
        page.keyboard.type("await tools.")
        page.keyboard.press("Tab")
        # The completer lists the bindings (the kernel's complete_reply); accept "search".
        item = page.locator(".jp-Completer-item", has_text="search").first
        item.wait_for(state="visible", timeout=STEP_MS)
        item.click()
        page.keyboard.type('("notebook", limit=2)')
        assert "await tools.search(" in editor.inner_text()
        page.keyboard.press("Shift+Enter")
        call = page.locator(".jp-OutputArea-output details.kernelgate-call").first
        call.wait_for(state="visible", timeout=STEP_MS)
        assert "tools.search(" in call.inner_text()
        result = page.locator(".jp-OutputArea-output[data-mime-type='text/plain']").last
        result.wait_for(state="visible", timeout=STEP_MS)
        # The value as its repr (what ipykernel shows), not a collapsed JSON tree.
        assert "The notebook format" in result.inner_text()
        assert page.locator(".jp-OutputArea-output .jp-RenderedJSON").count() == 0
        for dark in (False, True):
            _theme(page, dark)
            contrast = _min_contrast(page, ".jp-OutputArea-output .kernelgate-call summary code")
            assert contrast >= 4.5, f"call summary contrast {contrast:.2f} (dark={dark})"
            _screenshot(page, tmp_path, f"kernel-live-{'dark' if dark else 'light'}.png")
        _theme(page, False)
    finally:
        page.close()


def _record_run(path: Path) -> None:
    """A run with a good and a failing call, saved as kernelgate saves runs."""
    from kernelgate import Gateway
    from kernelgate.demo import BINDINGS

    program = (
        'docs = await tools.search("notebook", limit=2)\n'
        "print(len(docs), 'found')\n"
        "try:\n"
        '    await tools.fetch("no-such-doc")\n'
        "except ToolError as e:\n"
        "    print('fetch failed:', e.ename)\n"
        "[d['title'] for d in docs]\n"
    )
    # Playwright's sync API keeps an event loop running in this thread: run from another.
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        result = pool.submit(Gateway(bindings=BINDINGS).run_sync, program).result(timeout=120)
    assert result.ok, result.message
    assert [c.ok for c in result.calls] == [True, False]
    save_run(result, path)


def test_a_recorded_run_opens_untrusted_with_its_timeline(
    lab: Lab, browser: Any, tmp_path: Path
) -> None:
    name = "recorded.ipynb"
    _record_run(lab.root / name)
    before = (lab.root / name).read_bytes()
    page = browser.new_page()
    page.set_viewport_size({"width": 1100, "height": 900})
    try:
        page.goto(f"{lab.url}/lab/workspaces/wb-rec/tree/{name}?reset&token={lab.token}")
        page.wait_for_function(_APP_READY, timeout=STEP_MS)
        # Untrusted, as every notebook is that this server has not signed.
        assert page.evaluate(_NO_CELL_TRUSTED)
        calls = page.locator(".jp-OutputArea-output details.kernelgate-call")
        calls.first.wait_for(state="visible", timeout=STEP_MS)
        assert calls.count() == 2
        shown = " ".join(page.locator(".jp-OutputArea-output").all_inner_texts())
        assert "found" in shown and "fetch failed: KeyError" in shown, shown
        # The timeline renders although the notebook is untrusted: an <img> of the SVG.
        timeline = page.locator(".jp-OutputArea-output img[src^='data:image/svg+xml']").first
        timeline.wait_for(state="visible", timeout=STEP_MS)
        assert timeline.evaluate("(img) => img.complete && img.naturalWidth > 100")
        for dark in (False, True):
            _theme(page, dark)
            contrast = _min_contrast(page, ".jp-OutputArea-output .kernelgate-call summary code")
            assert contrast >= 4.5, f"call summary contrast {contrast:.2f} (dark={dark})"
            _screenshot(page, tmp_path, f"kernel-recorded-{'dark' if dark else 'light'}.png")
        _theme(page, False)
        # Opening it changed nothing: the notebook is not "modified" (no save prompt).
        assert page.evaluate("() => !window.jupyterapp.shell.currentWidget.context.model.dirty")
    finally:
        page.close()
    assert (lab.root / name).read_bytes() == before
