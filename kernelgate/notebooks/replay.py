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

import ast
import asyncio
import difflib
import inspect
import os
import threading
from collections import Counter, defaultdict, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kernelgate.model.result import CallRecord, RunResult

from ._values import canonical, short_repr
from .render import call_label, call_line
from .store import RecordedRun, load_run

__all__ = [
    "CallMatch",
    "Difference",
    "ReplayReport",
    "replay",
    "replay_async",
    "recorded_bindings",
    "signature_from_text",
    "match_calls",
]

NOT_RECORDED = "NotRecorded"


# -- signatures ---------------------------------------------------------------------------


class _Source:
    """Stands for an annotation or default by its source text (shown as written)."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text


def signature_from_text(text: str) -> inspect.Signature | None:
    """Rebuild a signature from its recorded text, e.g. ``(query: 'str', limit: 'int' = 3)``.

    Defaults and annotations that are not literals keep their source text. Returns
    ``None`` when the text does not parse (the stand-in then accepts any arguments).

    >>> str(signature_from_text("(query: 'str', limit: 'int' = 3) -> 'list'"))
    "(query: 'str', limit: 'int' = 3) -> 'list'"
    >>> str(signature_from_text("(a, /, *rest, key=<object object at 0x1>, **kw)")) is None
    False
    >>> signature_from_text("(a, b") is None
    True
    """
    src = f"def _f{text}: pass"
    try:
        tree = ast.parse(src)
    except SyntaxError:
        blanked = _blank_reprs(text)
        if blanked is None:
            return None
        src = blanked
        try:
            tree = ast.parse(src)
        except SyntaxError:
            return None
    fn = tree.body[0]
    if not isinstance(fn, ast.FunctionDef):
        return None
    a = fn.args
    empty = inspect.Parameter.empty

    def expr(node: ast.expr | None, annotation: bool) -> Any:
        if node is None:
            return empty
        if isinstance(node, ast.Constant) and (annotation or not isinstance(node.value, str)):
            return node.value
        if not annotation:
            try:
                return ast.literal_eval(node)
            except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
                pass
        return _Source(ast.get_source_segment(src, node) or "...")

    params: list[inspect.Parameter] = []
    positional = [*a.posonlyargs, *a.args]
    defaults = [None] * (len(positional) - len(a.defaults)) + list(a.defaults)
    P = inspect.Parameter
    try:
        for i, (arg, default) in enumerate(zip(positional, defaults, strict=True)):
            kind = P.POSITIONAL_ONLY if i < len(a.posonlyargs) else P.POSITIONAL_OR_KEYWORD
            params.append(
                P(
                    arg.arg,
                    kind,
                    default=expr(default, False),
                    annotation=expr(arg.annotation, True),
                )
            )
        if a.vararg is not None:
            params.append(
                P(a.vararg.arg, P.VAR_POSITIONAL, annotation=expr(a.vararg.annotation, True))
            )
        for arg, default in zip(a.kwonlyargs, a.kw_defaults, strict=True):
            params.append(
                P(
                    arg.arg,
                    P.KEYWORD_ONLY,
                    default=expr(default, False),
                    annotation=expr(arg.annotation, True),
                )
            )
        if a.kwarg is not None:
            params.append(P(a.kwarg.arg, P.VAR_KEYWORD, annotation=expr(a.kwarg.annotation, True)))
        return inspect.Signature(params, return_annotation=expr(fn.returns, True))
    except (ValueError, TypeError):
        return None


def _blank_reprs(text: str) -> str | None:
    """``<object object at 0x..>`` style defaults do not parse: make them ``...``."""
    out, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "<" and (i == 0 or text[i - 1] in "= "):
            if depth == 0:
                out.append(text[start:i])
            depth += 1
        elif ch == ">" and depth:
            depth -= 1
            if depth == 0:
                out.append("...")
                start = i + 1
    if depth:
        return None
    out.append(text[start:])
    return f"def _f{''.join(out)}: pass"


# -- matching -----------------------------------------------------------------------------

CallKey = tuple[str, str, str, str]


def _key_fn(
    signatures: Mapping[tuple[str, str], inspect.Signature | None],
) -> Callable[[str, str, list[Any], dict[str, Any]], CallKey]:
    """Calls are equal when they bind the same arguments (``f('x')`` == ``f(query='x')``)."""

    def key(namespace: str, name: str, args: list[Any], kwargs: dict[str, Any]) -> CallKey:
        sig = signatures.get((namespace, name))
        if sig is not None:
            try:
                bound = sig.bind(*args, **kwargs)
            except TypeError:
                pass
            else:
                return (namespace, name, canonical(list(bound.arguments.items())), "bound")
        return (namespace, name, canonical(args), canonical(kwargs))

    return key


def match_calls(
    recorded: list[CallRecord],
    replayed: list[CallRecord],
    key: Callable[[str, str, list[Any], dict[str, Any]], CallKey] | None = None,
) -> tuple[list[tuple[CallRecord, CallRecord]], list[CallRecord], list[CallRecord]]:
    """Pair replayed calls with recorded ones by binding and arguments, then occurrence.

    Returns ``(pairs, unrecorded, unused)``: matched ``(recorded, replayed)`` pairs, replayed
    calls with no recorded counterpart, and recorded calls no replayed call matched.
    """
    key = key or _key_fn({})
    queues: dict[CallKey, deque[CallRecord]] = defaultdict(deque)
    for rec in sorted(recorded, key=lambda c: c.id):
        queues[key(rec.namespace, rec.name, rec.args, rec.kwargs)].append(rec)
    pairs: list[tuple[CallRecord, CallRecord]] = []
    unrecorded: list[CallRecord] = []
    for rep in sorted(replayed, key=lambda c: (c.start_s, c.id)):
        queue = queues.get(key(rep.namespace, rep.name, rep.args, rep.kwargs))
        if queue:
            pairs.append((queue.popleft(), rep))
        else:
            unrecorded.append(rep)
    used = {id(r) for r, _ in pairs}
    unused = [r for r in sorted(recorded, key=lambda c: c.id) if id(r) not in used]
    return pairs, unrecorded, unused


def _answer(call: CallRecord) -> str:
    if call.ok:
        return "value " + canonical(call.value)
    e = call.error
    return f"error {e.ename}: {e.evalue}" if e is not None else "error"


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
    key = _key_fn(signatures)
    answers = _Answers(run, key)
    namespaces = {
        ns: {name: answers.binding(ns, name, signatures[(ns, name)]) for name in t}
        for ns, t in table.items()
    }
    return (namespaces or {"tools": {}}), key


# -- the report ---------------------------------------------------------------------------


@dataclass
class CallMatch:
    """A replayed call and the recorded call it matched; ``same_answer`` compares answers."""

    recorded: CallRecord
    replayed: CallRecord

    @property
    def same_answer(self) -> bool:
        return _answer(self.recorded) == _answer(self.replayed)

    def to_dict(self, full: bool = False) -> dict[str, Any]:
        """The pairing; ``full`` adds both calls whole (arguments and answers)."""
        d: dict[str, Any] = {
            "call": call_label(
                self.replayed.namespace,
                self.replayed.name,
                self.replayed.args,
                self.replayed.kwargs,
            ),
            "recorded_id": self.recorded.id,
            "replayed_id": self.replayed.id,
            "same_answer": self.same_answer,
        }
        if full:
            d["recorded"] = self.recorded.to_dict()
            d["replayed"] = self.replayed.to_dict()
        return d


@dataclass
class Difference:
    """The replay differs from the recording in ``field`` (status, error, stdout, ...)."""

    field: str
    recorded: Any
    replayed: Any
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "field": self.field,
            "recorded": self.recorded,
            "replayed": self.replayed,
            "detail": self.detail,
        }


def _text_diff(a: str, b: str, limit: int = 40) -> str:
    lines = list(
        difflib.unified_diff(
            a.splitlines(keepends=True), b.splitlines(keepends=True), "recorded", "replay", n=1
        )
    )
    if len(lines) > limit:
        lines = [*lines[:limit], f"... {len(lines) - limit} more diff lines\n"]
    return "".join(line if line.endswith("\n") else line + "\n" for line in lines)


def _status(run: RunResult) -> str:
    return run.status if run.error is None else f"{run.status} ({run.message})"


def compare_runs(recorded: RunResult, replayed: RunResult) -> list[Difference]:
    """How two runs of a program differ in status, error, stdout, stderr and value."""
    diffs: list[Difference] = []
    if recorded.status != replayed.status:
        diffs.append(
            Difference(
                "status",
                recorded.status,
                replayed.status,
                f"recorded {_status(recorded)}, replay {_status(replayed)}",
            )
        )
    re_, pe = recorded.error, replayed.error
    if re_ is not None and pe is not None and (re_.ename, re_.evalue) != (pe.ename, pe.evalue):
        diffs.append(
            Difference(
                "error",
                re_.to_dict(),
                pe.to_dict(),
                f"recorded {recorded.message}; replay {replayed.message}",
            )
        )
    for name in ("stdout", "stderr"):
        a, b = getattr(recorded, name), getattr(replayed, name)
        if a != b:
            diffs.append(Difference(name, a, b, _text_diff(a, b)))
    if canonical(recorded.value) != canonical(replayed.value):
        diffs.append(
            Difference(
                "value",
                recorded.value,
                replayed.value,
                f"recorded {short_repr(recorded.value, 200)}; "
                f"replay {short_repr(replayed.value, 200)}",
            )
        )
    return diffs


@dataclass
class ReplayReport:
    """What a replay did, against what was recorded. ``diverged`` is the verdict.

    ``matched``: replayed calls paired with recorded ones (``changed`` are those whose
    answer differed: only possible in live mode). ``unrecorded``: calls the recording does
    not have (in recorded mode they raised ``ToolError`` NotRecorded in the program).
    ``unused``: recorded calls the replay never made. ``differences``: status, error,
    stdout, stderr or value. In live mode, an ``unrecorded`` call reached its real binding
    only with ``live_any``; otherwise it raised ``ToolError`` NotRecorded in the program.
    """

    source: str
    run_number: int
    run_id: str
    live: bool
    program_edited: bool
    recorded: RunResult
    result: RunResult
    matched: list[CallMatch] = field(default_factory=list)
    #: Live bindings were allowed calls the recording does not hold.
    live_any: bool = False
    unrecorded: list[CallRecord] = field(default_factory=list)
    unused: list[CallRecord] = field(default_factory=list)
    differences: list[Difference] = field(default_factory=list)

    @property
    def changed(self) -> list[CallMatch]:
        return [m for m in self.matched if not m.same_answer]

    @property
    def diverged(self) -> bool:
        return bool(self.unrecorded or self.unused or self.changed or self.differences)

    @property
    def difference_count(self) -> int:
        """Every difference the report lists: calls answered differently, calls not in
        the recording, recorded calls never made, and differences in the run's outcome
        (status, error, stdout, stderr, value). The text and the JSON count the same."""
        return len(self.changed) + len(self.unrecorded) + len(self.unused) + len(self.differences)

    @property
    def stopped_at_unrecorded(self) -> CallRecord | None:
        """The call the recording lacks that ended the replayed program, if one did: the
        program let its ``ToolError`` NotRecorded go, so it made none of its later calls."""
        error = self.result.error
        if (
            self.live_any
            or error is None
            or error.ename != "ToolError"
            or f": {NOT_RECORDED}: " not in error.evalue
        ):
            return None
        for call in sorted(self.unrecorded, key=lambda c: (c.start_s, c.id), reverse=True):
            if call.error is not None and call.error.ename == NOT_RECORDED:
                return call
        return None

    @property
    def ok(self) -> bool:
        """True when the replay matched the recording exactly."""
        return not self.diverged

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (``kernelgate replay --json`` prints it)."""
        return {
            "source": self.source,
            "run_number": self.run_number,
            "run_id": self.run_id,
            "mode": ("live-any" if self.live_any else "live") if self.live else "recorded",
            "program_edited": self.program_edited,
            "diverged": self.diverged,
            "counts": {
                "recorded_calls": len(self.recorded.calls),
                "replayed_calls": len(self.result.calls),
                "matched": len(self.matched),
                "changed": len(self.changed),
                "unrecorded": len(self.unrecorded),
                "unused": len(self.unused),
                # differences in status, error, stdout, stderr and value
                "outcome_differences": len(self.differences),
                # everything listed: the number the text report gives
                "differences": self.difference_count,
            },
            "matched": [m.to_dict() for m in self.matched],
            "changed": [m.to_dict(full=True) for m in self.changed],
            "unrecorded": [c.to_dict() for c in self.unrecorded],
            "unused": [c.to_dict() for c in self.unused],
            "differences": [d.to_dict() for d in self.differences],
            "stopped_at_unrecorded": (
                None if (stop := self.stopped_at_unrecorded) is None else stop.to_dict()
            ),
            "replay": {
                "status": self.result.status,
                "value": self.result.value,
                "stdout": self.result.stdout,
                "stderr": self.result.stderr,
                "error": self.result.error.to_dict() if self.result.error else None,
                "duration_s": self.result.duration_s,
                "run_id": self.result.run_id,
            },
        }

    def format(self) -> str:
        """The report for people: what matched, what diverged and how."""
        mode = "live bindings" if self.live else "answers from the recording"
        program = "edited program" if self.program_edited else "recorded program"
        where = self.source or "a run in memory"
        if self.run_number != 1 or "session" in where:
            where += f", run {self.run_number}"
        lines = [f"replay of {where} (run id {self.run_id}): {program}, {mode}"]
        n_rec, n_rep = len(self.recorded.calls), len(self.result.calls)
        lines.append(
            f"  calls: {len(self.matched)} matched of {n_rec} recorded; the replay made {n_rep}"
        )
        if self.changed:
            lines.append(f"  {len(self.changed)} call(s) answered differently live:")
            for m in self.changed:
                lines.append(f"    recorded: {call_line(m.recorded)}")
                lines.append(f"    live:     {call_line(m.replayed)}")
        if self.unrecorded:
            how = (
                " (called live: --live-any)"
                if self.live_any
                else " (not called; the program got ToolError NotRecorded)"
            )
            lines.append(f"  {len(self.unrecorded)} call(s) not in the recording{how}:")
            stop = self.stopped_at_unrecorded
            for c in self.unrecorded:
                lines.append(f"    + {call_label(c.namespace, c.name, c.args, c.kwargs)}")
                if c is stop:
                    lines.append(
                        "      the program ended here: it did not catch this ToolError, so "
                        "its later calls were never made"
                    )
        if self.unused:
            lines.append(f"  {len(self.unused)} recorded call(s) never made:")
            for c in self.unused:
                lines.append(f"    - {call_line(c)}")
        for d in self.differences:
            if d.field in ("stdout", "stderr"):
                lines.append(f"  {d.field} differs:")
                lines += ["    " + line for line in d.detail.rstrip("\n").split("\n")]
            else:
                lines.append(f"  {d.field} differs: {d.detail}")
        if self.diverged:
            n = self.difference_count
            parts = [
                _count(
                    len(self.changed), "call answered differently", "calls answered differently"
                ),
                _count(
                    len(self.unrecorded), "call not in the recording", "calls not in the recording"
                ),
                _count(len(self.unused), "recorded call never made", "recorded calls never made"),
                _count(
                    len(self.differences),
                    "difference in " + ", ".join(d.field for d in self.differences),
                    "differences in " + ", ".join(d.field for d in self.differences),
                ),
            ]
            # The same count as the JSON's counts.differences, with what it is made of.
            lines.append(f"  in all: {'; '.join(p for p in parts if p)}")
            lines.append(f"DIVERGED: {n} difference{'' if n == 1 else 's'} from the recording")
        else:
            lines.append(
                "MATCHES: same calls with the same answers, same status, stdout, stderr and value"
            )
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.format()


