"""A real Node kernel (``kernelgate/kernels/node/kernel.js``) driven by a host ``Connection``.

The child is started the way ``kernelgate.gateway.process.spawn_child`` starts a cold Python
child (fd 0 ``/dev/null``, fd 1 and 2 pipes, fd 3 one end of an ``AF_UNIX`` socketpair, a
new session, the default signal dispositions) but with ``node kernel.js`` as its argv.
:class:`KernelRun` then drives one run: it opens the bindings, sends the program, answers
the calls with the test's functions (or holds them), and collects every event. Every wait
is bounded; nothing sleeps to synchronise.
"""

from __future__ import annotations

import os
import select
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from kernelgate.gateway.process import ChildProcess, high_fd, spawn_child
from kernelgate.kernels.node import KERNEL_JS, MIN_NODE_MAJOR
from kernelgate.wire.connection import HOST, Connection
from kernelgate.wire.errors import ProtocolError
from kernelgate.wire.events import (
    CallReply,
    CallRequest,
    ExecuteReply,
    ExecuteRequest,
    OpenBindings,
)

_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}
_SIGNALS_TO_DEFAULT = {
    signal.SIGPIPE,
    signal.SIGXFSZ,
    signal.SIGXCPU,
    signal.SIGINT,
    signal.SIGTERM,
    signal.SIGHUP,
    signal.SIGQUIT,
    signal.SIGCHLD,
}


def find_node() -> str | None:
    """``node`` on PATH if it is at least :data:`MIN_NODE_MAJOR`, else None."""
    node = shutil.which("node")
    if node is None:
        return None
    try:
        out = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=30)
        major = int(out.stdout.strip().lstrip("v").split(".")[0])
    except (OSError, ValueError, subprocess.SubprocessError):
        return None
    return node if major >= MIN_NODE_MAJOR else None


NODE = find_node()
needs_node = pytest.mark.skipif(
    NODE is None, reason="node (>= 18) is not installed: the Node kernel's tests need it"
)


