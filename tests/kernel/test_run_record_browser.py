"""A kernel cell's run record and its call timeline, in a real JupyterLab in Chromium.

1. The timeline stays readable at the width it gets: its text is 11 px and no label is cut
   by the edge or runs into another label or bar, at 830 px (what JupyterLab gives an
   output at a 1100 px window), at 600 px (the narrowest width it is laid out for) and
   wide. Measured on the real ``<img>`` the notebook holds: its SVG is re-drawn inline at
   the image's rendered size (what an ``<img>`` does with it), where text can be measured
   (nothing inside an ``<img>`` can be).
2. The run record (the ``run ok · N calls · T ms`` line under a cell) opens with a click
   onto the timeline, the usage, the isolation, the limits and the run id: live, and in
   the saved notebook re-opened untrusted (as a downloaded one is), with no script.

Screenshots of the opened record, light and dark, go to ``docs/images/`` (what
docs/kernel.md shows) when ``KERNELGATE_SCREENSHOTS`` names that directory.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kernelgate import CallRecord, ErrorInfo, RunResult
from kernelgate.notebooks.render import timeline_img
from kernelgate.notebooks.timeline import MIN_WIDTH

from . import test_browser
from .helpers import KERNEL_NAME
from .test_browser import _APP_READY, STEP_MS, Lab
from .test_workbench_browser import _NO_CELL_TRUSTED, _screenshot, _theme

# The same JupyterLab server and Chromium fixtures (a server of this module's own, started
# only by the tests that ask for it).
lab = test_browser.lab
browser = test_browser.browser

pytestmark = pytest.mark.timeout(300)

FONT_PX = 11.0

# An <img>'s SVG re-drawn inline at the image's rendered size, and its text measured:
# the size text is drawn at (font size x the drawing's scale), and where each text, bar
# and label lies, relative to the drawing.
_MEASURE = """(img) => {
  const box = img.getBoundingClientRect();
  const b64 = img.getAttribute('src').split(',')[1];
  const xml = new TextDecoder().decode(Uint8Array.from(atob(b64), (c) => c.charCodeAt(0)));
  const doc = new DOMParser().parseFromString(xml, 'image/svg+xml');
  const svg = document.importNode(doc.documentElement, true);
  svg.setAttribute('width', box.width);
  svg.setAttribute('height', box.height);
  const host = document.createElement('div');
  host.style.cssText = 'position:fixed;left:0;top:0;z-index:2147483647';
  host.appendChild(svg);
  document.body.appendChild(host);
  try {
    const at = svg.getBoundingClientRect();
    const rel = (r) => ({l: r.left - at.left, r: r.right - at.left,
                         t: r.top - at.top, b: r.bottom - at.top});
    const texts = [...svg.querySelectorAll('text')].map((t) => ({
      text: t.textContent,
      px: parseFloat(getComputedStyle(t).fontSize) * t.getScreenCTM().a,
      bar: t.parentNode.querySelector('rect.call')?.dataset.callId ?? null,
      ...rel(t.getBoundingClientRect()),
    }));
    const bars = [...svg.querySelectorAll('rect.call')].map((r) => ({
      id: r.dataset.callId, ...rel(r.getBoundingClientRect()),
    }));
    return {width: box.width, height: box.height, drawn: at.width, texts, bars,
            parent: img.parentElement.clientWidth, minWidth: img.style.minWidth};
  } finally {
    host.remove();
  }
}"""

# JupyterLab's own rule for images in HTML outputs (.jp-RenderedHTMLCommon img): a wider
# picture is scaled down to the output's width.
_LAB_IMG_CSS = "img { max-width: 100%; height: auto; }"


def _overlap(a: dict[str, Any], b: dict[str, Any], slack: float = 0.5) -> bool:
    across = min(a["r"], b["r"]) - max(a["l"], b["l"])
    down = min(a["b"], b["b"]) - max(a["t"], b["t"])
    return bool(across > slack and down > slack)


def _assert_readable(m: dict[str, Any], where: str) -> None:
    """Text at 11 px, inside the drawing, never over another text or another call's bar."""
    assert m["texts"], where
    small = [(t["text"], round(t["px"], 2)) for t in m["texts"] if t["px"] < FONT_PX - 0.01]
    assert not small, f"{where}: text drawn below {FONT_PX} px: {small[:5]}"
    cut = [t["text"] for t in m["texts"] if t["l"] < -0.5 or t["r"] > m["drawn"] + 0.5]
    assert not cut, f"{where}: text cut by the edge of a {m['drawn']:.0f} px drawing: {cut}"
    texts = m["texts"]
    for i, a in enumerate(texts):
        for b in texts[i + 1 :]:
            assert not _overlap(a, b), f"{where}: {a['text']!r} runs into {b['text']!r}"
        for bar in m["bars"]:
            if a["bar"] is not None and bar["id"] != a["bar"]:
                assert not _overlap(a, bar), f"{where}: {a['text']!r} covers call #{bar['id']}"


