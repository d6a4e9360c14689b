"""The call dispatcher: every binding call of one run, on one path.

A call goes through the same stages whoever answers it:

1. admit: the call id within ``max_calls`` (else the child's traffic is refused), a
   record, the binding looked up and the arguments bound to the host function's signature
   (the host is the authority: a frame written straight to fd 3 skips the child's check);
2. a slot: at most ``max_calls_in_flight`` calls run at once (more wait; fd 3 is not read
   while they do, see :meth:`~.channel.ChildChannel.pause_control`);
3. the policy, if the gateway has one;
4. the binding: a coroutine function (or one marked :func:`kernelgate.inline`) on the event
   loop, any other callable in a worker thread (it may block; the loop serves every run);
5. the answer: the result checked as JSON within ``max_frame_bytes``, the record completed,
   the ``on_call`` hook, the reply to the child.

The fast path is a property of this path, not a copy of it: a call that finds a slot free
and no policy runs stage 4 inside fd 3's read callback, and a value that is ready at once
(an inline binding) is answered there too, without a task. Anything that must be awaited
goes on in a task through the same stage functions. A sequential program's calls to
synchronous bindings run as a *chain* (:meth:`CallDispatcher._run_chain`): the thread that
answered one reads the next from fd 3 and admits it itself, with stage 1's checks and
record, in the first call's slot; anything else goes back to the loop.
"""

# long: one call's five stages and its hand-off to a worker thread are one path, read
# top to bottom; split, the hot path would cross modules for each call.

from __future__ import annotations

import asyncio
import collections
import contextvars
import functools
import inspect
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any

from kernelgate.model.constants import FRAME_OVERHEAD
from kernelgate.model.result import CallRecord, ErrorInfo
from kernelgate.model.text import safe_str
from kernelgate.wire.errors import LocalProtocolError
from kernelgate.wire.events import CallReply, CallRequest
from kernelgate.wire.messages import binding_label
from kernelgate.wire.values import NotJSONError, ValueTooLargeError, check_json

from .bindings import Binding
from .channel import AGAIN, ChildChannel
from .outcome import Verdicts
from .output import RunOutput
from .plan import CallListener, RunPlan
from .tracing import RunTrace
from .workers import workers_for

__all__ = ["CallDispatcher"]

#: How long a call answered from a worker thread may wait to be recorded when the child
#: sends nothing after its answer (it usually does at once: see CallDispatcher._done).
_SWEEP_S = 0.002
#: How long a binding thread that answered a call waits for the child's next one on fd 3
#: (:meth:`CallDispatcher._run_chain`) before it gives fd 3 back to the loop.
_HOLD_S = 0.001
#: The sweep's longest interval: while a slow binding runs and nothing has ended, the timer
#: backs off (doubling) to this, rather than waking the loop 500 times a second.
_SWEEP_MAX_S = 0.05


class _Refused(Exception):
    """A call the host refused before running it; ``ename`` is what the program sees."""

    def __init__(self, ename: str, message: str) -> None:
        super().__init__(message)
        self.ename = ename


class _ThreadOutcome:
    """What a synchronous binding gave in its worker thread, and who sends its answer:
    ``state`` goes from "pending" to "sent" (the thread wrote it) or "loop" (the loop
    will), decided under the dispatcher's ``_claim`` lock by whichever gets there first."""

    __slots__ = ("value", "error", "checked", "ended", "state", "chained")

    def __init__(self, chained: bool = False) -> None:
        self.chained = chained  # run by a chain (_run_chain), which holds its slot
        self.value: Any = None
        self.error: BaseException | None = None
        self.checked = False
        self.ended = 0.0
        self.state = "pending"


#: One synchronous call as its worker thread runs it: the caller's context, the record,
#: when it started, the binding and its arguments.
_ThreadCall = tuple[contextvars.Context, CallRecord, float, Binding, list[Any], dict[str, Any]]

#: Results that are never awaitable: ``inspect.isawaitable`` (ABC checks) is not asked.
_PLAIN = frozenset({type(None), bool, int, float, str, list, dict})


