"""The type-stripping helper is signalled and reaped by pidfd, never by its pid number.

asyncio's child watcher reaps the helper in a thread and tells the loop later (never, once the
loop has ended): until then the transformer sees a helper that is still running while its pid
may already be another process's (``pid_max`` is 32,768 here: a busy gateway wraps it in
minutes; a warm TypeScript run was once killed "from outside" so). These tests hand the
helper's old pid to a stranger on purpose (as root, through ``ns_last_pid``) and then do what
would signal or reap it by number: the stranger must live through each.
"""

from __future__ import annotations

import asyncio
import gc
import os
import shutil
import signal
import subprocess
import time

import pytest

from kernelgate.gateway.jsprogram import ProgramTransformer
from tests.procs import assert_stranger_alive

NODE = shutil.which("node")
LAST_PID = "/proc/sys/kernel/ns_last_pid"

pytestmark = [
    pytest.mark.skipif(NODE is None, reason="node is not on PATH (the transform runs it)"),
    pytest.mark.skipif(
        os.geteuid() != 0 or not os.access(LAST_PID, os.W_OK),
        reason=f"handing a chosen pid to a process needs root ({LAST_PID})",
    ),
]


def _reaped(pid: int, deadline: float = 10.0) -> None:
    """Block (the loop too, on purpose: the watcher's word must not reach it) until the
    watcher thread has reaped ``pid``."""
    end = time.monotonic() + deadline
    while os.path.exists(f"/proc/{pid}"):
        assert time.monotonic() < end, f"the helper {pid} was not reaped in {deadline} s"
        time.sleep(0.001)


def _stranger_at(pid: int) -> subprocess.Popen[bytes]:
    """A ``sleep`` started with exactly ``pid`` (another process may take it first: retried)."""
    for _ in range(50):
        with open(LAST_PID, "w") as f:
            f.write(str(pid - 1))
        proc = subprocess.Popen(["sleep", "60"])
        if proc.pid == pid:
            return proc
        proc.kill()
        proc.wait()
    pytest.skip(f"pid {pid} was taken by other processes 50 times running")


def _started(loop: asyncio.AbstractEventLoop) -> tuple[ProgramTransformer, int]:
    transformer = ProgramTransformer(NODE or "node")
    assert loop.run_until_complete(transformer.transform("1 + 1", "javascript"))
    pid = transformer.pid
    assert pid is not None
    return transformer, pid


@pytest.mark.timeout(60)
def test_a_helper_reaped_in_a_running_loop_is_not_killed_by_pid(strangers):
    """The helper dies, the watcher reaps it, and before the loop hears of it the
    transformer is closed (its kill would have polled and signalled the pid)."""
    loop = asyncio.new_event_loop()
    try:
        transformer, pid = _started(loop)

        async def close_before_the_news() -> None:
            os.kill(pid, signal.SIGKILL)  # alive: ours to signal
            _reaped(pid)
            strangers.append(_stranger_at(pid))
            assert transformer.pid == pid  # the loop has not heard
            await transformer.aclose()

        loop.run_until_complete(close_before_the_news())
    finally:
        loop.close()
    assert_stranger_alive(strangers[0])


@pytest.mark.timeout(60)
# The loop is closed with the helper's pipes open (asyncio.run never does that): their
# transports are collected later, unclosed.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.parametrize("how", ["close_abandoned", "dropped"])
def test_a_helper_reaped_after_its_loop_ended_is_not_killed_by_pid(strangers, how):
    """The helper dies while its loop is not running, and the loop ends without hearing of
    it: the transformer still sees it running. Closing the abandoned transformer (what
    ``gw.close()`` does), or dropping it, must reach neither the stranger nor reap it."""
    loop = asyncio.new_event_loop()
    transformer, pid = _started(loop)
    os.kill(pid, signal.SIGKILL)
    _reaped(pid)
    # Its stderr task stays pending: the loop is closed as `asyncio.run` never would, so
    # the watcher's word is lost for good.
    loop.close()
    strangers.append(_stranger_at(pid))
    assert transformer.pid == pid
    if how == "close_abandoned":
        transformer.close_abandoned()
    else:
        del transformer
        gc.collect()
    assert_stranger_alive(strangers[0])
