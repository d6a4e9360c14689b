"""The runtime: everything about a run that depends on the language its program is in.

A :class:`Gateway <kernelgate.gateway.gateway.Gateway>` runs every program through one
:class:`CodeRuntime`, and nothing above it (the run, its calls, outputs, outcome and
teardown, the notebooks, the Jupyter front, the agent helpers) knows which. A runtime says:

- its ``name`` (the program's language, recorded as ``RunResult.language``) and Jupyter's
  ``language_info`` for it, and ``interpreter``, what a run records it ran on;
- :meth:`~CodeRuntime.probe`: what the machine allows (the sandbox levels, cgroups), as
  seen by what starts its children, once per gateway, in a worker thread;
- :meth:`~CodeRuntime.spawn`: a cold child, with fds 0-3 as the wire wants them;
- :meth:`~CodeRuntime.warm_pool`: children started ahead of demand (a :class:`ChildPool`);
- :meth:`~CodeRuntime.render_stub`: the bindings as a model reads them, in its language;
- :meth:`~CodeRuntime.prepare`: the source as the child gets it in ``execute_request``
  (the same text for Python; TypeScript's types stripped on the host), or
  :class:`ProgramError` for a program that cannot run at all.

:class:`PythonRuntime` is the CPython child (``python=``, the site probe, the zygote pool,
the Python stub); :class:`~.noderuntime.NodeRuntime` is the Node child of TypeScript and
JavaScript programs; :func:`.runtimes.runtime_for` picks one for ``Gateway(runtime=,
language=, python=, node=)``.

>>> import asyncio, sys
>>> rt = PythonRuntime()
>>> rt.name, rt.language_info["file_extension"], rt.interpreter == sys.executable
('python', '.py', True)
>>> asyncio.run(rt.prepare("return 1"))
'return 1'
"""

from __future__ import annotations

import abc
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from kernelgate.model.describe import render_stub
from kernelgate.model.language import Language, language_info
from kernelgate.model.site import SiteState

from .cgroups import CgroupRoots, RunCgroup
from .pool import WarmChild, WarmPool
from .process import ChildProcess, resolve_interpreter, spawn_child
from .runids import RunIds
from .sandbox import SandboxPlan, SandboxSupport, probe_support

__all__ = [
    "ChildPool",
    "CodeRuntime",
    "ProgramError",
    "PythonRuntime",
    "resolve_interpreter",
]

#: What a binding spec is, as the child gets it: namespace -> name -> spec.
Specs = Mapping[str, Mapping[str, Mapping[str, Any]]]


class ProgramError(Exception):
    """What :meth:`CodeRuntime.prepare` raises for a program that cannot run at all (a
    TypeScript syntax error the host finds as it strips the types): the run ends with
    status ``exception``, ``ename`` and ``evalue`` as given, without starting a child.
    ``evalue`` should name the place (line and column of the source) and what to do."""

    def __init__(self, ename: str, evalue: str, traceback: tuple[str, ...] = ()) -> None:
        super().__init__(f"{ename}: {evalue}")
        self.ename = ename
        self.evalue = evalue
        self.traceback = traceback


class ChildPool(Protocol):
    """Children started ahead of demand for one sandbox ``level`` (each serves one run):
    what :meth:`CodeRuntime.warm_pool` makes and a run takes its child from."""

    @property
    def level(self) -> str: ...

    def takes(self, sandbox: SandboxPlan) -> bool:
        """Whether a run with ``sandbox`` may take a child of this pool (a child that
        confines itself as its program arrives takes any; one confined before it started,
        only runs with the plan it was started for). A run it does not take starts cold."""

    async def acquire(self) -> WarmChild | None:
        """A child ready for its program, or None (the run then spawns a cold one)."""

    async def recycle_cgroup(self, cgroup: RunCgroup) -> None:
        """Take back (or remove) the cgroup of a pooled child's finished run."""

    async def aclose(self) -> None:
        """Stop and remove every idle child, without blocking the loop."""

    def close(self) -> None:
        """:meth:`aclose` for synchronous callers."""


