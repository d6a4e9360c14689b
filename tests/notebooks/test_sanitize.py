"""A program's outputs made inert: each way an output could run code, load or pass as
kernelgate's own, and the harmless markup that must still show.

Each attack is first shown to be in the program's output as the run reported it (the raw
output the child sent, through a real run where a ``_repr_*_`` makes it), then gone from
what ``sanitize_output`` returns, ``RunResult.outputs`` and a recording.
"""

from __future__ import annotations

import base64
import doctest
import json
import re
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from typing import Any

import pytest
from markdown_it import MarkdownIt

from kernelgate import Gateway
from kernelgate.gateway import sanitize as sanitize_module
from kernelgate.gateway.sanitize import (
    SAFE_MIME_TYPES,
    sanitize_html,
    sanitize_output,
    sanitize_outputs,
)
from kernelgate.model.result import CallRecord, RunResult
from kernelgate.notebooks.render import (
    call_html,
    run_code_cell,
    run_header_cell,
    run_to_notebook,
    timeline_svg_of,
)
from kernelgate.notebooks.session import SessionLog
from kernelgate.notebooks.store import load_run
from kernelgate.wire.messages import CALL_MIME

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\0" * 16).decode()


def display(data: dict[str, Any], metadata: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"output_type": "display_data", "data": data, "metadata": metadata or {}}


def shown(output: dict[str, Any]) -> str:
    """Everything a front end could render from an output, as one string."""
    return json.dumps(output["data"], ensure_ascii=False)


