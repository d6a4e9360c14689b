"""The runtime of TypeScript and JavaScript programs: a fresh Node child per run.

``Gateway(language="typescript" | "javascript", node="node")`` runs its programs here:

- the host turns the source into the plain JavaScript the child runs
  (:class:`~.jsprogram.ProgramTransformer`: types stripped, the last expression returned,
  lines kept), and a program that cannot be stripped or parsed ends ``exception`` with
  the line and column of its source, without a child;
- the child is the Node kernel (:mod:`kernelgate.kernels.node`), started confined by the
  launcher (:mod:`.launch`: JavaScript cannot confine itself), in the run's cgroup before
  anything runs, with V8's heap bounded by ``memory_bytes`` (RLIMIT_AS does not suit V8);
- a model reads the bindings as TypeScript declarations
  (:func:`kernelgate.model.describe_ts.render_declarations`).

>>> NodeRuntime("typescript").language_info["file_extension"]  # doctest: +SKIP
'.ts'
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

from kernelgate.kernels.node import KERNEL_JS
from kernelgate.model.describe_ts import render_declarations
from kernelgate.model.language import Language

from .cgroups import CgroupRoots
from .jsprogram import ProgramSyntaxError, ProgramTransformer, ProgramTransformError
from .launch import LaunchCommand, NodeInstall, probe_node, spawn_launched_child
from .nodepool import NodePool, launched_spawner
from .process import ChildProcess, resolve_interpreter
from .runids import RunIds
from .runtime import CodeRuntime, ProgramError, Specs
from .sandbox import SandboxPlan, SandboxSupport, probe_support

__all__ = ["NodeRuntime", "heap_mib"]

_MIB = 1 << 20
#: What V8 needs beside its old space (new space, code, the kernel's own): the heap flag
#: is memory_bytes less this, so V8 says "heap out of memory" before the cgroup kills.
_BESIDE_HEAP_MIB = 48
_MIN_HEAP_MIB = 16
#: V8's platform workers and libuv's pool, down from Node's 4 and 4 (NodeRuntime.own_tasks).
_V8_THREADS = 2
_UV_THREADS = 2


def heap_mib(sandbox: SandboxPlan) -> int | None:
    """V8's ``--max-old-space-size`` for a run: its ``memory_bytes`` (the sandbox's
    address-space rlimit, which the launcher does not apply to Node) less what V8 needs
    beside the old space.

    >>> heap_mib(SandboxPlan("process", {"RLIMIT_AS": [256 << 20, 256 << 20]}))
    208
    """
    limit = sandbox.rlimits.get("RLIMIT_AS")
    if not limit or limit[0] <= 0:
        return None
    return max(_MIN_HEAP_MIB, limit[0] // _MIB - _BESIDE_HEAP_MIB)


class NodeRuntime(CodeRuntime):
    """Programs in ``language`` (``"typescript"`` or ``"javascript"``), each run by a
    fresh Node child (``node``: the binary, default ``node`` on PATH; found and checked,
    version >= 18, when the runtime is made: :class:`~.launch.NodeUnavailable` names what
    was looked for). ``python``: the interpreter that runs the launcher (default: this
    one)."""

    debugger = False
    #: Node's own threads beside the program's main one, made as it starts (the kernel's
    #: first read of fd 3 starts libuv's whole pool): V8's platform workers and libuv's
    #: pool, two each (the flags below), and two of Node's own. The run's pids.max and
    #: RLIMIT_NPROC allow them on top of max_processes, so the program's processes stop
    #: where a Python program's do.
    own_tasks = 6

    def __init__(
        self,
        language: Language = "typescript",
        node: str | os.PathLike[str] | None = None,
        *,
        python: str | os.PathLike[str] | None = None,
    ) -> None:
        if language == "typescript" or language == "javascript":
            self._script: Literal["typescript", "javascript"] = language
        else:
            raise ValueError(
                f"NodeRuntime runs 'typescript' or 'javascript' programs, not {language!r}"
            )
        self.name = language
        self.install: NodeInstall = probe_node(node if node is not None else "node")
        self.python = resolve_interpreter(python if python is not None else sys.executable)
        #: One transformer per event loop (its helper's pipes belong to that loop).
        self._transformers: dict[asyncio.AbstractEventLoop, ProgramTransformer] = {}

    @property
    def interpreter(self) -> str:
        return self.install.executable

    def probe(self) -> SandboxSupport:
        # The launcher applies the Python child's own sandbox code: what the machine
        # allows it is what it allows a Python child of the launcher's interpreter.
        return probe_support(self.python)

    def command_for(self, sandbox: SandboxPlan) -> LaunchCommand:
        """The launch command of a child for a run with ``sandbox``."""
        return self.install.command([f"--v8-pool-size={_V8_THREADS}", KERNEL_JS], heap_mib(sandbox))

    def spawn(
        self,
        *,
        env: Mapping[str, str],
        run_dir: str,
        sandbox: SandboxPlan,
        ids: RunIds | None,
        before_start: Callable[[ChildProcess], None] | None = None,
    ) -> ChildProcess:
        return spawn_launched_child(
            self.python,
            _node_env(env),
            run_dir,
            sandbox.child_options(ids),
            self.command_for(sandbox),
            before_start=before_start,
        )

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
    ) -> NodePool:
        # A Node child's rlimits and heap flag are fixed before it starts: the pool's
        # children are started for ``sandbox`` (the gateway's own limits) and only runs
        # with that plan take them (NodePool.takes); others start cold.
        return NodePool(
            size=size,
            sandbox=sandbox,
            spawn=launched_spawner(self.python, _node_env(env), sandbox, self.command_for(sandbox)),
            base_dir=base_dir,
            cgroup_roots=cgroup_roots,
        )

    def render_stub(self, specs: Specs, described: Sequence[Mapping[str, Any]] = ()) -> str:
        return render_declarations(described or _entries_from_specs(specs), specs)

    async def prepare(self, source: str) -> str:
        loop = asyncio.get_running_loop()
        transformer = self._transformers.get(loop)
        if transformer is None:
            transformer = self._transformers[loop] = ProgramTransformer(self.install.executable)
        try:
            return await transformer.transform(source, self._script)
        except ProgramSyntaxError as exc:
            raise ProgramError(
                "SyntaxError",
                f"{exc.message} (line {exc.line}, column {exc.column} of the program)",
                _caret(source, exc.line, exc.column),
            ) from None
        except ProgramTransformError as exc:
            raise ProgramError("ProgramTransformError", str(exc)) from None

    async def end_loop(self) -> None:
        transformer = self._transformers.pop(asyncio.get_running_loop(), None)
        if transformer is not None:
            await transformer.aclose()

    async def aclose(self) -> None:
        await self.end_loop()

    def close(self) -> None:
        # A helper whose loop ended without end_loop() (asyncio.run(gw.run(...)), then
        # gw.close()) is killed and reaped here; one of a loop still running is that
        # loop's to end.
        # Closes from several threads at once: each helper is taken (popped) by one.
        for loop in list(self._transformers):
            if loop.is_closed() and (helper := self._transformers.pop(loop, None)) is not None:
                helper.close_abandoned()


def _node_env(env: Mapping[str, str]) -> dict[str, str]:
    """The child's environment: the run's, without what would make Node load code or
    options from outside the run (NODE_OPTIONS --require, NODE_PATH, ...), and libuv's pool
    at its size (one thread waits on fd 3, one serves the program's file calls)."""
    clean = {k: v for k, v in env.items() if not k.startswith(("NODE_", "UV_"))}
    clean["UV_THREADPOOL_SIZE"] = str(_UV_THREADS)
    return clean


def _caret(source: str, line: int, column: int) -> tuple[str, ...]:
    """The source line of a syntax error with a caret under its column."""
    lines = source.splitlines()
    if not 1 <= line <= len(lines):
        return ()
    text = lines[line - 1]
    return (f'  File "<program>", line {line}', f"    {text}", "    " + " " * (column - 1) + "^")


def _entries_from_specs(specs: Specs) -> list[dict[str, Any]]:
    """What ``describe(format="json")`` would say, from the specs alone (a binding's own
    JSON Schema when it has one; types unknown otherwise)."""
    return [
        {
            "namespace": namespace,
            "name": name,
            "description": spec.get("doc", ""),
            "parameters": spec.get("schema") or {"type": "object"},
            "returns": {},
        }
        for namespace, table in specs.items()
        for name, spec in table.items()
    ]
