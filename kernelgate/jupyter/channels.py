"""The kernel's sockets: bound, read, and written with signed messages.

Shell, control and stdin are ROUTER sockets, iopub is PUB, heartbeat is REP; every message
is signed and checked by one ``jupyter_client.session.Session`` (one session id for every
message the kernel sends), and built with :class:`~kernelgate.wire.messages.MessageFactory`.
Nothing here knows what a message means: :mod:`.server` does.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import zmq
import zmq.asyncio
from jupyter_client.session import Session

from kernelgate.wire.messages import MessageFactory

__all__ = ["Channels", "Handler", "Message"]

log = logging.getLogger("kernelgate.kernel")

Message = dict[str, Any]
Handler = Callable[[Message, list[bytes]], Awaitable[None]]

_LINGER_MS = 1000


class Channels:
    """The five sockets of ``connection_info`` (ports it leaves 0 are picked and written
    back into it), and the one session that signs and checks their messages."""

    def __init__(self, connection_info: dict[str, Any]) -> None:
        self.connection_info = connection_info
        key = connection_info.get("key", "")
        self.session = Session(
            key=key.encode() if isinstance(key, str) else bytes(key),
            signature_scheme=connection_info.get("signature_scheme", "hmac-sha256"),
            username="kernel",
        )
        self.messages = MessageFactory(self.session.session, username="kernel")
        self._ctx: zmq.asyncio.Context | None = None
        self._sockets: dict[str, zmq.asyncio.Socket] = {}

    # -- sockets -----------------------------------------------------------------------------

    def _address(self, port: int) -> str:
        transport = self.connection_info.get("transport", "tcp")
        ip = self.connection_info.get("ip", "127.0.0.1")
        if transport == "ipc":
            return f"ipc://{ip}-{port}"
        return f"{transport}://{ip}:{port}"

    def bind(self, name: str, kind: int) -> zmq.asyncio.Socket:
        """Bind the ``name`` socket (``shell``, ``iopub``...) as a ``kind`` zmq socket."""
        if self._ctx is None:
            self._ctx = zmq.asyncio.Context()
        sock = self._ctx.socket(kind)
        sock.setsockopt(zmq.LINGER, _LINGER_MS)
        if kind == zmq.ROUTER:
            sock.setsockopt(zmq.ROUTER_HANDOVER, 1)
        port = int(self.connection_info.get(f"{name}_port", 0))
        if port:
            sock.bind(self._address(port))
        else:
            transport = self.connection_info.get("transport", "tcp")
            ip = self.connection_info.get("ip", "127.0.0.1")
            self.connection_info[f"{name}_port"] = sock.bind_to_random_port(f"{transport}://{ip}")
        self._sockets[name] = sock
        return sock

    def close(self) -> None:
        """Close every socket (lingering up to a second for what is queued) and the context."""
        for sock in self._sockets.values():
            sock.close(linger=_LINGER_MS)
        if self._ctx is not None:
            self._ctx.term()

    # -- writing -----------------------------------------------------------------------------

    def send(self, name: str, msg: Message, idents: list[bytes] | None = None) -> None:
        """Sign and queue ``msg`` on socket ``name``; never raises (a message that cannot
        be serialized is logged and dropped: the kernel goes on)."""
        sock = self._sockets.get(name)
        if sock is None or sock.closed:
            return
        try:
            frames = self.session.serialize(msg, idents)
        except (TypeError, ValueError) as exc:
            log.warning("could not serialize a %s message: %s", msg["header"]["msg_type"], exc)
            return
        sent = sock.send_multipart(frames)
        if isinstance(sent, asyncio.Future):
            sent.add_done_callback(_sent)

    def publish(
        self,
        msg_type: str,
        content: dict[str, Any],
        parent: Message | None,
        metadata: dict[str, Any] | None = None,
    ) -> None:
        """Send ``msg_type`` on iopub with ``parent`` (a request's header) as parent."""
        msg = self.messages.message(msg_type, content, parent_header=parent, metadata=metadata)
        topic = f"kernel.{self.session.session}.{msg_type}".encode()
        self.send("iopub", msg, [topic])

    def reply(
        self,
        channel: str,
        msg_type: str,
        content: dict[str, Any],
        request: Message,
        idents: list[bytes],
        metadata: dict[str, Any] | None = None,
    ) -> None:
        """Answer ``request`` on ``channel`` (to the client ``idents`` name)."""
        msg = self.messages.message(
            msg_type, content, parent_header=request["header"], metadata=metadata
        )
        self.send(channel, msg, idents)

    # -- reading -----------------------------------------------------------------------------

    async def serve(self, sock: zmq.asyncio.Socket, handler: Handler) -> None:
        """Read ``sock`` forever; each valid message goes to ``handler``. Unsigned, replayed
        or malformed messages are dropped, and a handler's error is logged: neither stops
        the loop."""
        while True:
            frames = await sock.recv_multipart()
            try:
                idents, rest = self.session.feed_identities(frames)
                msg = self.session.deserialize(rest)
            except Exception as exc:
                log.warning("dropped an invalid message: %s", exc)
                continue
            try:
                await handler(msg, idents)
            except Exception:
                log.exception("error handling %s", msg.get("msg_type"))

    @staticmethod
    async def heartbeat(sock: zmq.asyncio.Socket) -> None:
        """Echo every heartbeat back."""
        while True:
            frames = await sock.recv_multipart()
            await sock.send_multipart(frames)


def _sent(future: asyncio.Future[Any]) -> None:
    if not future.cancelled() and future.exception() is not None:
        log.warning("a message could not be sent: %s", future.exception())
