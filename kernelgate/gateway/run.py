"""One run: a child, one program, and its RunResult.

``Run`` is the thin orchestrator of a run's rooms, each with one job:

- :mod:`.plan`: the :class:`RunPlan` it is made with, decided once by the Gateway;
- :mod:`.channel`: the child's fds on the event loop (fd 3 I/O, corking, back-pressure,
  the stdout/stderr pipes);
- :mod:`.calls`: the binding calls, on one path;
- :mod:`.output`: what the program printed, displayed and returned, within budgets;
- :mod:`.outcome`: the verdicts, the status decision and the RunResult, pure;
- :mod:`.teardown`: the child's end, async only.
"""

from __future__ import annotations

import asyncio
import secrets
import signal
import time
from typing import Any

from kernelgate.model.limits import Limits
from kernelgate.model.result import CallRecord, RunResult
from kernelgate.wire.connection import Connection
from kernelgate.wire.errors import LocalProtocolError
from kernelgate.wire.events import (
    CallRequest,
    ClearOutput,
    DebugEvent,
    DebugReply,
    DebugRequest,
    DisplayData,
    ErrorOutput,
    Event,
    ExecuteReply,
    ExecuteRequest,
    ExecuteResult,
    OpenBindings,
    Stream,
    UpdateDisplayData,
)
from kernelgate.wire.messages import iso_now

from . import preopen
from .calls import CallDispatcher
from .cgroups import MemoryUse, RunCgroup
from .channel import ChildChannel
from .coldstart import start_cold
from .debug import RunDebugger, pause_timeout
from .loops import call_in_loop, running_loop
from .outcome import (
    Ending,
    Verdict,
    Verdicts,
    build_result,
    interrupted,
    protocol,
    reply_verdict,
    wall_timeout,
)
from .output import OutputCollector, OutputListener, RunOutput
from .plan import CallHandler, CallListener, Policy, RunPlan
from .pool import WarmChild
from .process import ChildProcess
from .sandbox import SandboxPlan
from .teardown import Teardown, discard
from .tracing import RunTrace
from .usage import measure_run

__all__ = ["CallHandler", "CallListener", "OutputListener", "Policy", "Run", "RunPlan",
           "new_run_id"]  # fmt: skip


def new_run_id() -> str:
    """Sortable by start time, unique across processes."""
    return time.strftime("%Y%m%dT%H%M%S", time.gmtime()) + "-" + secrets.token_hex(4)


