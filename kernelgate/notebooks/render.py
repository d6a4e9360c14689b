"""A run as an nbformat notebook; the cells themselves are the gateway's writer's.

:func:`run_to_notebook` is :func:`~kernelgate.gateway.recording.render.run_notebook_dict`
(what a saved run holds) as an nbformat ``NotebookNode``. The rendering lives in
:mod:`kernelgate.gateway.recording.render`, under this layer, because
``Gateway(record_to=DIR)`` writes runs; its names are re-exported here, where the
notebooks API has always had them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kernelgate.gateway.recording.render import (
    ARGS_PREVIEW_CHARS,
    CALL_MIME,
    FORMAT,
    KERNELSPEC,
    LANGUAGE_INFO,
    VALUE_PREVIEW_CHARS,
    call_html,
    call_json,
    call_label,
    call_line,
    call_output,
    notebook_dict,
    run_code_cell,
    run_header_cell,
    run_metadata,
    run_notebook_dict,
    timeline_img,
    timeline_output,
    timeline_svg_of,
    value_shown,
)
from kernelgate.model.result import RunResult

if TYPE_CHECKING:
    from nbformat import NotebookNode

__all__ = [
    "ARGS_PREVIEW_CHARS",
    "CALL_MIME",
    "FORMAT",
    "KERNELSPEC",
    "LANGUAGE_INFO",
    "VALUE_PREVIEW_CHARS",
    "call_html",
    "call_json",
    "call_label",
    "call_line",
    "call_output",
    "notebook_dict",
    "run_code_cell",
    "run_header_cell",
    "run_metadata",
    "run_notebook_dict",
    "run_to_notebook",
    "timeline_img",
    "timeline_output",
    "timeline_svg_of",
    "to_node",
    "value_shown",
]


def run_to_notebook(result: RunResult, *, timeline: bool = True) -> NotebookNode:
    """The run as an nbformat v4 notebook: one code cell holding the program and outputs.

    >>> from kernelgate import Gateway
    >>> nb = run_to_notebook(Gateway(bindings={"add": lambda a, b: a + b}).run_sync(
    ...     "print(await tools.add(1, 2))"))
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
