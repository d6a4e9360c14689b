"""OpenTelemetry spans of runs and their binding calls: opt-in, and nothing at all when off.

``Gateway(tracing=True)`` traces with the global tracer provider (the one the application
set with ``opentelemetry.trace.set_tracer_provider``, even if it sets it later);
``Gateway(tracing=provider)`` with that ``TracerProvider`` (or a ``Tracer``). Each run is
a span ``kernelgate.run``, a child of whatever span is current where ``run()`` is awaited;
each binding call a span ``kernelgate.call <namespace>.<name>`` under it, current while
the binding runs (so the binding's own spans, an HTTP client's say, nest under its call).

The attributes follow the semantic conventions' style under ``kernelgate.*``
(:data:`RUN_ATTRIBUTES` lists them); a run that did not end ``ok`` has status ERROR,
``error.type`` and an ``exception`` event made from its :class:`~kernelgate.RunResult`'s
error (the program's own traceback, nothing the result does not hold). Arguments and
values never go on a span: a telemetry backend is not where a program's data belongs.

This module imports OpenTelemetry only when tracing is asked for: kernelgate imports and
runs without it (``pip install 'kernelgate[otel]'`` adds ``opentelemetry-api``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from kernelgate import __version__
from kernelgate.model.result import CallRecord, RunResult
from kernelgate.model.text import MAX_NAME
from kernelgate.wire.events import CallRequest
from kernelgate.wire.messages import binding_label

from .bindings import BindingRegistry
from .plan import RunPlan

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.trace import Span, Tracer

__all__ = ["RUN_ATTRIBUTES", "UNKNOWN_CALL", "RunTrace", "Tracing", "TracingOption"]

#: What ``Gateway(tracing=...)`` takes: off (None, False), the global provider (True), or
#: an ``opentelemetry.trace.TracerProvider`` or ``Tracer``.
TracingOption = Any

#: The instrumentation scope's name (``Tracer.instrumentation_scope``).
SCOPE = "kernelgate"
#: A span's status description (and an event's message) is cut to this many characters.
_TEXT = 1024
#: A traceback on a span keeps its last this many characters (the innermost frames).
_TRACEBACK = 16 * 1024
#: The name of the span of a call of no binding (a frame the program wrote itself): one
#: name for all, as a program may make up any number of names, of any length.
UNKNOWN_CALL = "kernelgate.call (no such binding)"

#: The attributes of a ``kernelgate.run`` span, beside ``kernelgate.limits.<field>`` for
#: each field of :class:`~kernelgate.Limits` and ``error.type`` on a failure.
RUN_ATTRIBUTES = (
    "kernelgate.run.id",
    "kernelgate.run.status",
    "kernelgate.run.language",
    "kernelgate.run.isolation",
    "kernelgate.run.warm",
    "kernelgate.usage.wall_seconds",
    "kernelgate.usage.cpu_user_seconds",
    "kernelgate.usage.cpu_system_seconds",
    "kernelgate.usage.memory_peak_bytes",
    "kernelgate.usage.memory_peak_scope",
    "kernelgate.usage.calls",
    "kernelgate.usage.output_bytes",
)


def _cut(text: str, limit: int = _TEXT) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


class Tracing:
    """A gateway's tracer, made from its ``tracing`` option; :meth:`start_run` per run.

    Built only when tracing is on: it is what imports OpenTelemetry."""

    def __init__(self, option: TracingOption) -> None:
        try:
            from opentelemetry import context, trace
        except ImportError as exc:
            raise ImportError(
                "Gateway(tracing=...) needs OpenTelemetry's API: pip install "
                f"'kernelgate[otel]' (or opentelemetry-api); {exc}"
            ) from None
        self._context = context
        self._trace = trace
        self._error = trace.StatusCode.ERROR
        if option is True:
            # A proxy: it follows the global provider even when that is set after this.
            self.tracer: Tracer = trace.get_tracer(SCOPE, __version__)
        elif isinstance(option, trace.TracerProvider):
            self.tracer = option.get_tracer(SCOPE, __version__)
        elif isinstance(option, trace.Tracer):
            self.tracer = option
        else:
            raise TypeError(
                "tracing must be True (OpenTelemetry's global tracer provider), an "
                "opentelemetry.trace.TracerProvider or Tracer, or False/None (off); got "
                f"{type(option).__name__}"
            )

    @staticmethod
    def from_option(option: TracingOption) -> Tracing | None:
        """None when ``option`` is off (no import, no cost), else a :class:`Tracing`."""
        if option is None or option is False:
            return None
        return Tracing(option)

    def start_run(self, plan: RunPlan) -> RunTrace:
        """The span of the run ``plan`` makes, starting now, a child of the current span."""
        return self.start(plan.runtime.name, plan.registry)

    def start(self, language: str, registry: BindingRegistry) -> RunTrace:
        """The span of a run of ``language`` starting now, a child of the current span;
        calls of ``registry``'s bindings get spans named after them."""
        span = self.tracer.start_span(
            "kernelgate.run", attributes={"kernelgate.run.language": language}
        )
        return RunTrace(self, span, registry)