class Run:
    """Start one child, run one program, settle, return a :class:`RunResult`.

    The status is decided by the first decisive event: the child's ``execute_reply``, or
    the host's timeout, interrupt or protocol verdict (:class:`~.outcome.Verdicts`).
    ``execute()`` returns on the reply; the child's exit is finished by ``finishing``.
    """

    def __init__(
        self,
        program: str,
        plan: RunPlan,
        *,
        run_id: str | None = None,
        on_output: OutputListener | None = None,
        on_call: CallListener | None = None,
        debug: RunDebugger | None = None,
        trace: RunTrace | None = None,
    ) -> None:
        self.program = program
        self.debug = debug
        self.trace = trace  # the run's OpenTelemetry spans (None: not traced)
        self.plan = plan
        self.run_id = run_id or new_run_id()
        self.on_call = on_call
        self.output = RunOutput(plan.limits, on_output)
        self.verdicts = Verdicts()
        self.child: ChildProcess | None = None
        self.pooled = False  # the child came from the warm pool
        #: Set when run() returned on the reply while the child was still exiting: the
        #: rest of the teardown (reap, cgroup, run directory). The gateway awaits it.
        self.finishing: asyncio.Task[None] | None = None
        self._conn: Connection | None = None  # the wire: the pool's (.preopen), or _open's
        self._sent_ahead = 0  # bytes of the comm_open the pool sent (in bytes_out)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._t0 = 0.0
        self._cgroup: RunCgroup | None = None
        self._memory: MemoryUse | None = None  # what its memory cgroup counted
        self._channel: ChildChannel | None = None
        self._calls: CallDispatcher | None = None
        self._end: Teardown | None = None
        self._replied: asyncio.Future[None] | None = None
        self._events_seen = 0  # frames from the child before its reply
        self._host_usage: dict[str, Any] | None = None
        self._busiest_cpu_s = 0.0  # the most CPU one process of the run had used, per /proc
        # The wall clock: its timer, and while a debugged program is stopped at a line,
        # the time it had left (the clock stands still while a person reads the program).
        self._deadline: asyncio.TimerHandle | None = None
        self._clock_left: float | None = None
        self._pause_deadline: asyncio.TimerHandle | None = None

    # -- public ------------------------------------------------------------------------------

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        return self._loop

    @property
    def limits(self) -> Limits:
        return self.plan.limits

    @property
    def sandbox(self) -> SandboxPlan:
        return self.plan.sandbox

    @property
    def collector(self) -> OutputCollector:
        return self.output.collector

    @property
    def calls(self) -> list[CallRecord]:
        return self._calls.calls if self._calls is not None else []

    @property
    def hook_errors(self) -> list[str]:
        """Failures of the host's own hooks (on_call), kept for the result's note."""
        return self._calls.hook_errors if self._calls is not None else []

    async def wait_exited(self) -> None:
        """Wait until the child process has exited and been reaped."""
        if self._end is not None:
            await asyncio.shield(self._end.exited)

    def interrupt(self, message: str = "the run was interrupted on request") -> None:
        """Stop the run now; it ends with status ``"interrupted"`` unless already decided.
        From any thread: done on the run's loop, where the child is reaped (a kill from
        elsewhere could reach a process that took over its pid or its pidfd's number)."""
        loop = self._loop
        if loop is not None and running_loop() is not loop:
            call_in_loop(loop, self._interrupt_here, message)  # closed: the run is over
        else:
            self._interrupt_here(message)

    def _interrupt_here(self, message: str) -> None:
        self.verdicts.decide(interrupted(message))
        if self.child is not None and not self.child.reaped:
            self.child.kill_all()

    async def execute(self) -> RunResult:
        try:
            if self.trace is not None:  # its span around it
                return await self.trace.run(self._execute)
            return await self._execute()
        finally:
            if self.debug is not None:
                self.debug.end()

    async def _execute(self) -> RunResult:
        loop = self._loop = asyncio.get_running_loop()
        self._t0 = time.monotonic()
        started_at = iso_now()
        if self.plan.refused is not None:
            self.verdicts.decide(self.plan.refused)
            return self._result(started_at)
        run_dir = await self._start_child()
        if self.child is None or run_dir is None:
            return self._result(started_at)
        end = self._open(loop, self.child, run_dir)
        try:
            if self.verdicts.settled:  # interrupted while the child was being acquired
                end.watch()
                self.child.kill_all()
            else:
                # The program first: the child starts on it while the host watches its fds
                # (nothing it sends is read before this step ends).
                self._send_program(run_dir)
                end.watch()
                self._deadline = end.call_later(self.limits.wall_seconds, self._on_timeout)
            result = await self._wait(loop, end, started_at)
        except GeneratorExit:  # destroyed with its loop: nothing can be awaited
            if self.finishing is None:
                end.release_now()
            raise
        except BaseException:
            if self.finishing is None:
                await end.release()
            raise
        if self.finishing is None:  # else the teardown task releases
            await end.release()
        return result

    # -- the stages of execute() -----------------------------------------------------------

    async def _start_child(self) -> str | None:
        """A warm child from the pool, or a cold one; its run directory (None: no child)."""
        plan = self.plan
        pooled: WarmChild | None = None
        sent_ahead = 0  # the bytes of the comm_open the pool sent the child it gives
        if plan.pool is not None:
            pooled, sent_ahead = await preopen.acquire(plan.pool, plan.registry, self.limits)
        max_pids = plan.sandbox.pids_max(self.limits.max_processes)
        if pooled is not None and pooled.cgroup is not None:
            born = bool(getattr(pooled, "born_in_namespaces", False))
            try:
                pooled.cgroup.begin(
                    plan.sandbox.pids_max(self.limits.max_processes, born),
                    self.limits.memory_bytes,
                )
            except OSError:
                # The idle child holds more than memory_bytes already (or the cgroup
                # went): it cannot run bounded. A cold child shows what happens then.
                await discard(pooled)
                pooled = None
        if pooled is not None:
            self.child = pooled
            self._conn, self._sent_ahead = pooled.wire, sent_ahead  # the pool's, or None
            self.pooled = True
            self._cgroup = pooled.cgroup
            return pooled.run_dir
        cold = start_cold(plan, self.run_id, max_pids, self.limits.memory_bytes)
        if isinstance(cold, Verdict):
            self.verdicts.decide(cold)
            return None
        self.child, self._cgroup = cold.child, cold.cgroup
        return cold.run_dir

    def _open(self, loop: asyncio.AbstractEventLoop, child: ChildProcess, run_dir: str) -> Teardown:
        """The run's rooms around its child: channel, calls, teardown."""
        replied = self._replied = loop.create_future()
        if self._conn is None:
            self._conn = preopen.host_conn(self.run_id, self.limits.max_frame_bytes)
        channel = self._channel = ChildChannel(
            loop,
            child,
            self._conn,
            self.verdicts,
            on_event=self._handle,
            on_violation=self._protocol_violation,
            on_raw=self.output.raw,
        )
        channel.bytes_out += self._sent_ahead
        calls = self._calls = CallDispatcher(
            self.plan,
            channel,
            self.output,
            self.verdicts,
            t0=self._t0,
            on_call=self.on_call,
            on_violation=channel.violation,  # not the run's own: no cycle once closed
            trace=self.trace,
        )
        pool = self.plan.pool if self.pooled else None
        end = self._end = Teardown(
            loop,
            child,
            channel,
            calls,
            level=self.sandbox.level,
            run_dir=run_dir,
            cgroup=self._cgroup,
            recycle=pool.recycle_cgroup if pool is not None else None,
        )

        def exited(_: asyncio.Future[None]) -> None:
            if not replied.done():
                replied.set_result(None)

        # _wait awaits this one future: the reply, or the child's exit (one wakeup).
        end.exited.add_done_callback(exited)
        return end

    def _send_program(self, run_dir: str) -> None:
        assert self._channel is not None
        limits = self.limits
        options: dict[str, Any] = {
            "cwd": run_dir,
            "max_output_bytes": limits.max_output_bytes,
            "max_value_bytes": limits.max_value_bytes,
            "max_calls": limits.max_calls,
            "max_frame_bytes": limits.max_frame_bytes,
            "sandbox": self.sandbox.child_options(self.child.ids if self.child else None),
        }
        if self.debug is not None:
            options["debug"] = self.debug.options()
        code = self.program if self.plan.code is None else self.plan.code
        request = ExecuteRequest(code, options)
        if self._sent_ahead:  # the child has its bindings: the program is one frame
            self._channel.send(request)
        else:  # one write: the child wakes once, with its bindings and its program
            opened = OpenBindings(f"bindings-{self.run_id}", self.plan.registry.specs())
            self._channel.send_all([opened, request])
        if self.debug is not None:
            self.debug.attach(self)

    async def _wait(
        self, loop: asyncio.AbstractEventLoop, end: Teardown, started_at: str
    ) -> RunResult:
        """Until the reply (the result is complete: return, finish the child in a task) or
        the child's exit (settle, then return)."""
        assert self._replied is not None and self._channel is not None
        assert self._calls is not None
        try:
            # Done by the reply or by the exit (see _open); cancelled with the caller.
            await self._replied
        except asyncio.CancelledError:
            # The caller gave up: kill everything, wait until it is gone, then re-raise.
            self.verdicts.decide(interrupted("the run was cancelled by the caller"))
            await end.kill_and_settle()
            raise
        if not end.exited.done():
            # The program has replied: its result is complete. The child's way out (and a
            # namespace's) takes several process exits in a row; the caller does not wait
            # for them, the gateway does (aclose, run_sync).
            self._channel.drain_pipes()
            self.output.end_streams()
            # The kill a misbehaving child needs is armed there, off the way to the caller.
            self.finishing = end.finish_in_task(kill_after=min(self.limits.kill_grace_seconds, 0.5))
            await self._calls.cancel_all()  # their records are final in the result
            return self._result(started_at)
        self.output.end_streams()
        self._measure_memory()  # before its cgroup is emptied (and reused, or removed)
        await end.settle()
        return self._result(started_at)

    # -- events from the child -------------------------------------------------------------

    def _handle(self, event: Event) -> None:
        if type(event) is CallRequest:  # the hot path first
            self._events_seen += 1
            assert self._calls is not None
            self._calls.start(event)
        elif type(event) is ExecuteReply:
            self._on_reply(event)
        else:
            self._events_seen += 1
            if type(event) is Stream:
                self.output.stream(event.name, event.text)
            elif type(event) is DisplayData:
                self.output.display(event)
            elif type(event) is UpdateDisplayData:
                self.output.update_display(event)
            elif type(event) is ClearOutput:
                self.output.clear(event.wait)
            elif type(event) is ExecuteResult:
                verdict = self.output.result(event)
                if verdict is not None:
                    self.verdicts.decide(verdict)
            elif type(event) is ErrorOutput:
                self.output.error(event)
            elif type(event) is DebugReply:
                assert self.debug is not None  # the wire allows it only in a debugged run
                self.debug.on_child_reply(event)
            elif type(event) is DebugEvent:
                assert self.debug is not None
                self.debug.on_child_event(event)

    # -- what a debugged run gives its RunDebugger -----------------------------------------

    def send_debug(self, request: DebugRequest) -> None:
        """Send a debug request to the child (raises ProtocolError when it may not be)."""
        if self._channel is None or self.verdicts.settled:
            raise LocalProtocolError("the run is over")
        if self._channel.backlogged:
            # The child is not reading fd 3: what we send would only grow our buffer.
            raise LocalProtocolError("the program is not reading what the host sends it")
        self._channel.send(request)

    def pause_clock(self) -> None:
        """The program stopped at a line: the wall clock stands still until it resumes."""
        deadline = self._deadline
        if deadline is None or self._clock_left is not None or self._loop is None:
            return
        self._clock_left = max(0.0, deadline.when() - self._loop.time())
        deadline.cancel()
        if self.debug is not None and self._end is not None:
            # A stop is the program's word: a stopped clock has a ceiling of its own.
            ceiling = self.debug.max_pause_seconds
            self._pause_deadline = self._end.call_later(ceiling, self._on_pause_timeout, ceiling)

    def resume_clock(self) -> None:
        """The program runs again: the wall clock goes on with the time it had left."""
        left = self._clock_left
        if left is None or self._end is None or self.verdicts.settled:
            return
        self._clock_left = None
        if self._pause_deadline is not None:
            self._pause_deadline.cancel()
            self._pause_deadline = None
        self._deadline = self._end.call_later(left, self._on_timeout)

    def _on_pause_timeout(self, seconds: float) -> None:
        child = self.child
        if self.verdicts.settled or child is None or self._end is None:
            return
        self.verdicts.decide(pause_timeout(seconds))
        child.kill_all()

    def debug_violation(self, detail: str) -> None:
        self._protocol_violation(detail)

    def _on_reply(self, reply: ExecuteReply) -> None:
        refused = reply_verdict(reply, self.pooled, self._events_seen)
        if refused is not None:
            self._refuse(refused)
            return
        if self.verdicts.decided is None:
            self._measure()
            self.verdicts.accept_reply(reply)
            if self._replied is not None and not self._replied.done():
                self._replied.set_result(None)
                return  # _wait has the teardown arm the kill (off the way to the caller)
        # The child exits right after its reply; only a misbehaving one needs the kill.
        child, grace = self.child, min(self.limits.kill_grace_seconds, 0.5)
        assert child is not None and self._end is not None
        self._end.call_later(grace, child.signal_group, signal.SIGKILL)

    def _measure(self) -> None:
        """CPU time and peak memory of the run's processes as the host reads them from
        /proc when the reply arrives (the child may not be reaped for a while): the child's
        own figures are its word, not a measurement."""
        child = self.child
        assert child is not None
        root = child.pid if child.holds_pid() else None  # else a stranger's tree, maybe
        self._host_usage, busiest = measure_run(root, child.proc_fds, self._cgroup)
        self._busiest_cpu_s = max(self._busiest_cpu_s, busiest)
        self._measure_memory()

    def _measure_memory(self) -> None:
        """The run's memory cgroup's count: its peak (memfd, tmpfs, kernel buffers too), OOMs."""
        if self._cgroup is not None:
            self._memory = self._cgroup.memory_used()

    # -- the host's verdicts ---------------------------------------------------------------

    def _on_timeout(self) -> None:
        child = self.child
        if self.verdicts.settled or child is None or self._end is None:
            return
        self.verdicts.decide(wall_timeout(self.limits))
        child.signal_group(signal.SIGTERM)
        self._end.call_later(self.limits.kill_grace_seconds, child.signal_group, signal.SIGKILL)

    def _protocol_violation(self, detail: str) -> None:
        self._refuse(protocol(detail))

    def _refuse(self, verdict: Verdict) -> None:
        """End a run whose child sent what the host refuses: nothing more is read."""
        self.verdicts.decide(verdict)
        assert self.child is not None and self._channel is not None
        self.child.signal_group(signal.SIGKILL)
        self._channel.stop_control()

    # -- the result ------------------------------------------------------------------------

    def _result(self, started_at: str) -> RunResult:
        child, channel = self.child, self._channel
        ru = child.rusage if child is not None else None
        rusage = (ru.ru_utime, ru.ru_stime, ru.ru_maxrss) if ru is not None else None
        return build_result(
            Ending(
                self.verdicts.decided,
                self.verdicts.reply,
                limits=self.limits,
                returncode=child.returncode if child is not None else None,
                rusage=rusage,
                inherited_peak_bytes=child.inherited_maxrss_kib * 1024 if child else 0,
                host_usage=self._host_usage,
                memory=self._memory,
                busiest_cpu_s=self._busiest_cpu_s,
                value=self.output.value,
                result_output=self.output.result_output,
                # A copy: the teardown may still add to the run's own.
                outputs=tuple(self.output.outputs),
                stdout=self.collector.text("stdout"),
                stderr=self.collector.text("stderr"),
                output_cut=self.collector.cut_info(),
                calls=tuple(self.calls),
                hook_errors=tuple(self.hook_errors),
                bytes_in=channel.bytes_in if channel is not None else 0,
                bytes_out=channel.bytes_out if channel is not None else 0,
                warm=self.pooled,
                started=child is not None,
                level=self.sandbox.level,
                run_id=self.run_id,
                started_at=started_at,
                duration_s=time.monotonic() - self._t0,
                program=self.program,
                interpreter=self.plan.runtime.interpreter,
                language=self.plan.runtime.name,
                bindings=self.plan.registry.signatures(),
            )
        )
