"""Runs as notebooks: record every run as ``.ipynb``, replay it, see its calls on a timeline.

>>> import tempfile
>>> from kernelgate import Gateway
>>> from kernelgate.notebooks import load_run, replay, save_run, timeline_svg
>>> r = Gateway(bindings={"add": lambda a, b: a + b}).run_sync("await tools.add(1, 2)")
>>> path = save_run(r, tempfile.mkdtemp() + "/run.ipynb")  # record
>>> load_run(path).calls[0].value                           # read back
3
>>> replay(path).diverged                                   # replay from the recording
False
>>> timeline_svg(load_run(path)).startswith("<svg")         # picture
True

Importing this package needs only the standard library and ``nh3`` (``run_to_notebook``
imports nbformat when called); it loads none of the gateway's runtime (``replay`` does,
when called).

Writing a run (its cells, calls, timeline; atomically) is
:mod:`kernelgate.gateway.recording`, a layer below, because ``Gateway(record_to=DIR)``
writes runs too; ``save_run``, ``call_output``, ``timeline_svg`` and the rest are
re-exported here, and :mod:`.render`, :mod:`.calls`, :mod:`.timeline` and :mod:`.store`
keep the names they always had. Here: :mod:`.reading` (reading back, checked),
:mod:`.session` (a session log), :mod:`.replay` with :mod:`.matching` and :mod:`.report`,
:mod:`.cellrun` (the kernel front's run records), and ``run_to_notebook`` (nbformat). The
JSON of runs and calls is :mod:`kernelgate.model.codec`.
"""

from __future__ import annotations

from .calls import call_line, call_output
from .reading import NotARunError, RecordedRun, load_run, load_runs
from .render import CALL_MIME, KERNELSPEC, run_to_notebook
from .replay import replay, replay_async
from .report import CallMatch, Difference, ReplayReport
from .session import SessionLog
from .store import save_run
from .timeline import timeline_summary, timeline_svg

__all__ = [
    "CALL_MIME",
    "KERNELSPEC",
    "CallMatch",
    "Difference",
    "NotARunError",
    "RecordedRun",
    "ReplayReport",
    "SessionLog",
    "call_line",
    "call_output",
    "load_run",
    "load_runs",
    "replay",
    "replay_async",
    "run_to_notebook",
    "save_run",
    "timeline_summary",
    "timeline_svg",
]
