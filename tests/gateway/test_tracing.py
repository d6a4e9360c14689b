"""OpenTelemetry: ``Gateway(tracing=...)`` gives each run a ``kernelgate.run`` span and
each binding call a ``kernelgate.call <ns.name>`` span under it, read back with the SDK's
in-memory exporter from real runs (Python, and TypeScript where node is installed)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from kernelgate import Gateway, Limits
from kernelgate.gateway.tracing import RUN_ATTRIBUTES

FAST = Limits(wall_seconds=30, kill_grace_seconds=0.5)


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    yield exporter
    exporter.shutdown()


def _provider(exporter: InMemorySpanExporter) -> TracerProvider:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider


def _by_name(spans: tuple[ReadableSpan, ...], prefix: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name.startswith(prefix)]


async def search(query: str, limit: int = 2) -> list[str]:
    """Search the corpus (async: on the event loop)."""
    return [f"{query}-{i}" for i in range(limit)]


def lookup(key: str) -> str:
    """Look a key up (sync: in a worker thread)."""
    if key == "missing":
        raise KeyError(key)
    return key.upper()


PROGRAM = """\
hits = await tools.search('q', limit=3)
print(len(hits), 'hits')
try:
    await tools.lookup('missing')
except Exception as e:
    print('caught', type(e).__name__)
