"""RemoteGateway: run programs in a kernelgate kernel, answering its binding calls locally.

For when the kernel runs elsewhere (a remote Jupyter server or kernel gateway) and the
functions live in the agent's process. The client announces its bindings on a
``kernelgate.bindings`` comm (see :mod:`.comms`); during each run the kernel forwards every
call of them on that comm, and this client answers with the local function's result.

>>> async def main(kc):                                       # doctest: +SKIP
...     async with RemoteGateway(kc, bindings={"search": search}) as gw:
...         result = await gw.run("return await tools.search('x')")
...     return result.value
"""

# long: over ~500 lines because one RemoteGateway owns its kernel connection: opening and
# letting go (each run_sync does both), the channel readers, the comm and its answers read
# and write the same state; split, each part would reach into the others'.

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import secrets
import time
import uuid
from collections.abc import Callable, Coroutine, Mapping
from typing import TYPE_CHECKING, Any, Literal, overload

import zmq
import zmq.asyncio

from kernelgate.gateway.bindings import BindingRegistry
from kernelgate.gateway.run import CallListener, OutputListener
from kernelgate.gateway.tracing import RunTrace, Tracing, TracingOption
from kernelgate.model.language import DEFAULT_LANGUAGE, LANGUAGES
from kernelgate.model.limits import Limits
from kernelgate.model.result import ErrorInfo, RunResult
from kernelgate.wire.messages import BINDINGS_TARGET, execute_request_content
from kernelgate.wire.values import NotJSONError, check_json

from .clients import OWNER_FIELD
from .comms import call_reply_data, open_data
from .remotedescribe import describe_remote
from .remoterun import RemoteRun, check_run_sync

if TYPE_CHECKING:
    from jupyter_client.asynchronous.client import AsyncKernelClient

__all__ = ["RemoteGateway"]

log = logging.getLogger("kernelgate.remote")

_ALIVE_CHECK_SECONDS = 1.0
_CLOSE_GRACE = 10.0