def _count(n: int, one: str, many: str) -> str:
    return "" if n == 0 else f"1 {one}" if n == 1 else f"{n} {many}"


# -- replaying ----------------------------------------------------------------------------


def _limits(override: Any) -> Any:
    """The caller's limits, or the defaults: never the recording's (a recording is a
    file anyone may have written; its limits are shown, not applied)."""
    from kernelgate import Limits

    if override is None:
        return Limits()
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

    def wrap(self, namespace: str, name: str, binding: Any) -> Callable[..., Any]:
        fn = binding.fn
        if binding.is_async:

            async def gated(*args: Any, **kwargs: Any) -> Any:
                self.admit(namespace, name, list(args), kwargs)
                return await fn(*args, **kwargs)

            wrapped: Callable[..., Any] = gated
        else:

            def gated_sync(*args: Any, **kwargs: Any) -> Any:
                self.admit(namespace, name, list(args), kwargs)
                return fn(*args, **kwargs)

            wrapped = gated_sync
        wrapped.__name__ = wrapped.__qualname__ = name
        wrapped.__doc__ = inspect.getdoc(fn)
        if binding.signature is not None:
            wrapped.__signature__ = binding.signature  # type: ignore[attr-defined]
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


async def replay_async(
    source: str | os.PathLike[str] | RunResult,
    *,
    cell: int | None = None,
    program: str | None = None,
    live: Mapping[str, Any] | None = None,
    python: str | os.PathLike[str] | None = None,
    limits: Any = None,
    live_any: bool = False,
) -> ReplayReport:
    """:func:`replay` for async callers."""
    from kernelgate import Gateway
    from kernelgate.gateway.bindings import BindingRegistry

    if isinstance(source, RunResult):
        recorded = source
        where = recorded.source if isinstance(recorded, RecordedRun) else ""
        number = recorded.run_number if isinstance(recorded, RecordedRun) else 1
    else:
        recorded = load_run(source, cell)
        where, number = recorded.source, recorded.run_number
    if program is not None and not isinstance(program, str):
        raise TypeError(f"program must be Python source (str), got {type(program).__name__}")
    code = recorded.program if program is None else program
    run_limits = _limits(limits)
    if live_any and live is None:
        raise ValueError("live_any=True needs live= bindings to call")
    if live is not None:
        registry = BindingRegistry.from_arguments(None, "tools", _namespaces(live))
        signatures = {
            (ns, name): b.signature
            for ns, t in registry.namespaces.items()
            for name, b in t.items()
        }
        key = _key_fn(signatures)
        if live_any:
            namespaces = {
                ns: {name: b.fn for name, b in t.items()} for ns, t in registry.namespaces.items()
            }
        else:
            gate = _LiveGate(recorded, key)
            namespaces = {
                ns: {name: gate.wrap(ns, name, b) for name, b in t.items()}
                for ns, t in registry.namespaces.items()
            }
        gw = Gateway(namespaces=namespaces, limits=run_limits, python=python)
    else:
        namespaces, key = recorded_bindings(recorded)
        gw = Gateway(namespaces=namespaces, limits=run_limits, python=python)
    async with gw:
        result = await gw.run(code)
    pairs, unrecorded, unused = match_calls(recorded.calls, result.calls, key)
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
        differences=compare_runs(recorded, result),
    )