def _crowded_run() -> RunResult:
    """Calls that test a layout: forty short steps beside a long call, long arguments, a
    failure, calls at both ends and one in the middle whose label fits on neither side."""
    calls = [
        CallRecord(i, "tools", "step", [i], {}, ok=True, start_s=0.05 + i * 0.01, duration_s=0.004)
        for i in range(40)
    ]
    calls.append(
        CallRecord(
            40,
            "tools",
            "long",
            ["x" * 80],
            {"k": "y" * 40},
            ok=True,
            start_s=0.05,
            duration_s=0.4,
        )
    )
    failed = CallRecord(
        41,
        "tools",
        "fetch",
        ["no-such-document-at-all"],
        {},
        ok=False,
        start_s=0.44,
        duration_s=0.01,
    )
    failed.error = ErrorInfo("KeyError", "no-such-document-at-all")
    calls.append(failed)
    calls.append(
        CallRecord(
            42,
            "web",
            "search",
            ["a rather long query " * 3],
            {"limit": 30},
            ok=True,
            start_s=0.26,
            duration_s=0.002,
        )
    )
    return RunResult("ok", run_id="crowded", duration_s=0.46, calls=calls)


def _few_calls_run() -> RunResult:
    calls = [
        CallRecord(
            0, "tools", "search", ["notebook"], {"limit": 2}, ok=True, start_s=0.9, duration_s=0.02
        ),
        CallRecord(1, "tools", "fetch", ["doc-1"], {}, ok=True, start_s=0.93, duration_s=0.01),
    ]
    return RunResult("ok", run_id="0123456789abcdef" * 2, duration_s=1.4, calls=calls)


@pytest.mark.parametrize("width", [830, MIN_WIDTH, 1400])
@pytest.mark.parametrize("run", [_crowded_run, _few_calls_run], ids=["crowded", "few"])
def test_timeline_text_keeps_its_size_at_the_width_it_gets(
    browser: Any, width: int, run: Any
) -> None:
    page = browser.new_page()
    page.set_viewport_size({"width": width + 100, "height": 800})
    try:
        page.set_content(
            f"<style>{_LAB_IMG_CSS}</style>"
            f'<div id="out" style="width:{width}px">{timeline_img(run())}</div>'
        )
        img = page.locator("#out img")
        img.wait_for(state="visible", timeout=STEP_MS)
        page.wait_for_function("() => document.querySelector('#out img').complete")
        m = img.evaluate(_MEASURE)
        # The drawing follows the width it gets (neither wider nor scaled down) ...
        assert abs(m["width"] - width) < 1, m["width"]
        # ... and its text keeps its size, inside the drawing, with nothing overlapping.
        _assert_readable(m, f"{run.__name__} at {width} px")
    finally:
        page.close()


# -- the run record, live and re-opened ----------------------------------------------------

