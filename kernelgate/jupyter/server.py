"""The kernelgate kernel: the Jupyter messaging protocol (5.3) over pyzmq on asyncio.

:class:`KernelServer` answers requests and owns the kernel's lifetime (start, signals, the
launcher going away, shutdown); :mod:`.channels` holds its sockets and signs its
messages; :mod:`.execute` runs cells. Each ``execute_request`` is one program run by
:meth:`kernelgate.Gateway.run` in a fresh child; cells run one at a time in a task of their
own, so the shell socket keeps being read while a cell runs.
"""

# long: one class owns the kernel's lifetime and answers every request type (shell, control,
# comms of the clients, the debugger's requests): split further, each part would need the
# whole server's state.
from __future__ import annotations

import asyncio
import logging
import os
import signal
from collections.abc import Callable, Mapping
from typing import Any

import zmq

from kernelgate.gateway.cleanups import guarded_task
from kernelgate.gateway.gateway import Gateway
from kernelgate.gateway.launch import NodeUnavailable
from kernelgate.gateway.runtime import CodeRuntime, PythonRuntime
from kernelgate.gateway.runtimes import runtime_for
from kernelgate.model.language import Language, check_language, language_info, title
from kernelgate.model.limits import Limits
from kernelgate.notebooks.render import LANGUAGE_INFO
from kernelgate.wire.messages import BINDINGS_TARGET

from . import introspect, introspect_ts
from .channels import Channels, Message
from .clients import RecentIds, claims_owner, owner_of, same_owner
from .comms import ClientBindings, ready_data
from .debugger import DebugSession
from .execute import Executor, error_reply
from .history import history_reply
from .kernelinfo import kernel_info_content, node_version

__all__ = ["KernelServer", "run_kernel", "kernel_info_content", "LANGUAGE_INFO"]

log = logging.getLogger("kernelgate.kernel")


_SHUTDOWN_GRACE = 10.0
_PARENT_POLL = 1.0
#: Debug requests forwarded to a running cell and not answered yet, at most: a client that
#: floods control gets a refusal, never an unbounded pile of tasks.
_MAX_DEBUG_IN_FLIGHT = 64


def _failed(exc: BaseException) -> str:
    """The reply's message for a debug request the kernel itself failed on."""
    return (
        f"the kernel could not handle this debug request ({type(exc).__name__}); check its "
        "arguments against the Debug Adapter Protocol"
    )


def _launcher_pid() -> int | None:
    """The launcher's pid when jupyter_client started us as its (dependent) child."""
    try:
        pid = int(os.environ.get("JPY_PARENT_PID", ""))
    except ValueError:
        return None
    return pid if pid > 1 and pid == os.getppid() else None


class _Client:
    """The bindings one client announced on one comm, and the secret that owns them."""

    __slots__ = ("bindings", "gateway", "owner")

    def __init__(self, bindings: ClientBindings, gateway: Gateway, owner: str) -> None:
        self.bindings = bindings
        self.gateway = gateway
        self.owner = owner


def _owner(msg: Message) -> str | None:
    """The owner secret of a request other than execute (a malformed one is nobody's)."""
    try:
        return owner_of(msg)
    except ValueError:
        return None


