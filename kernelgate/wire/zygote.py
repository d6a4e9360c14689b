"""The zygote's messages: a small sans-I/O codec for the host <-> zygote socket.

The host asks the warm pool's zygote (``kernelgate/kernels/python/zygote.py``) for booted
children over a ``SOCK_SEQPACKET`` socket: one datagram is one message, one JSON object in
ASCII (``\\uXXXX`` escapes: a path may hold the surrogate escapes ``os.fsdecode`` makes of
bytes that are not UTF-8, and must arrive as it left). The three fds of a fork request (the
child's fd 3, 1 and 2) travel beside it as ``SCM_RIGHTS``; this module only turns events
into bytes and back, validating both ways.

Host -> zygote: :class:`ForkRequest`. Zygote -> host: :class:`Forked` (the child's pid),
:class:`ForkFailed`, and :class:`Exited` whenever the zygote has reaped a child (its wait
status and resource usage).

>>> data = encode(ForkRequest(7, "process", "/tmp/kernelgate-1-run", (), (), "kernelgate-1-"))
>>> decode_request(data).run_dir
'/tmp/kernelgate-1-run'
>>> decode_reply(encode(Forked(7, 4242)))
Forked(request_id=7, pid=4242)
>>> decode_reply(b'{"id": 7, "pid": -1}')
Traceback (most recent call last):
...
kernelgate.wire.zygote.ZygoteProtocolError: zygote fork reply pid must be a process id ...

Events are validated when constructed (:class:`~kernelgate.wire.errors.LocalProtocolError`,
as the fd-3 events are); what is decoded goes through the same constructors, and every
refusal is a :class:`ZygoteProtocolError` naming the field and the value. The JSON shapes:

* ``{"op": "fork", "id": N, "level": L, "run_dir": D, "cgroups": [C, ...],
  "read_paths": [...], "owner": "kernelgate-<pid>-<start>-<pidns>-", "ids": [U, G] | null,
  "background": B}`` (``background``: the child boots at a lower priority, which the host
  puts back before it hands the child out; a root host only)
* ``{"id": N, "pid": P}``, ``{"id": N | null, "error": "..."}``
* ``{"exit": P, "status": S, "rusage": [user_s, system_s, maxrss_kib]}``

On its own fd 3 (the host's stream socket, not this one), a child the zygote forked writes
the single byte :data:`BOOTED` once it has booted (cgroups, sandbox, rehearsal) and parked,
just before it blocks for its program: the host hands out only children whose first byte
was that one. No program has run in the child by then, so nothing can forge it.
"""

from __future__ import annotations

import json
import math
from typing import Any

from .errors import LocalProtocolError, RemoteProtocolError
from .events import _Event, show

__all__ = [
    "ForkRequest",
    "Forked",
    "ForkFailed",
    "Exited",
    "ZygoteEvent",
    "ZygoteReply",
    "ZygoteProtocolError",
    "encode",
    "decode_request",
    "decode_reply",
    "BOOTED",
]

#: A pooled child's first byte on its fd 3: booted, parked, waiting for its program (ACK).
BOOTED = b"\x06"

_NO_ID = 2**32 - 1  # (uid_t)-1: "no change" to setresuid, never an id
_MAX_MESSAGE = 8 * 1024  # a ForkFailed error text is cut to this
# ASCII JSON, unlike fd 3: paths are the host's own and may hold surrogate escapes of
# bytes that are not UTF-8 (os.fsdecode); "\udcxx" carries them through unchanged.
_dumps = json.JSONEncoder(allow_nan=False, separators=(",", ":")).encode


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text[:40]} is out of range for a float")
    return value


_decode = json.JSONDecoder(parse_constant=_no_constant, parse_float=_finite).decode


class ZygoteProtocolError(RemoteProtocolError):
    """A zygote message that does not follow this codec. ``request_id`` is the request's
    id when it could be read (so the zygote can still answer that request)."""

    def __init__(self, message: str, request_id: int | None = None) -> None:
        super().__init__(message)
        self.request_id = request_id


def _bad(field: str, must: str, value: Any) -> LocalProtocolError:
    return LocalProtocolError(f"{field} must be {must}, got {show(value)}")


def _id(field: str, value: Any) -> int:
    if type(value) is not int or value < 0:
        raise _bad(field, "an integer from 0 up", value)
    return value


def _pid(field: str, value: Any) -> int:
    if type(value) is not int or value < 1:
        raise _bad(field, "a process id (an integer from 1 up)", value)
    return value


def _path(field: str, value: Any) -> str:
    if type(value) is not str or not value or "\0" in value:
        raise _bad(field, "a non-empty path without NUL", value)
    return value


def _amount(field: str, value: Any) -> float:
    if type(value) not in (int, float) or not 0 <= value < 1e15:
        raise _bad(field, "a number from 0 up", value)
    return float(value)


