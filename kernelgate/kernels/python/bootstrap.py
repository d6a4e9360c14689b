"""The child: read one ``execute_request`` from fd 3, run it, report, exit.

Started by the host as ``python -I -c <loader>`` with fd 3 a socketpair to the host, stdin
at EOF, fd 1 and 2 pipes the host captures; or forked, booted, by the zygote (a warm child).
The rooms:

- :mod:`.client`: fd 3 (whole frames under one lock, the host's messages, binding calls);
- :mod:`.runner`: one run (the request, the sandbox, the program on its event loop);
- :mod:`.report`: the value or exception, ``execute_reply`` and the exit;
- :mod:`.sandbox`: the isolation, in order; :mod:`.rehome`: frames that hide host paths;
- :mod:`.debugger` (with :mod:`.debugstop`, :mod:`.debugvalues`, :mod:`.debugbreaks`,
  :mod:`.debugchannel`): only in a debugged run.

Everything the reporting path and the binding calls need is bound before the program runs
(the program may rebind builtins or module globals such as ``os.read``); if reporting still
fails, a fixed pre-encoded ``execute_reply`` is written with a pre-bound ``os.write``.

>>> CONTROL_FD
3
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Callable

from .client import CONTROL_FD
from .program import FILENAME, safe_str
from .rehome import PACKAGE_DIR, rehome_code
from .report import fallback_frame
from .runner import Child
from .sandbox import Born, Ids, die_with_parent, lock_down, not_dumpable
from .sandbox import prepare as prepare_sandbox
from .sitehook import adopt as adopt_site

__all__ = ["main", "Child", "CONTROL_FD", "rehome_code"]

_os_write = os.write
_os_exit = os._exit

#: What a warm child runs on its event loop once booted, before its program arrives (the
#: zygote's rehearsal of a run: :func:`.rehearsal.rehearse`).
Rehearsal = Callable[[asyncio.AbstractEventLoop], None]


def main(
    level: str | None = None,
    run_dir: str | None = None,
    read_paths: list[str] | None = None,
    born_in: Born | None = None,
    rehearse: Rehearsal | None = None,
    ids: Ids | None = None,
) -> None:
    """Entry point of the child process.

    A warm child (forked by the zygote) gets ``level``, ``run_dir`` and (a root host) its
    run's own uid and gid ``ids``, and enters its sandbox before its program arrives
    (``born_in``: already forked into its namespaces), then rehearses a run
    (``rehearse``); a cold child does it all after.
    """
    adopt_site(sys.argv)  # a cold child started without site: the path site would make
    sys.argv = [FILENAME]
    die_with_parent()
    not_dumpable()  # a same-uid program elsewhere must not reach our fd 3 or memory
    fallback = fallback_frame()
    try:
        import faulthandler

        if not faulthandler.is_enabled():  # a zygote's children have it from the zygote
            try:
                faulthandler.enable(file=sys.__stderr__ or sys.stderr)
            except (RuntimeError, ValueError, OSError):
                pass  # no usable stderr: crash tracebacks cannot be shown, the run goes on
        if level is not None and run_dir is not None:
            try:
                prepare_sandbox(level, run_dir, read_paths, born_in, ids)
                # At a namespace level we are the program's process now, forked by the
                # namespace's init: what only the program uses is made here, not in
                # the init, whose every page written is one more copy-on-write fault
                # in it and again in the program (issue 23).
                child = Child(prepared=True)
                lock_down(level, run_dir, list(read_paths or []), ids=ids)
                # The event loop does not depend on the program either: make it while
                # the child waits, booted, for its program.
                child.loop = asyncio.new_event_loop()
                if rehearse is not None:
                    rehearse(child.loop)
                # Then, fresh, whatever else the run needs that is not the program's.
                child.prepare()
            except Exception:
                # Before any program: exit quietly; the pool sees a dead child and drops it.
                _os_exit(71)
        else:
            child = Child()
        child.run()
    except BaseException as exc:  # reporting failed: say so with the pre-encoded frame
        try:
            sys.__stderr__.write(f"kernelgate child: {safe_str(exc, 2000)}\n")  # type: ignore[union-attr]
            sys.__stderr__.flush()  # type: ignore[union-attr]
        except BaseException:
            pass
        try:
            _os_write(CONTROL_FD, fallback)
        except BaseException:
            pass
        _os_exit(70)
    _os_exit(0)


# Imported by the child's (or the zygote's) loader, ``python -I -c LOADER <package root>``:
# rehome now, before the entry point runs, so even its own frame shows no host path.
if sys.argv[:1] == ["-c"] and sys.argv[1:2] == [os.path.dirname(PACKAGE_DIR)]:
    rehome_code()
