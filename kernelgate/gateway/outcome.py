"""How a run ended, decided from plain facts: its status, message, note and RunResult.

Pure: nothing here reads a process, a file or a clock. A run records what happened in a
:class:`Verdicts` (the first decisive event) and an :class:`Ending` (everything else it
saw), and :func:`build_result` turns them into a :class:`RunResult`. So every status, the
precedence between verdicts that compete, the truncation markers and the note are tested
without starting a child (tests/gateway/test_outcome.py).

>>> verdicts = Verdicts()
>>> verdicts.decide(wall_timeout(Limits(wall_seconds=2)))
True
>>> r = build_result(Ending(verdicts.decided, None, limits=Limits(wall_seconds=2)))
>>> r.status, r.error.ename, r.outputs[-1]["output_type"]
('timeout', 'Timeout', 'error')
"""

from __future__ import annotations

import signal as signal_module
from dataclasses import dataclass, field
from typing import Any, cast

from kernelgate.model.language import DEFAULT_LANGUAGE, Language
from kernelgate.model.limits import Limits
from kernelgate.model.result import CallRecord, ErrorInfo, RunResult, Status
from kernelgate.wire.events import ExecuteReply

from .cgroups import MemoryUse

__all__ = [
    "ERROR_TEXT_LIMIT",
    "MAX_TEXT_PLAIN",
    "Ending",
    "Verdict",
    "Verdicts",
    "build_result",
    "cap_lines",
    "cpu_verdict",
    "cut_text_plain",
    "display_cut_output",
    "interpreter_failed",
    "interrupted",
    "memory_exceeded",
    "protocol",
    "reply_verdict",
    "sandbox_unavailable",
    "usage_of",
    "value_not_json",
    "value_too_large",
    "wall_timeout",
    "worker_exit",
]

#: The longest error text (an evalue, a traceback's lines together) the host keeps.
ERROR_TEXT_LIMIT = 64 * 1024
#: The longest ``text/plain`` form of a run's value the host keeps.
MAX_TEXT_PLAIN = 64 * 1024


@dataclass(frozen=True)
class Verdict:
    """The host's decision about how a run ends: a status, and why (``ename: message``)."""

    status: Status
    ename: str
    message: str
    traceback: tuple[str, ...] = ()  # a program refused before it ran may have one


class Verdicts:
    """The first decisive event of a run wins: the child's ``execute_reply``, or one of the
    host's verdicts (timeout, interrupt, protocol, ...). Nothing after it changes the status.

    >>> v = Verdicts()
    >>> v.decide(interrupted("stopped")), v.decide(protocol("junk"))
    (True, False)
    >>> v.decided.status, v.settled, v.refused
    ('interrupted', True, False)
    """

    __slots__ = ("decided", "refused", "reply", "settled")

    def __init__(self) -> None:
        self.decided: Verdict | None = None
        self.reply: ExecuteReply | None = None
        #: The outcome is decided: no answer goes to the child any more.
        self.settled = False
        #: The host refused the child's traffic: nothing more of it is read or recorded.
        #: (Plain attributes, not properties: fd 3's read loop checks them per event.)
        self.refused = False

    def decide(self, verdict: Verdict) -> bool:
        """Take ``verdict`` unless the run is already decided; True if taken."""
        if self.settled:
            return False
        self.decided = verdict
        self.settled = True
        self.refused = verdict.status == "protocol"
        return True

    def accept_reply(self, reply: ExecuteReply) -> bool:
        """Take the child's reply unless the host decided first; True if taken."""
        if self.decided is not None:
            return False
        self.reply = reply
        self.settled = True
        return True


# -- the host's verdicts, each saying what was wrong, with the value, and what to do ------


def sandbox_unavailable(message: str) -> Verdict:
    return Verdict("sandbox_unavailable", "SandboxUnavailable", message)


def interpreter_failed(python: str, exc: BaseException) -> Verdict:
    return Verdict(
        "worker_exit", "WorkerExit", f"could not start the interpreter {python!r}: {exc}"
    )


