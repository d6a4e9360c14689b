"""Saving runs as notebooks and reading them back, under the names the notebooks API has
always had them.

Writing is :mod:`kernelgate.gateway.recording.store` (atomic: the old file or the new one,
never a mix), a layer below, because ``Gateway(record_to=DIR)`` writes runs; reading back
is :mod:`.reading`. Both are importable from here (``save_run``, ``load_run``,
``RecordedRun``, ``NotARunError``...).
"""

from __future__ import annotations

from kernelgate.gateway.recording.store import (
    RunDirectory,
    atomic_write,
    dumps_notebook,
    save_run,
    temp_prefix,
)
from kernelgate.model.codec import NotARunError, RecordingError
from kernelgate.model.codec import call_from_json as call_record_from_json

from .reading import (
    MAX_RECORDING_BYTES,
    RecordedRun,
    cell_to_run,
    load_run,
    load_runs,
    read_notebook,
    run_cells,
    run_result,
)

__all__ = [
    "NotARunError",
    "RecordingError",
    "MAX_RECORDING_BYTES",
    "RecordedRun",
    "RunDirectory",
    "save_run",
    "load_run",
    "load_runs",
    "atomic_write",
    "cell_to_run",
    "call_record_from_json",
    "dumps_notebook",
    "read_notebook",
    "run_cells",
    "run_result",
    "temp_prefix",
]
