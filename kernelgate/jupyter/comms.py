"""The ``kernelgate.bindings`` comm: bindings a client answers itself.

A client (e.g. :class:`~kernelgate.jupyter.remote.RemoteGateway`) opens a comm with
target :data:`~kernelgate.wire.messages.BINDINGS_TARGET` on the kernel's shell socket,
announcing its namespaces with the same specs ``BindingRegistry.specs()`` gives the child::

    comm_open  (client -> kernel, shell)  {"namespaces": {ns: {name: spec}}}
    comm_msg   (kernel -> client, iopub)  {"method": "ready", "namespaces": {ns: {name: sig}},
                                           "limits": {"wall_seconds", "kill_grace_seconds"}}
    comm_close (kernel -> client, iopub)  {"error": "why the announcement was refused"}

While a cell runs, each call of one of those bindings is forwarded to the client, which
answers on the shell socket (the kernel keeps reading shell while a cell runs)::

    comm_msg (kernel -> client, iopub)  {"method": "call", "call_id", "namespace", "name",
                                         "args", "kwargs"}
    comm_msg (client -> kernel, shell)  {"method": "reply", "call_id", "ok": true, "value"}
                                        {"method": "reply", "call_id", "ok": false,
                                         "ename", "evalue"}
    comm_msg (kernel -> client, iopub)  {"method": "cancel", "call_id"}  (no longer waited for)

Kernel->client comm messages carry the running cell's ``execute_request`` as parent. Every
client->kernel message on the comm (``comm_open``, a reply, ``comm_close``) carries the
client's owner secret in its metadata (:mod:`.clients`); the kernel takes a message for the
comm only with the secret it was opened with, and runs a cell with these bindings only for
an ``execute_request`` that carries it.
On the kernel side a :class:`ClientBindings` turns each announced binding into an async
placeholder callable whose ``__signature__`` is the announced one and whose body forwards
the call over the comm; a :class:`~kernelgate.Gateway` over those placeholders runs the cells
of that client, so argument checks, limits and call records are the ones every run has.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
from collections.abc import Callable, Mapping
from typing import Any

from kernelgate.model.signatures import signature_from_spec

__all__ = [
    "ClientBindings",
    "RemoteCallError",
    "remote_error",
    "signature_from_spec",
    "open_data",
    "ready_data",
    "call_request_data",
    "call_reply_data",
    "cancel_data",
]

_MAX_ENAME = 200


# -- the comm's data ---------------------------------------------------------------------------


def open_data(specs: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> dict[str, Any]:
    return {"namespaces": {ns: {n: dict(s) for n, s in t.items()} for ns, t in specs.items()}}


def ready_data(
    signatures: Mapping[str, Mapping[str, str]], limits: Mapping[str, float] | None = None
) -> dict[str, Any]:
    """``ready``: the kernel's bindings, and the time budget of its runs (``wall_seconds``,
    ``kill_grace_seconds``) that tells a client how long a reply may take."""
    data: dict[str, Any] = {
        "method": "ready",
        "namespaces": {ns: dict(t) for ns, t in signatures.items()},
    }
    if limits is not None:
        data["limits"] = dict(limits)
    return data


def call_request_data(
    call_id: str, namespace: str, name: str, args: list[Any], kwargs: dict[str, Any]
) -> dict[str, Any]:
    return {
        "method": "call",
        "call_id": call_id,
        "namespace": namespace,
        "name": name,
        "args": args,
        "kwargs": kwargs,
    }


def call_reply_data(
    call_id: str, ok: bool, value: Any = None, ename: str = "", evalue: str = ""
) -> dict[str, Any]:
    if ok:
        return {"method": "reply", "call_id": call_id, "ok": True, "value": value}
    return {"method": "reply", "call_id": call_id, "ok": False, "ename": ename, "evalue": evalue}


def cancel_data(call_id: str) -> dict[str, Any]:
    return {"method": "cancel", "call_id": call_id}


# -- errors the client reported ----------------------------------------------------------------


class RemoteCallError(Exception):
    """A client-answered binding failed; the subclass is named after the client's ``ename``."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


_ERROR_CLASSES: dict[str, type[RemoteCallError]] = {}


