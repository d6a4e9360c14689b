"""One run of a :class:`~.remote.RemoteGateway`: the messages of its ``execute_request``
(outputs, calls, the run record, the reply), gathered into a :class:`RunResult`.

Everything here comes from another kernel and is checked as such: outputs are sanitised,
calls are taken only from outputs marked as calls, and run metadata that does not decode
is the kernel's fault, said so.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from kernelgate.gateway.run import CallListener, OutputListener
from kernelgate.gateway.sanitize import sanitize_output
from kernelgate.gateway.tracing import RunTrace
from kernelgate.model.codec import (
    NotARunError,
    decode_metadata,
    metadata_value,
    streams_and_value,
)
from kernelgate.model.result import CallRecord, ErrorInfo, RunResult, Status
from kernelgate.notebooks.cellrun import RUN_ROLE, SETUP_ROLE
from kernelgate.wire.messages import CALL_MIME, iso_now

from .calls import call_record_from_data

__all__ = ["RemoteRun", "check_run_sync"]

#: What a malformed field in a kernel's run metadata means.
_KERNEL_BLAME = "the kernel sent run metadata this kernelgate does not read; is it one?"


class RemoteRun:
    """The messages of one ``execute_request``, gathered into a :class:`RunResult`."""

    def __init__(
        self, program: str, on_output: OutputListener | None, on_call: CallListener | None
    ) -> None:
        self.program = program
        self.on_output = on_output
        self.on_call = on_call
        self.outputs: list[dict[str, Any]] = []
        self.calls: list[CallRecord] = []
        self.reply: dict[str, Any] | None = None
        #: The kernel's calls of this run seen so far (each is answered once).
        self.call_ids: set[str] = set()
        self.started = False
        #: When the kernel said it started the run (time.monotonic()), or None.
        self.started_mono: float | None = None
        #: The run's OpenTelemetry spans (None: not traced).
        self.trace: RunTrace | None = None
        self.idle = False
        self.done = asyncio.Event()
        self.started_at = iso_now()
        self.t0 = time.monotonic()

    def _add(self, output: dict[str, Any]) -> None:
        if output["output_type"] == "stream":
            last = self.outputs[-1] if self.outputs else None
            if last and last["output_type"] == "stream" and last["name"] == output["name"]:
                last["text"] += output["text"]
            else:
                self.outputs.append(dict(output))
        else:
            # Another kernel's outputs are as untrusted as a program's (that kernel, or the
            # program in it, made them): only inert output goes on.
            output = sanitize_output(output)
            self.outputs.append(output)
        if self.on_output is not None:
            self.on_output(output)

    def on_iopub(self, msg: dict[str, Any]) -> None:
        if self.idle:
            return  # the kernel's idle is a request's last message: nothing after it is ours
        kind = msg.get("msg_type")
        content = msg.get("content") or {}
        if kind == "status":
            state = content.get("execution_state")
            if state == "busy":
                self.started = True
                if self.started_mono is None:
                    self.started_mono = time.monotonic()
            elif state == "idle":
                self.idle = True
                self._check_done()
        elif kind == "stream":
            name = "stderr" if content.get("name") == "stderr" else "stdout"
            text = str(content.get("text", ""))
            self._add({"output_type": "stream", "name": name, "text": text})
        elif kind == "display_data":
            data = content.get("data") or {}
            meta = content.get("metadata") or {}
            role = meta.get("kernelgate") if isinstance(meta, dict) else None
            if isinstance(role, dict) and role.get("role") in (RUN_ROLE, SETUP_ROLE):
                return  # the kernel's run record: its facts come with the execute_reply
            if CALL_MIME in data and isinstance(role, dict) and role.get("role") == "call":
                record = call_record_from_data(data[CALL_MIME], len(self.outputs))
                if record is not None:
                    self.calls.append(record)
                    if self.on_call is not None:
                        self.on_call(record)
                    return
            self._add(
                {
                    "output_type": "display_data",
                    "data": data,
                    "metadata": content.get("metadata") or {},
                }
            )
        elif kind == "execute_result":
            data = content.get("data") or {}
            self._add(
                {
                    "output_type": "execute_result",
                    "execution_count": content.get("execution_count"),
                    "data": data,
                    "metadata": content.get("metadata") or {},
                }
            )
        elif kind == "error":
            self._add(
                {
                    "output_type": "error",
                    "ename": str(content.get("ename", "")),
                    "evalue": str(content.get("evalue", "")),
                    "traceback": list(content.get("traceback") or []),
                }
            )

    def on_reply(self, msg: dict[str, Any]) -> None:
        self.reply = msg
        self._check_done()

    def _check_done(self) -> None:
        if self.reply is not None and self.idle:
            self.done.set()

    def result(self, failure: ErrorInfo | None = None) -> RunResult:
        """The run, from what the kernel sent: outputs and calls as they arrived, the rest
        from the ``execute_reply``'s run metadata (the one codec recordings use)."""
        reply = self.reply or {}
        content = reply.get("content") or {}
        if failure is not None:
            return self._failed("worker_exit", failure)
        if content.get("status") == "aborted":
            why = "the kernel aborted this request (an earlier one failed)"
            return self._failed("interrupted", ErrorInfo("Aborted", why))
        metadata = reply.get("metadata")
        meta = metadata.get("kernelgate") if isinstance(metadata, dict) else None
        if meta is None:
            why = "its execute_reply carries no kernelgate run metadata: is it a kernelgate kernel?"
            return self._failed("protocol", ErrorInfo("ProtocolError", f"the kernel {why}"))
        try:
            decoded = decode_metadata(meta, "the kernel's execute_reply", blame=_KERNEL_BLAME)
            found, recorded = metadata_value(
                meta, "the kernel's execute_reply", blame=_KERNEL_BLAME
            )
        except NotARunError as exc:
            return self._failed("protocol", ErrorInfo("ProtocolError", str(exc)))
        stdout, stderr, value = streams_and_value(self.outputs, decoded.fields["status"])
        if found and decoded.fields["status"] == "ok":
            # The kernel shows the value as its repr; the JSON is in the run metadata. The
            # outputs get it back, as Gateway.run's execute_result has it.
            value = recorded
            for output in self.outputs:
                if output.get("output_type") == "execute_result":
                    output["data"] = {**output.get("data", {}), "application/json": value}
        return RunResult(
            **decoded.fields,
            value=value,
            stdout=stdout,
            stderr=stderr,
            outputs=self.outputs,
            calls=self.calls,
            program=self.program,
        )

    def _failed(self, status: Status, error: ErrorInfo) -> RunResult:
        """A run the kernel did not report: what arrived, and why it ended."""
        stdout, stderr, _ = streams_and_value(self.outputs, status)
        return RunResult(
            status=status,
            stdout=stdout,
            stderr=stderr,
            outputs=self.outputs,
            error=error,
            calls=self.calls,
            duration_s=time.monotonic() - self.t0,
            started_at=self.started_at,
            program=self.program,
        )


def check_run_sync(kind: str, closed: bool, loop: asyncio.AbstractEventLoop | None) -> None:
    """Refuse a remote gateway's ``run_sync()`` where it cannot work: inside a running event
    loop, after ``close()``, or while the gateway (a ``kind``) is open on a loop of its own."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        raise RuntimeError(
            "run_sync() was called from a running event loop; use 'await gateway.run(...)'"
        )
    if closed:
        raise RuntimeError(f"this {kind} is closed; create a new one")
    if loop is not None and not loop.is_closed():
        raise RuntimeError(
            f"this {kind} is open on an event loop: run programs there with "
            "'await gateway.run(...)'"
        )
