"""Running cells: each ``execute_request`` is one program run by
:meth:`kernelgate.Gateway.run` in a fresh child.

Requests queue and run one at a time in a task of their own, so the shell socket keeps
being read while a cell runs (``complete``, ``inspect`` and, above all, the ``comm_msg``
answers of client-answered bindings are handled at once). A cell's outputs go to iopub as
they happen, each binding call as a ``display_data`` output when it completes, and the
``execute_reply`` carries the run's metadata under ``kernelgate``
(:func:`kernelgate.model.codec.encode_metadata`, as a recorded run's cell does).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
from collections.abc import Callable
from typing import Any

from kernelgate.gateway.api import CodeGateway
from kernelgate.gateway.debug import RunDebugger
from kernelgate.gateway.gateway import Gateway
from kernelgate.model.codec import encode_metadata
from kernelgate.model.language import Language
from kernelgate.model.limits import Limits
from kernelgate.model.result import CallRecord, ErrorInfo, RunResult
from kernelgate.notebooks.cellrun import run_record_output, setup_output
from kernelgate.notebooks.render import value_shown
from kernelgate.wire.messages import (
    display_data_content,
    error_content,
    execute_reply_content,
    execute_result_content,
    stream_content,
)

from .calls import call_display
from .cells import Program
from .channels import Channels, Message
from .clients import claims_owner, owner_of, same_owner
from .debugger import DebugSession
from .replaycell import replay_body, replay_marker, run_replay_cell
from .workbench import Plan, Workbench
from .workbench_ts import ScriptWorkbench

__all__ = ["Cell", "Executor", "error_reply"]

_INTERRUPT_RETRY = 0.01


def error_reply(ename: str, evalue: str) -> dict[str, Any]:
    """A reply's content for a request that failed (``status: error``)."""
    return {"status": "error", "ename": ename, "evalue": evalue, "traceback": []}


class Cell:
    """What the frontend has been shown of the running cell.

    ``owner`` is the owner secret the request carried (:mod:`.clients`): such a cell is a
    private run, one program as :meth:`kernelgate.Gateway.run` runs it, untouched by the
    notebook's setup cells, history and hints.
    """

    __slots__ = ("count", "error_sent", "gateway", "owner", "parent", "program", "run_gateway")

    def __init__(
        self, parent: Message, count: int, gateway: Gateway, owner: str | None = None
    ) -> None:
        self.parent = parent
        self.count = count
        self.error_sent = False
        self.gateway = gateway
        self.owner = owner
        self.program: Program | None = None
        #: The gateway a replay cell's program runs on (the replay's own, with the
        #: recording's answers for bindings), once it is made: interrupts go there.
        self.run_gateway: CodeGateway | None = None