class _Batch:
    """The synchronous calls of one read of fd 3, run one after another by one worker
    thread (one wakeup of a thread for them all, one write of their answers). Calls
    ``next`` to ``end`` have not started; the loop's sweep moves them to threads of their
    own once the batch has run (since ``begun``) longer than a sweep: a binding that blocks
    holds up the calls behind it for a sweep at most, and calls of a millisecond or two
    each (I/O) do not all run one after another."""

    __slots__ = ("calls", "next", "end", "begun", "lock")

    def __init__(self, calls: list[_ThreadCall]) -> None:
        self.calls = calls
        self.next = 0
        self.end = len(calls)
        self.begun = 0.0
        self.lock = threading.Lock()

    def take(self) -> _ThreadCall | None:
        """In the worker thread: the next call to run (None: no more)."""
        with self.lock:
            if self.next >= self.end:
                return None
            if self.next == 0:
                self.begun = time.monotonic()
            self.next += 1
            return self.calls[self.next - 1]

    def stalled(self, now: float) -> list[_ThreadCall]:
        """On the loop: the calls not started yet of a batch that began before
        ``now - _SWEEP_S`` (taken out of the batch), else none."""
        with self.lock:
            if self.next == 0 or self.next >= self.end or now - self.begun < _SWEEP_S:
                return []
            rest = self.calls[self.next : self.end]
            self.end = self.next
            return rest


class _Slots:
    """A run's ``max_calls_in_flight`` slots, with ``asyncio.Semaphore``'s rule (first come,
    first served: a call that finds calls waiting for a slot waits behind them), taken on the
    read callback's path without a coroutine (the semaphore's ``acquire`` builds, runs and
    finishes one per call) and handed by :meth:`release` straight to the next waiter."""

    __slots__ = ("free", "_waiters")

    def __init__(self, n: int) -> None:
        self.free = n
        self._waiters: collections.deque[asyncio.Future[None]] = collections.deque()

    def locked(self) -> bool:
        """No slot can be taken now (none is free, or calls wait for one)."""
        return self.free <= 0 or bool(self._waiters)

    def take(self) -> bool:
        """Take a free slot without waiting (False: none, or calls are waiting)."""
        if self.free > 0 and not self._waiters:
            self.free -= 1
            return True
        return False

    async def acquire(self) -> None:
        if self.take():
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        try:
            await fut
        except BaseException:
            if fut.done() and not fut.cancelled():
                self.release()  # handed a slot just as it was cancelled: the next one's
            else:
                try:
                    self._waiters.remove(fut)
                except ValueError:
                    pass
            raise

    def release(self) -> None:
        waiters = self._waiters
        while waiters:
            fut = waiters.popleft()
            if not fut.done():  # a cancelled waiter is skipped
                fut.set_result(None)  # the slot passes to it
                return
        self.free += 1


