"""Protocol errors, named after who broke the protocol (as in h11)."""

from __future__ import annotations


class ProtocolError(Exception):
    """Base class: something on fd 3 did not follow the kernelgate wire protocol."""


class LocalProtocolError(ProtocolError):
    """We were asked to send something the protocol does not allow (a bug on our side)."""


class RemoteProtocolError(ProtocolError):
    """The peer sent bytes or a message the protocol does not allow.

    On the host this means the child misbehaved: the run ends with status ``"protocol"``
    and this message.
    """
