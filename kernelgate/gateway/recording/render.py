"""A run as notebook cells: the program, its outputs in order, and its binding calls.

Each binding call becomes a ``display_data`` output (see :mod:`.calls`) placed where the
call completed among the program's outputs; the run's facts go to the cell's
``metadata.kernelgate`` (:func:`kernelgate.model.codec.encode_metadata`, the one encoder
the kernel front uses too).

Outputs kernelgate adds (calls, the timeline) carry ``{"kernelgate": {"role": ...}}`` in
their output metadata, so a reader can tell them from what the program itself printed.

A program's own outputs are untrusted: a cell holds them only as
:func:`kernelgate.gateway.sanitize.sanitize_output` leaves them (no script, handler or
``javascript:`` link; no ``kernelgate`` metadata nor call MIME type, so a program cannot
pass its displays off as kernelgate's calls). Everything kernelgate writes itself is built
from escaped text: the call HTML, the header cell's markdown, the timeline's SVG.
"""

from __future__ import annotations

import base64
import html
import re
from collections.abc import Mapping
from typing import Any

from kernelgate.gateway.sanitize import sanitize_outputs
from kernelgate.model.codec import FORMAT, call_to_json, encode_metadata
from kernelgate.model.language import DEFAULT_LANGUAGE, Language, kernelspec, language_info
from kernelgate.model.result import RunResult
from kernelgate.wire.messages import CALL_MIME

from .calls import (
    ARGS_PREVIEW_CHARS,
    VALUE_PREVIEW_CHARS,
    call_html,
    call_label,
    call_line,
    call_output,
    duration_text,
)
from .timeline import MIN_WIDTH, timeline_summary, timeline_svg

__all__ = [
    "ARGS_PREVIEW_CHARS",
    "CALL_MIME",
    "FORMAT",
    "KERNELSPEC",
    "LANGUAGE_INFO",
    "VALUE_PREVIEW_CHARS",
    "call_label",
    "call_line",
    "call_html",
    "call_json",
    "call_output",
    "run_metadata",
    "run_code_cell",
    "run_header_cell",
    "run_notebook_dict",
    "notebook_dict",
    "timeline_img",
    "timeline_output",
    "timeline_svg_of",
    "value_shown",
]

#: The kernel that runs kernelgate's Python programs in Jupyter (a notebook of runs in
#: another language names that language's: :func:`kernelgate.model.language.kernelspec`).
KERNELSPEC = kernelspec("python")
#: What the kernel reports in ``kernel_info`` and a recording's notebook metadata holds:
#: the same, so JupyterLab does not mark a recording "modified" the moment it opens it.
LANGUAGE_INFO: dict[str, Any] = language_info("python")

#: What a run's cell says about it under ``metadata.kernelgate`` (the codec's encoder).
run_metadata = encode_metadata
#: The whole call as its ``application/vnd.kernelgate.call+json`` form holds it.
call_json = call_to_json

_JSON_MIME = re.compile(r"^application/(.*\+)?json$")
_CELL_ID_BAD = re.compile(r"[^A-Za-z0-9_-]")


# -- a run ---------------------------------------------------------------------------------------


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


def timeline_output(result: RunResult) -> dict[str, Any]:
    """The run's call timeline as an output: ``text/html`` holding an ``<img>`` of the SVG
    as a data URI, and a ``text/plain`` summary.

    An ``<img>``, not ``image/svg+xml``: JupyterLab refuses SVG in an untrusted notebook
    (every recording opens untrusted) and strips inline ``<svg>`` from HTML, while an image
    from a data URI renders, and cannot run anything.
    """
    summary = timeline_summary(result)
    img = timeline_img(result)
    return {
        "output_type": "display_data",
        "data": {"text/html": img, "text/plain": summary},
        "metadata": {"kernelgate": {"role": "timeline"}},
    }


def timeline_img(result: RunResult) -> str:
    """The run's call timeline as an ``<img>`` of its SVG (a data URI): see
    :func:`timeline_output` for why an image."""
    svg = base64.b64encode(timeline_svg(result).encode("utf-8")).decode("ascii")
    alt = html.escape(timeline_summary(result), quote=True)
    # As wide as the space it gets (the SVG follows it, its text stays 11 px), never
    # narrower than the width its labels were laid out for. Both survive the sanitiser
    # of an untrusted notebook: the width attribute, and min-width among its styles.
    return (
        f'<img class="kernelgate-timeline" alt="{alt}" width="100%" '
        f'style="min-width:{MIN_WIDTH}px" src="data:image/svg+xml;base64,{svg}"/>'
    )


def timeline_svg_of(output: Mapping[str, Any]) -> str | None:
    """The SVG document inside a :func:`timeline_output` (``None`` if it holds none)."""
    data = output.get("data")
    page = data.get("text/html") if isinstance(data, Mapping) else None
    m = _DATA_URI.search(page) if isinstance(page, str) else None
    return base64.b64decode(m.group(1)).decode("utf-8") if m else None


_DATA_URI = re.compile(r'src="data:image/svg\+xml;base64,([A-Za-z0-9+/=]+)"')


def value_shown(output: dict[str, Any], value: Any) -> dict[str, Any]:
    """An ``execute_result`` as shown: its repr (``text/plain``), without the
    ``application/json`` copy of the value (JupyterLab would show a collapsed JSON tree);
    the JSON stays in the run metadata (``metadata.kernelgate.value``)."""
    data = output.get("data")
    if value is None or not isinstance(data, dict) or "text/plain" not in data:
        return output
    if data.get("application/json") != value:
        return output  # a rich repr of its own (``_repr_json_``), not the value's copy
    return {**output, "data": {k: v for k, v in data.items() if k != "application/json"}}


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
    count = run_number if run_number is not None else 1
    outputs = [_clean_output(o) for o in sanitize_outputs(list(result.outputs))]
    for n, shown in enumerate(outputs):
        if shown["output_type"] == "execute_result":
            outputs[n] = {**value_shown(shown, result.value), "execution_count": count}
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
        merged.append(timeline_output(result))
    metadata: dict[str, Any] = {"kernelgate": run_metadata(result, run_number)}
    if result.status != "ok":
        # Jupyter's convention: running this cell again is expected to fail too, so
        # nbclient and nbconvert --execute go on past it.
        metadata["tags"] = ["raises-exception"]
    return {
        "cell_type": "code",
        "execution_count": count,
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
    took = duration_text(result.duration_s)
    lines = [
        f"### Run {_md(run_number)} · {_md(result.status)} · {_md(took)}",
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


def notebook_dict(
    cells: list[dict[str, Any]],
    kernelgate_meta: dict[str, Any],
    language: Language = DEFAULT_LANGUAGE,
) -> dict[str, Any]:
    """A v4.5 notebook as a plain dict, with the kernelspec and ``language_info`` of
    kernelgate's kernel for ``language`` (the language of the runs it holds)."""
    return {
        "cells": cells,
        "metadata": {
            "kernelgate": kernelgate_meta,
            "kernelspec": kernelspec(language),
            "language_info": language_info(language),
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }


def run_notebook_dict(result: RunResult, *, timeline: bool = True) -> dict[str, Any]:
    """The run as a notebook dict (v4.5): one code cell holding the program and outputs.

    :func:`kernelgate.notebooks.run_to_notebook` is the same as an nbformat node.
    """
    return notebook_dict(
        [run_code_cell(result, timeline=timeline)],
        {"kind": "run", **run_metadata(result)},
        result.language,
    )