class CodeRuntime(abc.ABC):
    """How programs of one language are started and described (see the module's doc).

    A runtime is shared by every run of its gateway (and may be shared by gateways): it
    holds no run's state. Its methods are called from the gateway's event loop, except
    :meth:`probe` (a worker thread) and :meth:`spawn` (on the loop, and quick: it only
    starts the process).
    """

    #: The language of the programs (``RunResult.language``).
    name: Language
    #: Its children take the debug options of ``execute_request`` (``Gateway.run(debug=)``).
    debugger: bool = False
    #: Threads a child holds of its own beyond the program's (counted with max_processes).
    own_tasks: int = 0

    @property
    @abc.abstractmethod
    def interpreter(self) -> str:
        """What runs the programs, as a run records it (``RunResult.interpreter``)."""

    @property
    def language_info(self) -> dict[str, Any]:
        """Jupyter's ``language_info`` for the programs (``kernel_info``, notebooks)."""
        return language_info(self.name)

    @abc.abstractmethod
    def probe(self) -> SandboxSupport:
        """What this machine allows a child of this runtime (blocking: run in a thread,
        once per gateway, before its first run). Never raises for a machine that allows
        little: that is a weaker :class:`SandboxSupport`."""

    @abc.abstractmethod
    def spawn(
        self,
        *,
        env: Mapping[str, str],
        run_dir: str,
        sandbox: SandboxPlan,
        ids: RunIds | None,
        before_start: Callable[[ChildProcess], None] | None = None,
    ) -> ChildProcess:
        """Start a cold child for one run in ``run_dir``: fd 0 ``/dev/null``, fds 1 and 2
        pipes, fd 3 the wire (a socketpair), a session of its own. ``sandbox`` and
        ``ids`` are the run's (the Python child applies them itself when its program
        arrives; a child that cannot confine itself is started confined).
        ``before_start(child)`` is called once the process exists and before it runs
        anything of the program or the sandbox (the run puts it in its cgroup there); if
        it raises, the child is killed and reaped and the exception goes on. ``OSError``
        when it cannot be started (the run ends ``worker_exit``, naming
        :attr:`interpreter`)."""

    @abc.abstractmethod
    def warm_pool(
        self,
        *,
        size: int,
        env: Mapping[str, str],
        level: str,
        base_dir: str | None,
        cgroup_roots: CgroupRoots | None,
        read_paths: tuple[str, ...],
        sandbox: SandboxPlan,
    ) -> ChildPool:
        """A pool keeping ``size`` children ready at sandbox ``level`` (made on a
        gateway's first warm run; replaced when the level changes). ``sandbox`` is the
        plan of a run with the gateway's own limits at ``level``: what a child started
        confined is started for (see :meth:`ChildPool.takes`)."""

    @abc.abstractmethod
    def render_stub(self, specs: Specs, described: Sequence[Mapping[str, Any]] = ()) -> str:
        """The bindings (their specs, as the child gets them) as a model reads them, in
        this language: what ``Gateway.describe()`` says. ``described``: what
        ``describe(format="json")`` says of them, where the caller has it (types evaluated
        from the host's annotations: a richer source than the specs)."""

    async def prepare(self, source: str) -> str:
        """The code sent in ``execute_request`` for ``source`` (default: ``source``);
        :class:`ProgramError` for one that cannot run. Called once per run, before a
        child is taken; it must not hang (bound any helper it waits for)."""
        return source

    async def end_loop(self) -> None:  # noqa: B027 - optional: most runtimes hold nothing
        """Release what the runtime holds on the running event loop, which is about to
        end (a helper process whose pipes belong to that loop): ``Gateway.run_sync``
        calls it at the end of each run's loop, whoever owns the runtime."""

    async def aclose(self) -> None:  # noqa: B027 - optional
        """Release what the runtime holds (a helper process); a gateway calls it as it
        closes, for a runtime it made itself."""

    def close(self) -> None:  # noqa: B027 - optional
        """:meth:`aclose` for synchronous callers."""

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name} {self.interpreter!r}>"


class PythonRuntime(CodeRuntime):
    """Programs in Python, each run by a fresh CPython child (``python``: the interpreter,
    default the host's).

    Cold children start as ``python -I -S -c LOADER ROOT SITE`` with what the
    interpreter's ``site`` makes handed to them (probed once with the sandbox levels:
    :func:`~.sandbox.probe_support`); warm ones are forked from a zygote
    (:class:`~.pool.WarmPool`); each enters its sandbox itself. The stub is
    :func:`kernelgate.model.describe.render_stub`'s, the one ``help(tools)`` prints.
    """

    name: Language = "python"
    debugger = True

    def __init__(self, python: str | os.PathLike[str] | None = None) -> None:
        self.python = resolve_interpreter(python)
        # What the interpreter's site makes, from the last probe (None: not probed).
        self._site: SiteState | None = None

    @property
    def interpreter(self) -> str:
        return self.python

    def probe(self) -> SandboxSupport:
        # Cached per interpreter: the machine and the interpreter's site do not change.
        support = probe_support(self.python)
        self._site = support.site
        return support

    def spawn(
        self,
        *,
        env: Mapping[str, str],
        run_dir: str,
        sandbox: SandboxPlan,
        ids: RunIds | None,
        before_start: Callable[[ChildProcess], None] | None = None,
    ) -> ChildProcess:
        # The sandbox and ids go with the program (execute_request): the child applies
        # them itself. With the probe's site state a cold child starts without site (-S),
        # 3 to 15 ms sooner; without one (not probed, or the probe could not tell) it
        # starts with site, as a warm one does.
        child = spawn_child(self.python, env, run_dir, site=self._site)
        if before_start is not None:
            # The Python child waits for its program before it runs anything of it.
            try:
                before_start(child)
            except BaseException:
                child.abandon()
                raise
        return child

    def warm_pool(
        self,
        *,
        size: int,
        env: Mapping[str, str],
        level: str,
        base_dir: str | None,
        cgroup_roots: CgroupRoots | None,
        read_paths: tuple[str, ...],
        sandbox: SandboxPlan,
    ) -> WarmPool:
        return WarmPool(
            size=size,
            python=self.python,
            env=dict(env),
            level=level,
            base_dir=base_dir,
            cgroup_roots=cgroup_roots,
            read_paths=read_paths,
        )

    def render_stub(self, specs: Specs, described: Sequence[Mapping[str, Any]] = ()) -> str:
        return render_stub(specs, described)
