"""The child: read one ``execute_request`` from fd 3, run it, report, exit.

Started by the host as ``python -I -c <loader>`` with fd 3 a socketpair to the host, stdin
at EOF, fd 1 and 2 pipes the host captures. Everything the reporting path and the binding
calls need is bound before the program runs (the program may rebind builtins or module
globals such as ``os.read``); if reporting still fails, a fixed pre-encoded
``execute_reply`` is written with a pre-bound ``os.write``.

fd 3 is shared by every thread of the program: each frame is written whole under one lock
(a thread printing while another sends a large call must not splice frames), and replies
are read by whichever event loop is waiting for one (the program's, or a loop of its own
in another thread) and handed to the loop that made the call.
"""

from __future__ import annotations

import asyncio
import builtins
import linecache
import os
import resource
import select
import sys
import threading
import time
import types
from asyncio.events import _get_running_loop
from typing import Any

from kernelgate.model.constants import FRAME_OVERHEAD as _FRAME_OVERHEAD
from kernelgate.wire.connection import CHILD, HOST, Connection
from kernelgate.wire.events import (
    CallReply,
    CallRequest,
    DisplayData,
    ErrorOutput,
    ExecuteReply,
    ExecuteRequest,
    ExecuteResult,
    OpenBindings,
    Stream,
)
from kernelgate.wire.messages import binding_label
from kernelgate.wire.values import NotJSONError, ValueTooLargeError, check_json

from .display import mime_bundle, plain_repr
from .namespace import Binding, Namespace, ToolError, program_help
from .program import (
    FILENAME,
    LAST_EXPRESSION,
    bind_globals,
    cap_text,
    compile_program,
    format_exception,
    safe_str,
)
from .sandbox import Born, die_with_parent, lock_down, not_dumpable, warm_sandbox
from .sandbox import enter as enter_sandbox
from .sandbox import prepare as prepare_sandbox
from .streams import OutputLedger, OutputStream

__all__ = ["main", "Child"]

CONTROL_FD = 3
_HOST_FRAME_CEILING = 1 << 30  # the host is trusted; its frames are bounded by its limits
# Diagnostics stay small whatever the program makes: an exception's text and traceback,
# and the messages the child writes itself (which may quote the program's values).
_MAX_DIAGNOSTIC = 32 * 1024
_MAX_MESSAGE = 8 * 1024

_os_write = os.write
_os_read = os.read
_monotonic = time.monotonic
_getrusage = resource.getrusage
_getrlimit = resource.getrlimit
_RLIMIT_AS, _RLIM_INFINITY = resource.RLIMIT_AS, resource.RLIM_INFINITY
_RUSAGE_SELF, _RUSAGE_CHILDREN = resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN
_os_exit = os._exit
_select = select.select


_fallback: bytes | None = None  # made once in the zygote, for the children it forks


def _fallback_frame() -> bytes:
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


