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

from kernelgate.gateway.recording.render import timeline_img
from kernelgate.gateway.recording.values import fmt_duration
from kernelgate.model.codec import encode_metadata
from kernelgate.model.result import RunResult

from .report import ReplayReport

__all__ = [
    "REPLAY_ROLE",
    "RUN_ROLE",
    "SETUP_ROLE",
    "record_of_cell",
    "replay_output",
    "run_record_output",
    "run_summary",
    "setup_output",
    "source_digest",
]

#: ``metadata.kernelgate.role`` of the run record output.
RUN_ROLE = "run"
#: ``metadata.kernelgate.role`` of a setup cell's note.
SETUP_ROLE = "setup"
#: ``metadata.kernelgate.role`` of a replay cell's report (``#| replay``): the kernel's
#: words about the run, never the program's output.
REPLAY_ROLE = "replay"


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


#: The limits a run record shows (all of them are in its metadata).
_SHOWN_LIMITS = (
    "wall_seconds",
    "cpu_seconds",
    "memory_bytes",
    "max_processes",
    "max_output_bytes",
    "max_calls",
)


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"  # pragma: no cover - the loop returns


def _limit(name: str, value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if name.endswith("_bytes"):
        return _size(value)
    if name.endswith("_seconds"):
        return f"{value:g} s"
    return f"{value:g}"


def _facts(result: RunResult) -> list[tuple[str, str]]:
    """The rows of a run record's details: what a person asks of a run after its output."""
    rows = [("run id", result.run_id or "-"), ("status", result.status)]
    if result.message and result.status != "ok":
        rows.append(("message", result.message))
    rows.append(("isolation", result.isolation or "none (no sandbox was entered)"))
    usage = result.usage or {}
    cpu = sum(float(usage.get(k, 0.0)) for k in ("cpu_user_s", "cpu_system_s"))
    if usage:
        by = usage.get("measured_by")
        rows.append(("CPU", f"{cpu * 1000:.1f} ms" + (f" (measured by the {by})" if by else "")))
        peak = usage.get("peak_memory_bytes")
        if isinstance(peak, (int, float)) and not isinstance(peak, bool):
            rows.append(("peak memory", _size(peak)))
        if "warm" in usage:
            rows.append(("child", "warm (from the pool)" if usage["warm"] else "cold"))
    rows.append(("wall time", fmt_duration(result.duration_s)))
    limits = result.limits or {}
    shown = [f"{n} {_limit(n, limits[n])}" for n in _SHOWN_LIMITS if n in limits]
    if shown:
        rows.append(("limits", ", ".join(shown)))
    return rows


def _details_html(result: RunResult, summary: str) -> str:
    """The record as HTML a person can open: the summary line, and under it the
    timeline picture (when the run made calls) and the facts. Escaped text, a data-URI
    image and inert tags only (``details`` opens without script)."""
    rows = "".join(
        f'<tr><th style="text-align:left;padding-right:1em">{html.escape(k)}</th>'
        f'<td style="text-align:left">{html.escape(v)}</td></tr>'
        for k, v in _facts(result)
    )
    picture = timeline_img(result) if result.calls else ""
    return (
        f'<details class="kernelgate-run"><summary>{_small(summary, "kernelgate-run")}'
        f'</summary>{picture}<table class="kernelgate-run-facts"><tbody>{rows}</tbody>'
        "</table></details>"
    )


def run_record_output(
    result: RunResult, program: str, source: str, run_number: int | None = None
) -> dict[str, Any]:
    """The run record of a kernel cell: a ``display_data`` output whose metadata holds the
    run metadata, the program that ran and the digest of the cell's ``source``. Shown as
    one line that opens (a ``<details>``) onto the call timeline, the usage, the
    isolation, the limits and the run id."""
    meta = encode_metadata(result, run_number)
    meta["role"] = RUN_ROLE
    meta["program"] = program
    meta["source_digest"] = source_digest(source)
    summary = run_summary(result)
    return {
        "output_type": "display_data",
        "data": {"text/html": _details_html(result, summary), "text/plain": summary},
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


def replay_output(report: ReplayReport) -> dict[str, Any]:
    """A replay's report as a ``display_data`` output: its verdict line (``MATCHES`` or
    ``DIVERGED: n differences``) opening onto the whole report. The report quotes the
    program's output and the recording, so the HTML is escaped text in inert tags."""
    text = report.format()
    verdict = text.rsplit("\n", 1)[-1]
    body = html.escape(text)
    return {
        "output_type": "display_data",
        "data": {
            "text/html": f'<details class="kernelgate-replay"><summary>'
            f"{_small(verdict, 'kernelgate-replay')}</summary><pre>{body}</pre></details>",
            "text/plain": text,
        },
        "metadata": {
            "kernelgate": {
                "role": REPLAY_ROLE,
                "diverged": report.diverged,
                "differences": report.difference_count,
            }
        },
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