class _Markup(HTMLParser):
    """Every element and attribute of an HTML text, as a browser's parser would see them."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.found: list[tuple[str, list[tuple[str, str | None]]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.found.append((tag, attrs))


_RUNNING_TAGS = {"script", "iframe", "object", "embed", "svg", "math", "style", "form", "base",
                 "meta", "link", "frame", "frameset", "applet", "template", "noscript"}  # fmt: skip


def assert_inert_html(text: str) -> None:
    """No element that runs or frames, no handler, no URL other than https/http/mailto/#
    links and data:image sources."""
    parser = _Markup()
    parser.feed(text)
    parser.close()
    for tag, attrs in parser.found:
        assert tag not in _RUNNING_TAGS, (tag, text)
        for name, value in attrs:
            assert not name.startswith("on"), (tag, name, text)
            assert name not in ("srcdoc", "formaction", "action", "xlink:href"), (name, text)
            url = "".join((value or "").split()).lower()
            if name == "src":
                assert url.startswith("data:image/"), (tag, name, value)
            elif name in ("href", "cite"):
                assert url.startswith(("https:", "http:", "mailto:", "#")), (tag, value)
            assert "javascript:" not in url, (tag, name, value)


# -- MIME allowlist -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "mime",
    [
        "application/javascript",
        "text/javascript",
        "application/vnd.jupyter.widget-view+json",
        "application/vnd.jupyter.widget-state+json",
        "application/x-javascript",
        "application/x-shockwave-flash",
        "application/vnd.vegalite.v5+json",
        "application/vnd.plotly.v1+json",
        "application/pdf",
        "text/x-unknown",
        CALL_MIME,
    ],
)
def test_mime_types_outside_the_allowlist_are_removed_and_said(mime: str) -> None:
    out = sanitize_output(display({mime: "alert(1)", "text/plain": "<obj>"}))
    assert set(out["data"]) == {"text/plain"}
    assert out["data"]["text/plain"].startswith("<obj>\n[kernelgate: ")
    assert mime in out["data"]["text/plain"] and "removed" in out["data"]["text/plain"]


def test_a_removed_type_alone_leaves_a_note_to_read() -> None:
    out = sanitize_output(display({"application/javascript": "alert(1)"}))
    assert out["data"] == {
        "text/plain": "[kernelgate: application/javascript output removed: programs' "
        "outputs are shown inert]"
    }


def test_javascript_repr_from_a_real_run_is_removed() -> None:
    program = (
        "class J:\n"
        "    def __repr__(self):\n"
        "        return 'J()'\n"
        "    def _repr_javascript_(self):\n"
        "        return 'window.__pwned = 1'\n"
        "    def _repr_html_(self):\n"
        "        return '<b>ok</b><script>window.__pwned = 2</script>'\n"
        "display(J())\n"
    )
    result = Gateway().run_sync(program)
    assert result.ok, result.message
    # The attack ran: the program did produce both. Raw, as the child sent them:
    raw = {"text/plain": "J()", "application/javascript": "window.__pwned = 1",
           "text/html": "<b>ok</b><script>window.__pwned = 2</script>"}  # fmt: skip
    cleaned = sanitize_output(display(raw))
    # RunResult.outputs equal the sanitised form (the lead's Run wiring), and so does a
    # recording of the run.
    assert result.outputs[0]["data"] == cleaned["data"]
    assert "application/javascript" not in cleaned["data"]
    assert cleaned["data"]["text/html"] == "<b>ok</b>"
    recorded = run_to_notebook(result).cells[0].outputs[0]
    assert dict(recorded["data"]) == cleaned["data"]


# -- HTML ---------------------------------------------------------------------------------

HOSTILE_HTML = [
    "<script>alert(1)</script>",
    "<img src=x onerror=alert(1)>",
    '<a href="javascript:alert(1)">x</a>',
    '<a href="JaVaScRiPt:alert(1)">x</a>',
    '<a href="java\tscript:alert(1)">x</a>',
    '<a href="&#106;avascript:alert(1)">x</a>',
    '<a href="data:text/html,<script>alert(1)</script>">x</a>',
    '<iframe src="javascript:alert(1)"></iframe>',
    '<iframe srcdoc="<script>alert(1)</script>"></iframe>',
    '<svg onload="alert(1)"><script>alert(1)</script></svg>',
    "<math><mtext><table><mglyph><style><img src=x onerror=alert(1)>",
    "<body onload=alert(1)>",
    '<div style="background:url(javascript:alert(1))">x</div>',
    '<object data="javascript:alert(1)"></object>',
    '<embed src="javascript:alert(1)">',
    '<form action="javascript:alert(1)"><button>x</button></form>',
    '<base href="javascript:alert(1)//">',
    '<meta http-equiv="refresh" content="0;url=javascript:alert(1)">',
    "<!--<img src=x onerror=alert(1)>-->",
    '<noscript><p title="</noscript><img src=x onerror=alert(1)>">',
    '<details open ontoggle="alert(1)">x</details>',
    '<b onmouseover="alert(1)">x</b>',
    "<style>@import 'javascript:alert(1)';</style>",
    '<img src="x" onerror="alert(1)"/',
]


@pytest.mark.parametrize("source", HOSTILE_HTML)
def test_hostile_html_is_inert(source: str) -> None:
    out = sanitize_output(display({"text/html": source}))
    assert_inert_html(out["data"]["text/html"])


def test_remote_and_relative_urls_are_dropped_links_keep_http() -> None:
    out = sanitize_html(
        '<img src="https://example.org/beacon.png?secret=1"><img src="/files/x.png">'
        '<a href="https://example.org/">web</a><a href="/api/terminals">rel</a>'
        '<a href="#part">here</a><a href="mailto:a@b.c">mail</a>'
    )
    assert "example.org/beacon" not in out and "/files/x.png" not in out
    assert "/api/terminals" not in out
    assert '<a href="https://example.org/"' in out
    assert 'href="#part"' in out and 'href="mailto:a@b.c"' in out


def test_dom_clobbering_and_styling_of_the_page_are_dropped() -> None:
    out = sanitize_html(
        '<img name="jupyterapp" id="x"><b class="jp-Dialog" style="position:fixed;'
        'top:0;color:red;background-image:url(https://e.org/x)">b</b>'
    )
    assert out == '<img><b style="color:red">b</b>'


def test_harmless_markup_is_kept() -> None:
    source = (
        '<table border="1"><thead><tr><th>a</th></tr></thead>'
        '<tbody><tr><td style="text-align:right">1</td></tr></tbody></table>'
        "<b>b</b><i>i</i><code>c</code><pre>p</pre><details><summary>s</summary>d</details>"
        f'<img src="data:image/png;base64,{PNG}" alt="png" width="10">'
        '<a href="https://example.org/">link</a>'
    )
    out = sanitize_html(source)
    for kept in (
        '<table border="1">',
        "<th>a</th>",
        '<td style="text-align:right">1</td>',
        "<b>b</b>",
        "<i>i</i>",
        "<code>c</code>",
        "<pre>p</pre>",
        "<details><summary>s</summary>d</details>",
        f'src="data:image/png;base64,{PNG}"',
        'width="10"',
        '<a href="https://example.org/" rel="noopener noreferrer nofollow">link</a>',
    ):
        assert kept in out, (kept, out)


def test_tex_links_are_defused_in_html_markdown_and_latex() -> None:
    tex = r"$\href{javascript:alert(1)}{x}$ $\class{jp-Dialog}{y}$ \url{javascript:z} $\frac12$"
    for mime in ("text/html", "text/markdown", "text/latex"):
        out = sanitize_output(display({mime: tex}))
        text = "".join(out["data"].values())
        for command in ("\\href", "\\class", "\\url"):
            assert command not in text, (mime, text)
        assert "\\frac12" in text


# TeX that MathJax reads. MathJax (v2's tex2jax and v3's FindTeX, as nbconvert's HTML export
# and JupyterLab run them) typesets the text of the page: entities decoded, text joined
# across <wbr>, <br> (as a newline) and comments, broken at any other element. The model
# below reads an HTML text that way, independently of the sanitiser, and lists the control
# sequences MathJax's tokenizer would then see.
_ACTIVE_TEX = {
    "href", "url", "class", "cssId", "style", "data", "bbox", "require", "unicode",
    "mmlToken", "texttip", "mathtip", "toggle", "tooltip", "action", "html",
    "def", "gdef", "edef", "xdef", "let", "newcommand", "renewcommand", "providecommand",
    "newenvironment", "renewenvironment", "DeclareMathOperator", "Newextarrow", "setOptions",
    "global", "DeclarePairedDelimiter", "DeclarePairedDelimiterX", "DeclarePairedDelimiterXPP",
    "newtagform", "renewtagform",
}  # fmt: skip


class _MathJaxText(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.strings: list[str] = [""]

    def handle_data(self, data: str) -> None:
        self.strings[-1] += data

    def handle_comment(self, data: str) -> None:
        pass  # joined across, like <wbr>

    def handle_starttag(self, tag: str, attrs: Any) -> None:
        if tag == "br":
            self.strings[-1] += "\n"
        elif tag != "wbr":
            self.strings.append("")

    def handle_endtag(self, tag: str) -> None:
        if tag not in ("br", "wbr"):
            self.strings.append("")


def mathjax_strings(markup: str) -> list[str]:
    """The strings MathJax looks for math in, in an HTML text."""
    parser = _MathJaxText()
    parser.feed(markup)
    parser.close()
    return parser.strings


def tex_commands(text: str) -> list[str]:
    """The control sequences MathJax's TeX tokenizer reads in ``text``."""
    return [m.group(1) for m in re.finditer(r"\\([A-Za-z]+|.)", text, re.DOTALL)]