class RunTrace:
    """The spans of one run: the run's own, and one per binding call under it."""

    def __init__(self, tracing: Tracing, span: Span, registry: BindingRegistry) -> None:
        self._tracing = tracing
        self._registry = registry
        self.span = span
        self._parent: Context = tracing._trace.set_span_in_context(span)
        self._calls: dict[int | str, Span] = {}

    async def run(self, execute: Callable[[], Awaitable[RunResult]]) -> RunResult:
        """``execute()`` (the run's) inside the run's span, ended with its result; or with
        what it raised (the caller cancelled it)."""
        try:
            with self.current():
                result = await execute()
        except BaseException as exc:
            self.abandon(exc)
            raise
        self.finish(result)
        return result

    @contextmanager
    def current(self) -> Iterator[None]:
        """The run's span is the current one inside (in this task, and in the tasks and
        callbacks started from it)."""
        token = self._tracing._context.attach(self._parent)
        try:
            yield
        finally:
            self._tracing._context.detach(token)

    # -- binding calls --------------------------------------------------------------------

    def admit(self, admit: Callable[[CallRequest], None], request: CallRequest) -> None:
        """``admit(request)`` (the dispatcher's) inside the call's new span: the tasks and
        threads it starts for the binding carry that span as the current one."""
        tracing = self._tracing
        span = self._call_span(request.call_id, request.namespace, request.name)
        token = tracing._context.attach(tracing._trace.set_span_in_context(span, self._parent))
        try:
            admit(request)
        finally:
            tracing._context.detach(token)

    def call_ended(self, record: CallRecord) -> None:
        """The call's answer is made: its span ends with what it says."""
        error = record.error
        self._end_call(
            record.id, record.ok, error.ename if error else "", error.evalue if error else ""
        )

    async def answer(
        self, call_id: str, namespace: str, name: str, answer: Awaitable[dict[str, Any] | None]
    ) -> None:
        """Await ``answer`` (a client's answer to a kernel's call: the reply it sent, or
        None when the kernel stopped waiting) inside the call's span."""
        tracing = self._tracing
        span = self._call_span(call_id, namespace, name)
        token = tracing._context.attach(tracing._trace.set_span_in_context(span, self._parent))
        try:
            reply = await answer
        finally:
            tracing._context.detach(token)
        if reply is not None:
            ok = reply.get("ok") is True
            self._end_call(call_id, ok, str(reply.get("ename", "")), str(reply.get("evalue", "")))

    def _call_span(self, call_id: int | str, namespace: str, name: str) -> Span:
        # The names come from the program's frame: only a binding's own name the span's.
        if self._registry.lookup(namespace, name) is not None:
            span_name = f"kernelgate.call {binding_label(namespace, name)}"
        else:
            span_name = UNKNOWN_CALL
            namespace, name = _cut(namespace, MAX_NAME), _cut(name, MAX_NAME)
        span = self._tracing.tracer.start_span(
            span_name,
            context=self._parent,
            attributes={
                "kernelgate.call.id": call_id if isinstance(call_id, int) else _cut(call_id, 64),
                "kernelgate.call.namespace": namespace,
                "kernelgate.call.name": name,
            },
        )
        self._calls[call_id] = span
        return span

    def _end_call(self, call_id: int | str, ok: bool, ename: str, evalue: str) -> None:
        span = self._calls.pop(call_id, None)
        if span is None:
            return
        span.set_attribute("kernelgate.call.ok", ok)
        if not ok:
            self._failed(span, ename, evalue, ())
        span.end()

    # -- the end --------------------------------------------------------------------------

    def finish(self, result: RunResult) -> None:
        """End the run's span (and any call span the run left unanswered) with ``result``."""
        self._end_calls()
        span = self.span
        usage = result.usage
        output_bytes = len(result.stdout.encode("utf-8", "replace")) + len(
            result.stderr.encode("utf-8", "replace")
        )
        span.set_attributes(
            {
                "kernelgate.run.id": result.run_id,
                "kernelgate.run.status": result.status,
                "kernelgate.run.isolation": result.isolation,
                "kernelgate.run.warm": bool(usage.get("warm", False)),
                "kernelgate.usage.wall_seconds": result.duration_s,
                "kernelgate.usage.cpu_user_seconds": float(usage.get("cpu_user_s", 0.0)),
                "kernelgate.usage.cpu_system_seconds": float(usage.get("cpu_system_s", 0.0)),
                "kernelgate.usage.memory_peak_bytes": int(usage.get("peak_memory_bytes", 0)),
                "kernelgate.usage.memory_peak_scope": str(usage.get("peak_memory_scope", "")),
                "kernelgate.usage.calls": len(result.calls),
                "kernelgate.usage.output_bytes": output_bytes,
                **{
                    f"kernelgate.limits.{k}": v
                    for k, v in result.limits.items()
                    if isinstance(v, (int, float)) and not isinstance(v, bool)
                },
            }
        )
        if not result.ok:
            error = result.error
            ename = error.ename if error is not None and error.ename else result.status
            evalue = error.evalue if error is not None else ""
            traceback = tuple(error.traceback) if error is not None else ()
            self._failed(span, ename, evalue, traceback, description=result.message)
        span.end()

    def abandon(self, exc: BaseException) -> None:
        """End the spans of a run that raised instead of returning (the caller's misuse,
        or the caller cancelled it): what was raised, by type and message."""
        self._end_calls()
        self._failed(self.span, type(exc).__name__, str(exc), ())
        self.span.end()

    def _end_calls(self) -> None:
        for span in self._calls.values():
            span.set_attribute("kernelgate.call.ok", False)
            self._failed(span, "cancelled", "the run ended before the binding returned", ())
            span.end()
        self._calls.clear()

    def _failed(
        self,
        span: Span,
        ename: str,
        evalue: str,
        traceback: tuple[str, ...],
        description: str | None = None,
    ) -> None:
        ename = _cut(ename, MAX_NAME)
        attributes = {"exception.type": ename, "exception.message": _cut(evalue)}
        if traceback:
            stack = "\n".join(traceback)
            if len(stack) > _TRACEBACK:
                stack = "..." + stack[3 - _TRACEBACK :]
            attributes["exception.stacktrace"] = stack
        span.add_event("exception", attributes)
        span.set_attribute("error.type", ename)
        text = description if description is not None else f"{ename}: {evalue}"
        span.set_status(self._tracing._error, _cut(text))
