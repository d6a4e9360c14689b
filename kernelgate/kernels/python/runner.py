"""One run inside the child: take the program, enter the sandbox, run it, hand the outcome
to the reporter (:mod:`.report`).

The program runs as the body of an ``async def`` (:mod:`.program`) on a fresh event loop,
with ``tools`` (its namespaces of bindings, :mod:`.namespace`), ``ToolError`` and
``display`` as globals, and ``sys.stdout``/``sys.stderr`` sending ``stream`` messages
(:mod:`.streams`). Whatever it does to builtins is undone before reporting.

What does not depend on the program nor on its bindings (the streams, the snapshot of the
builtins, the globals but the bindings' namespaces, the reporter, the nodes the program is
compiled in, the event loop set and watching fd 3) is made by :meth:`Child.prepare`: by a
warm child while it waits, booted, for its program (its first touch of those pages is then
off the run's path), by a cold child once in its sandbox. Either way it is made in the
process that runs the program, after the zygote's rehearsal, fresh for this one run.

>>> Child.__name__
'Child'
"""

from __future__ import annotations

import asyncio
import builtins
import os
import sys
import threading
import time
from typing import Any

from kernelgate.model.constants import FRAME_OVERHEAD as _FRAME_OVERHEAD
from kernelgate.wire.events import (
    ClearOutput,
    DisplayData,
    ExecuteRequest,
    OpenBindings,
    Stream,
    UpdateDisplayData,
)

from .client import CONTROL_FD, CallClient
from .display import display_bundle
from .namespace import Binding, Namespace, ToolError, program_help
from .program import Wrapper, bind_globals, compile_program, safe_str
from .report import Reporter, fallback_frame, restore_builtins
from .sandbox import enter as enter_sandbox
from .sitehook import install as site_on_demand
from .streams import OutputLedger, OutputStream, flush_on_sigterm

__all__ = ["Child", "DEBUGGER_MODULES", "precompile_debugger"]

#: The modules only a debugged run imports (writing no bytecode: see ``Child._debugger``).
DEBUGGER_MODULES = (
    "debugvalues",
    "debugbreaks",
    "debugstop",
    "debugger",
    "debugmonitor",
    "debugchannel",
)

_monotonic = time.monotonic


