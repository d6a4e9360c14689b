"""What a replay did, against what was recorded: :class:`ReplayReport`, for people
(:meth:`~ReplayReport.format`) and programs (:meth:`~ReplayReport.to_dict`)."""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Any

from kernelgate.gateway.recording.calls import call_label, call_line
from kernelgate.gateway.recording.values import canonical, short_repr
from kernelgate.model.result import CallRecord, RunResult

from .matching import NOT_RECORDED

__all__ = ["CallMatch", "Difference", "ReplayReport", "compare_runs"]


def _answer(call: CallRecord) -> str:
    if call.ok:
        return "value " + canonical(call.value)
    e = call.error
    return f"error {e.ename}: {e.evalue}" if e is not None else "error"


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
    #: How the replay was run, where it matters for reading it (e.g. its time budget).
    note: str = ""

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
            "note": self.note,
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
        if self.note:
            lines.append(f"  {self.note}")
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
