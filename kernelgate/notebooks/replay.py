"""Replay a recorded run: the same program, in a fresh child, answered from the recording.

Each binding the run had becomes a stand-in that answers from the recorded calls. A call
is matched by namespace, name and arguments, and among equal calls by occurrence (the
second ``tools.fetch('a')`` gets the second recorded answer), never by arrival order, so
a program using ``asyncio.gather`` replays whatever order its calls arrive in. A call the
recording lacks raises ``ToolError`` (``ename`` ``NotRecorded``) in the program, for that
call only: the replay goes on and every later call is answered as before, so a program
that catches ``ToolError`` shows every difference an edit made. A program that does not
catch it ends there, and the report says so.

Divergence is data: :class:`ReplayReport` lists matched calls, calls the recording lacks,
recorded calls never made, and differences in status, error, stdout, stderr and value;
``difference_count`` counts all of them, as the text report and the JSON do.

A recording is data, never authority: the replay runs with the caller's limits (default
``Limits()``), not the ones the recording shows, and ``live`` bindings are called only
for calls the recording holds, with the arguments it holds (``live_any=True`` lifts that).
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import os
import threading
from collections import Counter, defaultdict, deque
from collections.abc import Callable, Coroutine, Mapping
from typing import TYPE_CHECKING, Any

from kernelgate.gateway.bindings import Binding, BindingRegistry
from kernelgate.gateway.recording.calls import call_label
from kernelgate.gateway.typecheck import display_only
from kernelgate.model.limits import Limits
from kernelgate.model.result import CallRecord, RunResult
from kernelgate.model.signatures import signature_from_text

from .matching import NOT_RECORDED, CallKey, call_key, match_calls
from .reading import RecordedRun, load_run
from .report import CallMatch, Difference, ReplayReport, compare_runs

if TYPE_CHECKING:  # the runtime (gateway.run) loads only when a replay runs
    from kernelgate.gateway.api import CodeGateway
    from kernelgate.gateway.debug import RunDebugger
    from kernelgate.gateway.output import OutputListener
    from kernelgate.gateway.plan import CallListener
    from kernelgate.gateway.runtime import CodeRuntime

__all__ = [
    "GATEWAY_OPTIONS",
    "replay_budget",
    "CallMatch",
    "Difference",
    "ReplayReport",
    "replay",
    "replay_async",
    "recorded_bindings",
    "signature_from_text",
    "match_calls",
]

# -- stand-ins: bindings answering from the recording -------------------------------------------


_ERROR_TYPES: dict[str, type[Exception]] = {}


def _error_type(ename: str) -> type[Exception]:
    """An exception class named ``ename``: the program sees ``ToolError.ename == ename``."""
    cls = _ERROR_TYPES.get(ename)
    if cls is None:
        cls = _ERROR_TYPES[ename] = type(ename or "Exception", (Exception,), {})
    return cls


class _Answers:
    """The recorded calls as queues, handed out as the replayed program asks."""

    def __init__(self, run: RunResult, key: Callable[..., CallKey]) -> None:
        self.key = key
        self.queues: dict[CallKey, deque[CallRecord]] = defaultdict(deque)
        self.by_binding: dict[tuple[str, str], list[CallRecord]] = defaultdict(list)
        for rec in sorted(run.calls, key=lambda c: c.id):
            self.queues[key(rec.namespace, rec.name, rec.args, rec.kwargs)].append(rec)
            self.by_binding[(rec.namespace, rec.name)].append(rec)

    def binding(
        self, namespace: str, name: str, signature: inspect.Signature | None
    ) -> Callable[..., Any]:
        async def recorded_answer(*args: Any, **kwargs: Any) -> Any:
            queue = self.queues.get(self.key(namespace, name, list(args), kwargs))
            if not queue:
                raise _error_type(NOT_RECORDED)(self.missing(namespace, name, list(args), kwargs))
            rec = queue.popleft()
            if rec.ok:
                return rec.value
            error = rec.error
            raise _error_type(error.ename if error else "Exception")(error.evalue if error else "")

        recorded_answer.__name__ = recorded_answer.__qualname__ = name
        recorded_answer.__doc__ = f"Answers {namespace}.{name} calls from a recorded run."
        if signature is not None:
            recorded_answer.__signature__ = signature  # type: ignore[attr-defined]
        return recorded_answer

    def missing(self, namespace: str, name: str, args: list[Any], kwargs: dict[str, Any]) -> str:
        label = call_label(namespace, name, args, kwargs)
        known = self.by_binding.get((namespace, name), [])
        if not known:
            return f"the recording has no call {label}: the recorded run never called {name}"
        shown = ", ".join(
            call_label(namespace, name, c.args, c.kwargs, 60)[len(namespace) + len(name) + 1 :]
            for c in known[:5]
        )
        more = f" and {len(known) - 5} more" if len(known) > 5 else ""
        return (
            f"the recording has no call {label} (or not this many of them); it recorded "
            f"{namespace}.{name} with {shown}{more}"
        )


def recorded_bindings(
    run: RunResult,
) -> tuple[dict[str, dict[str, Callable[..., Any]]], Callable[..., CallKey]]:
    """Stand-in bindings answering from ``run``'s calls, and the call key they match by.

    One async callable per recorded binding, with the recorded signature when it parses.
    """
    table: dict[str, dict[str, str]] = {ns: dict(t) for ns, t in run.bindings.items()}
    for c in run.calls:
        table.setdefault(c.namespace, {}).setdefault(c.name, "(*args, **kwargs)")
    signatures = {
        (ns, name): signature_from_text(text) for ns, t in table.items() for name, text in t.items()
    }
    key = call_key(signatures)
    answers = _Answers(run, key)
    namespaces = {
        ns: {name: answers.binding(ns, name, signatures[(ns, name)]) for name in t}
        for ns, t in table.items()
    }
    return (namespaces or {"tools": {}}), key


# -- replaying -----------------------------------------------------------------------------------


#: A replay of a run that ended on its own gets this many times its recorded duration,
#: plus :data:`_SLACK_S`, and never less than :data:`_FLOOR_S` (a child starts cold).
_TIMES = 3.0
_SLACK_S = 5.0
_FLOOR_S = 10.0
#: A run the recording says was stopped (timeout, interrupted) is stopped again this long
#: after its recorded duration.
_STOPPED_SLACK_S = 1.0
_STOPPED = ("timeout", "interrupted")


def replay_budget(recorded: RunResult) -> Limits:
    """The limits of a replay the caller set none for: the defaults, with ``wall_seconds``
    and ``cpu_seconds`` lowered to follow the recording.

    A run that was stopped (``timeout``, ``interrupted``: a ``while True`` cell) is
    stopped again just after its recorded duration, instead of spinning for the default
    budget; any other gets ``3 x`` its duration ``+ 5 s``, at least 10 s. The recording's
    own limits are never applied (a recording is a file anyone may have written), and its
    duration can only lower the defaults, never raise them.

    >>> replay_budget(RunResult("interrupted", duration_s=2.5)).wall_seconds
    3.5
    >>> replay_budget(RunResult("ok", duration_s=0.04)).wall_seconds
    10.0
    >>> replay_budget(RunResult("ok", duration_s=1e9)).wall_seconds == Limits().wall_seconds
    True
    """
    default = Limits()
    duration = recorded.duration_s if recorded.duration_s >= 0 else 0.0
    if recorded.status in _STOPPED:
        wall = duration + _STOPPED_SLACK_S
    else:
        wall = max(_FLOOR_S, _TIMES * duration + _SLACK_S)
    wall = min(default.wall_seconds, wall)
    return dataclasses.replace(
        default, wall_seconds=wall, cpu_seconds=min(default.cpu_seconds, max(1.0, wall))
    )


def _limits(override: Any, recorded: RunResult) -> Limits:
    """The caller's limits, or :func:`replay_budget`: never the recording's (a recording
    is a file anyone may have written; its limits are shown, not applied)."""
    if override is None:
        return replay_budget(recorded)
    if not isinstance(override, Limits):
        raise TypeError(f"limits must be a kernelgate.Limits, got {type(override).__name__}")
    return override


class _LiveGate:
    """Lets a live binding run only for a call the recording holds, as often as it holds
    it (matched as replayed calls are: binding, bound arguments)."""

    def __init__(self, recorded: RunResult, key: Callable[..., CallKey]) -> None:
        self.key = key
        self.left: Counter[CallKey] = Counter(
            key(c.namespace, c.name, c.args, c.kwargs) for c in recorded.calls
        )
        self.answers = _Answers(recorded, key)  # for the refusal's message
        self.lock = threading.Lock()  # sync bindings run in worker threads

    def admit(self, namespace: str, name: str, args: list[Any], kwargs: dict[str, Any]) -> None:
        k = self.key(namespace, name, args, kwargs)
        with self.lock:
            if self.left[k] > 0:
                self.left[k] -= 1
                return
        raise _error_type(NOT_RECORDED)(
            self.answers.missing(namespace, name, args, kwargs)
            + "; replay --live calls real bindings only as the recording did (live_any=True, "
            "or --live-any, calls any)"
        )

    def wrap(self, namespace: str, name: str, binding: Binding) -> Callable[..., Any]:
        # The gate matches the JSON the program sent; the live binding gets its arguments
        # converted by its type hints, and its result converted back, as a Gateway would
        # (the wrapper's own annotations are only shown: see display_only).
        fn = binding.fn
        if binding.is_async:

            async def gated(*args: Any, **kwargs: Any) -> Any:
                self.admit(namespace, name, list(args), kwargs)
                args_in, kwargs_in = binding.load_arguments(list(args), kwargs)
                return binding.dump_result(await fn(*args_in, **kwargs_in))

            wrapped: Callable[..., Any] = gated
        else:

            def gated_sync(*args: Any, **kwargs: Any) -> Any:
                self.admit(namespace, name, list(args), kwargs)
                args_in, kwargs_in = binding.load_arguments(list(args), kwargs)
                return binding.dump_result(fn(*args_in, **kwargs_in))

            wrapped = gated_sync
        wrapped.__name__ = wrapped.__qualname__ = name
        wrapped.__doc__ = inspect.getdoc(fn)
        if binding.signature is not None:
            wrapped.__signature__ = display_only(binding.signature)  # type: ignore[attr-defined]
        return wrapped


def _namespaces(live: Mapping[str, Any]) -> dict[str, dict[str, Callable[..., Any]]]:
    if live and all(isinstance(v, Mapping) for v in live.values()):
        return {ns: dict(t) for ns, t in live.items()}
    if all(callable(v) for v in live.values()):
        return {"tools": dict(live)}
    raise TypeError(
        "live= must map namespace -> {name: callable} (e.g. {'tools': {...}}) or "
        "name -> callable for the namespace 'tools'"
    )


#: The settings a replay's gateway may be given (``replay_async(gateway_options=...)``).
GATEWAY_OPTIONS = frozenset({"sandbox", "strict", "pool_size", "env", "tmp_dir", "read_paths"})


def _options(given: Mapping[str, Any] | None) -> dict[str, Any]:
    options = dict(given or {})
    unknown = sorted(str(k) for k in set(options) - GATEWAY_OPTIONS)
    if unknown:
        raise ValueError(
            f"gateway_options {unknown} are not a replay gateway's settings; it takes "
            f"{', '.join(sorted(GATEWAY_OPTIONS))} (bindings, limits and recording are the "
            "replay's own)"
        )
    return options


def _runtime_options(
    recorded: RunResult,
    runtime: CodeRuntime | None,
    python: str | os.PathLike[str] | None,
    node: str | os.PathLike[str] | None,
) -> dict[str, Any]:
    """How the replay's gateway gets its runtime: the recording's language decides."""
    if runtime is not None:
        if runtime.name != recorded.language:
            raise ValueError(
                f"the recorded run is a {recorded.language} program; runtime={runtime!r} "
                f"runs {runtime.name}: give a {recorded.language} runtime, or none"
            )
        if python is not None or node is not None:
            raise TypeError(
                "replay(runtime=...) takes its binary from the runtime; leave out python= and node="
            )
        return {"runtime": runtime}
    options: dict[str, Any] = {"language": recorded.language}
    if python is not None:
        options["python"] = python
    if node is not None:
        options["node"] = node
    return options


def _live_bindings(
    recorded: RunResult, live: Mapping[str, Any], live_any: bool
) -> tuple[dict[str, dict[str, Callable[..., Any]]], Callable[..., CallKey]]:
    """The live bindings a replay calls (gated to the recorded calls unless
    ``live_any``), and the call key they match by."""
    registry = BindingRegistry.from_arguments(None, "tools", _namespaces(live))
    signatures = {
        (ns, name): b.signature for ns, t in registry.namespaces.items() for name, b in t.items()
    }
    key = call_key(signatures)
    if live_any:
        return {
            ns: {name: b.fn for name, b in t.items()} for ns, t in registry.namespaces.items()
        }, key
    gate = _LiveGate(recorded, key)
    return {
        ns: {name: gate.wrap(ns, name, b) for name, b in t.items()}
        for ns, t in registry.namespaces.items()
    }, key


async def replay_async(
    source: str | os.PathLike[str] | RunResult,
    *,
    cell: int | None = None,
    cell_id: str | None = None,
    position: int | None = None,
    program: str | None = None,
    live: Mapping[str, Any] | None = None,
    python: str | os.PathLike[str] | None = None,
    limits: Any = None,
    live_any: bool = False,
    debug: RunDebugger | None = None,
    on_output: OutputListener | None = None,
    on_call: CallListener | None = None,
    on_gateway: Callable[[CodeGateway], Any] | None = None,
    gateway_options: Mapping[str, Any] | None = None,
    runtime: CodeRuntime | None = None,
    node: str | os.PathLike[str] | None = None,
) -> ReplayReport:
    """:func:`replay` for async callers.

    ``debug`` (a :class:`kernelgate.gateway.debug.RunDebugger`), ``on_output`` and
    ``on_call`` go to :meth:`Gateway.run <kernelgate.Gateway.run>` as they would for a live
    run: a replay can be stepped through, and its outputs and calls seen as they happen.
    ``on_gateway`` is given the gateway the replay runs on before it runs, so the caller
    can ``interrupt()`` it (the Jupyter kernel's interrupt button does).
    ``gateway_options`` are more of that gateway's settings (:data:`GATEWAY_OPTIONS`:
    ``sandbox``, ``strict``, ``pool_size``, ``env``, ``tmp_dir``, ``read_paths``), e.g. a
    kernel's own; never its bindings, limits or recorder, which are the replay's.

    It runs in the recording's language: on ``runtime`` (the caller's to close), else on
    that language's own with ``python`` or ``node`` as its binary.
    """
    # Imported here, pointing down, for speed: ``import kernelgate.notebooks`` (reading,
    # rendering) must not load the runtime (pool, sandbox, run) that only a replay needs.
    from kernelgate.gateway.gateway import Gateway

    if isinstance(source, RunResult):
        recorded = source
        where = recorded.source if isinstance(recorded, RecordedRun) else ""
        number = recorded.run_number if isinstance(recorded, RecordedRun) else 1
    else:
        recorded = load_run(source, cell, cell_id=cell_id, position=position)
        where, number = recorded.source, recorded.run_number
    if program is not None and not isinstance(program, str):
        raise TypeError(f"program must be the program's source (str), got {type(program).__name__}")
    code = recorded.program if program is None else program
    run_limits = _limits(limits, recorded)
    if live_any and live is None:
        raise ValueError("live_any=True needs live= bindings to call")
    if live is not None:
        namespaces, key = _live_bindings(recorded, live, live_any)
    else:
        namespaces, key = recorded_bindings(recorded)
    options = {**_runtime_options(recorded, runtime, python, node), **_options(gateway_options)}
    gw = Gateway(namespaces=namespaces, limits=run_limits, **options)
    if on_gateway is not None:
        on_gateway(gw)
    async with gw:
        result = await gw.run(code, on_output=on_output, on_call=on_call, debug=debug)
    pairs, unrecorded, unused = match_calls(recorded.calls, result.calls, key)
    differences, note = _outcome(recorded, result, run_limits, followed=limits is None)
    return ReplayReport(
        source=where,
        run_number=number,
        run_id=recorded.run_id,
        live=live is not None,
        live_any=live_any,
        program_edited=code != recorded.program,
        recorded=recorded,
        result=result,
        matched=[CallMatch(r, p) for r, p in pairs],
        unrecorded=unrecorded,
        unused=unused,
        differences=differences,
        note=note,
    )


def _outcome(
    recorded: RunResult, result: RunResult, run_limits: Limits, followed: bool
) -> tuple[list[Difference], str]:
    """How the replay's outcome differs from the recording's, and a note on its budget
    when it ``followed`` the recording (:func:`replay_budget`) for a stopped run."""
    differences = compare_runs(recorded, result)
    if not followed or recorded.status not in _STOPPED:
        return differences, ""
    note = (
        f"the recorded run was stopped ({recorded.status}) after "
        f"{recorded.duration_s:.3g} s, so the replay was given "
        f"wall_seconds={run_limits.wall_seconds:.3g} (set limits to change it)"
    )
    if result.status == "timeout":
        # Stopped again by the budget that follows the recording: the same ending, told
        # in other words (an interrupt, or a budget of another size).
        differences = [d for d in differences if d.field not in ("status", "error")]
        note += "; it was stopped again, as recorded"
    return differences, note


def replay(
    source: str | os.PathLike[str] | RunResult,
    *,
    cell: int | None = None,
    cell_id: str | None = None,
    position: int | None = None,
    program: str | None = None,
    live: Mapping[str, Any] | None = None,
    python: str | os.PathLike[str] | None = None,
    limits: Any = None,
    live_any: bool = False,
    debug: RunDebugger | None = None,
    on_output: OutputListener | None = None,
    on_call: CallListener | None = None,
    runtime: CodeRuntime | None = None,
    node: str | os.PathLike[str] | None = None,
) -> ReplayReport:
    """Re-run a recorded program in a fresh child and compare with the recording.

    ``source`` is a saved run (``.ipynb``), a session log with ``cell=N`` (or
    ``cell_id=``, ``position=``: see :func:`~kernelgate.notebooks.load_run`), or a
    :class:`~kernelgate.RunResult`. Calls are answered from the recording, unless ``live``
    gives real bindings (namespace -> name -> callable); then the report also lists the
    calls whose live answer differs from the recorded one. A live binding is called only
    for a call the recording holds (same binding, same arguments, at most as often): any
    other call raises ``ToolError`` (``ename`` ``NotRecorded``) in the program without
    reaching the binding, and the report lists it; ``live_any=True`` calls whatever the
    program calls. ``program`` replays an edited program against the recording.

    ``limits`` are the replay's (default :func:`replay_budget`: ``Limits()`` with the time
    budgets lowered to follow the recorded duration): never the recording's limits, which a
    crafted file could set to anything. A damaged or crafted recording raises
    :class:`~kernelgate.notebooks.store.RecordingError` (a ``ValueError``) naming the field.

    ``on_output`` and ``on_call`` see the replay's outputs and calls as they happen, and
    ``debug`` (a :class:`kernelgate.gateway.debug.RunDebugger`) lets the replay be stepped
    through, as for :meth:`Gateway.run <kernelgate.Gateway.run>`; its requests come from
    other tasks on the loop the replay runs on (``kernelgate replay --debug`` is one).
    The replay runs in the recorded run's language, on ``runtime`` if given (else with
    ``python`` or ``node`` as the binary), as :func:`replay_async` says.

    >>> import tempfile
    >>> from kernelgate import Gateway, save_run
    >>> r = Gateway(bindings={"add": lambda a, b: a + b}).run_sync("await tools.add(1, 2)")
    >>> path = save_run(r, tempfile.mkdtemp() + "/run.ipynb")
    >>> replay(path).diverged
    False
    >>> report = replay(path, program="await tools.add(2, 2)")
    >>> [c.args for c in report.unrecorded], [c.args for c in report.unused]
    ([[2, 2]], [[1, 2]])
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        raise RuntimeError("replay() was called from a running event loop; use replay_async()")
    replaying = replay_async(
        source,
        cell=cell,
        cell_id=cell_id,
        position=position,
        program=program,
        live=live,
        python=python,
        limits=limits,
        live_any=live_any,
        debug=debug,
        on_output=on_output,
        on_call=on_call,
        runtime=runtime,
        node=node,
    )
    return asyncio.run(_to_the_end(replaying, runtime))


async def _to_the_end(
    replaying: Coroutine[Any, Any, ReplayReport], runtime: CodeRuntime | None
) -> ReplayReport:
    """The replay on a loop of its own: a runtime the caller gave hears that it ends."""
    try:
        return await replaying
    finally:
        if runtime is not None:
            await runtime.end_loop()
