"""A run's outputs and binding calls as MCP progress notifications, bounded in rate.

``run_code`` may take minutes; a client that asked for progress (a ``progressToken`` in
the request's ``_meta``) hears of each output and each completed binding call while it
runs, instead of silence. A program that prints in a loop must not flood the client: the
first event is sent at once, later ones at most every ``interval`` seconds, each
notification saying the latest event and how many there were so far (``progress`` is
that count, so it grows with every notification, as the protocol requires).

>>> summary({"output_type": "stream", "name": "stdout", "text": "a\\nstep 2\\n"})
'stdout: step 2'
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from kernelgate.model.result import CallRecord
from kernelgate.model.text import strip_ansi
from kernelgate.wire.messages import binding_label

__all__ = ["INTERVAL", "ProgressReporter", "summary"]

#: Seconds between two notifications of one run, at the least.
INTERVAL = 0.2
#: The longest piece of a program's output a notification quotes.
_QUOTE = 200

#: ``send(progress, message)``: one notification (the request's context knows the token).
Send = Callable[[float, str], Awaitable[None]]


def _quote(text: str) -> str:
    text = strip_ansi(text).strip()
    return text if len(text) <= _QUOTE else text[: _QUOTE - 3] + "..."


def summary(output: dict[str, Any]) -> str:
    """One line saying what an output (an nbformat output dict) was."""
    kind = output.get("output_type")
    if kind == "stream":
        lines = [line for line in str(output.get("text", "")).splitlines() if line.strip()]
        return f"{output.get('name', 'stdout')}: {_quote(lines[-1] if lines else '')}"
    if kind == "error":
        return f"error: {_quote(str(output.get('ename', '')))}"
    data = output.get("data")
    if isinstance(data, dict) and data:
        return f"{kind}: {', '.join(sorted(str(k) for k in data))}"
    return str(kind)


def _call_summary(record: CallRecord) -> str:
    label = _quote(binding_label(record.namespace, record.name))  # names are the program's
    if record.ok:
        return f"{label} returned in {record.duration_s:.2f} s"
    ename = record.error.ename if record.error is not None else "an error"
    return f"{label} failed: {_quote(ename)}"


class ProgressReporter:
    """Listens to one run (``on_output``, ``on_call``, as ``Gateway.run`` takes them) and
    sends progress through ``send`` from a task of its own while :meth:`running`.

    The listeners only note the event (they run on the event loop, in the run's hot
    path); sending, and a client that is slow to take notifications, never hold up the
    run. A notification that cannot be sent (the client went) ends the reporting, not
    the run.
    """

    def __init__(self, send: Send, interval: float = INTERVAL) -> None:
        self._send = send
        self._interval = interval
        self._outputs = 0
        self._calls = 0
        self._latest = ""
        self._wake = asyncio.Event()
        self.sent = 0  # notifications sent

    def on_output(self, output: dict[str, Any]) -> None:
        self._outputs += 1
        self._latest = summary(output)
        self._wake.set()

    def on_call(self, record: CallRecord) -> None:
        self._calls += 1
        self._latest = _call_summary(record)
        self._wake.set()

    def _message(self) -> str:
        outputs = f"{self._outputs} output{'s' if self._outputs != 1 else ''}"
        calls = f"{self._calls} binding call{'s' if self._calls != 1 else ''}"
        return f"{self._latest} ({outputs}, {calls} so far)"

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[ProgressReporter]:
        """Report while inside; on the way out the reporting task is gone."""
        task = asyncio.get_running_loop().create_task(self._pump())
        try:
            yield self
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _pump(self) -> None:
        reported = 0
        while True:
            await self._wake.wait()
            self._wake.clear()
            count = self._outputs + self._calls
            if count > reported:
                reported = count
                try:
                    await self._send(float(count), self._message())
                except Exception:  # the client went, or its stream is closed
                    return
                self.sent += 1
            # The bound on the rate: events meanwhile are summed into the next one.
            await asyncio.sleep(self._interval)
