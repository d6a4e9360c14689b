"""A run as notebook cells: the program, its outputs in order, and its binding calls.

Each binding call becomes a ``display_data`` output with three forms:

* ``application/vnd.kernelgate.call+json``: the whole call (namespace, name, args, kwargs,
  ok, value or error, start and duration). Never shortened: replay reads this.
* ``text/plain``: one line, ``tools.search('x', limit=3) -> [3 items]  1.2 ms``.
* ``text/html``: the line, unfolding to the arguments and the answer as indented JSON,
  shortened when large.

Outputs kernelgate adds (calls, the timeline) carry ``{"kernelgate": {"role": ...}}`` in
their output metadata, so a reader can tell them from what the program itself printed.

A program's own outputs are untrusted: a cell holds them only as
:func:`kernelgate.gateway.sanitize.sanitize_output` leaves them (no script, handler or
``javascript:`` link; no ``kernelgate`` metadata nor call MIME type, so a program cannot
pass its displays off as kernelgate's calls). Everything kernelgate writes itself is built
from escaped text: the call HTML here, the header cell's markdown, the timeline's SVG.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable, Mapping
from dataclasses import asdict, fields, is_dataclass
from typing import TYPE_CHECKING, Any

from kernelgate.gateway.sanitize import sanitize_outputs
from kernelgate.model.result import CallRecord, RunResult
from kernelgate.wire.messages import CALL_MIME, binding_label

from ._values import (
    fmt_bytes,
    fmt_duration,
    json_size,
    key_orders,
    preview_json,
    short_repr,
    summarize,
)

if TYPE_CHECKING:
    from nbformat import NotebookNode

__all__ = [
    "CALL_MIME",
    "FORMAT",
    "KERNELSPEC",
    "LANGUAGE_INFO",
    "call_label",
    "call_line",
    "call_html",
    "call_json",
    "call_output",
    "run_metadata",
    "run_code_cell",
    "run_header_cell",
    "run_to_notebook",
    "notebook_dict",
]

#: Version of kernelgate's recording format (the ``kernelgate`` metadata and call JSON).
FORMAT = 1
#: The kernel that runs kernelgate programs in Jupyter.
KERNELSPEC = {"name": "kernelgate", "display_name": "kernelgate (Python)", "language": "python"}
LANGUAGE_INFO = {
    "name": "python",
    "mimetype": "text/x-python",
    "file_extension": ".py",
    "pygments_lexer": "python3",
    "codemirror_mode": {"name": "python", "version": 3},
}

#: Shown at most in a call's HTML form; the JSON form always holds everything.
ARGS_PREVIEW_CHARS = 2000
VALUE_PREVIEW_CHARS = 4000

_JSON_MIME = re.compile(r"^application/(.*\+)?json$")
_CELL_ID_BAD = re.compile(r"[^A-Za-z0-9_-]")


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
    return f"{label} -> {_outcome(record)}  {_duration(record.duration_s)}"


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


def _duration(seconds: Any) -> str:
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
    color = "" if record.ok else ' style="color:#b00020"'
    rows = [
        (
            "call",
            _esc(
                f"#{record.id}, started at +{_duration(record.start_s)}, "
                f"took {_duration(record.duration_s)}"
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
        f"<small>{_esc(_duration(record.duration_s))}</small>"
    )
    return (
        f'<details class="kernelgate-call"><summary>{summary}</summary>'
        f"<table>{body}</table></details>"
    )


def call_json(record: CallRecord) -> dict[str, Any]:
    """The whole call as the ``application/vnd.kernelgate.call+json`` form holds it.

    A value's dict key order is kept in ``key_order`` when it is not sorted, so a file
    rewritten with sorted keys (Jupyter does that on save) still replays the same order.
    """
    data: dict[str, Any] = {
        "id": record.id,
        "namespace": record.namespace,
        "name": record.name,
        "args": record.args,
        "kwargs": record.kwargs,
        "ok": record.ok,
    }
    if record.ok:
        data["value"] = record.value
        orders = key_orders(record.value)
        if orders is not None:
            data["key_order"] = orders
    else:
        error = record.error
        data["error"] = (
            error.to_dict() if error is not None else {"ename": "", "evalue": "", "traceback": []}
        )
    data["start_s"] = record.start_s
    data["duration_s"] = record.duration_s
    data["output_index"] = record.output_index
    return data


def call_output(record: CallRecord) -> dict[str, Any]:
    """The call as a ``display_data`` output (JSON, one line, and HTML forms)."""
    return {
        "output_type": "display_data",
        "data": {
            CALL_MIME: call_json(record),
            "text/html": call_html(record),
            "text/plain": call_line(record),
        },
        "metadata": {"kernelgate": {"role": "call", "id": record.id}},
    }


# -- a run --------------------------------------------------------------------------------


def _kernelgate_version() -> str:
    import kernelgate

    return kernelgate.__version__


#: RunResult fields a cell holds in its source and outputs rather than in its metadata.
_FROM_OUTPUTS = frozenset({"value", "stdout", "stderr", "outputs", "calls", "program"})


def run_metadata(result: RunResult, run_number: int | None = None) -> dict[str, Any]:
    """What a run's cell says about it under ``metadata.kernelgate``."""
    meta: dict[str, Any] = {
        "format": FORMAT,
        "version": _kernelgate_version(),
        "run_id": result.run_id,
        "status": result.status,
        "started_at": result.started_at,
        "duration_s": result.duration_s,
        "interpreter": result.interpreter,
        "exit_code": result.exit_code,
        "signal": result.signal,
        "error": result.error.to_dict() if result.error is not None else None,
        "limits": dict(result.limits),
        "bindings": [
            {"namespace": ns, "name": name, "signature": sig}
            for ns, table in result.bindings.items()
            for name, sig in table.items()
        ],
        "calls": len(result.calls),
    }
    # Fields added to RunResult later are kept too, as they are (JSON).
    for f in fields(RunResult):
        if f.name not in meta and f.name not in _FROM_OUTPUTS:
            value = getattr(result, f.name)
            if f.name == "note" and not value:
                continue  # most runs have none; recordings made before it stay identical
            is_instance = is_dataclass(value) and not isinstance(value, type)
            meta[f.name] = asdict(value) if is_instance else value
    if run_number is not None:
        meta["run_number"] = run_number
    return meta


