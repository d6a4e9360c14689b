"""Attacks on the processes of a warm run (issue 23, CPU per run): a root host's warm child
is now born by the zygote in new mount, network, pid and IPC namespaces as real root, and
makes the run's user namespace itself once its view is arranged, so no process of the run
stays outside them. What that structure must keep: every namespace of its own, and a run
that dies with the processes above it.
"""

from __future__ import annotations

import asyncio
import errno
import json
import os
import signal
import subprocess
import sys
from typing import Any

import pytest

from kernelgate import Limits
from kernelgate.gateway import runids
from tests.procs import descendants, survivors_of_a_dead_host

from .conftest import ALL_LEVELS, FORK_UNTIL_REFUSED, NS_LEVELS

BOTH = pytest.mark.parametrize("warm", [True, False], ids=["warm", "cold"])
_NAMESPACES = ("user", "mnt", "net", "pid", "ipc")

_LINKS = f"""
import os
links = {{name: os.readlink(f'/proc/self/ns/{{name}}') for name in {_NAMESPACES!r}}}
await tools.meet()
return links
"""


@NS_LEVELS
@BOTH
def test_concurrent_runs_share_no_namespace_with_each_other_or_the_host(hostile, level, warm):
    # Both programs read their namespaces while both are alive (a binding holds each until
    # the other arrived): a namespace's number is not reused while it lives.
    arrived: list[None] = []
    both = asyncio.Event()

    async def meet() -> bool:
        arrived.append(None)
        if len(arrived) == 2:
            both.set()
        await asyncio.wait_for(both.wait(), 20)
        return True

    gw = hostile.gateway(
        sandbox=level, strict=True, pool_size=2 if warm else 0, bindings={"meet": meet}
    )

    async def main() -> list[Any]:
        if warm:
            assert (await gw.run("'warm-up'")).ok
            filler = getattr(getattr(gw, "_pool", None), "_filler", None)
            if filler is not None:
                await asyncio.shield(filler)
        try:
            return list(await asyncio.gather(gw.run(_LINKS), gw.run(_LINKS)))
        finally:
            await gw.runtime.end_loop()

    a, b = asyncio.run(main())
    for r in (a, b):
        hostile.record(r)
        assert r.status == "ok", r.message
        assert r.usage.get("warm") is warm
    host = {name: os.readlink(f"/proc/self/ns/{name}") for name in _NAMESPACES}
    for name in _NAMESPACES:
        assert len({host[name], a.value[name], b.value[name]}) == 3, (name, host, a.value, b.value)


# A host of its own, killed with its zygote: nothing above the run is left to end it but
# the kernel's parent-death signals (no pids cgroup: no sweep ends it either).
_WARM_HOST = """
import asyncio, dataclasses, json, os, sys
from kernelgate import Gateway, Limits
from kernelgate.gateway import sandbox

for python in {sys.executable, os.path.realpath(sys.executable)}:
    support = sandbox.probe_support(python)
    sandbox._cache[python] = dataclasses.replace(support, cgroups=None)

async def main() -> None:
    gw = Gateway(pool_size=2, tmp_dir=sys.argv[1], sandbox=sys.argv[2], strict=True,
                 limits=Limits(wall_seconds=60))
    assert (await gw.run("'warm-up'")).ok
    await asyncio.shield(gw._pool._filler)
    started = asyncio.get_running_loop().create_future()

    def on_output(out: dict) -> None:
        if not started.done():
            started.set_result(None)

    busy = asyncio.ensure_future(gw.run(
        # Holding the GIL: the child's own watch on fd 3 cannot run, only the kernel's
        # parent-death signal ends it.
        "import ctypes\\nprint('started', flush=True)\\nctypes.PyDLL(None).sleep(40)",
        on_output=on_output,
    ))
    await started
    print(json.dumps({"pid": os.getpid(), "zygote": gw._pool._zygote.pid}), flush=True)
    await busy

asyncio.run(main())
"""


@ALL_LEVELS
def test_a_warm_run_and_the_idle_children_die_with_their_zygote_and_host(tmp_path, level):
    # A root host's warm child changes its ids after it is born (its user namespace, or the
    # run's uid at process level), which makes the kernel forget its parent-death signal:
    # it must be set again, or the run outlives a zygote and host killed with SIGKILL.
    root = os.path.dirname(os.path.dirname(os.path.abspath(runids.__file__)))
    env = {**os.environ, "PYTHONPATH": os.path.dirname(root)}
    host = subprocess.Popen(
        [sys.executable, "-c", _WARM_HOST, str(tmp_path), level],
        stdout=subprocess.PIPE,
        env=env,
        text=True,
    )
    below: list[int] = []
    try:
        assert host.stdout is not None
        line = host.stdout.readline()
        assert line, "the host did not start"
        seen = json.loads(line)
        below = sorted(descendants(seen["zygote"]))
        assert len(below) >= 2, f"no running and idle children below the zygote: {below}"
        os.kill(seen["zygote"], signal.SIGKILL)  # first: it would clean up after its host
        os.kill(seen["pid"], signal.SIGKILL)
        assert host.wait(timeout=10) == -signal.SIGKILL
    finally:
        if host.poll() is None:
            host.kill()
            host.wait(timeout=10)
    alive = survivors_of_a_dead_host(below, tmp_path)  # the program would sleep 40 s
    assert alive == [], "the warm run or an idle child outlived its zygote and host"


@NS_LEVELS
@BOTH
def test_a_run_at_a_namespace_level_has_exactly_max_processes(hostile, level, warm):
    # The sandbox's own processes (the init, and a cold child's mirror) are allowed on top
    # of max_processes, and no more: a warm child born in its namespaces has no mirror, so
    # an allowance for one would be a process more for the program.
    limits = Limits(wall_seconds=20, kill_grace_seconds=0.3, cpu_seconds=10, max_processes=4)
    r = hostile.run(FORK_UNTIL_REFUSED, limits, warm=warm, sandbox=level, strict=True)
    assert r.status == "ok", r.message
    assert r.value == [3, errno.EAGAIN], r.value  # the program and 3 children: 4