class ForkRequest(_Event):
    """Fork a booted child for a run: its sandbox ``level``, ``run_dir``, the ``cgroups``
    it joins (its run cgroup's directory under each controller, or none), the extra
    ``read_paths`` it may read, the host's ``owner`` name prefix (what the zygote removes
    if the host dies), and the run's own uid and gid on a root host (``ids``; None: the
    host's own, or the shared one)."""

    __slots__ = (
        "request_id",
        "level",
        "run_dir",
        "cgroups",
        "read_paths",
        "owner",
        "ids",
        "background",
    )
    wire_name = "zygote fork request"
    request_id: int
    level: str
    run_dir: str
    cgroups: tuple[str, ...]
    read_paths: tuple[str, ...]
    owner: str
    ids: tuple[int, int] | None
    background: bool

    def __init__(
        self,
        request_id: int,
        level: str,
        run_dir: str,
        cgroups: tuple[str, ...],
        read_paths: tuple[str, ...],
        owner: str,
        ids: tuple[int, int] | None = None,
        background: bool = False,
    ) -> None:
        where = "zygote fork request"
        _set = object.__setattr__
        _set(self, "request_id", _id(f"{where} id", request_id))
        if type(level) is not str or not level:
            raise _bad(f"{where} level", "a sandbox level name", level)
        _set(self, "level", level)
        _set(self, "run_dir", _path(f"{where} run_dir", run_dir))
        if type(cgroups) is not tuple:
            raise _bad(f"{where} cgroups", "a tuple of paths", cgroups)
        for i, p in enumerate(cgroups):
            _path(f"{where} cgroups[{i}]", p)
        _set(self, "cgroups", cgroups)
        if type(read_paths) is not tuple:
            raise _bad(f"{where} read_paths", "a tuple of paths", read_paths)
        for i, p in enumerate(read_paths):
            _path(f"{where} read_paths[{i}]", p)
        _set(self, "read_paths", read_paths)
        if type(owner) is not str:
            raise _bad(f"{where} owner", "a string", owner)
        _set(self, "owner", owner)
        if ids is not None:
            if type(ids) is not tuple or len(ids) != 2:
                raise _bad(f"{where} ids", "a (uid, gid) pair", ids)
            for i, n in enumerate(ids):
                if type(n) is not int or not 0 < n < _NO_ID:
                    raise _bad(f"{where} ids[{i}]", f"an id from 1 to {_NO_ID - 1}", n)
        _set(self, "ids", ids)
        if type(background) is not bool:
            raise _bad(f"{where} background", "true or false", background)
        _set(self, "background", background)


class Forked(_Event):
    """The child for request ``request_id`` is forked: its ``pid``."""

    __slots__ = ("request_id", "pid")
    wire_name = "zygote fork reply"
    request_id: int
    pid: int

    def __init__(self, request_id: int, pid: int) -> None:
        object.__setattr__(self, "request_id", _id("zygote fork reply id", request_id))
        object.__setattr__(self, "pid", _pid("zygote fork reply pid", pid))


class ForkFailed(_Event):
    """The zygote could not fork for ``request_id`` (None: it could not read the request's
    id); ``error`` says why."""

    __slots__ = ("request_id", "error")
    wire_name = "zygote fork failure"
    request_id: int | None
    error: str

    def __init__(self, request_id: int | None, error: str) -> None:
        if request_id is not None:
            _id("zygote fork failure id", request_id)
        if type(error) is not str:
            raise _bad("zygote fork failure error", "a string", error)
        object.__setattr__(self, "request_id", request_id)
        object.__setattr__(self, "error", error[:_MAX_MESSAGE])


class Exited(_Event):
    """The zygote reaped child ``pid``: its wait ``status`` (as ``os.waitpid`` gives it; the
    host reads it with ``exit_code_of``) and what it used (``getrusage`` style: CPU
    seconds, peak RSS in KiB)."""

    __slots__ = ("pid", "status", "user_s", "system_s", "maxrss_kib")
    wire_name = "zygote exit status"
    pid: int
    status: int
    user_s: float
    system_s: float
    maxrss_kib: int

    def __init__(
        self, pid: int, status: int, user_s: float = 0.0, system_s: float = 0.0, maxrss_kib: int = 0
    ) -> None:
        where = "zygote exit status"
        _set = object.__setattr__
        _set(self, "pid", _pid(f"{where} pid", pid))
        # Any int: a program can make an odd one reach the zygote (a stop, say), and
        # the host decides what it means.
        if type(status) is not int:
            raise _bad(f"{where} status", "a wait status (an integer)", status)
        _set(self, "status", status)
        _set(self, "user_s", _amount(f"{where} user_s", user_s))
        _set(self, "system_s", _amount(f"{where} system_s", system_s))
        if type(maxrss_kib) is not int or maxrss_kib < 0:
            raise _bad(f"{where} maxrss_kib", "an integer from 0 up", maxrss_kib)
        _set(self, "maxrss_kib", maxrss_kib)


