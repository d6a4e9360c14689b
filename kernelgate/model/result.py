"""RunResult and its parts: what a run printed, returned, called, or why it failed."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Literal, get_args

from .language import DEFAULT_LANGUAGE, Language

__all__ = [
    "RunResult",
    "CallRecord",
    "ErrorInfo",
    "Status",
    "STATUSES",
    "ChildStatus",
    "CHILD_STATUSES",
]

#: How a run ended. ``ok``: it finished and its value is ``value``; ``exception``: the
#: program raised; ``timeout``: a time budget ran out (wall clock or CPU); ``interrupted``:
#: stopped by the caller; ``worker_exit``: the process died before reporting;
#: ``invalid_output``: the final value is not JSON where JSON was required;
#: ``output_limit``: the value is over ``max_value_bytes``; ``protocol``: the child broke
#: the wire protocol; ``sandbox_unavailable``: the requested isolation could not be had.
Status = Literal[
    "ok",
    "exception",
    "timeout",
    "interrupted",
    "worker_exit",
    "invalid_output",
    "output_limit",
    "protocol",
    "sandbox_unavailable",
]
#: Every status a run can end with, in the order :data:`Status` lists them.
STATUSES: tuple[Status, ...] = get_args(Status)

#: The statuses the child may report itself in its ``execute_reply``; the others
#: (``timeout``, ``interrupted``, ``worker_exit``, ``protocol``) only the host decides.
ChildStatus = Literal["ok", "exception", "invalid_output", "output_limit", "sandbox_unavailable"]
CHILD_STATUSES: frozenset[ChildStatus] = frozenset(get_args(ChildStatus))


@dataclass
class ErrorInfo:
    """Why a run (or a call) failed. ``traceback`` shows the program's frames only."""

    ename: str
    evalue: str
    traceback: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class CallRecord:
    """One binding call: what the program asked, what the host answered, and when.

    ``start_s`` is seconds from the start of the run; ``output_index`` is how many outputs
    the run had when the call completed (where it belongs among them).
    """

    id: int
    namespace: str
    name: str
    args: list[Any]
    kwargs: dict[str, Any]
    ok: bool = False
    value: Any = None
    error: ErrorInfo | None = None
    start_s: float = 0.0
    duration_s: float = 0.0
    output_index: int = 0

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        return d


@dataclass
class RunResult:
    """The outcome of one run. Failures are data: ``status`` says which, ``error`` why.

    >>> r = RunResult(status="ok", value=3)
    >>> r.ok, r.to_dict()["value"]
    (True, 3)
    """

    status: Status
    value: Any = None
    stdout: str = ""
    stderr: str = ""
    outputs: list[dict[str, Any]] = field(default_factory=list)
    error: ErrorInfo | None = None
    calls: list[CallRecord] = field(default_factory=list)
    duration_s: float = 0.0
    exit_code: int | None = None
    signal: int | None = None
    run_id: str = ""
    started_at: str = ""
    program: str = ""
    interpreter: str = ""
    limits: dict[str, Any] = field(default_factory=dict)
    bindings: dict[str, dict[str, str]] = field(default_factory=dict)
    #: How the run was isolated: "process", "namespaces" or "namespaces+landlock".
    isolation: str = ""
    #: cpu_user_s, cpu_system_s, peak_memory_bytes, calls, bytes_in, bytes_out, and warm
    #: (the child came from the warm pool); measured_by says who measured them ("host":
    #: /proc at the reply, or the reaped child's rusage). peak_memory_scope says what the
    #: peak is: "run" (the run's memory cgroup: all its processes together, memfd, tmpfs,
    #: shared memory and kernel buffers included) or "process" (no memory cgroup here: the
    #: largest process's RSS).
    usage: dict[str, Any] = field(default_factory=dict)
    #: What a model should know about a run that ended well, e.g. that the final
    #: expression's value was not JSON (so ``value`` is None). Empty when there is nothing.
    note: str = ""
    #: What the program was written in ("python", "typescript", "javascript"): which
    #: runtime ran it, and which replays it.
    language: Language = DEFAULT_LANGUAGE
    #: What the run's stream output lost to ``max_output_bytes`` (kept head and tail, one
    #: marker between): ``{}`` when nothing, else ``stream`` (the one whose text holds the
    #: marker), ``text`` (the marker) and, per stream that lost text, ``{"at": where in
    #: its text (characters), "bytes", "chars", "lines"}``: what is not there.
    output_cut: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def message(self) -> str:
        """One line saying how the run ended, written for a model to read."""
        if self.error is None:
            return f"ok; {self.note}" if self.note else "ok"
        return f"{self.error.ename}: {self.error.evalue}" if self.error.ename else self.error.evalue

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict of every field."""
        d = asdict(self)
        d["ok"] = self.ok
        return d

    if not TYPE_CHECKING:
        # Hidden from type checkers, which then report ``result.save`` themselves (a
        # ``__getattr__`` they saw would make every attribute of a RunResult type-check).

        def __getattr__(self, name: str) -> Any:
            """Only for names a RunResult lacks: say where the removed writers went."""
            default = f"{type(self).__name__!r} object has no attribute {name!r}"
            raise AttributeError(_REMOVED.get(name, default), name=name, obj=self)

    def __repr__(self) -> str:
        return (
            f"RunResult(status={self.status!r}, value={_short(self.value)}, "
            f"stdout={_short(self.stdout)}, calls={len(self.calls)}, "
            f"duration_s={self.duration_s:.4f})"
        )


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


#: What became of the methods that wrote a run as a notebook. The writer sits above the
#: model (it needs the sanitizer and, for a NotebookNode, nbformat; the model is stdlib
#: only, as the child imports it), and the model imports nothing above it
#: (tests/test_layers.py), so they are functions now.
_REMOVED = {
    "save": (
        "RunResult.save(path) is gone: use kernelgate.save_run(result, path) "
        "(or Gateway(record_to=DIR) for every run); docs/notebooks.md"
    ),
    "to_notebook": (
        "RunResult.to_notebook() is gone: use kernelgate.notebooks.run_to_notebook(result); "
        "docs/notebooks.md"
    ),
}
