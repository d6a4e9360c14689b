"""``GatewayRuntime``: run programs in kernelgate kernels behind a Jupyter Kernel Gateway.

>>> async def main():                                                     # doctest: +SKIP
...     async with GatewayRuntime("http://gw:8888", bindings={"search": search},
...                               auth_token=token, pool_size=4) as gw:
...         results = await asyncio.gather(*(gw.run(p) for p in programs))

The gateway (Kernel Gateway, or Enterprise Gateway with kernels on a cluster) starts
``pool_size`` kernelgate kernels (``POST /api/kernels``; several URLs: spread round-robin
over them); runs go to whichever is free, one run per kernel at a time, each a fresh
process inside its kernel. The bindings are answered here, in the caller's process, over
each kernel's ``kernelgate.bindings`` comm (:class:`~.remote.RemoteGateway`): they never
need to be installed where the kernels run.

A kernel that dies mid-run gives that run a ``worker_exit`` result (never a hang) and is
replaced; so does one that is there but no longer answers (frozen: found by a heartbeat,
within ``heartbeat_seconds`` + ``heartbeat_timeout``), and one found dead or frozen while
idle is replaced before a run takes it; a dropped websocket is reopened (the gateway
replays what it buffered); a gateway that cannot be reached raises
:class:`~.gatewayrest.GatewayError`, saying which and why. ``aclose()`` shuts every kernel
down (``DELETE``, waited for ``shutdown_timeout`` at most).
"""

# long: one class owns the pool's whole life (open, choose a kernel, replace, close, the
# sync doors onto it): split, each part would reach into the others' state.

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, overload

from kernelgate.gateway.bindings import BindingRegistry
from kernelgate.gateway.run import CallListener, OutputListener
from kernelgate.model.language import DEFAULT_LANGUAGE
from kernelgate.model.limits import Limits
from kernelgate.model.result import ErrorInfo, RunResult

from .gatewaypool import PoolKernel
from .gatewayrest import GatewayEndpoint, GatewayError
from .remotedescribe import describe_remote
from .remoterun import RemoteRun, check_run_sync

__all__ = ["GatewayError", "GatewayRuntime"]

log = logging.getLogger("kernelgate.gatewayruntime")


