"""A stopped program stuck in its own code: the reader thread answers for it.

While the program is stopped, its main thread serves the host's requests, and some of them
run the program's code (reprs, ``evaluate``, display methods, an exception's ``__str__``);
so do the program's own signal handlers, which run on the stopped thread.
:class:`~.debugvalues.Deadline` interrupts that code when its time is up, and again at each
of its bytecodes, and the reader thread sends real signals to wake a blocking call
(:meth:`~.debugvalues.Deadline.rescue`). Code can still refuse all of it: take or ignore
the signals, block them, wait in a call no signal ends (``signal.sigwait``). Then the main
thread answers nothing more, and the host would hear only timeouts.

So the reader thread watches the main thread's time (:meth:`StuckWatch.watch`): once the
request being served is late by :data:`STUCK_GRACE`, or the call of the program's code it
runs by :data:`CALL_GRACE`, or a queued request waited :data:`PICKUP_SECONDS` for a main
thread that does not take it, the reader answers it, and every later one while the main
thread is away, itself:

- the requests a stop answers fail, saying where the program is stuck and what to do;
- ``threads``, ``setBreakpoints``, ``setExceptionBreakpoints`` and ``pause`` are answered as
  usual;
- a resume (``continue``, ``next``, ``stepIn``, ``stepOut``) is accepted: the host hears
  ``continued`` and its wall clock runs again (the program is running its own code), and
  the main thread resumes with it if that code ever returns. A stuck program thus meets
  ``wall_seconds`` after a continue (a disconnect continues too), ``max_pause_seconds``
  without one; an interrupt ends it as always.

Each request is answered once: the main thread's late reply to a request the reader answered
is dropped (a second reply would be a protocol violation, which ends the run). Imported
only in a debugged run; stdlib only.

>>> sorted(RESUMES)
['continue', 'next', 'stepIn', 'stepOut']
"""

from __future__ import annotations

import _thread
import builtins
import queue
import time
from typing import Any

from kernelgate.wire.events import DebugRequest

from .debugstop import STOPPED_ONLY
from .debugvalues import Deadline

__builtins__ = dict(builtins.__dict__)  # type: ignore[assignment]  # see .debugvalues

__all__ = ["StuckWatch", "STUCK_GRACE", "CALL_GRACE", "PICKUP_SECONDS", "RESUMES"]

#: How late a request may be (beyond its own time) before the reader answers it.
STUCK_GRACE = 1.5
#: How late one call of the program's code may be (the rescue signals sent meanwhile did not
#: bring it back) before the reader answers the request that runs it.
CALL_GRACE = 2.5
#: How long a queued request may wait for the stopped main thread to take it (it normally
#: takes one at once: it waits for nothing else).
PICKUP_SECONDS = 3.0
#: The requests that resume the program.
RESUMES = frozenset({"continue", "next", "stepIn", "stepOut"})

_INF = float("inf")
_monotonic = time.monotonic
_allocate_lock = _thread.allocate_lock
_Empty = queue.Empty


