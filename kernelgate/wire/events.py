"""What travels on fd 3, as events: frozen, slotted value classes, valid by construction.

Host -> child: :class:`OpenBindings`, :class:`ExecuteRequest`, :class:`CallReply`,
:class:`DebugRequest`.
Child -> host: :class:`CallRequest`, :class:`Stream`, :class:`DisplayData`,
:class:`ExecuteResult`, :class:`ErrorOutput`, :class:`ExecuteReply`, and in a debugged run
:class:`DebugReply` and :class:`DebugEvent`.

Every constructor checks its fields (types, ``Stream.name``, call ids, statuses, usage)
and raises :class:`~kernelgate.wire.errors.LocalProtocolError` saying which field was
wrong, with the value: an invalid event cannot exist on either side. The receiving
:class:`~kernelgate.wire.connection.Connection` builds events through the same
constructors and reports their refusals as
:class:`~kernelgate.wire.errors.RemoteProtocolError` (as h11 does), so what one side may
not make, the other refuses with the same words.

>>> Stream("stdout", "hi\\n")
Stream(name='stdout', text='hi\\n')
>>> Stream("bogus", "hi")
Traceback (most recent call last):
...
kernelgate.wire.errors.LocalProtocolError: stream name must be 'stdout' or 'stderr', got 'bogus'

Values (call arguments, results, MIME data) are checked for type only: whether they are
lossless JSON within a budget is :func:`~kernelgate.wire.values.check_json`'s job, done by
the caller before it sends. ``docs/protocol.md`` shows the Jupyter message each event
becomes.

The classes are written out rather than made with ``dataclasses``: the child imports this
module on every cold start, and building nine dataclasses costs more (about 5 ms) than the
rest of the wire together. The checks are plain ``type(x) is T`` tests: a binding call
makes two events on each side, and each costs well under a microsecond.
"""

# long: one class per fd-3 message (eleven), each validating its own fields where it is
# built; read together they are the protocol's vocabulary, and the helpers they share are
# a few lines each.

from __future__ import annotations

from typing import Any

from .errors import LocalProtocolError

__all__ = [
    "OpenBindings",
    "ExecuteRequest",
    "CallReply",
    "CallRequest",
    "Stream",
    "DisplayData",
    "UpdateDisplayData",
    "ClearOutput",
    "ExecuteResult",
    "ErrorOutput",
    "ExecuteReply",
    "DebugRequest",
    "DebugReply",
    "DebugEvent",
    "DEBUG_EVENTS",
    "Event",
    "HostEvent",
    "ChildEvent",
    "CHILD_RUN_STATUSES",
    "USAGE_KEYS",
    "STREAM_NAMES",
    "show",
]

#: Statuses the child may report in ``execute_reply``. The others (timeout, interrupted,
#: worker_exit, protocol) are decided by the host only, and a child reporting one is a
#: protocol violation; the host may also decide sandbox_unavailable, invalid_output and
#: output_limit itself. See ``docs/protocol.md``.
CHILD_RUN_STATUSES = frozenset(
    {"ok", "exception", "invalid_output", "output_limit", "sandbox_unavailable"}
)
#: The usage figures an ``execute_reply`` may carry: CPU seconds and peak memory in bytes.
USAGE_KEYS = frozenset({"cpu_user_s", "cpu_system_s", "peak_memory_bytes"})
#: The Debug Adapter Protocol events a child may send: only ``stopped``. ``continued`` and
#: ``terminated`` are the host's to say (it knows when it resumed or ended the run), so a
#: child cannot make a frontend believe a run goes on or ended.
DEBUG_EVENTS = frozenset({"stopped"})
_MAX_COMMAND = 64
#: The streams a program writes to.
STREAM_NAMES = ("stdout", "stderr")

_MAX_SHOWN = 80
_USAGE_CEILING = 1e15  # beyond any CPU seconds or bytes a run can have used


def show(value: Any) -> str:
    """``repr(value)`` cut to 80 characters, for error messages that quote a peer's value.

    >>> show("x" * 100)[-5:], show([1, 2])
    ('xx...', '[1, 2]')
    """
    try:
        text = repr(value)
    except Exception:  # e.g. RecursionError for a deeply nested value
        text = "<unrepresentable>"
    return text if len(text) <= _MAX_SHOWN else text[: _MAX_SHOWN - 3] + "..."


def _bad(field: str, must: str, value: Any) -> LocalProtocolError:
    return LocalProtocolError(f"{field} must be {must}, got {show(value)}")


