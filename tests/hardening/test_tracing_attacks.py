"""What a program can put on the host's OpenTelemetry spans (Gateway(tracing=...)).

The spans go to the application's telemetry backend, where a program's data does not
belong: a program that writes its own call frames to fd 3 (any namespace, any name, of
any length, as many as max_calls) or raises an exception with a huge name and message
must not make span names of its choosing, nor unbounded attributes. Warm and cold, at the
strongest level here.
"""

from __future__ import annotations

import textwrap

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from .conftest import FAST
from .test_host_authority import _FIND_CONN

WARM_COLD = pytest.mark.parametrize("warm", [True, False], ids=["warm", "cold"])

FORGER = _FIND_CONN + textwrap.dedent(
    """
    import asyncio
    client = [o for o in gc.get_objects() if type(o).__name__ == 'CallClient'][0]

    async def forged(namespace, name):
        call_id = conn.next_call_id
        fut = asyncio.get_running_loop().create_future()
        client.pending[call_id] = (fut, 'forged')
        write_all(conn.send(CallRequest(call_id, namespace, name, [], {})))
        try:
            return await fut
        except ToolError as exc:
            return exc.ename

    names = [('tools', 'n' * (1 << 20)), ('tools', 'a\\nb'), ('x' * (1 << 20), 'echo')]
    names += [('tools', f'made_up_{i}') for i in range(40)]
    got = [await forged(ns, n) for ns, n in names]
    print(sorted(set(got)), await tools.echo(1), flush=True)
    E = type('E' * 100_000, (Exception,), {})
    raise E('v' * 300_000)
    """
)


@WARM_COLD
def test_a_program_cannot_name_spans_or_grow_their_attributes(hostile, warm) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    gw = hostile.gateway(
        bindings={"echo": lambda x: x}, tracing=provider, pool_size=1 if warm else 0
    )
    r = hostile.run(FORGER, FAST, gateway=gw, warm=warm)
    assert r.status == "exception", r.message
    assert r.stdout == "['LookupError'] 1\n"
    spans = exporter.get_finished_spans()
    [run] = [
        s
        for s in spans
        if s.name == "kernelgate.run" and s.attributes["kernelgate.run.id"] == r.run_id
    ]
    calls = [s for s in spans if s.parent is not None and s.parent.span_id == run.context.span_id]
    # One name for every call of no binding; the binding's own name for the real one.
    unknown = "kernelgate.call (no such binding)"  # kernelgate.gateway.tracing.UNKNOWN_CALL
    assert {s.name for s in calls} == {unknown, "kernelgate.call tools.echo"}
    assert len(calls) == 44
    for span in [run, *calls]:
        assert len(span.name) <= 64, span.name[:80]
        values = [*span.attributes.values()]
        values += [v for e in span.events for v in (e.attributes or {}).values()]
        values.append(span.status.description or "")
        longest = max(len(v) for v in values if isinstance(v, str))
        assert longest <= 16 * 1024, (span.name, longest)
    [event] = run.events
    assert len(event.attributes["exception.type"]) <= 200
    assert len(event.attributes["exception.message"]) <= 1024
    assert len(run.attributes["error.type"]) <= 200
