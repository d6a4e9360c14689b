"""What travels on fd 3, as events: frozen, slotted value classes (as in h11).

Host -> child: :class:`OpenBindings`, :class:`ExecuteRequest`, :class:`CallReply`.
Child -> host: :class:`CallRequest`, :class:`Stream`, :class:`DisplayData`,
:class:`ExecuteResult`, :class:`ErrorOutput`, :class:`ExecuteReply`.

``docs/protocol.md`` shows the Jupyter message each event becomes.

The classes are written out rather than made with ``dataclasses``: the child imports this
module on every cold start, and building nine dataclasses costs more (about 9 ms) than the
rest of the wire together.
"""

from __future__ import annotations

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
    "USAGE_KEYS",
]

#: Statuses the child may report in ``execute_reply``. The others (timeout, interrupted,
#: worker_exit, protocol) are decided by the host only, and a child reporting one is a
#: protocol violation; the host may also decide sandbox_unavailable, invalid_output and
#: output_limit itself. See ``docs/protocol.md``.
CHILD_RUN_STATUSES = frozenset(
    {"ok", "exception", "invalid_output", "output_limit", "sandbox_unavailable"}
)


class _Event:
    """Frozen, slotted, compared and hashed by value, shown like a dataclass."""

    __slots__: tuple[str, ...] = ()

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is frozen: cannot set {name!r}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"{type(self).__name__} is frozen: cannot delete {name!r}")

    def _values(self) -> tuple[Any, ...]:
        return tuple(getattr(self, name) for name in self.__slots__)

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self._values() == other._values()

    def __hash__(self) -> int:
        return hash((type(self).__name__, *self._values()))

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__slots__)
        return f"{type(self).__name__}({fields})"


_set = object.__setattr__


class OpenBindings(_Event):
    """comm_open on target ``kernelgate.bindings``: the namespaces and their bindings.

    ``namespaces`` maps a namespace to ``{binding name: spec}``; a spec is
    ``{"params": [[name, kind, has_default], ...], "signature": str, "doc": str}`` where
    ``kind`` is an ``inspect.Parameter`` kind name such as ``"POSITIONAL_OR_KEYWORD"``.
    """

    __slots__ = ("comm_id", "namespaces")
    comm_id: str
    namespaces: dict[str, dict[str, dict[str, Any]]]

    def __init__(self, comm_id: str, namespaces: dict[str, dict[str, dict[str, Any]]]) -> None:
        _set(self, "comm_id", comm_id)
        _set(self, "namespaces", namespaces)


class ExecuteRequest(_Event):
    """execute_request: the program, and options for the child under ``metadata.kernelgate``."""

    __slots__ = ("code", "options")
    code: str
    options: dict[str, Any]

    def __init__(self, code: str, options: dict[str, Any] | None = None) -> None:
        _set(self, "code", code)
        _set(self, "options", {} if options is None else options)


class CallReply(_Event):
    """comm_msg answering call ``call_id``: a value, or the host error as ename/evalue."""

    __slots__ = ("call_id", "ok", "value", "ename", "evalue")
    call_id: int
    ok: bool
    value: Any
    ename: str
    evalue: str

    def __init__(
        self, call_id: int, ok: bool, value: Any = None, ename: str = "", evalue: str = ""
    ) -> None:
        _set(self, "call_id", call_id)
        _set(self, "ok", ok)
        _set(self, "value", value)
        _set(self, "ename", ename)
        _set(self, "evalue", evalue)


class CallRequest(_Event):
    """comm_msg: the program called ``namespace.name(*args, **kwargs)``."""

    __slots__ = ("call_id", "namespace", "name", "args", "kwargs")
    call_id: int
    namespace: str
    name: str
    args: list[Any]
    kwargs: dict[str, Any]

    def __init__(
        self, call_id: int, namespace: str, name: str, args: list[Any], kwargs: dict[str, Any]
    ) -> None:
        _set(self, "call_id", call_id)
        _set(self, "namespace", namespace)
        _set(self, "name", name)
        _set(self, "args", args)
        _set(self, "kwargs", kwargs)


class Stream(_Event):
    """stream: text the program wrote to ``stdout`` or ``stderr``."""

    __slots__ = ("name", "text")
    name: str
    text: str

    def __init__(self, name: str, text: str) -> None:
        _set(self, "name", name)
        _set(self, "text", text)


class DisplayData(_Event):
    """display_data: a MIME bundle shown by ``display(obj)``."""

    __slots__ = ("data", "metadata")
    data: dict[str, Any]
    metadata: dict[str, Any]

    def __init__(self, data: dict[str, Any], metadata: dict[str, Any] | None = None) -> None:
        _set(self, "data", data)
        _set(self, "metadata", {} if metadata is None else metadata)


class ExecuteResult(_Event):
    """execute_result: the run's value. ``application/json`` is present when it is JSON."""

    __slots__ = ("data", "metadata", "execution_count")
    data: dict[str, Any]
    metadata: dict[str, Any]
    execution_count: int

    def __init__(
        self,
        data: dict[str, Any],
        metadata: dict[str, Any] | None = None,
        execution_count: int = 1,
    ) -> None:
        _set(self, "data", data)
        _set(self, "metadata", {} if metadata is None else metadata)
        _set(self, "execution_count", execution_count)


class ErrorOutput(_Event):
    """error: an exception, with a traceback of the program's own frames only."""

    __slots__ = ("ename", "evalue", "traceback")
    ename: str
    evalue: str
    traceback: list[str]

    def __init__(self, ename: str, evalue: str, traceback: list[str]) -> None:
        _set(self, "ename", ename)
        _set(self, "evalue", evalue)
        _set(self, "traceback", traceback)


class ExecuteReply(_Event):
    """execute_reply: the end of the run. ``run_status`` is in :data:`CHILD_RUN_STATUSES`."""

    __slots__ = ("status", "run_status", "execution_count", "ename", "evalue", "traceback", "usage")
    status: str  # Jupyter's: "ok" or "error"
    run_status: str
    execution_count: int
    ename: str
    evalue: str
    traceback: list[str]
    #: What the child measured of itself at its end (keys in :data:`USAGE_KEYS`, each
    #: optional): the host has the reply before it has reaped the child.
    usage: dict[str, float]

    def __init__(
        self,
        status: str,
        run_status: str = "ok",
        execution_count: int = 1,
        ename: str = "",
        evalue: str = "",
        traceback: list[str] | None = None,
        usage: dict[str, float] | None = None,
    ) -> None:
        _set(self, "status", status)
        _set(self, "run_status", run_status)
        _set(self, "execution_count", execution_count)
        _set(self, "ename", ename)
        _set(self, "evalue", evalue)
        _set(self, "traceback", [] if traceback is None else traceback)
        _set(self, "usage", {} if usage is None else usage)


#: The usage figures an ``execute_reply`` may carry: CPU seconds and peak memory in bytes.
USAGE_KEYS = frozenset({"cpu_user_s", "cpu_system_s", "peak_memory_bytes"})

HostEvent = OpenBindings | ExecuteRequest | CallReply
ChildEvent = CallRequest | Stream | DisplayData | ExecuteResult | ErrorOutput | ExecuteReply
Event = HostEvent | ChildEvent
