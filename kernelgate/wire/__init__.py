"""kernelgate's fd-3 wire protocol: sans-I/O and stdlib only (the child imports it).

Bytes in, events out: :class:`Connection` turns frames into the events of
:mod:`kernelgate.wire.events` and back, consulting one transition table per role
(:mod:`kernelgate.wire.state`) for what it sends and what it receives.
:mod:`~kernelgate.wire.values` checks the JSON boundary; :mod:`~kernelgate.wire.zygote` is
the warm pool's own small codec. Nothing here does I/O or imports the rest of kernelgate.
"""

from __future__ import annotations

from .connection import CHILD, HOST, Connection
from .errors import LocalProtocolError, ProtocolError, RemoteProtocolError
from .events import (
    CHILD_RUN_STATUSES,
    DEBUG_EVENTS,
    USAGE_KEYS,
    CallReply,
    CallRequest,
    ClearOutput,
    DebugEvent,
    DebugReply,
    DebugRequest,
    DisplayData,
    ErrorOutput,
    Event,
    ExecuteReply,
    ExecuteRequest,
    ExecuteResult,
    OpenBindings,
    Stream,
    UpdateDisplayData,
)
from .framing import DEFAULT_MAX_FRAME_BYTES, FrameDecoder
from .messages import BINDINGS_TARGET, CALL_MIME, PROTOCOL_VERSION, MessageFactory
from .state import BINDINGS_OPEN, DONE, ERROR, EXECUTING, IDLE, RESULT, TRANSITIONS
from .values import NotJSONError, ValueTooLargeError, check_json, dumps, loads

__all__ = [
    "BINDINGS_OPEN",
    "BINDINGS_TARGET",
    "CALL_MIME",
    "CHILD",
    "CHILD_RUN_STATUSES",
    "DEBUG_EVENTS",
    "DEFAULT_MAX_FRAME_BYTES",
    "DONE",
    "ERROR",
    "EXECUTING",
    "HOST",
    "IDLE",
    "PROTOCOL_VERSION",
    "RESULT",
    "USAGE_KEYS",
    "CallReply",
    "CallRequest",
    "Connection",
    "ClearOutput",
    "DebugEvent",
    "DebugReply",
    "DebugRequest",
    "DisplayData",
    "UpdateDisplayData",
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
    "TRANSITIONS",
    "ValueTooLargeError",
    "check_json",
    "dumps",
    "loads",
]