return [await tools.lookup('a'), hits]
"""


def _run(gw: Gateway, program: str, limits: Limits = FAST) -> Any:
    async def main() -> Any:
        async with gw:
            return await gw.run(program, limits=limits)

    return asyncio.run(main())


@pytest.mark.parametrize("pool_size", [0, 1], ids=["cold", "warm"])
def test_a_run_is_a_span_and_each_binding_call_a_child_span(
    exporter: InMemorySpanExporter, run_dir_base: str, pool_size: int
) -> None:
    gw = Gateway(
        bindings={"search": search, "lookup": lookup},
        tracing=_provider(exporter),
        tmp_dir=run_dir_base,
        pool_size=pool_size,
    )
    result = _run(gw, PROGRAM)
    assert result.ok, result.error
    spans = exporter.get_finished_spans()
    [run] = _by_name(spans, "kernelgate.run")
    calls = _by_name(spans, "kernelgate.call ")
    assert [c.name for c in calls] == [
        "kernelgate.call tools.search",
        "kernelgate.call tools.lookup",
        "kernelgate.call tools.lookup",
    ]
    assert all(c.parent is not None and c.parent.span_id == run.context.span_id for c in calls)
    assert all(c.context.trace_id == run.context.trace_id for c in calls)
    assert run.instrumentation_scope is not None and run.instrumentation_scope.name == "kernelgate"
    a = dict(run.attributes or {})
    assert set(RUN_ATTRIBUTES) <= set(a)
    assert a["kernelgate.run.id"] == result.run_id
    assert a["kernelgate.run.status"] == "ok"
    assert a["kernelgate.run.language"] == "python"
    assert a["kernelgate.run.isolation"] == result.isolation
    assert a["kernelgate.run.warm"] is bool(result.usage["warm"])
    assert a["kernelgate.usage.calls"] == 3
    assert a["kernelgate.usage.wall_seconds"] == result.duration_s
    assert a["kernelgate.usage.cpu_user_seconds"] == result.usage["cpu_user_s"]
    assert a["kernelgate.usage.memory_peak_bytes"] == result.usage["peak_memory_bytes"] > 0
    assert a["kernelgate.usage.output_bytes"] == len("3 hits\ncaught ToolError\n")
    assert a["kernelgate.limits.wall_seconds"] == 30
    assert a["kernelgate.limits.max_calls"] == FAST.max_calls
    assert run.status.status_code is StatusCode.UNSET and not run.events
    # The calls: what was called and how it went, never the arguments or values.
    ok, failed, ok2 = (dict(c.attributes or {}) for c in calls)
    assert ok == {
        "kernelgate.call.id": 0,
        "kernelgate.call.namespace": "tools",
        "kernelgate.call.name": "search",
        "kernelgate.call.ok": True,
    }
    assert failed["kernelgate.call.ok"] is False and failed["error.type"] == "KeyError"
    assert calls[1].status.status_code is StatusCode.ERROR
    assert calls[1].events[0].name == "exception"
    assert ok2["kernelgate.call.ok"] is True and calls[2].status.status_code is StatusCode.UNSET
    every_value = json.dumps([dict(s.attributes or {}) for s in spans])
    assert "q-0" not in every_value and '"A"' not in every_value  # no values on spans
    # Each call span lies within the run's.
    assert all(run.start_time <= c.start_time <= c.end_time <= run.end_time for c in calls)  # type: ignore[operator]


def test_a_failed_program_is_an_error_span_with_its_own_traceback(
    exporter: InMemorySpanExporter, run_dir_base: str
) -> None:
    gw = Gateway(tracing=_provider(exporter), tmp_dir=run_dir_base, pool_size=0)
    result = _run(gw, "secret = 'hunter2'\nx = 1\n1 / 0")
    assert result.status == "exception"
    [run] = exporter.get_finished_spans()
    assert run.status.status_code is StatusCode.ERROR
    assert run.status.description == "ZeroDivisionError: division by zero"
    assert dict(run.attributes or {})["error.type"] == "ZeroDivisionError"
    assert dict(run.attributes or {})["kernelgate.run.status"] == "exception"
    [event] = run.events
    assert event.name == "exception"
    ea = dict(event.attributes or {})
    assert ea["exception.type"] == "ZeroDivisionError"
    assert ea["exception.message"] == "division by zero"
    assert ea["exception.stacktrace"] == "\n".join(result.error.traceback)
    assert 'File "<program>", line 3' in str(ea["exception.stacktrace"])
    assert "hunter2" not in json.dumps(ea)  # what RunResult holds, no frame's locals


def test_a_timeout_and_an_unanswered_call_end_their_spans(
    exporter: InMemorySpanExporter, run_dir_base: str
) -> None:
    gateways: list[Gateway] = []

    async def hang() -> None:
        gateways[0].interrupt()  # the run ends while this call is in flight
        await asyncio.Event().wait()

    gw = Gateway(bindings={"hang": hang}, tracing=_provider(exporter), tmp_dir=run_dir_base)
    gateways.append(gw)
    result = _run(gw, "await tools.hang()")
    assert result.status == "interrupted"
    spans = exporter.get_finished_spans()
    [run] = _by_name(spans, "kernelgate.run")
    [call] = _by_name(spans, "kernelgate.call tools.hang")
    assert run.status.status_code is StatusCode.ERROR
    assert result.error is not None
    assert dict(run.attributes or {})["error.type"] == result.error.ename == "Interrupted"
    assert call.status.status_code is StatusCode.ERROR
    assert dict(call.attributes or {})["error.type"] == "cancelled"
    assert call.end_time is not None and call.end_time <= run.end_time  # type: ignore[operator]

    exporter.clear()
    gw = Gateway(tracing=_provider(exporter), tmp_dir=run_dir_base, pool_size=0)
    result = _run(gw, "while True: pass", Limits(wall_seconds=1, kill_grace_seconds=0.2))
    assert result.status == "timeout"
    [run] = exporter.get_finished_spans()
    assert run.status.status_code is StatusCode.ERROR
    assert dict(run.attributes or {})["kernelgate.run.status"] == "timeout"
    assert result.error is not None
    assert dict(run.attributes or {})["error.type"] == (result.error.ename or "timeout")
    assert dict(run.attributes or {})["kernelgate.limits.wall_seconds"] == 1


def test_spans_nest_under_the_callers_span_and_the_bindings_spans_under_their_call(
    exporter: InMemorySpanExporter, run_dir_base: str
) -> None:
    provider = _provider(exporter)
    tracer = provider.get_tracer("the-application")

    async def fetch_async(url: str) -> str:
        with tracer.start_as_current_span("http GET async"):
            return url

    def fetch_sync(url: str) -> str:  # in a worker thread
        with tracer.start_as_current_span("http GET sync"):
            return url

    gw = Gateway(
        bindings={"fetch_async": fetch_async, "fetch_sync": fetch_sync},
        tracing=provider,
        tmp_dir=run_dir_base,
        pool_size=0,
    )

    async def main() -> Any:
        async with gw:
            with tracer.start_as_current_span("agent step"):
                return await gw.run(
                    "import asyncio\n"
                    "return await asyncio.gather(tools.fetch_async('a'), tools.fetch_sync('b'))",
                    limits=FAST,
                )

    result = asyncio.run(main())
    assert result.ok and result.value == ["a", "b"], result.error
    spans = {s.name: s for s in exporter.get_finished_spans()}
    step, run = spans["agent step"], spans["kernelgate.run"]
    assert run.parent is not None and run.parent.span_id == step.context.span_id
    for kind in ("async", "sync"):
        call, inner = spans[f"kernelgate.call tools.fetch_{kind}"], spans[f"http GET {kind}"]
        assert call.parent is not None and call.parent.span_id == run.context.span_id
        assert inner.parent is not None and inner.parent.span_id == call.context.span_id, kind


_GLOBAL_PROVIDER = textwrap.dedent(
    """
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from kernelgate import Gateway

    traced = Gateway(tracing=True, pool_size=0)  # made before the provider is set
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    with Gateway(pool_size=0) as gw:
        assert gw.run_sync("return 1").value == 1
    print("off:", [s.name for s in exporter.get_finished_spans()])
    with traced as gw:
        assert gw.run_sync("return 2").value == 2
    print("True:", [s.name for s in exporter.get_finished_spans()])
    exporter.clear()
    with Gateway(tracing=trace.get_tracer("mine"), pool_size=0) as gw:
        assert gw.run_sync("return 3").value == 3
    print("a tracer:", [s.instrumentation_scope.name for s in exporter.get_finished_spans()])
    """
)


def test_tracing_true_uses_the_global_provider_and_is_off_by_default(run_dir_base: str) -> None:
    # In a process of its own: the global provider can be set once per process.
    r = subprocess.run(
        [sys.executable, "-c", _GLOBAL_PROVIDER],
        capture_output=True,
        text=True,
        timeout=120,
        env={**_env(), "TMPDIR": run_dir_base},
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [
        "off: []",  # off by default, a global provider or not
        "True: ['kernelgate.run']",  # the provider set after the gateway was made
        "a tracer: ['mine']",  # a Tracer is taken as it is
    ]


def test_a_tracing_option_that_is_not_one_is_refused() -> None:
    with pytest.raises(TypeError, match=r"tracing must be True .* got str"):
        Gateway(tracing="yes")


def test_a_typescript_run_is_traced_alike(
    exporter: InMemorySpanExporter, run_dir_base: str
) -> None:
    if shutil.which("node") is None:
        pytest.skip("node (>= 18) is not installed")
    gw = Gateway(
        language="typescript",
        bindings={"search": search, "lookup": lookup},
        tracing=_provider(exporter),
        tmp_dir=run_dir_base,
        pool_size=0,
    )
    ok = _run(gw, 'const hits: string[] = await tools.search("q");\nhits.length')
    assert ok.ok and ok.value == 2, ok.error
    gw = Gateway(
        language="typescript",
        bindings={"lookup": lookup},
        tracing=_provider(exporter),
        tmp_dir=run_dir_base,
        pool_size=0,
    )
    failed = _run(gw, 'await tools.lookup("a");\nthrow new RangeError("too far")')
    assert failed.status == "exception"
    spans = exporter.get_finished_spans()
    runs = _by_name(spans, "kernelgate.run")
    assert [dict(r.attributes or {})["kernelgate.run.language"] for r in runs] == [
        "typescript",
        "typescript",
    ]
    assert [dict(r.attributes or {})["kernelgate.run.status"] for r in runs] == ["ok", "exception"]
    calls = _by_name(spans, "kernelgate.call ")
    assert [(c.name, c.parent.span_id if c.parent else None) for c in calls] == [
        ("kernelgate.call tools.search", runs[0].context.span_id),
        ("kernelgate.call tools.lookup", runs[1].context.span_id),
    ]
    assert runs[1].status.status_code is StatusCode.ERROR
    [event] = runs[1].events
    assert dict(event.attributes or {})["exception.type"] == "RangeError"


_WITHOUT_OTEL = textwrap.dedent(
    """
    import sys

    class NoOpenTelemetry:
        def find_spec(self, name, path=None, target=None):
            if name == "opentelemetry" or name.startswith("opentelemetry."):
                raise ImportError(f"No module named {name!r} (hidden by the test)")
            return None

    sys.meta_path.insert(0, NoOpenTelemetry())
    from kernelgate import Gateway
    with Gateway(bindings={"add": lambda a, b: a + b}, pool_size=0) as gw:
        r = gw.run_sync("return await tools.add(1, 2)")
    print(r.status, r.value)
    try:
        Gateway(tracing=True)
    except ImportError as e:
        print("ImportError:", e)
    """
)


def test_kernelgate_runs_without_opentelemetry_and_never_imports_it_when_off(
    run_dir_base: str,
) -> None:
    env_tmp = {"TMPDIR": run_dir_base}
    r = subprocess.run(
        [sys.executable, "-c", _WITHOUT_OTEL],
        capture_output=True,
        text=True,
        timeout=120,
        env={**_env(), **env_tmp},
    )
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "ok 3"
    assert lines[1].startswith("ImportError: Gateway(tracing=...) needs OpenTelemetry's API")
    assert "kernelgate[otel]" in lines[1]
    # Installed but off: a run never imports it.
    r = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys\nfrom kernelgate import Gateway\n"
            "with Gateway(pool_size=0) as gw:\n    assert gw.run_sync('return 1').ok\n"
            "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**_env(), **env_tmp},
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    return env
