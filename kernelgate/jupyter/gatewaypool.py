"""The kernels of a :class:`~.gatewayruntime.GatewayRuntime`: one :class:`PoolKernel` each.

A pool kernel is a kernelgate kernel started at a gateway (``POST /api/kernels``), its
websocket (:class:`~.wsclient.WebSocketKernelClient`) and the :class:`~.remote.RemoteGateway`
that runs programs in it and answers its binding calls here. It is started, detached (the
websocket closed, the kernel kept: ``run_sync`` does it after each run) and shut down
(``DELETE``) as one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, cast

from .gatewayrest import GatewayEndpoint, GatewayError, GatewayTimeout
from .remote import RemoteGateway
from .wsclient import WebSocketKernelClient

if TYPE_CHECKING:
    from jupyter_client.asynchronous.client import AsyncKernelClient

__all__ = ["PoolKernel"]

log = logging.getLogger("kernelgate.gatewaypool")

#: How long letting go of a kernel's RemoteGateway may take before it is dropped: past its
#: own wait for live runs (10 s), so that it ends them and stops its readers itself.
_DETACH_SECONDS = 15.0


class PoolKernel:
    """One kernel of the pool, at one gateway."""

    def __init__(
        self,
        endpoint: GatewayEndpoint,
        kernel_name: str,
        namespaces: Mapping[str, Mapping[str, Callable[..., Any]]],
        *,
        ready_timeout: float,
        reconnect_timeout: float,
        kernel_env: Mapping[str, str] | None = None,
        heartbeat_seconds: float | None = 5.0,
        heartbeat_timeout: float = 10.0,
        reply_grace_seconds: float = 30.0,
        on_death: Callable[[PoolKernel], None] | None = None,
    ) -> None:
        self.endpoint = endpoint
        self.kernel_name = kernel_name
        self.namespaces = namespaces
        self.ready_timeout = ready_timeout
        self.reconnect_timeout = reconnect_timeout
        self.kernel_env = kernel_env
        self.heartbeat_seconds = heartbeat_seconds
        self.heartbeat_timeout = heartbeat_timeout
        self.reply_grace_seconds = reply_grace_seconds
        #: Called when the kernel is found dead (or frozen) while connected.
        self.on_death = on_death
        self.kernel_id: str | None = None
        self.client: WebSocketKernelClient | None = None
        self.gateway: RemoteGateway | None = None
        #: How many runs this kernel has served (since it was started).
        self.runs = 0

    @property
    def usable(self) -> bool:
        """Started, connected on a live loop and not dead."""
        client, gateway = self.client, self.gateway
        return (
            self.kernel_id is not None
            and client is not None
            and gateway is not None
            and client.death_reason is None
        )

    @property
    def death_reason(self) -> str | None:
        return None if self.client is None else self.client.death_reason

    async def start(self) -> None:
        """Start a kernel at the gateway (unless there is one) and connect to it."""
        if self.kernel_id is not None:
            try:
                await self.attach()
                return
            except (GatewayError, TimeoutError) as exc:  # it died while nobody was attached
                log.warning("starting a new kernel for %s: %s", self.kernel_id, exc)
                await self._shut_down_failed()
        self.kernel_id = await self.endpoint.start_kernel(self.kernel_name, self.kernel_env)
        self.runs = 0
        await self.attach()

    async def attach(self) -> None:
        """Open the websocket and announce the bindings (the kernel being started)."""
        assert self.kernel_id is not None
        client = WebSocketKernelClient(
            self.endpoint,
            self.kernel_id,
            connect_timeout=self.ready_timeout,
            reconnect_timeout=self.reconnect_timeout,
            heartbeat_seconds=self.heartbeat_seconds,
            heartbeat_timeout=self.heartbeat_timeout,
            on_death=self._died,
        )
        # RemoteGateway uses only what WebSocketKernelClient has of a kernel client.
        kc = cast("AsyncKernelClient", client)
        gateway = RemoteGateway(
            kc,
            namespaces=self.namespaces,
            ready_timeout=self.ready_timeout,
            reply_grace_seconds=self.reply_grace_seconds,
        )
        try:
            await client.connect()
            await gateway.open()
        except BaseException:
            await _quietly(gateway.aclose())
            await _quietly(client.aclose())
            raise
        self.client, self.gateway = client, gateway

    def _died(self, _reason: str) -> None:
        if self.on_death is not None:
            self.on_death(self)

    async def detach(self) -> None:
        """Let go of the websocket; the kernel stays at the gateway for the next attach."""
        gateway, client = self.gateway, self.client
        self.gateway = self.client = None
        if gateway is not None:
            await _quietly(asyncio.wait_for(gateway.aclose(), _DETACH_SECONDS))
        if client is not None:
            await _quietly(client.aclose())

    async def shutdown(self) -> None:
        """Detach and shut the kernel down at the gateway (``DELETE``)."""
        await self.detach()
        kernel_id, self.kernel_id = self.kernel_id, None
        if kernel_id is not None:
            await self.endpoint.shutdown_kernel(kernel_id)

    async def replace(self) -> None:
        """Shut this kernel down (as far as the gateway answers) and start a fresh one."""
        await self._shut_down_failed()
        await self.start()

    async def _shut_down_failed(self) -> None:
        """Shut a failed kernel down as far as the gateway answers. One that did not answer
        the ``DELETE`` at all raises (:class:`GatewayTimeout`): a start sent there would
        wait as long, and a kernel it started late would be left behind, unknown."""
        try:
            await self.shutdown()
        except GatewayTimeout:
            raise
        except GatewayError as exc:
            log.warning("could not shut down a failed kernel: %s", exc)

    def __repr__(self) -> str:
        state = "usable" if self.usable else (self.death_reason or "not connected")
        return f"<PoolKernel {self.kernel_id} at {self.endpoint.url}: {state}>"


async def _quietly(awaitable: Any) -> None:
    """Await a clean-up step whose failure must not hide the error being raised."""
    with contextlib.suppress(Exception):
        await awaitable
