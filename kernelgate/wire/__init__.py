"""kernelgate's fd-3 wire protocol: sans-I/O and stdlib only (the child imports it).

Bytes in, events out: :class:`Connection` turns frames into the events of
:mod:`kernelgate.wire.events` and back. :mod:`~kernelgate.wire.values` checks the JSON
boundary. Nothing here does I/O or imports the rest of kernelgate.
"""

from __future__ import annotations

from .connection import CHILD, HOST, Connection
from .errors import LocalProtocolError, ProtocolError, RemoteProtocolError
from .events import (
    CHILD_RUN_STATUSES,
    USAGE_KEYS,
    CallReply,
    CallRequest,
    DisplayData,
    ErrorOutput,
    Event,
    ExecuteReply,
    ExecuteRequest,
    ExecuteResult,
    OpenBindings,
    Stream,
)
from .framing import DEFAULT_MAX_FRAME_BYTES, FrameDecoder
from .messages import BINDINGS_TARGET, CALL_MIME, PROTOCOL_VERSION, MessageFactory
from .values import NotJSONError, ValueTooLargeError, check_json, dumps, loads

__all__ = [
    "BINDINGS_TARGET",
    "CALL_MIME",
    "CHILD",
    "CHILD_RUN_STATUSES",
    "DEFAULT_MAX_FRAME_BYTES",
    "HOST",
    "PROTOCOL_VERSION",
    "USAGE_KEYS",
    "CallReply",
    "CallRequest",
    "Connection",
    "DisplayData",
    "ErrorOutput",
    "Event",
    "ExecuteReply",
    "ExecuteRequest",
    "ExecuteResult",
    "FrameDecoder",
    "LocalProtocolError",
    "MessageFactory",
    "NotJSONError",
    "OpenBindings",
    "ProtocolError",
    "RemoteProtocolError",
    "Stream",
    "ValueTooLargeError",
    "check_json",
    "dumps",
    "loads",
]