class Child:
    """One run inside the child process.

    ``prepared``: a warm child entered its sandbox before its program came.
    """

    def __init__(self, fd: int = CONTROL_FD, prepared: bool = False) -> None:
        self.prepared = prepared
        self.client = CallClient(fallback_frame(), fd)
        self.fallback = self.client.fallback
        self.max_value_bytes = 32 * 1024
        self.max_frame_bytes = 8 * 1024 * 1024
        self._ready: _Ready | None = None  # what prepare() made; taken by the run
        #: The frame limit the bindings' namespaces in the prepared globals were made for
        #: (their arguments' budget), when made as the bindings came (see _take_bindings).
        self._bound_for: int | None = None

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        """The program's event loop (a warm child makes it before the program arrives)."""
        return self.client.loop

    @loop.setter
    def loop(self, loop: asyncio.AbstractEventLoop | None) -> None:
        self.client.loop = loop

    # -- what the program calls ------------------------------------------------------------

    def _send_stream(self, name: str, text: str) -> None:
        self.client.send(Stream(name, text))

    def display(
        self, *objs: Any, display_id: str | bool | None = None, **_ignored: Any
    ) -> DisplayHandle | None:
        """Show objects as rich outputs (``display_data``), as in a notebook. With
        ``display_id`` (a string, or ``True`` for a new one) the outputs can be replaced
        later (``update_display``, or the returned handle's ``update``)."""
        self._flush()
        did = _new_display_id() if display_id is True else display_id or None
        for obj in objs:
            data, metadata = display_bundle(obj, self.max_frame_bytes)
            self.client.send(DisplayData(data, metadata, display_id=_checked_id(did)))
        return DisplayHandle(self, did) if isinstance(did, str) else None

    def update_display(self, obj: Any, *, display_id: str, **_ignored: Any) -> None:
        """Replace every output shown with ``display_id`` by ``obj`` (``update_display_data``)."""
        self._flush()
        did = _checked_id(display_id)
        if did is None:
            raise TypeError("update_display() needs the display_id the output was shown with")
        data, metadata = display_bundle(obj, self.max_frame_bytes)
        self.client.send(UpdateDisplayData(data, metadata, display_id=did))

    def clear_output(self, wait: bool = False) -> None:
        """Remove what the run has shown so far (``wait=True``: when the next output comes)."""
        self._flush()
        self.client.send(ClearOutput(bool(wait)))

    def _flush(self) -> None:
        for stream in self.client.streams:
            stream.flush()

    def make_globals(self, g: dict[str, Any] | None = None) -> dict[str, Any]:
        """The program's globals: ``g`` (from :meth:`_base_globals`, made ahead) with
        the namespaces of the bindings the host opened."""
        if g is None:
            g = self._base_globals()
        arg_budget = self.max_frame_bytes - _FRAME_OVERHEAD
        call = self.client.call
        for ns, specs in self.client.namespaces.items():
            g[ns] = Namespace(
                ns,
                {name: Binding(ns, name, spec, call, arg_budget) for name, spec in specs.items()},
            )
        return g

    def _base_globals(self) -> dict[str, Any]:
        return {
            "__name__": "__main__",
            "__doc__": None,
            "__builtins__": builtins,
            "ToolError": ToolError,
            "display": self.display,
            "update_display": self.update_display,
            "clear_output": self.clear_output,
            "help": program_help(builtins.__dict__.get("help")),
        }

    def prepare(self) -> None:
        """Make what the run needs that depends neither on its program nor on its
        bindings: its output streams (flushed on SIGTERM; ``sys.stdout``/``sys.stderr``
        once the program has come), the snapshot of the builtins, the program's globals
        but the bindings, the reporter, the nodes the program is compiled in, and the
        event loop, current and watching fd 3.

        A warm child calls this while it waits for its program (after its rehearsal, so
        nothing of that is kept); a cold child's run does, once in its sandbox. The
        request's limits are applied to these objects when it comes."""
        ledger = OutputLedger(64 * 1024)
        stdout = OutputStream("stdout", self._send_stream, ledger)
        stderr = OutputStream("stderr", self._send_stream, ledger)
        client = self.client
        client.streams = (stdout, stderr)
        flush_on_sigterm(client.streams)
        loop = self.loop or asyncio.new_event_loop()
        self.loop = loop
        asyncio.set_event_loop(loop)
        loop.time = _monotonic  # type: ignore[method-assign]  # the program may rebind time.monotonic
        loop.add_reader(client.fd, client.on_readable)
        self._ready = _Ready(
            ledger,
            Reporter(client, stdout, stderr, self.max_value_bytes),
            dict(builtins.__dict__),
            self._base_globals(),
            Wrapper(),
        )

    # -- the run ---------------------------------------------------------------------------

    def run(self) -> None:
        """Read the program, enter the sandbox, run the program and report; never returns
        (the reporter exits)."""
        if self._ready is not None:
            self._take_bindings()
        request = self.client.read_until_request()
        ready, sandbox_error = self._start(request)
        if sandbox_error is not None:
            ready.reporter.fail(
                "sandbox_unavailable",
                "SandboxUnavailable",
                f"the child could not enter its sandbox: {safe_str(sandbox_error, 2000)}",
            )
            return
        self._execute(request, ready)

    def _take_bindings(self) -> None:
        """Wait for the host's first frame, its bindings' comm_open, and make their
        namespaces in the prepared globals now: a warm child is sent it while it waits
        for its program (the pool's), so that work (a signature per binding) is off its
        run's path. The request that follows is read by ``read_until_request``; a frame
        limit other than the default one has them made again (``_execute``)."""
        client = self.client
        event = client.wait_event()
        # The wire lets the host open with nothing else (wire/state.py).
        assert type(event) is OpenBindings and self._ready is not None
        client.namespaces = event.namespaces
        self.make_globals(self._ready.globals)
        self._bound_for = self.max_frame_bytes

    def _start(self, request: ExecuteRequest) -> tuple[_Ready, BaseException | None]:
        """The request's limits, the sandbox (it may return in a new process, pid 2), what
        :meth:`prepare` makes (now, unless made while the child waited) with the request's
        limits."""
        options = request.options
        client = self.client
        client.max_calls = int(options.get("max_calls", client.max_calls))
        self.max_value_bytes = int(options.get("max_value_bytes", self.max_value_bytes))
        self.max_frame_bytes = int(options.get("max_frame_bytes", self.max_frame_bytes))
        sandbox_error: BaseException | None = None
        try:
            enter_sandbox(options, self.prepared)  # may return in a new process (pid 2)
        except Exception as exc:
            sandbox_error = exc
        site_on_demand()  # a cold child started without site: its builtins, site on a miss
        # The main thread's native id as the program's own process has it: CPython's fork
        # hook keeps the forking process's (a host pid: the zygote's, the launcher's).
        set_native_id = getattr(threading.main_thread(), "_set_native_id", None)
        if set_native_id is not None:
            set_native_id()
        if self._ready is None:
            self.prepare()  # a cold child: here, in the program's process, in its sandbox
        ready = self._ready
        assert ready is not None
        self._ready = None  # the run holds it from here; nothing else keeps it
        # Only now: anything written to them earlier (while a warm child waited) went to
        # fd 1 and 2, as before, not to the run's messages.
        sys.stdout = ready.reporter.stdout
        sys.stderr = ready.reporter.stderr
        ready.ledger.remaining = int(options.get("max_output_bytes", 64 * 1024))
        ready.reporter.max_value_bytes = self.max_value_bytes
        return ready, sandbox_error

    def _execute(self, request: ExecuteRequest, ready: _Ready) -> None:
        """Compile and run the program on its event loop; report how it ended."""
        reporter, saved_builtins = ready.reporter, ready.saved_builtins
        try:
            fn = compile_program(request.code, wrapper=ready.wrapper)
        except SyntaxError as exc:
            reporter.finish_exception(exc, saved_builtins)
            return
        except (ValueError, MemoryError, RecursionError) as exc:
            # e.g. source with NUL bytes, or nesting too deep for the parser
            reporter.finish_exception(exc, saved_builtins)
            return
        g = ready.globals
        if self._bound_for != self.max_frame_bytes:  # not made yet, or for another budget
            g = self.make_globals(g)
        main = bind_globals(fn, g)
        loop = self.loop
        assert loop is not None  # made by prepare()
        debugger = None
        if "debug" in request.options:
            loop.remove_reader(self.client.fd)  # a reader thread owns fd 3 instead
            try:
                debugger = self._debugger(request, fn, g, saved_builtins)
            except Exception as exc:
                reporter.fail(
                    "exception",
                    "DebuggerUnavailable",
                    f"the debugger could not start: {safe_str(exc, 2000)} (it needs one "
                    "thread: is max_processes too low?)",
                )
                return

        restore = restore_builtins
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
                if debugger is not None:
                    debugger.uncaught(outcome[1])
            restore(saved_builtins)
            return outcome

        if debugger is not None:
            debugger.trace()
        try:
            ok, outcome = loop.run_until_complete(runner())
        except:  # noqa: E722 - SystemExit or KeyboardInterrupt from a task
            ok, outcome = False, exc_info()[1]
            restore(saved_builtins)
        if debugger is not None:
            debugger.untrace()
        if not ok and type(outcome) is SystemExit and outcome.code in (None, 0):
            ok, outcome = True, None
        if ok:
            reporter.finish_value(outcome, saved_builtins)
        else:
            reporter.finish_exception(outcome, saved_builtins)

    def _debugger(
        self, request: ExecuteRequest, fn: Any, g: dict[str, Any], saved_builtins: dict[str, Any]
    ) -> Any:
        """A debugged run: the debugger, and a reader thread owning fd 3. Imported here,
        only now: an undebugged run never loads it."""
        saved = sys.dont_write_bytecode
        sys.dont_write_bytecode = True  # no __pycache__ written outside the run
        try:
            from .debugchannel import start_reader
            from .debugmonitor import make_debugger
        finally:
            sys.dont_write_bytecode = saved

        injected = {
            name: g[name]
            for name in ("ToolError", "display", "update_display", "clear_output", "help")
        }
        debugger = make_debugger(  # sys.monitoring's backend where there is one
            self.client,
            fn.__code__,
            g,
            injected,
            request.options["debug"],
            self.max_frame_bytes,
            saved_builtins,
        )
        start_reader(self.client, debugger)
        return debugger


