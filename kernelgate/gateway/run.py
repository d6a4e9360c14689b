"""One run: its child process, its fd-3 loop, call dispatch, limits, and its RunResult.

All I/O is non-blocking on the event loop (``add_reader``/``add_writer`` on raw fds), so
the host never waits on anything the child does: when the child exits, everything it wrote
is already in the socket and pipe buffers and is drained at once, and a grandchild holding
a pipe open cannot keep the run from settling.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import os
import secrets
import signal as signal_module
import time
from collections.abc import Awaitable, Callable, Coroutine
from concurrent.futures import Executor
from typing import Any, cast

from kernelgate.model.constants import FRAME_OVERHEAD as _FRAME_OVERHEAD
from kernelgate.model.limits import Limits
from kernelgate.model.result import CallRecord, ErrorInfo, RunResult, Status
from kernelgate.model.text import safe_str
from kernelgate.wire.connection import HOST, Connection
from kernelgate.wire.errors import LocalProtocolError, RemoteProtocolError
from kernelgate.wire.events import (
    CallReply,
    CallRequest,
    DisplayData,
    ErrorOutput,
    Event,
    ExecuteReply,
    ExecuteRequest,
    ExecuteResult,
    OpenBindings,
    Stream,
)
from kernelgate.wire.messages import binding_label, iso_now
from kernelgate.wire.values import NotJSONError, ValueTooLargeError, check_json

from .bindings import Binding, BindingRegistry
from .output import OutputCollector
from .pool import PooledChild, WarmPool
from .process import (
    ChildProcess,
    backoff,
    descendants,
    make_run_dir,
    proc_usage,
    remove_tree,
    spawn_child,
)
from .sandbox import PidsCgroup, SandboxPlan
from .sanitize import sanitize_output

__all__ = ["Run", "new_run_id", "OutputListener"]

_READ_CHUNK = 256 * 1024

_REPLY_HIGH_WATER = 16 * 1024 * 1024
_MAX_TEXT_PLAIN = 64 * 1024
_ERROR_TEXT_LIMIT = 64 * 1024

#: Called with each output as it happens (stream pieces unmerged), for live frontends.
OutputListener = Callable[[dict[str, Any]], None]
#: Called with each binding call once it completes.
CallListener = Callable[[CallRecord], None]
#: Answers a call in place of the registry's callable (e.g. a remote client's binding).
CallHandler = Callable[[Binding, list[Any], dict[str, Any]], Awaitable[Any]]
#: Sees every call before it runs: ``policy(namespace, name, args, kwargs)``; sync or async.
#: A false result, or an exception (its message is the reason), denies the call.
Policy = Callable[[str, str, list[Any], dict[str, Any]], Any]


def new_run_id() -> str:
    """Sortable by start time, unique across processes."""
    return time.strftime("%Y%m%dT%H%M%S", time.gmtime()) + "-" + secrets.token_hex(4)


def _signal_name(num: int) -> str:
    try:
        return signal_module.Signals(num).name
    except ValueError:
        return f"signal {num}"


class Run:
    """Start one child, run one program, settle, return a :class:`RunResult`."""

    def __init__(
        self,
        *,
        program: str,
        registry: BindingRegistry,
        limits: Limits,
        python: str,
        env: dict[str, str],
        base_dir: str | None = None,
        run_id: str | None = None,
        on_output: OutputListener | None = None,
        on_call: CallListener | None = None,
        call_handler: CallHandler | None = None,
        sandbox: SandboxPlan | None = None,
        sandbox_unavailable: str = "",
        policy: Policy | None = None,
        pool: WarmPool | None = None,
        executor: Executor | None = None,
    ) -> None:
        self.program = program
        self.sandbox = sandbox or SandboxPlan("process", {})
        self.sandbox_unavailable = sandbox_unavailable
        self.policy = policy
        self.pool = pool
        #: Where synchronous bindings run (None: the loop's default executor).
        self.executor = executor
        self.pooled = False
        self._cgroup: PidsCgroup | None = None
        self.registry = registry
        self.limits = limits
        self.python = python
        self.env = env
        self.base_dir = base_dir
        self.run_id = run_id or new_run_id()
        self.on_output = on_output
        self.on_call = on_call
        self.call_handler = call_handler
        self.collector = OutputCollector(limits.max_output_bytes)
        self.calls: list[CallRecord] = []
        self.child: ChildProcess | None = None
        self._conn = Connection(HOST, session=self.run_id, max_frame_bytes=limits.max_frame_bytes)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._t0 = 0.0
        self._decided: tuple[Status, str, str] | None = None  # (status, ename, message)
        self._reply: ExecuteReply | None = None
        self._result_output: dict[str, Any] | None = None
        self._value: Any = None
        self._exited: asyncio.Future[None] | None = None
        self._replied: asyncio.Future[None] | None = None
        #: Set when run() returned on the reply while the child was still exiting: the
        #: rest of the teardown (reap, cgroup, run directory). The gateway awaits it.
        self.finishing: asyncio.Task[None] | None = None
        self._streams_ended = False
        self._corked: list[bytes] | None = None  # frames held back while a chunk is handled
        self._tasks: set[asyncio.Task[None]] = set()
        self._timers: list[asyncio.TimerHandle] = []
        self._out: list[bytes] = []
        self._out_bytes = 0
        self._writing = False
        self._drained = asyncio.Event()
        self._drained.set()
        self._io_closed = False
        self._sem = asyncio.Semaphore(limits.max_calls_in_flight)
        self._readers: list[int] = []
        self._bytes_in = 0
        self._bytes_out = 0
        self._display_used = 0
        self._display_cut = False
        self._events_seen = 0  # frames from the child before its reply
        self._control_paused = False  # fd 3 not read while calls wait for a slot
        self._host_usage: dict[str, Any] | None = None
        self._busiest_cpu_s = 0.0  # the most CPU one process of the run had used, per /proc
        #: Failures of the host's own hooks (on_call), kept for the result's note.
        self.hook_errors: list[str] = []

    # -- public ------------------------------------------------------------------------------

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        return self._loop

    async def wait_exited(self) -> None:
        """Wait until the child process has exited and been reaped."""
        if self._exited is not None:
            await asyncio.shield(self._exited)

    def interrupt(self, message: str = "the run was interrupted on request") -> None:
        """Stop the run now; it ends with status ``"interrupted"`` unless already decided."""
        self._decide("interrupted", "Interrupted", message)
        if self.child is not None and not self.child.reaped:
            self.child.signal_group(signal_module.SIGKILL)

    async def execute(self) -> RunResult:
        loop = self._loop = asyncio.get_running_loop()
        self._t0 = time.monotonic()
        started_at = iso_now()
        if self.sandbox_unavailable:
            self._decide("sandbox_unavailable", "SandboxUnavailable", self.sandbox_unavailable)
            return self._result(started_at)
        pooled = await self.pool.acquire() if self.pool is not None else None
        if pooled is not None:
            run_dir = pooled.run_dir
        else:
            run_dir = make_run_dir(self.base_dir, self.run_id)
        child: ChildProcess
        try:
            if pooled is not None:
                child = self.child = pooled
                self.pooled = True
                if pooled.cgroup is not None:
                    self._cgroup = pooled.cgroup
                    try:
                        pooled.cgroup.set_max(self.sandbox.pids_max(self.limits.max_processes))
                    except OSError:
                        pass
            else:
                try:
                    child = self.child = spawn_child(self.python, self.env, run_dir)
                except OSError as exc:
                    self._decide(
                        "worker_exit",
                        "WorkerExit",
                        f"could not start the interpreter {self.python!r}: {exc}",
                    )
                    return self._result(started_at)
                if self.sandbox.pids_cgroup is not None:
                    # Before the program arrives, so everything it forks is counted.
                    try:
                        self._cgroup = PidsCgroup(
                            self.sandbox.pids_cgroup,
                            self.run_id,
                            self.sandbox.pids_max(self.limits.max_processes),
                        )
                        self._cgroup.attach(child.pid)
                    except OSError:
                        self._cgroup = None
            self._exited = loop.create_future()
            self._replied = loop.create_future()
            for fd, cb in (
                (child.control.fileno(), self._on_control),
                (child.stdout_fd, lambda: self._on_pipe("stdout")),
                (child.stderr_fd, lambda: self._on_pipe("stderr")),
                (child.pidfd, self._on_exit),
            ):
                if fd >= 0:
                    loop.add_reader(fd, cb)
                    self._readers.append(fd)
            if isinstance(child, PooledChild) and child.pidfd < 0:
                child.zygote.wait_status(child.pid, self._on_exit)
            self._send(OpenBindings(f"bindings-{self.run_id}", self.registry.specs()))
            self._send(
                ExecuteRequest(
                    self.program,
                    {
                        "cwd": run_dir,
                        "max_output_bytes": self.limits.max_output_bytes,
                        "max_value_bytes": self.limits.max_value_bytes,
                        "max_calls": self.limits.max_calls,
                        "max_frame_bytes": self.limits.max_frame_bytes,
                        "sandbox": self.sandbox.child_options(),
                    },
                )
            )
            self._timers.append(loop.call_later(self.limits.wall_seconds, self._on_timeout))
            try:
                await asyncio.wait((self._exited, self._replied), return_when="FIRST_COMPLETED")
            except asyncio.CancelledError:
                # The caller gave up: kill everything, wait until it is gone, then re-raise.
                self._decide("interrupted", "Interrupted", "the run was cancelled by the caller")
                child.signal_group(signal_module.SIGKILL)
                while not self._exited.done():
                    try:
                        await asyncio.shield(self._exited)
                    except asyncio.CancelledError:
                        continue
                await self._settle()
                raise
            if not self._exited.done():
                # The program has replied: its result is complete. The child's way out
                # (and a namespace's) takes several process exits in a row; the caller
                # does not wait for them, the gateway does (aclose, run_sync).
                self._drain_pipes()
                self.finishing = loop.create_task(self._finish(run_dir))
                await self._cancel_calls()  # their records are final in the result
                return self._result(started_at)
            await self._settle()
            return self._result(started_at)
        finally:
            if self.finishing is None:
                self._release(run_dir)

    async def _finish(self, run_dir: str) -> None:
        """The teardown of a run that returned on its reply."""
        assert self._exited is not None
        try:
            await asyncio.shield(self._exited)
            await self._settle()
        except asyncio.CancelledError:
            # The loop is closing (asyncio.run ends) with the child still on its way out.
            self._abandon()
            raise
        finally:
            self._release(run_dir)

    def _release(self, run_dir: str) -> None:
        """The last step of either ending: our fds, timers and the run directory."""
        self._close_io()
        remove_tree(run_dir)

    def _abandon(self) -> None:
        """Without the event loop: kill the child, wait (bounded) until it is gone."""
        child = self.child
        assert child is not None
        for task in self._tasks:
            task.cancel()
        child.kill()
        child.wait_gone(2.0)
        child.try_reap()
        if self._cgroup is not None:
            self._cgroup.settle_blocking()

    # -- deciding the outcome ----------------------------------------------------------------

    def _decide(self, status: Status, ename: str, message: str) -> None:
        if self._decided is None and self._reply is None:
            self._decided = (status, ename, message)

    def _on_timeout(self) -> None:
        if self._reply is not None or self._decided is not None or self.child is None:
            return
        self._decide(
            "timeout",
            "Timeout",
            f"the run passed its wall-clock budget of wall_seconds={self.limits.wall_seconds:g} "
            "and was stopped; do less per run, or raise Limits.wall_seconds",
        )
        self.child.signal_group(signal_module.SIGTERM)
        assert self._loop is not None
        self._timers.append(
            self._loop.call_later(
                self.limits.kill_grace_seconds, self.child.signal_group, signal_module.SIGKILL
            )
        )

    def _protocol_violation(self, detail: str) -> None:
        self._decide(
            "protocol",
            "ProtocolError",
            f"the program's process sent control traffic on fd 3 that the host refused: "
            f"{detail}. Programs must not read or write fd 3",
        )
        assert self.child is not None and self._loop is not None
        self.child.signal_group(signal_module.SIGKILL)
        self._remove_reader(self.child.control.fileno())

    # -- fd 3 --------------------------------------------------------------------------------

    def _on_control(self, drain: bool = False) -> None:
        child = self.child
        assert child is not None
        sock = child.control
        while True:
            try:
                data = sock.recv(_READ_CHUNK)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                data = b""
            if not data:
                self._remove_reader(sock.fileno())
                return
            self._bytes_in += len(data)
            if self._decided is not None and self._decided[0] == "protocol":
                return
            # Answers to the calls in this chunk leave together: one write, one wakeup of
            # the child, however many calls it sent at once.
            corked: list[bytes] = []
            self._corked = corked
            try:
                self._conn.receive_data(data)
                while True:
                    event = self._conn.next_event()
                    if event is None:
                        break
                    self._handle(event)
                    if self._decided is not None and self._decided[0] == "protocol":
                        break  # nothing more of this child's is read or recorded
            except RemoteProtocolError as exc:
                self._protocol_violation(str(exc))
                return
            finally:
                self._corked = None
                if corked and not self._io_closed:
                    self._write(b"".join(corked))
            if not drain:
                return  # one chunk per wakeup keeps other runs responsive

    def _handle(self, event: Event) -> None:
        if type(event) is not ExecuteReply:
            self._events_seen += 1
        if type(event) is Stream:
            self._add_stream(event.name, event.text)
        elif type(event) is CallRequest:
            self._start_call(event)
        elif type(event) is DisplayData:
            # What a program displays is untrusted: it ends up in a live notebook, where
            # the front end trusts a kernel's output. Only inert output leaves the host.
            self._add_output(
                sanitize_output(
                    {"output_type": "display_data", "data": event.data, "metadata": event.metadata}
                )
            )
        elif type(event) is ExecuteResult:
            self._on_execute_result(event)
        elif type(event) is ErrorOutput:
            self._add_output(
                {
                    "output_type": "error",
                    "ename": event.ename[:200],
                    "evalue": event.evalue[:_ERROR_TEXT_LIMIT],
                    "traceback": _cap_lines(event.traceback),
                }
            )
        elif type(event) is ExecuteReply:
            self._on_reply(event)

    def _add_stream(self, name: str, text: str) -> None:
        kept = self.collector.add_text(name, text)
        if kept and self.on_output is not None:
            self.on_output({"output_type": "stream", "name": name, "text": kept})

    def _add_output(self, output: dict[str, Any]) -> None:
        # Rich outputs have their own budget: the child could otherwise make the host hold
        # any number of maximal frames. The value's own output always shows (there is one,
        # bounded by max_value_bytes).
        is_result = output["output_type"] == "execute_result"
        if self._display_cut and not is_result:
            return
        limit = self.limits.max_display_bytes
        try:
            self._display_used += check_json(output, "output", limit - self._display_used)
        except (ValueTooLargeError, NotJSONError):
            if not is_result:
                self._display_cut = True
                output = {
                    "output_type": "display_data",
                    "data": {
                        "text/plain": f"[kernelgate: rich output cut here: display, error and "
                        f"result outputs together passed max_display_bytes={limit} bytes]"
                    },
                    "metadata": {},
                }
        self.collector.add_output(output)
        if self.on_output is not None:
            self.on_output(output)

    def _on_execute_result(self, event: ExecuteResult) -> None:
        data = dict(event.data)
        if "text/plain" in data and len(data["text/plain"]) > _MAX_TEXT_PLAIN:
            data["text/plain"] = data["text/plain"][:_MAX_TEXT_PLAIN] + "... [cut]"
        if "application/json" in data:
            try:
                check_json(data["application/json"], "value", self.limits.max_value_bytes)
            except ValueTooLargeError:
                self._decide(
                    "output_limit",
                    "OutputLimit",
                    f"the program's value is over max_value_bytes={self.limits.max_value_bytes} "
                    "bytes as JSON; return less, or raise Limits.max_value_bytes",
                )
                return
            except NotJSONError as exc:
                self._decide("invalid_output", "InvalidOutput", f"the program's value: {exc}")
                return
            self._value = data["application/json"]
        output = sanitize_output(
            {
                "output_type": "execute_result",
                "execution_count": 1,
                "data": data,
                "metadata": event.metadata,
            }
        )
        if self._result_output is not None:  # a second result replaces the first
            outputs = self.collector.outputs
            outputs[:] = [o for o in outputs if o is not self._result_output]
        self._result_output = output
        self._add_output(output)

    def _on_reply(self, reply: ExecuteReply) -> None:
        if reply.run_status == "sandbox_unavailable" and (self.pooled or self._events_seen):
            # A warm child entered its sandbox before its program arrived, and a cold one
            # reports a failure to enter it before anything else: this claim comes from a
            # program that ran inside the sandbox.
            self._protocol_violation(
                "an execute_reply claiming sandbox_unavailable from a child that had "
                "entered its sandbox" + (" (a warm child)" if self.pooled else "")
            )
            return
        if self._decided is None:
            self._host_usage = self._measure_usage()
            self._reply = reply
            if self._replied is not None and not self._replied.done():
                self._replied.set_result(None)
        child = self.child
        assert child is not None and self._loop is not None
        # The child exits right after its reply; only a misbehaving one needs the kill.
        self._timers.append(
            self._loop.call_later(
                min(self.limits.kill_grace_seconds, 0.5), child.signal_group, signal_module.SIGKILL
            )
        )

    # -- binding calls -----------------------------------------------------------------------

    def _start_call(self, request: CallRequest) -> None:
        if request.call_id >= self.limits.max_calls:
            # The child refuses calls past max_calls itself (and numbers calls from 0), so
            # this frame was written by the program: stop reading and recording its flood.
            self._protocol_violation(
                f"binding call number {request.call_id + 1} is past max_calls="
                f"{self.limits.max_calls}, which the child refuses itself"
            )
            return
        record = CallRecord(
            id=request.call_id,
            namespace=request.namespace,
            name=request.name,
            args=request.args,
            kwargs=request.kwargs,
            start_s=time.monotonic() - self._t0,
        )
        self.calls.append(record)
        binding = self.registry.lookup(record.namespace, record.name)
        if binding is not None:
            # The host is the authority: a frame written straight to fd 3 skips the
            # child's check, and neither the policy nor the binding may see arguments that
            # do not fit (Signature.bind: about 2 us per call, docs/benchmarks.md).
            try:
                binding.check_arguments(record.args, record.kwargs)
            except TypeError as exc:
                self._answer(record, time.monotonic(), error=exc)
                return
        coro: Coroutine[Any, Any, None]
        if (
            binding is not None
            and self.policy is None
            and self.call_handler is None
            and record.id < self.limits.max_calls
            and not self._sem.locked()
            and self._out_bytes <= _REPLY_HIGH_WATER
        ):
            # The common case, started in this callback: no policy, no handler, a free
            # slot. A coroutine function's coroutine is made here; a synchronous binding
            # goes to a worker thread (it may block: the event loop serves every run).
            started = time.monotonic()
            try:
                pending = self._invoke(binding, record.args, record.kwargs)
            except asyncio.CancelledError:
                raise
            except BaseException as exc:  # SystemExit from a binding must not end the host
                self._answer(record, started, error=exc)
                return
            coro = self._await_answer(record, started, pending)
        else:
            pending = None
            coro = self._dispatch(record, binding)
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._call_done)
        if inspect.iscoroutine(pending):
            # A task cancelled before its first step (the run ended) never awaits the
            # binding's coroutine: close it, or Python warns "never awaited" on the host.
            binding_coro: Coroutine[Any, Any, Any] = pending
            task.add_done_callback(lambda _: binding_coro.close())
        if len(self._tasks) > self.limits.max_calls_in_flight:
            self._pause_control()

    def _call_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if self._control_paused and len(self._tasks) <= self.limits.max_calls_in_flight:
            self._resume_control()

    def _pause_control(self) -> None:
        """Back-pressure: with every call slot taken and more calls waiting, stop reading
        fd 3 until one finishes, so a flood of call frames waits in the child (blocked in
        its write), not in the host's memory."""
        child = self.child
        if child is None or self._control_paused:
            return
        fd = child.control.fileno()
        if fd in self._readers:
            self._remove_reader(fd)
            self._control_paused = True

    def _resume_control(self) -> None:
        self._control_paused = False
        child = self.child
        if child is None or self._io_closed or self._loop is None:
            return
        if self._decided is not None and self._decided[0] == "protocol":
            return
        fd = child.control.fileno()
        if fd not in self._readers:
            self._loop.add_reader(fd, self._on_control)
            self._readers.append(fd)

    def _invoke(self, binding: Binding, args: list[Any], kwargs: dict[str, Any]) -> Awaitable[Any]:
        """Start a binding call: a coroutine function in the loop, anything else in a
        worker thread (a synchronous binding doing I/O would stall every run on this loop,
        and a run's wall clock with it)."""
        if binding.is_async or binding.inline:
            value = binding.fn(*args, **kwargs)
            if inspect.isawaitable(value):
                return value
            return _ready(value)
        return self._in_thread(binding.fn, args, kwargs)

    async def _in_thread(
        self, fn: Callable[..., Any], args: list[Any], kwargs: dict[str, Any]
    ) -> Any:
        assert self._loop is not None
        context = contextvars.copy_context()  # as asyncio.to_thread: the caller's context
        value = await self._loop.run_in_executor(
            self.executor, functools.partial(context.run, fn, *args, **kwargs)
        )
        if inspect.isawaitable(value):  # a plain function that returned a coroutine
            value = await value
        return value

    async def _await_answer(
        self, record: CallRecord, started: float, pending: Awaitable[Any]
    ) -> None:
        async with self._sem:
            try:
                value = await pending
            except asyncio.CancelledError:
                raise
            except BaseException as exc:  # SystemExit from a binding must not end the host
                self._answer(record, started, error=exc)
            else:
                self._answer(record, started, value=value)

    async def _dispatch(self, record: CallRecord, binding: Binding | None) -> None:
        label = binding_label(record.namespace, record.name)
        async with self._sem:
            started = time.monotonic()
            record.start_s = started - self._t0
            value: Any = None
            error: BaseException | None = None
            try:
                if binding is None:
                    raise LookupError(f"there is no binding {label}")
                if record.id >= self.limits.max_calls:
                    raise _Refused(
                        "LimitExceeded",
                        f"max_calls={self.limits.max_calls} binding calls per run reached; "
                        "make fewer calls (batch the work) or raise Limits.max_calls",
                    )
                if self.policy is not None:
                    await self._check_policy(record)
                if self.call_handler is not None:
                    value = await self.call_handler(binding, record.args, record.kwargs)
                else:
                    value = await self._invoke(binding, record.args, record.kwargs)
            except asyncio.CancelledError:
                raise
            except BaseException as exc:  # SystemExit from a binding must not end the host
                error = exc
            if self._out_bytes > _REPLY_HIGH_WATER:
                await self._drained.wait()
            self._answer(record, started, value=value, error=error)

    def _answer(
        self,
        record: CallRecord,
        started: float,
        value: Any = None,
        error: BaseException | None = None,
    ) -> None:
        """Check a call's result, record it, and send the child its answer."""
        # No second signature or JSON check of the arguments here: the child checked them
        # for good messages, the wire parsed them as strict JSON, and a forged call with
        # arguments that do not fit fails in the call itself, as a ToolError.
        if error is None:
            label = binding_label(record.namespace, record.name)
            try:
                check_json(
                    value, f"{label}() result", self.limits.max_frame_bytes - _FRAME_OVERHEAD
                )
            except NotJSONError as exc:
                error = TypeError(f"the binding returned a value that is not JSON: {exc}")
            except ValueTooLargeError:
                error = ValueError(
                    f"the binding's result is over max_frame_bytes="
                    f"{self.limits.max_frame_bytes} bytes as JSON"
                )
        if error is not None:
            ename = error.ename if isinstance(error, _Refused) else type(error).__name__
            record.ok = False
            record.error = ErrorInfo(ename, safe_str(error, 4096))
            reply = CallReply(record.id, False, ename=ename, evalue=record.error.evalue)
        else:
            record.ok = True
            record.value = value
            reply = CallReply(record.id, True, value)
        record.duration_s = time.monotonic() - started
        record.output_index = len(self.collector.outputs)
        self.collector.seal()
        if self._reply is None and self._decided is None:
            try:
                self._send(reply)
            except LocalProtocolError as exc:
                # A result that passed the checks yet cannot be encoded must still answer
                # the call, or the program would wait for it forever.
                record.ok, record.value = False, None
                record.error = ErrorInfo("TypeError", f"the result cannot be sent: {exc}")
                self._send(
                    CallReply(record.id, False, ename="TypeError", evalue=record.error.evalue)
                )
        if self.on_call is not None:
            try:
                self.on_call(record)
            except BaseException as exc:  # a listener of the host's must not end the run
                # The host's own hook failed: the program is not to blame, and the run goes
                # on; say so where the host's developer will look.
                self.hook_errors.append(f"on_call: {type(exc).__name__}: {safe_str(exc, 500)}")

    async def _check_policy(self, record: CallRecord) -> None:
        assert self.policy is not None
        try:
            verdict = self.policy(record.namespace, record.name, record.args, record.kwargs)
            if inspect.isawaitable(verdict):
                verdict = await verdict
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # SystemExit from a policy must not end the host either
            raise _Refused(
                "PolicyDenied", f"the gateway's policy denied this call: {safe_str(exc, 4096)}"
            ) from None
        if not verdict:
            raise _Refused("PolicyDenied", "the gateway's policy denied this call")

    # -- writing to the child ----------------------------------------------------------------

    def _send(self, event: Event) -> None:
        if self._io_closed or self.child is None:
            return
        data = self._conn.send(event)
        self._bytes_out += len(data)
        if self._corked is not None:
            self._corked.append(data)
            return
        self._write(data)

    def _write(self, data: bytes) -> None:
        assert self.child is not None
        if self._out:
            self._out.append(data)
            self._out_bytes += len(data)
            return
        try:
            n = self.child.control.send(data)
        except (BlockingIOError, InterruptedError):
            n = 0
        except OSError:
            return  # the child is gone; its run is settling
        if n < len(data):
            rest = data[n:]
            self._out.append(rest)
            self._out_bytes += len(rest)
            self._drained.clear()
            assert self._loop is not None
            self._loop.add_writer(self.child.control.fileno(), self._on_writable)

    def _on_writable(self) -> None:
        assert self.child is not None and self._loop is not None
        sock = self.child.control
        while self._out:
            data = self._out[0]
            try:
                n = sock.send(data)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                self._out.clear()
                self._out_bytes = 0
                break
            self._out_bytes -= n
            if n < len(data):
                self._out[0] = data[n:]
                return
            self._out.pop(0)
        self._loop.remove_writer(sock.fileno())
        self._drained.set()

    # -- fd 1 and 2 --------------------------------------------------------------------------

    def _on_pipe(self, name: str, drain: bool = False) -> None:
        child = self.child
        assert child is not None
        fd = child.stdout_fd if name == "stdout" else child.stderr_fd
        while True:
            try:
                data = os.read(fd, _READ_CHUNK)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                data = b""
            if not data:
                self._remove_reader(fd)
                return
            kept = self.collector.add_raw(name, data)
            if kept and self.on_output is not None:
                self.on_output({"output_type": "stream", "name": name, "text": kept})
            if not drain:
                return

    # -- the end -----------------------------------------------------------------------------

    def _on_exit(self) -> None:
        child = self.child
        assert child is not None and self._exited is not None
        if self._exited.done():
            return
        if isinstance(child, PooledChild):
            if not child.try_reap():
                # It is gone (its pidfd fired); the zygote that reaps it reports how it
                # ended in a moment (having killed its process group first).
                self._remove_reader(child.pidfd)
                child.zygote.wait_status(child.pid, self._on_exit)
                return
        else:
            # Unreaped, the child is a zombie that still holds its process group id, so
            # this cannot reach a stranger that reused the number.
            child.signal_group(signal_module.SIGKILL)
        self._remove_reader(child.pidfd)
        # Everything the child wrote before it died is in the buffers now: take it all.
        if child.control.fileno() in self._readers or self._control_paused:
            self._control_paused = False
            self._on_control(drain=True)
        for name, fd in (("stdout", child.stdout_fd), ("stderr", child.stderr_fd)):
            if fd in self._readers:
                self._on_pipe(name, drain=True)
        self._exited.set_result(None)

    async def _settle(self) -> None:
        child = self.child
        assert child is not None
        for fd in list(self._readers):
            self._remove_reader(fd)
        self._end_streams()
        if not child.reaped and self.sandbox.level == "process" and self._cgroup is None:
            # No pid namespace and no cgroup: the process group is the only handle on what
            # the program left behind. Wait for it to die while the unreaped leader keeps
            # the group id ours. (With namespaces, the namespace is already empty.)
            for delay in backoff():
                if not child.group_alive():
                    break
                child.signal_group(signal_module.SIGKILL)
                await asyncio.sleep(delay)
        child.try_reap()
        if self._cgroup is not None:
            pool = self.pool if self.pooled else None
            keep = pool is not None and not pool.closed
            if await self._empty_cgroup(self._cgroup, remove=not keep) and keep:
                assert pool is not None
                pool.recycle_cgroup(self._cgroup)  # mkdir and rmdir cost ms each
        await self._cancel_calls()

    async def _cancel_calls(self) -> None:
        """End the calls still running: the program is over, nobody awaits them."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    def _drain_pipes(self) -> None:
        """Take what fd 1 and 2 hold now (all the program wrote before its reply)."""
        child = self.child
        assert child is not None
        for name, fd in (("stdout", child.stdout_fd), ("stderr", child.stderr_fd)):
            if fd in self._readers:
                self._on_pipe(name, drain=True)
                self._remove_reader(fd)
        self._end_streams()

    def _end_streams(self) -> None:
        if not self._streams_ended:
            self._streams_ended = True
            for name in ("stdout", "stderr"):
                self.collector.add_raw(name, b"", final=True)

    async def _empty_cgroup(self, cgroup: PidsCgroup, remove: bool = True) -> bool:
        """Kill everything in the run's cgroup; then remove it, or leave it empty for
        reuse. True on success; False after the backstop (never hang the caller)."""
        for delay in backoff():
            if cgroup.settle(remove):
                return True
            await asyncio.sleep(delay)
        return cgroup.settle(remove)  # False is reported by the leak checks

    def _remove_reader(self, fd: int) -> None:
        if fd in self._readers:
            self._readers.remove(fd)
            assert self._loop is not None
            self._loop.remove_reader(fd)

    def _close_io(self) -> None:
        self._io_closed = True
        for timer in self._timers:
            timer.cancel()
        if self.child is not None and self._loop is not None:
            for fd in list(self._readers):
                self._remove_reader(fd)
            if self._out:
                self._loop.remove_writer(self.child.control.fileno())
                self._out.clear()
            self._drained.set()
            self.child.close()

    def _result(self, started_at: str) -> RunResult:
        child = self.child
        exit_code: int | None = None
        sig: int | None = None
        if self._reply is not None:
            exit_code = 0  # it reported and exits; whether it is reaped yet is moot
        elif child is not None and child.returncode is not None:
            if child.returncode < 0:
                sig = -child.returncode
            else:
                exit_code = child.returncode
        value: Any = None
        error: ErrorInfo | None = None
        outputs = list(self.collector.outputs)  # the teardown may still add to its own
        usage = self._usage()
        cpu = usage.get("cpu_user_s", 0.0) + usage.get("cpu_system_s", 0.0)
        if (
            self._reply is None
            and (self._decided is None or self._decided[0] == "timeout")
            and sig is not None
            and (
                sig == signal_module.SIGXCPU
                or (sig == signal_module.SIGKILL and cpu >= self.limits.cpu_seconds)
            )
        ):
            self._decided = (
                "timeout",
                "Timeout",
                f"the program used its CPU budget of cpu_seconds={self.limits.cpu_seconds:g} "
                f"({cpu:.2f} s of CPU) and was stopped; do less work per run, or raise "
                "Limits.cpu_seconds",
            )
        # The most CPU the program's process used: what the host read of each live process,
        # or the program's own figure of itself and the children it reaped (a process that
        # already exited is gone from /proc; a program may overstate its use, never hide it
        # from the host's reading).
        reported = (self._reply.usage or {}) if self._reply is not None else {}
        busiest = max(
            self._busiest_cpu_s,
            float(reported.get("cpu_user_s", 0.0)) + float(reported.get("cpu_system_s", 0.0)),
        )
        if self._decided is None and self._reply is not None and busiest > self.limits.cpu_seconds:
            # RLIMIT_CPU acts on whole seconds and a program may trap SIGXCPU until the hard
            # limit: the host judges the budget from what it measured, not from the reply.
            self._decided = (
                "timeout",
                "Timeout",
                f"the program used more than its CPU budget of cpu_seconds="
                f"{self.limits.cpu_seconds:g} ({busiest:.2f} s of CPU); do less work per run, "
                "or raise Limits.cpu_seconds",
            )
        note = ""
        if self._decided is not None:
            status, ename, message = self._decided
            error = ErrorInfo(ename, message)
        elif self._reply is not None:
            reply = self._reply
            status = cast(Status, reply.run_status)  # the wire checked it: CHILD_STATUSES
            result_data = (self._result_output or {}).get("data") or {}
            if status == "ok" and result_data and "application/json" not in result_data:
                note = (
                    "the final expression's value is not JSON, so value is None (its repr is "
                    "in outputs); return JSON data (dict, list, str, int, float, bool, None) "
                    "to get it as the value"
                )
            if status == "ok":
                value = self._value
            else:
                error = ErrorInfo(reply.ename, reply.evalue, _cap_lines(reply.traceback))
        else:
            status = "worker_exit"
            if sig is not None:
                memory = (
                    f"; it may have run out of memory (memory_bytes={self.limits.memory_bytes})"
                )
                hint = {
                    int(signal_module.SIGSEGV): f" (a crash, usually in C code{memory})",
                    int(signal_module.SIGKILL): f" (killed from outside{memory})",
                    int(signal_module.SIGABRT): f" (an abort, usually in C code{memory})",
                    int(signal_module.SIGBUS): f" (a bus error{memory})",
                    int(signal_module.SIGSYS): (
                        " (a system call the sandbox forbids: another architecture's system "
                        "call ABI, or one seccomp kills)"
                    ),
                }.get(sig, "")
                message = (
                    f"the program's process was killed by {_signal_name(sig)} ({sig}){hint} "
                    "before it reported a result"
                )
            else:
                message = (
                    f"the program's process exited with code {exit_code} before it reported "
                    "a result (os._exit, or the interpreter failed)"
                )
            error = ErrorInfo("WorkerExit", message)
        if self._decided is not None or status == "worker_exit":
            assert error is not None
            outputs = [
                *outputs,
                {
                    "output_type": "error",
                    "ename": error.ename,
                    "evalue": error.evalue,
                    "traceback": [],
                },
            ]
            if any(o is self._result_output for o in outputs):
                outputs = [o for o in outputs if o is not self._result_output]
        return RunResult(
            status=status,
            value=value,
            stdout=self.collector.text("stdout"),
            stderr=self.collector.text("stderr"),
            outputs=outputs,
            error=error,
            calls=list(self.calls),
            duration_s=time.monotonic() - self._t0,
            exit_code=exit_code,
            signal=sig,
            run_id=self.run_id,
            started_at=started_at,
            program=self.program,
            interpreter=self.python,
            limits=self.limits.to_dict(),
            bindings=self.registry.signatures(),
            # The host's plan, never the child's word; none when the sandbox was not entered.
            isolation=(
                self.sandbox.level if child is not None and status != "sandbox_unavailable" else ""
            ),
            note="; ".join([*([note] if note else []), *self.hook_errors]),
            usage=usage,
        )

    def _measure_usage(self) -> dict[str, Any] | None:
        """CPU time and peak memory of the run's processes as the host reads them from
        /proc when the reply arrives (the child may not be reaped for a while): the child's
        own figures are its word, not a measurement."""
        child = self.child
        if child is None:
            return None
        pids = self._cgroup.pids() if self._cgroup is not None else []
        if not pids:
            pids = descendants(child.pid)
        user = system = 0.0
        peak = 0
        seen = False
        for pid in pids:
            found = proc_usage(pid)
            if found is None:
                continue
            seen = True
            user += found[0]
            system += found[1]
            peak = max(peak, found[2])
            self._busiest_cpu_s = max(self._busiest_cpu_s, found[3])
        if not seen:
            return None
        return {
            "cpu_user_s": round(user, 6),
            "cpu_system_s": round(system, 6),
            "peak_memory_bytes": peak,
        }

    def _usage(self) -> dict[str, Any]:
        child = self.child
        usage: dict[str, Any] = {
            "cpu_user_s": 0.0,
            "cpu_system_s": 0.0,
            "peak_memory_bytes": 0,
            "calls": len(self.calls),
            "bytes_in": self._bytes_in,
            "bytes_out": self._bytes_out,
            "warm": self.pooled,
        }
        reported: dict[str, Any] = {}
        if self._reply is not None and self._reply.usage:
            for key, v in self._reply.usage.items():
                reported[key] = round(v, 6) if key.startswith("cpu") else int(v)
        if child is not None and child.rusage is not None:
            ru = child.rusage
            usage["cpu_user_s"] = round(ru.ru_utime, 6)
            usage["cpu_system_s"] = round(ru.ru_stime, 6)
            usage["peak_memory_bytes"] = ru.ru_maxrss * 1024  # Linux reports KiB
            usage["measured_by"] = "host"
        elif self._host_usage is not None:
            # Read while the processes may already be exiting: a lower bound. The child's
            # own figures can only raise it (a program may overstate its usage, never hide
            # it).
            for key, v in self._host_usage.items():
                usage[key] = max(v, reported.get(key, 0))
            usage["measured_by"] = "host"
        elif reported:
            # Nothing the host could read (the processes were gone): the child's word,
            # labelled as such.
            usage.update(reported)
            usage["measured_by"] = "child"
        else:
            usage["measured_by"] = "none"
        if reported:
            usage["child_reported"] = reported
        return usage


async def _ready(value: Any) -> Any:
    return value


class _Refused(Exception):
    """A call the host refused before running it; ``ename`` is what the program sees."""

    def __init__(self, ename: str, message: str) -> None:
        super().__init__(message)
        self.ename = ename


def _cap_lines(lines: list[str], limit: int = _ERROR_TEXT_LIMIT) -> list[str]:
    kept: list[str] = []
    used = 0
    for line in lines:
        used += len(line) + 1
        if used > limit:
            kept.append(f"... [{len(lines) - len(kept)} more traceback lines cut]")
            break
        kept.append(line)
    return kept
