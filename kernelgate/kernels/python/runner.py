"""One run inside the child: take the program, enter the sandbox, run it, hand the outcome
to the reporter (:mod:`.report`).

The program runs as the body of an ``async def`` (:mod:`.program`) on a fresh event loop,
with ``tools`` (its namespaces of bindings, :mod:`.namespace`), ``ToolError`` and
``display`` as globals, and ``sys.stdout``/``sys.stderr`` sending ``stream`` messages
(:mod:`.streams`). Whatever it does to builtins is undone before reporting.

>>> Child.__name__
'Child'
"""

from __future__ import annotations

import asyncio
import builtins
import sys
import time
from typing import Any

from kernelgate.model.constants import FRAME_OVERHEAD as _FRAME_OVERHEAD
from kernelgate.wire.events import DisplayData, ExecuteRequest, Stream

from .client import CONTROL_FD, CallClient
from .display import display_bundle
from .namespace import Binding, Namespace, ToolError, program_help
from .program import bind_globals, compile_program, safe_str
from .report import Reporter, fallback_frame, restore_builtins
from .sandbox import enter as enter_sandbox
from .streams import OutputLedger, OutputStream

__all__ = ["Child"]

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

    def display(self, *objs: Any, **_ignored: Any) -> None:
        """Show objects as rich outputs (``display_data``), as in a notebook."""
        for stream in self.client.streams:
            stream.flush()
        for obj in objs:
            data, metadata = display_bundle(obj, self.max_frame_bytes)
            self.client.send(DisplayData(data, metadata))

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
        call = self.client.call
        for ns, specs in self.client.namespaces.items():
            g[ns] = Namespace(
                ns,
                {name: Binding(ns, name, spec, call, arg_budget) for name, spec in specs.items()},
            )
        return g

    # -- the run ---------------------------------------------------------------------------

    def run(self) -> None:
        """Read the program, enter the sandbox, run the program and report; never returns
        (the reporter exits)."""
        request = self.client.read_until_request()
        reporter, saved_builtins, sandbox_error = self._start(request)
        if sandbox_error is not None:
            reporter.fail(
                "sandbox_unavailable",
                "SandboxUnavailable",
                f"the child could not enter its sandbox: {safe_str(sandbox_error, 2000)}",
            )
            return
        self._execute(request, reporter, saved_builtins)

    def _start(
        self, request: ExecuteRequest
    ) -> tuple[Reporter, dict[str, Any], BaseException | None]:
        """The request's limits, the sandbox (it may return in a new process, pid 2), the
        output streams; the builtins as they are before the program runs."""
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
        ledger = OutputLedger(int(options.get("max_output_bytes", 64 * 1024)))
        stdout = OutputStream("stdout", self._send_stream, ledger)
        stderr = OutputStream("stderr", self._send_stream, ledger)
        client.streams = (stdout, stderr)
        sys.stdout = stdout
        sys.stderr = stderr
        saved_builtins = dict(builtins.__dict__)
        return Reporter(client, stdout, stderr, self.max_value_bytes), saved_builtins, sandbox_error

    def _execute(
        self, request: ExecuteRequest, reporter: Reporter, saved_builtins: dict[str, Any]
    ) -> None:
        """Compile and run the program on its event loop; report how it ended."""
        try:
            fn = compile_program(request.code)
        except SyntaxError as exc:
            reporter.finish_exception(exc, saved_builtins)
            return
        except (ValueError, MemoryError, RecursionError) as exc:
            # e.g. source with NUL bytes, or nesting too deep for the parser
            reporter.finish_exception(exc, saved_builtins)
            return
        main = bind_globals(fn, self.make_globals())
        loop = self.loop or asyncio.new_event_loop()
        self.loop = loop
        asyncio.set_event_loop(loop)
        loop.time = _monotonic  # type: ignore[method-assign]  # the program may rebind time.monotonic
        loop.add_reader(self.client.fd, self.client.on_readable)

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
            reporter.finish_value(outcome, saved_builtins)
        else:
            reporter.finish_exception(outcome, saved_builtins)
