"""Talking to a kernel in tests: run a cell and gather its messages, find processes."""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from jupyter_client.blocking.client import BlockingKernelClient

from kernelgate.wire.messages import BINDINGS_TARGET
from tests.procs import pid_alive

KERNEL_NAME = "kernelgate"
MESSAGE_KERNEL_NAME = "kernelgate-message-interrupt"
#: The TypeScript kernelspec (installed only where a Node >= 18 is found).
TS_KERNEL_NAME = "kernelgate-typescript"
TIMEOUT = 30.0


@dataclass
class Cell:
    """Everything one execute_request produced, in arrival order."""

    msg_id: str
    reply: dict[str, Any] | None = None
    iopub: list[dict[str, Any]] = field(default_factory=list)
    #: (source, msg_type, content) in the order the client saw them; source is
    #: "iopub" or "shell".
    events: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)

    def outputs(self, *types: str) -> list[dict[str, Any]]:
        return [m for m in self.iopub if not types or m["msg_type"] in types]

    def stdout(self) -> str:
        return "".join(
            m["content"]["text"]
            for m in self.iopub
            if m["msg_type"] == "stream" and m["content"]["name"] == "stdout"
        )

    @property
    def status(self) -> str:
        assert self.reply is not None
        return str(self.reply["content"]["status"])

    @property
    def run_status(self) -> str:
        assert self.reply is not None
        return str(self.reply["metadata"]["kernelgate"]["status"])


def owned(owner: str | None) -> dict[str, Any]:
    """A request's metadata carrying ``owner`` (the secret of a bindings comm), if any."""
    return {"kernelgate": {"owner": owner}} if owner is not None else {}


def send_execute(
    kc: BlockingKernelClient, code: str, owner: str | None = None, **content: Any
) -> str:
    """Send an execute_request; with ``owner``, a private run that may call the bindings
    announced with that secret."""
    if owner is None:
        return str(kc.execute(code, **content))
    fields = {
        "code": code,
        "silent": False,
        "store_history": True,
        "user_expressions": {},
        "allow_stdin": False,
        "stop_on_error": True,
        **content,
    }
    msg = kc.session.msg("execute_request", fields, metadata=owned(owner))
    kc.shell_channel.send(msg)
    return str(msg["header"]["msg_id"])


# Messages a collect read that belong to another request, kept for that request's collect.
# The kernel sends a reply on shell before the idle status on iopub, but the two sockets
# deliver independently: under load the client can see a later cell's busy and idle on iopub
# before the earlier cell's reply on shell, and a collect that dropped them would wait for
# them forever (test_stop_on_error_aborts_queued_cells, seen under load).
_kept: weakref.WeakKeyDictionary[BlockingKernelClient, dict[str, list[tuple[str, Any]]]] = (
    weakref.WeakKeyDictionary()
)


def _keep(kc: BlockingKernelClient, source: str, msg: dict[str, Any]) -> None:
    parent = msg["parent_header"].get("msg_id")
    if parent:
        _kept.setdefault(kc, {}).setdefault(str(parent), []).append((source, msg))


def forget_kept(kc: BlockingKernelClient) -> None:
    """Drop what collects kept for later requests (a new test starts clean)."""
    _kept.pop(kc, None)


def collect(
    kc: BlockingKernelClient,
    msg_id: str,
    *,
    timeout: float = TIMEOUT,
    on_iopub: Callable[[dict[str, Any], Cell], None] | None = None,
) -> Cell:
    """Read iopub and shell until the reply and the idle status of ``msg_id`` are in.

    ``on_iopub(msg, cell)`` sees every iopub message as it arrives (any parent; one of
    this cell's is already in ``cell``), e.g. to answer a comm call or to interrupt once
    some output was seen. Messages of other requests read meanwhile are kept for their
    own ``collect``.
    """
    cell = Cell(msg_id)
    idle = False

    def take_iopub(msg: dict[str, Any]) -> None:
        nonlocal idle
        cell.events.append(("iopub", msg["msg_type"], msg["content"]))
        if msg["msg_type"] == "status":
            idle = msg["content"]["execution_state"] == "idle"
        elif msg["msg_type"] != "execute_input":
            cell.iopub.append(msg)

    for source, msg in _kept.get(kc, {}).pop(msg_id, []):
        if source == "shell":
            cell.reply = msg
            cell.events.append(("shell", msg["msg_type"], msg["content"]))
        else:
            take_iopub(msg)
            if on_iopub is not None:
                on_iopub(msg, cell)
    deadline = time.monotonic() + timeout
    while cell.reply is None or not idle:
        if time.monotonic() > deadline:
            raise TimeoutError(f"cell {msg_id} did not finish in {timeout} s: {cell.events}")
        progressed = False
        try:
            msg = kc.get_iopub_msg(timeout=0.05)
        except Exception:
            msg = None
        if msg is not None:
            progressed = True
            if msg["parent_header"].get("msg_id") == msg_id:
                take_iopub(msg)
            else:
                _keep(kc, "iopub", msg)
            if on_iopub is not None:
                on_iopub(msg, cell)
        if cell.reply is None:
            try:
                reply = kc.get_shell_msg(timeout=0 if progressed else 0.01)
            except Exception:
                reply = None
            if reply is not None and reply["parent_header"].get("msg_id") == msg_id:
                cell.reply = reply
                cell.events.append(("shell", reply["msg_type"], reply["content"]))
            elif reply is not None:
                _keep(kc, "shell", reply)
    return cell


def execute(kc: BlockingKernelClient, code: str, **kwargs: Any) -> Cell:
    timeout = kwargs.pop("timeout", TIMEOUT)
    on_iopub = kwargs.pop("on_iopub", None)
    return collect(kc, send_execute(kc, code, **kwargs), timeout=timeout, on_iopub=on_iopub)


def open_bindings_comm(
    kc: BlockingKernelClient, comm_id: str, namespaces: dict[str, Any], owner: str | None
) -> dict[str, Any]:
    """Announce client-answered bindings owned by ``owner``; return the kernel's answer
    (ready or close)."""
    msg = kc.session.msg(
        "comm_open",
        {"comm_id": comm_id, "target_name": BINDINGS_TARGET, "data": {"namespaces": namespaces}},
        metadata=owned(owner),
    )
    kc.shell_channel.send(msg)
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        reply = kc.get_iopub_msg(timeout=TIMEOUT)
        if (
            reply["msg_type"] in ("comm_msg", "comm_close")
            and reply["content"].get("comm_id") == comm_id
        ):
            return reply
    raise TimeoutError("the kernel did not answer the comm_open")


def send_comm(
    kc: BlockingKernelClient, comm_id: str, data: dict[str, Any], owner: str | None
) -> None:
    msg = kc.session.msg("comm_msg", {"comm_id": comm_id, "data": data}, metadata=owned(owner))
    kc.shell_channel.send(msg)


def send_request(
    kc: BlockingKernelClient, msg_type: str, content: dict[str, Any], owner: str | None = None
) -> str:
    """Send any shell request (with ``owner``'s secret if given); return its msg_id."""
    msg = kc.session.msg(msg_type, content, metadata=owned(owner))
    kc.shell_channel.send(msg)
    return str(msg["header"]["msg_id"])


def wait_gone(pids: set[int], timeout: float = 10.0) -> set[int]:
    """Wait until none of ``pids`` is alive; return those still alive at the deadline."""
    deadline = time.monotonic() + timeout
    alive = {p for p in pids if pid_alive(p)}
    while alive and time.monotonic() < deadline:
        time.sleep(0.02)
        alive = {p for p in alive if pid_alive(p)}
    return alive
