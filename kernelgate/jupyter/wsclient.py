"""A kernel client over a gateway's websocket, for :class:`~.remote.RemoteGateway`.

``RemoteGateway`` needs little of a kernel client: a ``session`` to make messages, ``send``
on shell and control, the shell and iopub messages as they come, ``wait_for_ready`` and
``is_alive``. This gives exactly that over one kernel's ``/api/kernels/<id>/channels``
websocket of a Kernel Gateway (or Enterprise Gateway), in jupyter_server's JSON framing
(each message a JSON text with its ``channel``), on tornado's websocket client (tornado
is jupyter_client's own dependency).

Not jupyter_server's ``GatewayKernelClient``: that one reads its URL and token from a
process-wide ``GatewayClient`` singleton, so one process could not use two gateways (or two
tokens) at once, and it pulls in the whole server.

When the websocket drops, the client reconnects under the same ``session_id`` (a secret of
its own, not the session its messages carry, which iopub shows everyone): the gateway
buffers the kernel's messages for that session meanwhile and replays them, so a run in
flight loses nothing. If the kernel is gone, or the gateway cannot be reached again within
``reconnect_timeout``, the client is dead and says why (:attr:`death_reason`); so does a
kernel the gateway restarted (it publishes ``status: restarting``, or ``dead``), since
its runs and its bindings comm died with the old process.

A kernel that is there but no longer answers (stopped, wedged, its host or the gateway's
link to it stuck) is found by a heartbeat: once nothing has come from the kernel for
``heartbeat_seconds``, it is sent a ``kernel_info_request`` on control (which a kernelgate
kernel answers while a cell runs); nothing at all within ``heartbeat_timeout`` more and the
client is dead, saying so. Any message from the kernel counts as an answer, so a run that
streams output, or that ends within ``heartbeat_seconds``, costs no message more.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
import struct
import time
import uuid
from collections.abc import Callable
from typing import Any

from jupyter_client.jsonutil import json_default
from jupyter_client.session import Session
from tornado.httpclient import HTTPClientError, HTTPRequest
from tornado.websocket import WebSocketClientConnection, WebSocketClosedError, websocket_connect

from .gatewayrest import GatewayEndpoint, GatewayError

__all__ = ["WebSocketKernelClient"]

log = logging.getLogger("kernelgate.wsclient")

#: The largest message taken from the gateway (tornado's default, 10 MiB, is below what a
#: run's outputs may add up to under the default limits).
_MAX_MESSAGE = 256 * 1024 * 1024
#: How long a closing websocket is read until its close is done: past tornado's own 5 s.
_CLOSE_SECONDS = 6.0


class _Channel:
    """``kc.shell_channel`` / ``kc.control_channel``: ``send(msg)`` onto the websocket."""

    def __init__(self, client: WebSocketKernelClient, name: str) -> None:
        self._client = client
        self.name = name

    def send(self, msg: dict[str, Any]) -> None:
        self._client.send(self.name, msg)


class WebSocketKernelClient:
    """One kernel's channels over a gateway's websocket (see the module's docstring).

    ``await connect()`` first; ``await aclose()`` lets go of the websocket (the kernel
    stays: shutting it down is the gateway's ``DELETE``).
    """

    def __init__(
        self,
        endpoint: GatewayEndpoint,
        kernel_id: str,
        *,
        connect_timeout: float = 30.0,
        reconnect_timeout: float = 10.0,
        heartbeat_seconds: float | None = 5.0,
        heartbeat_timeout: float = 10.0,
        on_death: Callable[[str], None] | None = None,
    ) -> None:
        self.endpoint = endpoint
        self.kernel_id = kernel_id
        self.connect_timeout = connect_timeout
        self.reconnect_timeout = reconnect_timeout
        #: Silence after which the kernel is asked whether it is there (None: never).
        self.heartbeat_seconds = heartbeat_seconds
        #: How long it then has to say anything before it counts as dead.
        self.heartbeat_timeout = heartbeat_timeout
        #: Called once with the reason when the kernel is found dead (not on aclose()).
        self.on_death = on_death
        # Unsigned: the websocket carries JSON; the gateway signs toward the kernel.
        self.session = Session(key=b"", session=uuid.uuid4().hex, username="kernelgate")
        #: The websocket's ``session_id`` (the gateway's key for this connection and what it
        #: buffers for it): not the messages' session, which iopub shows every client of
        #: the kernel. A connection under the same id replaces this one (jupyter_server
        #: drops the "stale" one) and would get its shell replies and its buffer.
        self._ws_session = secrets.token_urlsafe(32)
        self.shell_channel = _Channel(self, "shell")
        self.control_channel = _Channel(self, "control")
        self._ws: WebSocketClientConnection | None = None
        self._reader: asyncio.Task[None] | None = None
        self._watchdog: asyncio.Task[None] | None = None
        #: When the kernel last said anything (time.monotonic()), and an event each message sets.
        self._heard = time.monotonic()
        self._heard_event = asyncio.Event()
        #: The execute_requests sent whose execute_reply has not come (by msg_id).
        self.awaiting_reply: set[str] = set()
        self._queues: dict[str, asyncio.Queue[dict[str, Any]]] = {}
        #: Messages sent while the websocket was down, sent again once it is back.
        self._pending: list[str] = []
        #: Why the kernel can no longer be used (None: it can).
        self.death_reason: str | None = None
        self._closed = False
        #: How many times the websocket came back after dropping.
        self.reconnects = 0

    # -- what RemoteGateway uses ---------------------------------------------------------------

    @property
    def channels_running(self) -> bool:
        return self._reader is not None and not self._closed

    def start_channels(self) -> None:
        if self._reader is None:
            raise RuntimeError("connect the WebSocketKernelClient first: await client.connect()")

    async def wait_for_ready(self, timeout: float | None = None) -> None:
        """Until the kernel answers a ``kernel_info_request`` (as jupyter_client's does)."""
        deadline = time.monotonic() + (timeout if timeout is not None else self.connect_timeout)
        msg = self.session.msg("kernel_info_request", {})
        self.send("shell", msg)
        while True:
            left = deadline - time.monotonic()
            if self.death_reason is not None:
                raise GatewayError(self.death_reason)
            if left <= 0:
                raise TimeoutError(
                    f"kernel {self.kernel_id} at {self.endpoint.url} did not answer "
                    f"kernel_info_request within {timeout} s"
                )
            try:
                reply = await asyncio.wait_for(self.get_shell_msg(), min(left, 1.0))
            except asyncio.TimeoutError:
                continue
            if reply.get("parent_header", {}).get("msg_id") == msg["header"]["msg_id"]:
                return

    async def get_shell_msg(self) -> dict[str, Any]:
        return await self._queue("shell").get()

    async def get_iopub_msg(self) -> dict[str, Any]:
        return await self._queue("iopub").get()

    async def is_alive(self) -> bool:
        return self.death_reason is None

    def send(self, channel: str, msg: dict[str, Any]) -> None:
        """Send ``msg`` on ``channel`` (queued while the websocket reconnects). To a dead
        kernel nothing is sent: its runs learn of the death from :meth:`is_alive`."""
        if self.death_reason is not None:
            log.debug("not sent to a dead kernel: %s", msg.get("msg_type"))
            return
        text = json.dumps({**msg, "channel": channel}, default=json_default)
        if channel == "shell" and msg.get("msg_type") == "execute_request":
            self.awaiting_reply.add(str(msg["header"]["msg_id"]))
        ws = self._ws
        if ws is None:
            self._pending.append(text)
            return
        try:
            future = ws.write_message(text)
        except WebSocketClosedError:
            self._pending.append(text)  # the reader sees the close and reconnects
            return
        future.add_done_callback(_retrieve)

    # -- the websocket -------------------------------------------------------------------------

    def _queue(self, channel: str) -> asyncio.Queue[dict[str, Any]]:
        queue = self._queues.get(channel)
        if queue is None:
            queue = self._queues[channel] = asyncio.Queue()
        return queue

    async def connect(self) -> None:
        """Open the websocket (on the running loop, which the client then belongs to)."""
        if self._reader is not None:
            return
        self._ws = await self._open_ws()
        self._heard = time.monotonic()
        self._reader = asyncio.create_task(self._read())
        if self.heartbeat_seconds is not None:
            self._watchdog = asyncio.create_task(self._watch(self.heartbeat_seconds))

    async def _open_ws(self) -> WebSocketClientConnection:
        url = self.endpoint.ws_url(self.kernel_id, self._ws_session)
        request = HTTPRequest(
            url,
            headers=self.endpoint.headers(),
            connect_timeout=self.connect_timeout,
            follow_redirects=False,  # the token goes to the gateway named, nowhere else
        )
        try:
            return await websocket_connect(request, max_message_size=_MAX_MESSAGE)
        except HTTPClientError as exc:
            path = f"/api/kernels/{self.kernel_id}/channels"
            raise self.endpoint.refused("GET", path, exc.code, str(exc.message or "")) from None
        except OSError as exc:
            raise GatewayError(
                f"could not open kernel {self.kernel_id}'s websocket at {self.endpoint.url}: {exc}"
            ) from None

    async def _read(self) -> None:
        try:
            while True:
                ws = self._ws
                raw = None if ws is None else await ws.read_message()
                if raw is None:
                    if self._closed or not await self._reconnect():
                        return
                    continue
                self._heard = time.monotonic()
                self._heard_event.set()
                msg = _decode(raw)
                if msg is None:
                    continue
                channel = str(msg.pop("channel", "") or "")
                if channel == "iopub" and msg.get("msg_type") == "status":
                    self._on_status(msg)
                elif channel == "shell" and msg.get("msg_type") == "execute_reply":
                    self.awaiting_reply.discard(str(msg["parent_header"].get("msg_id", "")))
                if channel in ("shell", "iopub"):
                    self._queue(channel).put_nowait(msg)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a reader that broke leaves no run waiting for nothing
            self._die(f"the websocket reader of kernel {self.kernel_id} failed: {exc!r}")
            log.exception("websocket reader failed")

    def _on_status(self, msg: dict[str, Any]) -> None:
        # The gateway's own status messages have no parent (the kernel's always have one).
        if msg.get("parent_header"):
            return
        state = (msg.get("content") or {}).get("execution_state")
        if state == "restarting":
            self._die(
                f"kernel {self.kernel_id} at {self.endpoint.url} died (the gateway restarted "
                "it: its runs and bindings went with the old process)"
            )
        elif state == "dead":
            self._die(f"kernel {self.kernel_id} at {self.endpoint.url} died")

    async def _watch(self, every: float) -> None:
        """The heartbeat: ask a kernel silent for ``every`` seconds whether it is there,
        and give it up if it then says nothing within ``heartbeat_timeout``."""
        while self.death_reason is None:
            silent = time.monotonic() - self._heard
            if self._ws is None:  # reconnecting: _reconnect has a deadline of its own
                self._heard = time.monotonic()
                silent = 0.0
            if silent < every:
                await asyncio.sleep(every - silent)  # a timer: the next time to look
                continue
            self._heard_event.clear()
            reconnects = self.reconnects
            self.send("control", self.session.msg("kernel_info_request", {}))
            try:
                await asyncio.wait_for(self._heard_event.wait(), self.heartbeat_timeout)
            except asyncio.TimeoutError:
                if self._ws is None or self.reconnects != reconnects:
                    continue  # the websocket dropped meanwhile: not the kernel's silence
                self._die(
                    f"kernel {self.kernel_id} at {self.endpoint.url} stopped answering: "
                    f"nothing from it for {time.monotonic() - self._heard:.0f} s, not even an "
                    f"answer to a kernel_info_request within {self.heartbeat_timeout:g} s (it "
                    "is frozen: stopped, or stuck on its host, or the gateway's link to it is)"
                )

    def give_up(self, reason: str) -> None:
        """Count the kernel as dead (``reason``: why), as if the client had found it so."""
        self._die(reason)

    def _die(self, reason: str) -> None:
        if self.death_reason is None:
            self.death_reason = reason
            log.warning("%s", reason)
            if self.on_death is not None and not self._closed:
                try:
                    self.on_death(reason)
                except Exception:  # the owner's hook must not break the reader
                    log.exception("the on_death hook of kernel %s failed", self.kernel_id)

    async def _reconnect(self) -> bool:
        """Open the websocket again, the kernel still being there; False: dead (why set)."""
        self._ws = None
        deadline = time.monotonic() + self.reconnect_timeout
        delay = 0.05
        last: Exception | None = None
        while not self._closed and self.death_reason is None:
            try:
                if not await self.endpoint.kernel_exists(self.kernel_id):
                    self._die(
                        f"kernel {self.kernel_id} is gone from the gateway {self.endpoint.url}"
                    )
                    return False
                ws = await self._open_ws()
            except GatewayError as exc:
                last = exc
            else:
                self._ws = ws
                self.reconnects += 1
                pending, self._pending = self._pending, []
                for text in pending:
                    ws.write_message(text).add_done_callback(_retrieve)
                log.info("reconnected to kernel %s at %s", self.kernel_id, self.endpoint.url)
                return True
            if time.monotonic() + delay > deadline:
                break
            await asyncio.sleep(delay)  # backing off between attempts, not synchronising
            delay = min(delay * 2, 1.0)
        self._die(
            f"lost the websocket to kernel {self.kernel_id} at {self.endpoint.url} and could "
            f"not reconnect within {self.reconnect_timeout} s: {last}"
        )
        return False

    def drop_connection(self) -> None:
        """Close the websocket as a network failure would (the client reconnects)."""
        if self._ws is not None:
            self._ws.close()

    async def aclose(self) -> None:
        """Close the websocket and stop reading (the kernel itself stays at the gateway)."""
        self._closed = True
        if self.death_reason is None:
            self.death_reason = f"the client of kernel {self.kernel_id} was closed"
        ws, self._ws = self._ws, None
        if ws is not None:
            ws.close()
        tasks = [t for t in (self._reader, self._watchdog) if t is not None]
        self._reader = self._watchdog = None
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(BaseException):
                await task
        if ws is not None:
            # tornado hands messages over through a queue of one: unread, its frame loop
            # would wait on the next for ever (a task and a connection left per kernel).
            # Read on until the close is done (the gateway's answer, or tornado's own
            # abort after 5 s).
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(_drain(ws), _CLOSE_SECONDS)


async def _drain(ws: WebSocketClientConnection) -> None:
    while await ws.read_message() is not None:
        pass


def _retrieve(future: asyncio.Future[None]) -> None:
    """Mark a write's failure seen (the reader notices the closed websocket)."""
    if not future.cancelled():
        future.exception()


def _decode(raw: str | bytes) -> dict[str, Any] | None:
    """A gateway message: JSON text, or jupyter_server's binary framing (``<I`` count of
    offsets, the offsets, then the JSON message and its buffers, dropped here)."""
    try:
        if isinstance(raw, bytes):
            (count,) = struct.unpack_from("!I", raw)
            offsets = struct.unpack_from(f"!{count}I", raw, 4)
            end = offsets[1] if count > 1 else len(raw)
            raw = raw[offsets[0] : end].decode()
        msg = json.loads(raw)
    except (ValueError, struct.error, UnicodeDecodeError) as exc:
        log.warning("dropped a malformed message from the gateway: %s", exc)
        return None
    # What the readers index into is checked here, once: a message that is not the shape
    # of a Jupyter message (from a broken or hostile gateway) is dropped, never raised on.
    if not isinstance(msg, dict) or not isinstance(msg.get("header"), dict):
        log.warning("dropped a message from the gateway that is not a Jupyter message")
        return None
    for part in ("parent_header", "content", "metadata"):
        if msg.get(part) is None:
            msg[part] = {}
        elif not isinstance(msg[part], dict):
            log.warning("dropped a message from the gateway whose %s is not an object", part)
            return None
    if not isinstance(msg.get("msg_type"), str):
        msg["msg_type"] = str(msg["header"].get("msg_type", ""))
    return msg
