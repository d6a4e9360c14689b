"""The kernelgate kernel: the Jupyter messaging protocol (5.3) over pyzmq on asyncio.

Shell, control and stdin are ROUTER sockets, iopub is PUB, heartbeat is REP; every message
is signed and checked by one ``jupyter_client.session.Session`` (one session id for every
message the kernel sends), and built with :class:`~kernelgate.wire.messages.MessageFactory`
and the content builders of :mod:`kernelgate.wire.messages`.

Each ``execute_request`` is one program run by :meth:`kernelgate.Gateway.run` in a fresh
child: its outputs go to iopub as they happen (``on_output``), each binding call as a
``display_data`` output when it completes (``on_call``). Cells run one at a time in a task
of their own, so the shell socket keeps being read while a cell runs: ``complete``,
``inspect`` and, above all, the ``comm_msg`` answers of client-answered bindings are
handled at once, never queued behind the ``execute_request``.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import platform
import signal
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import zmq
import zmq.asyncio
from jupyter_client.session import Session

from kernelgate.gateway.gateway import Gateway
from kernelgate.model.codec import encode_metadata
from kernelgate.model.limits import Limits
from kernelgate.model.result import CallRecord, ErrorInfo, RunResult
from kernelgate.wire.messages import (
    BINDINGS_TARGET,
    PROTOCOL_VERSION,
    MessageFactory,
    display_data_content,
    error_content,
    execute_reply_content,
    execute_result_content,
    stream_content,
)

from .calls import call_display
from .comms import ClientBindings, ready_data
from .introspect import complete, inspect_code, is_complete

__all__ = ["KernelServer", "run_kernel", "kernel_info_content", "LANGUAGE_INFO"]

log = logging.getLogger("kernelgate.kernel")

Message = dict[str, Any]
Handler = Callable[[Message, list[bytes]], Awaitable[None]]

LANGUAGE_INFO: dict[str, Any] = {
    "name": "python",
    "version": platform.python_version(),
    "mimetype": "text/x-python",
    "file_extension": ".py",
    "pygments_lexer": "ipython3",
    "codemirror_mode": {"name": "ipython", "version": 3},
    "nbconvert_exporter": "python",
}

_SHUTDOWN_GRACE = 10.0
_INTERRUPT_RETRY = 0.01
_PARENT_POLL = 1.0
_LINGER_MS = 1000


def kernel_info_content() -> dict[str, Any]:
    from kernelgate import __version__

    return {
        "status": "ok",
        "protocol_version": PROTOCOL_VERSION,
        "implementation": "kernelgate",
        "implementation_version": __version__,
        "language_info": dict(LANGUAGE_INFO),
        "banner": (
            f"kernelgate {__version__} (Python {platform.python_version()}): every cell is a "
            "fresh program in its own child process; bindings are 'await tools.name(...)'."
        ),
        "help_links": [],
        "debugger": False,
    }


def _launcher_pid() -> int | None:
    """The launcher's pid when jupyter_client started us as its (dependent) child."""
    try:
        pid = int(os.environ.get("JPY_PARENT_PID", ""))
    except ValueError:
        return None
    return pid if pid > 1 and pid == os.getppid() else None


def _error_reply(ename: str, evalue: str) -> dict[str, Any]:
    return {"status": "error", "ename": ename, "evalue": evalue, "traceback": []}


class _Cell:
    """What the frontend has been shown of the running cell."""

    __slots__ = ("count", "error_sent", "gateway", "parent")

    def __init__(self, parent: Message, count: int, gateway: Gateway) -> None:
        self.parent = parent
        self.count = count
        self.error_sent = False
        self.gateway = gateway


class _Client:
    __slots__ = ("bindings", "gateway")

    def __init__(self, bindings: ClientBindings, gateway: Gateway) -> None:
        self.bindings = bindings
        self.gateway = gateway