class CallDispatcher:
    """Admits, runs and answers one run's binding calls (see the module's docstring).

    ``on_violation(detail)`` is told of a call the child could not have sent honestly;
    once ``verdicts`` is settled, answers are recorded but no longer sent.
    """

    def __init__(
        self,
        plan: RunPlan,
        channel: ChildChannel,
        output: RunOutput,
        verdicts: Verdicts,
        *,
        t0: float,
        on_call: CallListener | None,
        on_violation: Callable[[str], None],
        trace: RunTrace | None = None,
    ) -> None:
        self._loop = asyncio.get_running_loop()
        # The run's context, for what a worker thread has the loop do (records, on_call):
        # not the thread's own.
        self._context = contextvars.copy_context()
        self._registry = plan.registry
        self._limits = plan.limits
        self._policy = plan.policy
        self._handler = plan.call_handler
        self._executor = plan.executor
        # This run's lane onto the gateway's threads: the other runs' calls cannot take
        # them all from it (workers.py).
        self._lane = workers_for(plan.executor).lane() if plan.executor is not None else None
        # Synchronous calls admitted from the current read of fd 3, not yet handed to a
        # thread (ChildChannel.after_events hands them over as one batch), and the batches
        # threads run now (under _claim).
        self._pending: list[_ThreadCall] = []
        self._batches: list[_Batch] = []
        self._channel = channel
        self._output = output
        self._verdicts = verdicts
        self._t0 = t0
        self._on_call = on_call
        self._on_violation = on_violation
        self._max_calls = plan.limits.max_calls
        self._max_in_flight = plan.limits.max_calls_in_flight
        self._result_limit = plan.limits.max_frame_bytes - FRAME_OVERHEAD
        self._slots = _Slots(self._max_in_flight)
        # Nothing to consult before the binding: a call with a free slot starts at once.
        self._direct = plan.policy is None and plan.call_handler is None
        self._tasks: set[asyncio.Task[None]] = set()
        # Synchronous bindings started from the read callback run in a worker thread with
        # no task around them (see _in_thread_now): how many run now, and whether the run
        # is over (their late answers are then neither recorded nor sent).
        self._threads = 0
        self._over = False
        # A chain (see _run_chain): when its thread began the binding it runs now (0.0:
        # none runs, it waits for the child's next call or has ended).
        self._chain_busy = 0.0
        self._lone = 0  # lone calls handed over in a row (_hand_over)
        self._claim = threading.Lock()  # who answers a thread's call (_ThreadOutcome)
        # Calls whose binding ended in a worker thread, for the loop to record. The thread
        # puts its call here before it writes the answer; whatever the child sends after
        # its answer is read after this queue is emptied (ChildChannel.before_read), so
        # the record comes before it. A thread that answered needs no wakeup of the loop
        # (a self-pipe write, a loop turn: about a fifth of the host's CPU per call): the
        # child's next frame, output or exit wakes it, or else _SWEEP_S later a timer.
        self._done: collections.deque[tuple[CallRecord, float, _ThreadOutcome]] = (
            collections.deque()
        )
        self._sweep: asyncio.TimerHandle | None = None
        self._sweep_s = _SWEEP_S
        channel.before_read = self._settle_threads
        channel.after_events = self._hand_over
        self.calls: list[CallRecord] = []
        #: Failures of the host's own hooks (on_call), kept for the result's note.
        self.hook_errors: list[str] = []
        # Traced, each call is admitted inside its span (kernelgate.gateway.tracing): this
        # instance's start is wrapped, so a run without tracing pays nothing for it.
        self._trace = trace
        if trace is not None:
            self.start = functools.partial(trace.admit, self.start)  # type: ignore[method-assign]

    # -- 1. admit ------------------------------------------------------------------------

    def start(self, request: CallRequest) -> None:
        """Take a call from the child: answer it now, or start it."""
        if request.call_id >= self._max_calls:
            # The child refuses calls past max_calls itself (and numbers calls from 0), so
            # this frame was written by the program: stop reading and recording its flood.
            self._on_violation(
                f"binding call number {request.call_id + 1} is past max_calls="
                f"{self._max_calls}, which the child refuses itself"
            )
            return
        now = time.monotonic()
        record = self._record(request, now)
        binding = self._registry.lookup(record.namespace, record.name)
        if binding is None:
            label = binding_label(record.namespace, record.name)
            self._answer(record, now, error=LookupError(f"there is no binding {label}"))
            return
        # Neither the policy nor the binding may see arguments that do not fit the
        # signature or the type hints (Signature.bind: about 2 us per call,
        # docs/benchmarks.md). The binding gets them converted (a date, a dataclass...);
        # the record and the policy keep the JSON the program sent.
        try:
            args, kwargs = binding.load_arguments(record.args, record.kwargs)
        except TypeError as exc:
            self._answer(record, now, error=exc)
            return
        if self._direct and not self._slots.locked() and not self._channel.backlogged:
            self._begin(record, binding, args, kwargs)
        else:
            self._spawn(self._queued(record, binding, args, kwargs), None)

    # -- 2. and 3. a slot, the policy ----------------------------------------------------

    async def _queued(
        self, record: CallRecord, binding: Binding, args: list[Any], kwargs: dict[str, Any]
    ) -> None:
        await self._slots.acquire()
        try:
            started = time.monotonic()
            record.start_s = started - self._t0
            pending: Any = None
            error: BaseException | None = None
            try:
                if self._policy is not None:
                    await self._check_policy(record)
                if self._handler is not None:
                    pending = self._handler(binding, args, kwargs)
                else:
                    pending = self._invoke(binding, args, kwargs)
            except asyncio.CancelledError:
                raise
            except BaseException as exc:  # SystemExit from a policy must not end the host
                error = exc
            await self._complete(record, started, pending, error)
        finally:
            self._slots.release()

    async def _check_policy(self, record: CallRecord) -> None:
        assert self._policy is not None
        try:
            verdict = self._policy(record.namespace, record.name, record.args, record.kwargs)
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

    # -- 4. the binding ------------------------------------------------------------------

    def _begin(
        self, record: CallRecord, binding: Binding, args: list[Any], kwargs: dict[str, Any]
    ) -> None:
        """Stage 4 in the read callback: answer a value that is ready at once, else await
        it in a task (which takes its slot)."""
        started = time.monotonic()
        if not (binding.is_async or binding.inline) and self._lane is not None:
            self._in_thread_now(record, started, binding, args, kwargs)
            return
        try:
            pending = self._invoke(binding, args, kwargs)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # SystemExit from a binding must not end the host
            self._answer(record, started, error=exc)
            return
        if type(pending) in _PLAIN or not inspect.isawaitable(pending):
            self._answer(record, started, value=pending)
            return
        self._spawn(self._complete(record, started, pending, None, self._slots), pending)

    def _in_thread_now(
        self,
        record: CallRecord,
        started: float,
        binding: Binding,
        args: list[Any],
        kwargs: dict[str, Any],
    ) -> None:
        """Stage 4 for a synchronous binding on the fast path: in a worker thread, with
        its slot, answered from that thread and recorded by one callback on the loop (no
        task and no asyncio future per call: each is a turn of the loop more on the
        call's path, and the answer does not wait for the loop to wake). Held until the
        rest of this read of fd 3 is admitted (:meth:`_hand_over`)."""
        if not self._slots.take():
            self._spawn(self._queued(record, binding, args, kwargs), None)
            return
        context = contextvars.copy_context()  # as asyncio.to_thread: the caller's context
        self._pending.append((context, record, started, binding, args, kwargs))
        self._threads += 1

    def _hand_over(self) -> None:
        """After a read of fd 3 (ChildChannel.after_events): the synchronous calls it
        admitted go to one worker thread, together, and the sweep is due soon."""
        if self._pending:
            calls, self._pending = self._pending, []
            # Lent from the second lone call in a row on: a run of one call (or one whose
            # calls are gathered) does not pay for a thread's hold and its hand-back.
            self._lone = self._lone + 1 if len(calls) == 1 else 0
            if (
                self._lone > 1
                and self._threads == 1
                and not self._tasks
                and not self._batches
                and self._direct
                and self._trace is None
                and self._lane is not None
                and self._channel.lend()
            ):
                self._submit_chain(calls[0])
            else:
                self._submit(calls)
            self._sweep_s = _SWEEP_S  # calls just started: they may end soon
            sweep = self._sweep
            if sweep is None or sweep.when() > self._loop.time() + 4 * _SWEEP_S:
                # Due soon: the calls batched behind these (and answers held behind them)
                # must not wait for a timer that backed off while a slow call ran (not
                # every time: between calls the timer runs 2-4 ms apart, and moving it
                # costs).
                if sweep is not None:
                    sweep.cancel()
                self._sweep = self._loop.call_later(_SWEEP_S, self._swept)

    def _submit(self, calls: list[_ThreadCall]) -> None:
        batch = None
        if len(calls) == 1:  # nothing behind it for the sweep to split off: no _Batch
            job = functools.partial(self._run_lone, calls[0])
        else:
            batch = _Batch(calls)
            with self._claim:
                self._batches.append(batch)
            job = functools.partial(self._run_batch, batch)
        try:
            assert self._lane is not None
            self._lane.submit(job)
        except RuntimeError as exc:  # the executor is shut down: the gateway is closing
            if batch is not None:
                with self._claim:
                    self._batches.remove(batch)
            for _context, record, started, _fn, _args, _kwargs in calls:
                self._threads -= 1
                self._slots.release()
                self._answer(record, started, error=exc)

    def _submit_chain(self, call: _ThreadCall) -> None:
        """:meth:`_submit` of a lone call whose thread, once it has answered, reads the
        child's next call from fd 3 itself (lent: :meth:`ChildChannel.lend`)."""
        base = contextvars.copy_context()  # each call of the chain runs in a copy of it
        # As for a running call: a job that waits for a thread longer than a sweep does
        # not keep the child's other frames unread (_swept takes fd 3 back).
        self._chain_busy = time.monotonic()
        try:
            assert self._lane is not None
            self._lane.submit(functools.partial(self._run_chain, call, base))
        except RuntimeError as exc:  # the executor is shut down: the gateway is closing
            self._channel.give_back()
            _context, record, started, _fn, _args, _kwargs = call
            self._threads -= 1
            self._slots.release()
            self._answer(record, started, error=exc)

    def _run_chain(self, call: _ThreadCall, base: contextvars.Context) -> None:
        """In a worker thread: the call, then, while fd 3 is lent to this thread, each
        next call the child sends that :meth:`_take` admits here, one after another (a
        sequential program's calls, without a wakeup of the loop and a hand-over to a
        thread per call). The chain holds the first call's slot and thread count until
        the loop ends it (:meth:`_chain_ended`); it ends once no call came for
        ``_HOLD_S``, or anything else did, or an answer is not sent from here, or the loop
        took fd 3 back (the run ended, the child exited, or a binding ran longer than a
        sweep: calls sent meanwhile are read and started by the loop then)."""
        channel, lane = self._channel, self._lane
        assert lane is not None  # a chain is made only with a lane (_hand_over)
        try:
            next_call: _ThreadCall | None = call
            while next_call is not None and not self._over:
                self._chain_busy = time.monotonic()
                ran = [self._run_one(*next_call, chained=True)]
                self._chain_busy = 0.0
                if not self._send_from_thread(ran):
                    break  # the loop answers it
                if lane.others_waiting():
                    break  # the thread is another run's turn (workers.py's fairness)
                # The next call within _HOLD_S, whole: a child that sends a frame a byte
                # at a time holds this thread no longer than one that sends nothing.
                take = functools.partial(self._take, base)
                deadline = time.monotonic() + _HOLD_S
                while (next_call := channel.read_lent(deadline - time.monotonic(), take)) is AGAIN:
                    pass
        finally:
            self._chain_busy = 0.0
            try:
                self._loop.call_soon_threadsafe(self._chain_ended, context=self._context)
            except RuntimeError:
                pass  # the loop is closed: nobody waits for the answers

    def _take(self, base: contextvars.Context, event: Any) -> _ThreadCall | None:
        """In a chain's thread, under the channel's lock: admit the call ``event`` as
        :meth:`start` would on the fast path to a worker thread, or None (not a call, or
        one that :meth:`start` answers otherwise: the loop hands it on as ever)."""
        if type(event) is not CallRequest or self._over or event.call_id >= self._max_calls:
            return None
        binding = self._registry.lookup(event.namespace, event.name)
        if binding is None or binding.is_async or binding.inline:
            return None
        try:
            args, kwargs = binding.load_arguments(event.args, event.kwargs)
        except TypeError:
            return None  # the loop refuses it, with the same words
        now = time.monotonic()
        return (base.copy(), self._record(event, now), now, binding, args, kwargs)

    def _record(self, request: CallRequest, now: float) -> CallRecord:
        """The record of an admitted call, in the run's calls (on the loop, or in a chain's
        thread under the channel's lock: the loop reads fd 3 in neither case)."""
        record = CallRecord(
            id=request.call_id,
            namespace=request.namespace,
            name=request.name,
            args=request.args,
            kwargs=request.kwargs,
            start_s=now - self._t0,
        )
        self.calls.append(record)
        return record

    def _chain_ended(self) -> None:
        """On the loop: a chain's thread stopped: its calls recorded, its slot freed, and
        fd 3 read here again (after what the thread read and did not take)."""
        self._settle_threads()
        self._threads -= 1
        self._slots.release()
        self._channel.give_back()

    def _run_batch(self, batch: _Batch) -> None:
        """In a worker thread: a batch's calls, one after another, then their answers in
        one write (those the loop did not claim meanwhile), then the loop woken if it
        must do anything for them (see :meth:`_send_from_thread`)."""
        ran: list[tuple[CallRecord, _ThreadOutcome]] = []
        # Once the run is over, its calls not started yet are not started: nobody would
        # record or answer them (its asynchronous calls are cancelled likewise).
        while not self._over and (call := batch.take()) is not None:
            ran.append(self._run_one(*call))
        with self._claim:
            self._batches.remove(batch)
        self._ran(ran)

    def _run_lone(self, call: _ThreadCall) -> None:
        """In a worker thread: :meth:`_run_batch` of a batch of one."""
        self._ran([] if self._over else [self._run_one(*call)])

    def _ran(self, ran: list[tuple[CallRecord, _ThreadOutcome]]) -> None:
        if self._send_from_thread(ran) and not self._tasks:
            return  # answered, and nothing waits on the loop for them: see _done
        try:
            self._loop.call_soon_threadsafe(self._settle_threads, context=self._context)
        except RuntimeError:
            pass  # the loop is closed: nobody waits for the answers

    def _run_one(
        self,
        context: contextvars.Context,
        record: CallRecord,
        started: float,
        binding: Binding,
        args: list[Any],
        kwargs: dict[str, Any],
        chained: bool = False,
    ) -> tuple[CallRecord, _ThreadOutcome]:
        """In the worker thread: the binding, its result checked, the call queued for the
        loop to record (before the answer leaves: the loop records it before it reads
        anything the child sends after its answer)."""
        outcome = _ThreadOutcome(chained)
        try:
            outcome.value = context.run(binding.fn, *args, **kwargs)
        except BaseException as exc:  # SystemExit from a binding must not end the host
            outcome.error = exc
        outcome.ended = time.monotonic()
        value = outcome.value
        if outcome.error is not None or type(value) in _PLAIN or not inspect.isawaitable(value):
            try:
                outcome.value, outcome.error = self._checked(record, value, outcome.error, binding)
            except BaseException as exc:  # a conversion that failed otherwise than it should
                outcome.value, outcome.error = None, exc
            outcome.checked = True
        self._done.append((record, started, outcome))
        return record, outcome

    def _send_from_thread(self, ran: list[tuple[CallRecord, _ThreadOutcome]]) -> bool:
        """In the worker thread: write the checked answers the loop did not claim, in one
        write (True: all of them were sent from here, nothing is left for the loop but
        recording them)."""
        with self._claim:
            mine = [(r, o) for r, o in ran if o.checked and o.state == "pending"]
            sent = [False] * len(mine)
            if mine and not self._over and not self._verdicts.settled:
                try:
                    replies = [_reply(r.id, o.value, o.error) for r, o in mine]
                    sent = self._channel.send_from_thread(replies)
                except BaseException:  # nothing was sent: the loop answers
                    sent = [False] * len(mine)
            for (_record, outcome), ok in zip(mine, sent, strict=True):
                outcome.state = "sent" if ok else "loop"
        return len(mine) == len(ran) and all(sent)

    def _settle_threads(self) -> None:
        """On the loop: record the calls whose binding ended in a worker thread (called
        when a thread wakes the loop, before the channel reads anything, and by the
        sweep timer)."""
        done = self._done
        while done:
            try:
                self._thread_done(*done.popleft())
            except Exception as exc:  # as a loop callback's: reported, the caller goes on
                self._loop.call_exception_handler(
                    {"message": "recording a binding call failed", "exception": exc}
                )

    def _swept(self) -> None:
        """The sweep timer: settle what the threads left, and again while any run."""
        self._sweep = None
        now = time.monotonic()
        with self._claim:
            batches = list(self._batches)
        for batch in batches:
            for call in batch.stalled(now):  # each in a thread of its own
                self._submit([call])
        busy = self._chain_busy
        if busy and now - busy >= _SWEEP_S:
            self._channel.revoke()  # calls sent meanwhile are read and started here
        if self._done or self._channel.lent:  # a chain answers calls: not backed off
            self._settle_threads()
            self._sweep_s = _SWEEP_S
        else:
            self._sweep_s = min(self._sweep_s * 2, _SWEEP_MAX_S)
        if self._threads and not self._over:
            self._sweep = self._loop.call_later(self._sweep_s, self._swept)

    def _thread_done(self, record: CallRecord, started: float, outcome: _ThreadOutcome) -> None:
        """On the loop: record (and answer, unless its thread did) a call whose binding
        returned or raised in a worker thread."""
        if not outcome.chained:  # a chain's slot is freed once it ends (_chain_ended)
            self._threads -= 1
            self._slots.release()
        if self._channel.paused and len(self._tasks) + self._threads <= self._max_in_flight:
            self._channel.resume_control()
        if self._over:
            return  # the run ended while it ran: its record is final without it
        with self._claim:
            if outcome.state == "pending":
                outcome.state = "loop"
            sent = outcome.state == "sent"
        value, error = outcome.value, outcome.error
        if not outcome.checked:  # a plain function's coroutine
            self._spawn(self._complete(record, started, value, None, self._slots), value)
        else:
            ended = outcome.ended if sent else None
            self._answer(record, started, value, error, checked=True, sent=sent, ended=ended)

    def _invoke(self, binding: Binding, args: list[Any], kwargs: dict[str, Any]) -> Any:
        """Call the binding: a coroutine function or an inline binding here, on the loop
        (its value, or the awaitable it returned); anything else in a worker thread (a
        synchronous binding doing I/O would stall every run on this loop, and a run's wall
        clock with it)."""
        if binding.is_async or binding.inline:
            return binding.fn(*args, **kwargs)
        return self._in_thread(binding.fn, args, kwargs)

    async def _in_thread(
        self, fn: Callable[..., Any], args: list[Any], kwargs: dict[str, Any]
    ) -> Any:
        context = contextvars.copy_context()  # as asyncio.to_thread: the caller's context
        job = functools.partial(context.run, fn, *args, **kwargs)
        if self._lane is None:
            value = await self._loop.run_in_executor(self._executor, job)
        else:
            # The same threads and lane as the batches, in the same order: a queued call
            # never waits in the executor's queue behind threads the batches keep parked.
            value = await self._lane.call(self._loop, job)
        if inspect.isawaitable(value):  # a plain function that returned a coroutine
            value = await value
        return value

    async def _complete(
        self,
        record: CallRecord,
        started: float,
        pending: Any,
        error: BaseException | None,
        slot: _Slots | None = None,
    ) -> None:
        """Await the binding's value (in ``slot``, when given), then answer. One
        coroutine per call on the fast path, as direct as the binding allows."""
        if slot is not None:
            await slot.acquire()
        try:
            value: Any = pending
            if error is None and inspect.isawaitable(pending):
                try:
                    value = await pending
                except asyncio.CancelledError:
                    raise
                except BaseException as exc:  # SystemExit from a binding must not end the host
                    value, error = None, exc
            self._answer(record, started, value, error)
        finally:
            if slot is not None:
                slot.release()

    def _spawn(self, coro: Coroutine[Any, Any, None], pending: Any) -> None:
        task = self._loop.create_task(coro)
        self._tasks.add(task)
        binding_coro = pending if inspect.iscoroutine(pending) else None
        task.add_done_callback(functools.partial(self._call_done, binding_coro))  # one, not two
        if len(self._tasks) + self._threads > self._max_in_flight:
            self._channel.pause_control()

    def _call_done(
        self, binding_coro: Coroutine[Any, Any, Any] | None, task: asyncio.Task[None]
    ) -> None:
        self._tasks.discard(task)
        if binding_coro is not None:
            # A task cancelled before its first step (the run ended) never awaits the
            # binding's coroutine: close it, or Python warns "never awaited" on the host.
            binding_coro.close()
        if self._channel.paused and len(self._tasks) + self._threads <= self._max_in_flight:
            self._channel.resume_control()

    # -- 5. the answer -------------------------------------------------------------------

    def _answer(
        self,
        record: CallRecord,
        started: float,
        value: Any = None,
        error: BaseException | None = None,
        *,
        checked: bool = False,
        sent: bool = False,
        ended: float | None = None,
    ) -> None:
        """Check a call's result (unless ``checked``), record it, and send the child its
        answer (unless it was ``sent`` from the binding's thread: the same answer, when
        the binding had ``ended``): once it reads its answers again, if it had stopped
        (back-pressure). Recorded at once all the same: a binding that ran is in the
        record though the run ends before the child reads its answer."""
        if not checked:
            value, error = self._checked(record, value, error)
        ename = evalue = ""
        if error is None:
            record.ok = True
            record.value = value
        else:
            ename, evalue = _error_fields(error)
            record.ok = False
            record.error = ErrorInfo(ename, evalue)
        record.duration_s = (time.monotonic() if ended is None else ended) - started
        self._output.place_call(record)
        if sent or self._verdicts.settled:
            pass  # sent from its thread, or the run is over: nobody answers
        else:
            # Built only here: an answer its thread sent needs no second CallReply.
            ok = error is None
            reply = CallReply(record.id, ok, value if ok else None, ename=ename, evalue=evalue)
            if self._channel.backlogged:
                self._spawn(self._send_later(record, reply), None)
            else:
                self._send(record, reply)
        if self._trace is not None:
            self._trace.call_ended(record)
        if self._on_call is not None:
            try:
                self._on_call(record)
            except BaseException as exc:  # a listener of the host's must not end the run
                # The host's own hook failed: the program is not to blame, and the run goes
                # on; say so where the host's developer will look.
                self.hook_errors.append(f"on_call: {type(exc).__name__}: {safe_str(exc, 500)}")

    def _send(self, record: CallRecord, reply: CallReply) -> None:
        try:
            self._channel.send(reply)
        except LocalProtocolError as exc:  # passed the checks, yet cannot be encoded: it
            # must still be answered, or the program would wait for it forever
            text = f"the result cannot be sent: {exc}"
            record.ok, record.value, record.error = False, None, ErrorInfo("TypeError", text)
            self._channel.send(CallReply(record.id, False, ename="TypeError", evalue=text))

    async def _send_later(self, record: CallRecord, reply: CallReply) -> None:
        await self._channel.drained()
        if not self._verdicts.settled:
            self._send(record, reply)

    def _checked(
        self,
        record: CallRecord,
        value: Any,
        error: BaseException | None,
        binding: Binding | None = None,
    ) -> tuple[Any, BaseException | None]:
        """A binding's result as the answer carries it: converted by its return
        annotation, then checked as JSON within the frame (any thread: reads only).
        ``binding``: the call's, when the caller has it (else it is looked up)."""
        # No second signature or JSON check of the arguments here: the child checked them
        # for good messages, the wire parsed them as strict JSON, and a forged call with
        # arguments that do not fit was refused on admission, as a ToolError.
        if error is None:
            if binding is None:
                binding = self._registry.lookup(record.namespace, record.name)
            if binding is not None and binding.types is not None:
                try:
                    value = binding.dump_result(value)  # a dataclass, a date... as JSON
                except TypeError as exc:
                    error = exc
        if error is None:
            error = self._check_result(record, value)
        return value, error

    def _check_result(self, record: CallRecord, value: Any) -> BaseException | None:
        try:
            # Named only when refused (0.6 us per call).
            check_json(value, "result", self._result_limit)
        except NotJSONError:
            try:
                check_json(value, f"{binding_label(record.namespace, record.name)}() result")
            except NotJSONError as exc:
                return TypeError(f"the binding returned a value that is not JSON: {exc}")
            raise  # unreachable: the same value, the same check
        except ValueTooLargeError:
            return ValueError(
                f"the binding's result is over max_frame_bytes="
                f"{self._limits.max_frame_bytes} bytes as JSON"
            )
        return None

    # -- the end -------------------------------------------------------------------------

    def cancel_now(self) -> None:
        """Cancel every call still running (without waiting for them)."""
        self._pending.clear()  # admitted, never started: they are not started now
        # A chain's thread admits no call once this returns (it takes them under the
        # channel's lock, which revoke takes).
        self._channel.revoke()
        self._settle_threads()  # answered already: recorded, whatever ends the run
        self._over = True
        if self._lane is not None:
            self._lane.close()  # its calls waiting for a thread: dropped, not held till one is free
        if self._sweep is not None:
            self._sweep.cancel()
            self._sweep = None
        for task in self._tasks:
            task.cancel()

    async def cancel_all(self) -> None:
        """End the calls still running: the program is over, nobody awaits them."""
        self.cancel_now()
        tasks = list(self._tasks)  # cancelled, those _settle_threads started included
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)


def _reply(call_id: int, value: Any, error: BaseException | None) -> CallReply:
    """The answer to call ``call_id``: its checked value, or the error as the program
    sees it (its type name, or a refusal's own name, and its text)."""
    if error is None:
        return CallReply(call_id, True, value)
    ename, evalue = _error_fields(error)
    return CallReply(call_id, False, ename=ename, evalue=evalue)


def _error_fields(error: BaseException) -> tuple[str, str]:
    """A failed call's ename and evalue: its type name, or a refusal's own name, and its
    text."""
    ename = error.ename if isinstance(error, _Refused) else type(error).__name__
    return ename, safe_str(error, 4096)