class Executor:
    """The queue of ``execute_request`` messages and the cell running now.

    ``gateway_for(owner)`` picks the gateway that runs a request carrying that owner secret
    (the bindings announced with it, or the kernel's own for ``None`` or an unknown owner);
    ``limits`` are the kernelspec's, which a request may only lower.
    """

    def __init__(
        self,
        channels: Channels,
        limits: Limits,
        gateway_for: Callable[[str | None], Gateway],
        debugger: DebugSession | None = None,
        language: Language = "python",
    ) -> None:
        self.channels = channels
        self.limits = limits
        self.gateway_for = gateway_for
        #: The notebook's debug session: while it is started, notebook cells run debugged.
        self.debugger = debugger
        self.execution_count = 0
        #: The cells' language (the kernel's runtime's): how a cell is read.
        self.language: Language = language
        #: Setup cells, history and assigned names: the notebook, not program state.
        self.bench = Workbench() if language == "python" else ScriptWorkbench()
        #: The cell running now, if any: comm messages of its calls take it as parent.
        self.cell: Cell | None = None
        self.closing = False
        #: ``(ename, evalue)`` every cell is refused with (the kernel cannot run cells).
        self.refusal: tuple[str, str] | None = None
        self._queue: collections.deque[tuple[Message, list[bytes]]] = collections.deque()
        self._task: asyncio.Task[None] | None = None

    # -- the queue ---------------------------------------------------------------------------

    def submit(self, msg: Message, idents: list[bytes]) -> None:
        """Queue an ``execute_request``; it runs after those before it (aborted if the
        kernel is shutting down)."""
        self._queue.append((msg, idents))
        if self.closing:
            self.abort_queue()
        elif self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run_queue())

    def private_in_flight(self, msg_id: str) -> bool:
        """Whether ``msg_id`` is the id of a private request queued or running now."""
        cell = self.cell
        if cell is not None and cell.owner is not None and cell.parent.get("msg_id") == msg_id:
            return True
        return any(
            msg["header"].get("msg_id") == msg_id and claims_owner(msg) for msg, _ in self._queue
        )

    def abort_queue(self, *, ordinary_only: bool = False) -> None:
        """Answer queued requests ``aborted``, as ipykernel does after a failure.

        ``ordinary_only``: keep private runs (requests with an owner secret) queued: each
        is a run of its own, which another client's failed cell must not cancel.
        """
        publish, reply = self.channels.publish, self.channels.reply
        kept: collections.deque[tuple[Message, list[bytes]]] = collections.deque()
        while self._queue:
            msg, idents = self._queue.popleft()
            if ordinary_only and _private(msg):
                kept.append((msg, idents))
                continue
            publish("status", {"execution_state": "busy"}, msg["header"])
            aborted = {"status": "aborted"}
            reply("shell", "execute_reply", aborted, msg, idents, metadata=dict(aborted))
            publish("status", {"execution_state": "idle"}, msg["header"])
        self._queue = kept

    async def _run_queue(self) -> None:
        while self._queue and not self.closing:
            msg, idents = self._queue.popleft()
            ok = await self._execute(msg, idents)
            content = msg.get("content") or {}
            if not ok and content.get("stop_on_error", True) and not content.get("silent"):
                self.abort_queue(ordinary_only=True)

    async def close(self, grace: float) -> None:
        """Shutting down: abort what is queued, interrupt the running cell and wait up to
        ``grace`` seconds for it to end."""
        self.closing = True
        self.abort_queue()
        self.interrupt()
        if self._task is not None:
            with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(self._task), grace)

    # -- interrupting ------------------------------------------------------------------------

    def interrupt(self, owner: str | None = None) -> bool:
        """Stop the running cell (it ends with status ``"interrupted"``); with ``owner``,
        only if it is that owner's run. Whether a cell was told to stop."""
        cell = self.cell
        if cell is None or (owner is not None and not same_owner(cell.owner, owner)):
            return False
        self._interrupt_cell(cell)
        return True

    def _interrupt_cell(self, cell: Cell) -> None:
        # The cell may be between its request and its run's start (the gateway has no
        # live run yet, or a replay cell's gateway is not made yet): try again shortly,
        # until the run is stopped or the cell is over.
        gateway = cell.run_gateway or cell.gateway
        if self.cell is cell and gateway.interrupt() == 0:
            asyncio.get_running_loop().call_later(_INTERRUPT_RETRY, self._interrupt_cell, cell)

    # -- one cell ----------------------------------------------------------------------------

    def limits_for(self, msg: Message) -> Limits | None:
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
        """Run one request; publish its outputs and reply. True if it went ``ok``."""
        parent = msg["header"]
        content = msg.get("content") or {}
        code = content.get("code", "")
        code = code if isinstance(code, str) else str(code)
        silent = bool(content.get("silent", False))
        refused: tuple[str, str] | None = None
        try:
            owner = owner_of(msg)
        except ValueError as exc:
            owner, refused = None, ("ValueError", str(exc))
        publish = self.channels.publish
        publish("status", {"execution_state": "busy"}, parent)
        try:
            if not silent:
                self.execution_count += 1
                publish(
                    "execute_input", {"code": code, "execution_count": self.execution_count}, parent
                )
                if owner is None and content.get("store_history", True):
                    self.bench.history.add(code)
            cell = Cell(parent, self.execution_count, self.gateway_for(owner), owner)
            plan = Plan(refusal=refused) if refused is not None else self._plan(code, cell, msg)
            if plan.refusal is not None:
                ename, evalue = plan.refusal
                error = ErrorInfo(ename, evalue, [f"{ename}: {evalue}"])
                self._reply(msg, idents, cell, RunResult(status="exception", error=error))
                return False
            if plan.setup:
                if not silent:
                    note = setup_output(cell.count)
                    data = display_data_content(note["data"], note["metadata"])
                    publish("display_data", data, parent)
                self._reply(msg, idents, cell, RunResult(status="ok"))
                return True
            if plan.program is None:  # only obj? lines: answered by the pager
                self._reply(msg, idents, cell, RunResult(status="ok"), plan.payload)
                return True
            result = await self._run(msg, cell, plan.program, silent, plan)
            if owner is None:
                self.bench.ran(code, cell.count)
            if not silent:
                # What ran: a bare replay marker ran the recording's program after it.
                record = run_record_output(result, result.program or plan.program.text, code)
                data = display_data_content(record["data"], record["metadata"])
                publish("display_data", data, parent)
            self._reply(msg, idents, cell, result, plan.payload)
            return result.ok
        finally:
            publish("status", {"execution_state": "idle"}, parent)

    def _plan(self, code: str, cell: Cell, msg: Message) -> Plan:
        if self.refusal is not None:
            return Plan(refusal=self.refusal)
        if cell.owner is not None:
            # A private run is the program as sent, whatever its first line: never kept as
            # a setup cell, never given the notebook's setup cells, never read for `obj?`.
            return Plan(program=Program(code))
        try:
            marker = replay_marker(code, "#" if self.language == "python" else "//")
        except ValueError as exc:
            return Plan(refusal=("ValueError", str(exc)))
        if marker is not None:
            # Run as it is, no setup cells before it: the cell's lines are the program's.
            return Plan(program=Program(code), replay=marker)
        namespaces = cell.gateway.registry.namespaces
        meta = msg.get("metadata")
        helped = self.bench.help_plan(code, namespaces)
        if helped is not None:
            return helped
        return self.bench.plan(code, cell.count, meta if isinstance(meta, dict) else {})

    async def _run(
        self, msg: Message, cell: Cell, program: Program, silent: bool, plan: Plan
    ) -> RunResult:
        self.cell = cell
        cell.program = program
        debug: RunDebugger | None = None
        on_output = None if silent else lambda out: self._on_output(cell, out)
        on_call = None if silent else lambda rec: self._on_call(cell, rec)
        try:
            bare = plan.replay is not None and not replay_body(plan.replay, program.text).strip()
            # A bare replay marker has no lines of the program to break in.
            debug = None if bare else self._debugger_for(cell, program, silent)
            limits = self.limits_for(msg)
            if plan.replay is not None:
                return await self._run_replay(cell, plan, limits, on_output, on_call, debug)
            return await cell.gateway.run(
                program.text, limits=limits, on_output=on_output, on_call=on_call, debug=debug
            )
        except (TypeError, ValueError, RuntimeError) as exc:
            return RunResult(status="exception", error=ErrorInfo(type(exc).__name__, str(exc)))
        finally:
            self.cell = None
            if debug is not None and self.debugger is not None:
                self.debugger.end_run(debug)

    async def _run_replay(
        self,
        cell: Cell,
        plan: Plan,
        limits: Limits | None,
        on_output: Any,
        on_call: Any,
        debug: RunDebugger | None,
    ) -> RunResult:
        """A replay cell's run: its program against the recording's answers."""
        assert plan.program is not None

        def on_gateway(gateway: CodeGateway) -> None:
            cell.run_gateway = gateway

        return await run_replay_cell(
            plan.replay,
            plan.program.text,
            # Never more than the kernelspec's: a recording's own limits do not apply.
            limits=limits or self.limits,
            debug=debug,
            on_output=on_output,
            on_call=on_call,
            payload=plan.payload,
            on_gateway=on_gateway,
            like=cell.gateway,  # the kernel's sandbox level, pool and paths
        )

    def _debugger_for(self, cell: Cell, program: Program, silent: bool) -> RunDebugger | None:
        """The run's debugger when the notebook's debug session is started: notebook cells
        only (a private run is never debugged: the session is the notebook's, and no
        client may reach another's run), and not silent ones (nothing of them is shown)."""
        if self.debugger is None or cell.owner is not None or silent:
            return None
        return self.debugger.begin_run(program, cell.parent)

    def _reply(
        self,
        msg: Message,
        idents: list[bytes],
        cell: Cell,
        result: RunResult,
        payload: list[dict[str, Any]] | None = None,
    ) -> None:
        content = msg.get("content") or {}
        metadata: dict[str, Any] = {"kernelgate": encode_metadata(result)}
        if result.ok:
            reply = execute_reply_content("ok", cell.count)
            reply["user_expressions"] = {
                name: error_reply(
                    "NotImplementedError",
                    "user_expressions need a live namespace; every kernelgate cell is a "
                    "fresh program",
                )
                for name in (content.get("user_expressions") or {})
            }
            if payload:
                reply["payload"] = payload
            metadata["status"] = "ok"
        else:
            error = result.error or ErrorInfo("Error", f"the run ended with {result.status}")
            error = self._shown(cell, error)
            traceback = error.traceback or [f"{error.ename}: {error.evalue}"]
            if not content.get("silent") and not cell.error_sent:
                self.channels.publish(
                    "error", error_content(error.ename, error.evalue, traceback), cell.parent
                )
            reply = execute_reply_content("error", cell.count, error.ename, error.evalue, traceback)
            metadata["status"] = "error"
        self.channels.reply("shell", "execute_reply", reply, msg, idents, metadata=metadata)

    def _on_output(self, cell: Cell, output: dict[str, Any]) -> None:
        kind = output.get("output_type")
        publish = self.channels.publish
        if kind == "stream":
            publish("stream", stream_content(output["name"], output["text"]), cell.parent)
        elif kind in ("display_data", "update_display_data"):
            data = display_data_content(output.get("data", {}), output.get("metadata"))
            transient = output.get("transient")
            if isinstance(transient, dict) and isinstance(transient.get("display_id"), str):
                # display(..., display_id=...) and update_display(...): the front end
                # replaces the output with that id in place.
                data["transient"] = {"display_id": transient["display_id"]}
            publish(kind, data, cell.parent)
        elif kind == "clear_output":
            publish("clear_output", {"wait": bool(output.get("wait", False))}, cell.parent)
        elif kind == "execute_result":
            # Shown as its repr: the value's JSON travels in the run record instead.
            data = output.get("data", {})
            value = data.get("application/json") if isinstance(data, dict) else None
            shown = value_shown(output, value)
            content = execute_result_content(
                cell.count, shown.get("data", {}), shown.get("metadata")
            )
            publish("execute_result", content, cell.parent)
        elif kind == "error":
            cell.error_sent = True
            raw = ErrorInfo(
                str(output.get("ename", "")),
                str(output.get("evalue", "")),
                [str(line) for line in output.get("traceback", [])],
            )
            error = self._shown(cell, raw)
            content = error_content(error.ename, error.evalue, error.traceback)
            publish("error", content, cell.parent)

    def _shown(self, cell: Cell, error: ErrorInfo) -> ErrorInfo:
        """The error as the front end shows it: a private run's as it is (as Gateway.run
        gives it), a notebook cell's with the workbench's line mapping and hint."""
        if cell.owner is not None:
            return error
        return self.bench.shown_error(cell.program, error, cell.count)

    def _on_call(self, cell: Cell, record: CallRecord) -> None:
        output = call_display(record)
        data = display_data_content(output["data"], output["metadata"])
        self.channels.publish("display_data", data, cell.parent)


def _private(msg: Message) -> bool:
    """Whether a request carries an owner secret (a malformed one counts: it is refused)."""
    return claims_owner(msg)