class RemoteGateway:
    """Run programs in a kernelgate kernel; the kernel's calls of ``bindings`` are answered here.

    ``kernel_client`` is a ``jupyter_client`` ``AsyncKernelClient`` connected to a kernelgate
    kernel (local or remote). ``bindings`` (namespace ``namespace``) or ``namespaces`` are
    announced on a ``kernelgate.bindings`` comm when the gateway opens; in the programs this
    gateway runs they replace the kernel's own namespaces of the same names. ``run()`` has
    the contract of :meth:`kernelgate.Gateway.run` and returns a :class:`RunResult`.

    While open, the gateway reads the client's shell and iopub messages itself: use one
    ``RemoteGateway`` per client, and no other reader of those channels meanwhile.

    Other clients of the kernel cannot reach into its runs: each request it sends carries a
    secret of this gateway's (on shell and control only, never published by the kernel), so
    its runs are single programs the notebook's setup cells never touch, its bindings are
    called only by its own runs and answered only by it, and it answers only the calls of
    its runs in flight (docs/kernel.md, "Several clients").

    It is a :class:`kernelgate.CodeGateway`, as :class:`kernelgate.Gateway` is: a caller
    written against that protocol runs its programs here or locally alike.

    ``tracing`` is :class:`kernelgate.Gateway`'s: each run a ``kernelgate.run`` span, and
    each call this client answers a ``kernelgate.call`` span under it (the kernel's own
    bindings run in the kernel, untraced here).
    """

    def __init__(
        self,
        kernel_client: AsyncKernelClient,
        bindings: Mapping[str, Callable[..., Any]] | None = None,
        *,
        namespace: str = "tools",
        namespaces: Mapping[str, Mapping[str, Callable[..., Any]]] | None = None,
        ready_timeout: float = 60.0,
        tracing: TracingOption = None,
        reply_grace_seconds: float = 30.0,
    ) -> None:
        self._registry = BindingRegistry.from_arguments(bindings, namespace, namespaces)
        self._tracing = Tracing.from_option(tracing)
        if not (isinstance(reply_grace_seconds, (int, float)) and 0 < reply_grace_seconds < 1e9):
            raise ValueError(
                f"reply_grace_seconds must be a number of seconds > 0, got {reply_grace_seconds!r}"
            )
        #: How long past a run's wall time and kill grace a reply may take before the run is
        #: given up (the kernel or the connection lost it).
        self.reply_grace_seconds = float(reply_grace_seconds)
        #: The kernel's time budget per run, from its ``ready`` (None: not known).
        self._kernel_budget: float | None = None
        self.kernel_client = kernel_client
        self.ready_timeout = ready_timeout
        self.comm_id = uuid.uuid4().hex
        # Sent on shell and control only; the kernel never publishes it (.clients).
        self._owner = secrets.token_urlsafe(32)
        self._open_id = ""
        #: Shell and control connections of this gateway's own (see _connect_own).
        self._sockets: dict[str, zmq.asyncio.Socket] = {}
        #: What programs see, as the kernel reported it: namespace -> name -> signature.
        self.kernel_bindings: dict[str, dict[str, str]] = {}
        self._runs: dict[str, RemoteRun] = {}
        self._answers: dict[str, asyncio.Task[None]] = {}
        self._pumps: list[asyncio.Task[None]] = []
        self._ready: asyncio.Future[dict[str, Any]] | None = None
        self._announce = any(self._registry.namespaces.values())
        self._closed = False
        #: The loop the gateway is open on (its readers are tasks of that loop).
        self._loop: asyncio.AbstractEventLoop | None = None
        self._info_id = ""
        self._language: str = DEFAULT_LANGUAGE
        #: The task close() started on the gateway's loop, which aclose() there awaits.
        self._closing: asyncio.Task[None] | None = None

    @property
    def registry(self) -> BindingRegistry:
        return self._registry

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def language(self) -> str:
        """The kernel's language, as its ``kernel_info_reply`` says once the gateway is
        open (``"python"`` until then, and for a kernel that names none kernelgate runs)."""
        return self._language

    # -- opening and closing ---------------------------------------------------------------

    async def open(self) -> None:
        """Wait for the kernel, then announce the bindings (done by ``run()`` if needed)."""
        if self._closed:
            raise RuntimeError("this RemoteGateway is closed; create a new one")
        if self._loop is not None and self._loop.is_closed():
            self._forget()  # opened under an asyncio.run that has ended
        if self._ready is not None:
            await asyncio.shield(self._ready)
            return
        loop = self._loop = asyncio.get_running_loop()
        self._ready = ready = loop.create_future()
        try:
            kc = self.kernel_client
            if not kc.channels_running:
                kc.start_channels()
            await kc.wait_for_ready(timeout=self.ready_timeout)
            self._sockets = self._connect_own()
            self._pumps = [
                asyncio.create_task(self._pump_iopub()),
                asyncio.create_task(self._pump_shell()),
            ]
            if "control" in self._sockets:
                self._pumps.append(asyncio.create_task(self._drain(self._sockets["control"])))
            # The kernel's language, for callers that write programs for it (its reply
            # comes to the shell reader; runs do not wait for it).
            self._info_id = self._send_shell("kernel_info_request", {})
            if self._announce:
                self._open_id = self._send_shell(
                    "comm_open",
                    {
                        "comm_id": self.comm_id,
                        "target_name": BINDINGS_TARGET,
                        "data": open_data(self._registry.specs()),
                    },
                )
                await _ready_while_alive(ready, kc, self.ready_timeout)
            elif not ready.done():
                ready.set_result({})
        except BaseException as exc:
            for task in self._pumps:
                task.cancel()
            self._pumps = []
            self._close_own()
            if not ready.done():
                ready.set_exception(
                    exc if isinstance(exc, Exception) else RuntimeError("opening was cancelled")
                )
                ready.exception()  # retrieved: a later open() re-raises it
            raise

    async def aclose(self) -> None:
        """Close: live runs are interrupted and awaited, the comm is closed, readers stop."""
        self._closed = True
        closing = self._closing
        if closing is not None and closing.get_loop() is asyncio.get_running_loop():
            await asyncio.shield(closing)  # close() started it on this loop
        await self._detach()

    async def _detach(self) -> None:
        """Let go of the kernel: live runs are interrupted and awaited, the comm is
        closed, the readers stop. The gateway can open again (unless closed)."""
        ready = self._ready
        if ready is None:  # not open, or another _detach is under way
            return
        self._ready = None
        if self._runs:
            self._interrupt()
            waits = [asyncio.create_task(run.done.wait()) for run in self._runs.values()]
            await asyncio.wait(waits, timeout=_CLOSE_GRACE)
            for w in waits:
                w.cancel()
        if self._announce and ready.done():
            with contextlib.suppress(Exception):
                self._send_shell("comm_close", {"comm_id": self.comm_id, "data": {}})
        tasks = [*self._answers.values(), *self._pumps]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        self._pumps = []
        self._close_own()
        self._loop = None
        # A new comm when it opens again: the kernel has closed this one.
        self.comm_id = uuid.uuid4().hex
        self._open_id = ""

    def close(self) -> None:
        """Close from synchronous code. Open on a loop that still runs, the gateway is
        closed on that loop (in a task; ``aclose()`` there waits for it); else at once."""
        self._closed = True
        loop = self._loop
        if loop is None:
            return
        if loop.is_running():
            try:
                running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
            except RuntimeError:
                running = None
            if running is loop:
                self._closing = loop.create_task(self._detach())
            else:
                asyncio.run_coroutine_threadsafe(self._detach(), loop)
            return
        self._forget()

    def _forget(self) -> None:
        """Drop what the gateway held on a loop that no longer runs (its readers went with
        it): the next open() starts afresh."""
        self._pumps = []
        self._answers.clear()
        self._close_own()
        self._ready = None
        self._loop = None

    def run_sync(self, program: str, *, limits: Limits | None = None) -> RunResult:
        """:meth:`run` for synchronous callers (not from inside a running event loop):
        the gateway opens, runs ``program`` and lets go of the kernel again, each time
        (a new loop each call; the bindings are announced each time)."""
        check_run_sync("RemoteGateway", self._closed, self._loop)
        return asyncio.run(self._run_once(program, limits))

    async def _run_once(self, program: str, limits: Limits | None) -> RunResult:
        try:
            return await self.run(program, limits=limits)
        finally:
            await self._detach()

    @overload
    def describe(self, format: Literal["text"] = "text") -> str: ...
    @overload
    def describe(self, format: Literal["json"]) -> list[dict[str, Any]]: ...
    @overload
    def describe(self, format: Literal["typescript"]) -> str: ...
    def describe(self, format: str = "text") -> str | list[dict[str, Any]]:
        """The bindings programs run here can call: this gateway's own, and the kernel's
        as the kernel reported them when this gateway announced its own (its namespaces
        replace the kernel's of the same names). As a stub in the kernel's language
        (``"text"``: TypeScript declarations for a TypeScript or JavaScript kernel), per
        binding JSON (``"json"``; the kernel's bindings have their signature's parameters
        only), or TypeScript declarations (``"typescript"``).
        """
        return describe_remote(self._registry, self.kernel_bindings, format, self._language)

    async def __aenter__(self) -> RemoteGateway:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # -- running -----------------------------------------------------------------------------

    async def run(
        self,
        program: str,
        *,
        limits: Limits | None = None,
        on_output: OutputListener | None = None,
        on_call: CallListener | None = None,
    ) -> RunResult:
        """Run ``program`` as one cell and return what it printed, returned and called.

        ``limits`` lowers the kernel's limits for this run (each field: the smaller of the
        two). Cancelling the awaiting task interrupts the kernel's running cell, then raises
        ``CancelledError``.
        """
        if self._tracing is None:
            return await self._run(program, limits, on_output, on_call, None)
        trace = self._tracing.start(self._language, self._registry)
        return await trace.run(lambda: self._run(program, limits, on_output, on_call, trace))

    async def _run(
        self,
        program: str,
        limits: Limits | None,
        on_output: OutputListener | None,
        on_call: CallListener | None,
        trace: RunTrace | None,
    ) -> RunResult:
        if not isinstance(program, str):
            raise TypeError(f"program must be str (Python source), got {type(program).__name__}")
        if limits is not None and not isinstance(limits, Limits):
            raise TypeError(f"limits must be a kernelgate.Limits, got {type(limits).__name__}")
        await self.open()
        content = execute_request_content(program)
        content["stop_on_error"] = False  # runs are independent, as Gateway.run's are
        ours = {"limits": limits.to_dict()} if limits is not None else {}
        kc = self.kernel_client
        msg = self._message("execute_request", content, ours)
        run = RemoteRun(program, on_output, on_call)
        run.trace = trace
        msg_id = msg["header"]["msg_id"]
        self._runs[msg_id] = run
        failure: ErrorInfo | None = None
        given = _budget(limits.to_dict()) if limits is not None else None
        budget = given if given is not None else self._kernel_budget
        try:
            self._send("shell", msg)
            while not run.done.is_set():
                try:
                    await asyncio.wait_for(run.done.wait(), _ALIVE_CHECK_SECONDS)
                except asyncio.TimeoutError:
                    late = _overdue(run, budget, self.reply_grace_seconds)
                    if late is not None:
                        # The kernel ends every run within its budget: a reply this late was
                        # lost (a kernel frozen, a connection that dropped what it carried).
                        self._interrupt()
                        failure = ErrorInfo("WorkerExit", late)
                        break
                    if not await _kernel_alive(kc):
                        # A client that knows why says so (a gateway's websocket client).
                        why = getattr(kc, "death_reason", None) or "the kernel died"
                        failure = ErrorInfo("WorkerExit", f"{why} before the run finished")
                        break
        except asyncio.CancelledError:
            if run.started and not run.done.is_set():
                self._interrupt()
            raise
        finally:
            self._runs.pop(msg_id, None)
        return run.result(failure)

    def interrupt(self) -> int:
        """Interrupt the kernel's running cell (``interrupt_request`` on control).

        Returns how many of this gateway's runs were live.
        """
        if self._runs:
            self._interrupt()
        return len(self._runs)

    def _interrupt(self) -> None:
        # With the owner secret the kernel stops the running cell only if it is ours.
        self._send("control", self._message("interrupt_request", {}))

    # -- the client's channels -----------------------------------------------------------------

    def _message(
        self, msg_type: str, content: dict[str, Any], ours: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """A request carrying this gateway's owner secret, with an id nobody can guess
        (jupyter_client numbers ids after the session id, which iopub shows everyone: a
        client that guessed the next one could make the kernel publish messages that seem
        to belong to this gateway's request)."""
        metadata = {"kernelgate": {**(ours or {}), OWNER_FIELD: self._owner}}
        msg: dict[str, Any] = self.kernel_client.session.msg(msg_type, content, metadata=metadata)
        msg["header"]["msg_id"] = msg["msg_id"] = secrets.token_hex(16)
        return msg

    def _connect_own(self) -> dict[str, zmq.asyncio.Socket]:
        """Shell and control connections of this gateway's own, under random routing
        identities. jupyter_client connects its channels under the session id, which iopub
        shows everyone, and a kernel lets a new connection take an identity over (ipykernel
        and kernelgate do, for reconnects): any client could take this gateway's requests
        and replies by connecting under it. Only for a ZMQ client; another (a kernel
        gateway's websocket client) keeps its own channels."""
        kc = self.kernel_client
        port = getattr(kc, "shell_port", 0)
        if not isinstance(port, int) or port <= 0 or not hasattr(kc, "connect_control"):
            return {}
        sockets: dict[str, zmq.asyncio.Socket] = {}
        try:
            for channel in ("shell", "control"):
                connect = getattr(kc, f"connect_{channel}")
                sock = connect(identity=secrets.token_hex(16).encode())
                if not isinstance(sock, zmq.asyncio.Socket):
                    sock = zmq.asyncio.Socket.shadow(sock.underlying)
                sockets[channel] = sock
        except (zmq.ZMQError, TypeError, ValueError) as exc:
            log.warning("using the client's own channels: %s", exc)
            for sock in sockets.values():
                sock.close(linger=0)
            return {}
        return sockets

    def _close_own(self) -> None:
        for sock in self._sockets.values():
            sock.close(linger=0)
        self._sockets = {}

    def _send(self, channel: str, msg: dict[str, Any]) -> None:
        sock = self._sockets.get(channel)
        kc = self.kernel_client
        if sock is not None:
            kc.session.send(sock, msg)
        else:
            getattr(kc, f"{channel}_channel").send(msg)

    def _send_shell(self, msg_type: str, content: dict[str, Any]) -> str:
        msg = self._message(msg_type, content)
        self._send("shell", msg)
        return str(msg["header"]["msg_id"])

    async def _receive(self, sock: zmq.asyncio.Socket) -> dict[str, Any] | None:
        """The next valid message on one of this gateway's own sockets (``None``: dropped)."""
        frames = await sock.recv_multipart()
        session = self.kernel_client.session
        try:
            _idents, rest = session.feed_identities(frames)
            msg: dict[str, Any] = session.deserialize(rest)
        except Exception as exc:  # unsigned, replayed or malformed: not the kernel's
            log.warning("dropped an invalid message: %s", exc)
            return None
        return msg

    async def _drain(self, sock: zmq.asyncio.Socket) -> None:
        """Read (and drop) the replies of a socket whose replies nobody waits for."""
        while True:
            await self._receive(sock)

    async def _pump_iopub(self) -> None:
        kc = self.kernel_client
        while True:
            msg = await kc.get_iopub_msg()
            try:
                self._on_iopub(msg)
            except Exception:
                log.exception("error handling a %s message", msg.get("msg_type"))

    async def _pump_shell(self) -> None:
        kc = self.kernel_client
        own = self._sockets.get("shell")
        while True:
            msg = await (kc.get_shell_msg() if own is None else self._receive(own))
            if msg is None:
                continue
            parent = (msg.get("parent_header") or {}).get("msg_id", "")
            run = self._runs.get(parent)
            if run is not None and msg.get("msg_type") == "execute_reply":
                run.on_reply(msg)
            elif parent and parent == self._info_id and msg.get("msg_type") == "kernel_info_reply":
                info = (msg.get("content") or {}).get("language_info")
                name = info.get("name") if isinstance(info, dict) else None
                self._language = name if name in LANGUAGES else DEFAULT_LANGUAGE

    def _on_iopub(self, msg: dict[str, Any]) -> None:
        kind = msg.get("msg_type")
        content = msg.get("content") or {}
        parent = str((msg.get("parent_header") or {}).get("msg_id", ""))
        if kind in ("comm_msg", "comm_close") and content.get("comm_id") == self.comm_id:
            data = content.get("data")
            self._on_comm(kind, data if isinstance(data, dict) else {}, parent)
            return
        run = self._runs.get(parent)
        if run is not None:
            run.on_iopub(msg)

    def _on_comm(self, kind: str, data: dict[str, Any], parent: str) -> None:
        """A message on the bindings comm. The kernel answers the comm_open with the
        comm_open as parent, and sends each call with its run's request as parent: anything
        else (another request's, a run that is over) is not for this gateway."""
        ready = self._ready
        if kind == "comm_close" or data.get("method") == "ready":
            # Only the kernel's one answer to the comm_open (ready, or a refusal) counts.
            if ready is None or ready.done() or not self._open_id or parent != self._open_id:
                # debug: a flood of these must not flood the host's log
                log.debug("ignored a %s that does not answer this gateway's comm_open", kind)
                return
        if kind == "comm_close":
            reason = data.get("error") or (
                f"it closed the {BINDINGS_TARGET} comm (is it a kernelgate kernel?)"
            )
            error = RuntimeError(f"the kernel refused the bindings: {reason}")
            if ready is not None and not ready.done():
                ready.set_exception(error)
                ready.exception()
            for task in self._answers.values():
                task.cancel()
            return
        method = data.get("method")
        if method == "ready":
            self.kernel_bindings = dict(data.get("namespaces") or {})
            self._kernel_budget = _budget(data.get("limits"))
            if ready is not None and not ready.done():
                ready.set_result(data)
        elif method == "call":
            run = self._runs.get(parent)
            call_id = data.get("call_id")
            if run is None or run.idle or not isinstance(call_id, str) or not call_id:
                log.debug("ignored a binding call that is not one of this gateway's runs'")
                return
            if call_id in run.call_ids or call_id in self._answers:
                log.debug("ignored call %r: it was asked before", call_id[:40])
                return
            run.call_ids.add(call_id)
            answer: Coroutine[Any, Any, Any] = self._answer(call_id, data)
            if run.trace is not None:
                names = str(data.get("namespace")), str(data.get("name"))
                answer = run.trace.answer(call_id, *names, answer)
            task = asyncio.create_task(answer)
            self._answers[call_id] = task
            task.add_done_callback(lambda _t: self._answers.pop(call_id, None))
        elif method == "cancel" and parent in self._runs:
            answering = self._answers.get(str(data.get("call_id")))
            if answering is not None:
                answering.cancel()

    async def _answer(self, call_id: str, data: dict[str, Any]) -> dict[str, Any] | None:
        """Answer a kernel's call of a binding of this client's: the reply sent (None:
        the kernel no longer waits for it)."""
        namespace = str(data.get("namespace"))
        name = str(data.get("name"))
        binding = self._registry.lookup(namespace, name)
        args = data.get("args", [])
        kwargs = data.get("kwargs", {})
        try:
            if binding is None:
                raise LookupError(f"there is no binding {namespace}.{name} on the client")
            if not isinstance(args, list) or not isinstance(kwargs, dict):
                raise TypeError("a call needs a list of args and a dict of kwargs")
            # The arguments are checked here as Gateway checks a child's: JSON (no NaN or
            # infinities, which Python's json reads), then the binding's signature.
            try:
                check_json(args, f"{binding.label}() arguments")
                check_json(kwargs, f"{binding.label}() keyword arguments")
            except NotJSONError as exc:
                raise TypeError(f"the call's arguments are not JSON: {exc}") from None
            args, kwargs = binding.load_arguments(args, kwargs)
            value = binding.fn(*args, **kwargs)
            if inspect.isawaitable(value):
                value = await value
            value = binding.dump_result(value)
            try:
                check_json(value, f"{binding.label}() result")
            except NotJSONError as exc:
                raise TypeError(f"the binding returned a value that is not JSON: {exc}") from None
        except asyncio.CancelledError:
            return None  # the kernel no longer waits for this answer
        except Exception as exc:
            reply = call_reply_data(call_id, False, ename=type(exc).__name__, evalue=str(exc))
        else:
            reply = call_reply_data(call_id, True, value)
        if not self._closed:
            self._send_shell("comm_msg", {"comm_id": self.comm_id, "data": reply})
        return reply

    def __repr__(self) -> str:
        names = {ns: sorted(t) for ns, t in self._registry.namespaces.items()}
        state = "closed" if self._closed else "open"
        return f"<RemoteGateway {state} comm={self.comm_id} namespaces={names}>"


if TYPE_CHECKING:
    from kernelgate.gateway.api import CodeGateway

    def _is_a_code_gateway(gateway: RemoteGateway) -> CodeGateway:
        return gateway  # mypy checks that a RemoteGateway is a CodeGateway


def _budget(limits: Any) -> float | None:
    """A run's time budget (wall time plus kill grace) from limits as JSON; None when they
    do not say (an older kernel, or values that are not numbers)."""
    if not isinstance(limits, dict):
        return None
    wall, grace = limits.get("wall_seconds"), limits.get("kill_grace_seconds", 0)
    numbers = [
        float(v) for v in (wall, grace) if isinstance(v, (int, float)) and not isinstance(v, bool)
    ]
    if len(numbers) != 2 or not all(0 <= v < 1e9 for v in numbers):
        return None
    return numbers[0] + numbers[1]


def _overdue(run: RemoteRun, budget: float | None, grace: float) -> str | None:
    """Why ``run`` is given up, once it has waited ``budget`` + ``grace`` seconds since the
    kernel started it; None while it may still come."""
    if budget is None or run.started_mono is None:
        return None
    waited = time.monotonic() - run.started_mono
    if waited <= budget + grace:
        return None
    return (
        f"no reply {waited:.0f} s after the kernel started the run, past its wall time and "
        f"kill grace ({budget:g} s) and {grace:g} s more: the kernel or the connection lost "
        "it (the kernel was interrupted; run again)"
    )


async def _ready_while_alive(ready: asyncio.Future[Any], kc: Any, timeout: float) -> None:
    """Wait up to ``timeout`` for the kernel's answer to the bindings' ``comm_open``,
    checking every second that the kernel lives (a kernel that died or froze between its
    ``kernel_info_reply`` and that answer must not hold ``open()`` for the whole timeout)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        step = min(_ALIVE_CHECK_SECONDS, deadline - loop.time())
        try:
            await asyncio.wait_for(asyncio.shield(ready), max(step, 0.0))
            return
        except asyncio.TimeoutError:
            if loop.time() >= deadline:
                raise
            if not await _kernel_alive(kc):
                why = getattr(kc, "death_reason", None) or "the kernel died"
                raise RuntimeError(
                    f"RemoteGateway could not open: {why} before it answered the bindings' "
                    "comm_open (start the kernel again, or use another)"
                ) from None


async def _kernel_alive(kc: Any) -> bool:
    """Whether the client's kernel is alive; True when the client cannot tell. A Kernel
    Gateway's client (jupyter_server's ``GatewayKernelClient``) asks its manager, which
    has no local process and fails an assertion: a run longer than the alive check's
    period then broke off with that AssertionError instead of waiting for its reply."""
    try:
        return bool(await kc.is_alive())
    except Exception:
        return True
