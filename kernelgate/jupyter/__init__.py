"""The kernelgate Jupyter kernel, and the client side of client-answered bindings.

Every cell is one single-shot program in a fresh child, run through the same core as
:meth:`kernelgate.Gateway.run`. Modules:

- :mod:`.server` -- the kernel process: requests, lifetime (asyncio + pyzmq);
- :mod:`.channels` -- its sockets, signed with ``jupyter_client.session.Session``;
- :mod:`.execute` -- running cells: the queue, outputs, the reply and its run metadata;
- :mod:`.remote` -- :class:`~kernelgate.jupyter.remote.RemoteGateway`, a client
  whose own functions answer a kernel's binding calls over a ``kernelgate.bindings`` comm;
- :mod:`.remoterun` -- one of its runs: the messages of an ``execute_request`` gathered
  into a :class:`~kernelgate.RunResult`;
- :mod:`.comms` -- that comm's messages, and the kernel's placeholders for client bindings;
- :mod:`.clients` -- telling a kernel's clients apart: the owner secret of private runs and
  client bindings, and request ids no client may reuse;
- :mod:`.debugger` -- JupyterLab's debugger: the notebook's debug session, runs under the
  gateway's ``RunDebugger``; :mod:`.dap` -- its cell paths, line mapping and inert replies;
- :mod:`.calls` -- a binding call as a ``display_data`` output;
- :mod:`.introspect` -- ``complete``, ``inspect`` and ``is_complete``;
- :mod:`.spec` -- the kernelspec (the command is :mod:`kernelgate.cli.kernel`);
- :mod:`.gatewayruntime` -- :class:`~kernelgate.jupyter.gatewayruntime.GatewayRuntime`, a
  pool of kernelgate kernels behind Jupyter Kernel Gateways (docs/scale-out.md), over
  :mod:`.gatewaypool` (one kernel), :mod:`.wsclient` (its websocket) and
  :mod:`.gatewayrest` (the gateway's REST API).

Nothing is imported here, so ``import kernelgate.jupyter.remote`` stays light;
``kernelgate.jupyter.GatewayRuntime`` is loaded when first named.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = ["GatewayError", "GatewayRuntime"]

if TYPE_CHECKING:
    from .gatewayrest import GatewayError
    from .gatewayruntime import GatewayRuntime


def __getattr__(name: str) -> Any:
    if name in __all__:
        from . import gatewayruntime

        value = getattr(gatewayruntime, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'kernelgate.jupyter' has no attribute {name!r}")