def _text(field: str, value: Any) -> str:
    if type(value) is not str:
        raise _bad(field, "a string", value)
    return value


def _obj(field: str, value: Any) -> dict[str, Any]:
    if type(value) is not dict:
        raise _bad(field, "an object (dict)", value)
    checked: dict[str, Any] = value
    return checked


def _metadata(field: str, value: Any) -> dict[str, Any]:
    """An output's metadata: an object, ``{}`` when absent."""
    return {} if value is None else _obj(field, value)


def _count(field: str, value: Any) -> int:
    if type(value) is not int or value < 0:
        raise _bad(field, "an integer from 0 up", value)
    return value


def _str_list(field: str, value: Any) -> list[str]:
    if type(value) is not list:
        raise _bad(field, "a list of strings", value)
    for i, item in enumerate(value):
        if type(item) is not str:
            raise _bad(f"{field}[{i}]", "a string", item)
    return value


def _mime_bundle(field: str, data: Any) -> dict[str, Any]:
    """A MIME bundle: str keys; str values except for MIME types ending in ``json``."""
    bundle = _obj(field, data)
    for key, value in bundle.items():
        if type(key) is not str:
            raise _bad(f"{field} key", "a string (a MIME type)", key)
        if type(value) is not str and not key.endswith("json"):
            raise LocalProtocolError(
                f"{field}[{show(key)}] must be a string (only JSON MIME types hold other "
                f"values), got {show(value)}"
            )
    return bundle


