"""A real debugged child driven by a host ``Connection`` of the test's own (no gateway).

The child is started exactly as the gateway starts a cold one (``spawn_child``: ``python -I
-c LOADER`` with fd 3 a socketpair), gets its bindings and a debugged ``execute_request``,
and is then driven message by message: binding calls are answered by the test's functions,
``stopped`` events and replies are collected, ``request()`` sends a DAP request and waits for
its reply. Every wait is bounded (no sleeps as synchronisation).
"""

from __future__ import annotations

import os
import select
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

from kernelgate.gateway.process import spawn_child
from kernelgate.wire.connection import HOST, Connection
from kernelgate.wire.events import (
    CallReply,
    CallRequest,
    DebugEvent,
    DebugReply,
    DebugRequest,
    ErrorOutput,
    ExecuteReply,
    ExecuteRequest,
    ExecuteResult,
    OpenBindings,
    Stream,
)

SPEC = {"params": [["query", "POSITIONAL_OR_KEYWORD", False]], "signature": "(query)", "doc": ""}
_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}


def search(query: Any) -> Any:
    return [f"result for {query}"]


class DebugChild:
    """One debugged run in a real child process; close() it (the fixture does)."""

    def __init__(
        self,
        program: str,
        breakpoints: list[Any] | None = None,
        *,
        python: str = sys.executable,
        bindings: dict[str, Callable[..., Any]] | None = None,
        debug: dict[str, Any] | bool | None = None,
        max_frame_bytes: int = 8 << 20,
        hold_calls: bool = False,
    ) -> None:
        self.bindings = bindings if bindings is not None else {"search": search}
        self.run_dir = tempfile.mkdtemp(prefix="kg-debug-")
        os.chmod(self.run_dir, 0o755)
        self.proc = spawn_child(python, _ENV, self.run_dir)
        self.sock = self.proc.control
        self.conn = Connection(HOST, session="debug-test", max_frame_bytes=max_frame_bytes)
        self.events: list[dict[str, Any]] = []
        self.replies: dict[int, DebugReply] = {}
        self.stdout = ""
        self.stderr = ""
        self.outputs: list[Any] = []
        self.calls: list[CallRequest] = []
        self.held: list[CallRequest] = []
        self.hold_calls = hold_calls  # True: calls wait for answer_held()
        self.reply: ExecuteReply | None = None
        self._seq = 0
        self._seen_stops = 0
        options: dict[str, Any] = {
            "cwd": self.run_dir,
            "max_frame_bytes": max_frame_bytes,
            "sandbox": {"level": "process"},
        }
        if debug is not False:  # False: an undebugged run (benchmarks/bench_debug.py)
            options["debug"] = debug if debug is not None else {"breakpoints": breakpoints or []}
        specs = {"tools": {name: SPEC for name in self.bindings}}
        self._send(OpenBindings("bindings-debug", specs))
        self._send(ExecuteRequest(program, options))

    # -- the wire ---------------------------------------------------------------------------

    def _send(self, event: Any) -> None:
        self.sock.setblocking(True)
        try:
            self.sock.sendall(self.conn.send(event))
        finally:
            self.sock.setblocking(False)

    def pump(self, until: Callable[[], bool], timeout: float = 20.0) -> None:
        """Take the child's messages until ``until()`` holds (AssertionError after
        ``timeout`` seconds, or if the child ends first)."""
        deadline = time.monotonic() + timeout
        while not until():
            event = self.conn.next_event()
            if event is not None:
                self._take(event)
                continue
            left = deadline - time.monotonic()
            assert left > 0, f"timed out; events {self.events}, stderr {self.stderr!r}"
            ready = select.select([self.sock, self.proc.stderr_fd], [], [], left)[0]
            if self.proc.stderr_fd in ready:
                chunk = os.read(self.proc.stderr_fd, 1 << 16)
                self.stderr += chunk.decode(errors="replace")
            if self.sock in ready:
                try:
                    data = self.sock.recv(1 << 20)
                except BlockingIOError:
                    continue
                if not data:
                    assert until(), f"the child closed fd 3; stderr: {self.stderr!r}"
                    return
                self.conn.receive_data(data)

    def _take(self, event: Any) -> None:
        etype = type(event)
        if etype is DebugEvent:
            self.events.append({"event": event.event, "body": event.body})
        elif etype is DebugReply:
            self.replies[event.request_seq] = event
        elif etype is CallRequest:
            self.calls.append(event)
            if self.hold_calls:
                self.held.append(event)
            else:
                self._answer(event)
        elif etype is Stream:
            if event.name == "stdout":
                self.stdout += event.text
            else:
                self.stderr += event.text
        elif etype is ExecuteReply:
            self.reply = event
        elif etype in (ErrorOutput, ExecuteResult):
            self.outputs.append(event)
        else:
            self.outputs.append(event)

    def _answer(self, call: CallRequest) -> None:
        try:
            value = self.bindings[call.name](*call.args, **call.kwargs)
        except Exception as exc:  # the binding's failure is the program's ToolError
            reply = CallReply(call.call_id, False, ename=type(exc).__name__, evalue=str(exc))
        else:
            reply = CallReply(call.call_id, True, value)
        self._send(reply)

    def answer_held(self) -> None:
        held, self.held = self.held, []
        for call in held:
            self._answer(call)

    # -- the debugger's side ----------------------------------------------------------------

    def request(
        self, command: str, arguments: dict[str, Any] | None = None, timeout: float = 20.0
    ) -> DebugReply:
        """Send a DAP request; its reply (pumping everything else meanwhile)."""
        seq = self.send_request(command, arguments)
        return self.wait_reply(seq, timeout)

    def send_request(self, command: str, arguments: dict[str, Any] | None = None) -> int:
        seq = self._seq
        self._seq += 1
        self._send(DebugRequest(seq, command, arguments or {}))
        return seq

    def wait_reply(self, seq: int, timeout: float = 20.0) -> DebugReply:
        self.pump(lambda: seq in self.replies, timeout)
        return self.replies.pop(seq)

    def ok(self, command: str, arguments: dict[str, Any] | None = None) -> dict[str, Any]:
        reply = self.request(command, arguments)
        assert reply.success, f"{command} failed: {reply.message}"
        return reply.body

    def stops(self) -> list[dict[str, Any]]:
        return [e["body"] for e in self.events if e["event"] == "stopped"]

    def wait_stopped(self, timeout: float = 20.0) -> dict[str, Any]:
        """The next ``stopped`` event's body (not one seen before)."""
        want = self._seen_stops + 1
        self.pump(lambda: len(self.stops()) >= want or self.reply is not None, timeout)
        assert len(self.stops()) >= want, (
            f"the run ended without stopping: {self.reply}, stdout {self.stdout!r}, "
            f"stderr {self.stderr!r}, outputs {self.outputs}"
        )
        self._seen_stops = want
        return self.stops()[want - 1]

    def where(self) -> list[tuple[str, int]]:
        """(name, line) of each frame, innermost first."""
        frames = self.ok("stackTrace", {"threadId": 1})["stackFrames"]
        return [(f["name"], f["line"]) for f in frames]

    def line(self) -> int:
        return self.where()[0][1]

    def step(self, command: str) -> dict[str, Any]:
        self.ok(command, {"threadId": 1})
        return self.wait_stopped()

    def scope_vars(self, scope: str = "Locals", frame: int = 0) -> dict[str, dict[str, Any]]:
        frames = self.ok("stackTrace", {"threadId": 1})["stackFrames"]
        scopes = self.ok("scopes", {"frameId": frames[frame]["id"]})["scopes"]
        ref = next(s["variablesReference"] for s in scopes if s["name"] == scope)
        return {
            v["name"]: v for v in self.ok("variables", {"variablesReference": ref})["variables"]
        }

    def evaluate(self, expression: str) -> DebugReply:
        return self.request("evaluate", {"expression": expression, "context": "repl"})

    def wait_done(self, timeout: float = 30.0) -> ExecuteReply:
        self.pump(lambda: self.reply is not None, timeout)
        assert self.reply is not None
        return self.reply

    def close(self) -> None:
        proc = self.proc
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        os.waitpid(proc.pid, 0)
        for fd in (proc.pidfd, proc.stdout_fd, proc.stderr_fd):
            os.close(fd)
        self.sock.close()
        shutil.rmtree(self.run_dir, ignore_errors=True)
