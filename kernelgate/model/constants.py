"""Numbers both sides of the fd-3 wire, or both the host and the child's sandbox, agree on."""

from __future__ import annotations

__all__ = ["FRAME_OVERHEAD", "RUN_GID", "RUN_UID"]

#: Bytes a frame needs around a payload (header, parent header, field names): a value may
#: use ``max_frame_bytes - FRAME_OVERHEAD``.
FRAME_OVERHEAD = 4096

#: On a root host a run's uid 0 is this uid outside its user namespace (``nobody``): the
#: host chowns the run directory to it, the child's sandbox maps and drops to it.
RUN_UID = 65534
RUN_GID = 65534
