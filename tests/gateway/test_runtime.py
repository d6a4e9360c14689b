"""The runtime seam: Gateway(runtime=, language=, python=, node=), what a runtime decides
(the code sent, the stub, the child, the recorded language and interpreter), and the one
caller protocol (CodeGateway)."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pytest

from kernelgate import CodeGateway, Gateway, Limits, RemoteGateway
from kernelgate.gateway.launch import NodeUnavailable
from kernelgate.gateway.process import ChildProcess
from kernelgate.gateway.runids import RunIds
from kernelgate.gateway.runtime import CodeRuntime, ProgramError, PythonRuntime
from kernelgate.gateway.runtimes import node_runtime, runtime_for
from kernelgate.gateway.sandbox import SandboxPlan
from tests.procs import live_children, pid_alive

FAST = Limits(wall_seconds=20)


class CountingRuntime(PythonRuntime):
    """The Python runtime, counting what the gateway asks of it; ``prepare`` turns the
    marker ``@answer`` into ``41 + 1`` (a transform as a TypeScript runtime's is), or
    refuses a program holding ``@refuse``."""

    def __init__(self) -> None:
        super().__init__()
        self.spawned = 0
        self.prepared: list[str] = []
        self.closed = 0
        self.loops_ended = 0

    async def prepare(self, source: str) -> str:
        self.prepared.append(source)
        if "@refuse" in source:
            raise ProgramError(
                "SyntaxError",
                "line 2, column 3: '@refuse' is not a program; remove it",
                ("line 2: @refuse", "         ^"),
            )
        return source.replace("@answer", "41 + 1")

    def spawn(
        self,
        *,
        env: Mapping[str, str],
        run_dir: str,
        sandbox: SandboxPlan,
        ids: RunIds | None,
        before_start: Callable[[ChildProcess], None] | None = None,
    ) -> ChildProcess:
        self.spawned += 1
        return super().spawn(
            env=env, run_dir=run_dir, sandbox=sandbox, ids=ids, before_start=before_start
        )

    def render_stub(
        self,
        specs: Mapping[str, Mapping[str, Mapping[str, Any]]],
        described: Sequence[Mapping[str, Any]] = (),
    ) -> str:
        return "stub of " + ",".join(f"{ns}.{n}" for ns, t in specs.items() for n in sorted(t))

    def close(self) -> None:
        self.closed += 1

    async def aclose(self) -> None:
        self.closed += 1

    async def end_loop(self) -> None:
        asyncio.get_running_loop()  # called on the loop that ends, before it is closed
        self.loops_ended += 1


def test_the_default_runtime_is_python_on_this_interpreter() -> None:
    for gw in (Gateway(), Gateway(language="python"), Gateway(python=sys.executable)):
        assert isinstance(gw.runtime, PythonRuntime)
        assert gw.language == "python" and gw.python == sys.executable
        assert gw.runtime.language_info["name"] == "python"


@pytest.mark.parametrize("language", ["typescript", "javascript"])
def test_node_languages_without_node_say_what_was_looked_for(language: str) -> None:
    """No usable Node: a clear error when the gateway is made, naming what was looked
    for and what to do; never a crash or a hang at the first run."""
    with pytest.raises(NodeUnavailable) as caught:
        Gateway(language=language, node="/nonexistent/bin/node")
    message = str(caught.value)
    assert "'/nonexistent/bin/node'" in message and "apt-get install nodejs" in message
    with pytest.raises(NodeUnavailable, match="PATH"):
        node_runtime(language, "no-such-node-binary")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "error", "names"),
    [
        ({"runtime": PythonRuntime(), "python": sys.executable}, TypeError, "python="),
        ({"runtime": PythonRuntime(), "node": "node"}, TypeError, "node="),
        ({"runtime": PythonRuntime(), "language": "typescript"}, TypeError, "language="),
        ({"language": "typescript", "python": sys.executable}, TypeError, "node="),
        ({"language": "javascript", "python": sys.executable}, TypeError, "node="),
        ({"node": "node"}, TypeError, "node="),
        ({"language": "ruby"}, ValueError, "'ruby'"),
        ({"runtime": "python"}, TypeError, "CodeRuntime"),
        ({"python": "/nonexistent/python3"}, ValueError, "/nonexistent/python3"),
    ],
)
def test_contradictions_are_refused_naming_them(
    kwargs: dict[str, Any], error: type[Exception], names: str
) -> None:
    with pytest.raises(error) as caught:
        Gateway(**kwargs)
    assert names in str(caught.value)


def test_a_runtime_with_its_own_language_is_taken_as_given() -> None:
    runtime = PythonRuntime()
    assert runtime_for(runtime=runtime, language="python") is runtime
    assert Gateway(runtime=runtime).runtime is runtime


def test_the_runtime_prepares_the_program_and_the_result_keeps_the_source() -> None:
    runtime = CountingRuntime()
    with Gateway(runtime=runtime, pool_size=0, limits=FAST) as gw:
        result = gw.run_sync("print('x')\n@answer")
    assert result.status == "ok", result.error
    assert result.value == 42 and result.stdout == "x\n"
    # What was asked is recorded; what the child got is the runtime's business.
    assert result.program == "print('x')\n@answer"
    assert runtime.prepared == ["print('x')\n@answer"] and runtime.spawned == 1
    assert result.language == "python" and result.interpreter == runtime.interpreter


@pytest.mark.parametrize("pool_size", [0, 1])
def test_a_program_the_runtime_refuses_ends_without_a_child(pool_size: int) -> None:
    runtime = CountingRuntime()
    with Gateway(runtime=runtime, pool_size=pool_size, limits=FAST) as gw:
        result = gw.run_sync("x = 1\n@refuse\nprint('never')")
        spawned = runtime.spawned
        after = gw.run_sync("@answer")  # the gateway goes on
    assert result.status == "exception" and result.error is not None
    assert result.error.ename == "SyntaxError"
    assert result.error.evalue.startswith("line 2, column 3")
    assert result.error.traceback == ["line 2: @refuse", "         ^"]
    assert result.outputs[-1]["output_type"] == "error"
    assert result.outputs[-1]["traceback"] == result.error.traceback
    assert result.stdout == "" and result.isolation == ""  # nothing ran, nowhere
    assert spawned == 0  # no cold child for it (a warm one is never taken: see the doc)
    assert after.ok and after.value == 42


def test_describe_is_the_runtime_s_stub_json_is_the_gateway_s() -> None:
    def add(a: int, b: int) -> int:
        return a + b

    gw = Gateway(runtime=CountingRuntime(), bindings={"add": add})
    assert gw.describe() == "stub of tools.add"
    assert gw.describe("json")[0]["name"] == "add"
    assert "add(" in Gateway(bindings={"add": add}).describe()  # Python's own stub


def test_a_given_runtime_is_the_caller_s_to_close() -> None:
    runtime = CountingRuntime()
    with Gateway(runtime=runtime, pool_size=0):
        pass

    async def main() -> None:
        async with Gateway(runtime=runtime, pool_size=0) as gw:
            await gw.run("1")

    asyncio.run(main())
    assert runtime.closed == 0


def test_each_run_sync_tells_the_runtime_its_loop_ends() -> None:
    """A runtime may hold a helper bound to the loop it was used on (the TypeScript
    transform's): run_sync's loop is its own, so the runtime hears when it ends, whoever
    owns the runtime, and also when the run failed."""
    runtime = CountingRuntime()
    with Gateway(runtime=runtime, pool_size=0, limits=FAST) as gw:
        assert gw.run_sync("@answer").value == 42
        assert gw.run_sync("x = 1\n@refuse").status == "exception"
    assert runtime.loops_ended == 2 and runtime.closed == 0


def test_a_run_of_a_shared_runtime_on_two_gateways() -> None:
    runtime = CountingRuntime()
    with Gateway(runtime=runtime, pool_size=0, limits=FAST) as a:
        with Gateway(runtime=runtime, pool_size=0, limits=FAST) as b:
            assert a.run_sync("@answer").value == b.run_sync("@answer").value == 42


def test_both_gateways_are_code_gateways() -> None:
    assert isinstance(Gateway(), CodeGateway)
    assert isinstance(RemoteGateway(object()), CodeGateway)  # type: ignore[arg-type]
    assert not isinstance(object(), CodeGateway)


def test_the_runtime_is_abstract() -> None:
    with pytest.raises(TypeError):
        CodeRuntime()  # type: ignore[abstract]


def test_a_python_runtime_names_its_interpreter() -> None:
    runtime = PythonRuntime(os.path.realpath(sys.executable))
    assert repr(runtime).startswith("<PythonRuntime python ")
    assert "python=" in repr(Gateway(runtime=runtime))


def test_a_runtime_without_a_debugger_refuses_a_debugged_run() -> None:
    from kernelgate.gateway.debug import RunDebugger

    class NoDebugger(CountingRuntime):
        debugger = False

    runtime = NoDebugger()

    async def main() -> None:
        async with Gateway(runtime=runtime, pool_size=0) as gw:
            with pytest.raises(ValueError, match="debugger"):
                await gw.run("1", debug=RunDebugger())
            assert (await gw.run("@answer")).value == 42  # and nothing was taken

    asyncio.run(main())
    assert runtime.spawned == 1


def test_a_failing_before_start_leaves_no_python_child_behind(tmp_path: Any) -> None:
    """As for a launched child (tests/node/test_launcher_probe.py): the child is killed
    and reaped, never left a zombie, and the exception goes on."""
    seen: list[int] = []

    def refuse(child: ChildProcess) -> None:
        seen.append(child.pid)
        raise RuntimeError("no cgroup for you")

    with pytest.raises(RuntimeError, match="no cgroup for you"):
        PythonRuntime().spawn(
            env={},
            run_dir=str(tmp_path),
            sandbox=SandboxPlan("process", {}),
            ids=None,
            before_start=refuse,
        )
    assert seen and live_children(os.getpid()) == [] and not pid_alive(seen[0])
    assert not os.path.exists(f"/proc/{seen[0]}"), "left a zombie: killed, never reaped"