class _Event:
    """Frozen, slotted, compared and hashed by value, shown like a dataclass."""

    __slots__: tuple[str, ...] = ()
    #: What the event is on the wire, for messages: its Jupyter message type.
    wire_name = ""

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
    Only the nesting is checked here (object of objects of objects, string keys): a spec
    may carry more keys than these (``"schema"``, the arguments' JSON Schema the child
    checks; ``"described"``, what ``describe(format="json")`` says of a binding that
    takes or returns named types, which ``help()`` renders).

    >>> OpenBindings("bindings-1", {"tools": {"add": {"params": []}}})
    OpenBindings(comm_id='bindings-1', namespaces={'tools': {'add': {'params': []}}})
    >>> OpenBindings("bindings-1", {"tools": ["add"]})
    Traceback (most recent call last):
    ...
    kernelgate.wire.errors.LocalProtocolError: comm_open namespaces['tools'] must be ...
    """

    __slots__ = ("comm_id", "namespaces")
    wire_name = "comm_open"
    comm_id: str
    namespaces: dict[str, dict[str, dict[str, Any]]]

    def __init__(self, comm_id: str, namespaces: dict[str, dict[str, dict[str, Any]]]) -> None:
        if type(comm_id) is not str or not comm_id:
            raise _bad("comm_open comm_id", "a non-empty string", comm_id)
        _obj("comm_open namespaces", namespaces)
        for ns, specs in namespaces.items():
            if type(ns) is not str:
                raise _bad("comm_open namespace name", "a string", ns)
            _obj(f"comm_open namespaces[{show(ns)}]", specs)
            for name, spec in specs.items():
                if type(name) is not str:
                    raise _bad(f"comm_open binding name in {show(ns)}", "a string", name)
                _obj(f"comm_open namespaces[{show(ns)}][{show(name)}]", spec)
        _set(self, "comm_id", comm_id)
        _set(self, "namespaces", namespaces)


class ExecuteRequest(_Event):
    """execute_request: the program, and options for the child under ``metadata.kernelgate``.

    >>> ExecuteRequest("print(1)", {"max_calls": 10})
    ExecuteRequest(code='print(1)', options={'max_calls': 10})
    """

    __slots__ = ("code", "options")
    wire_name = "execute_request"
    code: str
    options: dict[str, Any]

    def __init__(self, code: str, options: dict[str, Any] | None = None) -> None:
        _set(self, "code", _text("execute_request code", code))
        _set(self, "options", {} if options is None else _obj("execute_request options", options))


class CallReply(_Event):
    """comm_msg answering call ``call_id``: a value, or the host error as ename/evalue.

    >>> CallReply(0, True, [1, 2])
    CallReply(call_id=0, ok=True, value=[1, 2], ename='', evalue='')
    >>> CallReply(1, False, ename="LookupError", evalue="no binding tools.nope").ok
    False
    """

    __slots__ = ("call_id", "ok", "value", "ename", "evalue")
    wire_name = "comm_msg reply"
    call_id: int
    ok: bool
    value: Any
    ename: str
    evalue: str

    def __init__(
        self, call_id: int, ok: bool, value: Any = None, ename: str = "", evalue: str = ""
    ) -> None:
        # One test for the common cases; the detailed ones only to say what failed.
        if not (
            type(call_id) is int
            and call_id >= 0
            and (
                (ok is True and ename == "" and evalue == "")
                or (
                    ok is False
                    and value is None
                    and type(ename) is str
                    and ename != ""
                    and type(evalue) is str
                )
            )
        ):
            _check_call_reply(call_id, ok, value, ename, evalue)
        _set(self, "call_id", call_id)
        _set(self, "ok", ok)
        _set(self, "value", value)
        _set(self, "ename", ename)
        _set(self, "evalue", evalue)


def _check_call_reply(call_id: Any, ok: Any, value: Any, ename: Any, evalue: Any) -> None:
    if type(call_id) is not int or call_id < 0:
        raise _bad("call reply id", "an integer from 0 up", call_id)
    if ok is True:
        raise LocalProtocolError(
            f"call reply {call_id} is ok and has an error ({show(ename)}, {show(evalue)}): "
            "a reply carries a value or an error, not both"
        )
    if ok is not False:
        raise _bad(f"call reply {call_id} ok", "True or False", ok)
    if value is not None:
        raise LocalProtocolError(
            f"call reply {call_id} failed and has a value ({show(value)}): a reply "
            "carries a value or an error, not both"
        )
    if type(ename) is not str or not ename:
        raise _bad(f"call reply {call_id} ename", "the error's type name", ename)
    raise _bad(f"call reply {call_id} evalue", "a string", evalue)


class CallRequest(_Event):
    """comm_msg: the program called ``namespace.name(*args, **kwargs)``.

    >>> CallRequest(0, "tools", "add", [1], {"b": 2})
    CallRequest(call_id=0, namespace='tools', name='add', args=[1], kwargs={'b': 2})
    """

    __slots__ = ("call_id", "namespace", "name", "args", "kwargs")
    wire_name = "comm_msg call"
    call_id: int
    namespace: str
    name: str
    args: list[Any]
    kwargs: dict[str, Any]

    def __init__(
        self, call_id: int, namespace: str, name: str, args: list[Any], kwargs: dict[str, Any]
    ) -> None:
        # One test for the common case; the field-by-field tests only to say what failed.
        if not (
            type(call_id) is int
            and call_id >= 0
            and type(namespace) is str
            and type(name) is str
            and type(args) is list
            and type(kwargs) is dict
        ):
            if type(call_id) is not int or call_id < 0:
                raise _bad("call id", "an integer from 0 up", call_id)
            _text("call namespace", namespace)
            _text("call name", name)
            if type(args) is not list:
                raise _bad("call args", "a list", args)
            _obj("call kwargs", kwargs)
        _set(self, "call_id", call_id)
        _set(self, "namespace", namespace)
        _set(self, "name", name)
        _set(self, "args", args)
        _set(self, "kwargs", kwargs)


class Stream(_Event):
    """stream: text the program wrote to ``stdout`` or ``stderr``."""

    __slots__ = ("name", "text")
    wire_name = "stream"
    name: str
    text: str

    def __init__(self, name: str, text: str) -> None:
        if type(name) is not str or name not in STREAM_NAMES:
            raise _bad("stream name", "'stdout' or 'stderr'", name)
        _set(self, "name", name)
        _set(self, "text", _text("stream text", text))


def _display_id(field: str, value: Any) -> str:
    if type(value) is not str or not 0 < len(value) <= 200 or not value.isprintable():
        raise _bad(field, "a printable string of 1 to 200 characters", value)
    return value


class DisplayData(_Event):
    """display_data: a MIME bundle shown by ``display(obj)`` (with ``display_id``, one that
    :class:`UpdateDisplayData` may replace later).

    >>> DisplayData({"text/plain": "x", "application/json": {"a": 1}}).metadata
    {}
    """

    __slots__ = ("data", "metadata", "display_id")
    wire_name = "display_data"
    data: dict[str, Any]
    metadata: dict[str, Any]
    display_id: str | None

    def __init__(
        self,
        data: dict[str, Any],
        metadata: dict[str, Any] | None = None,
        display_id: str | None = None,
    ) -> None:
        _set(self, "data", _mime_bundle("display_data data", data))
        _set(self, "metadata", _metadata("display_data metadata", metadata))
        did = None if display_id is None else _display_id("display_data display_id", display_id)
        _set(self, "display_id", did)


class UpdateDisplayData(_Event):
    """update_display_data: new contents for every output shown with ``display_id``.

    >>> UpdateDisplayData({"text/plain": "50%"}, display_id="progress").display_id
    'progress'
    """

    __slots__ = ("data", "metadata", "display_id")
    wire_name = "update_display_data"
    data: dict[str, Any]
    metadata: dict[str, Any]
    display_id: str

    def __init__(
        self, data: dict[str, Any], metadata: dict[str, Any] | None = None, *, display_id: str
    ) -> None:
        _set(self, "data", _mime_bundle("update_display_data data", data))
        _set(self, "metadata", _metadata("update_display_data metadata", metadata))
        _set(self, "display_id", _display_id("update_display_data display_id", display_id))


class ClearOutput(_Event):
    """clear_output: remove what the run has shown so far (``wait``: when the next output
    arrives, so that nothing flickers).

    >>> ClearOutput(wait=True).wait
    True
    """

    __slots__ = ("wait",)
    wire_name = "clear_output"
    wait: bool

    def __init__(self, wait: bool = False) -> None:
        if type(wait) is not bool:
            raise _bad("clear_output wait", "true or false", wait)
        _set(self, "wait", wait)


class ExecuteResult(_Event):
    """execute_result: the run's value. ``application/json`` is present when it is JSON.

    >>> ExecuteResult({"application/json": 3, "text/plain": "3"}).execution_count
    1
    """

    __slots__ = ("data", "metadata", "execution_count")
    wire_name = "execute_result"
    data: dict[str, Any]
    metadata: dict[str, Any]
    execution_count: int

    def __init__(
        self,
        data: dict[str, Any],
        metadata: dict[str, Any] | None = None,
        execution_count: int = 1,
    ) -> None:
        _set(self, "data", _mime_bundle("execute_result data", data))
        _set(self, "metadata", _metadata("execute_result metadata", metadata))
        _set(self, "execution_count", _count("execute_result execution_count", execution_count))


class ErrorOutput(_Event):
    """error: an exception, with a traceback of the program's own frames only."""

    __slots__ = ("ename", "evalue", "traceback")
    wire_name = "error"
    ename: str
    evalue: str
    traceback: list[str]

    def __init__(self, ename: str, evalue: str, traceback: list[str]) -> None:
        _set(self, "ename", _text("error ename", ename))
        _set(self, "evalue", _text("error evalue", evalue))
        _set(self, "traceback", _str_list("error traceback", traceback))


