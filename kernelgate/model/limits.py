"""Limits: the budgets of one run."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, cast

__all__ = ["Limits"]

#: ``max_frame_bytes`` when nothing asks for more.
DEFAULT_FRAME_BYTES = 8 * 1024 * 1024
#: The room a frame needs beside the run's value, for the envelope (headers, field names).
_ENVELOPE = 64 * 1024
#: The longest ``text/plain`` form of a value in a frame: the child cuts ``repr`` to 32K
#: characters, of at most 4 bytes each as JSON text (``\\`` or a 4-byte UTF-8 character);
#: short of that cut it is at most three times the value's JSON (``repr`` escapes a 2-byte
#: character as ``\xNN``, five bytes once escaped again as JSON).
_MAX_TEXT_FORM = 128 * 1024


def frame_headroom(max_value_bytes: int) -> int:
    """What ``max_frame_bytes`` needs beyond ``max_value_bytes``: the value travels in one
    frame with its ``text/plain`` form (at most three times the value's JSON, and at most
    128 KiB) and the envelope (64 KiB allowed).

    >>> frame_headroom(32 * 1024) // 1024, frame_headroom(64 << 20) // 1024
    (160, 192)
    """
    return min(3 * max_value_bytes, _MAX_TEXT_FORM) + _ENVELOPE


@dataclass(frozen=True)
class Limits:
    """Budgets for a run. Give one to ``Gateway(limits=...)``, or to ``run(limits=...)``
    to replace the gateway's for one run.

    >>> Limits(wall_seconds=5).wall_seconds
    5
    >>> Limits(max_value_bytes=64 << 20).max_frame_bytes == (64 << 20) + (192 << 10)
    True
    >>> Limits(max_calls=0)
    Traceback (most recent call last):
    ...
    ValueError: Limits.max_calls must be a positive integer, got 0
    """

    #: Whole run, start to settled. On expiry: SIGTERM to the process group, SIGKILL after
    #: ``kill_grace_seconds``; status ``"timeout"``.
    wall_seconds: float = 600.0
    #: stdout + stderr kept (UTF-8 bytes). Beyond it the text is cut with one marker and the
    #: run goes on.
    max_output_bytes: int = 64 * 1024
    #: The run's value as JSON. Beyond it: status ``"output_limit"``.
    max_value_bytes: int = 32 * 1024
    #: Binding calls per run. Beyond it each further call raises ``ToolError`` in the program.
    max_calls: int = 10_000
    #: Binding calls the host runs at once; more wait their turn (they never fail for it).
    max_calls_in_flight: int = 1024
    #: Largest message on fd 3, either direction. A bigger one from the child: ``"protocol"``.
    #: Unset (``None``), it follows ``max_value_bytes``: ``max(8 MiB, max_value_bytes +
    #: frame_headroom(max_value_bytes))``, so raising the value's budget is enough to
    #: return a bigger value. Set, it must be at least that sum (the headroom is 64 KiB
    #: plus the value's text form: three times its size, at most 128 KiB). Always an int once
    #: built.
    max_frame_bytes: int = cast(int, None)
    #: Rich outputs kept (display_data, error and execute_result, as JSON). Beyond it one
    #: marker output says so and later ones are dropped; the run goes on.
    max_display_bytes: int = 16 * 1024 * 1024
    #: Time between SIGTERM and SIGKILL when a run is stopped.
    kill_grace_seconds: float = 3.0
    #: CPU time of the program's process (RLIMIT_CPU; SIGXCPU, then SIGKILL one second
    #: later for a program that traps it). Expiry: status ``"timeout"`` naming CPU.
    cpu_seconds: float = 60.0
    #: Address space of each process (RLIMIT_AS): MemoryError, or ``"worker_exit"``. Where the
    #: host can make a memory cgroup, also everything the run's processes hold together
    #: (memfd, tmpfs, SysV shared memory, socket and pipe buffers, swap): past it the kernel
    #: kills and the run ends ``"worker_exit"`` naming memory_bytes.
    memory_bytes: int = 512 * 1024 * 1024
    #: Processes the run may have at once (pids cgroup, or RLIMIT_NPROC in a user namespace).
    max_processes: int = 64
    #: Largest file the program may write (RLIMIT_FSIZE): beyond it writes fail (EFBIG).
    max_file_bytes: int = 64 * 1024 * 1024
    #: Open file descriptors per process (RLIMIT_NOFILE).
    max_open_files: int = 256

    def __post_init__(self) -> None:
        follow = self.max_frame_bytes is None
        for f in fields(self):
            value = getattr(self, f.name)
            if value is None and f.name == "max_frame_bytes":
                continue
            if f.type in ("float",):
                if (
                    isinstance(value, bool)
                    or not isinstance(value, (int, float))
                    or not (value > 0 and value != float("inf"))
                ):
                    raise ValueError(
                        f"Limits.{f.name} must be a positive number of seconds, got {value!r}"
                    )
            elif isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"Limits.{f.name} must be a positive integer, got {value!r}")
        need = self.max_value_bytes + frame_headroom(self.max_value_bytes)
        if follow:
            # Frozen: the derived size is set once, here, and is an ordinary field from then
            # on (to_dict, repr, equality and pickling see a plain int).
            object.__setattr__(
                self,
                "max_frame_bytes",
                max(DEFAULT_FRAME_BYTES, need),
            )
        elif need > self.max_frame_bytes:
            raise ValueError(
                f"Limits.max_frame_bytes={self.max_frame_bytes} is too small for "
                f"max_value_bytes={self.max_value_bytes}: the value travels in one frame with "
                f"its text form and envelope, so max_frame_bytes must be at least {need}. "
                "Raise max_frame_bytes, or leave it unset (None) so it follows "
                "max_value_bytes (dataclasses.replace copies it: pass max_frame_bytes=None)"
            )

    def to_dict(self) -> dict[str, Any]:
        # Every field is a number: no deep copy needed (asdict's costs as much as a run's
        # other bookkeeping together).
        return {f.name: getattr(self, f.name) for f in fields(self)}