ZygoteReply = Forked | ForkFailed | Exited
ZygoteEvent = ForkRequest | ZygoteReply


def encode(event: ZygoteEvent) -> bytes:
    """One datagram for ``event``. Events are valid by construction (numbers finite), so
    this cannot fail."""
    message: dict[str, Any]
    # The zygote's own messages, one or two per run, formatted directly (the same bytes
    # as the encoder's): the zygote pays a copy-on-write fault for every page it touches
    # after each fork, and the JSON encoder's touched ~20 (issue 23: its send of Forked,
    # 0.14 -> 0.08 ms and 41 -> 19 faults).
    if type(event) is Forked:
        return b'{"id":%d,"pid":%d}' % (event.request_id, event.pid)
    if type(event) is Exited:
        return b'{"exit":%d,"status":%d,"rusage":[%s,%s,%d]}' % (
            event.pid,
            event.status,
            float.__repr__(event.user_s).encode(),
            float.__repr__(event.system_s).encode(),
            event.maxrss_kib,
        )
    if type(event) is ForkRequest:
        message = {
            "op": "fork",
            "id": event.request_id,
            "level": event.level,
            "run_dir": event.run_dir,
            "cgroups": list(event.cgroups),
            "read_paths": list(event.read_paths),
            "owner": event.owner,
            "ids": None if event.ids is None else list(event.ids),
            "background": event.background,
        }
    elif type(event) is Forked:
        message = {"id": event.request_id, "pid": event.pid}
    elif type(event) is ForkFailed:
        message = {"id": event.request_id, "error": event.error}
    elif type(event) is Exited:
        message = {
            "exit": event.pid,
            "status": event.status,
            "rusage": [event.user_s, event.system_s, event.maxrss_kib],
        }
    else:
        raise LocalProtocolError(f"not a zygote message: {show(event)}")
    return _dumps(message).encode("ascii")


def _object(data: bytes, what: str) -> dict[str, Any]:
    try:
        message = _decode(bytes(data).decode("ascii"))
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        raise ZygoteProtocolError(
            f"{what} is not ASCII JSON ({exc}); starts with {show(bytes(data[:40]))}"
        ) from None
    if type(message) is not dict:
        raise ZygoteProtocolError(f"{what} must be a JSON object, got {show(message)}")
    return message


def _field(message: dict[str, Any], key: str, what: str, request_id: int | None = None) -> Any:
    try:
        return message[key]
    except KeyError:
        raise ZygoteProtocolError(f"{what} has no field {key!r}", request_id) from None


def _list_field(
    message: dict[str, Any], key: str, what: str, request_id: int | None
) -> tuple[Any, ...]:
    found = _field(message, key, what, request_id)
    if type(found) is not list:
        raise ZygoteProtocolError(f"{what} {key} must be a list, got {show(found)}", request_id)
    return tuple(found)


def decode_request(data: bytes) -> ForkRequest:
    """What the zygote reads: a :class:`ForkRequest`, or :class:`ZygoteProtocolError`."""
    what = "zygote fork request"
    message = _object(data, what)
    raw_id = message.get("id")
    request_id = raw_id if type(raw_id) is int and raw_id >= 0 else None
    if message.get("op") != "fork":
        raise ZygoteProtocolError(
            f"{what} op must be 'fork', got {show(message.get('op'))}", request_id
        )
    read_paths = _list_field(message, "read_paths", what, request_id)
    ids = message.get("ids")
    if ids is not None and type(ids) is not list:
        raise ZygoteProtocolError(f"{what} ids must be [uid, gid], got {show(ids)}", request_id)
    try:
        return ForkRequest(
            _field(message, "id", what),
            _field(message, "level", what, request_id),
            _field(message, "run_dir", what, request_id),
            _list_field(message, "cgroups", what, request_id),
            read_paths,
            _field(message, "owner", what, request_id),
            None if ids is None else tuple(ids),
            message.get("background", False),
        )
    except LocalProtocolError as exc:
        raise ZygoteProtocolError(str(exc), request_id) from None


def decode_reply(data: bytes) -> ZygoteReply:
    """What the host reads: :class:`Forked`, :class:`ForkFailed` or :class:`Exited`, or
    :class:`ZygoteProtocolError`."""
    message = _object(data, "zygote message")
    try:
        if "exit" in message:
            what = "zygote exit status"
            rusage = message.get("rusage", [0.0, 0.0, 0])
            if type(rusage) is not list or len(rusage) != 3:
                raise ZygoteProtocolError(
                    f"{what} rusage must be [user_s, system_s, maxrss_kib], got {show(rusage)}"
                )
            return Exited(message["exit"], _field(message, "status", what), *rusage)
        if "error" in message:
            return ForkFailed(message.get("id"), message["error"])
        what = "zygote fork reply"
        return Forked(_field(message, "id", what), _field(message, "pid", what))
    except LocalProtocolError as exc:
        raise ZygoteProtocolError(str(exc)) from None