class Child:
    """One run inside the child process."""

    def __init__(self, fd: int = CONTROL_FD, prepared: bool = False) -> None:
        self.fd = fd
        self.prepared = prepared  # a warm child entered its sandbox before the program came
        os.set_blocking(fd, False)
        self.conn = Connection(
            CHILD, session=f"child-{os.getpid()}", max_frame_bytes=_HOST_FRAME_CEILING
        )
        self.fallback = _fallback_frame()
        # call id -> (future of the answer, in the loop that made the call; binding label)
        self.pending: dict[int, tuple[asyncio.Future[Any], str]] = {}
        # Writing fd 3: one frame at a time whatever thread sends it. Reentrant, because
        # a signal handler that prints may run on a thread in the middle of its own write:
        # that frame waits in the backlog until the one being written is whole.
        self._wlock = threading.RLock()
        self._writing = False
        self._backlog: list[bytes] = []
        self._rlock = threading.Lock()  # reading fd 3 and decoding, from any loop
        # Loops of other threads waiting for replies -> how many calls each waits for.
        self._watching: dict[asyncio.AbstractEventLoop, int] = {}
        self.namespaces: dict[str, dict[str, dict[str, Any]]] = {}
        self.loop: asyncio.AbstractEventLoop | None = None
        self.calls = 0
        self.max_calls = 10_000
        self.max_value_bytes = 32 * 1024
        self.max_frame_bytes = 8 * 1024 * 1024
        self.stdout: OutputStream | None = None
        self.stderr: OutputStream | None = None

    # -- fd 3 ------------------------------------------------------------------------------

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        fd = self.fd
        while view:
            try:
                n = _os_write(fd, view)
            except BlockingIOError:
                _select([], [fd], [])
                continue
            except InterruptedError:
                continue
            view = view[n:]

    def send(self, event: Any) -> None:
        with self._wlock:
            self._write_frame(self.conn.send(event))

    def _write_frame(self, data: bytes) -> None:
        """Write one encoded frame whole (the caller holds ``_wlock``)."""
        if self._writing:  # re-entered from a signal handler on this thread
            self._backlog.append(data)
            return
        self._writing = True
        try:
            self.write(data)
            backlog = self._backlog
            while backlog:
                self.write(backlog.pop(0))
        finally:
            self._writing = False

    def _send_stream(self, name: str, text: str) -> None:
        self.send(Stream(name, text))

    def read_until_request(self) -> ExecuteRequest:
        while True:
            event = self.conn.next_event()
            if event is None:
                _select([self.fd], [], [])
                try:
                    data = os.read(self.fd, 1 << 16)
                except BlockingIOError:
                    continue
                if not data:
                    _os_exit(1)  # the host went away before sending a program
                self.conn.receive_data(data)
                continue
            if type(event) is OpenBindings:
                self.namespaces = event.namespaces
            elif type(event) is ExecuteRequest:
                return event

    def _on_readable(self) -> None:
        """fd 3 is readable: take the host's replies and hand each to its call's loop.

        Runs in the program's loop, and in the loop of any other thread waiting for a
        reply (the program's loop may be blocked, e.g. in ``thread.join()``).
        """
        try:
            replies: list[CallReply] = []
            with self._rlock:
                try:
                    data = _os_read(self.fd, 1 << 16)
                except BlockingIOError:
                    return  # another loop took it
                except OSError:
                    data = b""
                if not data:
                    _os_exit(1)  # the host is gone: nobody is left to report to
                self.conn.receive_data(data)
                while True:
                    event = self.conn.next_event()
                    if event is None:
                        break
                    if type(event) is CallReply:
                        replies.append(event)
            here = _get_running_loop()
            pending = self.pending
            for reply in replies:
                entry = pending.pop(reply.call_id, None)
                if entry is None:
                    continue
                fut, tool = entry
                loop = fut.get_loop()
                if loop is here:
                    _resolve(fut, reply, tool)
                else:
                    try:
                        loop.call_soon_threadsafe(_resolve, fut, reply, tool)
                    except RuntimeError:
                        pass  # that loop is closed: nobody waits for the answer
        except Exception as exc:
            # Replies can no longer be read (the program broke something this needs):
            # end the run now rather than let it wait for answers until wall_seconds.
            self._give_up(f"reading the host's replies failed: {_brief(exc)}")

    # -- what the program calls ------------------------------------------------------------

    def flush_streams(self) -> None:
        if self.stdout is not None:
            self.stdout.flush()
        if self.stderr is not None:
            self.stderr.flush()

    def call(
        self, namespace: str, name: str, args: list[Any], kwargs: dict[str, Any]
    ) -> asyncio.Future[Any]:
        """Send a call (when a :class:`BindingCall` first runs) and return the future of
        its answer, which belongs to the event loop running the call."""
        loop = _get_running_loop()
        if loop is None:
            raise RuntimeError(
                f"{binding_label(namespace, name)}() must run in an event loop: await it, "
                "or pass it to asyncio.run() or create_task()"
            )
        tool = binding_label(namespace, name)
        self.flush_streams()
        fut = loop.create_future()
        with self._wlock:
            if self.calls >= self.max_calls:
                raise ToolError(
                    f"max_calls={self.max_calls} binding calls per run reached; "
                    "make fewer calls (batch the work) or raise Limits.max_calls",
                    tool=tool,
                    ename="LimitExceeded",
                )
            call_id = self.conn.next_call_id
            frame = self.conn.send(CallRequest(call_id, namespace, name, args, kwargs))
            self.calls += 1
            # Registered before the frame leaves: another thread may read the reply.
            self.pending[call_id] = (fut, tool)
            self._write_frame(frame)
        if loop is not self.loop:
            self._watch(loop, fut)
        return fut

    def _watch(self, loop: asyncio.AbstractEventLoop, fut: asyncio.Future[Any]) -> None:
        """Let a loop of another thread read fd 3 while it waits for ``fut``."""
        watching = self._watching
        count = watching.get(loop, 0)
        if count == 0:
            loop.add_reader(self.fd, self._on_readable)
        watching[loop] = count + 1
        fut.add_done_callback(lambda _f: self._unwatch(loop))

    def _unwatch(self, loop: asyncio.AbstractEventLoop) -> None:
        count = self._watching.pop(loop, 1) - 1
        if count > 0:
            self._watching[loop] = count
            return
        try:
            loop.remove_reader(self.fd)
        except Exception:
            pass  # the loop is closing: its selector goes with it

    def _give_up(self, why: str) -> None:
        """The run cannot go on: say why on stderr and end with the InternalError reply."""
        try:
            sys.__stderr__.write(f"kernelgate child: {why}\n")  # type: ignore[union-attr]
            sys.__stderr__.flush()  # type: ignore[union-attr]
        except BaseException:
            pass
        try:
            with self._wlock:
                self.write(self.fallback)
        except BaseException:
            pass
        _os_exit(70)

    def display(self, *objs: Any, **_ignored: Any) -> None:
        """Show objects as rich outputs (``display_data``), as in a notebook."""
        self.flush_streams()
        for obj in objs:
            data, metadata = mime_bundle(obj)
            for key in list(data):
                try:
                    check_json(data[key], f"display data[{key!r}]")
                except (NotJSONError, ValueTooLargeError):
                    del data[key]
            try:
                size = check_json(data, "display", self.max_frame_bytes - _FRAME_OVERHEAD)
                check_json(metadata, "display metadata", self.max_frame_bytes - size)
            except ValueTooLargeError:
                data = {
                    "text/plain": "[kernelgate: display output over "
                    f"max_frame_bytes={self.max_frame_bytes} not shown]"
                }
                metadata = {}
            except NotJSONError:
                metadata = {}
            self.send(DisplayData(data, metadata))

    def make_globals(self) -> dict[str, Any]:
        g: dict[str, Any] = {
            "__name__": "__main__",
            "__doc__": None,
            "__builtins__": builtins,
            "ToolError": ToolError,
            "display": self.display,
            "help": program_help(builtins.__dict__.get("help")),
        }
        arg_budget = self.max_frame_bytes - _FRAME_OVERHEAD
        for ns, specs in self.namespaces.items():
            g[ns] = Namespace(
                ns,
                {
                    name: Binding(ns, name, spec, self.call, arg_budget)
                    for name, spec in specs.items()
                },
            )
        return g

    # -- the run ---------------------------------------------------------------------------

    def run(self) -> None:
        request = self.read_until_request()
        options = request.options
        self.max_calls = int(options.get("max_calls", self.max_calls))
        self.max_value_bytes = int(options.get("max_value_bytes", self.max_value_bytes))
        self.max_frame_bytes = int(options.get("max_frame_bytes", self.max_frame_bytes))
        sandbox_error: BaseException | None = None
        try:
            enter_sandbox(options, self.prepared)  # may return in a new process (pid 2)
        except Exception as exc:
            sandbox_error = exc
        ledger = OutputLedger(int(options.get("max_output_bytes", 64 * 1024)))
        self.stdout = OutputStream("stdout", self._send_stream, ledger)
        self.stderr = OutputStream("stderr", self._send_stream, ledger)
        sys.stdout = self.stdout
        sys.stderr = self.stderr
        saved_builtins = dict(builtins.__dict__)
        if sandbox_error is not None:
            self.fail(
                "sandbox_unavailable",
                "SandboxUnavailable",
                f"the child could not enter its sandbox: {safe_str(sandbox_error, 2000)}",
            )
            return
        try:
            fn = compile_program(request.code)
        except SyntaxError as exc:
            self.finish_exception(exc, saved_builtins)
            return
        except (ValueError, MemoryError, RecursionError) as exc:
            # e.g. source with NUL bytes, or nesting too deep for the parser
            self.finish_exception(exc, saved_builtins)
            return
        main = bind_globals(fn, self.make_globals())
        loop = self.loop or asyncio.new_event_loop()
        self.loop = loop
        asyncio.set_event_loop(loop)
        loop.time = _monotonic  # type: ignore[method-assign]  # the program may rebind time.monotonic
        loop.add_reader(self.fd, self._on_readable)

        restore = self._restore_builtins
        exc_info = sys.exc_info

        async def runner() -> tuple[bool, Any]:
            # Builtins are restored the moment the program is done: asyncio itself needs
            # them to finish this task.
            # A bare except, and sys.exc_info bound in advance: the program may have
            # rebound the name BaseException, which `except BaseException` looks up.
            try:
                outcome = True, await main()
            except:  # noqa: E722 - the program's failure is the result
                outcome = False, exc_info()[1]
            restore(saved_builtins)
            return outcome

        try:
            ok, outcome = loop.run_until_complete(runner())
        except:  # noqa: E722 - SystemExit or KeyboardInterrupt from a task
            ok, outcome = False, exc_info()[1]
            restore(saved_builtins)
        if not ok and type(outcome) is SystemExit and outcome.code in (None, 0):
            ok, outcome = True, None
        if ok:
            self.finish_value(outcome, saved_builtins)
        else:
            self.finish_exception(outcome, saved_builtins)

    @staticmethod
    def _restore_builtins(
        saved: dict[str, Any], _current: dict[str, Any] = builtins.__dict__
    ) -> None:
        # The program may have rebound builtins the reporting path uses. Nothing here may
        # look a builtin up by name.
        for key in [k for k in _current if k not in saved]:
            del _current[key]
        _current.update(saved)

    def _restore(self, saved_builtins: dict[str, Any]) -> None:
        self._restore_builtins(saved_builtins)
        sys.stdout = self.stdout
        sys.stderr = self.stderr
        self.flush_streams()

    def finish_value(self, outcome: Any, saved_builtins: dict[str, Any]) -> None:
        self._restore(saved_builtins)
        last = type(outcome) is tuple and len(outcome) == 2 and outcome[0] is LAST_EXPRESSION
        value = outcome[1] if last else outcome
        if value is None:
            self.end(ExecuteReply("ok"))
            return
        try:
            check_json(value, "value", self.max_value_bytes)
        except NotJSONError as exc:
            if last:
                self.send(ExecuteResult({"text/plain": plain_repr(value)}))
                self.end(ExecuteReply("ok"))
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
        self.send(ExecuteResult({"application/json": value, "text/plain": plain_repr(value)}))
        self.end(ExecuteReply("ok"))

    def finish_exception(self, exc: BaseException, saved_builtins: dict[str, Any]) -> None:
        self._restore(saved_builtins)
        ename, evalue, tb = format_exception(exc, FILENAME, _MAX_DIAGNOSTIC)
        if isinstance(exc, MemoryError):
            evalue, tb = _name_memory_limit(ename, evalue, tb)
        self.send(ErrorOutput(ename, evalue, tb))
        self.end(ExecuteReply("error", "exception", ename=ename, evalue=evalue, traceback=tb))

    def fail(self, run_status: str, ename: str, message: str) -> None:
        message = cap_text(message, _MAX_MESSAGE)
        self.send(ErrorOutput(ename, message, [f"{ename}: {message}"]))
        self.end(ExecuteReply("error", run_status, ename=ename, evalue=message))

    def end(self, reply: ExecuteReply) -> None:
        for ours in (self.stdout, self.stderr):
            if ours is not None:
                ours.finish()
        # fd 1 and 2 before the reply: the host ends this process when the reply arrives.
        for stream in (sys.__stdout__, sys.__stderr__):
            try:
                if stream is not None:
                    stream.flush()
            except BaseException:
                pass
        self.send(_with_usage(reply))
        _os_exit(0)


