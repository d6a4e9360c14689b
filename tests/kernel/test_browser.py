"""A hostile program's displays in a real JupyterLab run nothing: live, and recorded.

A JupyterLab server on loopback (token auth, a temporary root, config and data dirs) with
this package's kernelgate kernelspec, driven by Playwright through Debian's Chromium. The
program displays objects whose ``_repr_javascript_``, ``_repr_html_`` (``<script>``,
``<img onerror>``), ``_repr_markdown_`` (``javascript:`` links, raw HTML, a TeX
``\\href``) and ``_repr_svg_`` (``<script>``, ``onload``) each try to mark the page
(``window.__pwned``) and to open a Jupyter terminal -- a shell on the host -- through the
server API with the page's XSRF cookie.

The attack is first shown to work: the same cell in an ipykernel notebook marks the page
and opens a terminal, live and again when its saved, trusted notebook is re-opened. Then
with the kernelgate kernel (live; its saved notebook re-opened and trusted; a
``SessionLog`` recording of the same program, trusted): nothing marks the page, no
terminal request is made, none exists, and the harmless bold word shows.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import secrets
import socket
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from .conftest import CHROMIUM, NEEDS_CHROMIUM
from .helpers import KERNEL_NAME

pytestmark = [pytest.mark.timeout(300), NEEDS_CHROMIUM]
playwright_sync = pytest.importorskip("playwright.sync_api")
pytest.importorskip("jupyterlab")

STEP_MS = 180_000

# Marks the page and asks the server for a terminal with the page's XSRF cookie. No double
# quotes: it goes into double-quoted attributes as it is.
ATTACK = (
    "(function(v){(window.__pwned=window.__pwned||[]).push(v);"
    "var m=document.cookie.match(/_xsrf=([^;]+)/);"
    "fetch('/api/terminals',{method:'POST',credentials:'same-origin',"
    "headers:{'X-XSRFToken':m?decodeURIComponent(m[1]):''}});})"
)

PROGRAM = f"""\
ATTACK = {ATTACK!r}

def run(v):
    return ATTACK + "('" + v + "')"

class Js:
    def _repr_javascript_(self):
        return run("javascript")

class Html:
    def _repr_html_(self):
        return ('<b>harmless-bold</b><script>' + run("script") + '</script>'
                '<img src="missing-1.png" onerror="' + run("img-onerror") + '">'
                '<a href="javascript:' + run("html-link") + '">html-link</a>')

class Md:
    def _repr_markdown_(self):
        return ('*harmless-italic* [md-link](javascript:void(0)) '
                '<a href="javascript:' + run("md-raw-link") + '">md-raw-link</a> '
                '<img src="missing-2.png" onerror="' + run("md-onerror") + '"> '
                '$\\\\href{{javascript:void(0)}}{{tex-link}}$')

class Svg:
    def _repr_svg_(self):
        return ('<svg xmlns="http://www.w3.org/2000/svg" width="20" height="20" '
                'onload="' + run("svg-onload") + '"><script>' + run("svg-script") +
                '</script><rect width="20" height="20" fill="green"/></svg>')