class ExecuteReply(_Event):
    """execute_reply: the end of the run.

    ``status`` is Jupyter's (``"ok"`` or ``"error"``); ``run_status`` kernelgate's, one of
    :data:`CHILD_RUN_STATUSES`: ``"ok"`` with ``"ok"``, any other with ``"error"``. Left
    out it follows ``status`` (``"ok"``, or ``"exception"``), as on the wire.

    >>> ExecuteReply("error", ename="ValueError", evalue="bad").run_status
    'exception'
    >>> ExecuteReply("ok", "timeout")
    Traceback (most recent call last):
    ...
    kernelgate.wire.errors.LocalProtocolError: execute_reply status 'ok' with kernelgate ...
    """

    __slots__ = ("status", "run_status", "execution_count", "ename", "evalue", "traceback", "usage")
    wire_name = "execute_reply"
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
        run_status: str | None = None,
        execution_count: int = 1,
        ename: str = "",
        evalue: str = "",
        traceback: list[str] | None = None,
        usage: dict[str, float] | None = None,
    ) -> None:
        if type(status) is str and status == "ok":
            if run_status is None:
                run_status = "ok"
            elif run_status != "ok":
                raise LocalProtocolError(
                    f"execute_reply status 'ok' with kernelgate status {show(run_status)}"
                )
        elif type(status) is str and status == "error":
            if run_status is None:
                run_status = "exception"
            elif type(run_status) is not str or run_status not in _CHILD_ERROR_STATUSES:
                raise LocalProtocolError(
                    f"execute_reply kernelgate status must be one of "
                    f"{sorted(_CHILD_ERROR_STATUSES)}, got {show(run_status)}"
                )
        else:
            raise _bad("execute_reply status", "'ok' or 'error'", status)
        _set(self, "status", status)
        _set(self, "run_status", run_status)
        _set(self, "execution_count", _count("execute_reply execution_count", execution_count))
        _set(self, "ename", _text("execute_reply ename", ename))
        _set(self, "evalue", _text("execute_reply evalue", evalue))
        tb = [] if traceback is None else _str_list("execute_reply traceback", traceback)
        _set(self, "traceback", tb)
        _set(self, "usage", {} if usage is None else _usage(usage))


