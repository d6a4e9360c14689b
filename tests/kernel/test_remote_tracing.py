"""RemoteGateway(tracing=...): a run in a kernelgate kernel is a ``kernelgate.run`` span
here, and each call this client answers a ``kernelgate.call`` span under it."""

from __future__ import annotations

from typing import Any

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from kernelgate import RemoteGateway

from .test_remote import with_kernel


def test_a_remote_run_and_the_calls_answered_here_are_spans() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("the-application")

    async def lookup(key: int) -> int:
        with tracer.start_as_current_span("db query"):
            if key < 0:
                raise KeyError(key)
            return key * 10

    program = (
        "a = await agent.lookup(1)\n"
        "try:\n"
        "    await agent.lookup(-1)\n"
        "except Exception as e:\n"
        "    print('caught', type(e).__name__)\n"
        "hits = await tools.search('messages')\n"  # the kernel's own binding: not traced here
        "raise ValueError(f'got {a} and {len(hits)} hits')\n"
    )
    results: list[Any] = []

    async def body(kc: Any) -> None:
        async with RemoteGateway(
            kc, bindings={"lookup": lookup}, namespace="agent", tracing=provider
        ) as gw:
            results.append(await gw.run(program))

    with_kernel(body)
    [result] = results
    assert result.status == "exception", result.error
    assert result.stdout == "caught ToolError\n"
    spans = {s.name: s for s in exporter.get_finished_spans() if s.name != "db query"}
    run = spans["kernelgate.run"]
    a = dict(run.attributes or {})
    assert a["kernelgate.run.id"] == result.run_id
    assert a["kernelgate.run.status"] == "exception"
    assert a["kernelgate.usage.calls"] == 3
    assert run.status.status_code is StatusCode.ERROR
    [event] = run.events
    assert dict(event.attributes or {})["exception.message"] == "got 10 and 2 hits"
    calls = [s for s in exporter.get_finished_spans() if s.name.startswith("kernelgate.call")]
    assert [c.name for c in calls] == ["kernelgate.call agent.lookup"] * 2
    assert all(c.parent is not None and c.parent.span_id == run.context.span_id for c in calls)
    assert [dict(c.attributes or {})["kernelgate.call.ok"] for c in calls] == [True, False]
    assert dict(calls[1].attributes or {})["error.type"] == "KeyError"
    queries = [s for s in exporter.get_finished_spans() if s.name == "db query"]
    assert sorted(q.parent.span_id for q in queries if q.parent) == sorted(
        c.context.span_id for c in calls
    )
