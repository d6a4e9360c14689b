"""Numbers both sides of the fd-3 wire, or both the host and the child's sandbox, agree on."""

from __future__ import annotations

__all__ = ["FRAME_OVERHEAD", "LAUNCH_CONFIG_MAX", "RUN_GID", "RUN_UID"]

#: Bytes a frame needs around a payload (header, parent header, field names): a value may
#: use ``max_frame_bytes - FRAME_OVERHEAD``.
FRAME_OVERHEAD = 4096

#: On a root host each run has a uid and gid of its own (``gateway/runids.py``); this one
#: (``nobody``) only when the host's user namespace does not map their range, shared then
#: by every run, and the child's default when the host names none.
RUN_UID = 65534
RUN_GID = 65534

#: The most bytes of the config the host hands a launcher on its fd 0 (a pipe): less than a
#: pipe's buffer, so the host's one write never blocks.
LAUNCH_CONFIG_MAX = 60 * 1024
