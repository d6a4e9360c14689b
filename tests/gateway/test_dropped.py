"""A gateway dropped without ``close()`` ends its processes when its last reference goes.

``Gateway(bindings=...).run_sync("...")`` (the docstrings' examples do it) keeps no
reference: the gateway, its warm pool and the pool's zygote must go at once, by reference
counting, not at the next garbage collection. A program that makes gateways in a loop
without closing them would otherwise gather zygotes and pooled children until the cyclic
collector happens to run. Collection is off during each test, so that only reference
counting can end them.
"""

from __future__ import annotations

import asyncio
import gc
import os
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from kernelgate import Gateway
from tests.procs import live_children

from .conftest import BINDINGS, FAST


@pytest.fixture
def no_collection(run_dir_base, no_fd_leak) -> Iterator[str]:
    """The cyclic garbage collector off for the test (the run directories' base given)."""
    gc.collect()  # what earlier tests left is not this test's
    gc.disable()
    try:
        yield run_dir_base
    finally:
        gc.enable()


def _new_children(before: set[int], wait: float = 15.0) -> set[int]:
    """This process's children not in ``before``, once none is left or after ``wait``
    seconds: the pool's close waits for its zygote's exit, so they go at once."""
    deadline = time.monotonic() + wait
    while True:
        new = set(live_children(os.getpid())) - before
        if not new or time.monotonic() > deadline:
            return new
        time.sleep(0.01)  # polls for the condition, bounded


def _make(base: str, **kwargs: Any) -> Gateway:
    return Gateway(bindings=BINDINGS, limits=FAST, tmp_dir=base, **kwargs)


def _run_sync(base: str, **kwargs: Any) -> tuple[Gateway, Any]:
    gw = _make(base, **kwargs)
    return gw, gw.run_sync("return await tools.add(1, 2)").value


def _run_async(base: str, **kwargs: Any) -> tuple[Gateway, Any]:
    gw = _make(base, **kwargs)

    async def main() -> Any:
        return (await gw.run("return await tools.add(1, 2)")).value

    return gw, asyncio.run(main())


Use = Callable[..., tuple[Gateway, Any]]


@pytest.mark.parametrize(
    ("use", "options", "pooled"),
    [
        (_run_sync, {}, True),
        (_run_sync, {"pool_size": 0}, False),
        (_run_sync, {"tool_search": True}, True),
        (_run_async, {}, True),
    ],
    ids=["run_sync", "pool_size=0", "tool_search", "asyncio.run"],
)
def test_a_dropped_gateway_leaves_no_process(no_collection, use: Use, options, pooled):
    before = set(live_children(os.getpid()))
    gw, value = use(no_collection, **options)
    assert value == 3
    if pooled:  # the zygote (and the children it forked) run until the gateway goes
        assert set(live_children(os.getpid())) - before, "the pool has no zygote to end"
    del gw
    assert _new_children(before) == set(), "the dropped gateway's processes are alive"


def test_an_unnamed_gateway_leaves_no_process(no_collection):
    """The docstrings' one-liner: the gateway is never named at all."""
    before = set(live_children(os.getpid()))
    result = Gateway(bindings=BINDINGS, limits=FAST, tmp_dir=no_collection).run_sync(
        "return await tools.add(2, 3)"
    )
    assert result.value == 5
    assert _new_children(before) == set()


def test_gateways_made_in_a_loop_do_not_pile_up(no_collection):
    before = set(live_children(os.getpid()))
    for i in range(3):
        gw = _make(no_collection, pool_size=1)
        assert gw.run_sync(f"return {i}").value == i
    del gw
    assert _new_children(before) == set()


def test_a_closed_gateway_dropped_after_is_fine(no_collection):
    """close() takes the pool away from the finalizer: dropping it then closes nothing
    twice, and a second close() is harmless."""
    before = set(live_children(os.getpid()))
    gw = _make(no_collection)
    assert gw.run_sync("return 1").value == 1
    gw.close()
    assert _new_children(before) == set()
    gw.close()
    del gw
    assert _new_children(before) == set()


def test_a_finished_run_is_freed_by_reference_counting(no_collection):
    """A run's objects (the run, its channel, its calls, its teardown) hold each other
    only while it runs: once it has returned and its teardown is over, reference counting
    frees them all, not the cyclic collector."""

    async def runs() -> list[str]:
        async with _make(no_collection) as gw:
            await gw.run("pass")  # the gateway's own objects: made before the count
            await gw.wait_finished()
            gc.collect()
            gc.set_debug(gc.DEBUG_SAVEALL)
            try:
                for program in (
                    "return await tools.add(1, 2)",
                    "print('hi')\nreturn await tools.search('x', limit=1)",
                    "1 / 0",
                ):
                    await gw.run(program)
                    await gw.wait_finished()
                gc.collect()
                return sorted(
                    {
                        type(o).__qualname__
                        for o in gc.garbage
                        if type(o).__module__.startswith("kernelgate")
                    }
                )
            finally:
                gc.set_debug(0)
                gc.garbage.clear()

    assert asyncio.run(runs()) == []