def interrupted(message: str) -> Verdict:
    return Verdict("interrupted", "Interrupted", message)


def wall_timeout(limits: Limits) -> Verdict:
    return Verdict(
        "timeout",
        "Timeout",
        f"the run passed its wall-clock budget of wall_seconds={limits.wall_seconds:g} "
        "and was stopped; do less per run, or raise Limits.wall_seconds",
    )


def protocol(detail: str) -> Verdict:
    return Verdict(
        "protocol",
        "ProtocolError",
        f"the program's process sent control traffic on fd 3 that the host refused: "
        f"{detail}. Programs must not read or write fd 3",
    )


def value_too_large(limits: Limits) -> Verdict:
    return Verdict(
        "output_limit",
        "OutputLimit",
        f"the program's value is over max_value_bytes={limits.max_value_bytes} "
        "bytes as JSON; return less, or raise Limits.max_value_bytes",
    )


def value_not_json(exc: Exception) -> Verdict:
    return Verdict("invalid_output", "InvalidOutput", f"the program's value: {exc}")


def reply_verdict(reply: ExecuteReply, warm: bool, events_seen: int) -> Verdict | None:
    """A reply the host refuses: ``sandbox_unavailable`` from a child that had entered its
    sandbox. A warm child entered it before its program arrived, and a cold one reports a
    failure to enter it before anything else: this claim comes from a program that ran
    inside the sandbox."""
    if reply.run_status == "sandbox_unavailable" and (warm or events_seen):
        return protocol(
            "an execute_reply claiming sandbox_unavailable from a child that had "
            "entered its sandbox" + (" (a warm child)" if warm else "")
        )
    return None


def cpu_verdict(
    limits: Limits,
    replied: bool,
    decided: Verdict | None,
    sig: int | None,
    usage: dict[str, Any],
    busiest_cpu_s: float,
) -> Verdict | None:
    """A CPU budget verdict that outranks what was decided, or None.

    Killed by SIGXCPU (or by SIGKILL once its CPU reached the budget: RLIMIT_CPU's hard
    limit) without a reply, the run is a ``timeout`` naming CPU, also over a wall-clock
    timeout. A run that replied is judged by the most CPU one of its processes used, as the
    host read it (RLIMIT_CPU acts on whole seconds and a program may trap SIGXCPU until the
    hard limit): over ``cpu_seconds`` is a timeout too.
    """
    cpu = usage.get("cpu_user_s", 0.0) + usage.get("cpu_system_s", 0.0)
    if (
        not replied
        and (decided is None or decided.status == "timeout")
        and sig is not None
        and (
            sig == signal_module.SIGXCPU
            or (sig == signal_module.SIGKILL and cpu >= limits.cpu_seconds)
        )
    ):
        return Verdict(
            "timeout",
            "Timeout",
            f"the program used its CPU budget of cpu_seconds={limits.cpu_seconds:g} "
            f"({cpu:.2f} s of CPU) and was stopped; do less work per run, or raise "
            "Limits.cpu_seconds",
        )
    if decided is None and replied and busiest_cpu_s > limits.cpu_seconds:
        return Verdict(
            "timeout",
            "Timeout",
            f"the program used more than its CPU budget of cpu_seconds="
            f"{limits.cpu_seconds:g} ({busiest_cpu_s:.2f} s of CPU); do less work per run, "
            "or raise Limits.cpu_seconds",
        )
    return None


def _signal_name(num: int) -> str:
    try:
        return signal_module.Signals(num).name
    except ValueError:
        return f"signal {num}"