def _clean_bundle(data: Any) -> dict[str, Any]:
    """A MIME bundle nbformat accepts: non-JSON types hold text (str or list of str)."""
    if not isinstance(data, dict):
        return {"text/plain": str(data)}
    clean: dict[str, Any] = {}
    for mime, value in data.items():
        if not isinstance(mime, str):
            continue
        if _JSON_MIME.match(mime) or isinstance(value, str):
            clean[mime] = value
        elif isinstance(value, list) and all(isinstance(v, str) for v in value):
            clean[mime] = value
        else:
            clean[mime] = str(value)
    return clean


def _clean_output(output: Mapping[str, Any]) -> dict[str, Any]:
    """An output as nbformat v4 stores it: only the keys its output type allows."""
    kind = output.get("output_type")
    if kind == "stream":
        name = output.get("name")
        return {
            "output_type": "stream",
            "name": name if name in ("stdout", "stderr") else "stdout",
            "text": str(output.get("text", "")),
        }
    if kind in ("display_data", "execute_result"):
        meta = output.get("metadata")
        clean: dict[str, Any] = {"output_type": kind}
        if kind == "execute_result":
            count = output.get("execution_count")
            clean["execution_count"] = count if type(count) is int else None
        clean["data"] = _clean_bundle(output.get("data", {}))
        clean["metadata"] = dict(meta) if isinstance(meta, dict) else {}
        return clean
    if kind == "error":
        tb = output.get("traceback")
        return {
            "output_type": "error",
            "ename": str(output.get("ename", "")),
            "evalue": str(output.get("evalue", "")),
            "traceback": [str(line) for line in tb] if isinstance(tb, list) else [],
        }
    text = str(output)
    return {"output_type": "stream", "name": "stderr", "text": f"[unknown output: {text}]\n"}


def _timeline_output(result: RunResult) -> dict[str, Any]:
    from .timeline import timeline_summary, timeline_svg

    return {
        "output_type": "display_data",
        "data": {
            "image/svg+xml": timeline_svg(result),
            "text/plain": timeline_summary(result),
        },
        "metadata": {"kernelgate": {"role": "timeline"}},
    }


def cell_id(prefix: str, run_id: str) -> str:
    """A valid nbformat cell id from a run id (letters, digits, ``-``, ``_``; <= 64)."""
    return _CELL_ID_BAD.sub("_", f"{prefix}-{run_id}" if run_id else prefix)[:64]


def run_code_cell(
    result: RunResult, run_number: int | None = None, *, timeline: bool = True
) -> dict[str, Any]:
    """The run's code cell: program, outputs with calls in place, and the timeline.

    The program's outputs are sanitised again here (``RunResult.outputs`` from a run
    already are): a ``RunResult`` can come from elsewhere, and a recording is opened, and
    trusted, long after the run.
    """
    outputs = [_clean_output(o) for o in sanitize_outputs(list(result.outputs))]
    calls = sorted(
        result.calls,
        key=lambda c: (min(max(c.output_index, 0), len(outputs)), c.start_s + c.duration_s, c.id),
    )
    merged: list[dict[str, Any]] = []
    i = 0
    for position, output in enumerate([*outputs, None]):
        while i < len(calls) and min(max(calls[i].output_index, 0), len(outputs)) <= position:
            merged.append(call_output(calls[i]))
            i += 1
        if output is not None:
            merged.append(output)
    if timeline and result.calls:
        merged.append(_timeline_output(result))
    metadata: dict[str, Any] = {"kernelgate": run_metadata(result, run_number)}
    if result.status != "ok":
        # Jupyter's convention: running this cell again is expected to fail too, so
        # nbclient and nbconvert --execute go on past it.
        metadata["tags"] = ["raises-exception"]
    return {
        "cell_type": "code",
        "execution_count": 1,
        "id": cell_id("run", result.run_id),
        "metadata": metadata,
        "outputs": merged,
        "source": result.program,
    }