class GatewayRuntime:
    """Programs run in a pool of kernelgate kernels at one or more Jupyter kernel gateways.

    ``url``: a gateway's base URL (``http://host:port``), or a list of them to spread the
    pool over. ``kernel_name``: the kernelgate kernelspec's name there. ``bindings``
    (namespace ``namespace``) or ``namespaces``: functions of this process the programs call
    (answered here; they replace the kernel's own namespaces of the same names).
    ``auth_token``: sent as ``Authorization: token ...``. ``pool_size``: kernels kept ready
    (at least 1), so at most that many runs at once; more wait for a free kernel.
    ``kernel_env``: sent with each kernel's start (``POST /api/kernels``'s ``env``; Enterprise
    Gateway wants ``KERNEL_USERNAME`` there). ``reconnect_timeout``: how long a dropped
    websocket is retried before the kernel counts as lost. ``heartbeat_seconds``: how long a
    kernel may say nothing before it is asked whether it is there (a ``kernel_info_request``
    on control; None: never), and ``heartbeat_timeout``: how long it then has to answer
    before it counts as frozen (its run ends ``worker_exit``, it is replaced).
    ``reply_grace_seconds``: how long past a run's budget (wall time and kill grace) its
    reply may come before the run is given up (``worker_exit``) and its kernel replaced.
    ``shutdown_timeout``: how long a ``DELETE`` is waited for.

    A :class:`kernelgate.CodeGateway`, as :class:`kernelgate.Gateway` is.
    """

    def __init__(
        self,
        url: str | Sequence[str],
        kernel_name: str = "kernelgate",
        bindings: Mapping[str, Callable[..., Any]] | None = None,
        *,
        namespace: str = "tools",
        namespaces: Mapping[str, Mapping[str, Callable[..., Any]]] | None = None,
        auth_token: str | None = None,
        pool_size: int = 1,
        ready_timeout: float = 60.0,
        reconnect_timeout: float = 10.0,
        kernel_env: Mapping[str, str] | None = None,
        heartbeat_seconds: float | None = 5.0,
        heartbeat_timeout: float = 10.0,
        reply_grace_seconds: float = 30.0,
        shutdown_timeout: float = 20.0,
    ) -> None:
        urls = [url] if isinstance(url, str) else list(url)
        if not urls or not all(isinstance(u, str) for u in urls):
            raise ValueError(f"url must be a gateway URL or a list of them, got {url!r}")
        if not isinstance(pool_size, int) or isinstance(pool_size, bool) or pool_size < 1:
            raise ValueError(f"pool_size must be an int >= 1, got {pool_size!r}")
        if not isinstance(kernel_name, str) or not kernel_name:
            raise ValueError(f"kernel_name must be a kernelspec's name, got {kernel_name!r}")
        for name, value in (
            ("heartbeat_seconds", 1.0 if heartbeat_seconds is None else heartbeat_seconds),
            ("heartbeat_timeout", heartbeat_timeout),
            ("reply_grace_seconds", reply_grace_seconds),
            ("shutdown_timeout", shutdown_timeout),
        ):
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(f"{name} must be a number of seconds > 0, got {value!r}")
            if not 0 < value < 1e9:
                raise ValueError(f"{name} must be a number of seconds > 0, got {value!r}")
        self._registry = BindingRegistry.from_arguments(bindings, namespace, namespaces)
        tables = namespaces if namespaces is not None else {namespace: bindings or {}}
        self.endpoints = [
            GatewayEndpoint(u, auth_token, shutdown_timeout=shutdown_timeout) for u in urls
        ]
        self.kernel_name = kernel_name
        self.pool_size = pool_size
        self.kernels = [
            PoolKernel(
                self.endpoints[i % len(self.endpoints)],
                kernel_name,
                tables,
                ready_timeout=ready_timeout,
                reconnect_timeout=reconnect_timeout,
                kernel_env=kernel_env,
                heartbeat_seconds=heartbeat_seconds,
                heartbeat_timeout=heartbeat_timeout,
                reply_grace_seconds=reply_grace_seconds,
                on_death=self._on_death,
            )
            for i in range(pool_size)
        ]
        self._free: asyncio.Queue[PoolKernel] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._opening: asyncio.Task[None] | None = None
        self._busy: set[PoolKernel] = set()
        #: Replacements of failed kernels under way (awaited on close: a kernel being
        #: started must get its id before it can be shut down).
        self._refills: set[asyncio.Task[None]] = set()
        self._closed = False
        self._closing: asyncio.Future[None] | None = None
        #: How many kernels were replaced after failing.
        self.replaced = 0

    @property
    def registry(self) -> BindingRegistry:
        return self._registry

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def language(self) -> str:
        for kernel in self.kernels:
            if kernel.gateway is not None:
                return kernel.gateway.language
        return DEFAULT_LANGUAGE

    @property
    def kernel_ids(self) -> list[str]:
        """The ids of the pool's kernels at their gateways (for logs and checks)."""
        return [k.kernel_id for k in self.kernels if k.kernel_id is not None]

    # -- opening and closing ---------------------------------------------------------------

    async def open(self) -> None:
        """Start (or reconnect to) the pool's kernels; ``run()`` does it if needed."""
        if self._closed:
            raise RuntimeError("this GatewayRuntime is closed; create a new one")
        loop = asyncio.get_running_loop()
        if self._loop is not None and self._loop is not loop:
            if not self._loop.is_closed():
                raise RuntimeError(
                    "this GatewayRuntime is open on another event loop; use it there"
                )
            self._forget()  # opened under an asyncio.run that has ended
        if self._opening is None:
            self._loop = loop
            self._opening = loop.create_task(self._open())
        try:
            await asyncio.shield(self._opening)
        except BaseException:
            if self._opening.done():
                self._opening = None
                self._loop = None
            raise

    async def _open(self) -> None:
        started = await asyncio.gather(*(k.start() for k in self.kernels), return_exceptions=True)
        errors = [e for e in started if isinstance(e, BaseException)]
        if errors:
            # None half-open: the kernels that did start are shut down again.
            await asyncio.gather(*(k.shutdown() for k in self.kernels), return_exceptions=True)
            raise errors[0]
        self._free = asyncio.Queue()
        for kernel in self.kernels:
            self._free.put_nowait(kernel)

    def _forget(self) -> None:
        """Drop what belonged to a loop that has ended (the kernels stay at the gateway)."""
        for kernel in self.kernels:
            kernel.gateway = kernel.client = None
        self._free = None
        self._opening = None
        self._loop = None
        self._busy.clear()

    async def aclose(self) -> None:
        """Stop live runs and shut every kernel down at its gateway (``DELETE``)."""
        self._closed = True
        if self._closing is None:
            self._closing = asyncio.ensure_future(self._shutdown_all())
        await asyncio.shield(self._closing)

    async def _shutdown_all(self) -> None:
        # Not cancelled: a kernel being started (POST sent) must get its id to be shut down.
        starting = [t for t in (self._opening, *self._refills) if t is not None]
        self.interrupt()
        if starting:
            await asyncio.gather(*starting, return_exceptions=True)
        results = await asyncio.gather(
            *(k.shutdown() for k in self.kernels), return_exceptions=True
        )
        self._free = None
        self._opening = None
        self._loop = None
        for kernel, result in zip(self.kernels, results, strict=True):
            if isinstance(result, BaseException):
                log.warning("could not shut down %r: %s", kernel, result)

    def close(self) -> None:
        """Close from synchronous code (on the runtime's loop if it still runs, else here)."""
        loop = self._loop
        if loop is not None and loop.is_running():
            self._closed = True
            try:
                running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
            except RuntimeError:
                running = None
            if running is loop:
                self._closing = loop.create_task(self._shutdown_all())
            else:
                asyncio.run_coroutine_threadsafe(self.aclose(), loop).result()
            return
        if self._closed and self._closing is not None:
            return
        self._forget()
        _run_elsewhere(self.aclose())

    async def __aenter__(self) -> GatewayRuntime:
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
        """Run ``program`` in a free kernel of the pool (waiting for one), as
        :meth:`kernelgate.Gateway.run` does; a kernel that dies gives ``worker_exit``."""
        if not isinstance(program, str):
            raise TypeError(f"program must be str (Python source), got {type(program).__name__}")
        if limits is not None and not isinstance(limits, Limits):
            raise TypeError(f"limits must be a kernelgate.Limits, got {type(limits).__name__}")
        await self.open()
        free = self._free
        assert free is not None
        kernel = await free.get()
        self._busy.add(kernel)
        requeue = True
        try:
            if not kernel.usable:
                await self._replace(kernel)
            gateway = kernel.gateway
            assert gateway is not None
            try:
                result = await gateway.run(
                    program, limits=limits, on_output=on_output, on_call=on_call
                )
            except GatewayError as exc:  # the kernel's websocket died as the run was sent
                result = RemoteRun(program, on_output, on_call).result(
                    ErrorInfo("WorkerExit", str(exc))
                )
            kernel.runs += 1
            client = kernel.client
            if client is not None and client.awaiting_reply and kernel.usable:
                # The run was given up without its reply (past its budget): the kernel
                # answers, but not for its runs. It is not trusted with another one.
                client.give_up(f"kernel {kernel.kernel_id} lost a run's reply: {result.message}")
            if not kernel.usable and not self._closed:  # closing shuts it down: no refill
                # Replaced in the background: the result goes back now, the kernel to the
                # free ones once a fresh one is ready.
                refill = asyncio.create_task(self._refill(kernel, free))
                self._refills.add(refill)
                refill.add_done_callback(self._refills.discard)
                requeue = False
            return result
        finally:
            self._busy.discard(kernel)
            if requeue and self._free is free:
                free.put_nowait(kernel)

    def _on_death(self, kernel: PoolKernel) -> None:
        """A kernel found dead or frozen: one idle in the pool is taken out and replaced at
        once, so no run takes it (a busy one is replaced when its run has ended)."""
        free = self._free
        if self._closed or free is None or kernel in self._busy:
            return
        idle: list[PoolKernel] = []
        while not free.empty():  # no run waits on a queue that has kernels in it
            idle.append(free.get_nowait())
        for other in idle:
            if other is not kernel:
                free.put_nowait(other)
        if kernel not in idle:
            return  # being replaced already (a refill, or a run's own replace)
        refill = asyncio.get_running_loop().create_task(self._refill(kernel, free))
        self._refills.add(refill)
        refill.add_done_callback(self._refills.discard)

    async def _refill(self, kernel: PoolKernel, free: asyncio.Queue[PoolKernel]) -> None:
        try:
            await self._replace(kernel)
        except (GatewayError, OSError, TimeoutError) as exc:
            log.warning("could not replace a failed kernel (the next run tries again): %s", exc)
        finally:
            if self._free is free:
                free.put_nowait(kernel)

    async def _replace(self, kernel: PoolKernel) -> None:
        why = kernel.death_reason or "it was not connected"
        if kernel.kernel_id is not None:
            log.warning("replacing kernel %s: %s", kernel.kernel_id, why)
            self.replaced += 1
        await kernel.replace()

    def run_sync(self, program: str, *, limits: Limits | None = None) -> RunResult:
        """:meth:`run` for synchronous callers (not inside a running event loop). The
        kernels stay at the gateway between calls; each call reconnects to them."""
        check_run_sync("GatewayRuntime", self._closed, self._loop)
        return asyncio.run(self._run_once(program, limits))

    async def _run_once(self, program: str, limits: Limits | None) -> RunResult:
        try:
            return await self.run(program, limits=limits)
        finally:
            await asyncio.gather(*(k.detach() for k in self.kernels))
            self._forget()

    def interrupt(self) -> int:
        """Interrupt the live runs of this runtime; how many there were."""
        count = 0
        for kernel in list(self._busy):
            gateway = kernel.gateway
            if gateway is not None:
                with contextlib.suppress(GatewayError):
                    count += gateway.interrupt()
        return count

    @overload
    def describe(self, format: Literal["text"] = "text") -> str: ...
    @overload
    def describe(self, format: Literal["json"]) -> list[dict[str, Any]]: ...
    @overload
    def describe(self, format: Literal["typescript"]) -> str: ...
    def describe(self, format: str = "text") -> str | list[dict[str, Any]]:
        """The bindings programs can call: this runtime's own and the kernels' (as a kernel
        reported them once open), as :meth:`RemoteGateway.describe` says them."""
        kernel_bindings: dict[str, dict[str, str]] = {}
        for kernel in self.kernels:
            if kernel.gateway is not None:
                kernel_bindings = kernel.gateway.kernel_bindings
                break
        return describe_remote(self._registry, kernel_bindings, format, self.language)

    def __repr__(self) -> str:
        urls = [e.url for e in self.endpoints]
        state = "closed" if self._closed else ("open" if self._free is not None else "not open")
        return f"<GatewayRuntime {state} {urls} pool_size={self.pool_size}>"


def _run_elsewhere(coro: Any) -> None:
    """Run ``coro`` to the end from synchronous code, in this thread when no loop runs
    here, else in a thread of its own (asyncio.run cannot nest)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        asyncio.run(coro)
        return
    failure: list[BaseException] = []

    def target() -> None:
        try:
            asyncio.run(coro)
        except BaseException as exc:  # raised again in the caller's thread
            failure.append(exc)

    thread = threading.Thread(target=target, name="kernelgate-gateway-close")
    thread.start()
    thread.join()
    if failure:
        raise failure[0]


if TYPE_CHECKING:
    from kernelgate.gateway.api import CodeGateway

    def _is_a_code_gateway(gateway: GatewayRuntime) -> CodeGateway:
        return gateway  # mypy checks that a GatewayRuntime is a CodeGateway