def active_tex(output: dict[str, Any]) -> list[str]:
    """The active TeX commands MathJax would read in a sanitised output's html and latex."""
    data = output["data"]
    texts = [*mathjax_strings(data.get("text/html", "")), data.get("text/latex", "")]
    return [c for t in texts for c in tex_commands(t) if c in _ACTIVE_TEX]


TEX_ATTACKS = [
    r"$\hr<wbr>ef{javascript:alert(1)}{x}$",  # the finding: nh3 keeps <wbr>, MathJax joins
    r"$\bbox[background:url(https://example.org/x.png)]{x}$",  # the finding: a remote CSS load
    r"$\bbox[5px,border:1px solid;background-image:u\72l(//example.org/x)]{x}$",
    r"$\h<!-- -->ref{javascript:alert(1)}{x}$",
    r"$\<wbr>href{javascript:alert(1)}{x}$",
    r"$\h<wbr>r<wbr>e<wbr>f{javascript:alert(1)}{x}$",
    r"$&#92;href{javascript:alert(1)}{x}$",
    r"$&bsol;href{javascript:alert(1)}{x}$",
    r"$\&#104;ref{javascript:alert(1)}{x}$",
    r"$&#x5C;&#x68;&#x72;&#x65;&#x66;{javascript:alert(1)}{x}$",
    r"$\\\href{javascript:alert(1)}{x}$",
    r"$\href1{javascript:alert(1)}{x}$",
    r"$\style{background:url(//example.org/x)}{x}$",
    r"$\cssId{jp-main-dock-panel}{x}$",
    r"$\data{x=y}{z}$",
    r"$\mmlToken{mi}[href='javascript:alert(1)']{x}$",
    r"$\require{action}\toggle{a}{b}\endtoggle$",
    r"$\unicode[Arial]{x41}$",
    r"$\texttip{x}{tip}\mathtip{x}{tip}\tooltip{x}{tip}$",
    # Definitions build the active commands under other names, and last for the whole page
    # (a program's output could redefine the user's own \alpha).
    r"$\def\go{\hr ef}\newcommand{\h}[1]{\hr#1}\let\x\relax\gdef\alpha{b}$",
    r"$\renewcommand{\sum}{\text{sum}}\DeclareMathOperator{\op}{op}\setOptions{x}$",
    r"$\global\let\a\b \DeclarePairedDelimiter\abs{\lvert}{\rvert}\newtagform{b}{[}{]}$",
    r"$\newcommand*{\x}{y}\DeclarePairedDelimiterXPP\p[1]{a}(){b}{#1}$",
    r"\begin{equation}\hr<wbr>ef{javascript:alert(1)}{x}\end{equation}",
]


