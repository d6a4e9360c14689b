"""The child's last word: the program's value or exception, then ``execute_reply``, then exit.

The last messages (what the streams still hold, the value or the error, the reply) leave
in one write: the host wakes once for them.

What the reporting path uses is bound before the program runs (the program may rebind
builtins or module globals, e.g. ``os.write``, ``resource.getrusage``); builtins the program
rebound are put back before anything here runs. If reporting still fails, a fixed
pre-encoded ``execute_reply`` (:func:`fallback_frame`) is written with a pre-bound
``os.write``.

>>> sorted(with_usage(ExecuteReply("ok")).usage)
['cpu_system_s', 'cpu_user_s', 'peak_memory_bytes']
"""

from __future__ import annotations

import builtins
import os
import resource
import sys
from typing import Any

from kernelgate.wire.connection import CHILD, Connection
from kernelgate.wire.events import ErrorOutput, ExecuteReply, ExecuteResult, Stream
from kernelgate.wire.values import NotJSONError, ValueTooLargeError, check_json

from .client import CallClient
from .display import display_bundle, plain_repr
from .namespace import BindingCall
from .program import FILENAME, LAST_EXPRESSION, cap_text, format_exception
from .streams import OutputStream

__all__ = [
    "Reporter",
    "fallback_frame",
    "cache_fallback",
    "with_usage",
    "name_memory_limit",
    "restore_builtins",
]

# Diagnostics stay small whatever the program makes: an exception's text and traceback,
# and the messages the child writes itself (which may quote the program's values).
_MAX_DIAGNOSTIC = 32 * 1024
_MAX_MESSAGE = 8 * 1024

_os_exit = os._exit
_getrusage = resource.getrusage
_getrlimit = resource.getrlimit
_RLIMIT_AS, _RLIM_INFINITY = resource.RLIMIT_AS, resource.RLIM_INFINITY
_RUSAGE_SELF, _RUSAGE_CHILDREN = resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN

_fallback: bytes | None = None  # made once in the zygote, for the children it forks


def fallback_frame() -> bytes:
    """The ``execute_reply`` written when reporting itself failed (encoded in advance)."""
    if _fallback is not None:
        return _fallback
    conn = Connection(CHILD, session=f"child-{os.getpid()}")
    return conn.send(
        ExecuteReply(
            "error",
            "exception",
            ename="InternalError",
            evalue="kernelgate could not report this program's result (its reporting failed)",
        )
    )


def cache_fallback() -> None:
    """Encode the fallback frame once, here (the zygote), for every child forked after."""
    global _fallback
    _fallback = fallback_frame()


def restore_builtins(saved: dict[str, Any], _current: dict[str, Any] = builtins.__dict__) -> None:
    """Put back the builtins as ``saved`` holds them, dropping any the program added."""
    # The program may have rebound builtins the reporting path uses. Nothing here may
    # look a builtin up by name.
    for key in [k for k in _current if k not in saved]:
        del _current[key]
    _current.update(saved)


