"""A hermetic kernelspec for the kernel tests, and a kernel shared by a module's tests.

The kernelspec is installed into a temporary prefix (``kernelgate kernel install --prefix``)
whose ``share/jupyter`` is put first on ``JUPYTER_PATH`` while these tests run, under the
name ``kernelgate``: nothing installed by hand is used, and a kernelspec of that name the
machine may have is shadowed. The environment is restored after this package's tests.

The browser tests (``test_browser.py``, ``test_workbench_browser.py``) drive a real
JupyterLab through Playwright with the system's Chromium (Debian's ``chromium`` and
``fonts-liberation``; Playwright's own browser download is never used): both carry
:data:`NEEDS_CHROMIUM`, so where it is not installed they are skipped, saying what to install.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator

import pytest
from jupyter_client.blocking.client import BlockingKernelClient
from jupyter_client.manager import KernelManager, start_new_kernel

from kernelgate.cli import main as kernelgate_main

from .helpers import KERNEL_NAME, MESSAGE_KERNEL_NAME, forget_kept


def _node_found() -> bool:
    from kernelgate.gateway.launch import NodeUnavailable, probe_node

    try:
        probe_node("node")
    except NodeUnavailable:
        return False
    return True


#: Whether a Node >= 18 is here (the TypeScript kernel's tests need it).
NODE_FOUND = _node_found()
#: The mark of every TypeScript kernel test: skipped, saying why, where Node is missing.
NEEDS_NODE = pytest.mark.skipif(
    not NODE_FOUND,
    reason="node (>= 18) is not installed: the TypeScript kernel runs its cells on Node "
    "(apt-get install nodejs; .ci/run does it)",
)

_ENV = ("JUPYTER_PATH", "JUPYTER_RUNTIME_DIR")

#: The system's Chromium, which the browser tests drive (None: not installed).
CHROMIUM = shutil.which("chromium")
#: The mark of every browser test: skipped where Chromium is not installed.
NEEDS_CHROMIUM = pytest.mark.skipif(
    CHROMIUM is None,
    reason="Chromium is not installed: the browser tests drive the system's chromium through "
    "Playwright (apt-get install chromium fonts-liberation; .ci/run does it as root)",
)


@pytest.fixture(scope="package", autouse=True)
def kernelspec(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Install the test kernelspecs; yield the JUPYTER_PATH entry holding them."""
    root = tmp_path_factory.mktemp("jupyter")
    prefix = root / "prefix"
    for name, mode in ((KERNEL_NAME, "signal"), (MESSAGE_KERNEL_NAME, "message")):
        code = kernelgate_main(
            [
                "kernel",
                "install",
                "--prefix",
                str(prefix),
                "--name",
                name,
                "--bindings",
                "kernelgate.demo:BINDINGS",
                "--interrupt-mode",
                mode,
            ]
        )
        assert code == 0
    if NODE_FOUND:
        # The TypeScript kernel (--language typescript): the same demo bindings.
        code = kernelgate_main(
            [
                "kernel",
                "install",
                "--prefix",
                str(prefix),
                "--language",
                "typescript",
                "--bindings",
                "kernelgate.demo:BINDINGS",
            ]
        )
        assert code == 0
    saved = {key: os.environ.get(key) for key in _ENV}
    data_dir = str(prefix / "share" / "jupyter")
    runtime = root / "runtime"
    runtime.mkdir()
    os.environ["JUPYTER_PATH"] = os.pathsep.join([data_dir, *filter(None, [saved["JUPYTER_PATH"]])])
    os.environ["JUPYTER_RUNTIME_DIR"] = str(runtime)
    try:
        yield data_dir
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@pytest.fixture(scope="module")
def kernel() -> Iterator[tuple[KernelManager, BlockingKernelClient]]:
    """One kernelgate kernel (signal interrupts) shared by a module's tests."""
    km, kc = start_new_kernel(kernel_name=KERNEL_NAME, startup_timeout=30)
    try:
        yield km, kc
    finally:
        kc.stop_channels()
        km.shutdown_kernel()


@pytest.fixture
def kc(kernel: tuple[KernelManager, BlockingKernelClient]) -> BlockingKernelClient:
    client = kernel[1]
    drain(client)
    return client


def drain(kc: BlockingKernelClient) -> None:
    """Drop messages left over from an earlier test (none are expected)."""
    forget_kept(kc)
    for get in (kc.get_shell_msg, kc.get_iopub_msg, kc.get_control_msg):
        while True:
            try:
                get(timeout=0.05)
            except Exception:
                break