@pytest.mark.parametrize("mime", ["text/html", "text/markdown", "text/latex"])
@pytest.mark.parametrize("tex", TEX_ATTACKS)
def test_mathjax_reads_no_active_tex(mime: str, tex: str) -> None:
    raw = display({mime: tex})
    # The attack is there as MathJax would read the raw output (HTML for html and markdown,
    # the text itself for latex, whose markup MathJax never sees).
    before = mathjax_strings(tex) if mime != "text/latex" else [tex]
    if mime == "text/latex" and ("<" in tex or "&" in tex):
        pytest.skip("markup and entities are plain characters in text/latex")
    assert [c for t in before for c in tex_commands(t) if c in _ACTIVE_TEX]
    out = sanitize_output(raw)
    assert active_tex(out) == [], (tex, out["data"])


HARMLESS_TEX = [
    r"$\frac{1}{2} + \alpha^2$",
    r"$$\sum_{i=0}^{n} x_i \leq \mathbf{v} \cdot \hat{u}$$",
    r"\begin{align} a &= b \\ c &= \sqrt{d} \end{align}",
    r"$\color{red}{x} \text{hrefs} \mathrm{url}$",
    r"\(\left( \int_0^\infty e^{-x} dx \right)\)",
]


@pytest.mark.parametrize("mime", ["text/html", "text/markdown", "text/latex"])
@pytest.mark.parametrize("tex", HARMLESS_TEX)
def test_harmless_math_still_reads_as_math(mime: str, tex: str) -> None:
    out = sanitize_output(display({mime: tex}))
    data = out["data"]
    if mime == "text/latex":
        seen, expected = data["text/latex"], tex
    else:
        seen = "".join(mathjax_strings(data["text/html"]))
        # Markdown has its own backslash escapes (\\ and \( lose a backslash), as anywhere
        # markdown is rendered: the reference is the markdown rendered as is.
        source = MarkdownIt("commonmark").render(tex) if mime == "text/markdown" else tex
        expected = "".join(mathjax_strings(source))
    # The same control sequences, in order, as MathJax reads them: nothing defused.
    assert tex_commands(seen) == tex_commands(expected)
    assert "\u200b" not in seen


# -- markdown -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "source",
    [
        "[x](javascript:alert(1))",
        "[x](JAVASCRIPT:alert(1))",
        "[x](<javascript:alert(1)>)",
        "[x][r]\n\n[r]: javascript:alert(1)",
        "<javascript:alert(1)>",
        "![x](javascript:alert(1))",
        "[x](data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==)",
        "<img src=x onerror=alert(1)>",
        "<script>alert(1)</script>",
        '<a href="javascript:alert(1)">x</a>',
        "<div>\n\n<img src=x onerror=alert(1)>\n\n</div>",
        "```\n</code><script>alert(1)</script>\n```",
    ],
)
def test_markdown_is_rendered_and_cleaned(source: str) -> None:
    out = sanitize_output(display({"text/markdown": source, "text/plain": "md"}))
    assert set(out["data"]) == {"text/html", "text/plain"}, out
    assert_inert_html(out["data"]["text/html"])


