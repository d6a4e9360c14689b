"""Gateway: configuration, ``run()``, ``close()``."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import threading
import weakref
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kernelgate.model.limits import Limits
from kernelgate.model.result import RunResult

from . import toolresult as _toolresult
from . import tools as _tools
from .agent import AgentSurface
from .api import Recorder
from .bindings import BindingRegistry
from .cleanups import guarded_task, join_off_loop, off_loop_done, weakly
from .debug import RunDebugger
from .discovery import Discovery, builtin_bindings
from .outcome import Verdict, sandbox_unavailable
from .run import CallListener, OutputListener, Policy, Run, RunPlan
from .runtime import ChildPool, CodeRuntime, ProgramError
from .runtimes import BASE_ENV, runtime_for
from .sandbox import LEVELS, SandboxSupport, plan_sandbox
from .teardown import sweep_leftovers
from .tracing import Tracing, TracingOption
from .workers import workers_for

__all__ = ["Gateway", "Recorder"]


def _default_threads() -> int:
    """Synchronous bindings of one gateway running at once (more wait for a thread): a
    few per CPU, as they mostly wait on I/O; between 8 and 32."""
    return max(8, min(32, 4 * (os.cpu_count() or 1)))


class Gateway(AgentSurface):
    """Runs programs, each in a fresh child process, with host bindings as async calls.

    >>> def add(a: int, b: int) -> int:
    ...     return a + b
    >>> with Gateway(bindings={"add": add}) as gw:
    ...     r = gw.run_sync("x = await tools.add(1, b=2)\\nprint(x)\\nreturn x * 10")
    >>> r.ok, r.stdout, r.value, r.calls[0].value
    (True, '3\\n', 30, 3)

    ``bindings`` become the namespace ``namespace`` (default ``tools``) in the program;
    ``namespaces`` gives several at once (``{"tools": {...}, "db": {...}}``). ``run()`` never
    raises for what a program did: failures are in the result's ``status`` and ``error``.
    ``record_to`` names a directory where every run is saved as a notebook
    (``<run_id>.ipynb``), or is a recorder such as :class:`kernelgate.notebooks.SessionLog`.
    A gateway may be shared by threads: runs from several at once (each ``run_sync``, or
    ``run`` awaited on a loop of its own), and ``close()`` from any of them.

    The programs' language is the ``runtime``'s (:class:`~.runtime.CodeRuntime`); the
    default, :class:`~.runtime.PythonRuntime`, runs each in a fresh CPython child of
    ``python`` (default: this interpreter). ``language="typescript"`` or
    ``"javascript"`` runs them on Node (``node``: its binary, default ``node`` on PATH).
    Give one of ``runtime``, or ``language`` with its binary: a contradiction (``runtime``
    with ``python``, ``language="typescript"`` with ``python``) is a ``TypeError``. A
    runtime given as ``runtime`` may serve several gateways: closing one leaves it open.

    ``sandbox`` is the isolation level (``"process"``, ``"namespaces"``,
    ``"namespaces+landlock"``; default: the strongest this machine allows); with
    ``strict=True`` a run that cannot get it ends ``"sandbox_unavailable"`` without running.
    ``policy(namespace, name, args, kwargs)`` sees every binding call first and may deny it.
    ``read_paths`` are extra paths programs may read under landlock. ``pool_size`` children
    are kept booted ahead of demand (forked from a zygote; each still serves one run);
    ``0`` spawns a cold interpreter per run. Synchronous bindings run in up to
    ``max_threads`` worker threads (default: 4 per CPU, between 8 and 32), coroutine
    functions and bindings marked :func:`kernelgate.inline` on the event loop.

    ``tracing`` (off by default: OpenTelemetry is not imported) traces each run and its
    binding calls as spans: ``True`` with the global tracer provider, or give a
    ``TracerProvider`` or ``Tracer`` (:mod:`~kernelgate.gateway.tracing`).
    ``tool_search=True`` gives programs the gateway's own namespace ``kernelgate``:
    ``await kernelgate.search_tools("words")`` and ``await kernelgate.describe([...])``
    answer with the stub of the matching bindings (see :meth:`search_tools`), for a model
    whose description lists names only (``tool_schema(max_description_chars=...)``).
    """

    def __init__(
        self,
        bindings: Mapping[str, Callable[..., Any]] | None = None,
        *,
        namespace: str = "tools",
        namespaces: Mapping[str, Mapping[str, Callable[..., Any]]] | None = None,
        limits: Limits | None = None,
        python: str | os.PathLike[str] | None = None,
        language: str | None = None,
        node: str | os.PathLike[str] | None = None,
        runtime: CodeRuntime | None = None,
        env: Mapping[str, str] | None = None,
        tmp_dir: str | os.PathLike[str] | None = None,
        record_to: str | os.PathLike[str] | Recorder | None = None,
        sandbox: str | None = None,
        strict: bool = False,
        policy: Policy | None = None,
        read_paths: tuple[str | os.PathLike[str], ...] = (),
        pool_size: int = 4,
        max_threads: int | None = None,
        tracing: TracingOption = None,
        tool_search: bool = False,
    ) -> None:
        # long: one check per option, where it is taken (a Gateway has many options)
        self._registry = BindingRegistry.from_arguments(bindings, namespace, namespaces)
        self._tracing = Tracing.from_option(tracing)
        if limits is not None and not isinstance(limits, Limits):
            raise TypeError(f"limits must be a kernelgate.Limits, got {type(limits).__name__}")
        self.limits = limits or Limits()
        #: How programs are started and described: the language they are written in.
        self.runtime = runtime_for(runtime=runtime, language=language, python=python, node=node)
        # A runtime the caller gave may serve other gateways too: it is the caller's to close.
        self._owns_runtime = runtime is None
        child_env = dict(BASE_ENV)
        for key, value in (env or {}).items():
            if not isinstance(key, str) or not isinstance(value, str) or "=" in key or not key:
                raise ValueError(
                    f"env entries must be str -> str with no '=' in the name, got {key!r}"
                )
            child_env[key] = value
        self.env = child_env
        self.tmp_dir = os.fspath(tmp_dir) if tmp_dir is not None else None
        # A directory gets a notebook per run (a RunDirectory, the writer being of this
        # layer: gateway/recording); a recorder (SessionLog) every run in turn. The gateway
        # takes the recorder rather than a path to a session log because notebooks sit
        # above it: it may not import them.
        self.record_to: str | Recorder | None
        self._recorder: Recorder | None
        if record_to is None:
            self.record_to = self._recorder = None
        elif isinstance(record_to, (str, os.PathLike)):
            # Imported here, not with the module: most gateways record nothing, and the
            # writer (cells, call HTML, the timeline's SVG) costs ~11 ms to import.
            from .recording.store import RunDirectory

            self.record_to = os.fspath(record_to)
            self._recorder = RunDirectory(self.record_to)
        elif isinstance(record_to, Recorder):
            self.record_to = self._recorder = record_to
        else:
            raise TypeError(
                "record_to must be a directory (a notebook per run) or a recorder with "
                "append(result), e.g. kernelgate.notebooks.SessionLog('session.ipynb'); "
                f"got {type(record_to).__name__}"
            )
        if sandbox is not None and sandbox not in LEVELS:
            raise ValueError(
                f"sandbox={sandbox!r} is not a level; use one of {', '.join(LEVELS)} "
                "(or None for the strongest this machine allows)"
            )
        self.sandbox = sandbox
        self.strict = bool(strict)
        if policy is not None and not callable(policy):
            raise TypeError(f"policy must be callable, got {type(policy).__name__}")
        self.policy = policy
        self.read_paths = tuple(os.path.abspath(os.fspath(p)) for p in read_paths)
        self._support: SandboxSupport | None = None
        if isinstance(pool_size, bool) or not isinstance(pool_size, int) or pool_size < 0:
            raise ValueError(f"pool_size must be an integer >= 0, got {pool_size!r}")
        self.pool_size = pool_size
        self._pool: ChildPool | None = None
        self._pool_finalizer: weakref.finalize[Any, Any] | None = None
        self._last_plan: tuple[tuple[object, ...], RunPlan] | None = None  # see _plan
        self._making = threading.RLock()  # plans (their pool, threads) of several threads
        self._runs: set[Run] = set()
        # Runs that returned on their reply while their child was still exiting.
        self._finishing: set[asyncio.Task[None]] = set()
        self._closed = False
        self._executor: ThreadPoolExecutor | None = None
        self._swept = False
        if max_threads is None:
            max_threads = _default_threads()
        if isinstance(max_threads, bool) or not isinstance(max_threads, int) or max_threads < 1:
            raise ValueError(f"max_threads must be an integer >= 1, got {max_threads!r}")
        self.max_threads = max_threads
        self._described: list[dict[str, Any]] | None = None
        self._stub: str | None = None
        self._imports: tuple[list[str] | None] | None = None
        self._discovery = Discovery(self._registry, self.runtime.render_stub, weakly(self._entries))
        #: Programs may search the bindings (``kernelgate.search_tools``).
        self.tool_search = bool(tool_search)
        # What a run's child is given: the bindings, and the gateway's own when asked for.
        self._run_registry = (
            self._registry.with_builtin(builtin_bindings(self._discovery))
            if self.tool_search
            else self._registry
        )

    @property
    def registry(self) -> BindingRegistry:
        return self._registry

    @property
    def closed(self) -> bool:
        return self._closed

    async def run(
        self,
        program: str,
        *,
        limits: Limits | None = None,
        on_output: OutputListener | None = None,
        on_call: CallListener | None = None,
        debug: RunDebugger | None = None,
    ) -> RunResult:
        """Run ``program`` in a fresh child and return what it printed and returned.

        ``limits`` replaces the gateway's limits for this run. ``on_output`` and ``on_call``
        see outputs and completed calls as they happen. ``debug`` (a
        :class:`~kernelgate.gateway.debug.RunDebugger`) runs it under the debugger: its
        breakpoints apply, and its ``request`` steps and inspects the program while it runs.
        Cancelling the awaiting task kills the child and its process group, waits until they
        are gone, then raises ``CancelledError``.

        A program's reply is its last word: ``run`` returns as soon as it has it, and the
        child's exit, its cgroup and its run directory are seen to on this event loop
        after that. ``aclose()`` (or ``async with``) waits for all of it; ``run_sync``
        does so for every run.

        >>> async def main():
        ...     async with Gateway(bindings={"add": lambda a, b: a + b}) as gw:
        ...         return (await gw.run("return await tools.add(1, 2)")).value
        >>> asyncio.run(main())
        3
        """
        limits = self._check_run(program, limits)
        if debug is not None and not self.runtime.debugger:
            raise ValueError(
                f"Gateway.run(debug=...): the debugger steps through Python programs; this "
                f"gateway runs {self.runtime.name} programs (run it without debug=)"
            )
        if self._support is None:
            self._support = await asyncio.to_thread(self._first_run)
        plan = await self._prepared(program, self._plan(limits, self._support))
        if debug is not None:
            debug.claim()  # one run per RunDebugger: refused before any child is taken
        trace = self._tracing.start_run(plan) if self._tracing is not None else None
        run = Run(program, plan, on_output=on_output, on_call=on_call, debug=debug, trace=trace)
        self._runs.add(run)
        if self._closed:  # closed from another thread since _check_run: stopped as the rest
            self._stop_runs()
        try:
            result = await run.execute()
        finally:
            self._runs.discard(run)
            if run.finishing is not None:
                self._finishing.add(run.finishing)
                run.finishing.add_done_callback(self._finishing.discard)
        if self._recorder is not None:
            # A recorder writes a notebook and fsyncs it: not on the event loop.
            try:
                await asyncio.to_thread(self._recorder.append, result)
            except OSError as exc:  # any recorder's (a SessionLog's too): the run is kept
                from .recording.store import RunNotRecorded  # only on this failure: 11 ms

                if isinstance(exc, RunNotRecorded):
                    raise
                raise RunNotRecorded(result, str(exc.filename or ""), exc) from exc
        return result

    async def run_tool(
        self,
        code: object,
        *,
        max_chars: int = _tools.MAX_CHARS,
        limits: Limits | None = None,
        on_output: OutputListener | None = None,
        on_call: CallListener | None = None,
    ) -> _tools.ToolOutput:
        """Run ``code`` (a model's ``run_code`` call: the program, or the tool input
        ``{"code": ...}``) and return it as model-ready text: ``.text`` (cut to
        ``max_chars`` with a marker), ``.is_error``, ``.images``, ``.result``. A malformed
        call (None, no ``code``, not a string) runs nothing and gets an error result
        saying what to send. ``on_output`` and ``on_call`` see the run live, as for
        :meth:`run` (the agent's developer watches a long run while the model waits for
        its text).

        >>> async def main():
        ...     async with Gateway() as gw:
        ...         return (await gw.run_tool("print('hi')\\nreturn 1")).text
        >>> print(asyncio.run(main()))
        printed:
        hi
        returned:
        1
        """
        try:
            program = _toolresult.program_of(code)
        except ValueError as exc:  # the model's mistake: an answer it can read
            return _toolresult.invalid_input(str(exc))
        result = await self.run(program, limits=limits, on_output=on_output, on_call=on_call)
        return _tools.tool_output(result, max_chars)

    def _check_run(self, program: str, limits: Limits | None) -> Limits:
        """Refuse caller misuse before anything starts; the limits of the run."""
        if self._closed:
            raise RuntimeError("this Gateway is closed; create a new one to run programs")
        if not isinstance(program, str):
            raise TypeError(
                f"program must be str (the program's source), got {type(program).__name__}"
            )
        if limits is not None and not isinstance(limits, Limits):
            raise TypeError(f"limits must be a kernelgate.Limits, got {type(limits).__name__}")
        return limits or self.limits

    def _binding_threads(self) -> ThreadPoolExecutor:
        """The threads synchronous bindings run in, made on first use: a blocking binding
        holds one thread, never the event loop that every run on this gateway shares."""
        if self._executor is None:
            threads = ThreadPoolExecutor(self.max_threads, thread_name_prefix="kernelgate-binding")
            if not self._closed:  # one parked between runs: its only user
                workers_for(threads).keep_one()
            self._executor = threads
        return self._executor

    def _close_threads(self) -> None:
        with self._making:  # closes from several threads at once: one takes the threads
            threads, self._executor = self._executor, None
        if threads is not None:
            workers_for(threads).close()  # parked threads go; running ones' runs are over
            threads.shutdown(wait=False, cancel_futures=True)

    def _plan(self, limits: Limits, support: SandboxSupport) -> RunPlan:
        """The last run's plan (immutable) while nothing it was made from changed: the
        limits, or a setting assigned since (its pool and threads change only with those)."""
        made_of = (limits, support, self.sandbox, self.strict, self.read_paths, self.policy,
                   self.env, self.tmp_dir, self.runtime)  # fmt: skip
        with self._making:  # one pool and one executor, whichever threads' runs come first
            if self._last_plan is None or self._last_plan[0] != made_of:
                self._last_plan = (made_of, self._new_plan(limits, support))
            return self._last_plan[1]

    def _new_plan(self, limits: Limits, support: SandboxSupport) -> RunPlan:
        """Everything one run needs, decided once: the sandbox level (the strongest here
        unless asked; a strict gateway refuses less), its plan, pool, policy and threads."""
        level = self.sandbox or support.strongest
        missing = support.missing(level)
        unavailable = None
        if missing:
            if self.strict:
                unavailable = sandbox_unavailable(
                    f"the sandbox level {level!r} is not available on this machine: {missing}; "
                    f"the strongest here is {support.strongest!r} (Gateway(strict=True) "
                    "refuses to run with less)"
                )
            level = support.strongest  # what is missing is above it: fall back to it
        sandbox = plan_sandbox(level, limits, support, self.read_paths, self.runtime.own_tasks)
        pool = self._pool_for(level, support) if unavailable is None else None
        return RunPlan(
            registry=self._run_registry,
            limits=limits,
            runtime=self.runtime,
            env=self.env,
            sandbox=sandbox,
            base_dir=self.tmp_dir,
            refused=unavailable,
            policy=self.policy,
            pool=pool if pool is not None and pool.takes(sandbox) else None,
            executor=self._binding_threads(),
        )

    async def _prepared(self, program: str, plan: RunPlan) -> RunPlan:
        """``plan`` with the code the child is sent, as the runtime prepares ``program``;
        or refused, when the runtime cannot (before a child is taken: it costs none)."""
        if plan.refused is not None:
            return plan
        try:
            code = await self.runtime.prepare(program)
        except ProgramError as exc:
            # An exception, as if the program had raised it where the runtime says.
            refused = Verdict("exception", exc.ename, exc.evalue, tuple(exc.traceback))
            return dataclasses.replace(plan, refused=refused, pool=None)
        return plan if code is program else dataclasses.replace(plan, code=code)

    def _first_run(self) -> SandboxSupport:
        """Before the first run, in a worker thread (never on the loop): probe what the
        machine allows, and sweep what hosts that died before us left here (run dirs,
        cgroups), so a machine that restarts kernels all day does not fill up."""
        support = self.runtime.probe()
        if not self._swept:
            self._swept = True
            sweep_leftovers(self.tmp_dir, support.cgroups)
        return support

    def _pool_for(self, level: str, support: SandboxSupport) -> ChildPool | None:
        """The warm pool for ``level`` (made on first use; None with ``pool_size=0``)."""
        if self.pool_size == 0 or self._closed:  # closed by another thread meanwhile
            return None
        if self._pool is None or self._pool.level != level:
            if (retired := self._let_go()) is not None:
                self._retire(retired)
            sandbox = plan_sandbox(
                level, self.limits, support, self.read_paths, self.runtime.own_tasks
            )
            pool = self._pool = self.runtime.warm_pool(
                size=self.pool_size, env=self.env, level=level, base_dir=self.tmp_dir,
                cgroup_roots=support.cgroups, read_paths=self.read_paths, sandbox=sandbox,
            )  # fmt: skip
            self._pool_finalizer = weakref.finalize(self, pool.close)
        return self._pool

    def _let_go(self) -> ChildPool | None:
        """Take the pool (to close or retire it) from its finalizer, which closes it when the
        gateway is dropped unclosed: at once (a gateway is in no reference cycle), whatever
        else still holds the pool (a finished run's plan, in a cycle of its own)."""
        with self._making:  # closes from several threads at once: one takes the pool
            pool, self._pool = self._pool, None
            finalizer, self._pool_finalizer = self._pool_finalizer, None
        if finalizer is not None:
            finalizer.detach()
        return pool

    def _retire(self, pool: ChildPool) -> None:
        """Close a pool that is no longer used, on the loop without blocking it; awaited
        by wait_finished and aclose like the teardown of a run."""
        # Cancelled before it starts (the loop ending), the task never runs aclose: the
        # pool is closed at once then, waiting for its killed idle children (ms).
        task = guarded_task(pool.aclose, pool.close)
        self._finishing.add(task)
        task.add_done_callback(self._finishing.discard)

    def run_sync(self, program: str, *, limits: Limits | None = None) -> RunResult:
        """``run()`` for synchronous callers (not from inside a running event loop)."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            raise RuntimeError(
                "run_sync() was called from a running event loop; use 'await gateway.run(...)'"
            )
        return asyncio.run(self._run_to_the_end(program, limits))

    async def _run_to_the_end(self, program: str, limits: Limits | None) -> RunResult:
        # The loop ends with this call: the run's teardown finishes inside it, and what the
        # runtime holds on it (a helper whose pipes belong to it) goes with it.
        try:
            result = await self.run(program, limits=limits)
            await self.wait_finished()
        finally:
            await self.runtime.end_loop()
        return result

    async def wait_finished(self) -> None:
        """Wait until every run that has returned on this loop is torn down: its processes
        reaped, its cgroup emptied and its run directory removed."""
        loop = asyncio.get_running_loop()
        if tasks := [t for t in list(self._finishing) if t.get_loop() is loop]:  # a copy
            await asyncio.gather(*tasks, return_exceptions=True)

    def interrupt(self) -> int:
        """Stop every live run (status ``"interrupted"``); return how many there were."""
        runs = list(self._runs)
        for run in runs:
            run.interrupt()
        return len(runs)

    async def aclose(self) -> None:
        """Close: no new runs; every live run is stopped, and on return every run's child
        (live or already answered) is gone, its cgroup and run directory removed."""
        runs = self._stop_runs()
        loop = asyncio.get_running_loop()
        waits = [r.wait_exited() for r in runs if r.loop is loop]
        if waits:
            await asyncio.gather(*waits, return_exceptions=True)
        await self.wait_finished()
        self._close_threads()
        pool = self._let_go()
        if pool is not None:
            await pool.aclose()
        if self._owns_runtime:
            await self.runtime.aclose()
        # What had to be finished without the loop (a teardown cancelled before it ran,
        # a cgroup still emptying) is done in threads: gone, too, when aclose returns.
        await off_loop_done()

    def _stop_runs(self) -> list[Run]:
        """Closed: no new runs, and every live one stopped (from any thread)."""
        with self._making:  # a plan made from now on has no pool or kept thread
            self._closed = True
        runs = list(self._runs)
        for run in runs:
            run.interrupt("the gateway was closed while the run was live")
        return runs

    def close(self) -> None:
        """Close from synchronous code: stop every live run (their loops finish them)."""
        self._stop_runs()
        self._close_threads()
        if (pool := self._let_go()) is not None:
            pool.close()
        if self._owns_runtime:
            self.runtime.close()
        join_off_loop()  # the cleanup threads, as aclose() waits for them

    async def __aenter__(self) -> Gateway:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __enter__(self) -> Gateway:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        names = {ns: sorted(t) for ns, t in self._registry.namespaces.items()}
        state = "closed" if self._closed else "open"
        return (
            f"<Gateway {state} namespaces={names} {self.runtime.name}={self.runtime.interpreter!r}>"
        )
