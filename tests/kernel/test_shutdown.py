"""Shutting the kernel down leaves no process behind: not the kernel, not a cell's child."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from typing import Any

from jupyter_client.manager import start_new_kernel

from tests.procs import descendants, pid_alive

from .helpers import MESSAGE_KERNEL_NAME, collect, execute, send_execute, wait_gone

BUSY = "print('started')\nwhile True:\n    pass\n"


def _kernel_pid(km: Any) -> int:
    pid = km.provisioner.pid
    assert isinstance(pid, int) and pid_alive(pid)
    return pid


def _wait_started(kc: Any, msg_id: str) -> None:
    """Wait (bounded) until the cell has printed 'started': its child is running."""
    while True:
        msg = kc.get_iopub_msg(timeout=30)
        if (
            msg["parent_header"].get("msg_id") == msg_id
            and msg["msg_type"] == "stream"
            and msg["content"]["text"] == "started\n"
        ):
            return


def test_shutdown_leaves_no_process_behind() -> None:
    # interrupt_mode "message": KernelManager.interrupt_kernel() sends interrupt_request
    km, kc = start_new_kernel(kernel_name=MESSAGE_KERNEL_NAME, startup_timeout=30)
    try:
        kernel_pid = _kernel_pid(km)
        interrupted: list[bool] = []

        def on_iopub(msg: dict[str, Any], cell: Any) -> None:
            if cell.stdout() == "started\n" and not interrupted:
                interrupted.append(True)
                km.interrupt_kernel()

        cell = execute(kc, BUSY, on_iopub=on_iopub)
        assert cell.run_status == "interrupted"

        # Shut down while a cell's child is busy.
        msg_id = send_execute(kc, BUSY)
        _wait_started(kc, msg_id)
        children = descendants(kernel_pid)
        assert children, "the running cell has a child process"
    finally:
        kc.stop_channels()
        km.shutdown_kernel()
    assert not km.is_alive()
    assert wait_gone({kernel_pid, *children}) == set()


def test_shutdown_request_alone_stops_the_running_cell() -> None:
    """A bare shutdown_request (no interrupt first) still ends the cell and its child."""
    km, kc = start_new_kernel(kernel_name=MESSAGE_KERNEL_NAME, startup_timeout=30)
    try:
        kernel_pid = _kernel_pid(km)
        msg_id = send_execute(kc, BUSY)
        _wait_started(kc, msg_id)
        children = descendants(kernel_pid)
        assert children
        kc.shutdown()  # shutdown_request on control
        reply = kc.get_control_msg(timeout=10)
        assert reply["msg_type"] == "shutdown_reply"
        assert reply["content"] == {"status": "ok", "restart": False}
        # The running cell is answered (interrupted) before the kernel exits.
        cell = collect(kc, msg_id)
        assert cell.run_status == "interrupted"
        assert wait_gone({kernel_pid, *children}) == set()
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def test_sigterm_shuts_down_cleanly() -> None:
    km, kc = start_new_kernel(kernel_name=MESSAGE_KERNEL_NAME, startup_timeout=30)
    try:
        kernel_pid = _kernel_pid(km)
        msg_id = send_execute(kc, BUSY)
        _wait_started(kc, msg_id)
        children = descendants(kernel_pid)
        km.signal_kernel(signal.SIGTERM)
        assert wait_gone({kernel_pid, *children}) == set()
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


LAUNCHER = """
import sys
from jupyter_client.manager import start_new_kernel

km, kc = start_new_kernel(kernel_name=sys.argv[1], startup_timeout=30)
msg_id = kc.execute("print('started')\\nwhile True:\\n    pass\\n")
while True:
    msg = kc.get_iopub_msg(timeout=30)
    if msg["parent_header"].get("msg_id") == msg_id and msg["msg_type"] == "stream":
        break
print(km.provisioner.pid, flush=True)
sys.stdin.read()  # until the test kills this process
"""


def test_the_kernel_exits_when_its_launcher_dies(tmp_path) -> None:
    """Like ipykernel's parent poller: no orphaned kernel (or cell child) is left running."""
    # The killed launcher never removes its connection file (a bare KernelManager writes
    # it with mkstemp): it goes to the test's directory, not $TMPDIR.
    launcher = subprocess.Popen(
        [sys.executable, "-c", LAUNCHER, MESSAGE_KERNEL_NAME],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "TMPDIR": str(tmp_path)},
    )
    try:
        assert launcher.stdout is not None
        kernel_pid = int(launcher.stdout.readline())
        children = descendants(kernel_pid)
        assert children, "the busy cell has a child process"
    finally:
        launcher.kill()
        launcher.wait(timeout=10)
    assert wait_gone({kernel_pid, *children}) == set()
    # The kernel shut down on its own: it removed its run directories (its TMPDIR is ours).
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("kernelgate-")] == []
