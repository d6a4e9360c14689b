"""A real Jupyter Kernel Gateway on loopback for the tests, serving the test kernelspecs.

Started as ``python -m kernel_gateway`` (the ``jupyter-kernel-gateway`` package) on
127.0.0.1 with the environment of the tests (the package conftest's ``JUPYTER_PATH`` holds
the kernelgate kernelspec), and stopped with everything it started.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .helpers import KERNEL_NAME


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get_json(url: str, token: str | None = None) -> Any:
    """GET ``url`` (with the gateway's token, if any); its JSON."""
    request = urllib.request.Request(url)
    if token:
        request.add_header("Authorization", f"token {token}")
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


@dataclass
class KernelGatewayServer:
    url: str
    proc: subprocess.Popen[bytes]
    log: Path
    token: str | None = None

    def kernels(self) -> list[dict[str, Any]]:
        """The kernels the gateway has (``GET /api/kernels``)."""
        found: list[dict[str, Any]] = get_json(f"{self.url}/api/kernels", self.token)
        return found

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@contextlib.contextmanager
def kernel_gateway(
    log_dir: Path, token: str | None = None, kernel_name: str = KERNEL_NAME
) -> Iterator[KernelGatewayServer]:
    """A Kernel Gateway on 127.0.0.1 (``token``: the one it requires; ``kernel_name``: its
    default kernel, which must be installed) until the block ends."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = log_dir / "gateway.log"
    env = dict(os.environ)
    env.pop("KG_AUTH_TOKEN", None)
    argv = [
        sys.executable,
        "-m",
        "kernel_gateway",
        "--KernelGatewayApp.ip=127.0.0.1",
        f"--KernelGatewayApp.port={port}",
        f"--KernelGatewayApp.default_kernel_name={kernel_name}",
        "--JupyterWebsocketPersonality.list_kernels=True",  # to check none is left
    ]
    if token:
        env["KG_AUTH_TOKEN"] = token  # not on the command line, where ps shows it
    with open(log, "wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env)
    server = KernelGatewayServer(url, proc, log, token)
    try:
        deadline = time.monotonic() + 60
        while True:  # until it answers (it logs when it listens; polling is simpler)
            try:
                specs = get_json(f"{url}/api/kernelspecs", token)
                break
            except (urllib.error.URLError, ConnectionError) as exc:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the gateway did not start: {log.read_text()}") from exc
                time.sleep(0.1)
        assert kernel_name in specs["kernelspecs"], specs
        yield server
    finally:
        server.stop()