class KernelServer:
    """One kernel process: serve the sockets of ``connection_info`` until shut down.

    ``namespaces`` are the kernel's own bindings (``{"tools": {...}}``); a client may add
    its own over a ``kernelgate.bindings`` comm (see :mod:`.comms`) for the cells it runs.
    ``bindings_error``: the kernelspec's bindings could not be loaded; the kernel serves
    anyway (a kernel that exits at start is restarted in a loop) and every cell's reply is
    a ``BindingsError`` with this message. ``sandbox`` and ``pool_size`` are
    :class:`~kernelgate.Gateway`'s (the kernelspec's kernel leaves them to their defaults).

    ``language`` (``"python"``, ``"typescript"`` or ``"javascript"``) is what the cells are
    written in, run on ``python`` or ``node``: ONE runtime is made for the kernel's life
    and every gateway it makes (its own, and each client's) runs on it, so a TypeScript
    kernel has one transformer helper, closed with the kernel. A kernel without a
    debugger (TypeScript, JavaScript) says so in ``kernel_info`` and refuses
    ``debug_request``.
    """

    def __init__(
        self,
        connection_info: Mapping[str, Any],
        namespaces: Mapping[str, Mapping[str, Callable[..., Any]]] | None = None,
        *,
        limits: Limits | None = None,
        python: str | None = None,
        bindings_error: str | None = None,
        sandbox: str | None = None,
        pool_size: int = 4,
        language: str = "python",
        node: str | None = None,
    ) -> None:
        #: The cells' language: how they are read, completed and described.
        self.language: Language = check_language(language)
        runtime_error: str | None = None
        try:
            self.runtime: CodeRuntime = runtime_for(language=language, python=python, node=node)
        except NodeUnavailable as exc:
            # No usable Node (removed or moved since the install). A kernel that exits at
            # start is restarted in a loop with nothing shown but "restarting": it serves
            # instead, says its language, and refuses every cell saying why. The stand-in
            # runtime never runs a program.
            self.runtime = PythonRuntime(python)
            runtime_error = (
                f"the {title(self.language)} kernel cannot run cells: {exc}. Install Node "
                "(>= 18), or install the kernelspec again with a Node it can find "
                "('kernelgate kernel install --language "
                f"{self.language} --node PATH'), then restart the kernel"
            )
            log.error("%s", runtime_error)
        self._runtime_error = runtime_error
        #: JupyterLab's debugger is offered where the runtime's children can be debugged.
        self.debuggable = self.runtime.debugger and runtime_error is None
        self.channels = Channels(dict(connection_info))
        self.connection_info = self.channels.connection_info
        self.namespaces = {ns: dict(t) for ns, t in (namespaces or {"tools": {}}).items()}
        self.limits = limits or Limits()
        self.python = python
        #: What every gateway of this kernel gets besides its bindings (``sandbox``: a level,
        #: or None for the strongest here; ``pool_size`` 0 for cold children only).
        self._gateway_options: dict[str, Any] = {"sandbox": sandbox, "pool_size": pool_size}
        self.gateway = Gateway(
            namespaces=self.namespaces,
            limits=self.limits,
            runtime=self.runtime,
            **self._gateway_options,
        )
        self.debugger = DebugSession(self._publish_debug_event)
        self.executor = Executor(
            self.channels,
            self.limits,
            self._gateway_for,
            self.debugger if self.debuggable else None,
            language=self.language,
        )
        self._debug_tasks: set[asyncio.Task[None]] = set()
        if bindings_error is not None:
            # The kernelspec's bindings did not load: every cell is refused, saying why.
            self.executor.refusal = ("BindingsError", bindings_error)
        if runtime_error is not None:
            self.executor.refusal = ("NodeUnavailable", runtime_error)
        self._clients: dict[str, _Client] = {}
        #: Ids of private requests (with an owner secret): no other request may reuse one.
        self._private_ids = RecentIds()
        self._stop: asyncio.Event | None = None

    @property
    def execution_count(self) -> int:
        return self.executor.execution_count

    # -- lifetime ----------------------------------------------------------------------------

    async def serve(self) -> None:
        """Bind, serve every channel, and return once shut down (no child left behind)."""
        loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        channels = self.channels
        signals = []
        for sig, callback in ((signal.SIGINT, self.interrupt), (signal.SIGTERM, self.stop)):
            loop.add_signal_handler(sig, callback)
            signals.append(sig)
        tasks: list[asyncio.Task[None]] = []
        try:
            channels.bind("iopub", zmq.PUB)
            shell = channels.bind("shell", zmq.ROUTER)
            control = channels.bind("control", zmq.ROUTER)
            channels.bind("stdin", zmq.ROUTER)
            hb = channels.bind("hb", zmq.REP)
            channels.publish("status", {"execution_state": "starting"}, None)
            tasks = [
                asyncio.create_task(channels.serve(shell, self._on_shell)),
                asyncio.create_task(channels.serve(control, self._on_control)),
                asyncio.create_task(channels.heartbeat(hb)),
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
            channels.close()

    def stop(self) -> None:
        """Shut down: the running cell is interrupted, queued ones are aborted."""
        if self._stop is not None:
            self._stop.set()

    def interrupt(self) -> None:
        """Stop the running cell (it ends with status ``"interrupted"``)."""
        self.executor.interrupt()

    async def _shut_down(self) -> None:
        await self.executor.close(_SHUTDOWN_GRACE)
        for task in list(self._debug_tasks):
            task.cancel()
        await asyncio.gather(*self._debug_tasks, return_exceptions=True)
        for client in self._clients.values():
            client.bindings.close("the kernel is shutting down")
        gateways = [self.gateway, *(c.gateway for c in self._clients.values())]
        await asyncio.gather(*(gw.aclose() for gw in gateways), return_exceptions=True)
        # The gateways were given the runtime: it is the kernel's to close (a TypeScript
        # kernel's transformer helper goes with it).
        try:
            await self.runtime.aclose()
        except Exception:
            log.exception("closing the kernel's %s runtime failed", self.runtime.name)

    async def _watch_parent(self, parent: int) -> None:
        """Shut down when the process that launched the kernel is gone (as ipykernel does)."""
        while os.getppid() == parent:
            await asyncio.sleep(_PARENT_POLL)
        log.warning("the process that started the kernel (pid %d) is gone; shutting down", parent)
        self.stop()

    # -- requests ----------------------------------------------------------------------------

    def _fresh(self, msg: Message, channel: str) -> bool:
        """Whether to handle a request: not if it reuses the ``msg_id`` of a private
        request (one with an owner secret). The kernel's messages about it would carry that
        request's id as parent, and its client would take them for its own (ids are visible
        on iopub). See :mod:`.clients`."""
        msg_id = str(msg["header"].get("msg_id", ""))
        private = claims_owner(msg)
        if (
            (private and not msg_id)
            or msg_id in self._private_ids
            or (self.executor.private_in_flight(msg_id))
        ):
            log.warning(
                "dropped a %s on %s: its msg_id is a private request's (or empty); every "
                "request needs an id of its own",
                msg["header"].get("msg_type"),
                channel,
            )
            return False
        if private:
            self._private_ids.add(msg_id)
        return True

    async def _on_shell(self, msg: Message, idents: list[bytes]) -> None:
        if not self._fresh(msg, "shell"):
            return
        msg_type = msg["header"].get("msg_type", "")
        if msg_type == "execute_request":
            self.executor.submit(msg, idents)
            return
        publish = self.channels.publish
        publish("status", {"execution_state": "busy"}, msg["header"])
        try:
            self._handle_request("shell", msg_type, msg, idents)
        finally:
            publish("status", {"execution_state": "idle"}, msg["header"])

    async def _on_control(self, msg: Message, idents: list[bytes]) -> None:
        if not self._fresh(msg, "control"):
            return
        msg_type = msg["header"].get("msg_type", "")
        publish = self.channels.publish
        publish("status", {"execution_state": "busy"}, msg["header"])
        try:
            if msg_type == "interrupt_request":
                # With an owner secret, only that owner's run is stopped (a RemoteGateway
                # never stops another client's cell); without one, whatever runs, as Jupyter.
                self.executor.interrupt(_owner(msg))
                self.channels.reply("control", "interrupt_reply", {"status": "ok"}, msg, idents)
            elif msg_type == "debug_request":
                self._debug_request(msg, idents)
            else:
                self._handle_request("control", msg_type, msg, idents)
        finally:
            publish("status", {"execution_state": "idle"}, msg["header"])

    def _answer(self, msg_type: str, content: dict[str, Any], msg: Message) -> Any:
        """The reply content of a shell request (``None``: not one of these)."""
        code = str(content.get("code", ""))
        # The cells' language decides how they are read (never run).
        helper = introspect if self.language == "python" else introspect_ts
        if msg_type == "complete_request":
            namespaces = self._gateway_for(_owner(msg)).registry.namespaces
            return helper.complete(code, content.get("cursor_pos"), namespaces)
        if msg_type == "inspect_request":
            namespaces = self._gateway_for(_owner(msg)).registry.namespaces
            return helper.inspect_code(code, content.get("cursor_pos"), namespaces)
        if msg_type == "is_complete_request":
            return helper.is_complete(code)
        if msg_type == "history_request":
            return history_reply(self.executor.bench.history, content)
        if msg_type == "comm_info_request":
            # The comm ids are on iopub anyway (each call names its comm); without the
            # owner's secret an id gives nothing.
            target = content.get("target_name")
            comms = {
                comm_id: {"target_name": BINDINGS_TARGET}
                for comm_id in self._clients
                if target in (None, BINDINGS_TARGET)
            }
            return {"status": "ok", "comms": comms}
        if msg_type == "connect_request":
            ports = {
                f"{name}_port": int(self.connection_info.get(f"{name}_port", 0))
                for name in ("shell", "iopub", "stdin", "hb", "control")
            }
            return {"status": "ok", **ports}
        return None

    def _handle_request(
        self, channel: str, msg_type: str, msg: Message, idents: list[bytes]
    ) -> None:
        content = msg.get("content") or {}
        reply = self.channels.reply
        if msg_type == "kernel_info_request":
            runtime = self.runtime
            if self._runtime_error is not None:
                info = kernel_info_content(
                    language_info(self.language), debugger=False, runs_on="no Node found"
                )
            else:
                runs_on = (
                    None if runtime.name == "python" else f"Node {node_version(runtime)}".rstrip()
                )
                info = kernel_info_content(
                    runtime.language_info, debugger=self.debuggable, runs_on=runs_on
                )
            reply(channel, "kernel_info_reply", info, msg, idents)
        elif msg_type == "shutdown_request":
            restart = bool(content.get("restart", False))
            reply(channel, "shutdown_reply", {"status": "ok", "restart": restart}, msg, idents)
            self.stop()
        elif channel == "control":
            self._unknown(channel, msg_type, msg, idents)
        elif msg_type == "comm_open":
            self._comm_open(msg)
        elif msg_type == "comm_msg":
            client = self._owned(msg)
            if client is not None:
                client.bindings.on_message(content.get("data"))
        elif msg_type == "comm_close":
            if self._owned(msg) is not None:
                self._comm_close(str(content.get("comm_id")), "the client closed the bindings comm")
        else:
            answer = self._answer(msg_type, content, msg)
            if answer is None:
                self._unknown(channel, msg_type, msg, idents)
            else:
                reply_type = msg_type[: -len("_request")] + "_reply"
                reply(channel, reply_type, answer, msg, idents)

    def _unknown(self, channel: str, msg_type: str, msg: Message, idents: list[bytes]) -> None:
        if msg_type.endswith("_request"):
            reply_type = msg_type[: -len("_request")] + "_reply"
            why = f"kernelgate does not handle {msg_type}"
            content = error_reply("NotImplementedError", why)
            self.channels.reply(channel, reply_type, content, msg, idents)
        else:
            log.info("ignored %s on %s", msg_type, channel)

    # -- the debugger --------------------------------------------------------------------------

    def _debug_request(self, msg: Message, idents: list[bytes]) -> None:
        """Answer a ``debug_request``: the session's own requests at once, a running cell's
        in a task (a stopped or slow child never holds up control: interrupt and shutdown
        are read meanwhile)."""
        content = msg.get("content")
        request = content if isinstance(content, dict) else {}

        def reply(answer: dict[str, Any]) -> None:
            self.channels.reply("control", "debug_reply", answer, msg, idents)

        if not self.debuggable:
            # kernel_info said debugger: false; a front end that asks anyway is told why.
            name = title(self.language)
            reply(
                self.debugger.refusal(
                    request,
                    f"this kernel runs {name} programs, which have no debugger in kernelgate "
                    "(kernel_info says debugger: false); use a Python kernel to step "
                    "through a program, or console.log in the cell",
                )
            )
            return
        if claims_owner(msg):
            # The session and its runs are the notebook's; private runs are never debugged.
            reply(
                self.debugger.refusal(
                    request,
                    "the debugger is the notebook's: a request with an owner secret (a "
                    "private client's) reaches no debug session, and private runs are never "
                    "debugged",
                )
            )
            return
        try:
            answer = self.debugger.answer_now(request)
        except Exception as exc:
            # A request no check foresaw must still be answered: JupyterLab waits for
            # every reply, and an unanswered one leaves its debugger hanging.
            log.exception("a debug request failed in the kernel")
            reply(self.debugger.refusal(request, _failed(exc)))
            return
        if answer is not None:
            reply(answer)
            return
        if len(self._debug_tasks) >= _MAX_DEBUG_IN_FLIGHT:
            reply(
                self.debugger.refusal(
                    request,
                    f"{_MAX_DEBUG_IN_FLIGHT} debug requests are waiting for the program "
                    "already; wait for their replies",
                )
            )
            return

        def shutting_down() -> None:
            reply(self.debugger.refusal(request, "the kernel is shutting down"))

        async def forward() -> None:
            try:
                answer = await self.debugger.forward(request)
            except asyncio.CancelledError:  # the kernel shuts down: still an answer
                shutting_down()
                raise
            except Exception as exc:
                log.exception("a forwarded debug request failed in the kernel")
                answer = self.debugger.refusal(request, _failed(exc))
            reply(answer)

        # Cancelled before its first step (a shutdown in this turn), forward() never runs
        # and its own answer never goes: the guard gives it.
        task = guarded_task(forward, shutting_down)
        self._debug_tasks.add(task)
        task.add_done_callback(self._debug_tasks.discard)

    def _publish_debug_event(self, event: dict[str, Any], parent: Message | None) -> None:
        self.channels.publish("debug_event", event, parent)

    # -- client-answered bindings ------------------------------------------------------------

    def _owned(self, msg: Message) -> _Client | None:
        """The bindings comm a ``comm_msg``/``comm_close`` names, if the message carries
        its owner's secret; ``None`` (and the message is ignored) otherwise."""
        content = msg.get("content") or {}
        client = self._clients.get(str(content.get("comm_id")))
        if client is None:
            return None
        if not same_owner(client.owner, _owner(msg)):
            log.warning(
                "ignored a %s for a bindings comm from a client that does not own it",
                msg["header"].get("msg_type"),
            )
            return None
        return client

    def _comm_open(self, msg: Message) -> None:
        content = msg.get("content") or {}
        comm_id = str(content.get("comm_id", ""))
        header = msg["header"]
        publish = self.channels.publish
        if content.get("target_name") != BINDINGS_TARGET or not comm_id:
            # Unknown target: close at once, as the spec asks.
            publish("comm_close", {"comm_id": comm_id, "data": {}}, header)
            return
        data = content.get("data") or {}

        def refuse(why: str) -> None:
            publish("comm_close", {"comm_id": comm_id, "data": {"error": why}}, header)

        try:
            owner = owner_of(msg)
        except ValueError as exc:
            refuse(str(exc))
            return
        if owner is None:
            refuse(
                "a bindings comm needs an owner secret in the comm_open's "
                "metadata.kernelgate.owner (sent again with each request that may call the "
                "bindings or answer them); RemoteGateway sends one"
            )
            return
        old = self._clients.get(comm_id)
        if old is not None and not same_owner(old.owner, owner):
            # Another client's comm: left as it is (this refusal's parent is the opener's
            # request, so the comm's owner does not take it for its own).
            refuse(f"the comm id {comm_id!r} is another client's")
            return

        def send(payload: dict[str, Any]) -> None:
            cell = self.executor.cell
            parent = cell.parent if cell is not None else header
            publish("comm_msg", {"comm_id": comm_id, "data": payload}, parent)

        try:
            bindings = ClientBindings(comm_id, data.get("namespaces"), send)
            gateway = Gateway(
                namespaces={**self.namespaces, **bindings.namespaces},
                limits=self.limits,
                runtime=self.runtime,  # the kernel's one runtime, never one per client
                **self._gateway_options,
            )
        except (ValueError, TypeError) as exc:
            refuse(str(exc))
            return
        old = self._clients.pop(comm_id, None)
        if old is not None:
            old.bindings.close("the comm was opened again")
        self._clients[comm_id] = _Client(bindings, gateway, owner)
        ready = ready_data(
            gateway.registry.signatures(),
            {
                "wall_seconds": gateway.limits.wall_seconds,
                "kill_grace_seconds": gateway.limits.kill_grace_seconds,
            },
        )
        publish("comm_msg", {"comm_id": comm_id, "data": ready}, header)

    def _comm_close(self, comm_id: str, reason: str) -> None:
        client = self._clients.pop(comm_id, None)
        if client is not None:
            client.bindings.close(reason)

    def _gateway_for(self, owner: str | None) -> Gateway:
        """The gateway for a request carrying ``owner``: the latest bindings comm that owner
        opened, else the kernel's. Never by session id: any client can claim any session."""
        if owner is not None:
            for client in reversed(self._clients.values()):
                if same_owner(client.owner, owner):
                    return client.gateway
        return self.gateway


def run_kernel(
    connection_file: str,
    namespaces: Mapping[str, Mapping[str, Callable[..., Any]]] | None = None,
    *,
    limits: Limits | None = None,
    bindings_error: str | None = None,
    language: str = "python",
    node: str | None = None,
) -> int:
    """Serve the kernel described by ``connection_file`` until it is shut down
    (``bindings_error``, ``language``, ``node``: see :class:`KernelServer`)."""
    import json

    with open(connection_file, encoding="utf-8") as f:
        info = json.load(f)
    if not logging.getLogger().handlers:
        logging.basicConfig(
            level=os.environ.get("KERNELGATE_KERNEL_LOG", "WARNING").upper(),
            format="[kernelgate kernel] %(levelname)s %(message)s",
        )
    server = KernelServer(
        info,
        namespaces,
        limits=limits,
        bindings_error=bindings_error,
        language=language,
        node=node,
    )
    asyncio.run(server.serve())
    return 0
