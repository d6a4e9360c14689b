"""A forwarded debug request is answered by a task of its own; cancelled (the kernel
shutting down) before that task's first step, its coroutine never runs, nor the reply it
keeps for that case: the front end still gets one (JupyterLab waits for every reply)."""

from __future__ import annotations

import pytest
from jupyter_client.blocking.client import BlockingKernelClient

from kernelgate.jupyter.server import KernelServer

from .test_debugger import debug_reply, send_debug, start
from .test_debugger_runs import in_process_kernel, wait_started

pytestmark = pytest.mark.timeout(120)


def test_a_debug_request_whose_task_is_cancelled_before_it_runs_is_answered(tmp_path):
    def body(kc: BlockingKernelClient, server: KernelServer) -> None:
        real = server._debug_request

        def cancelled_at_once(msg, idents):
            before = set(server._debug_tasks)
            real(msg, idents)
            # In the turn the task was made (as a shutdown there would): it never starts.
            for task in server._debug_tasks - before:
                task.cancel()

        server._debug_request = cancelled_at_once  # type: ignore[method-assign]
        start(kc)
        msg_id = kc.execute("import time\nprint('running', flush=True)\ntime.sleep(60)")
        wait_started(kc, msg_id)
        reply = debug_reply(kc, send_debug(kc, "pause", {"threadId": 1}), timeout=10)
        assert reply["success"] is False
        assert "shutting down" in reply["message"]

    in_process_kernel(tmp_path, body, level="process", pool_size=0)