def replay(
    source: str | os.PathLike[str] | RunResult,
    *,
    cell: int | None = None,
    program: str | None = None,
    live: Mapping[str, Any] | None = None,
    python: str | os.PathLike[str] | None = None,
    limits: Any = None,
    live_any: bool = False,
) -> ReplayReport:
    """Re-run a recorded program in a fresh child and compare with the recording.

    ``source`` is a saved run (``.ipynb``), a session log with ``cell=N``, or a
    :class:`~kernelgate.RunResult`. Calls are answered from the recording, unless ``live``
    gives real bindings (namespace -> name -> callable); then the report also lists the
    calls whose live answer differs from the recorded one. A live binding is called only
    for a call the recording holds (same binding, same arguments, at most as often): any
    other call raises ``ToolError`` (``ename`` ``NotRecorded``) in the program without
    reaching the binding, and the report lists it; ``live_any=True`` calls whatever the
    program calls. ``program`` replays an edited program against the recording.

    ``limits`` are the replay's (default ``Limits()``): never the recording's, which a
    crafted file could set to anything. A damaged or crafted recording raises
    :class:`~kernelgate.notebooks.store.RecordingError` (a ``ValueError``) naming the field.

    >>> import tempfile
    >>> from kernelgate import Gateway
    >>> r = Gateway(bindings={"add": lambda a, b: a + b}).run_sync("await tools.add(1, 2)")
    >>> path = r.save(tempfile.mkdtemp() + "/run.ipynb")
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
    return asyncio.run(
        replay_async(
            source,
            cell=cell,
            program=program,
            live=live,
            python=python,
            limits=limits,
            live_any=live_any,
        )
    )
