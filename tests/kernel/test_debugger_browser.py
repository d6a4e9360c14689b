"""JupyterLab's own debugger on a cell, in a real JupyterLab driven by Debian's Chromium.

The flow a user follows, through JupyterLab's own widgets: open a notebook, enable the
debugger (the bug toggle in the notebook's toolbar), click the gutter of the cell's second
line to set a breakpoint, run the cell; it stops there (the "Paused in Debugger" overlay,
a frame in the Callstack panel, the line highlighted) and the Variables panel shows the
first line's variable; "Next" in the Callstack panel's toolbar steps over the second line
(its variable shows), "Continue" runs the cell to its end.

The same flow runs against ipykernel (the control: the flow is JupyterLab's own) and
against a kernelgate kernel with the demo bindings, where the stepped-over line is
``docs = await tools.search("jupyter", limit=3)``: the call's line appears in the cell's
output as the program reaches it, not before, and ``docs`` shows in the Variables panel.

Screenshots (stopped at the breakpoint; after stepping over the binding call), in the
light and the dark theme, are written to ``docs/images/kernel-debugger-*.png`` when
``KERNELGATE_SCREENSHOTS`` names that directory, else to the test's tmp dir (the
convention of test_workbench_browser.py).
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from . import test_browser
from .conftest import NEEDS_CHROMIUM
from .helpers import KERNEL_NAME
from .test_browser import _APP_READY, Lab, playwright_sync
from .test_workbench_browser import _screenshot, _theme

# The same JupyterLab server and Chromium fixtures (a server of this module's own).
lab = test_browser.lab
browser = test_browser.browser

pytestmark = [pytest.mark.timeout(300), NEEDS_CHROMIUM]

#: One debugger step (a stop, a variable showing, a step's end): far more than it takes.
WAIT_MS = 60_000


@dataclass(frozen=True)
class Flow:
    """One kernel's run of the flow: its cell, and what each stop must show."""

    kernel: str
    display_name: str
    #: The cell; the breakpoint goes on line 2 and stepping over it stops on line 3.
    source: str
    #: The variable line 1 set (name, a piece of its value), shown at the breakpoint.
    first: tuple[str, str]
    #: The variable line 2 set (a list: JupyterLab shows its type), shown after stepping
    #: over it; then the names to unfold from it and the (name, value) a value inside.
    second: tuple[str, str]
    inside: tuple[tuple[str, ...], tuple[str, str]]
    #: The output once the cell ran to its end.
    printed: str
    #: Whether line 2 is a binding call (its call display must appear only as it runs).
    calls: bool
    #: The screenshots' name (None: to the test's tmp dir only).
    shots: str | None


IPYKERNEL = Flow(
    kernel="python3",
    display_name="Python 3 (ipykernel)",
    source='topic = "jupyter"\ndocs = [topic.upper()] * 3\nprint(len(docs), "found")',
    first=("topic", "jupyter"),
    second=("docs", "list"),
    inside=(("docs",), ("0", "JUPYTER")),
    printed="3 found",
    calls=False,
    shots=None,
)

KERNELGATE = Flow(
    kernel=KERNEL_NAME,
    display_name="kernelgate",
    source='topic = "jupyter"\ndocs = await tools.search("jupyter", limit=3)\n'
    'print(len(docs), "found")',
    first=("topic", "jupyter"),
    second=("docs", "list"),
    inside=(("docs", "0"), ("title", "The Jupyter messaging protocol")),
    printed="1 found",
    calls=True,
    shots="kernel-debugger",
)


def _kernelspec_offers_the_debugger(data_dir: str, name: str) -> None:
    """JupyterLab shows the debugger's toggle only for a kernelspec whose metadata says
    ``"debugger": true``: the one ``kernelgate kernel install`` wrote must."""
    spec = json.loads((Path(data_dir) / "kernels" / name / "kernel.json").read_text("utf-8"))
    assert spec["metadata"]["debugger"] is True, spec


