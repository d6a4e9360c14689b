"""The bindings' comm_open sent to a parked child ahead of its run (gateway/preopen.py)."""

from __future__ import annotations

import asyncio

import pytest

from kernelgate import Limits
from kernelgate.gateway import preopen
from kernelgate.gateway.bindings import BindingRegistry
from kernelgate.gateway.teardown import discard
from tests.procs import pid_alive

from .conftest import filled, warmed_up

pytestmark = pytest.mark.timeout(120)


def echo(x):
    return x


def test_a_parked_child_has_its_bindings_before_its_program(make_gateway):
    """Children that park after a run are sent its bindings; a warm run then works on the
    wire the pool opened, and its bytes_out counts the comm_open sent ahead."""
    gw = make_gateway(pool_size=2, bindings={"echo": echo})

    async def main():
        await warmed_up(gw)
        cold = await gw.run("return await tools.echo([1, 'a'])")
        await filled(gw)
        ahead = [child.preopened for child in gw._pool._ready]
        warm = await gw.run("return await tools.echo([1, 'a'])")
        return cold, ahead, warm

    cold, ahead, warm = asyncio.run(main())
    assert ahead and all(pre is not None and pre.sent > 0 for pre in ahead)
    assert warm.ok and warm.usage["warm"] and warm.value == [1, "a"]
    # The same frames but for ids and dates: the comm_open sent ahead is counted.
    assert abs(warm.usage["bytes_out"] - cold.usage["bytes_out"]) < 100


def test_a_run_with_its_own_frame_limit_takes_a_preopened_child(make_gateway):
    gw = make_gateway(pool_size=2, bindings={"echo": echo})
    big = Limits(max_value_bytes=16 << 20)

    async def main():
        await warmed_up(gw)
        await gw.run("return 1")
        await filled(gw)
        assert all(child.preopened is not None for child in gw._pool._ready)
        return await gw.run("return len(await tools.echo('x' * (10 << 20)))", limits=big)

    result = asyncio.run(main())
    assert result.ok, result.message
    assert result.usage["warm"] and result.value == 10 << 20


def test_a_child_sent_other_bindings_serves_no_run_of_these(make_gateway):
    """A pool whose runs come with another registry (a child sent one registry's bindings
    cannot take another's): those children are discarded, never handed to the run, and
    the pool sends nothing ahead from then on."""
    gw = make_gateway(pool_size=2, bindings={"echo": echo})
    other = BindingRegistry.from_arguments({"other": echo}, "tools", None)

    async def main():
        await warmed_up(gw)
        await gw.run("return 1")
        await filled(gw)
        pool = gw._pool
        sent = list(pool._ready)
        assert sent and all(child.preopened is not None for child in sent)
        child, ahead = await preopen.acquire(pool, other, Limits())
        if child is not None:
            assert child.preopened is None and ahead == 0 and child not in sent
            await discard(child)
        await filled(gw)
        later = [child.preopened for child in pool._ready]
        after = await gw.run("return await tools.echo(2)")
        await gw.wait_finished()
        return sent, later, after

    sent, later, after = asyncio.run(main())
    assert all(pre is None for pre in later)
    assert after.ok and after.value == 2
    assert not any(pid_alive(child.pid) for child in sent)