def _name_memory_limit(ename: str, evalue: str, tb: list[str]) -> tuple[str, list[str]]:
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


def _resolve(fut: asyncio.Future[Any], reply: CallReply, tool: str) -> None:
    """Give a call's answer to its future (in the future's loop)."""
    if fut.done():
        return  # the program cancelled the call; the answer is dropped
    if reply.ok:
        fut.set_result(reply.value)
    else:
        fut.set_exception(ToolError(reply.evalue, tool=tool, ename=reply.ename))


def _brief(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {safe_str(exc, 500)}"


def _with_usage(reply: ExecuteReply) -> ExecuteReply:
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


def warm_up() -> None:
    """In the zygote: make once what every child it forks would otherwise make itself.

    faulthandler writes to fd 2 by number, which is each child's own stderr by then.
    """
    global _fallback
    import faulthandler

    try:
        faulthandler.enable(file=sys.__stderr__ or sys.stderr)
    except (RuntimeError, ValueError, OSError):
        pass  # no stderr to write to: each child tries again with its own
    _fallback = _fallback_frame()
    rehearsal_frames()
    warm_sandbox()
    rehome_code()  # the zygote's own functions are defined by now


_REHEARSAL_SPEC = {"params": [["x", "POSITIONAL_OR_KEYWORD", False]], "signature": "(x)", "doc": ""}
_rehearsal_frames: list[bytes] | None = None


def rehearsal_frames() -> list[bytes]:
    """What a host sends in a run with one call (comm_open, execute_request, the call's
    reply), encoded once: the zygote makes them, its children only read them."""
    global _rehearsal_frames
    if _rehearsal_frames is None:
        host = Connection(HOST, session="rehearsal")
        child = Connection(CHILD, session="rehearsal")
        frames = [
            host.send(OpenBindings("rehearsal", {"tools": {"echo": _REHEARSAL_SPEC}})),
            host.send(ExecuteRequest("x = 1\nx", {"cwd": "/"})),
        ]
        for frame in frames:
            child.receive_data(frame)
            child.next_event()
        host.receive_data(child.send(CallRequest(0, "tools", "echo", [1], {})))
        host.next_event()
        frames.append(host.send(CallReply(0, True, [1, "a", {"b": None}])))
        _rehearsal_frames = frames
    return _rehearsal_frames


def _rehearse(loop: asyncio.AbstractEventLoop) -> None:
    """Go once through the child's side of a run, on throwaway objects, while no program
    waits.

    A forked child shares the zygote's memory until it writes to it, and merely using an
    object writes its reference count: the first run of every code path pays a page
    copy for each page it touches. This pays them before the program arrives. Nothing
    here outlives the call.
    """
    opening, executing, replying = rehearsal_frames()
    peer = Connection(CHILD, session="rehearsal")
    peer.receive_data(opening + executing)
    opened, request = peer.next_event(), peer.next_event()
    assert type(opened) is OpenBindings and type(request) is ExecuteRequest

    def start(*_call: Any) -> asyncio.Future[Any]:
        fut = loop.create_future()
        loop.call_soon(fut.set_result, getattr(reply, "value", None))
        return fut

    echo = Binding("tools", "echo", _REHEARSAL_SPEC, start, 1 << 20)
    namespace = Namespace("tools", {"echo": echo})
    fn = bind_globals(compile_program(request.code), {"tools": namespace, "__builtins__": builtins})
    peer.send(Stream("stdout", "rehearsal\n"))
    peer.send(CallRequest(peer.next_call_id, "tools", "echo", [1], {}))
    peer.receive_data(replying)
    reply = peer.next_event()

    async def one_run() -> Any:
        await namespace.echo(1)
        return await fn()

    outcome = loop.run_until_complete(one_run())
    check_json(outcome[1], "value", 1 << 20)
    peer.send(ExecuteResult({"application/json": 1, "text/plain": plain_repr(1)}))
    peer.send(_with_usage(ExecuteReply("ok")))
    linecache.cache.pop(FILENAME, None)


def main(
    level: str | None = None,
    run_dir: str | None = None,
    read_paths: list[str] | None = None,
    born_in: Born | None = None,
) -> None:
    """Entry point of the child process.

    A warm child (forked by the zygote) gets ``level`` and ``run_dir`` and enters its
    sandbox before its program arrives (``born_in``: already forked into its namespaces);
    a cold child does it all after.
    """
    sys.argv = [FILENAME]
    die_with_parent()
    not_dumpable()  # a same-uid program elsewhere must not reach our fd 3 or memory
    child = Child(prepared=level is not None)
    fallback = child.fallback
    try:
        import faulthandler

        if not faulthandler.is_enabled():  # a zygote's children have it from the zygote
            try:
                faulthandler.enable(file=sys.__stderr__ or sys.stderr)
            except (RuntimeError, ValueError, OSError):
                pass  # no usable stderr: crash tracebacks cannot be shown, the run goes on
        if level is not None and run_dir is not None:
            try:
                prepare_sandbox(level, run_dir, read_paths, born_in)
                lock_down(level, run_dir, list(read_paths or []))
                # The event loop does not depend on the program either: make it while
                # the child waits, booted, for its program.
                child.loop = asyncio.new_event_loop()
                _rehearse(child.loop)
            except Exception:
                # Before any program: exit quietly; the pool sees a dead child and drops it.
                _os_exit(71)
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


# -- where kernelgate's frames say they are ---------------------------------------------------

#: What a frame of kernelgate's own code shows as its file (``<kernelgate>/wire/values.py``).
HIDDEN_ROOT = "<kernelgate>"
_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def rehome_code() -> None:
    """Make every loaded kernelgate function report ``<kernelgate>/...`` as its file.

    A crash dump (faulthandler on SIGSEGV, SIGABRT...) or a traceback the program prints
    itself lists the frames below the program's: they must not show where kernelgate is
    installed on the host. Code objects are immutable, so each function gets a copy with
    the new name (nested functions and lambdas through its constants); frames already
    running keep the old one, so this runs before the child's entry point is called.
    """
    prefix = _PACKAGE_DIR + os.sep

    def rehomed(code: types.CodeType) -> types.CodeType:
        if not code.co_filename.startswith(prefix):
            return code
        consts = tuple(rehomed(c) if type(c) is types.CodeType else c for c in code.co_consts)
        name = HIDDEN_ROOT + "/" + code.co_filename[len(prefix) :].replace(os.sep, "/")
        return code.replace(co_filename=name, co_consts=consts)

    def fix(fn: Any) -> None:
        if type(fn) is types.FunctionType:
            fn.__code__ = rehomed(fn.__code__)

    seen: set[int] = set()

    def visit_class(cls: type) -> None:
        if id(cls) in seen:
            return
        seen.add(id(cls))
        for attr in list(vars(cls).values()):
            if type(attr) in (staticmethod, classmethod):
                fix(attr.__func__)
            elif type(attr) is property:
                for f in (attr.fget, attr.fset, attr.fdel):
                    fix(f)
            elif isinstance(attr, type) and attr.__module__ == cls.__module__:
                visit_class(attr)
            else:
                fix(attr)

    for name, module in list(sys.modules.items()):
        if module is None or not (name == "kernelgate" or name.startswith("kernelgate.")):
            continue
        for obj in list(vars(module).values()):
            if isinstance(obj, type):
                if obj.__module__ == name:
                    visit_class(obj)
            else:
                fix(obj)


# Imported by the child's (or the zygote's) loader, ``python -I -c LOADER <package root>``:
# rehome now, before the entry point runs, so even its own frame shows no host path.
if sys.argv[:1] == ["-c"] and sys.argv[1:] == [os.path.dirname(_PACKAGE_DIR)]:
    rehome_code()
