"""Telling a kernel's clients apart: the owner secret, and message ids used once.

Every client of a kernel holds the same key (the connection file's), and iopub shows every
client everything: session ids, message ids, comm ids, call ids. None of those can tell one
client from another. What can is a secret only the client and the kernel know: a client that
wants runs and bindings of its own (:class:`~kernelgate.jupyter.remote.RemoteGateway`) makes
one and sends it, on shell and control only, in the metadata of each of its requests::

    metadata = {"kernelgate": {"owner": "<at least 22 random characters>"}}

The kernel never publishes request metadata (an iopub message's parent is the request's
*header*), never logs it, and keeps no copy it could answer with. A request that carries an
owner secret is a *private* run (one program, as :meth:`kernelgate.Gateway.run`; no setup
cells, no history), and only a request with the same secret reaches the bindings announced
with it, answers their calls or closes their comm (docs/kernel.md, "Several clients").

The kernel's messages about a request carry that request's header as parent, and a client
knows its messages by the parent's ``msg_id``. So a request that reuses the ``msg_id`` of a
private request is dropped: no client can make the kernel publish messages that claim to
belong to another client's private run (a RemoteGateway's ids are random, so nobody can use
one first). Ordinary requests are not held to this: jupyter_client's KernelManager and its
clients number their messages alike and do reuse each other's ids.

>>> owner_of({"metadata": {"kernelgate": {"owner": "x" * 22}}}) == "x" * 22
True
>>> owner_of({"metadata": {}}) is None
True
>>> seen = RecentIds(2)
>>> for i in ("a", "b", "c"):
...     seen.add(i)
>>> "a" in seen, "c" in seen
(False, True)
"""

from __future__ import annotations

import collections
import hmac
from collections.abc import Mapping
from typing import Any

__all__ = [
    "MIN_OWNER_CHARS",
    "OWNER_FIELD",
    "RecentIds",
    "claims_owner",
    "owner_of",
    "same_owner",
]

#: Where a request carries its owner secret: ``metadata.kernelgate.owner``.
OWNER_FIELD = "owner"
#: The shortest owner secret accepted (``secrets.token_urlsafe(16)``, 128 bits, is 22).
MIN_OWNER_CHARS = 22
_MAX_OWNER_CHARS = 512
#: How many private requests' ids the kernel remembers, beside those still queued or running.
RECENT_IDS = 65_536


def owner_of(msg: Mapping[str, Any]) -> str | None:
    """The owner secret a request carries (``metadata.kernelgate.owner``), or ``None``.

    Raises ``ValueError`` for a field that is there but is no secret (the message never
    quotes the value: it may be a secret typed in the wrong place).
    """
    meta = msg.get("metadata")
    ours = meta.get("kernelgate") if isinstance(meta, Mapping) else None
    if not isinstance(ours, Mapping) or OWNER_FIELD not in ours:
        return None
    owner = ours[OWNER_FIELD]
    if not isinstance(owner, str) or not MIN_OWNER_CHARS <= len(owner) <= _MAX_OWNER_CHARS:
        raise ValueError(
            f"metadata.kernelgate.{OWNER_FIELD} must be a random string of {MIN_OWNER_CHARS} "
            f"to {_MAX_OWNER_CHARS} characters (RemoteGateway makes one with "
            "secrets.token_urlsafe); leave it out for an ordinary request"
        )
    return owner


def claims_owner(msg: Mapping[str, Any]) -> bool:
    """Whether a request has an owner field at all (a malformed one included)."""
    meta = msg.get("metadata")
    ours = meta.get("kernelgate") if isinstance(meta, Mapping) else None
    return isinstance(ours, Mapping) and OWNER_FIELD in ours


def same_owner(a: str | None, b: str | None) -> bool:
    """Whether two owner secrets are the same one (in constant time; ``None`` is nobody's)."""
    if a is None or b is None:
        return False
    encode = "utf-8", "surrogatepass"
    return hmac.compare_digest(a.encode(*encode), b.encode(*encode))


class RecentIds:
    """The last ``size`` message ids added (the oldest are forgotten first)."""

    def __init__(self, size: int = RECENT_IDS) -> None:
        self.size = size
        self._ids: collections.OrderedDict[str, None] = collections.OrderedDict()

    def add(self, msg_id: str) -> None:
        self._ids[msg_id] = None
        if len(self._ids) > self.size:
            self._ids.popitem(last=False)

    def __contains__(self, msg_id: object) -> bool:
        return msg_id in self._ids