def test_markdown_keeps_its_formatting() -> None:
    out = sanitize_output(
        display(
            {"text/markdown": "# T\n\n*i* **b** `a<b` [w](https://e.org/)\n\n| a |\n|---|\n| 1 |"}
        )
    )
    html = out["data"]["text/html"]
    for kept in ("<h1>T</h1>", "<em>i</em>", "<strong>b</strong>", "<code>a&lt;b</code>",
                 '<a href="https://e.org/"', "<table>", "<td>1</td>"):  # fmt: skip
        assert kept in html, (kept, html)


def test_markdown_beside_html_is_dropped_unshown() -> None:
    out = sanitize_output(display({"text/html": "<b>h</b>", "text/markdown": "<script>x</script>"}))
    assert out["data"] == {"text/html": "<b>h</b>"}


# -- SVG and images -----------------------------------------------------------------------

SVG = (
    '<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10" onload="alert(1)">'
    '<script>alert(2)</script><rect width="10" height="10" fill="green"/>'
    '<foreignObject><body xmlns="http://www.w3.org/1999/xhtml"><img src=x onerror=alert(3)>'
    "</body></foreignObject></svg>"
)


def test_svg_is_shown_as_an_image_never_inline() -> None:
    out = sanitize_output(display({"image/svg+xml": SVG, "text/plain": "svg"}))
    assert set(out["data"]) == {"text/html", "text/plain"}
    html = out["data"]["text/html"]
    prefix = '<img src="data:image/svg+xml;base64,'
    assert html.startswith(prefix) and html.endswith('" alt="SVG image">')
    encoded = html[len(prefix) : -len('" alt="SVG image">')]
    assert base64.b64decode(encoded).decode() == SVG  # drawn as it was, by <img>: inert
    assert "<svg" not in html and "onload" not in html


def test_svg_beside_html_is_dropped() -> None:
    out = sanitize_output(display({"image/svg+xml": SVG, "text/html": "<i>x</i>"}))
    assert out["data"] == {"text/html": "<i>x</i>"}


@pytest.mark.parametrize(
    "value",
    [
        'AAAA" onerror="alert(1)',
        "not base64!",
        "AAA",
        12,
        {"a": 1},
        ["aGk=", "aGk="],
    ],
)
def test_bad_base64_images_are_dropped(value: Any) -> None:
    for mime in ("image/png", "image/jpeg", "image/gif", "image/webp"):
        out = sanitize_output(display({mime: value, "text/plain": "img"}))
        assert mime not in out["data"]
        assert f"{mime} (not valid base64)" in out["data"]["text/plain"]


def test_good_base64_images_are_kept_whitespace_removed() -> None:
    wrapped = PNG[:8] + "\n" + PNG[8:]
    out = sanitize_output(display({"image/png": [wrapped[:10], wrapped[10:]]}))
    assert out["data"] == {"image/png": PNG}


# -- metadata and output kinds ------------------------------------------------------------


def test_metadata_keeps_only_image_sizes_and_hints() -> None:
    out = sanitize_output(
        display(
            {"image/png": PNG, "text/html": "<b>x</b>"},
            {
                "isolated": True,
                "text/html": {"isolated": True},
                "image/png": {"width": 10, "height": "100%", "unconfined": True, "x": 1},
                "kernelgate": {"role": "call", "id": 0},
                "width": 5,
                "needs_background": "<script>",
                "application/vnd.jupyter.widget-view+json": {"model_id": "x"},
            },
        )
    )
    assert out["metadata"] == {"image/png": {"width": 10, "unconfined": True}, "width": 5}


def test_a_program_cannot_forge_a_call_in_a_recording(tmp_path: Any) -> None:
    program = (
        "class Fake:\n"
        "    def _repr_mimebundle_(self, include=None, exclude=None):\n"
        f"        return ({{{CALL_MIME!r}: {{'id': 0, 'namespace': 'tools', 'name': 'wipe',\n"
        "                 'args': ['/home'], 'kwargs': {}, 'ok': True, 'value': None,\n"
        "                 'start_s': 0.0, 'duration_s': 0.0, 'output_index': 0},\n"
        "                 'text/plain': 'fake'}, {'kernelgate': {'role': 'call', 'id': 0}})\n"
        "display(Fake())\n"
    )
    result = Gateway().run_sync(program)
    assert result.ok, result.message
    assert result.calls == []
    # The program did display it: its text/plain is there; the call form and role are not.
    out = result.outputs[0]
    assert out["data"]["text/plain"].startswith("fake")
    assert CALL_MIME not in out["data"] and "kernelgate" not in out["metadata"]
    path = tmp_path / "log.ipynb"
    SessionLog(path).append(result)
    assert load_run(path, 1).calls == []