def remote_error(ename: str, evalue: str) -> RemoteCallError:
    """An exception whose class name is ``ename`` and whose ``str()`` is ``evalue``.

    Call records name a failure by the exception's class, so the client's own exception
    name (``KeyError``, ``ToolTimeout``...) is kept instead of a generic one.
    """
    name = (ename or "RemoteCallError")[:_MAX_ENAME]
    cls = _ERROR_CLASSES.get(name)
    if cls is None:
        cls = type(name, (RemoteCallError,), {"__module__": "builtins"})
        if len(_ERROR_CLASSES) < 1000:
            _ERROR_CLASSES[name] = cls
    return cls(evalue)


# -- the kernel side -----------------------------------------------------------------------------

SendData = Callable[[dict[str, Any]], None]


class ClientBindings:
    """The bindings one client announced on one comm, as placeholders that forward calls.

    ``send(data)`` publishes a ``comm_msg`` with ``data`` on this comm (kernel -> client);
    :meth:`on_message` takes the client's ``comm_msg`` data.
    """

    def __init__(self, comm_id: str, announced: Any, send: SendData) -> None:
        self.comm_id = comm_id
        self._send = send
        self._pending: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self._ids = itertools.count(1)
        self.closed = False
        self.close_reason = ""
        if not isinstance(announced, Mapping) or not announced:
            raise ValueError(
                "the comm_open data needs 'namespaces': {namespace: {name: spec}} with at least "
                "one namespace"
            )
        self.namespaces: dict[str, dict[str, Callable[..., Any]]] = {}
        for ns, table in announced.items():
            if not isinstance(table, Mapping):
                raise ValueError(f"namespace {ns!r}: expected {{name: spec}}, got {table!r}")
            placeholders: dict[str, Callable[..., Any]] = {}
            for name, spec in table.items():
                if not isinstance(spec, Mapping):
                    raise ValueError(f"binding {ns}.{name}: expected a spec dict, got {spec!r}")
                try:
                    signature = signature_from_spec(spec)
                except ValueError as exc:
                    raise ValueError(f"binding {ns}.{name}: {exc}") from None
                doc = spec.get("doc")
                placeholders[str(name)] = self._placeholder(
                    str(ns), str(name), signature, doc if isinstance(doc, str) else ""
                )
            self.namespaces[str(ns)] = placeholders

    def _placeholder(
        self, namespace: str, name: str, signature: inspect.Signature, doc: str
    ) -> Callable[..., Any]:
        async def binding(*args: Any, **kwargs: Any) -> Any:
            return await self.forward(namespace, name, list(args), kwargs)

        setattr(binding, "__signature__", signature)  # noqa: B010 (mypy: functions have no such slot)
        binding.__doc__ = doc or None
        binding.__name__ = binding.__qualname__ = name if name.isidentifier() else "binding"
        return binding

    async def forward(
        self, namespace: str, name: str, args: list[Any], kwargs: dict[str, Any]
    ) -> Any:
        """Send the call to the client and return its answer (or raise its error)."""
        if self.closed:
            raise ConnectionError(self.close_reason or "the client closed the bindings comm")
        call_id = str(next(self._ids))
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[call_id] = future
        try:
            self._send(call_request_data(call_id, namespace, name, args, kwargs))
            answer = await future
        except asyncio.CancelledError:
            if not self.closed:
                self._send(cancel_data(call_id))
            raise
        finally:
            self._pending.pop(call_id, None)
        if answer.get("ok"):
            return answer.get("value")
        raise remote_error(str(answer.get("ename", "")), str(answer.get("evalue", "")))

    def on_message(self, data: Any) -> None:
        """A ``comm_msg`` from the client: the answer of a call forwarded and not answered
        yet (anything else, a second answer included, is ignored). The server passes on only
        messages that carry the comm owner's secret."""
        if not isinstance(data, Mapping) or data.get("method") != "reply":
            return
        future = self._pending.get(str(data.get("call_id")))
        if future is not None and not future.done():
            future.set_result(dict(data))

    def close(self, reason: str) -> None:
        """The comm is gone: every waiting call fails with ``ConnectionError(reason)``."""
        self.closed = True
        self.close_reason = reason
        for future in self._pending.values():
            if not future.done():
                future.set_exception(ConnectionError(reason))
        self._pending.clear()

    @property
    def pending(self) -> int:
        return len(self._pending)
