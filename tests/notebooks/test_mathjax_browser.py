"""TeX in a program's outputs, typeset by a real MathJax in Debian's Chromium.

MathJax v3 (all its TeX packages, as JupyterLab loads it) and v2.7 (``TeX-AMS_CHTML-full``,
nbconvert's ``tex2jax`` settings, without the ``Safe`` extension, as other viewers load
it) typeset each payload in a page served on loopback: first as the program wrote it,
where the attack must show (a ``javascript:`` link, a class or id of the page's, a CSS
load), then as :func:`sanitize_output` leaves it (``text/html`` as the page's markup,
``text/latex`` as its escaped text, which is how JupyterLab and nbconvert show both),
where nothing may show and harmless math must still be typeset.

MathJax is not a Python package: the test runs where ``$KERNELGATE_TEST_MATHJAX`` names
MathJax directories (``os.pathsep``-separated; ``npm install mathjax@3`` gives one, the
Debian package ``libjs-mathjax`` gives /usr/share/javascript/mathjax, which is looked at
too) and skips elsewhere.
"""

from __future__ import annotations

import functools
import html
import http.server
import os
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kernelgate.gateway.sanitize import sanitize_output

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
playwright_sync = pytest.importorskip("playwright.sync_api")


def _engines() -> dict[str, Path]:
    """MathJax directories found: ``v3`` (es5/tex-chtml-full.js), ``v2`` (MathJax.js)."""
    found: dict[str, Path] = {}
    places = os.environ.get("KERNELGATE_TEST_MATHJAX", "").split(os.pathsep)
    for place in [*places, "/usr/share/javascript/mathjax"]:
        if not place:
            continue
        path = Path(place)
        if (path / "es5" / "tex-chtml-full.js").is_file():
            found.setdefault("v3", path)
        elif (path / "MathJax.js").is_file():
            found.setdefault("v2", path)
    return found


ENGINES = _engines()
pytestmark = [
    pytest.mark.timeout(300),
    pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Chromium is not installed"),
    pytest.mark.skipif(
        not ENGINES,
        reason="no MathJax: set KERNELGATE_TEST_MATHJAX to an npm mathjax@3 (or 2) directory",
    ),
]

# Each attack leaves "evil" in the page (a link, class, id or style) or asks for a URL with
# "evil" in it.
ATTACKS = {
    "wbr-href": r"$\hr<wbr>ef{javascript:window.__evil=1}{x}$",
    "comment-href": r"$\hr<!-- -->ef{javascript:window.__evil=1}{x}$",
    "entity-href": r"$&#92;href{javascript:window.__evil=1}{x}$",
    "bbox": r"$\bbox[background:url(/evil-bbox.png)]{x}$",
    "bbox-css-escape": r"$\bbox[5px,background-image:u\72l(/evil-bbox2.png)]{x}$",
    "wbr-bbox": r"$\bb<wbr>ox[background:url(/evil-wbr-bbox.png)]{x}$",
    "style": r"$\style{background:url(/evil-style.png)}{x}$",
    "class": r"$\class{evil-class}{x}$",
    "cssId": r"$\cssId{evil-id}{x}$",
    "mmlToken": r"$\mmlToken{mi}[href='javascript:window.__evil=2']{x}$",
}
HARMLESS = {
    "frac": r"$\frac{1}{2}+\alpha$",
    "paren": r"\(\sqrt{x}\)",
    "color": r"$\color{red}{x}\text{hrefs}$",
}
# v2 reads neither a comment nor what an entity spells across text nodes the way v3 does.
SHOWS_RAW = {"v2": set(ATTACKS) - {"comment-href"}, "v3": set(ATTACKS)}

V3_HEAD = """<script>window.MathJax = {
  tex: {inlineMath: [['$','$'], ['\\\\(','\\\\)']], processEscapes: true},
  startup: {pageReady() {
    return MathJax.startup.defaultPageReady().then(() => { window.__done = true; });
  }}};</script>
<script src="/mathjax/es5/tex-chtml-full.js"></script>"""
V2_HEAD = """<script type="text/x-mathjax-config">MathJax.Hub.Config({
  tex2jax: {inlineMath: [['$','$'], ['\\\\(','\\\\)']], displayMath: [['$$','$$'],
            ['\\\\[','\\\\]']], processEscapes: true, processEnvironments: true},
  messageStyle: 'none'});
MathJax.Hub.Queue(function () { window.__done = true; });</script>
<script src="/mathjax/MathJax.js?config=TeX-AMS_CHTML-full"></script>"""