display(Js())
display(Html())
display(Md())
display(Svg())
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class Lab:
    url: str
    token: str
    root: Path
    data_dir: Path
    log: list[str] = field(default_factory=list)

    def api(self, method: str, path: str) -> Any:
        request = urllib.request.Request(
            f"{self.url}{path}", method=method, headers={"Authorization": f"token {self.token}"}
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            body = response.read()
        return json.loads(body) if body else None

    def terminals(self) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self.api("GET", "/api/terminals")
        return result

    def close_terminals(self) -> None:
        for term in self.terminals():
            self.api("DELETE", f"/api/terminals/{term['name']}")

    def trust(self, name: str) -> None:
        """What ``jupyter trust`` does, with the server's signature database."""
        import nbformat
        from nbformat.sign import NotebookNotary

        path = self.root / name
        nb = nbformat.read(path, as_version=4)
        NotebookNotary(data_dir=str(self.data_dir)).sign(nb)


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory, kernelspec: str) -> Iterator[Lab]:
    """A JupyterLab server on loopback, everything it reads and writes in a temp dir."""
    base = tmp_path_factory.mktemp("lab")
    dirs = {name: base / name for name in ("root", "config", "data", "runtime", "ipython", "lab")}
    for d in dirs.values():
        d.mkdir()
    token = secrets.token_hex(16)
    port = _free_port()
    env = {
        **os.environ,
        "JUPYTER_CONFIG_DIR": str(dirs["config"]),
        "JUPYTER_DATA_DIR": str(dirs["data"]),
        "JUPYTER_RUNTIME_DIR": str(dirs["runtime"]),
        "JUPYTERLAB_SETTINGS_DIR": str(dirs["lab"] / "settings"),
        "JUPYTERLAB_WORKSPACES_DIR": str(dirs["lab"] / "workspaces"),
        "IPYTHONDIR": str(dirs["ipython"]),
        "SHELL": "/bin/sh",
    }
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jupyterlab",
            "--no-browser",
            # CI and this machine run as root; the server only listens on loopback.
            *(["--allow-root"] if os.geteuid() == 0 else []),
            "--ServerApp.ip=127.0.0.1",
            f"--ServerApp.port={port}",
            "--ServerApp.port_retries=0",
            f"--IdentityProvider.token={token}",
            f"--ServerApp.root_dir={dirs['root']}",
            "--LabApp.expose_app_in_browser=True",
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        ],
        env=env,
        cwd=dirs["root"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    server = Lab(url, token, dirs["root"], dirs["data"])
    ready = threading.Event()

    def read() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            server.log.append(line)
            if f"{url}/" in line:
                ready.set()
        ready.set()  # the server ended: the wait below sees it

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        ready.wait(120)
        assert proc.poll() is None and ready.is_set(), "JupyterLab did not start:\n" + "".join(
            server.log[-40:]
        )
        yield server
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(30)
        reader.join(30)


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """Debian's Chromium, headless, with a fresh profile; no browser is downloaded."""
    profile = tmp_path_factory.mktemp("chromium-profile")
    with playwright_sync.sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(
            str(profile),
            executable_path=CHROMIUM,
            headless=True,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
            ],
        )
        context.set_default_timeout(STEP_MS)
        try:
            yield context
        finally:
            context.close()