def worker_exit(limits: Limits, sig: int | None, exit_code: int | None) -> Verdict:
    """The child ended without a reply: by a signal (with what usually sends it), or with
    an exit code."""
    if sig is not None:
        memory = f"; it may have run out of memory (memory_bytes={limits.memory_bytes})"
        hint = {
            int(signal_module.SIGSEGV): f" (a crash, usually in C code{memory})",
            int(signal_module.SIGKILL): f" (killed from outside{memory})",
            int(signal_module.SIGABRT): f" (an abort, usually in C code{memory})",
            int(signal_module.SIGBUS): f" (a bus error{memory})",
            int(signal_module.SIGSYS): (
                " (a system call the sandbox forbids: another architecture's system "
                "call ABI, or one seccomp kills)"
            ),
        }.get(sig, "")
        message = (
            f"the program's process was killed by {_signal_name(sig)} ({sig}){hint} "
            "before it reported a result"
        )
    else:
        message = (
            f"the program's process exited with code {exit_code} before it reported "
            "a result (os._exit, or the interpreter failed)"
        )
    return Verdict("worker_exit", "WorkerExit", message)


def memory_exceeded(limits: Limits, memory: MemoryUse) -> Verdict:
    """The kernel killed processes of the run for its memory cgroup's limit: the run's
    processes together held ``memory_bytes``, whatever the memory (an address space, or
    memfd, tmpfs, shared memory and kernel buffers no address space shows). The run ends
    so even if its program survived to reply (a child of its was killed): under cgroup v2
    the kernel kills the whole run (memory.oom.group), and a run reads the same on v1.

    >>> memory_exceeded(Limits(memory_bytes=1 << 27), MemoryUse(1 << 27, 1)).message[:66]
    'the run held more than memory_bytes=134217728 in total (134217728 '
    """
    killed = "a process" if memory.oom_kills == 1 else f"{memory.oom_kills} processes"
    return Verdict(
        "worker_exit",
        "WorkerExit",
        f"the run held more than memory_bytes={limits.memory_bytes} in total "
        f"({memory.peak_bytes} bytes at its peak, all its processes together; memory the "
        "program filled through memfd, shared memory or tmpfs files, and socket and pipe "
        f"buffers, counts), so the kernel killed {killed} of it; use less memory (free "
        "what you fill, close what you no longer need), or raise Limits.memory_bytes",
    )


# -- truncation ----------------------------------------------------------------------------


def cap_lines(lines: list[str], limit: int = ERROR_TEXT_LIMIT) -> list[str]:
    """Keep lines while they fit ``limit`` characters (each with its newline), then one
    marker saying how many were cut.

    >>> cap_lines(["a" * 5, "b" * 5, "c"], limit=8)
    ['aaaaa', '... [2 more traceback lines cut]']
    """
    kept: list[str] = []
    used = 0
    for line in lines:
        used += len(line) + 1
        if used > limit:
            kept.append(f"... [{len(lines) - len(kept)} more traceback lines cut]")
            break
        kept.append(line)
    return kept


def cut_text_plain(text: str, limit: int = MAX_TEXT_PLAIN) -> str:
    """A value's ``text/plain`` form, cut at ``limit`` characters with a marker.

    >>> cut_text_plain("abcdef", 3)
    'abc... [cut]'
    """
    return text if len(text) <= limit else text[:limit] + "... [cut]"


def display_cut_output(limit: int) -> dict[str, Any]:
    """The one output that stands where rich outputs passed ``max_display_bytes``."""
    return {
        "output_type": "display_data",
        "data": {
            "text/plain": f"[kernelgate: rich output cut here: display, error and "
            f"result outputs together passed max_display_bytes={limit} bytes]"
        },
        "metadata": {},
    }


# -- the result ------------------------------------------------------------------------------