# Per case: what in it links to javascript:, carries "evil" in a class, id or style; and
# how many formulas MathJax made of it.
_LOOK = """() => {
  const out = {};
  for (const box of document.querySelectorAll('.case')) {
    const bad = [];
    for (const e of box.querySelectorAll('*')) {
      const href = e.getAttribute('href') || e.getAttribute('xlink:href') || '';
      if (href.trim().toLowerCase().startsWith('javascript')) bad.push('href');
      if ((e.getAttribute('class') || '').includes('evil')) bad.push('class');
      if ((e.id || '').includes('evil')) bad.push('id');
      if ((e.getAttribute('style') || '').includes('evil')) bad.push('style');
    }
    const math = box.querySelectorAll('mjx-container, .MathJax_CHTML').length;
    out[box.id] = {bad, math};
  }
  return out;
}"""


def _latex_shown(tex: str) -> str:
    out = sanitize_output(
        {"output_type": "display_data", "metadata": {}, "data": {"text/latex": tex}}
    )
    return html.escape(out["data"]["text/latex"])


def _html_shown(tex: str) -> str:
    out = sanitize_output(
        {"output_type": "display_data", "metadata": {}, "data": {"text/html": tex}}
    )
    return str(out["data"]["text/html"])


FORMS = {"raw": lambda tex: tex, "html": _html_shown, "latex": _latex_shown}


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """A loopback HTTP server for a fresh directory: its URL and the directory."""
    root = tmp_path_factory.mktemp("mathjax-site")

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(Quiet, directory=str(root))
    )
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", root
    finally:
        server.shutdown()
        server.server_close()
        thread.join(30)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with playwright_sync.sync_playwright() as pw:
        chromium = pw.chromium.launch(
            executable_path=CHROMIUM,
            headless=True,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"],
        )
        try:
            yield chromium
        finally:
            chromium.close()


def _typeset(browser: Any, site: tuple[str, Path], engine: str, form: str) -> dict[str, Any]:
    """Every case typeset in one page: per case id, what showed; and the URLs asked for."""
    url, root = site
    link = root / "mathjax"
    if link.is_symlink():
        link.unlink()
    link.symlink_to(ENGINES[engine])
    cases = {**ATTACKS, **HARMLESS}
    body = "".join(
        f'<div class="case" id="{name}">{FORMS[form](tex)}</div>' for name, tex in cases.items()
    )
    head = V3_HEAD if engine == "v3" else V2_HEAD
    page_name = f"{engine}-{form}.html"
    (root / page_name).write_text(
        f"<!doctype html><html><head><meta charset='utf-8'>{head}</head><body>{body}</body></html>",
        encoding="utf-8",
    )
    page = browser.new_page()
    asked: list[str] = []
    page.on("request", lambda request: asked.append(request.url))
    try:
        page.goto(f"{url}/{page_name}")
        page.wait_for_function("window.__done === true", timeout=120_000)
        # CSS backgrounds load once laid out: a frame after typesetting, they are asked.
        page.evaluate("() => new Promise(r => requestAnimationFrame(() => setTimeout(r, 200)))")
        shown: dict[str, Any] = page.evaluate(_LOOK)
    finally:
        page.close()
    shown["__asked"] = [u.rsplit("/", 1)[-1] for u in asked if "evil" in u]
    return shown


def _evil_url(name: str) -> str:
    tex = ATTACKS[name]
    return tex.split("(/", 1)[1].split(")", 1)[0] if "(/" in tex else ""


@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_the_attacks_work_on_the_raw_output(
    browser: Any, site: tuple[str, Path], engine: str
) -> None:
    shown = _typeset(browser, site, engine, "raw")
    worked = {
        name
        for name in ATTACKS
        if shown[name]["bad"] or (_evil_url(name) and _evil_url(name) in shown["__asked"])
    }
    assert worked == SHOWS_RAW[engine], shown


@pytest.mark.parametrize("form", ["html", "latex"])
@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_sanitized_output_typesets_inert(
    browser: Any, site: tuple[str, Path], engine: str, form: str
) -> None:
    shown = _typeset(browser, site, engine, form)
    assert shown["__asked"] == [], shown
    assert {name: shown[name]["bad"] for name in ATTACKS} == {name: [] for name in ATTACKS}
    # Harmless math is still math; the defused attacks too, with the command as text.
    for name in HARMLESS:
        assert shown[name]["math"] >= 1, (name, shown[name])