def spawn_node_child(
    node: str,
    env: dict[str, str],
    extra_args: tuple[str, ...] = (),
    kernel_args: tuple[str, ...] = (),
    nonblocking: bool = False,
) -> ChildProcess:
    """Start ``node [extra_args] kernel.js [kernel_args]`` in a new session with fd 3 a
    socketpair to us (the host's environment ``env``; the run's cwd comes in the
    request, as for a cold Python child). ``nonblocking``: fd 3 comes with O_NONBLOCK set,
    as a careless launcher might leave it."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    theirs_fd = high_fd(os.dup(theirs.fileno()))
    theirs.close()
    os.set_blocking(theirs_fd, not nonblocking)
    out_w, err_w = high_fd(out_w), high_fd(err_w)
    argv = [node, *extra_args, KERNEL_JS, *kernel_args]
    try:
        pid = os.posix_spawn(
            node,
            argv,
            env,
            file_actions=[
                (os.POSIX_SPAWN_OPEN, 0, "/dev/null", os.O_RDONLY, 0),
                (os.POSIX_SPAWN_DUP2, out_w, 1),
                (os.POSIX_SPAWN_DUP2, err_w, 2),
                (os.POSIX_SPAWN_DUP2, theirs_fd, 3),
            ],
            setsid=True,
            setsigmask=(),
            setsigdef=_SIGNALS_TO_DEFAULT,
        )
    except BaseException:
        ours.close()
        os.close(out_r)
        os.close(err_r)
        raise
    finally:
        for fd in (theirs_fd, out_w, err_w):
            os.close(fd)
    pidfd = os.pidfd_open(pid)
    ours.setblocking(False)
    os.set_blocking(out_r, False)
    os.set_blocking(err_r, False)
    return ChildProcess(pid, pidfd, ours, out_r, err_r)


def echo_spec(params: list[list[Any]], signature: str = "", doc: str = "") -> dict[str, Any]:
    return {"params": params, "signature": signature or "(...)", "doc": doc}


SEARCH = echo_spec(
    [["query", "POSITIONAL_OR_KEYWORD", False], ["limit", "POSITIONAL_OR_KEYWORD", True]],
    "(query, limit=3)",
)


def search(query: Any, limit: int = 3) -> Any:
    return [f"{query}-{i}" for i in range(limit)]


def fail(message: str = "boom") -> Any:
    raise ValueError(message)


@dataclass
class Outcome:
    """What one run sent, in order, and how it ended."""

    events: list[Any] = field(default_factory=list)
    reply: ExecuteReply | None = None
    protocol_error: str | None = None
    stdout_raw: bytes = b""
    stderr_raw: bytes = b""
    returncode: int | None = None
    #: Largest number of calls the host held unanswered at once.
    max_in_flight: int = 0

    @property
    def status(self) -> str | None:
        return self.reply.run_status if self.reply is not None else None

    def text(self, name: str) -> str:
        return "".join(
            e.text for e in self.events if type(e).__name__ == "Stream" and e.name == name
        )

    def kinds(self) -> list[str]:
        return [type(e).__name__ for e in self.events]

    def of(self, kind: str) -> list[Any]:
        return [e for e in self.events if type(e).__name__ == kind]


class KernelRun:
    """One run of a real child (Node's, or Python's cold child with ``python=``)."""

    def __init__(
        self,
        *,
        bindings: dict[str, Callable[..., Any]] | None = None,
        specs: dict[str, dict[str, Any]] | None = None,
        python: str | None = None,
        extra_args: tuple[str, ...] = (),
        kernel_args: tuple[str, ...] = (),
        nonblocking: bool = False,
        max_frame_bytes: int = 8 << 20,
    ) -> None:
        self.bindings: dict[str, Callable[..., Any]] = (
            bindings if bindings is not None else {"search": search, "fail": fail}
        )
        default_specs = {
            "search": SEARCH,
            "fail": echo_spec([["message", "POSITIONAL_OR_KEYWORD", True]], "(message='boom')"),
        }
        self.specs = (
            specs if specs is not None else {n: default_specs.get(n, SEARCH) for n in self.bindings}
        )
        self.run_dir = tempfile.mkdtemp(prefix="kg-node-")
        os.chmod(self.run_dir, 0o755)
        if python is None:
            assert NODE is not None
            self.proc = spawn_node_child(NODE, _ENV, extra_args, kernel_args, nonblocking)
        else:
            self.proc = spawn_child(python, _ENV, self.run_dir)
        self.sock = self.proc.control
        self.conn = Connection(HOST, session="node-test", max_frame_bytes=max_frame_bytes)
        self.max_frame_bytes = max_frame_bytes
        self.held: list[CallRequest] = []
        self.out_queue = bytearray()
        self.outcome = Outcome()

    # -- the wire ---------------------------------------------------------------------------

    def send(self, event: Any) -> None:
        self.send_bytes(self.conn.send(event))

    def send_bytes(self, data: bytes) -> None:
        """Queue ``data`` for the child and write what fd 3 takes now: as the gateway, the
        host never blocks on a write (a child writing its calls while the host writes
        answers would otherwise wait for each other); :meth:`pump` writes the rest."""
        self.out_queue += data
        self.flush_some()

    def flush_some(self) -> None:
        while self.out_queue:
            try:
                n = self.sock.send(self.out_queue)
            except (BlockingIOError, InterruptedError):
                return
            except (BrokenPipeError, ConnectionResetError):
                self.out_queue.clear()  # the child is gone: what it sent says why
                return
            del self.out_queue[:n]

    def options(self, **options: Any) -> dict[str, Any]:
        opts = {
            "cwd": self.run_dir,
            "max_output_bytes": 64 * 1024,
            "max_value_bytes": 32 * 1024,
            "max_calls": 10_000,
            "max_frame_bytes": self.max_frame_bytes,
            "sandbox": {"level": "process"},
        }
        opts.update(options)
        return opts

    def open_bindings(self) -> None:
        self.send(OpenBindings("bindings-node-test", {"tools": self.specs}))

    def start(self, code: str, **options: Any) -> KernelRun:
        self.open_bindings()
        self.send(ExecuteRequest(code, self.options(**options)))
        return self

    def answer(self, call: CallRequest) -> None:
        try:
            value = self.bindings[call.name](*call.args, **call.kwargs)
        except Exception as exc:  # the binding's failure is the program's ToolError
            reply = CallReply(call.call_id, False, ename=type(exc).__name__, evalue=str(exc))
        else:
            reply = CallReply(call.call_id, True, value)
        self.send(reply)

    def pump(
        self,
        until: Callable[[Outcome], bool] | None = None,
        timeout: float = 20.0,
        hold: Callable[[list[CallRequest]], bool] | None = None,
    ) -> Outcome:
        """Take the child's messages until ``until(outcome)`` (default: its reply, a
        protocol error, or EOF). Calls are answered at once, or held while ``hold(held)``
        says so (then all answered together, in reverse order)."""
        out = self.outcome
        done = until or (lambda o: o.reply is not None or o.protocol_error is not None)
        deadline = time.monotonic() + timeout
        eof = False
        while not done(out):
            try:
                event = self.conn.next_event()
            except ProtocolError as exc:
                out.protocol_error = str(exc)
                break
            if event is not None:
                out.events.append(event)
                if type(event) is ExecuteReply:
                    out.reply = event
                elif type(event) is CallRequest:
                    self.held.append(event)
                    out.max_in_flight = max(out.max_in_flight, len(self.held))
                    if hold is None or not hold(self.held):
                        held, self.held = self.held, []
                        for call in reversed(held):
                            self.answer(call)
                continue
            if eof:
                break
            left = deadline - time.monotonic()
            assert left > 0, f"timed out; events {out.events}, stderr {out.stderr_raw!r}"
            fds: list[Any] = [self.sock, self.proc.stdout_fd, self.proc.stderr_fd]
            ready, writable, _ = select.select(fds, [self.sock] if self.out_queue else [], [], left)
            if writable:
                self.flush_some()
            for fd, attr in (
                (self.proc.stdout_fd, "stdout_raw"),
                (self.proc.stderr_fd, "stderr_raw"),
            ):
                if fd in ready:
                    try:
                        chunk = os.read(fd, 1 << 16)
                    except BlockingIOError:
                        chunk = b""
                    setattr(out, attr, getattr(out, attr) + chunk)
            if self.sock in ready:
                try:
                    data = self.sock.recv(1 << 20)
                except BlockingIOError:
                    continue
                except ConnectionResetError:
                    data = b""
                try:
                    self.conn.receive_data(data)
                except ProtocolError as exc:
                    out.protocol_error = str(exc)
                    break
                if not data:
                    eof = True
        return out

    def run(self, code: str, timeout: float = 20.0, **options: Any) -> Outcome:
        self.start(code, **options)
        return self.pump(timeout=timeout)

    def wait_exit(self, timeout: float = 10.0) -> int:
        """The child's exit code (-N for signal N), once it has exited by itself."""
        assert self.proc.wait_gone(timeout), "the child did not exit"
        assert self.proc.try_reap()
        assert self.proc.returncode is not None
        self.outcome.returncode = self.proc.returncode
        return self.proc.returncode

    def close(self) -> None:
        proc = self.proc
        proc.kill_all()
        proc.wait_gone(10)
        proc.try_reap()
        proc.close()
        shutil.rmtree(self.run_dir, ignore_errors=True)