PROGRAM = (
    'docs = await tools.search("notebook", limit=2)\n'
    "try:\n"
    '    await tools.fetch("no-such-doc")\n'
    "except ToolError as e:\n"
    "    print('fetch failed:', e.ename)\n"
    "len(docs)\n"
)

# Whether some box holding the element lets its overflow be scrolled to.
_SCROLLS_SIDEWAYS = """(el) => {
  for (let n = el.parentElement; n; n = n.parentElement) {
    const o = getComputedStyle(n).overflowX;
    if (n.scrollWidth > n.clientWidth + 1) return o === 'auto' || o === 'scroll';
  }
  return false;
}"""

_ROWS = ("run id", "status", "isolation", "CPU", "wall time", "limits")


def _notebook(source: str) -> dict[str, Any]:
    return {
        "cells": [
            {
                "cell_type": "code",
                "execution_count": None,
                "id": "c1",
                "metadata": {},
                "outputs": [],
                "source": source,
            },
        ],
        "metadata": {
            "kernelspec": {"name": KERNEL_NAME, "display_name": "kernelgate", "language": "python"},
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }


def _open(page: Any, lab: Lab, name: str, workspace: str) -> None:
    page.goto(f"{lab.url}/lab/workspaces/{workspace}/tree/{name}?reset&token={lab.token}")
    page.wait_for_function(_APP_READY, timeout=STEP_MS)


def _run_first_cell(page: Any) -> None:
    page.locator(".jp-Cell .cm-content").first.click()
    page.keyboard.press("Shift+Enter")


def _open_record(page: Any) -> Any:
    """Click the run record's summary line open; returns the ``<details>``."""
    record = page.locator(".jp-OutputArea-output details.kernelgate-run").first
    record.wait_for(state="visible", timeout=STEP_MS)
    assert record.get_attribute("open") is None  # closed until asked
    record.locator("summary").click()
    page.wait_for_function("() => document.querySelector('details.kernelgate-run')?.open === true")
    return record


def _assert_record_shows(page: Any, record: Any, where: str) -> None:
    """Its rows and its timeline picture are visible; the picture follows the width of the
    record and is readable; nothing in the outputs is a script."""
    assert "run ok · 2 calls · " in record.locator("summary").inner_text(), where
    table = record.locator("table.kernelgate-run-facts")
    assert table.is_visible(), where
    shown = {th.strip() for th in table.locator("th").all_inner_texts()}
    assert set(_ROWS) <= shown, f"{where}: rows {sorted(shown)}"
    img = record.locator("img.kernelgate-timeline")
    img.wait_for(state="visible", timeout=STEP_MS)
    page.wait_for_function(
        "() => [...document.querySelectorAll('details.kernelgate-run img')]"
        ".every((i) => i.complete && i.getBoundingClientRect().height > 50)"
    )
    m = img.evaluate(_MEASURE)
    _assert_readable(m, where)
    # The sanitiser kept width="100%" and min-width: the picture is as wide as the record.
    assert abs(m["width"] - max(m["parent"], MIN_WIDTH)) < 1, (where, m["width"], m["parent"])
    assert m["minWidth"] == f"{MIN_WIDTH}px", where
    assert page.locator(".jp-OutputArea-output script").count() == 0, where


def shoot_live_cell(
    lab: Lab,
    browser: Any,
    tmp_path: Path,
    source: str,
    name: str,
    *,
    open_record: bool,
    expect: Callable[[Any], None] | None = None,
) -> dict[str, Any]:
    """Run ``source`` in a new kernelgate notebook ``name``.ipynb; once its run record
    shows (the last output of a run), call ``expect(page)`` to check the outputs, open the
    record if asked (and check it), take ``name``-light.png and ``name``-dark.png (to
    docs/images/ with ``KERNELGATE_SCREENSHOTS``), save the notebook and return what was
    saved. See :func:`traceback_screenshots_hook`."""
    path = lab.root / f"{name}.ipynb"
    path.write_text(json.dumps(_notebook(source)), encoding="utf-8")
    page = browser.new_page()
    page.set_viewport_size({"width": 1100, "height": 900})
    try:
        _open(page, lab, path.name, f"{name}-live")
        _run_first_cell(page)
        page.locator(".jp-OutputArea-output details.kernelgate-run").first.wait_for(
            state="visible", timeout=STEP_MS
        )
        if expect is not None:
            expect(page)
        if open_record:
            record = _open_record(page)
            _assert_record_shows(page, record, "live")
            record.scroll_into_view_if_needed()
        for dark in (False, True):
            _theme(page, dark)
            if open_record:
                _assert_record_shows(page, record, f"live (dark={dark})")
            _screenshot(page, tmp_path, f"{name}-{'dark' if dark else 'light'}.png")
        _theme(page, False)
        page.keyboard.press("Control+s")
        page.wait_for_function("() => !window.jupyterapp.shell.currentWidget.context.model.dirty")
    finally:
        page.close()
    saved: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return saved


def test_the_run_record_opens_live_and_reopened_untrusted(
    lab: Lab, browser: Any, tmp_path: Path
) -> None:
    saved = shoot_live_cell(lab, browser, tmp_path, PROGRAM, "kernel-run-record", open_record=True)
    # Saved with its record; then as a notebook from elsewhere: the server's signature
    # no longer matches (any change does), so it opens untrusted, as a download does.
    record_outputs = [
        o
        for o in saved["cells"][0]["outputs"]
        if o.get("metadata", {}).get("kernelgate", {}).get("role") == "run"
    ]
    assert len(record_outputs) == 1
    saved["metadata"]["downloaded"] = True
    name = "kernel-run-record-reopened.ipynb"
    (lab.root / name).write_text(json.dumps(saved), encoding="utf-8")
    before = (lab.root / name).read_bytes()
    page = browser.new_page()
    page.set_viewport_size({"width": 1100, "height": 900})
    try:
        _open(page, lab, name, "run-record-reopened")
        page.locator(".jp-OutputArea-output details.kernelgate-run").first.wait_for(
            state="visible", timeout=STEP_MS
        )
        assert page.evaluate(_NO_CELL_TRUSTED)
        record = _open_record(page)
        _assert_record_shows(page, record, "reopened untrusted")
        for dark in (False, True):
            _theme(page, dark)
            _assert_record_shows(page, record, f"reopened untrusted (dark={dark})")
        _theme(page, False)
        # An output narrower than the width the labels are laid out for: the picture keeps
        # that width (readable, nothing cut) and the output scrolls sideways to show it.
        page.set_viewport_size({"width": 800, "height": 900})
        page.wait_for_function(
            "(w) => document.querySelector('details.kernelgate-run').clientWidth < w",
            arg=MIN_WIDTH,
        )
        _assert_record_shows(page, record, "reopened untrusted, narrow")
        assert record.evaluate(_SCROLLS_SIDEWAYS), "the narrow output cannot be scrolled to"
        assert page.evaluate("() => !window.jupyterapp.shell.currentWidget.context.model.dirty")
    finally:
        page.close()
    assert (lab.root / name).read_bytes() == before


def traceback_screenshots_hook(lab: Lab, browser: Any, tmp_path: Path) -> None:
    """HOOK for the screenshots of IPython-style tracebacks (not implemented yet; not a
    test, so nothing runs it). The engineer adding them renames this to
    ``test_traceback_screenshots``, sets the program and the check, and shows
    ``docs/images/kernel-traceback-{light,dark}.png`` in docs/kernel.md."""
    program = "def f():\n    return 1 / 0\nf()\n"

    def expect(page: Any) -> None:  # what the traceback output must show, before pictures
        raise NotImplementedError("assert on the traceback output here")

    shoot_live_cell(
        lab, browser, tmp_path, program, "kernel-traceback", open_record=False, expect=expect
    )
