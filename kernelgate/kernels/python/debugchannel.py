"""fd 3 in a debugged run: one reader thread owns it.

In an undebugged run the event loop waiting for a call's reply reads fd 3. A debugged
program stops with its event loop (the main thread stops inside the tracer), yet the host's
requests must still be read, so in a debugged run a thread of ours reads every message: a
call's reply goes to the loop that made the call (``call_soon_threadsafe``), a debug request
to the :class:`~.debugger.Debugger`. No loop watches fd 3 then (:attr:`CallClient.reader`).
Between reads it watches the stopped main thread's time, and answers for it when the
program's code holds it (:mod:`.debugstuck`).

The thread is started with ``_thread`` (not ``threading``): the program's
``threading.enumerate()`` does not list it, and the program cannot join or patch it. It is a
task of the run's process, so it counts against ``max_processes`` (pids cgroup,
RLIMIT_NPROC) like any thread of the program.
"""

from __future__ import annotations

import _thread
import os
import select
import signal
from typing import Any

from kernelgate.wire.events import CallReply, DebugRequest

from .client import CallClient, _resolve
from .debugger import Debugger

__all__ = ["start_reader"]

_os_read = os.read
_os_exit = os._exit
_select = select.select
_start_new_thread = _thread.start_new_thread
#: How often a quiet reader has the main thread check its trace (Debugger.nudge).
_NUDGE_SECONDS = 1.0
_sigmask = signal.pthread_sigmask
_SIG_BLOCK = signal.SIG_BLOCK
_ALL_SIGNALS = signal.valid_signals()


def start_reader(client: CallClient, debugger: Debugger) -> None:
    """Hand fd 3 to a reader thread for the rest of the run (raises RuntimeError if no
    thread can be started, e.g. at ``max_processes``)."""
    client.reader = True
    _start_new_thread(_read_forever, (client, debugger))


def _read_forever(client: CallClient, debugger: Debugger) -> None:
    try:
        # Signals are the program's (an interrupt, its timers, the debugger's SIGALRM):
        # delivered here, they would not wake the main thread blocked in a stop.
        _sigmask(_SIG_BLOCK, _ALL_SIGNALS)
        conn = client.conn
        fd = client.fd
        lock = client._rlock
        while True:
            with lock:
                event = conn.next_event()  # what was read with the request comes first
            if event is None:
                # Before each wait: rescue or answer for a main thread stuck in the
                # program's code while stopped (.debugstuck), and wait no longer than that.
                wait = debugger.watch()
                if not _select([fd], [], [], min(wait, _NUDGE_SECONDS))[0]:
                    if wait >= _NUDGE_SECONDS:
                        debugger.nudge()  # quiet: see that the main thread is still traced
                    continue
                with lock:
                    try:
                        data = _os_read(fd, 1 << 16)
                    except BlockingIOError:
                        continue
                    except OSError:
                        data = b""
                    if not data:
                        _os_exit(1)  # the host is gone: nobody is left to report to
                    conn.receive_data(data)
                continue
            _dispatch(client, debugger, event)
    except BaseException as exc:
        # fd 3 can no longer be read: end the run now rather than leave the host waiting.
        client.give_up(f"the debugger's reader failed: {type(exc).__name__}: {exc}")


def _dispatch(client: CallClient, debugger: Debugger, event: Any) -> None:
    etype = type(event)
    if etype is DebugRequest:
        debugger.on_request(event)
    elif etype is CallReply:
        entry = client.pending.pop(event.call_id, None)
        if entry is None:
            return
        fut, tool = entry
        loop = fut.get_loop()
        try:
            if loop is client.loop:
                # Queued first: the answer schedules the program's next step, which must
                # run traced (queued after the answer, the step could run before it).
                loop.call_soon_threadsafe(debugger.retrace)
            loop.call_soon_threadsafe(_resolve, fut, event, tool)
        except RuntimeError:
            pass  # that loop is closed: nobody waits for the answer