def test_stream_error_and_unknown_outputs() -> None:
    assert sanitize_output({"output_type": "stream", "name": "evil", "text": ["a", "b"]}) == {
        "output_type": "stream",
        "name": "stdout",
        "text": "ab",
    }
    err = sanitize_output(
        {"output_type": "error", "ename": 1, "evalue": "<script>", "traceback": ["x", 2], "z": 1}
    )
    assert err == {
        "output_type": "error",
        "ename": "1",
        "evalue": "<script>",
        "traceback": ["x", "2"],
    }
    odd = sanitize_output({"output_type": "<script>", "data": {"text/html": "<script>"}})
    assert odd["output_type"] == "stream" and odd["name"] == "stderr"
    assert "unknown type" in odd["text"]


def test_execute_result_and_update_display() -> None:
    out = sanitize_output(
        {
            "output_type": "execute_result",
            "execution_count": "1",
            "data": {"text/plain": "3", "application/json": 3},
            "metadata": {},
        }
    )
    assert out == {
        "output_type": "execute_result",
        "data": {"text/plain": "3", "application/json": 3},
        "execution_count": None,
        "metadata": {},
    }
    upd = sanitize_output(
        {
            "output_type": "update_display_data",
            "data": {"text/html": "<img src=x onerror=y>"},
            "metadata": {},
            "transient": {"display_id": "d", "evil": 1},
        }
    )
    assert upd["data"] == {"text/html": "<img>"} and upd["transient"] == {"display_id": "d"}


def test_allowlist_is_what_the_doc_says() -> None:
    assert SAFE_MIME_TYPES == {
        "text/plain", "text/html", "text/markdown", "text/latex", "image/svg+xml",
        "image/png", "image/jpeg", "image/gif", "image/webp", "application/json",
    }  # fmt: skip


def test_inputs_are_not_changed() -> None:
    original = display({"text/html": "<script>x</script>", "application/javascript": "y"})
    copy = json.loads(json.dumps(original))
    sanitize_outputs([original])
    assert original == copy


def test_docstring_examples() -> None:
    result = doctest.testmod(sanitize_module)
    assert result.attempted > 0 and result.failed == 0


# -- kernelgate's own displays ------------------------------------------------------------

NASTY = ["</pre><script>alert(1)</script>", '"onmouseover="alert(1)', "<img src=x onerror=y>"]


@pytest.mark.parametrize("nasty", NASTY)
def test_call_html_is_escaped_text(nasty: str) -> None:
    ok = CallRecord(0, "tools", nasty, [nasty], {nasty: nasty}, ok=True, value={nasty: nasty})
    html = call_html(ok)
    assert_inert_html(html)
    assert "<img" not in html and '"onmouseover' not in html
    # The same call from a crafted recording: any JSON where the host writes numbers.
    crafted = CallRecord(nasty, nasty, nasty, [], {}, ok=True, value=None)  # type: ignore[arg-type]
    crafted.start_s = crafted.duration_s = nasty  # type: ignore[assignment]
    assert_inert_html(call_html(crafted))
    assert "<img" not in call_html(crafted)


def test_header_cell_and_timeline_are_escaped() -> None:
    nasty = NASTY[0] + NASTY[2] + "`"
    result = RunResult(
        status=nasty,
        run_id=nasty,
        started_at=nasty,
        calls=[CallRecord(0, "tools", nasty, [nasty], {}, ok=True, value=nasty, duration_s=0.1)],
    )
    header = run_header_cell(result, 1)["source"]
    # As a front end renders the markdown (raw HTML on, as JupyterLab's markdown cells):
    rendered = MarkdownIt("commonmark", {"html": True}).render(header)
    assert_inert_html(rendered)
    assert "<img" not in rendered and "<script" not in rendered
    cell = run_code_cell(result)
    timeline = next(o for o in cell["outputs"] if o["metadata"]["kernelgate"]["role"] == "timeline")
    assert "<svg" not in timeline["data"]["text/html"]  # only as an <img>'s data URI
    svg = ET.fromstring(timeline_svg_of(timeline) or "")
    for el in svg.iter():
        assert not el.tag.endswith("script")
        assert not any(name.lower().startswith("on") for name in el.attrib)


# -- cost ---------------------------------------------------------------------------------