def _notebook(kernel: str, display_name: str) -> dict[str, Any]:
    return {
        "cells": [
            {
                "cell_type": "code",
                "execution_count": None,
                "id": "hostile",
                "metadata": {},
                "outputs": [],
                "source": PROGRAM,
            }
        ],
        "metadata": {
            "kernelspec": {"name": kernel, "display_name": display_name, "language": "python"},
            "language_info": {"name": "python"},
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }


@dataclass
class Seen:
    """What one page did: the marks the attack left, its terminal requests, what shows."""

    pwned: list[str]
    terminal_posts: int
    bold_visible: bool
    live_markup: list[str]


_APP_READY = """() => {
  const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;
  const k = w && w.sessionContext && w.sessionContext.session && w.sessionContext.session.kernel;
  return !!(k && k.connectionStatus === 'connected' && k.status === 'idle' && w.content
            && w.content.widgets.length > 0);
}"""

# Everything in the outputs that would run or fetch: scripts, event handlers,
# javascript: URLs, frames, inline SVG (the page's own icons are outside the outputs).
_LIVE_MARKUP = """() => {
  const found = [];
  for (const el of document.querySelectorAll('.jp-OutputArea-output *')) {
    const tag = el.tagName.toLowerCase();
    if (['script', 'iframe', 'object', 'embed', 'svg', 'form'].includes(tag)) found.push(tag);
    for (const a of el.attributes) {
      const v = a.value.trim().toLowerCase();
      if (a.name.startsWith('on')) found.push(tag + '[' + a.name + ']');
      if (v.startsWith('javascript:')) found.push(tag + '[' + a.name + '=javascript:]');
    }
  }
  return found;
}"""


def _open(context: Any, lab: Lab, name: str, workspace: str, *, run: bool) -> Seen:
    """Open ``name`` in a fresh JupyterLab workspace; run its cells if ``run``; look."""
    page = context.new_page()
    posts: list[str] = []
    answered: list[str] = []

    def is_terminal_post(request: Any) -> bool:
        return bool(request.method == "POST" and "/api/terminals" in request.url)

    page.on("request", lambda r: posts.append(r.url) if is_terminal_post(r) else None)
    for event in ("requestfinished", "requestfailed"):
        page.on(event, lambda r: answered.append(r.url) if is_terminal_post(r) else None)
    try:
        page.goto(f"{lab.url}/lab/workspaces/{workspace}/tree/{name}?reset&token={lab.token}")
        page.wait_for_function(_APP_READY, timeout=STEP_MS)
        if run:
            page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")
        # The displays are in the page once the bold word shows (all come from one cell).
        bold = page.locator(".jp-OutputArea-output b", has_text="harmless-bold")
        bold.wait_for(state="visible", timeout=STEP_MS)
        page.wait_for_function(
            "() => document.querySelectorAll('.jp-OutputArea-output').length >= 4",
            timeout=STEP_MS,
        )
        # A broken image of our own, added after the outputs: once its error event has
        # run, so have the outputs' (the browser queues them in order).
        page.evaluate(
            """() => new Promise(done => {
                 const img = document.createElement('img');
                 img.onerror = () => done(true);
                 img.src = 'kernelgate-control-missing.png';
                 document.body.appendChild(img);
               })"""
        )
        # Links need a click to run: click each one the outputs show.
        for label in ("html-link", "md-link", "md-raw-link"):
            link = page.locator(".jp-OutputArea-output a", has_text=label)
            if link.count():
                link.first.click(no_wait_after=True, modifiers=[])
        # Every request a handler above made was issued as it ran, so its event is queued
        # by now; the sync API delivers events only inside its calls, so no answer is
        # missed between the count and the wait.
        while len(answered) < len(posts):
            page.wait_for_event("requestfinished", timeout=STEP_MS)
        seen = Seen(
            pwned=list(page.evaluate("() => window.__pwned || []")),
            terminal_posts=len(posts),
            bold_visible=bold.is_visible(),
            live_markup=list(page.evaluate(_LIVE_MARKUP)),
        )
        if run:
            page.evaluate("() => window.jupyterapp.commands.execute('docmanager:save')")
        return seen
    finally:
        page.close()


def _write(lab: Lab, name: str, nb: dict[str, Any]) -> None:
    (lab.root / name).write_text(json.dumps(nb), encoding="utf-8")


def test_attack_runs_with_ipykernel(lab: Lab, browser: Any) -> None:
    """The control: outputs of the stock Python kernel run, live and trusted on re-open."""
    _write(lab, "control.ipynb", _notebook("python3", "Python 3"))
    live = _open(browser, lab, "control.ipynb", "control-live", run=True)
    assert "javascript" in live.pwned and "script" in live.pwned, live
    assert "img-onerror" in live.pwned, live
    assert live.terminal_posts >= 1, live
    assert lab.terminals(), "the attack opened no terminal: the test shows nothing"
    lab.close_terminals()
    assert lab.terminals() == []

    lab.trust("control.ipynb")
    recorded = _open(browser, lab, "control.ipynb", "control-recorded", run=False)
    assert "javascript" in recorded.pwned, recorded
    assert lab.terminals(), "a trusted recording did not run: trust is not in effect"
    lab.close_terminals()


def _assert_inert(seen: Seen, lab: Lab) -> None:
    assert seen.bold_visible
    assert seen.pwned == [], f"a program's output ran in the page: {seen}"
    assert seen.live_markup == [], f"live markup in the outputs: {seen}"
    assert seen.terminal_posts == 0, seen
    assert lab.terminals() == []


def test_kernelgate_outputs_are_inert_live_and_recorded(lab: Lab, browser: Any) -> None:
    lab.close_terminals()
    _write(lab, "hostile.ipynb", _notebook(KERNEL_NAME, "kernelgate"))
    _assert_inert(_open(browser, lab, "hostile.ipynb", "kg-live", run=True), lab)

    saved = json.loads((lab.root / "hostile.ipynb").read_text(encoding="utf-8"))
    assert saved["cells"][0]["outputs"], "JupyterLab saved no outputs"
    lab.trust("hostile.ipynb")
    _assert_inert(_open(browser, lab, "hostile.ipynb", "kg-recorded", run=False), lab)


def test_session_log_recording_is_inert(lab: Lab, browser: Any) -> None:
    """kernelgate's own recording of the program (a SessionLog), trusted, opened."""
    from kernelgate import Gateway
    from kernelgate.notebooks.session import SessionLog

    lab.close_terminals()
    # Playwright's sync API keeps an event loop running in this thread: run from another.
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        result = pool.submit(Gateway().run_sync, PROGRAM).result(timeout=120)
    assert result.ok, result.message
    SessionLog(lab.root / "session.ipynb").append(result)
    lab.trust("session.ipynb")
    _assert_inert(_open(browser, lab, "session.ipynb", "kg-session", run=False), lab)