class Reporter:
    """Ends one run: its value or exception as outputs, then the reply, then ``os._exit``."""

    def __init__(
        self,
        client: CallClient,
        stdout: OutputStream,
        stderr: OutputStream,
        max_value_bytes: int,
    ) -> None:
        self.client = client
        self.stdout = stdout
        self.stderr = stderr
        self.max_value_bytes = max_value_bytes

    def _restore(self, saved_builtins: dict[str, Any]) -> None:
        # What the streams hold is sent by end(), with the reply.
        restore_builtins(saved_builtins)
        sys.stdout = self.stdout
        sys.stderr = self.stderr

    def finish_value(self, outcome: Any, saved_builtins: dict[str, Any]) -> None:
        """The program returned ``outcome`` (``(LAST_EXPRESSION, value)`` for a final
        expression): report it if it is JSON within ``max_value_bytes``."""
        self._restore(saved_builtins)
        last = type(outcome) is tuple and len(outcome) == 2 and outcome[0] is LAST_EXPRESSION
        value = outcome[1] if last else outcome
        if type(value) is BindingCall:
            # `tools.search("x")` as the last line, or returned: the call never ran.
            value.close()
            message = value.not_awaited()
            self.end(
                ExecuteReply("error", "exception", ename="TypeError", evalue=message),
                ErrorOutput("TypeError", message, [f"TypeError: {message}"]),
            )
            return
        if value is None:
            self.end(ExecuteReply("ok"))
            return
        try:
            check_json(value, "value", self.max_value_bytes)
        except NotJSONError as exc:
            if last:
                # Shown as IPython shows it: text/plain and the object's _repr_*_ forms
                # (sanitized by the host as any output). The value stays None (not JSON);
                # a _repr_json_ is left out so it is not taken for the value.
                data, metadata = display_bundle(value, self.max_value_bytes)
                data.pop("application/json", None)
                self.end(ExecuteReply("ok"), ExecuteResult(data, metadata))
                return
            self.fail(
                "invalid_output",
                "InvalidOutput",
                f"the program's value is not JSON: {exc}. Return only dict (str keys), "
                "list, str, int, float, bool or None; convert other types first "
                "(e.g. list(a_set), str(a_date))",
            )
            return
        except ValueTooLargeError:
            self.fail(
                "output_limit",
                "OutputLimit",
                f"the program's value is over max_value_bytes={self.max_value_bytes} bytes "
                "as JSON; return less (a summary, or the first items), or raise "
                "Limits.max_value_bytes",
            )
            return
        self.end(
            ExecuteReply("ok"),
            ExecuteResult({"application/json": value, "text/plain": plain_repr(value)}),
        )

    def finish_exception(self, exc: BaseException, saved_builtins: dict[str, Any]) -> None:
        """The program (or its compilation) raised ``exc``: its program-only traceback."""
        self._restore(saved_builtins)
        ename, evalue, tb = format_exception(exc, FILENAME, _MAX_DIAGNOSTIC)
        if isinstance(exc, MemoryError):
            evalue, tb = name_memory_limit(ename, evalue, tb)
        self.end(
            ExecuteReply("error", "exception", ename=ename, evalue=evalue, traceback=tb),
            ErrorOutput(ename, evalue, tb),
        )

    def fail(self, run_status: str, ename: str, message: str) -> None:
        """End with ``run_status`` and a message of the child's own."""
        message = cap_text(message, _MAX_MESSAGE)
        self.end(
            ExecuteReply("error", run_status, ename=ename, evalue=message),
            ErrorOutput(ename, message, [f"{ename}: {message}"]),
        )

    def end(self, reply: ExecuteReply, shown: ExecuteResult | ErrorOutput | None = None) -> None:
        """Send what the streams still hold, ``shown`` (the value or the error) and
        ``reply`` with this process's usage, in one write; exit."""
        events: list[Any] = [
            Stream(name, text)
            for ours in (self.stdout, self.stderr)
            for name, text in ours.take_rest()
        ]
        # fd 1 and 2 before the reply: the host ends this process when the reply arrives.
        for stream in (sys.__stdout__, sys.__stderr__):
            try:
                if stream is not None:
                    stream.flush()
            except BaseException:
                pass
        if shown is not None:
            events.append(shown)
        events.append(with_usage(reply))
        self.client.send_all(events)
        _os_exit(0)


def name_memory_limit(ename: str, evalue: str, tb: list[str]) -> tuple[str, list[str]]:
    """A MemoryError's text, naming the run's memory limit when one is set (RLIMIT_AS is
    what ``Limits.memory_bytes`` sets), so the program's author knows what ran out."""
    try:
        limit = _getrlimit(_RLIMIT_AS)[0]
    except BaseException:
        return evalue, tb
    if limit == _RLIM_INFINITY or limit <= 0:
        return evalue, tb
    note = f"(the run's memory_bytes={limit} limit; use less memory, or raise Limits.memory_bytes)"
    new = f"{evalue} {note}" if evalue else f"out of memory {note}"
    if tb and tb[-1] in (ename, f"{ename}: {evalue}"):
        tb = [*tb[:-1], f"{ename}: {new}"]
    else:
        tb = [*tb, f"{ename}: {new}"]
    return new, tb


def with_usage(reply: ExecuteReply) -> ExecuteReply:
    """``reply`` with this process's CPU time and peak memory (and its reaped children's):
    the host answers with the reply before it has reaped us."""
    try:
        me, kids = _getrusage(_RUSAGE_SELF), _getrusage(_RUSAGE_CHILDREN)
    except BaseException:
        return reply
    usage = {
        "cpu_user_s": round(me.ru_utime + kids.ru_utime, 6),
        "cpu_system_s": round(me.ru_stime + kids.ru_stime, 6),
        "peak_memory_bytes": max(me.ru_maxrss, kids.ru_maxrss) * 1024,  # Linux: KiB
    }
    return ExecuteReply(
        reply.status,
        reply.run_status,
        reply.execution_count,
        reply.ename,
        reply.evalue,
        reply.traceback,
        usage=usage,
    )