@dataclass(slots=True)  # not frozen: made on the way to the caller, at a third of the cost
class Ending:
    """Everything a run saw that its result is built from, as plain data.

    ``returncode`` is ``os.waitpid`` style (-N for signal N), None while unreaped;
    ``rusage`` is (user s, system s, peak RSS KiB) of the reaped child; ``host_usage``
    what the host read of its processes in /proc when the reply came; ``memory`` what the
    run's memory cgroup counted (its peak, its OOM kills); ``busiest_cpu_s``
    the most CPU one of them had used. ``result_output`` is the value's own output among
    ``outputs`` (dropped when the run failed). ``started`` is False when no child was
    started (then the run has no isolation to report).
    """

    decided: Verdict | None
    reply: ExecuteReply | None
    limits: Limits = field(default_factory=Limits)
    returncode: int | None = None
    rusage: tuple[float, float, int] | None = None
    #: The host's peak RSS when it spawned the child (bytes; 0 for a warm child): the
    #: kernel puts it in a cold child's ru_maxrss, so a peak no larger is not the child's.
    inherited_peak_bytes: int = 0
    host_usage: dict[str, Any] | None = None
    #: What the run's memory cgroup counted (None: no memory cgroup here).
    memory: MemoryUse | None = None
    busiest_cpu_s: float = 0.0
    value: Any = None
    result_output: dict[str, Any] | None = None
    outputs: tuple[dict[str, Any], ...] = ()
    stdout: str = ""
    stderr: str = ""
    output_cut: dict[str, Any] = field(default_factory=dict)
    calls: tuple[CallRecord, ...] = ()
    hook_errors: tuple[str, ...] = ()
    bytes_in: int = 0
    bytes_out: int = 0
    warm: bool = False
    started: bool = True
    level: str = "process"
    run_id: str = ""
    started_at: str = ""
    duration_s: float = 0.0
    program: str = ""
    interpreter: str = ""
    language: Language = DEFAULT_LANGUAGE
    bindings: dict[str, dict[str, str]] = field(default_factory=dict)


def usage_of(end: Ending) -> dict[str, Any]:
    """What the run used, and who measured it: the reaped child's rusage; else what the
    host read in /proc at the reply (a lower bound the child's own figures may only raise:
    a program may overstate its usage, never hide it); else the child's word, labelled."""
    usage: dict[str, Any] = {
        "cpu_user_s": 0.0,
        "cpu_system_s": 0.0,
        "peak_memory_bytes": 0,
        "calls": len(end.calls),
        "bytes_in": end.bytes_in,
        "bytes_out": end.bytes_out,
        "warm": end.warm,
    }
    reported: dict[str, Any] = {}
    if end.reply is not None and end.reply.usage:
        for key, v in end.reply.usage.items():
            reported[key] = round(v, 6) if key.startswith("cpu") else int(v)

    def own(peak: int) -> int:
        # A cold child's ru_maxrss (reaped, or in its report) is at least the host's own
        # peak, inherited at exec: no larger, it says nothing of the child (nor is it the
        # run's to report). 0 then: /proc and the memory cgroup give the child's.
        return peak if peak > end.inherited_peak_bytes else 0

    counted = dict(reported)  # what is counted of the child's word (kept as it said it)
    if "peak_memory_bytes" in counted:
        counted["peak_memory_bytes"] = own(counted["peak_memory_bytes"])
    if end.rusage is not None:
        user, system, maxrss_kib = end.rusage
        usage["cpu_user_s"] = round(user, 6)
        usage["cpu_system_s"] = round(system, 6)
        usage["peak_memory_bytes"] = own(maxrss_kib * 1024)  # Linux reports KiB
        if end.host_usage is not None:
            # What /proc showed at the reply: the peak when the kernel's was only the host's;
            # and the CPU of processes the reaped one never waited for (the program's own
            # children, orphaned and then killed with its namespace: in no rusage).
            for key in ("cpu_user_s", "cpu_system_s", "peak_memory_bytes"):
                usage[key] = max(usage[key], end.host_usage.get(key, 0))
        usage["measured_by"] = "host"
    elif end.host_usage is not None:
        for key, v in end.host_usage.items():
            usage[key] = max(v, counted.get(key, 0))
        usage["measured_by"] = "host"
    elif reported:
        usage.update(counted)
        usage["measured_by"] = "child"
    else:
        usage["measured_by"] = "none"
    usage["peak_memory_scope"] = "process"
    if end.memory is not None:
        # The run's memory cgroup: every process together, memory outside an address
        # space included. A process's RSS may also count pages it shares with the warm
        # pool's zygote (charged there): the larger figure is kept.
        usage["peak_memory_bytes"] = max(usage["peak_memory_bytes"], end.memory.peak_bytes)
        usage["peak_memory_scope"] = "run"
        usage["measured_by"] = "host"
    if reported:
        usage["child_reported"] = reported
    return usage