def _notebook(kernel: str, display_name: str, source: str) -> dict[str, Any]:
    return {
        "cells": [
            {
                "cell_type": "code",
                "execution_count": None,
                "id": "debugged",
                "metadata": {},
                "outputs": [],
                "source": source,
            }
        ],
        "metadata": {
            "kernelspec": {"name": kernel, "display_name": display_name, "language": "python"},
            "language_info": {"name": "python"},
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }


# The index of the breakpoint gutter's element beside the cell's line ``n`` (1-based):
# CodeMirror keeps a hidden spacer among the gutter's elements, so match by position.
_GUTTER_INDEX = """(cell, n) => {
  const line = cell.querySelectorAll('.cm-content .cm-line')[n - 1].getBoundingClientRect();
  const y = line.top + line.height / 2;
  const marks = cell.querySelectorAll('.cm-gutter.cm-breakpoint-gutter .cm-gutterElement');
  for (let i = 0; i < marks.length; i++) {
    const r = marks[i].getBoundingClientRect();
    if (r.height > 0 && r.top <= y && y < r.bottom) return i;
  }
  return -1;
}"""

# Stopped, as the page shows it: a frame in the Callstack panel, the notebook's overlay.
_STOPPED = """() => {
  const frames = document.querySelectorAll('.jp-DebuggerCallstack .jp-DebuggerCallstackFrame');
  return frames.length > 0
    && !!document.querySelector('.jp-NotebookPanel .jp-DebuggerPausedOverlay');
}"""


class Debugging:
    """The page of one notebook with JupyterLab's debugger, and the waits the flow needs."""

    def __init__(self, page: Any) -> None:
        self.page = page
        self.cell = page.locator(".jp-Notebook .jp-CodeCell").first
        self.sidebar = page.locator("#jp-debugger-sidebar")
        self.callstack = self.sidebar.locator(".jp-DebuggerCallstack")
        self.variables = self.sidebar.locator(".jp-DebuggerVariables")

    def open_sidebar(self) -> None:
        """Show the debugger's sidebar (its tab in the right side bar), if hidden."""
        if not self.sidebar.is_visible():
            self.page.locator(".jp-SideBar.jp-mod-right [data-id='jp-debugger-sidebar']").click()
        self.sidebar.wait_for(state="visible", timeout=WAIT_MS)

    def focus(self) -> None:
        """Focus the notebook (its cell's editor) and wait for its kernel to be idle.

        JupyterLab's debugger follows the focused notebook, and a focus that arrives after
        the toggle is pressed moves the debugger's session onto a fresh connection: its
        sidebar says "-" and the cell's gutter ignores clicks. So the focus comes first."""
        self.cell.locator(".cm-content").click()
        self.page.wait_for_function(_APP_READY, timeout=WAIT_MS)

    def enable(self, notebook: str) -> None:
        """Press the notebook toolbar's bug toggle (the debugger's sidebar open, the
        notebook focused first); wait until the debugger is on for ``notebook``."""
        self.open_sidebar()
        self.focus()
        bug = self.page.locator(".jp-NotebookPanel-toolbar .jp-DebuggerBugButton").first
        # Enabled once the kernel's kernel_info says it has a debugger.
        self.page.wait_for_function(
            "() => { const b = document.querySelector("
            "'.jp-NotebookPanel-toolbar .jp-DebuggerBugButton');"
            " return !!b && !b.disabled && b.getAttribute('aria-disabled') !== 'true'; }",
            timeout=WAIT_MS,
        )
        bug.click()
        self.page.wait_for_selector(
            ".jp-NotebookPanel-toolbar .jp-DebuggerBugButton[aria-pressed='true']",
            timeout=WAIT_MS,
        )
        # The sidebar names the notebook once the debugger's session on it has started.
        self.sidebar.locator("h2", has_text=notebook).first.wait_for(
            state="visible", timeout=WAIT_MS
        )
        # The editor handler puts the breakpoint gutter on the cell once the session is up.
        self.cell.locator(".cm-gutter.cm-breakpoint-gutter").wait_for(
            state="visible", timeout=WAIT_MS
        )

    def set_breakpoint(self, line: int) -> None:
        """Click the cell's breakpoint gutter beside ``line``; wait until the kernel has
        it (the Breakpoints panel lists what the kernel's setBreakpoints reply said)."""
        index = self.cell.evaluate(_GUTTER_INDEX, line)
        assert index >= 0, f"no breakpoint gutter element beside line {line}"
        mark = self.cell.locator(".cm-gutter.cm-breakpoint-gutter .cm-gutterElement").nth(index)
        mark.click()
        mark.locator(".cm-breakpoint-icon").wait_for(state="visible", timeout=WAIT_MS)
        self.sidebar.locator(".jp-DebuggerBreakpoint").first.wait_for(
            state="visible", timeout=WAIT_MS
        )
        shown = self.sidebar.locator(".jp-DebuggerBreakpoint-line").first.inner_text()
        assert shown.strip() == str(line), f"the Breakpoints panel shows line {shown!r}"

    def run_cell(self) -> None:
        self.cell.locator(".cm-content").click()
        self.page.keyboard.press("Control+Enter")

    def wait_stopped_at(self, line: int, text: str) -> None:
        """Wait for the stop on the cell's ``line`` (which holds ``text``): the overlay, the
        line highlighted, and the Callstack panel's one frame, the cell's, at that line
        (no frame of the kernel's own, nor asyncio's)."""
        self.page.wait_for_function(_STOPPED, timeout=WAIT_MS)
        highlight = self.cell.locator(".cm-line.jp-DebuggerEditor-highlight")
        highlight.filter(has_text=text).wait_for(state="visible", timeout=WAIT_MS)
        assert highlight.count() == 1, "more than one line is highlighted"
        frames = self.callstack.locator(".jp-DebuggerCallstackFrame")
        at = self.page.locator(
            ".jp-DebuggerCallstackFrame-location", has_text=re.compile(rf"^Cell \[.*\]:{line}$")
        )
        frames.filter(has=at).wait_for(state="visible", timeout=WAIT_MS)
        shown = frames.all_inner_texts()
        assert len(shown) == 1, f"frames other than the cell's: {shown}"
        name = frames.locator(".jp-DebuggerCallstackFrame-name").inner_text()
        assert name == "<module>", shown

    @staticmethod
    def _item(name: str) -> str:
        """The XPath, relative to a tree, of its variable ``name``'s item (a dict's key may
        be shown quoted)."""
        names = " or ".join(f'normalize-space(.)="{n}"' for n in (name, f"'{name}'"))
        return f"jp-tree-item[span[contains(@class, 'jp-DebuggerVariables-name')][{names}]]"

    def wait_variable(self, name: str, value: str, within: tuple[str, ...] = ()) -> str:
        """Wait for the Variables panel to show ``name`` with a value holding ``value``;
        ``within``: the variables it is inside, unfolded here in turn (each unfolding is a
        ``variables`` request). Return the value shown.

        The panel draws a stop's variables more than once (the stop, then the selected
        frame's), and an item drawn again is folded: what is folded is unfolded again
        until the value shows."""
        tree = self.variables.locator("jp-tree-view").first
        items = []
        for outer in within:
            tree = tree.locator(f"xpath=./{self._item(outer)}").first
            items.append(tree)
        detail = tree.locator(
            f"xpath=./{self._item(name)}/span[contains(@class, 'jp-DebuggerVariables-detail')]"
        ).filter(has_text=value)
        deadline = time.monotonic() + WAIT_MS / 1000
        while True:
            for item in items:
                if item.get_attribute("aria-expanded", timeout=WAIT_MS) != "true":
                    label = "xpath=./span[contains(@class, 'jp-DebuggerVariables-name')]"
                    item.locator(label).click(timeout=WAIT_MS)
            try:
                detail.wait_for(state="visible", timeout=2_000)
                return str(detail.inner_text())
            except playwright_sync.TimeoutError:
                if time.monotonic() > deadline:
                    raise

    def press(self, command: str) -> None:
        """Click the Callstack panel's toolbar button of ``command`` (debugger:next, ...).

        The sidebar's accordion puts a panel's toolbar in the panel's title, which names
        the panel it controls (``aria-controls``)."""
        panel = self.callstack.get_attribute("id")
        button = self.sidebar.locator(
            f".jp-AccordionPanel-title[aria-controls='{panel}'] "
            f"[data-command='{command}'][aria-disabled='false']"
        )
        button.click(timeout=WAIT_MS)

    def calls_shown(self) -> int:
        return int(self.cell.locator(".jp-OutputArea-output details.kernelgate-call").count())


def _widen(page: Any, sidebar: Any, width: int) -> None:
    """Drag the handle between the main area and the right sidebar until ``sidebar`` is
    ``width`` px wide (room for the variables' values in the pictures)."""
    handle = page.evaluate(
        """(panel) => {
          const left = panel.closest('#jp-right-stack').getBoundingClientRect().left;
          for (const h of document.querySelectorAll('#jp-main-split-panel > .lm-SplitPanel-handle')) {
            const r = h.getBoundingClientRect();
            if (r.width > 0 && Math.abs(r.right - left) < 8) return {x: r.left + r.width / 2, y: r.top + r.height / 2};
          }
          return null;
        }""",
        sidebar.element_handle(),
    )
    assert handle is not None, "no handle beside the right sidebar"
    by = width - sidebar.bounding_box()["width"]
    page.mouse.move(handle["x"], handle["y"])
    page.mouse.down()
    page.mouse.move(handle["x"] - by, handle["y"], steps=5)
    page.mouse.up()
    page.wait_for_function(
        "([panel, width]) => panel.getBoundingClientRect().width >= width - 2",
        arg=[sidebar.element_handle(), width],
        timeout=WAIT_MS,
    )


def _shoot(page: Any, tmp: Path, name: str | None, stage: str) -> None:
    """Screenshots of the page in the light and the dark theme (back to light after); a
    flow without a docs name gets one picture in the test's tmp dir, never in docs/."""
    if name is None:
        page.screenshot(path=str(tmp / f"debugger-{stage}.png"))
        return
    for dark in (False, True):
        _theme(page, dark)
        _screenshot(page, tmp, f"{name}-{stage}-{'dark' if dark else 'light'}.png")
    _theme(page, False)


def _shut_down(lab: Lab, name: str) -> None:
    """End the notebook's kernel (its session), as closing it with "shut down" would."""
    for session in lab.api("GET", "/api/sessions"):
        if session.get("path") == name:
            lab.api("DELETE", f"/api/sessions/{session['id']}")


def _debug_cell(lab: Lab, browser: Any, tmp: Path, flow: Flow, workspace: str) -> None:
    name = f"{workspace}.ipynb"
    (lab.root / name).write_text(
        json.dumps(_notebook(flow.kernel, flow.display_name, flow.source)), encoding="utf-8"
    )
    page = browser.new_page()
    page.set_viewport_size({"width": 1280, "height": 800})
    # What went wrong in the page, for the failure's message.
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        page.goto(f"{lab.url}/lab/workspaces/{workspace}/tree/{name}?reset&token={lab.token}")
        page.wait_for_function(_APP_READY, timeout=WAIT_MS * 2)
        # Room for the variables' values in the pictures: the file browser folded away,
        # the debugger's sidebar wider. Dragging the sidebar's handle takes the focus off
        # the notebook, and JupyterLab's debugger follows the focused widget: done first,
        # and the notebook focused again before the debugger is on.
        page.evaluate("() => window.jupyterapp.commands.execute('application:toggle-left-area')")
        dbg = Debugging(page)
        dbg.open_sidebar()
        _widen(page, dbg.sidebar, 400)
        dbg.enable(name)
        dbg.set_breakpoint(2)

        dbg.run_cell()
        lines = flow.source.splitlines()
        dbg.wait_stopped_at(2, lines[1])
        first = dbg.wait_variable(*flow.first)
        assert flow.first[1] in first, first
        if flow.calls:
            # Stopped before the call: its line is not in the output yet.
            assert dbg.calls_shown() == 0, "the call showed before the program reached it"
        _shoot(page, tmp, flow.shots, "stopped")

        dbg.press("debugger:next")
        dbg.wait_stopped_at(3, lines[2])
        second = dbg.wait_variable(*flow.second)
        assert flow.second[1] in second, second
        inside = dbg.wait_variable(*flow.inside[1], within=flow.inside[0])
        assert flow.inside[1][1] in inside, inside
        if flow.calls:
            call = dbg.cell.locator(".jp-OutputArea-output details.kernelgate-call").first
            call.wait_for(state="visible", timeout=WAIT_MS)
            assert "tools.search(" in call.inner_text(), call.inner_text()
            assert dbg.calls_shown() == 1
        # The program stopped again: still in the same cell, nothing printed yet.
        assert flow.printed not in dbg.cell.locator(".jp-OutputArea").inner_text()
        _shoot(page, tmp, flow.shots, "stepped")

        dbg.press("debugger:continue")
        printed = dbg.cell.locator(".jp-OutputArea-output", has_text=flow.printed)
        printed.wait_for(state="visible", timeout=WAIT_MS)
        page.wait_for_function(
            "() => !document.querySelector('.jp-NotebookPanel .jp-DebuggerPausedOverlay')"
            " && document.querySelectorAll('.jp-DebuggerCallstackFrame').length === 0",
            timeout=WAIT_MS,
        )
        page.wait_for_function(_APP_READY, timeout=WAIT_MS)  # the kernel is idle again
        assert dbg.cell.locator(".cm-line.jp-DebuggerEditor-highlight").count() == 0
    except Exception as exc:
        page.screenshot(path=str(tmp / f"{workspace}-failure.png"))
        raise AssertionError(f"{exc}\nthe page's errors: {errors}") from exc
    finally:
        page.close()
        _shut_down(lab, name)


def test_ipykernel_debugs_a_cell_in_jupyterlab(lab: Lab, browser: Any, tmp_path: Path) -> None:
    """The control: JupyterLab's own debugger flow with ipykernel and debugpy."""
    pytest.importorskip("debugpy")
    _debug_cell(lab, browser, tmp_path, IPYKERNEL, "debug-ipykernel")


def test_kernelgate_steps_over_a_binding_call_in_jupyterlab(
    kernelspec: str, lab: Lab, browser: Any, tmp_path: Path
) -> None:
    """The package's kernelgate kernelspec (the demo bindings): the program stops in its
    fresh child, and stepping over the binding call makes the call for real."""
    _kernelspec_offers_the_debugger(kernelspec, KERNEL_NAME)
    _debug_cell(lab, browser, tmp_path, KERNELGATE, "debug-kernelgate")


# -- a program's variables, rendered by the debugger, run nothing -------------------------------

# Marks the page (no double quotes: it goes into double-quoted attributes as it is).
_MARK = "(window.__pwned=window.__pwned||[]).push('{}')"

HOSTILE = f"""\
class Evil:
    def _repr_html_(self):
        return ('<b>evil-bold</b><img src="missing-evil.png" onerror="'
                + {_MARK.format("html")!r} + '">')
    def _repr_javascript_(self):
        return {_MARK.format("javascript")!r}
    def __repr__(self):
        return ('<img src="missing-repr.png" onerror="' + {_MARK.format("repr")!r}
                + '">evil-repr')
evil = Evil()
done = True"""

# Everything in the rendered variable that would run or fetch.
_LIVE_MARKUP = """(root) => {
  const found = [];
  for (const el of root.querySelectorAll('*')) {
    const tag = el.tagName.toLowerCase();
    if (['script', 'iframe', 'object', 'embed', 'img', 'form'].includes(tag)) found.push(tag);
    for (const a of el.attributes) if (a.name.startsWith('on')) found.push(tag + '[' + a.name + ']');
  }
  return found;
}"""

# A broken image of our own, added last: once its error event has run, so have those of
# anything the page added before it (the browser queues them in order).
_SETTLE = """() => new Promise(done => {
  const img = document.createElement('img');
  img.onerror = () => done(true);
  img.src = 'kernelgate-debugger-control-missing.png';
  document.body.appendChild(img);
})"""


def _render_hostile_variable(
    lab: Lab, browser: Any, tmp: Path, kernel: str
) -> tuple[list[str], str, list[str]]:
    """Stop in the hostile cell; press the Variables panel's "Render variable" on ``evil``;
    return what marked the page, the rendered variable's text, and its live markup."""
    workspace = f"hostile-{kernel}"
    name = f"{workspace}.ipynb"
    (lab.root / name).write_text(json.dumps(_notebook(kernel, kernel, HOSTILE)), encoding="utf-8")
    page = browser.new_page()
    page.set_viewport_size({"width": 1280, "height": 800})
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    try:
        page.goto(f"{lab.url}/lab/workspaces/{workspace}/tree/{name}?reset&token={lab.token}")
        page.wait_for_function(_APP_READY, timeout=WAIT_MS * 2)
        dbg = Debugging(page)
        dbg.enable(name)
        lines = HOSTILE.splitlines()
        dbg.set_breakpoint(len(lines))
        dbg.run_cell()
        dbg.wait_stopped_at(len(lines), lines[-1])
        dbg.wait_variable("evil", "Evil")  # an object: the panel shows its type
        item = dbg.variables.locator(f"xpath=.//{Debugging._item('evil')}").first
        item.hover()
        render = item.locator(".jp-DebuggerVariables-renderVariable")
        render.click(timeout=WAIT_MS)
        # The rendered variable: whichever renderer JupyterLab picked for its data.
        shown = page.locator(
            ".jp-DebuggerRichVariable .jp-RenderedText, "
            ".jp-DebuggerRichVariable .jp-RenderedHTMLCommon, "
            ".jp-DebuggerRichVariable .jp-RenderedJavaScript"
        )
        shown.first.wait_for(state="attached", timeout=WAIT_MS)
        page.evaluate(_SETTLE)
        pwned = list(page.evaluate("() => window.__pwned || []"))
        panel = page.locator(".jp-DebuggerRichVariable").first
        text = str(panel.inner_text())
        live = list(panel.evaluate(_LIVE_MARKUP))
        page.screenshot(path=str(tmp / f"{workspace}.png"))
        # Back to the notebook, and on to the cell's end.
        page.locator(".jp-NotebookPanel .jp-Cell").first.click()
        dbg.press("debugger:continue")
        page.wait_for_function(
            "() => document.querySelectorAll('.jp-DebuggerCallstackFrame').length === 0",
            timeout=WAIT_MS,
        )
        return pwned, text, live
    except Exception as exc:
        page.screenshot(path=str(tmp / f"{workspace}-failure.png"))
        raise AssertionError(f"{exc}\nthe page's errors: {errors}") from exc
    finally:
        page.close()
        _shut_down(lab, name)


def test_ipykernel_s_rendered_variable_runs_in_the_page(
    lab: Lab, browser: Any, tmp_path: Path
) -> None:
    """The control: JupyterLab renders a rich variable as trusted, with any mime type."""
    pytest.importorskip("debugpy")
    pwned, text, live = _render_hostile_variable(lab, browser, tmp_path, "python3")
    assert pwned, f"the variable's HTML or script did not run: {text!r} {live}"


def test_kernelgate_s_rendered_variable_is_text(
    kernelspec: str, lab: Lab, browser: Any, tmp_path: Path
) -> None:
    pwned, text, live = _render_hostile_variable(lab, browser, tmp_path, KERNEL_NAME)
    assert pwned == [], f"a program's variable ran in the page: {pwned}"
    assert live == [], live
    assert "evil-repr" in text and "<img" in text, text


# -- leaving the debugger while stopped ---------------------------------------------------------


@pytest.mark.parametrize("flow", [IPYKERNEL, KERNELGATE], ids=["ipykernel", "kernelgate"])
def test_stop_debugger_while_stopped_lets_the_cell_finish(
    kernelspec: str, lab: Lab, browser: Any, tmp_path: Path, flow: Flow
) -> None:
    """The paused overlay's "Stop Debugger" (a ``disconnect``): the cell runs on to its end,
    undebugged, and the kernel is idle again; nothing is left stopped."""
    if flow is IPYKERNEL:
        pytest.importorskip("debugpy")
    workspace = f"stop-{flow.kernel}"
    name = f"{workspace}.ipynb"
    notebook = _notebook(flow.kernel, flow.display_name, flow.source)
    (lab.root / name).write_text(json.dumps(notebook), encoding="utf-8")
    page = browser.new_page()
    page.set_viewport_size({"width": 1280, "height": 800})
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    try:
        page.goto(f"{lab.url}/lab/workspaces/{workspace}/tree/{name}?reset&token={lab.token}")
        page.wait_for_function(_APP_READY, timeout=WAIT_MS * 2)
        dbg = Debugging(page)
        dbg.enable(name)
        dbg.set_breakpoint(2)
        dbg.run_cell()
        lines = flow.source.splitlines()
        dbg.wait_stopped_at(2, lines[1])
        page.locator(".jp-NotebookPanel .jp-DebuggerPausedOverlay .jp-DebuggerStopButton").click(
            timeout=WAIT_MS
        )
        printed = dbg.cell.locator(".jp-OutputArea-output", has_text=flow.printed)
        printed.wait_for(state="visible", timeout=WAIT_MS)
        page.wait_for_function(_APP_READY, timeout=WAIT_MS)
        page.wait_for_selector(
            ".jp-NotebookPanel .jp-DebuggerPausedOverlay", state="detached", timeout=WAIT_MS
        )
        assert dbg.cell.locator(".cm-line.jp-DebuggerEditor-highlight").count() == 0
        if flow.calls:
            assert dbg.calls_shown() == 1
    except Exception as exc:
        page.screenshot(path=str(tmp_path / f"{workspace}-failure.png"))
        raise AssertionError(f"{exc}\nthe page's errors: {errors}") from exc
    finally:
        page.close()
        _shut_down(lab, name)
