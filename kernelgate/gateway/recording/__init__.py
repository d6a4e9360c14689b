"""A run as a notebook (``.ipynb``), written atomically: what ``Gateway(record_to=DIR)``
and :func:`kernelgate.save_run` write.

It lives in the gateway layer because the gateway's own ``record_to=DIR`` writes runs:
the writer must sit at or below the layer that uses it (docs/design.md, "The layers").
:mod:`kernelgate.notebooks`, above, reads these notebooks back, keeps session logs,
replays, converts to nbformat, and re-exports the writer under its own names.

Modules: :mod:`.values` (short readable forms of JSON values), :mod:`.calls` (a binding
call as an output), :mod:`.timeline` (the calls as SVG), :mod:`.render` (a run as cells)
and :mod:`.store` (saving, atomically). Standard library, ``nh3`` (the sanitizer) and the
model only: no nbformat, nothing of the runtime.
"""