def _exit_of(end: Ending) -> tuple[int | None, int | None]:
    """(exit code, signal): a run that replied ended as it said (whether it is reaped yet
    is moot)."""
    if end.reply is not None:
        return 0, None
    if end.returncode is None:
        return None, None
    if end.returncode < 0:
        return None, -end.returncode
    return end.returncode, None


def _busiest(end: Ending) -> float:
    """The most CPU one process of the run used: what the host read of each live process,
    or the program's own figure of itself and the children it reaped (a process that
    already exited is gone from /proc; a program may overstate, never hide, its use)."""
    reported = (end.reply.usage or {}) if end.reply is not None else {}
    return max(
        end.busiest_cpu_s,
        float(reported.get("cpu_user_s", 0.0)) + float(reported.get("cpu_system_s", 0.0)),
    )


def _note(end: Ending) -> str:
    """What a model should know about a run that ended well."""
    data = (end.result_output or {}).get("data") or {}
    if data and "application/json" not in data:
        return (
            "the final expression's value is not JSON, so value is None (its repr is "
            "in outputs); return JSON data (dict, list, str, int, float, bool, None) "
            "to get it as the value"
        )
    return ""


def build_result(end: Ending) -> RunResult:
    """The :class:`RunResult` of a run that ended as ``end`` says.

    The status is the host's verdict if it decided (a CPU verdict outranks a wall-clock
    one and a reply that overran the budget), else ``worker_exit`` naming memory_bytes if
    the kernel killed any process of the run for its memory cgroup's limit, else the
    child's reply, else ``worker_exit``. A failed run's outputs end with its error and lose
    the value's output.
    """
    exit_code, sig = _exit_of(end)
    usage = usage_of(end)
    decided = end.decided
    verdict = (
        cpu_verdict(end.limits, end.reply is not None, decided, sig, usage, _busiest(end))
        or decided
    )
    value: Any = None
    error: ErrorInfo | None = None
    note = ""
    outputs = list(end.outputs)
    if verdict is None and end.memory is not None and end.memory.oom_kills:
        verdict = memory_exceeded(end.limits, end.memory)
    if verdict is None and end.reply is not None:
        status = cast(Status, end.reply.run_status)  # the wire checked it: CHILD_STATUSES
        if status == "ok":
            value = end.value
            note = _note(end)
        else:
            reply = end.reply
            error = ErrorInfo(reply.ename, reply.evalue, cap_lines(reply.traceback))
    else:
        if verdict is None:
            verdict = worker_exit(end.limits, sig, exit_code)
        status = verdict.status
        error = ErrorInfo(verdict.ename, verdict.message, cap_lines(list(verdict.traceback)))
        outputs = [o for o in outputs if o is not end.result_output]
        outputs.append({"output_type": "error", **error.to_dict()})
    return RunResult(
        status=status,
        value=value,
        stdout=end.stdout,
        stderr=end.stderr,
        output_cut=end.output_cut,
        outputs=outputs,
        error=error,
        calls=list(end.calls),
        duration_s=end.duration_s,
        exit_code=exit_code,
        signal=sig,
        run_id=end.run_id,
        started_at=end.started_at,
        program=end.program,
        interpreter=end.interpreter,
        language=end.language,
        limits=end.limits.to_dict(),
        bindings=end.bindings,
        # The host's plan, never the child's word; none when the sandbox was not entered.
        isolation=end.level if end.started and status != "sandbox_unavailable" else "",
        note="; ".join([*([note] if note else []), *end.hook_errors]),
        usage=usage,
    )