def _when(started_at: str) -> str:
    m = re.match(r"(\d{4}-\d\d-\d\d)T(\d\d:\d\d:\d\d)", started_at)
    return f"{m.group(1)} {m.group(2)} UTC" if m else started_at


# What can start HTML, an entity, a link, an image, a code span, emphasis or a table in
# markdown; plain values (numbers, ids, times) have none, so they read as they are.
_MD_ACTIVE = re.compile(r"([\\`*_\[\]<>&!|~])")


def _md(value: Any) -> str:
    r"""``value`` as literal markdown text on one line.

    >>> print(_md("ok 1.2 ms"), _md("<img src=x onerror=y()> `[a](javascript:b)"))
    ok 1.2 ms \<img src=x onerror=y()\> \`\[a\](javascript:b)
    """
    return _MD_ACTIVE.sub(r"\\\1", " ".join(str(value).split()))


def _code(value: Any) -> str:
    """``value`` for a one-backtick code span: shown as it is, backticks and lines aside."""
    return " ".join(str(value).replace("`", "'").split()) or " "


def run_header_cell(result: RunResult, run_number: int) -> dict[str, Any]:
    """A session log's markdown cell above a run: number, status, duration, error.

    Every value is markdown-escaped (the error message sits in a fence longer than any run
    of backticks in it): a run re-rendered from a crafted recording writes no HTML.
    """
    n = len(result.calls)
    lines = [
        f"### Run {_md(run_number)} · {_md(result.status)} · {_md(_duration(result.duration_s))}",
        "",
        f"run `{_code(result.run_id)}` · started {_md(_when(str(result.started_at)))} · "
        f"{n} binding call{'' if n == 1 else 's'}",
    ]
    if result.error is not None:
        message = result.message
        fence = "```"
        while fence in message:
            fence += "`"
        lines += ["", f"{fence}text", message, fence]
    return {
        "cell_type": "markdown",
        "id": cell_id("about", result.run_id),
        "metadata": {"kernelgate": {"role": "run-header", "run_number": run_number}},
        "source": "\n".join(lines),
    }


def notebook_dict(cells: list[dict[str, Any]], kernelgate_meta: dict[str, Any]) -> dict[str, Any]:
    """A v4.5 notebook as a plain dict, with kernelgate's kernelspec."""
    return {
        "cells": cells,
        "metadata": {
            "kernelgate": kernelgate_meta,
            "kernelspec": dict(KERNELSPEC),
            "language_info": dict(LANGUAGE_INFO),
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }


def run_notebook_dict(result: RunResult, *, timeline: bool = True) -> dict[str, Any]:
    """:func:`run_to_notebook` as a plain dict (no nbformat import)."""
    return notebook_dict(
        [run_code_cell(result, timeline=timeline)], {"kind": "run", **run_metadata(result)}
    )


def run_to_notebook(result: RunResult, *, timeline: bool = True) -> NotebookNode:
    """The run as an nbformat v4 notebook: one code cell holding the program and outputs.

    >>> from kernelgate import Gateway
    >>> nb = Gateway(bindings={"add": lambda a, b: a + b}).run_sync(
    ...     "print(await tools.add(1, 2))").to_notebook()
    >>> [o["output_type"] for o in nb.cells[0].outputs]
    ['display_data', 'stream', 'display_data']
    >>> nb.cells[0].outputs[0].data["text/plain"][:22], nb.metadata.kernelspec.name
    ('tools.add(1, 2) -> 3  ', 'kernelgate')
    """
    return to_node(run_notebook_dict(result, timeline=timeline))


def to_node(nb: dict[str, Any]) -> NotebookNode:
    """A notebook dict as an nbformat ``NotebookNode``, attribute access down to each
    output's ``data``; the MIME values inside stay plain (converting a large answer
    node by node would cost seconds)."""
    from nbformat import NotebookNode, from_dict

    def node(d: dict[str, Any], skip: str = "") -> NotebookNode:
        items = {k: v if k == skip else from_dict(v) for k, v in d.items()}  # type: ignore[no-untyped-call]
        return NotebookNode(items)  # type: ignore[no-untyped-call]

    cells = []
    for cell in nb["cells"]:
        c = node(cell, "outputs")
        if "outputs" in c:
            outs = []
            for output in c["outputs"]:
                o = node(output, "data")
                if "data" in o:
                    o["data"] = NotebookNode(o["data"])  # type: ignore[no-untyped-call]
                outs.append(o)
            c["outputs"] = outs
        cells.append(c)
    top = node(nb, "cells")
    top["cells"] = cells
    return top
