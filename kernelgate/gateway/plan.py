"""RunPlan: everything one run needs, decided once by the Gateway before the run starts."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any

from kernelgate.model.limits import Limits
from kernelgate.model.result import CallRecord

from .bindings import Binding, BindingRegistry
from .cgroups import CgroupRoots
from .outcome import Verdict
from .runtime import ChildPool, CodeRuntime
from .sandbox import SandboxPlan

__all__ = ["CallHandler", "CallListener", "Policy", "RunPlan"]

#: Called with each binding call once it completes.
CallListener = Callable[[CallRecord], None]
#: Answers a call in place of the registry's callable (e.g. a remote client's binding).
CallHandler = Callable[[Binding, list[Any], dict[str, Any]], Awaitable[Any]]
#: Sees every call before it runs: ``policy(namespace, name, args, kwargs)``; sync or async.
#: A false result, or an exception (its message is the reason), denies the call.
Policy = Callable[[str, str, list[Any], dict[str, Any]], Any]


def _process_level() -> SandboxPlan:
    return SandboxPlan("process", {})


@dataclass(frozen=True)
class RunPlan:
    """How one run is made, fixed before it starts: its bindings and limits, the
    runtime (the language: how its child is started and its program prepared) and
    environment, the sandbox (level, rlimits, cgroup roots), where its
    child comes from (``pool``: warm, or None: a cold spawn), the policy and where
    synchronous bindings run. A ``Run`` reads it and never changes it.

    ``refused`` is why the run ends before a child is taken: the sandbox level a strict
    gateway cannot have (``"sandbox_unavailable"``), or a program its runtime refused as
    it prepared it (``"exception"``).

    >>> from kernelgate.gateway.runtime import PythonRuntime
    >>> registry = BindingRegistry.from_arguments({}, "tools", None)
    >>> plan = RunPlan(registry, Limits(), PythonRuntime())
    >>> plan.sandbox.level, plan.warm, plan.cgroup_roots, plan.runtime.name
    ('process', False, None, 'python')
    """

    registry: BindingRegistry
    limits: Limits
    runtime: CodeRuntime
    env: Mapping[str, str] = field(default_factory=dict)
    sandbox: SandboxPlan = field(default_factory=_process_level)
    base_dir: str | None = None
    refused: Verdict | None = None
    #: What the child is sent: the program as the runtime prepared it (None: as given).
    code: str | None = None
    policy: Policy | None = None
    pool: ChildPool | None = None
    #: Where synchronous bindings run (None: the loop's default executor).
    executor: Executor | None = None
    call_handler: CallHandler | None = None

    @property
    def warm(self) -> bool:
        """The run takes its child from a warm pool (a cold spawn if the pool has none)."""
        return self.pool is not None

    @property
    def cgroup_roots(self) -> CgroupRoots | None:
        """Where a cold child's run cgroup is made (None: no writable cgroup here)."""
        return self.sandbox.cgroups
