"""A program's displayed outputs made inert: what kernelgate shows never runs in a browser.

A program's rich outputs (``display``, ``_repr_*_``, the cell's value) are untrusted data.
Front ends trust outputs that arrive live from a kernel and outputs of a trusted notebook:
JupyterLab runs ``application/javascript``, the ``<script>`` elements and event handlers of
``text/html``, raw HTML inside ``text/markdown``, widgets, and more, with the user's Jupyter
session (which can open a terminal on the host). So every output a program makes passes
through :func:`sanitize_output` before kernelgate shows, returns or records it:

* ``data`` keeps only an allowlist of MIME types (text, a few images, JSON); anything else
  (``application/javascript``, widget views, ``application/x-*``, vendor renderers such as
  Vega or Plotly, and kernelgate's own call type, which would forge a binding call in a
  recording) is removed, and the removal is said in ``text/plain``.
* ``text/html`` is cleaned with nh3 (the Python binding of ammonia, a Rust HTML sanitiser):
  html5ever parses as a browser does, so the usual parser tricks (unclosed tags, comments,
  ``<svg>``/``<math>`` namespace confusion, entity-encoded ``javascript:``) land as text;
  it is allowlist based, maintained, and fast (well under a millisecond per 10 KiB).
* ``text/markdown`` can hold raw HTML and ``javascript:`` links: it is rendered to HTML
  here (markdown-it-py, CommonMark) and that HTML cleaned as above, replacing the markdown.
* ``image/svg+xml`` can hold scripts and event handlers when a front end inlines it: it is
  shown as ``<img src="data:image/svg+xml;base64,...">`` in ``text/html`` instead, where a
  browser never runs its scripts nor loads what it links to.
* images must be valid base64; ``metadata`` keeps only sizes and background hints.

URLs: links keep ``http``, ``https`` and ``mailto``; images only ``data:image/...`` URLs. A
run has no network, and a display that loads a remote image would carry the run's data out
through the reader's browser.

TeX: JupyterLab, nbconvert's HTML export and other viewers typeset math in HTML, markdown
and ``text/latex`` outputs with MathJax, which reads the text of the page: entities
decoded, text joined across ``<wbr>``, ``<br>`` and comments. TeX commands that make links,
HTML attributes or CSS (``\\href``, ``\\url``, ``\\class``, ``\\style``, ``\\bbox``, ...),
load extensions (``\\require``) or define macros (``\\def``, ``\\newcommand``, ``\\let``,
...: they build those commands under other names, and last for the whole page) are
defused wherever MathJax could read them: in the text of the cleaned HTML with every tag
taken out and every entity decoded (more joining than MathJax does, never less), a
zero-width space goes after the backslash, so MathJax reads an unknown one-character
command and plain letters. Other math is left as it was.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import functools
import html
import re
from collections.abc import Mapping
from typing import Any

import nh3

from kernelgate.wire.values import dumps

__all__ = ["SAFE_MIME_TYPES", "sanitize_output", "sanitize_outputs", "sanitize_html"]

_TEXT_TYPES = ("text/plain", "text/html", "text/markdown", "text/latex", "image/svg+xml")
_BINARY_IMAGES = ("image/png", "image/jpeg", "image/gif", "image/webp")
#: The MIME types a program's output may carry (after cleaning, as described above).
SAFE_MIME_TYPES = frozenset({*_TEXT_TYPES, *_BINARY_IMAGES, "application/json"})

# -- HTML ---------------------------------------------------------------------------------

# ammonia's default tags (formatting, lists, tables, details, img, a) plus tfoot; no
# form, iframe, object, embed, style, script, svg, math, link, meta, base.
_TAGS = frozenset({*nh3.ALLOWED_TAGS, "tfoot"})
# No id/name (DOM clobbering of the page's globals), no class (the page's own classes
# could dress a display up as the front end's UI), no event handlers.
_ATTRIBUTES: dict[str, set[str]] = {
    tag: set(attrs) for tag, attrs in nh3.ALLOWED_ATTRIBUTES.items()
}
for _tag in _TAGS:
    _ATTRIBUTES.setdefault(_tag, set()).update({"style", "title"})
_ATTRIBUTES["table"].add("border")
_ATTRIBUTES["*"] = {"style", "title"}
# Styles that only change how text and boxes look: none takes a URL (no background,
# list-style-image, cursor, content...), none moves a box over the page (no position).
_STYLES = frozenset(
    {
        "color", "background-color", "font-weight", "font-style", "font-size", "font-family",
        "text-align", "text-decoration", "vertical-align", "white-space", "line-height",
        "width", "height", "max-width", "max-height", "min-width", "min-height",
        "margin", "margin-top", "margin-right", "margin-bottom", "margin-left",
        "padding", "padding-top", "padding-right", "padding-bottom", "padding-left",
        "border", "border-top", "border-right", "border-bottom", "border-left",
        "border-color", "border-style", "border-width", "border-collapse", "border-spacing",
        "border-radius", "text-overflow", "overflow-wrap", "word-break", "opacity",
    }
)  # fmt: skip
_LINK_SCHEMES = frozenset({"http", "https", "mailto"})
_DATA_IMAGE = re.compile(
    r"^data:image/(?:png|jpeg|gif|webp|svg\+xml);base64,[A-Za-z0-9+/=\s]*$", re.IGNORECASE
)
_URL_ATTRS = frozenset({"href", "src", "cite"})
# TeX commands MathJax (v2 and v3, their extensions included) gives effects beyond math
# with: links, HTML attributes and CSS (which can load URLs), extension loading, options,
# and definitions (which rebuild any of these under another name, and last for the page).
_TEX_ACTIVE = re.compile(
    r"\\(?=(?:href|url|class|cssId|style|data|html|bbox|require|unicode|mmlToken|texttip|"
    r"mathtip|toggle|tooltip|action|includegraphics|setOptions|def|gdef|edef|xdef|let|"
    r"futurelet|global|newcommand|renewcommand|providecommand|newenvironment|"
    r"renewenvironment|DeclareMathOperator|Newextarrow|DeclarePairedDelimiter(?:X|XPP)?|"
    r"newtagform|renewtagform)(?![A-Za-z]))",
    re.IGNORECASE,
)
# A tag as html5ever writes it (attribute values always in double quotes), or a comment.
_MARKUP = re.compile(r'<!--.*?-->|<(?:[^">]|"[^"]*")*>', re.DOTALL)
_ENTITY = re.compile(r"&(?:#[0-9]{1,7}|#[xX][0-9a-fA-F]{1,6}|[A-Za-z][A-Za-z0-9]{0,31});")
_ZWSP = "\u200b"
# html5ever writes a backslash as itself; whatever wrote these spells one.
_BACKSLASH_ENTITY = re.compile(r"&(?:#0*92|#[xX]0*5[cC]|bsol);")


def _keep_url(tag: str, attr: str, value: str) -> str | None:
    if attr not in _URL_ATTRS:
        return value
    url = value.strip()
    if tag == "img" and attr == "src":
        return url if _DATA_IMAGE.match(url) else None
    scheme = url.split(":", 1)[0].lower() if ":" in url else ""
    if scheme in _LINK_SCHEMES:
        return url
    return url if url.startswith("#") else None  # in-page anchors only; no relative paths


@functools.lru_cache(maxsize=1)
def _cleaner() -> nh3.Cleaner:
    return nh3.Cleaner(
        tags=set(_TAGS),
        clean_content_tags={"script", "style"},
        attributes=_ATTRIBUTES,
        attribute_filter=_keep_url,
        url_schemes={*_LINK_SCHEMES, "data"},
        filter_style_properties=set(_STYLES),
        link_rel="noopener noreferrer nofollow",
        strip_comments=True,
    )


def _defuse_tex(text: str) -> str:
    """``text`` (read by MathJax as it is, as ``text/latex`` is) with its active TeX
    commands defused."""
    return _TEX_ACTIVE.sub("\\\\" + _ZWSP, text)


def _defuse_markup(markup: str) -> str:
    """Cleaned HTML with the active TeX commands in its text defused, the text read as
    MathJax reads it or more so: tags taken out, entities decoded."""
    if "\\" not in markup and _BACKSLASH_ENTITY.search(markup) is None:
        return markup  # no backslash, so no TeX command: most outputs
    # Most outputs have nothing to defuse: find that out quickly, map positions only if not.
    if _TEX_ACTIVE.search(html.unescape(_MARKUP.sub("", markup))) is None:
        return markup
    text: list[str] = []
    # Runs of the text: (start in the text, start in the markup, an entity's end or -1).
    runs: list[tuple[int, int, int]] = []
    seen = 0

    def add(piece: str, at: int, entity_end: int) -> None:
        nonlocal seen
        if piece:
            runs.append((seen, at, entity_end))
            text.append(piece)
            seen += len(piece)

    pos = 0
    for tag in [*_MARKUP.finditer(markup), None]:
        end = tag.start() if tag is not None else len(markup)
        while pos < end:
            amp = markup.find("&", pos, end)
            stop = end if amp < 0 else amp
            add(markup[pos:stop], pos, -1)
            pos = stop
            if amp >= 0:
                entity = _ENTITY.match(markup, amp, end)
                if entity is None:
                    add("&", amp, -1)
                    pos = amp + 1
                else:
                    add(html.unescape(entity.group()), amp, entity.end())
                    pos = entity.end()
        if tag is not None:
            pos = tag.end()
    starts = [run[0] for run in runs]
    cuts: set[int] = set()
    for found in _TEX_ACTIVE.finditer("".join(text)):
        begin, at, entity_end = runs[bisect.bisect_right(starts, found.start()) - 1]
        # Just after the backslash: after the entity that spelled it, if one did.
        cuts.add(entity_end if entity_end >= 0 else at + found.start() - begin + 1)
    out = []
    last = 0
    for cut in sorted(cuts):
        out += [markup[last:cut], _ZWSP]
        last = cut
    out.append(markup[last:])
    return "".join(out)


def sanitize_html(source: str) -> str:
    """``source`` as HTML that runs nothing and loads nothing: see the module doc.

    >>> sanitize_html('<b onclick="x()">hi</b><script>alert(1)</script><img src=x onerror=y>')
    '<b>hi</b><img>'
    """
    return _defuse_markup(_cleaner().clean(source))


@functools.lru_cache(maxsize=1)
def _markdown() -> Any:
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark", {"html": True}).enable(["table", "strikethrough"])


def _markdown_html(source: str) -> str:
    return sanitize_html(_markdown().render(source))


def _svg_html(source: str) -> str:
    # An SVG drawn by <img> is inert in every browser: no scripts, no external loads.
    encoded = base64.b64encode(source.encode("utf-8", "replace")).decode("ascii")
    return f'<img src="data:image/svg+xml;base64,{encoded}" alt="SVG image">'


# -- outputs ------------------------------------------------------------------------------


def _text(value: Any) -> str | None:
    """A MIME value of a text type: a str, or a list of str (nbformat's multiline form)."""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return "".join(value)
    return None


def _base64(value: Any) -> str | None:
    text = _text(value)
    if text is None:
        return None
    compact = "".join(text.split())
    try:
        base64.b64decode(compact, validate=True)
    except (binascii.Error, ValueError):
        return None
    return compact


def _is_json(value: Any) -> bool:
    try:
        # The C encoder made once (json.dumps makes an encoder per call): what it accepts
        # is what json.dumps(value, allow_nan=False) accepts; a cycle fails as
        # RecursionError instead of ValueError.
        dumps(value)
    except (TypeError, ValueError, RecursionError):
        return False
    return True


def _removed_note(removed: list[str]) -> str:
    names = ", ".join(sorted(set(removed)))
    return f"[kernelgate: {names} output removed: programs' outputs are shown inert]"


def _clean_data(data: Any) -> tuple[dict[str, Any], list[str]]:
    """The bundle's allowed MIME types, cleaned; and the types removed."""
    if not isinstance(data, Mapping):
        return {"text/plain": str(data)}, []
    removed: list[str] = []
    out: dict[str, Any] = {}
    for mime, value in data.items():
        if not isinstance(mime, str) or mime not in SAFE_MIME_TYPES:
            removed.append(str(mime)[:100])
            continue
        if mime in _BINARY_IMAGES:
            clean = _base64(value)
            if clean is None:
                removed.append(f"{mime} (not valid base64)")
            else:
                out[mime] = clean
        elif mime == "application/json":
            if _is_json(value):
                out[mime] = value
            else:
                removed.append(f"{mime} (not JSON)")
        else:
            # A non-text value is shown as its text (nbformat wants text here); the
            # cleaning below then applies to that text as to any.
            text = _text(value)
            out[mime] = str(value) if text is None else text
    # Rich text: HTML cleaned; markdown and SVG become cleaned HTML. Where a bundle has
    # HTML, front ends show it before markdown and SVG, so those are dropped unshown.
    if "text/html" in out:
        out["text/html"] = sanitize_html(out["text/html"])
        out.pop("text/markdown", None)
        out.pop("image/svg+xml", None)
    elif "text/markdown" in out:
        out["text/html"] = _markdown_html(out.pop("text/markdown"))
        out.pop("image/svg+xml", None)
    elif "image/svg+xml" in out:
        out["text/html"] = _svg_html(out.pop("image/svg+xml"))
    if "text/latex" in out:
        out["text/latex"] = _defuse_tex(out["text/latex"])
    return out, removed


_IMAGE_META = {"width", "height", "unconfined", "needs_background"}


def _meta_value(key: str, value: Any) -> Any:
    if key in ("width", "height"):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value < 1e5
        return value if ok else None
    if key == "unconfined":
        return value if isinstance(value, bool) else None
    if key == "needs_background":
        return value if value in ("light", "dark") else None
    return None


def _clean_metadata(metadata: Any, data: Mapping[str, Any]) -> dict[str, Any]:
    """Only image sizes and hints, top level or per MIME type. Dropped: ``isolated``
    (front ends differ on what the iframe may do), ``kernelgate`` (marks kernelgate's own
    outputs: a program must not pass as one), and everything else."""
    if not isinstance(metadata, Mapping):
        return {}
    out: dict[str, Any] = {}
    for key, value in metadata.items():
        if key in _IMAGE_META and (clean := _meta_value(key, value)) is not None:
            out[key] = clean
        elif key in data and key in _BINARY_IMAGES and isinstance(value, Mapping):
            per = {
                k: c
                for k, v in value.items()
                if k in _IMAGE_META and (c := _meta_value(k, v)) is not None
            }
            if per:
                out[key] = per
    return out


def _str(value: Any, limit: int | None = None) -> str:
    text = value if isinstance(value, str) else str(value)
    return text if limit is None else text[:limit]


def sanitize_output(output: dict[str, Any]) -> dict[str, Any]:
    """A new nbformat v4 output, safe to show, from one a program made (see the module doc).

    >>> sanitize_output({"output_type": "display_data", "metadata": {},
    ...     "data": {"application/javascript": "alert(1)", "text/plain": "<JS>"}})["data"]
    {'text/plain': "<JS>\\n[kernelgate: application/javascript output removed: programs' outputs are shown inert]"}
    """  # noqa: E501
    kind = output.get("output_type") if isinstance(output, Mapping) else None
    if kind == "stream":
        name = output.get("name")
        return {
            "output_type": "stream",
            "name": name if name in ("stdout", "stderr") else "stdout",
            "text": _text(output.get("text")) or "",
        }
    if kind == "error":
        tb = output.get("traceback")
        return {
            "output_type": "error",
            "ename": _str(output.get("ename", "")),
            "evalue": _str(output.get("evalue", "")),
            "traceback": [_str(line) for line in tb] if isinstance(tb, list) else [],
        }
    if kind in ("display_data", "execute_result", "update_display_data"):
        data, removed = _clean_data(output.get("data", {}))
        if removed:
            note = _removed_note(removed)
            plain = data.get("text/plain")
            data["text/plain"] = f"{plain}\n{note}" if plain else note
        clean: dict[str, Any] = {"output_type": kind, "data": data}
        if kind == "execute_result":
            count = output.get("execution_count")
            clean["execution_count"] = count if type(count) is int else None
        clean["metadata"] = _clean_metadata(output.get("metadata"), data)
        transient = output.get("transient")
        if isinstance(transient, Mapping) and isinstance(transient.get("display_id"), str):
            clean["transient"] = {"display_id": transient["display_id"]}
        return clean
    shown = _str(kind)[:100]
    return {
        "output_type": "stream",
        "name": "stderr",
        "text": f"[kernelgate: an output of unknown type {shown!r} removed]\n",
    }


def sanitize_outputs(outputs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """:func:`sanitize_output` for each output, in order."""
    return [sanitize_output(o) for o in outputs]