class DebugRequest(_Event):
    """debug_request: one Debug Adapter Protocol request for a debugged run's child
    (``seq`` is the host's, unique within the run; the host keeps every one in flight
    until its reply).

    >>> DebugRequest(1, "stackTrace", {"threadId": 1}).command
    'stackTrace'
    """

    __slots__ = ("seq", "command", "arguments")
    wire_name = "debug_request"
    seq: int
    command: str
    arguments: dict[str, Any]

    def __init__(self, seq: int, command: str, arguments: dict[str, Any] | None = None) -> None:
        _set(self, "seq", _count("debug_request seq", seq))
        _set(self, "command", _command("debug_request command", command))
        args = {} if arguments is None else _obj("debug_request arguments", arguments)
        _set(self, "arguments", args)


class DebugReply(_Event):
    """debug_reply: the child's answer to the debug request ``request_seq``.

    >>> DebugReply(1, "threads", True, {"threads": [{"id": 1, "name": "MainThread"}]}).success
    True
    >>> DebugReply(2, "next", False, message="not stopped").message
    'not stopped'
    """

    __slots__ = ("request_seq", "command", "success", "body", "message")
    wire_name = "debug_reply"
    request_seq: int
    command: str
    success: bool
    body: dict[str, Any]
    message: str

    def __init__(
        self,
        request_seq: int,
        command: str,
        success: bool,
        body: dict[str, Any] | None = None,
        message: str = "",
    ) -> None:
        if type(success) is not bool:
            raise _bad("debug_reply success", "true or false", success)
        _set(self, "request_seq", _count("debug_reply request_seq", request_seq))
        _set(self, "command", _command("debug_reply command", command))
        _set(self, "success", success)
        _set(self, "body", {} if body is None else _obj("debug_reply body", body))
        _set(self, "message", _text("debug_reply message", message))


class DebugEvent(_Event):
    """debug_event: something the debugged program did, one of :data:`DEBUG_EVENTS`.

    >>> DebugEvent("stopped", {"reason": "breakpoint", "threadId": 1}).event
    'stopped'
    >>> DebugEvent("terminated", {})
    Traceback (most recent call last):
    ...
    kernelgate.wire.errors.LocalProtocolError: debug_event event must be one of ['stopped'] ...
    """

    __slots__ = ("event", "body")
    wire_name = "debug_event"
    event: str
    body: dict[str, Any]

    def __init__(self, event: str, body: dict[str, Any] | None = None) -> None:
        if type(event) is not str or event not in DEBUG_EVENTS:
            raise _bad("debug_event event", f"one of {sorted(DEBUG_EVENTS)} (the child's)", event)
        _set(self, "event", event)
        _set(self, "body", {} if body is None else _obj("debug_event body", body))


def _command(field: str, value: Any) -> str:
    if type(value) is not str or not 0 < len(value) <= _MAX_COMMAND or not value.isidentifier():
        raise _bad(field, f"a name of 1 to {_MAX_COMMAND} letters", value)
    return value


_CHILD_ERROR_STATUSES = CHILD_RUN_STATUSES - {"ok"}


def _usage(value: Any) -> dict[str, float]:
    where = "execute_reply usage"
    usage: dict[str, float] = _obj(where, value)
    for key, v in usage.items():
        if key not in USAGE_KEYS:
            raise LocalProtocolError(
                f"{where} has the unknown key {show(key)}; it may have {sorted(USAGE_KEYS)}"
            )
        if type(v) not in (int, float) or not 0 <= v < _USAGE_CEILING:
            raise _bad(f"{where}[{key!r}]", "a number from 0 up", v)
    return usage


HostEvent = OpenBindings | ExecuteRequest | CallReply | DebugRequest
ChildEvent = (
    CallRequest
    | Stream
    | DisplayData
    | UpdateDisplayData
    | ClearOutput
    | ExecuteResult
    | ErrorOutput
    | ExecuteReply
    | DebugReply
    | DebugEvent
)
Event = HostEvent | ChildEvent
