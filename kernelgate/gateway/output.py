"""What a run printed, displayed and returned, kept within its budgets, as nbformat outputs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kernelgate.model.limits import Limits
from kernelgate.model.result import CallRecord
from kernelgate.wire.events import DisplayData, ErrorOutput, ExecuteResult, UpdateDisplayData
from kernelgate.wire.values import NotJSONError, ValueTooLargeError, check_json

from .collector import OutputCollector, StreamCut, truncation_marker
from .outcome import (
    ERROR_TEXT_LIMIT,
    Verdict,
    cap_lines,
    cut_text_plain,
    display_cut_output,
    value_not_json,
    value_too_large,
)
from .sanitize import sanitize_output

__all__ = ["OutputCollector", "OutputListener", "RunOutput", "StreamCut", "truncation_marker"]

#: Called with each output as it happens (stream pieces unmerged), for live frontends.
OutputListener = Callable[[dict[str, Any]], None]


class RunOutput:
    """Everything one run shows: stream text (fd 3 and the raw fd 1/2 pipes), rich
    outputs, errors and its value, within the run's budgets, each passed to ``on_output``
    as it arrives.

    What a program displays is untrusted: it ends up in a live notebook, where the front
    end trusts a kernel's output, so only inert (sanitised) output is kept.

    Stream text is kept head and tail (:class:`OutputCollector`). ``on_output`` sees the
    head's text as it comes; once the head is full it sees no more stream text while the
    program runs (what will be kept of the rest is known only at the end), but it still
    sees rich outputs, clears and call places as they come; when the streams end
    (:meth:`end_streams`) it gets the marker and the tail's text. So a live view shows
    the same text as the result, the outputs that came meanwhile before the marker.

    >>> out = RunOutput(Limits(max_output_bytes=4))
    >>> out.stream("stdout", "hello")
    >>> print(out.collector.text("stdout"))  # doctest: +NORMALIZE_WHITESPACE
    he
    [kernelgate: 1 byte (0 lines) of stdout cut here: stdout and stderr together passed
    max_output_bytes=4; the first 2 and the last 2 bytes are kept]
    lo
    """

    def __init__(self, limits: Limits, on_output: OutputListener | None = None) -> None:
        self.limits = limits
        self.on_output = on_output
        self.collector = OutputCollector(limits.max_output_bytes)
        #: The program's value (when it was JSON) and its execute_result output.
        self.value: Any = None
        self.result_output: dict[str, Any] | None = None
        self._display_used = 0
        self._display_cut = False
        self._streams_ended = False
        self._clear_pending = False
        #: Calls placed among the outputs since the last clear.
        self._placed: list[CallRecord] = []

    @property
    def outputs(self) -> list[dict[str, Any]]:
        return self.collector.outputs

    def place_call(self, record: CallRecord) -> None:
        """Set where a binding call that just completed sits among the outputs (its
        ``output_index``); stream text after it starts a new output. A ``clear_output``
        later moves it before every output that is left (index 0)."""
        self.collector.place(record)
        self._placed.append(record)

    def stream(self, name: str, text: str) -> None:
        """Stream text the child sent on fd 3."""
        if self._clear_pending:
            self._clear_now()
        self.stream_kept(name, self.collector.add_text(name, text))

    def raw(self, name: str, data: bytes) -> None:
        """Bytes read from the child's fd 1 or 2."""
        if self._clear_pending and data:
            self._clear_now()
        self.stream_kept(name, self.collector.add_raw(name, data))

    def end_streams(self) -> None:
        """The pipes are done: flush what their decoders hold (an incomplete character),
        then show ``on_output`` what the head did not: the marker and the tail."""
        if not self._streams_ended:
            self._streams_ended = True
            for name in ("stdout", "stderr"):
                self.stream_kept(name, self.collector.add_raw(name, b"", final=True))
            if self.on_output is not None:
                for output in self.collector.tail_outputs():
                    self.on_output(output)

    def stream_kept(self, name: str, kept: str) -> None:
        """Pass stream text the head kept to ``on_output``."""
        if kept and self.on_output is not None:
            self.on_output({"output_type": "stream", "name": name, "text": kept})

    def display(self, event: DisplayData) -> None:
        output: dict[str, Any] = {
            "output_type": "display_data",
            "data": event.data,
            "metadata": event.metadata,
        }
        if event.display_id is not None:
            output["transient"] = {"display_id": event.display_id}
        self._add(sanitize_output(output))

    def update_display(self, event: UpdateDisplayData) -> None:
        """New contents for every kept output shown with the event's ``display_id``; passed
        on (a live front end updates them too) even when none is kept."""
        update = sanitize_output(
            {
                "output_type": "update_display_data",
                "data": event.data,
                "metadata": event.metadata,
                "transient": {"display_id": event.display_id},
            }
        )
        if self._display_cut:
            return
        if not self._charge(update):  # metered as a display: it may carry as much
            self._cut()
            return
        self.collector.update_outputs(update["transient"], update["data"], update["metadata"])
        if self.on_output is not None:
            self.on_output(update)

    def clear(self, wait: bool) -> None:
        """``clear_output``: what was shown so far is removed from the outputs (with
        ``wait``, when the next output arrives). The printed text stays in ``stdout``."""
        if wait:
            self._clear_pending = True
            return
        self._clear_now()

    def _clear_now(self) -> None:
        self._clear_pending = False
        self.collector.clear_outputs()
        for record in self._placed:  # they came before everything still shown
            record.output_index = 0
        self._placed.clear()
        if self.result_output is not None and not self.collector.holds(self.result_output):
            self.result_output = None
        if self.on_output is not None:
            self.on_output({"output_type": "clear_output", "wait": False})

    def error(self, event: ErrorOutput) -> None:
        self._add(
            {
                "output_type": "error",
                "ename": event.ename[:200],
                "evalue": event.evalue[:ERROR_TEXT_LIMIT],
                "traceback": cap_lines(event.traceback),
            }
        )

    def result(self, event: ExecuteResult) -> Verdict | None:
        """The program's value: kept, or the verdict on it (too large, not JSON)."""
        data = dict(event.data)
        if "text/plain" in data:
            data["text/plain"] = cut_text_plain(data["text/plain"])
        if "application/json" in data:
            try:
                check_json(data["application/json"], "value", self.limits.max_value_bytes)
            except ValueTooLargeError:
                return value_too_large(self.limits)
            except NotJSONError as exc:
                return value_not_json(exc)
            self.value = data["application/json"]
        output = sanitize_output(
            {
                "output_type": "execute_result",
                "execution_count": 1,
                "data": data,
                "metadata": event.metadata,
            }
        )
        if self.result_output is not None:  # a second result replaces the first
            self.collector.remove_output(self.result_output)
        self.result_output = output
        self._add(output)
        return None

    def _add(self, output: dict[str, Any]) -> None:
        if self._clear_pending:
            self._clear_now()
        self._add_now(output)

    def _add_now(self, output: dict[str, Any]) -> None:
        # Rich outputs have their own budget: the child could otherwise make the host hold
        # any number of maximal frames. The value's own output always shows and is not
        # charged: there is one (a second replaces the first), bounded by max_value_bytes,
        # and measuring it would walk the value once more on the way to the caller.
        if output["output_type"] != "execute_result":
            if self._display_cut:
                return
            if not self._charge(output):
                self._cut()
                return
        self.collector.add_output(output)
        if self.on_output is not None:
            self.on_output(output)

    def _charge(self, output: dict[str, Any]) -> bool:
        """Charge ``output`` to ``max_display_bytes``; False when it does not fit."""
        room = self.limits.max_display_bytes - self._display_used
        try:
            self._display_used += check_json(output, "output", room)
        except (ValueTooLargeError, NotJSONError):
            return False
        return True

    def _cut(self) -> None:
        """The budget is spent: one marker stands where rich outputs stop."""
        self._display_cut = True
        marker = display_cut_output(self.limits.max_display_bytes)
        self.collector.add_output(marker)
        if self.on_output is not None:
            self.on_output(marker)
