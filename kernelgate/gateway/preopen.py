"""The bindings' comm_open, sent to a warm child while it waits for its program.

What a run sends first does not depend on its program: ``comm_open``, the announcement of
its bindings (one per gateway's registry). The warm pool sends it to a child once the child
has parked (:meth:`.pool.WarmPool.preopen_with` says which bindings), so the child decodes it
while it waits, and the run then sends one frame, its ``execute_request``, on the wire the
pool opened (:func:`adopt`). The child has run no program when it is sent: what it does with
the message is the host's own code, as when the run sends it.

The wire's session and comm id are the child's (``pool-<token>-<pid>``), not its run's
(unknown yet): nothing but the wire reads either.
"""

from __future__ import annotations

import asyncio
import socket
from typing import Any

from kernelgate.model.limits import Limits
from kernelgate.wire.connection import HOST, Connection
from kernelgate.wire.errors import ProtocolError
from kernelgate.wire.events import OpenBindings

from .bindings import BindingRegistry
from .teardown import discard

__all__ = ["Preopened", "acquire", "adopt", "host_conn", "send_bindings"]


def host_conn(session: str, max_frame_bytes: int) -> Connection:
    """The host's end of one run's wire. compact=True: offers compact call frames
    (docs/protocol.md); a child that does not take the offer (the Node child) is answered
    with full messages."""
    return Connection(HOST, session=session, max_frame_bytes=max_frame_bytes, compact=True)


class Preopened:
    """The comm_open a parked child was sent, and the host's end of the wire past it.

    ``specs``: the registry's announcement it was made of (a run takes the child only with
    that very object); ``sent``: its bytes, counted in the run's ``bytes_out``."""

    __slots__ = ("specs", "conn", "comm_id", "session", "max_frame_bytes", "sent")

    def __init__(
        self,
        specs: dict[str, Any],
        conn: Connection,
        comm_id: str,
        session: str,
        max_frame_bytes: int,
        sent: int,
    ) -> None:
        self.specs = specs
        self.conn = conn
        self.comm_id = comm_id
        self.session = session
        self.max_frame_bytes = max_frame_bytes
        self.sent = sent


async def send_bindings(
    control: socket.socket,
    session: str,
    specs: dict[str, Any],
    max_frame_bytes: int,
    timeout: float,
) -> Preopened | None:
    """Send the comm_open of ``specs`` on ``control`` (a parked child's fd 3, non-blocking);
    None if it could not be sent whole within ``timeout``."""
    comm_id = f"bindings-{session}"
    conn = host_conn(session, max_frame_bytes)
    try:
        data = conn.send(OpenBindings(comm_id, specs))
        try:
            sent = control.send(data)
        except BlockingIOError:
            sent = 0
        if sent < len(data):  # larger than the socket's buffer: the child reads on
            loop = asyncio.get_running_loop()
            await asyncio.wait_for(loop.sock_sendall(control, data[sent:]), timeout)
    except (OSError, ProtocolError, asyncio.TimeoutError):
        return None
    return Preopened(specs, conn, comm_id, session, max_frame_bytes, len(data))


def adopt(
    pre: Preopened | None, specs: dict[str, Any], max_frame_bytes: int
) -> tuple[bool, Connection | None]:
    """The wire a run with ``specs`` and ``max_frame_bytes`` takes over from the pool:
    ``(True, conn)``; ``(True, None)`` when nothing was sent ahead (the run opens its own);
    ``(False, None)`` when the child was sent another registry's bindings (a runtime
    shared by gateways): it serves no run of this one."""
    if pre is None:
        return True, None
    if pre.specs is not specs:
        return False, None
    if pre.max_frame_bytes == max_frame_bytes:
        return True, pre.conn
    # This run's frame limit: a wire of its own, moved past the same comm_open (the bytes
    # the child was sent, but for their date; they are not sent again).
    conn = host_conn(pre.session, max_frame_bytes)
    conn.send(OpenBindings(pre.comm_id, specs))
    return True, conn


async def acquire(pool: Any, registry: BindingRegistry, limits: Limits) -> tuple[Any, int]:
    """A child of ``pool`` (a :class:`~.runtime.ChildPool`) for a run with the bindings of
    ``registry`` and ``limits`` (None: start cold), and the bytes sent it ahead (0: none,
    the run opens its wire; else the child's ``wire`` is the run's).

    Tells a pool that sends comm_open ahead which bindings its runs have; a child sent
    another registry's is discarded and the next one taken."""
    specs, max_frame_bytes = registry.specs(), limits.max_frame_bytes
    preopen_with = getattr(pool, "preopen_with", None)  # the Python pool's
    if preopen_with is not None:
        preopen_with(specs, max_frame_bytes)
    while True:
        child = await pool.acquire()
        if child is None:
            return None, 0
        pre: Preopened | None = getattr(child, "preopened", None)
        ok, conn = adopt(pre, specs, max_frame_bytes)
        if ok:
            child.wire = conn
            return child, pre.sent if conn is not None and pre is not None else 0
        await discard(child)
