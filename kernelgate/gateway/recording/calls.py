"""A binding call as a notebook output: the same in saved runs and live in the kernel.

Each binding call becomes a ``display_data`` output with three forms:

* ``application/vnd.kernelgate.call+json``: the whole call (namespace, name, args, kwargs,
  ok, value or error, start and duration). Never shortened: replay reads this.
* ``text/plain``: one line, ``tools.search('x', limit=3) -> [3 items]  1.2 ms``.
* ``text/html``: the line, unfolding to the arguments and the answer as indented JSON,
  shortened when large.

Outputs kernelgate adds (calls, the timeline) carry ``{"kernelgate": {"role": ...}}`` in
their output metadata, so a reader can tell them from what the program itself printed.

Built only from escaped text: every value in the HTML, the program's (namespace, name,
arguments, answer, error) and the host's (id, times), goes through ``html.escape``.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Mapping
from typing import Any

from kernelgate.model.codec import call_to_json
from kernelgate.model.result import CallRecord
from kernelgate.wire.messages import CALL_MIME, binding_label

from .values import fmt_bytes, fmt_duration, json_size, preview_json, short_repr, summarize

__all__ = [
    "ARGS_PREVIEW_CHARS",
    "VALUE_PREVIEW_CHARS",
    "call_html",
    "call_label",
    "call_line",
    "call_output",
    "duration_text",
]

#: Shown at most in a call's HTML form; the JSON form always holds everything.
ARGS_PREVIEW_CHARS = 2000
VALUE_PREVIEW_CHARS = 4000


# -- one call -----------------------------------------------------------------------------


def call_label(
    namespace: str,
    name: str,
    args: Iterable[Any],
    kwargs: Mapping[str, Any],
    width: int = 100,
    *,
    arg_width: int = 30,
) -> str:
    """How the program wrote the call, shortened: ``tools.search('x', limit=3)``.

    >>> call_label("tools", "search", ["messages"], {"limit": 3})
    "tools.search('messages', limit=3)"
    >>> call_label("tools", "web-search", ["x" * 50], {}, arg_width=12)
    "tools['web-search']('xxxxxxxxx…')"
    """
    parts = [short_repr(a, arg_width) for a in args]
    parts += [f"{k}={short_repr(v, arg_width)}" for k, v in kwargs.items()]
    head = binding_label(namespace, name)
    text = f"{head}({', '.join(parts)})"
    if len(text) > width:
        text = text[: max(width - 2, len(head) + 1)] + "…)"
    return text


def _outcome(record: CallRecord, width: int = 60) -> str:
    if record.ok:
        return summarize(record.value, width)
    if record.error is None:
        return "raised an error"
    text = f"raised {record.error.ename}"
    if record.error.evalue:
        text += ": " + record.error.evalue
    if len(text) > width:
        text = text[: width - 1] + "…"
    return text.replace("\n", " ")


def call_line(record: CallRecord) -> str:
    """One line for a call: ``tools.search('x') -> [3 items]  1.2 ms``.

    >>> r = CallRecord(0, "tools", "search", ["x"], {}, ok=True, value=[1, 2, 3],
    ...                duration_s=0.0012)
    >>> call_line(r)
    "tools.search('x') -> [1, 2, 3]  1.2 ms"
    """
    label = call_label(record.namespace, record.name, record.args, record.kwargs)
    return f"{label} -> {_outcome(record)}  {duration_text(record.duration_s)}"


def _pre(value: Any, limit: int) -> str:
    text, cut = preview_json(value, limit)
    out = f'<pre style="margin:0">{html.escape(text)}</pre>'
    if cut:
        out += (
            f"<small>shortened to {limit:,} characters of {fmt_bytes(json_size(value))} "
            f"as JSON; the whole value is in this output's {html.escape(CALL_MIME)} data"
            "</small>"
        )
    return out


def _esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def duration_text(seconds: Any) -> str:
    """:func:`fmt_duration` of a number, else the value as text (a crafted recording's)."""
    ok = isinstance(seconds, (int, float)) and not isinstance(seconds, bool)
    return fmt_duration(seconds) if ok else str(seconds)


def call_html(record: CallRecord) -> str:
    """The call as HTML: its one-line form, unfolding to arguments and answer.

    Built only from escaped text: every value in it, the program's (namespace, name,
    arguments, answer, error) and the host's (id, times), goes through ``html.escape``.

    >>> r = CallRecord(0, "tools", "</pre><script>x()</script>", ['"onmouseover="x()'], {},
    ...                ok=True, value="<img src=x onerror=y()>")
    >>> "<script>" in call_html(r) or "<img" in call_html(r) or '"onmouseover' in call_html(r)
    False
    """
    label = call_label(record.namespace, record.name, record.args, record.kwargs)
    # A failed call stands out in both JupyterLab themes: white on dark red is ~8:1 on any
    # background (a red text colour alone is ~1.4:1 on the dark theme's cells).
    color = "" if record.ok else ' style="color:#ffffff;background-color:#9b1c1c"'
    rows = [
        (
            "call",
            _esc(
                f"#{record.id}, started at +{duration_text(record.start_s)}, "
                f"took {duration_text(record.duration_s)}"
            ),
        ),
    ]
    if record.args:
        rows.append(("args", _pre(record.args, ARGS_PREVIEW_CHARS)))
    if record.kwargs:
        rows.append(("kwargs", _pre(record.kwargs, ARGS_PREVIEW_CHARS)))
    if record.ok:
        rows.append(("value", _pre(record.value, VALUE_PREVIEW_CHARS)))
    elif record.error is not None:
        message = f"{record.error.ename}: {record.error.evalue}"
        if len(message) > ARGS_PREVIEW_CHARS:
            message = message[:ARGS_PREVIEW_CHARS] + "…"
        rows.append(("error", f'<pre style="margin:0">{html.escape(message)}</pre>'))
    body = "".join(
        f'<tr><th style="text-align:left;vertical-align:top">{name}</th>'
        f'<td style="text-align:left">{cell}</td></tr>'
        for name, cell in rows
    )
    summary = (
        f"<code>{html.escape(label)}</code> &rarr; "
        f"<code{color}>{html.escape(_outcome(record))}</code> "
        f"<small>{_esc(duration_text(record.duration_s))}</small>"
    )
    return (
        f'<details class="kernelgate-call"><summary>{summary}</summary>'
        f"<table>{body}</table></details>"
    )


def call_output(record: CallRecord) -> dict[str, Any]:
    """The call as a ``display_data`` output (JSON, one line, and HTML forms)."""
    return {
        "output_type": "display_data",
        "data": {
            CALL_MIME: call_to_json(record),
            "text/html": call_html(record),
            "text/plain": call_line(record),
        },
        "metadata": {"kernelgate": {"role": "call", "id": record.id}},
    }