def precompile_debugger() -> None:
    """Write the debugger's bytecode where it is missing or older than its source: the
    zygote does this once, as the host (before any program), since a debugged run's child
    imports the modules without writing any and would otherwise compile them each run.
    Nothing is imported (py_compile only when something is stale, and not kept); a
    package directory the host may not write is left as it is."""
    # Here, not at the top: only the zygote calls this, and a cold child's imports are its
    # start-up time.
    import importlib.util

    here = os.path.dirname(__file__)
    stale = []
    for name in DEBUGGER_MODULES:
        source = os.path.join(here, f"{name}.py")
        try:
            cached = importlib.util.cache_from_source(source)
            if os.stat(cached).st_mtime >= os.stat(source).st_mtime:
                continue
        except (OSError, NotImplementedError, ValueError):
            pass
        stale.append(source)
    if not stale:
        return
    had = "py_compile" in sys.modules
    import py_compile

    for source in stale:
        try:
            py_compile.compile(source, doraise=True)
        except Exception:
            pass  # read-only install, or no source: the child compiles in memory
    if not had:
        sys.modules.pop("py_compile", None)  # the warm children's modules stay as they were


class _Ready:
    """What :meth:`Child.prepare` makes for the one run of this process."""

    __slots__ = ("ledger", "reporter", "saved_builtins", "globals", "wrapper")

    def __init__(
        self,
        ledger: OutputLedger,
        reporter: Reporter,
        saved_builtins: dict[str, Any],
        globals_: dict[str, Any],
        wrapper: Wrapper,
    ) -> None:
        self.ledger = ledger
        self.reporter = reporter
        self.saved_builtins = saved_builtins
        self.globals = globals_
        self.wrapper = wrapper  # the nodes the program is compiled in


class DisplayHandle:
    """What ``display(obj, display_id=...)`` returns, as IPython's: ``update`` replaces the
    output, ``display`` shows it again."""

    __slots__ = ("_runner", "display_id")

    def __init__(self, runner: Child, display_id: str) -> None:
        self._runner = runner
        self.display_id = display_id

    def update(self, obj: Any) -> None:
        self._runner.update_display(obj, display_id=self.display_id)

    def display(self, obj: Any) -> None:
        self._runner.display(obj, display_id=self.display_id)

    def __repr__(self) -> str:
        return f"<DisplayHandle display_id={self.display_id!r}>"


def _new_display_id() -> str:
    return os.urandom(8).hex()


def _checked_id(display_id: object) -> str | None:
    # A TypeError at the program's line, not a protocol error from the wire.
    if display_id is None or (type(display_id) is str and 0 < len(display_id) <= 200):
        return display_id
    raise TypeError(
        f"display_id must be a string of 1 to 200 characters (or True for a new one), "
        f"got {display_id!r:.80}"
    )