class KernelServer:
    """One kernel process: serve the sockets of ``connection_info`` until shut down.

    ``namespaces`` are the kernel's own bindings (``{"tools": {...}}``); a client may add
    its own over a ``kernelgate.bindings`` comm (see :mod:`.comms`) for the cells it runs.
    """

    def __init__(
        self,
        connection_info: Mapping[str, Any],
        namespaces: Mapping[str, Mapping[str, Callable[..., Any]]] | None = None,
        *,
        limits: Limits | None = None,
        python: str | None = None,
    ) -> None:
        self.connection_info = dict(connection_info)
        key = self.connection_info.get("key", "")
        self.session = Session(
            key=key.encode() if isinstance(key, str) else bytes(key),
            signature_scheme=self.connection_info.get("signature_scheme", "hmac-sha256"),
            username="kernel",
        )
        self.messages = MessageFactory(self.session.session, username="kernel")
        self.namespaces = {ns: dict(t) for ns, t in (namespaces or {"tools": {}}).items()}
        self.limits = limits or Limits()
        self.python = python
        self.gateway = Gateway(namespaces=self.namespaces, limits=self.limits, python=python)
        self.execution_count = 0
        self._clients: dict[str, _Client] = {}
        self._queue: collections.deque[tuple[Message, list[bytes]]] = collections.deque()
        self._executor: asyncio.Task[None] | None = None
        self._cell: _Cell | None = None
        self._stop: asyncio.Event | None = None
        self._closing = False
        self._sockets: dict[str, zmq.asyncio.Socket] = {}

    # -- sockets ---------------------------------------------------------------------------

    def _address(self, port: int) -> str:
        transport = self.connection_info.get("transport", "tcp")
        ip = self.connection_info.get("ip", "127.0.0.1")
        if transport == "ipc":
            return f"ipc://{ip}-{port}"
        return f"{transport}://{ip}:{port}"

    def _bind(self, ctx: zmq.asyncio.Context, name: str, kind: int) -> zmq.asyncio.Socket:
        sock = ctx.socket(kind)
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

    def _send(self, name: str, msg: Message, idents: list[bytes] | None = None) -> None:
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
            sent.add_done_callback(self._sent)

    def _sent(self, future: asyncio.Future[Any]) -> None:
        if not future.cancelled() and future.exception() is not None:
            log.warning("a message could not be sent: %s", future.exception())

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
        self._send("iopub", msg, [topic])

    def reply(
        self,
        channel: str,
        msg_type: str,
        content: dict[str, Any],
        request: Message,
        idents: list[bytes],
        metadata: dict[str, Any] | None = None,
    ) -> None:
        msg = self.messages.message(
            msg_type, content, parent_header=request["header"], metadata=metadata
        )
        self._send(channel, msg, idents)

    # -- the loop --------------------------------------------------------------------------

    async def serve(self) -> None:
        """Bind, serve every channel, and return once shut down (no child left behind)."""
        loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        ctx = zmq.asyncio.Context()
        signals = []
        for sig, callback in ((signal.SIGINT, self.interrupt), (signal.SIGTERM, self.stop)):
            loop.add_signal_handler(sig, callback)
            signals.append(sig)
        tasks: list[asyncio.Task[None]] = []
        try:
            self._bind(ctx, "iopub", zmq.PUB)
            shell = self._bind(ctx, "shell", zmq.ROUTER)
            control = self._bind(ctx, "control", zmq.ROUTER)
            self._bind(ctx, "stdin", zmq.ROUTER)
            hb = self._bind(ctx, "hb", zmq.REP)
            self.publish("status", {"execution_state": "starting"}, None)
            tasks = [
                asyncio.create_task(self._serve_channel(shell, self._on_shell)),
                asyncio.create_task(self._serve_channel(control, self._on_control)),
                asyncio.create_task(self._heartbeat(hb)),
            ]
            parent = _launcher_pid()
            if parent is not None:
                tasks.append(asyncio.create_task(self._watch_parent(parent)))
            await self._stop.wait()
            await self._shut_down()
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            for sig in signals:
                loop.remove_signal_handler(sig)
            for sock in self._sockets.values():
                sock.close(linger=_LINGER_MS)
            ctx.term()

    def stop(self) -> None:
        """Shut down: the running cell is interrupted, queued ones are aborted."""
        if self._stop is not None:
            self._stop.set()

    async def _shut_down(self) -> None:
        self._closing = True
        self._abort_queue()
        self.interrupt()
        if self._executor is not None:
            with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(self._executor), _SHUTDOWN_GRACE)
        for client in self._clients.values():
            client.bindings.close("the kernel is shutting down")
        gateways = [self.gateway, *(c.gateway for c in self._clients.values())]
        await asyncio.gather(*(gw.aclose() for gw in gateways), return_exceptions=True)

    async def _serve_channel(self, sock: zmq.asyncio.Socket, handler: Handler) -> None:
        while True:
            frames = await sock.recv_multipart()
            try:
                idents, rest = self.session.feed_identities(frames)
                msg = self.session.deserialize(rest)
            except Exception as exc:  # unsigned, replayed or malformed: drop it
                log.warning("dropped an invalid message: %s", exc)
                continue
            try:
                await handler(msg, idents)
            except Exception:
                log.exception("error handling %s", msg.get("msg_type"))

    async def _watch_parent(self, parent: int) -> None:
        """Shut down when the process that launched the kernel is gone (as ipykernel does)."""
        while os.getppid() == parent:
            await asyncio.sleep(_PARENT_POLL)
        log.warning("the process that started the kernel (pid %d) is gone; shutting down", parent)
        self.stop()

    async def _heartbeat(self, sock: zmq.asyncio.Socket) -> None:
        while True:
            frames = await sock.recv_multipart()
            await sock.send_multipart(frames)

    # -- shell -----------------------------------------------------------------------------

    async def _on_shell(self, msg: Message, idents: list[bytes]) -> None:
        msg_type = msg["header"].get("msg_type", "")
        if msg_type == "execute_request":
            self._queue.append((msg, idents))
            if self._closing:
                self._abort_queue()
            elif self._executor is None or self._executor.done():
                self._executor = asyncio.create_task(self._execute_queue())
            return
        self.publish("status", {"execution_state": "busy"}, msg["header"])
        try:
            self._handle_request("shell", msg_type, msg, idents)
        finally:
            self.publish("status", {"execution_state": "idle"}, msg["header"])

    async def _on_control(self, msg: Message, idents: list[bytes]) -> None:
        msg_type = msg["header"].get("msg_type", "")
        self.publish("status", {"execution_state": "busy"}, msg["header"])
        try:
            if msg_type == "interrupt_request":
                self.interrupt()
                self.reply("control", "interrupt_reply", {"status": "ok"}, msg, idents)
            else:
                self._handle_request("control", msg_type, msg, idents)
        finally:
            self.publish("status", {"execution_state": "idle"}, msg["header"])

    def _handle_request(
        self, channel: str, msg_type: str, msg: Message, idents: list[bytes]
    ) -> None:
        content = msg.get("content") or {}
        header = msg["header"]
        if msg_type == "kernel_info_request":
            self.reply(channel, "kernel_info_reply", kernel_info_content(), msg, idents)
        elif msg_type == "shutdown_request":
            restart = bool(content.get("restart", False))
            self.reply(channel, "shutdown_reply", {"status": "ok", "restart": restart}, msg, idents)
            self.stop()
        elif channel == "control":
            self._unknown(channel, msg_type, msg, idents)
        elif msg_type == "complete_request":
            reply = complete(
                str(content.get("code", "")),
                content.get("cursor_pos"),
                self._gateway_for(header).registry.namespaces,
            )
            self.reply(channel, "complete_reply", reply, msg, idents)
        elif msg_type == "inspect_request":
            reply = inspect_code(
                str(content.get("code", "")),
                content.get("cursor_pos"),
                self._gateway_for(header).registry.namespaces,
            )
            self.reply(channel, "inspect_reply", reply, msg, idents)
        elif msg_type == "is_complete_request":
            reply = is_complete(str(content.get("code", "")))
            self.reply(channel, "is_complete_reply", reply, msg, idents)
        elif msg_type == "history_request":
            self.reply(channel, "history_reply", {"status": "ok", "history": []}, msg, idents)
        elif msg_type == "comm_info_request":
            target = content.get("target_name")
            comms = {
                comm_id: {"target_name": BINDINGS_TARGET}
                for comm_id in self._clients
                if target in (None, BINDINGS_TARGET)
            }
            self.reply(channel, "comm_info_reply", {"status": "ok", "comms": comms}, msg, idents)
        elif msg_type == "connect_request":
            ports = {
                f"{name}_port": int(self.connection_info.get(f"{name}_port", 0))
                for name in ("shell", "iopub", "stdin", "hb", "control")
            }
            self.reply(channel, "connect_reply", {"status": "ok", **ports}, msg, idents)
        elif msg_type == "comm_open":
            self._comm_open(msg)
        elif msg_type == "comm_msg":
            client = self._clients.get(str(content.get("comm_id")))
            if client is not None:
                client.bindings.on_message(content.get("data"))
        elif msg_type == "comm_close":
            self._comm_close(str(content.get("comm_id")), "the client closed the bindings comm")
        else:
            self._unknown(channel, msg_type, msg, idents)

    def _unknown(self, channel: str, msg_type: str, msg: Message, idents: list[bytes]) -> None:
        if msg_type.endswith("_request"):
            reply_type = msg_type[: -len("_request")] + "_reply"
            self.reply(
                channel,
                reply_type,
                _error_reply("NotImplementedError", f"kernelgate does not handle {msg_type}"),
                msg,
                idents,
            )
        else:
            log.info("ignored %s on %s", msg_type, channel)

    # -- client-answered bindings ----------------------------------------------------------

    def _comm_open(self, msg: Message) -> None:
        content = msg.get("content") or {}
        comm_id = str(content.get("comm_id", ""))
        header = msg["header"]
        if content.get("target_name") != BINDINGS_TARGET or not comm_id:
            # Unknown target: close at once, as the spec asks.
            self.publish("comm_close", {"comm_id": comm_id, "data": {}}, header)
            return
        data = content.get("data") or {}

        def send(payload: dict[str, Any]) -> None:
            parent = self._cell.parent if self._cell is not None else header
            self.publish("comm_msg", {"comm_id": comm_id, "data": payload}, parent)

        try:
            bindings = ClientBindings(
                comm_id, str(header.get("session", "")), data.get("namespaces"), send
            )
            gateway = Gateway(
                namespaces={**self.namespaces, **bindings.namespaces},
                limits=self.limits,
                python=self.python,
            )
        except (ValueError, TypeError) as exc:
            self.publish("comm_close", {"comm_id": comm_id, "data": {"error": str(exc)}}, header)
            return
        old = self._clients.pop(comm_id, None)
        if old is not None:
            old.bindings.close("the comm was opened again")
        self._clients[comm_id] = _Client(bindings, gateway)
        self.publish(
            "comm_msg",
            {"comm_id": comm_id, "data": ready_data(gateway.registry.signatures())},
            header,
        )

    def _comm_close(self, comm_id: str, reason: str) -> None:
        client = self._clients.pop(comm_id, None)
        if client is not None:
            client.bindings.close(reason)

    def _gateway_for(self, header: Mapping[str, Any]) -> Gateway:
        """The gateway for a request: its client's latest bindings comm, else the kernel's."""
        session = header.get("session")
        for client in reversed(self._clients.values()):
            if client.bindings.client_session == session:
                return client.gateway
        return self.gateway

    # -- execute ---------------------------------------------------------------------------

    def interrupt(self) -> None:
        """Stop the running cell (it ends with status ``"interrupted"``)."""
        if self._cell is not None:
            self._interrupt_cell(self._cell)

    def _interrupt_cell(self, cell: _Cell) -> None:
        # The cell may be between its request and its run's start (the gateway has no
        # live run yet): try again shortly, until the run is stopped or the cell is over.
        if self._cell is cell and cell.gateway.interrupt() == 0:
            asyncio.get_running_loop().call_later(_INTERRUPT_RETRY, self._interrupt_cell, cell)

    def _abort_queue(self) -> None:
        while self._queue:
            msg, idents = self._queue.popleft()
            self.publish("status", {"execution_state": "busy"}, msg["header"])
            self.reply(
                "shell",
                "execute_reply",
                {"status": "aborted"},
                msg,
                idents,
                metadata={"status": "aborted"},
            )
            self.publish("status", {"execution_state": "idle"}, msg["header"])

    async def _execute_queue(self) -> None:
        while self._queue and not self._closing:
            msg, idents = self._queue.popleft()
            ok = await self._execute(msg, idents)
            content = msg.get("content") or {}
            if not ok and content.get("stop_on_error", True) and not content.get("silent"):
                self._abort_queue()

    def _limits_for(self, msg: Message) -> Limits | None:
        """The kernelspec's limits, or tighter ones a request asks for; never looser.

        JupyterLab sends a cell's metadata with each execute_request, and a saved (or
        crafted) notebook fills it in: a recorded run's ``kernelgate.limits`` arrive here
        as if asked for. So a request (``metadata.kernelgate.limits``, as
        :class:`~kernelgate.jupyter.remote.RemoteGateway` sends) may only lower
        limits: each field is the smaller of the kernel's and the request's. The sandbox,
        memory, processes and frame sizes a cell gets are never more than the kernelspec's.
        """
        meta = msg.get("metadata") or {}
        given = (meta.get("kernelgate") or {}).get("limits") if isinstance(meta, dict) else None
        if not given:
            return None
        if not isinstance(given, dict):
            raise ValueError("metadata.kernelgate.limits must be an object")
        mine = self.limits.to_dict()
        unknown = sorted(str(name) for name in set(given) - set(mine))
        if unknown:
            raise ValueError(f"unknown limits {unknown}; known: {sorted(mine)}")
        tighter: dict[str, Any] = {}
        for name, value in given.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(f"metadata.kernelgate.limits.{name} must be a number")
            tighter[name] = min(mine[name], value)
        return Limits(**{**mine, **tighter})

    async def _execute(self, msg: Message, idents: list[bytes]) -> bool:
        parent = msg["header"]
        content = msg.get("content") or {}
        code = content.get("code", "")
        silent = bool(content.get("silent", False))
        self.publish("status", {"execution_state": "busy"}, parent)
        try:
            if not silent:
                self.execution_count += 1
                self.publish(
                    "execute_input",
                    {"code": code, "execution_count": self.execution_count},
                    parent,
                )
            cell = self._cell = _Cell(parent, self.execution_count, self._gateway_for(parent))
            try:
                result = await cell.gateway.run(
                    code if isinstance(code, str) else str(code),
                    limits=self._limits_for(msg),
                    on_output=None if silent else lambda out: self._on_output(cell, out),
                    on_call=None if silent else lambda rec: self._on_call(cell, rec),
                )
            except (TypeError, ValueError, RuntimeError) as exc:
                result = RunResult(
                    status="exception", error=ErrorInfo(type(exc).__name__, str(exc))
                )
            finally:
                self._cell = None
            metadata: dict[str, Any] = {"kernelgate": encode_metadata(result)}
            if result.ok:
                reply = execute_reply_content("ok", cell.count)
                reply["user_expressions"] = {
                    name: _error_reply(
                        "NotImplementedError",
                        "user_expressions need a live namespace; every kernelgate cell is a "
                        "fresh program",
                    )
                    for name in (content.get("user_expressions") or {})
                }
                metadata["status"] = "ok"
            else:
                error = result.error or ErrorInfo("Error", f"the run ended with {result.status}")
                traceback = error.traceback or [f"{error.ename}: {error.evalue}"]
                if not silent and not cell.error_sent:
                    self.publish(
                        "error", error_content(error.ename, error.evalue, traceback), parent
                    )
                reply = execute_reply_content(
                    "error", cell.count, error.ename, error.evalue, traceback
                )
                metadata["status"] = "error"
            self.reply("shell", "execute_reply", reply, msg, idents, metadata=metadata)
            return result.ok
        finally:
            self.publish("status", {"execution_state": "idle"}, parent)

    def _on_output(self, cell: _Cell, output: dict[str, Any]) -> None:
        kind = output.get("output_type")
        if kind == "stream":
            self.publish("stream", stream_content(output["name"], output["text"]), cell.parent)
        elif kind == "display_data":
            self.publish(
                "display_data",
                display_data_content(output.get("data", {}), output.get("metadata")),
                cell.parent,
            )
        elif kind == "execute_result":
            self.publish(
                "execute_result",
                execute_result_content(cell.count, output.get("data", {}), output.get("metadata")),
                cell.parent,
            )
        elif kind == "error":
            cell.error_sent = True
            self.publish(
                "error",
                error_content(output["ename"], output["evalue"], list(output.get("traceback", []))),
                cell.parent,
            )

    def _on_call(self, cell: _Cell, record: CallRecord) -> None:
        output = call_display(record)
        self.publish(
            "display_data",
            display_data_content(output["data"], output["metadata"]),
            cell.parent,
        )


def run_kernel(
    connection_file: str,
    namespaces: Mapping[str, Mapping[str, Callable[..., Any]]] | None = None,
    *,
    limits: Limits | None = None,
) -> int:
    """Serve the kernel described by ``connection_file`` until it is shut down."""
    import json

    with open(connection_file, encoding="utf-8") as f:
        info = json.load(f)
    if not logging.getLogger().handlers:
        logging.basicConfig(
            level=os.environ.get("KERNELGATE_KERNEL_LOG", "WARNING").upper(),
            format="[kernelgate kernel] %(levelname)s %(message)s",
        )
    server = KernelServer(info, namespaces, limits=limits)
    asyncio.run(server.serve())
    return 0