class StuckWatch:
    """The debugger's watch over its stopped main thread (a part of
    :class:`~.debugger.Debugger`: its ``lock`` guards the stop, ``requests`` is the main
    thread's queue)."""

    lock: Any
    stopped: bool
    requests: queue.SimpleQueue[DebugRequest]
    deadline: Deadline
    main_ident: int

    def _reply(
        self,
        request: DebugRequest,
        success: bool,
        body: dict[str, Any] | None = None,
        message: str = "",
    ) -> None:
        raise NotImplementedError

    def _answer_running(self, request: DebugRequest) -> None:
        raise NotImplementedError

    def _init_stuck(self, rescue_with: tuple[tuple[int, Any], ...]) -> None:
        """``rescue_with``: the signals whose handler, while the debugger's, interrupts the
        program's late code (:meth:`Deadline.rescue`)."""
        self._rescue_with = rescue_with
        # Who answers the request the main thread serves: it, or the reader once it is
        # late. Taken inside ``lock`` by the reader. The main thread holds it only over
        # bytecodes that call nothing: no signal handler of the program's (which could
        # hang) runs while it holds it.
        self._claims = _allocate_lock()
        self._serving: DebugRequest | None = None
        self._answered: set[int] = set()  # seqs the reader answered for the main thread
        # When the main thread must next be heard from, since when it is away, and (while
        # the reader answers for it) where it is stuck. The main thread sets them without
        # ``lock`` (single stores): it never holds ``lock`` where the program's code runs.
        self._due = _INF
        self._since = 0.0
        self.stuck: str | None = None

    # -- the main thread -------------------------------------------------------------------

    def _queue(self, request: DebugRequest) -> None:
        """For the stopped main thread (the reader, holding ``lock``)."""
        self.requests.put(request)
        if self._due == _INF:
            self._since = now = _monotonic()
            self._due = now + PICKUP_SECONDS

    def _taking(self, request: DebugRequest, seconds: float) -> None:
        """The main thread serves ``request``, with ``seconds`` of the program's code."""
        self._since = now = _monotonic()
        self._due = now + seconds + STUCK_GRACE
        self._serving = request
        self.stuck = None  # back, if it was away

    def _back(self) -> None:
        """The main thread waits for requests again (a stop begins, a request is done, or it
        woke with nothing to do)."""
        self._serving = None
        self.stuck = None
        if self.requests.empty():
            self._due = _INF
        else:
            self._since = now = _monotonic()
            self._due = now + PICKUP_SECONDS

    def _claim(self, request: DebugRequest) -> bool:
        """The main thread is about to answer ``request``: False if the reader did already
        (the late reply must not go out)."""
        seq = request.seq
        with self._claims:  # no call in here (see _init_stuck)
            taken = seq in self._answered
            if not taken and self._serving is request:
                self._serving = None
        if taken:
            self._answered.discard(seq)
        return not taken

    # -- the reader thread -----------------------------------------------------------------

    def watch(self) -> float:
        """From the reader thread, whenever it would wait for the host: rescue the program's
        late code, and answer for a stopped main thread that is stuck. The seconds until
        it should be called again."""
        wait = self.deadline.rescue(self.main_ident, self._rescue_with)
        if not self.stopped or self.stuck is not None:
            return wait
        with self.lock:
            now = _monotonic()
            if not self.stopped or self.stuck is not None:
                return wait
            if self._due == _INF and self._serving is None and not self.requests.empty():
                self._due = now + PICKUP_SECONDS  # queued as the main thread came back
            due = min(self._due, self.deadline.call_end + CALL_GRACE)
            if now < due:
                return min(wait, due - now)
            self._declare_stuck(now)
        return wait

    def _declare_stuck(self, now: float) -> None:
        """The main thread is late: answer what it owes (the caller holds ``lock``)."""
        what, elapsed = self.deadline.describe()
        with self._claims:
            request = self._serving
            if request is not None:
                self._answered.add(request.seq)
                self._serving = None
        if request is None and self.requests.empty():
            return  # it answered just now: not stuck
        if what:
            self._since = now - elapsed
        if request is not None:
            what = f"{what or 'code'} the debugger ran for {request.command}"
        else:
            what = what or "a signal handler of its own, or other code it runs while stopped"
        self.stuck = what
        if request is not None:
            self._reply(request, False, message=self._stuck_message(request.command))
        waiting = []
        while True:
            try:
                waiting.append(self.requests.get_nowait())
            except _Empty:
                break
        for queued in waiting:
            self._answer_stuck(queued)

    def _stuck_message(self, command: str) -> str:
        return (
            f"{command} cannot be answered: the stopped program is stuck in its own code "
            f"({self.stuck}), which has not returned for {_monotonic() - self._since:.0f} s "
            "and ignores every interruption. Interrupt the run (or restart it); continue "
            "lets the program go on from there if that code ever returns"
        )

    def _answer_stuck(self, request: DebugRequest) -> None:
        """Answer for the stuck main thread (the caller holds ``lock``)."""
        command = request.command
        if not self.stopped:  # a resume was accepted: the program runs (its own code)
            self._answer_running(request)
        elif command in RESUMES:
            with self._claims:
                self._answered.add(request.seq)
            self.requests.put(request)  # the main thread resumes so if it ever comes back
            self.stopped = False
            body = {"allThreadsContinued": True} if command == "continue" else {}
            self._reply(
                request,
                True,
                body,
                message=(
                    f"the program is stuck in its own code ({self.stuck}): it goes on from "
                    "there if that code ever returns, and the run's wall clock counts again; "
                    "interrupt the run to end it"
                ),
            )
        elif command in STOPPED_ONLY:
            self._reply(request, False, message=self._stuck_message(command))
        elif command == "pause":
            self._reply(request, True)  # stopped (the host's view) already
        else:
            self._answer_running(request)  # threads, breakpoints: as always
