"""Teardown never blocks the event loop: every ending of a run and of a pool is awaited.

A guard records any wait made on a running event loop's thread (``time.sleep``, a
``select`` with a timeout, a ``waitpid`` without ``WNOHANG``), and any removal of a tree a
program left (``remove_tree`` or ``shutil.rmtree`` of a directory that is not empty: a
program may leave any number of files, any number of levels deep): the loop serves every
run of the host, so none of them may happen there, however a run or its pool ends.
"""

from __future__ import annotations

import asyncio
import os
import select
import shutil
import signal
import time
from collections.abc import Iterator
from typing import Any

import pytest

from kernelgate import Gateway, Limits
from kernelgate.model import removal
from tests.procs import marker_for, processes_with

from .conftest import BINDINGS, FAST, filled, sleeper
from .test_lifecycle import replies_then_hangs


def _on_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


@pytest.fixture
def waits_on_loop(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The blocking waits made on an event loop's thread while the test runs."""
    seen: list[str] = []
    real_sleep, real_select, real_waitpid = time.sleep, select.select, os.waitpid
    real_rmtree, real_remove_tree = shutil.rmtree, removal.remove_tree

    def sleep(seconds: float) -> None:
        if _on_loop():
            seen.append(f"time.sleep({seconds})")
        real_sleep(seconds)

    def select_(r: Any, w: Any, x: Any, timeout: float | None = None) -> Any:
        if _on_loop() and (timeout is None or timeout > 0):
            seen.append(f"select.select(timeout={timeout})")
        return real_select(r, w, x, timeout)

    def waitpid(pid: int, options: int) -> tuple[int, int]:
        if _on_loop() and not options & os.WNOHANG:
            seen.append(f"os.waitpid({pid}, {options})")
        return real_waitpid(pid, options)

    def rmtree(path: str, *args: Any, **kwargs: Any) -> None:
        if _on_loop() and os.path.isdir(path) and os.listdir(path):
            seen.append(f"shutil.rmtree({path!r}) of a tree")
        real_rmtree(path, *args, **kwargs)

    def remove_tree(path: str, *args: Any, **kwargs: Any) -> str:
        if _on_loop() and os.path.isdir(path) and os.listdir(path):
            seen.append(f"remove_tree({path!r}) of a tree")
        return real_remove_tree(path, *args, **kwargs)

    monkeypatch.setattr(shutil, "rmtree", rmtree)
    monkeypatch.setattr(removal, "remove_tree", remove_tree)
    monkeypatch.setattr(time, "sleep", sleep)
    monkeypatch.setattr(select, "select", select_)
    monkeypatch.setattr(os, "waitpid", waitpid)
    yield seen


async def killed(pid: int) -> None:
    """SIGKILL ``pid`` and wait until it has exited (its pidfd is readable)."""
    loop = asyncio.get_running_loop()
    gone: asyncio.Future[None] = loop.create_future()
    pidfd = os.pidfd_open(pid)
    try:
        loop.add_reader(pidfd, lambda: gone.done() or gone.set_result(None))
        os.kill(pid, signal.SIGKILL)
        await gone
    finally:
        loop.remove_reader(pidfd)
        os.close(pidfd)


def test_no_ending_of_a_run_or_its_pool_waits_on_the_loop(
    make_gateway: Any, waits_on_loop: list[str], request: pytest.FixtureRequest
) -> None:
    marker = marker_for(request.node.name)
    gw: Gateway = make_gateway(bindings=BINDINGS, limits=FAST, pool_size=2)

    async def main() -> list[str]:
        statuses = [(await gw.run("print(1)")).status]
        await filled(gw)
        # A tree left in the run directory, by a run that replies, and by one that does
        # not (the directory is then removed before run() returns).
        files = "import os\nos.makedirs('d/e')\nfor i in range(300):\n    open(f'd/e/{i}', 'w')\n"
        statuses.append((await gw.run(files)).status)
        statuses.append((await gw.run(files + "os._exit(3)")).status)
        statuses.append((await gw.run(replies_then_hangs(marker))).status)  # returns early
        statuses.append(
            (await gw.run("import os, time\nos.write(3, b'junk\\n')\ntime.sleep(30)")).status
        )
        statuses.append(
            (await gw.run("import time\ntime.sleep(30)", limits=Limits(wall_seconds=0.3))).status
        )
        started: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        live = asyncio.ensure_future(
            gw.run(
                "print('up', flush=True)\nimport time\ntime.sleep(30)",
                on_output=lambda o: started.done() or started.set_result(None),
            )
        )
        await started
        live.cancel()
        with pytest.raises(asyncio.CancelledError):
            await live
        await filled(gw)
        # A dead zygote: its idle children (some perhaps still booting, holding its socket
        # open) are discarded, a new one is started.
        assert gw._pool is not None and gw._pool._zygote is not None
        await killed(gw._pool._zygote.pid)
        statuses.append((await gw.run("print(2)")).status)
        await gw.aclose()
        return statuses

    statuses = asyncio.run(main())
    assert statuses == ["ok", "ok", "worker_exit", "ok", "protocol", "timeout", "ok"]
    assert waits_on_loop == []
    assert processes_with(marker) == []


def test_the_loop_ending_first_does_not_wait_on_it_either(
    make_gateway: Any, waits_on_loop: list[str], request: pytest.FixtureRequest
) -> None:
    """asyncio.run() ending right after run() returns: the teardown, cancelled with the
    loop, kills the child and awaits its end while the loop finishes its tasks."""
    marker = marker_for(request.node.name)
    gw: Gateway = make_gateway(bindings=BINDINGS, limits=FAST)
    program = f"import subprocess, sys\n{sleeper(marker)}\n" + replies_then_hangs()
    r = asyncio.run(gw.run(program))
    assert r.ok, r.message
    assert waits_on_loop == []
    assert processes_with(marker) == []
    gw.close()
    assert os.listdir(gw.tmp_dir) == []
