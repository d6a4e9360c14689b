"""A kernel cell as a recording: the run record every executed cell carries in an output.

Front ends save what the kernel *outputs*, never the ``execute_reply`` metadata: JupyterLab,
nbclient, nbconvert and papermill all keep a cell's source, its outputs and their metadata.
So at the end of each run the kernel emits one small ``display_data`` output, the **run
record**: a one-line summary (``run ok · 2 calls · 41 ms``) whose output metadata holds the
run metadata (:func:`kernelgate.model.codec.encode_metadata`, the one encoder that
``save_run`` and ``SessionLog`` use too), plus the full program that ran (setup cells and
the cell) and a digest of the cell's source. Every cell gets one, with outputs or without:
a cell whose output was nothing is still a run that replay and the timeline can read, and
the record is the only place the run's facts survive saving.

Reading a saved notebook (:mod:`.reading`) finds a cell's run through this output; a cell
whose source no longer has the recorded digest was edited after it ran, and is reported
as such, never replayed as if it were the program that ran.

>>> from kernelgate.model.result import RunResult
>>> out = run_record_output(RunResult("ok", duration_s=0.041), "#| setup\\nn = 2\\nn", "n")
>>> out["data"]["text/plain"], out["metadata"]["kernelgate"]["role"]
('run ok · 0 calls · 41.0 ms', 'run')
>>> record_of_cell({"source": "n", "outputs": [out]})["program"]
'#| setup\\nn = 2\\nn'
"""

from __future__ import annotations

import hashlib
import html
from typing import Any

from kernelgate.model.codec import encode_metadata
from kernelgate.model.result import RunResult

from ._values import fmt_duration

__all__ = [
    "RUN_ROLE",
    "SETUP_ROLE",
    "record_of_cell",
    "run_record_output",
    "run_summary",
    "setup_output",
    "source_digest",
]

#: ``metadata.kernelgate.role`` of the run record output.
RUN_ROLE = "run"
#: ``metadata.kernelgate.role`` of a setup cell's note.
SETUP_ROLE = "setup"


def source_digest(source: str) -> str:
    """The digest a run record keeps of its cell's source (``sha256:`` + hex)."""
    return "sha256:" + hashlib.sha256(source.encode("utf-8", "surrogatepass")).hexdigest()


def run_summary(result: RunResult) -> str:
    """One line about a run: ``run ok · 2 calls · 41.0 ms``."""
    n = len(result.calls)
    return (
        f"run {result.status} · {n} call{'' if n == 1 else 's'} · {fmt_duration(result.duration_s)}"
    )


def _small(text: str, cls: str) -> str:
    # No colour of its own: the theme's text colour reads in light and dark alike.
    return f'<small class="{cls}">{html.escape(text)}</small>'


def run_record_output(
    result: RunResult, program: str, source: str, run_number: int | None = None
) -> dict[str, Any]:
    """The run record of a kernel cell: a ``display_data`` output whose metadata holds the
    run metadata, the program that ran and the digest of the cell's ``source``."""
    meta = encode_metadata(result, run_number)
    meta["role"] = RUN_ROLE
    meta["program"] = program
    meta["source_digest"] = source_digest(source)
    summary = run_summary(result)
    return {
        "output_type": "display_data",
        "data": {"text/html": _small(summary, "kernelgate-run"), "text/plain": summary},
        "metadata": {"kernelgate": meta},
    }


def setup_output(number: int) -> dict[str, Any]:
    """The note a setup cell shows instead of running: its code runs before later cells."""
    text = f"setup cell [{number}]: its code runs before every later cell (not on its own)"
    return {
        "output_type": "display_data",
        "data": {"text/html": _small(text, "kernelgate-setup"), "text/plain": text},
        "metadata": {"kernelgate": {"role": SETUP_ROLE, "setup_cell": number}},
    }


def _role(output: Any) -> tuple[str | None, dict[str, Any] | None]:
    meta = output.get("metadata") if isinstance(output, dict) else None
    kg = meta.get("kernelgate") if isinstance(meta, dict) else None
    if not isinstance(kg, dict):
        return None, None
    role = kg.get("role")
    return (role if isinstance(role, str) else None), kg


def record_of_cell(cell: Any) -> dict[str, Any] | None:
    """The run record (its ``metadata.kernelgate``) a kernel cell's outputs hold, if any
    (the last one, should a cell hold several)."""
    outputs = cell.get("outputs") if isinstance(cell, dict) else None
    found = None
    for output in outputs if isinstance(outputs, list) else []:
        role, kg = _role(output)
        if role == RUN_ROLE:
            found = kg
    return found


def is_setup_record(cell: Any) -> bool:
    """Whether a cell's outputs say the kernel took it as a setup cell."""
    outputs = cell.get("outputs") if isinstance(cell, dict) else None
    return any(_role(o)[0] == SETUP_ROLE for o in (outputs if isinstance(outputs, list) else []))
