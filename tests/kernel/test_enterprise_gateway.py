"""GatewayRuntime against a real Jupyter Enterprise Gateway on loopback (local process proxy).

Enterprise Gateway 3.3 pins ``jupyter_client<7``, which would break this environment's
Jupyter stack: it lives in a venv of its own, named by ``KERNELGATE_ENTERPRISE_GATEWAY``
(the path of its ``jupyter-enterprisegateway``; ``.ci/run`` makes one when it can). The
kernelspec is ``deploy/enterprise-gateway/kernels/kernelgate-local`` with its ``argv``
pointed at this interpreter: Enterprise Gateway starts kernelgate's kernel from
kernelgate's venv through its ``LocalProcessProxy``. And ``kernelgate-distributed``: its
``DistributedProcessProxy`` to 127.0.0.1 runs kernelgate's launcher
(:mod:`kernelgate.jupyter.eglauncher`), which speaks the launcher protocol every remote
proxy (Kubernetes, Docker, YARN, SSH hosts) uses: the encrypted connection info sent to
the gateway's response address, the communication port for signals and shutdown. Without
that venv the tests are skipped, saying why.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
from collections.abc import Iterator
from pathlib import Path

import pytest

from kernelgate import RunResult
from kernelgate.jupyter import GatewayRuntime
from tests.procs import descendants, processes_with

from .helpers import wait_gone
from .kernelgateway import KernelGatewayServer, free_port, get_json

EG = os.environ.get("KERNELGATE_ENTERPRISE_GATEWAY", "")
SPECS = Path(__file__).parents[2] / "deploy/enterprise-gateway/kernels"
NAMES = ("kernelgate-local", "kernelgate-distributed")

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.skipif(
        not (EG and os.access(EG, os.X_OK)),
        reason="no Enterprise Gateway: set KERNELGATE_ENTERPRISE_GATEWAY to the "
        "jupyter-enterprisegateway of a venv of its own (python -m venv eg && eg/bin/pip "
        "install jupyter_enterprise_gateway; never into kernelgate's: it pins "
        "jupyter_client<7); .ci/run makes one",
    ),
]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KernelGatewayServer]:
    root = tmp_path_factory.mktemp("enterprise-gateway")
    for name in NAMES:
        spec = json.loads((SPECS / name / "kernel.json").read_text())
        spec["argv"][0] = sys.executable  # kernelgate's venv, not the gateway's
        (root / "kernels" / name).mkdir(parents=True)
        (root / "kernels" / name / "kernel.json").write_text(json.dumps(spec))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EG_", "KG_"))}
    env["JUPYTER_PATH"] = str(root)
    env["JUPYTER_RUNTIME_DIR"] = str(root / "runtime")
    env["EG_RESPONSE_IP"] = "127.0.0.1"  # the launchers' answers: loopback only
    log = root / "eg.log"
    argv = [
        EG,
        "--EnterpriseGatewayApp.ip=127.0.0.1",
        f"--EnterpriseGatewayApp.port={port}",
        "--EnterpriseGatewayApp.list_kernels=True",
    ]
    with open(log, "wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env)
    gw = KernelGatewayServer(url, proc, log)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                specs = get_json(f"{url}/api/kernelspecs")
                break
            except (urllib.error.URLError, ConnectionError) as exc:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(
                        f"Enterprise Gateway did not start: {log.read_text()}"
                    ) from exc
                time.sleep(0.1)
        assert set(NAMES) <= set(specs["kernelspecs"]), specs
        yield gw
    finally:
        gw.stop()


def mul(a: int, b: int) -> int:
    return a * b


def _has_cryptography() -> bool:
    try:
        import cryptography  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.mark.parametrize(
    "name",
    [
        "kernelgate-local",
        pytest.param(
            "kernelgate-distributed",
            marks=pytest.mark.skipif(
                not _has_cryptography(),
                reason="kernelgate's Enterprise Gateway launcher needs cryptography "
                "(pip install 'kernelgate[enterprise-gateway]')",
            ),
        ),
    ],
)
def test_enterprise_gateway_runs_kernelgate_with_bindings_answered_here(
    server: KernelGatewayServer, name: str
) -> None:
    async def main() -> tuple[list[RunResult], set[str]]:
        async with GatewayRuntime(
            server.url,
            name,
            namespaces={"mine": {"mul": mul}},
            pool_size=2,
            # Enterprise Gateway refuses a kernel without a user (and root by default).
            kernel_env={"KERNEL_USERNAME": "kernelgate-tests"},
        ) as gw:
            results = await asyncio.gather(
                gw.run("x = await tools.compute('sum', [2, 3])\nawait mine.mul(x, 10)"),
                gw.run("await mine.mul(2, 3)\n1 / 0"),
            )
            return list(results), set(gw.kernel_ids)

    (ok, failed), ids = asyncio.run(main())
    assert ok.ok and ok.value == 50.0, ok
    assert [(c.namespace, c.name) for c in ok.calls] == [("tools", "compute"), ("mine", "mul")]
    assert failed.status == "exception" and failed.error is not None
    assert failed.error.ename == "ZeroDivisionError"
    assert len(ids) == 2
    assert server.kernels() == []
    assert wait_gone(descendants(server.proc.pid)) == set()  # no kernel, no launcher


@pytest.mark.parametrize("name", NAMES)
def test_enterprise_gateway_kernel_frozen_mid_run_is_replaced(
    server: KernelGatewayServer, name: str
) -> None:
    """The kernel SIGSTOP'd during a binding call (alive, silent): the heartbeat finds it,
    the run ends ``worker_exit``, Enterprise Gateway deletes it (through the launcher, for
    the distributed proxy) and starts a fresh one, on which the next run works."""
    if name == "kernelgate-distributed" and not _has_cryptography():
        pytest.skip("kernelgate's Enterprise Gateway launcher needs cryptography")
    box: list[GatewayRuntime] = []
    frozen: list[int] = []

    def freeze() -> None:
        (kid,) = box[0].kernel_ids
        (pid,) = processes_with(f"kernel-{kid}.json")
        os.kill(pid, signal.SIGSTOP)
        frozen.append(pid)

    gw = GatewayRuntime(
        server.url,
        name,
        bindings={"freeze": freeze},
        kernel_env={"KERNEL_USERNAME": "kernelgate-tests"},
        heartbeat_seconds=0.5,
        heartbeat_timeout=5,
    )
    box.append(gw)

    async def main() -> tuple[RunResult, float, RunResult, set[str]]:
        async with gw:
            first = set(gw.kernel_ids)
            t0 = time.monotonic()
            died = await gw.run("await tools.freeze()\n1")
            took = time.monotonic() - t0
            after = await gw.run("6 * 7")
            return died, took, after, first | set(gw.kernel_ids)

    try:
        died, took, after, ids = asyncio.run(asyncio.wait_for(main(), 90))
    finally:
        for pid in frozen:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
    assert died.status == "worker_exit" and "stopped answering" in died.message, died
    assert took < 0.5 + 5 + 1 + 6, took
    assert after.ok and after.value == 42, after
    assert gw.replaced == 1 and len(ids) == 2
    assert server.kernels() == []
    assert wait_gone({*frozen, *descendants(server.proc.pid)}) == set()
