"""The binding thread a gateway keeps parked between runs, and threads woken on the loop's
CPU (kernelgate/gateway/workers.py, issue 23): the kept thread serves the first call after
an idle spell; a closed, dropped or exiting gateway releases it at once; a thread woken on
one CPU runs its job on every CPU it had."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from kernelgate import Gateway
from kernelgate.gateway import workers as workers_module
from kernelgate.gateway.workers import workers_for

from .conftest import FAST

pytestmark = pytest.mark.timeout(60)

#: Each idle spell: several times the time a thread parks without being kept, and the time
#: after which a woken thread is put on the waker's CPU. The scenario, not a wait for a
#: condition: what the tests check is what a thread did once the spell is over.
SPELL_S = max(5 * workers_module.IDLE_S, 5 * workers_module.PIN_AFTER_S)


def _thread(ident: int) -> threading.Thread:
    return next(t for t in threading.enumerate() if t.ident == ident)


def _where() -> tuple[int, list[int]]:
    """A sync binding: the thread it runs in and the CPUs that thread may run on."""
    return threading.get_ident(), sorted(os.sched_getaffinity(0))


@pytest.fixture
def gateway(run_dir_base, no_fd_leak) -> Iterator[Gateway]:
    gw = Gateway(bindings={"where": _where}, limits=FAST, tmp_dir=run_dir_base)
    try:
        yield gw
    finally:
        gw.close()


def _where_of(gw: Gateway) -> tuple[int, frozenset[int]]:
    result = gw.run_sync("return await tools.where()")
    assert result.ok, result
    ident, cpus = result.value
    return ident, frozenset(cpus)


def test_the_first_call_after_an_idle_spell_finds_the_kept_thread(gateway) -> None:
    first, _ = _where_of(gateway)
    time.sleep(SPELL_S)
    workers = workers_for(gateway._binding_threads())
    assert len(workers._parked) == 1, "no thread was kept parked through the idle spell"
    assert _where_of(gateway)[0] == first


def test_a_job_woken_after_a_while_runs_on_every_cpu_its_thread_had(gateway) -> None:
    mine = frozenset(os.sched_getaffinity(0))
    if len(mine) < 2:
        pytest.skip("one CPU: a woken thread is never moved")
    _where_of(gateway)
    for _ in range(3):
        time.sleep(SPELL_S)  # parked long enough to be woken on the loop's CPU
        assert _where_of(gateway)[1] == mine


def test_a_closed_gateway_releases_its_kept_thread(run_dir_base, no_fd_leak) -> None:
    gw = Gateway(bindings={"where": _where}, limits=FAST, tmp_dir=run_dir_base)
    thread = _thread(_where_of(gw)[0])
    gw.close()  # kept for KEEP_S (30 s) otherwise
    thread.join(10)
    assert not thread.is_alive(), "the binding thread outlived its closed gateway"


def test_a_dropped_gateway_releases_its_kept_thread(run_dir_base, no_fd_leak) -> None:
    gc.collect()
    gc.disable()  # reference counting alone: the docstrings' one-liners drop gateways so
    try:
        threads: list[threading.Thread] = []

        def where() -> None:
            threads.append(threading.current_thread())

        Gateway(bindings={"where": where}, limits=FAST, tmp_dir=run_dir_base).run_sync(
            "return await tools.where()"
        )
        # Released as the gateway went (the end of that line): it may be gone already.
        threads[0].join(10)
        assert not threads[0].is_alive(), "the binding thread outlived its dropped gateway"
    finally:
        gc.enable()


def test_workers_keep_only_the_last_parked_thread() -> None:
    started = threading.Barrier(3, timeout=10)
    with ThreadPoolExecutor(3, thread_name_prefix="kernelgate-test-keep") as ex:
        workers = workers_for(ex)
        workers.keep_one()
        for _ in range(3):
            workers.submit(started.wait)  # three threads at once
        time.sleep(SPELL_S)
        assert len(workers._parked) == 1
        workers.close()
        assert workers._parked == []


def test_the_interpreter_exits_at_once_with_a_gateway_left_open(tmp_path) -> None:
    script = textwrap.dedent(
        """
        import asyncio
        import sys
        from kernelgate import Gateway, Limits
        from kernelgate.gateway import workers

        workers.KEEP_S = 3600.0  # a release missed at exit would hang the exit for an hour

        def add(a, b):
            return a + b

        async def main():
            gw = Gateway(bindings={"add": add}, limits=Limits(wall_seconds=20),
                         tmp_dir=sys.argv[1])
            result = await gw.run("return await tools.add(1, 2)")
            print(result.value, flush=True)
            return gw  # never closed

        kept = asyncio.run(main())
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True, timeout=45
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "3"
