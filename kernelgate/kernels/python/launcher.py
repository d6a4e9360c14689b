"""Confine a runtime that cannot confine itself (Node), then exec it. Stdlib only.

JavaScript cannot call ``unshare``, landlock, seccomp or ``prctl``, so a Node child is
confined before it exists. The host starts ``python -I -S -c LAUNCHER ROOT``
(:data:`kernelgate.kernels.python.LAUNCHER`) with fd 1 and 2 its pipes, fd 3 the
socketpair, and fd 0 a pipe carrying one JSON object (:func:`read_config`), then EOF. The
host closes that pipe once this process is in the run's cgroup: everything the sandbox forks
(the mirror, the init, the program) is counted there from its first instruction.

Then the launcher applies the sandbox a Python child applies to itself, with the same code in
the same order (:func:`.bootstrap.main`, then :func:`.sandbox.enter`): killed with its parent
and not dumpable; the namespaces and the view (kept: the runtime's binary, libraries and
kernel); the rlimits but those that do not suit the runtime (``RLIMIT_AS`` for V8:
:data:`.sandbox.UNSUITED_RLIMITS`); the run's uid, landlock (reads: the system's paths and
the runtime's, not this interpreter's), no capabilities, the runtime's seccomp filter. Last,
fd 0 is ``/dev/null``, every fd from 4 up is closed, and it ``execve``s the runtime, which
keeps fds 0-3.

What ``execve`` keeps and resets, and why each is safe for the exec'd program:

- kept: ``no_new_privs``, the landlock domain, the seccomp filter, the namespaces and the
  view, the rlimits, the run's uid, the parent-death signal (cleared only when the exec
  changes credentials: a set-id file, impossible under ``no_new_privs`` and ``nosuid``);
- capabilities: recomputed from the file and the bounding set. At the namespace levels the
  program is uid 0 of its user namespace, but the bounding set is empty, so it gets none; at
  ``process`` on a root host it loses the CAP_DAC_READ_SEARCH the launcher kept (no
  inheritable or ambient set), so the runtime, its kernel and ``read_paths`` must be
  readable by the run's uid;
- dumpable: back to 1 (JavaScript cannot clear it). Other runs are kept out by their own
  uid (a root host), their pid namespaces, and at ``process`` by the run's landlock domain
  (ptrace scoping), and the seccomp filter denies ``ptrace``, ``process_vm_readv`` and
  ``pidfd_getfd`` to every run.

If the sandbox cannot be entered, nothing is exec'd: a cold child answers its
``execute_request`` with ``sandbox_unavailable``, as a Python child would; a warm one
(started ahead) exits 71 with the reason on stderr, and its pool drops it.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from typing import Any

from kernelgate.model.constants import LAUNCH_CONFIG_MAX
from kernelgate.wire.connection import CHILD, Connection
from kernelgate.wire.events import ErrorOutput, ExecuteReply, ExecuteRequest

from .sandbox import LEVELS, Launched, die_with_parent, not_dumpable
from .sandbox import enter as enter_sandbox

__all__ = ["MAX_CONFIG_BYTES", "WARM_FAILED", "Launch", "read_config", "main"]

#: The config fits the pipe's buffer, so the host's one write never blocks.
MAX_CONFIG_BYTES = LAUNCH_CONFIG_MAX
#: A warm launcher that could not enter its sandbox exits with this (as a warm Python child).
WARM_FAILED = 71

_os_exit = os._exit
CONTROL_FD = 3  # the socketpair to the host (.client.CONTROL_FD, which loads asyncio)


class Launch:
    """What the host asked for: the sandbox options (the ``options`` a Python child gets
    in its ``execute_request``: ``cwd`` and ``sandbox``), the runtime, and what to exec."""

    def __init__(self, config: Any) -> None:
        if not isinstance(config, dict):
            raise ValueError(
                f"the launch config must be a JSON object, not {type(config).__name__}"
            )
        self.warm = config.get("warm") is True
        sandbox = config.get("sandbox")
        if not isinstance(sandbox, dict) or sandbox.get("level") not in LEVELS:
            raise ValueError(
                f"the launch config's sandbox.level must be one of {', '.join(LEVELS)}; "
                f"got {sandbox.get('level') if isinstance(sandbox, dict) else sandbox!r}"
            )
        cwd = config.get("cwd")
        if not isinstance(cwd, str) or not os.path.isabs(cwd):
            raise ValueError(f"the launch config's cwd must be an absolute path; got {cwd!r}")
        self.options: dict[str, Any] = {"cwd": cwd, "sandbox": sandbox}
        self.executable = _absolute(config.get("executable"), "executable")
        argv = config.get("argv")
        if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
            raise ValueError(
                f"the launch config's argv must be a non-empty list of strings; got {argv!r}"
            )
        self.argv: list[str] = argv
        paths = config.get("runtime_paths")
        if not isinstance(paths, list):
            raise ValueError(f"the launch config's runtime_paths must be a list; got {paths!r}")
        self.runtime = Launched(
            str(config.get("runtime")), [_absolute(p, "runtime_paths entry") for p in paths]
        )


def _absolute(value: Any, what: str) -> str:
    if not isinstance(value, str) or not os.path.isabs(value) or "\0" in value:
        raise ValueError(f"the launch config's {what} must be an absolute path; got {value!r}")
    return value


def read_config(fd: int = 0) -> Any:
    """The host's JSON object from ``fd`` (until EOF: the host's go), at most
    :data:`MAX_CONFIG_BYTES`."""
    data = b""
    while True:
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            break
        data += chunk
        if len(data) > MAX_CONFIG_BYTES:
            raise ValueError(f"the launch config is over {MAX_CONFIG_BYTES} bytes")
    if not data:
        _os_exit(1)  # the host went away before it let us go
    return json.loads(data)


def _stdin_at_null() -> None:
    null = os.open("/dev/null", os.O_RDONLY)
    if null != 0:
        os.dup2(null, 0)
        os.close(null)


def _refuse(message: str, warm: bool) -> None:
    """Never exec unconfined: a cold child says why as its reply to the program's
    ``execute_request`` (the one status only the host may decide on from a cold child's
    first message), a warm one exits quietly for its pool to drop. Never returns.

    Only what was imported before the sandbox is used here: past the view and landlock,
    this interpreter's own files are out of reach (they are not the runtime's).
    """
    try:
        sys.stderr.write(f"kernelgate launcher: {message}\n")
        sys.stderr.flush()
    except BaseException:
        pass
    if warm:
        _os_exit(WARM_FAILED)
    try:
        conn = Connection(CHILD, session=f"child-{os.getpid()}")
        os.set_blocking(CONTROL_FD, True)
        while True:
            event = conn.next_event()
            if event is None:
                data = os.read(CONTROL_FD, 1 << 16)
                if not data:
                    _os_exit(1)  # the host went away before sending a program
                conn.receive_data(data)
            elif type(event) is ExecuteRequest:
                break
        text = message[:8192]
        for event in (
            ErrorOutput("SandboxUnavailable", text, [f"SandboxUnavailable: {text}"]),
            ExecuteReply("error", "sandbox_unavailable", ename="SandboxUnavailable", evalue=text),
        ):
            frame = memoryview(conn.send(event))
            while frame:
                frame = frame[os.write(CONTROL_FD, frame) :]
    finally:
        _os_exit(70)


def _unreadable(paths: list[str]) -> str:
    """The first of ``paths`` the exec'd runtime could not read ("" if none). ``access``
    checks with the real uid and no capabilities but what root keeps: what the runtime will
    have after the exec (at ``process`` on a root host the launcher still holds
    CAP_DAC_READ_SEARCH, which the exec drops)."""
    for path in paths:
        if not os.path.exists(path):
            continue  # not there to read: the runtime says so itself
        mode = os.R_OK | os.X_OK if os.path.isdir(path) else os.R_OK
        if not os.access(path, mode):
            return path
    return ""


def main() -> None:
    """Entry point (see the module's doc). Never returns: execs the runtime, or exits."""
    die_with_parent()
    not_dumpable()
    warm = False
    try:
        launch = Launch(read_config())
        warm = launch.warm
        _stdin_at_null()
        enter_sandbox(launch.options, launched=launch.runtime)  # may return in pid 2
    except Exception as exc:
        _refuse(f"the child could not enter its sandbox: {type(exc).__name__}: {exc}", warm)
        return
    unreadable = _unreadable(launch.runtime.paths)
    if unreadable:
        _refuse(
            f"the sandboxed runtime cannot read {unreadable!r} as the run's uid (uid "
            f"{os.getuid()}, no capabilities once it execs): install it, and kernelgate, "
            "where every user may read them, or use a namespace level",
            warm,
        )
    # What the sandbox opened and did not close must not reach the program.
    os.closerange(4, 2147483647)
    # Python ignores these at start; the exec'd program gets the usual dispositions (and
    # sets its own: Node ignores SIGPIPE and SIGXFSZ, so a write past RLIMIT_FSIZE fails
    # with EFBIG as it does in a Python child).
    for sig in (signal.SIGPIPE, signal.SIGXFSZ):
        signal.signal(sig, signal.SIG_DFL)
    try:
        os.execve(launch.executable, launch.argv, os.environ)
    except OSError as exc:
        _refuse(f"the sandboxed runtime could not start: {launch.executable}: {exc}", warm)
