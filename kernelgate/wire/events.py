"""What travels on fd 3, as events: frozen, slotted dataclasses (as in h11).

Host -> child: :class:`OpenBindings`, :class:`ExecuteRequest`, :class:`CallReply`.
Child -> host: :class:`CallRequest`, :class:`Stream`, :class:`DisplayData`,
:class:`ExecuteResult`, :class:`ErrorOutput`, :class:`ExecuteReply`.

``docs/protocol.md`` shows the Jupyter message each event becomes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "OpenBindings",
    "ExecuteRequest",
    "CallReply",
    "CallRequest",
    "Stream",
    "DisplayData",
    "ExecuteResult",
    "ErrorOutput",
    "ExecuteReply",
    "Event",
    "HostEvent",
    "ChildEvent",
    "CHILD_RUN_STATUSES",
]

#: Statuses the child may report in ``execute_reply``. The others (timeout, interrupted,
#: worker_exit, protocol) are decided by the host only, and a child reporting one is a
#: protocol violation; the host may also decide sandbox_unavailable, invalid_output and
#: output_limit itself. See ``docs/protocol.md``.
CHILD_RUN_STATUSES = frozenset(
    {"ok", "exception", "invalid_output", "output_limit", "sandbox_unavailable"}
)


@dataclass(frozen=True, slots=True)
class OpenBindings:
    """comm_open on target ``kernelgate.bindings``: the namespaces and their bindings.

    ``namespaces`` maps a namespace to ``{binding name: spec}``; a spec is
    ``{"params": [[name, kind, has_default], ...], "signature": str, "doc": str}`` where
    ``kind`` is an ``inspect.Parameter`` kind name such as ``"POSITIONAL_OR_KEYWORD"``.
    """

    comm_id: str
    namespaces: dict[str, dict[str, dict[str, Any]]]


@dataclass(frozen=True, slots=True)
class ExecuteRequest:
    """execute_request: the program, and options for the child under ``metadata.kernelgate``."""

    code: str
    options: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class CallReply:
    """comm_msg answering call ``call_id``: a value, or the host error as ename/evalue."""

    call_id: int
    ok: bool
    value: Any = None
    ename: str = ""
    evalue: str = ""


@dataclass(frozen=True, slots=True)
class CallRequest:
    """comm_msg: the program called ``namespace.name(*args, **kwargs)``."""

    call_id: int
    namespace: str
    name: str
    args: list[Any]
    kwargs: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Stream:
    """stream: text the program wrote to ``stdout`` or ``stderr``."""

    name: str
    text: str


@dataclass(frozen=True, slots=True)
class DisplayData:
    """display_data: a MIME bundle shown by ``display(obj)``."""

    data: dict[str, Any]
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ExecuteResult:
    """execute_result: the run's value. ``application/json`` is present when it is JSON."""

    data: dict[str, Any]
    metadata: dict[str, Any] = field(default_factory=dict)
    execution_count: int = 1


@dataclass(frozen=True, slots=True)
class ErrorOutput:
    """error: an exception, with a traceback of the program's own frames only."""

    ename: str
    evalue: str
    traceback: list[str]


@dataclass(frozen=True, slots=True)
class ExecuteReply:
    """execute_reply: the end of the run. ``run_status`` is in :data:`CHILD_RUN_STATUSES`."""

    status: str  # Jupyter's: "ok" or "error"
    run_status: str = "ok"
    execution_count: int = 1
    ename: str = ""
    evalue: str = ""
    traceback: list[str] = field(default_factory=list)


HostEvent = OpenBindings | ExecuteRequest | CallReply
ChildEvent = CallRequest | Stream | DisplayData | ExecuteResult | ErrorOutput | ExecuteReply
Event = HostEvent | ChildEvent
