"""A gateway reuses the last run's plan while nothing it was made from changed: limits
given per run, and settings assigned between runs, still apply to the next run."""

from __future__ import annotations

import asyncio

from kernelgate import Limits

from .conftest import BINDINGS, FAST, warmed_up

_CALL = "try:\n    return await tools.add(1, 2)\nexcept ToolError as exc:\n    return exc.ename"


def _deny(namespace, name, args, kwargs):
    return False


def test_a_policy_assigned_between_runs_applies_to_the_next(make_gateway):
    gw = make_gateway(bindings=BINDINGS, limits=FAST)
    assert gw.run_sync(_CALL).value == 3
    gw.policy = _deny
    assert gw.run_sync(_CALL).value == "PolicyDenied"
    gw.policy = None
    assert gw.run_sync(_CALL).value == 3


def test_limits_of_each_run_apply_warm(make_gateway):
    """Runs alternating between limits on one loop, with the pool warm: each run has its
    own (its wall clock here), whichever ran before it."""
    gw = make_gateway(limits=FAST)
    short = Limits(wall_seconds=1, kill_grace_seconds=0.2)
    program = "import time\ntime.sleep(3)\nreturn 1"

    async def main():
        await warmed_up(gw)
        results = []
        for limits in (None, short, None, short):
            if limits is None:
                results.append(await gw.run("return 2"))
            else:
                results.append(await gw.run(program, limits=limits))
        return results

    results = asyncio.run(main())
    assert [r.status for r in results] == ["ok", "timeout", "ok", "timeout"]
    assert all("wall_seconds=1" in r.error.evalue for r in results[1::2])


def test_an_env_assigned_between_cold_runs_applies_to_the_next(make_gateway):
    """(A warm pool's children keep the environment the pool was made with.)"""
    gw = make_gateway(limits=FAST, pool_size=0)
    assert gw.run_sync("import os\nreturn os.environ.get('KG_X')").value is None
    gw.env = {**gw.env, "KG_X": "1"}
    assert gw.run_sync("import os\nreturn os.environ.get('KG_X')").value == "1"
