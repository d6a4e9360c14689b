"""kernelgate's launcher for Enterprise Gateway's remote process proxies, without a gateway.

The payload is decrypted here as Enterprise Gateway decrypts it (RSA PKCS#1 v1.5 for the
AES key, AES-ECB and PKCS#7 for the connection info); a launcher whose gateway cannot be
reached fails, leaving no kernel and no connection file behind. The whole protocol against
a real Enterprise Gateway: tests/kernel/test_enterprise_gateway.py.
"""

from __future__ import annotations

import base64
import contextlib
import doctest
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from kernelgate.jupyter import gatewayrest
from tests.procs import processes_with

from .helpers import wait_gone
from .kernelgateway import free_port

crypto = pytest.importorskip(
    "cryptography", reason="the launcher needs cryptography (kernelgate[enterprise-gateway])"
)
from cryptography.hazmat.primitives import padding, serialization  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import padding as rsa_padding  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import rsa  # noqa: E402
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes  # noqa: E402

from kernelgate.jupyter.eglauncher import encrypt_payload  # noqa: E402

pytestmark = pytest.mark.timeout(60)


def _gateway_key() -> tuple[rsa.RSAPrivateKey, str]:
    """A key pair as Enterprise Gateway makes one; the public half as it passes it."""
    private = rsa.generate_private_key(public_exponent=65537, key_size=1024)
    der = private.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return private, base64.b64encode(der).decode()


def _decrypt_as_the_gateway_does(data: bytes, private: rsa.RSAPrivateKey) -> dict[str, object]:
    payload = json.loads(base64.b64decode(data))
    assert payload["version"] == 1
    aes_key = private.decrypt(base64.b64decode(payload["key"]), rsa_padding.PKCS1v15())
    decryptor = Cipher(algorithms.AES(aes_key), modes.ECB()).decryptor()
    plain = decryptor.update(base64.b64decode(payload["conn_info"])) + decryptor.finalize()
    unpadder = padding.PKCS7(128).unpadder()
    info: dict[str, object] = json.loads(unpadder.update(plain) + unpadder.finalize())
    return info


def test_the_payload_decrypts_as_enterprise_gateway_decrypts_it() -> None:
    private, public = _gateway_key()
    info = {"kernel_id": "k1", "shell_port": 1234, "key": "s3cret", "comm_port": 4321}
    sealed = encrypt_payload(info, public)
    assert b"s3cret" not in base64.b64decode(sealed)  # the kernel's key never in the clear
    assert _decrypt_as_the_gateway_does(sealed, private) == info


def test_a_launcher_that_cannot_reach_the_gateway_leaves_nothing_behind() -> None:
    _, public = _gateway_key()
    kernel_id = str(uuid.uuid4())
    before = set(Path(tempfile.gettempdir()).glob("kernelgate-eg-*"))
    done = subprocess.run(
        [
            sys.executable,
            "-I",
            "-m",
            "kernelgate.jupyter.eglauncher",
            "--kernel-id",
            kernel_id,
            "--response-address",
            f"127.0.0.1:{free_port()}",  # nobody listens there
            "--public-key",
            public,
            "--port-range",
            "0..0",
        ],
        capture_output=True,
        text=True,
        timeout=50,
        env={**os.environ, "TMPDIR": tempfile.gettempdir()},
    )
    assert done.returncode != 0
    assert "Connection refused" in done.stderr, done.stderr
    assert processes_with(f"kernel-{kernel_id}.json") == []
    assert set(Path(tempfile.gettempdir()).glob("kernelgate-eg-*")) == before


@pytest.mark.parametrize(
    ("args", "says"),
    [
        ([], "--kernel-id is required"),
        (["--kernel-id", "k", "--response-address", "nowhere", "--public-key", "x"], "HOST:PORT"),
        (
            [
                "--kernel-id",
                "k",
                "--response-address",
                "h:1",
                "--public-key",
                "x",
                "--port-range",
                "9",
            ],
            "LOWER..UPPER",
        ),
    ],
)
def test_bad_launcher_arguments_are_refused_saying_what_is_wrong(
    args: list[str], says: str
) -> None:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("KERNEL_ID", "RESPONSE_ADDRESS", "PUBLIC_KEY", "PORT_RANGE")
    }
    done = subprocess.run(
        [sys.executable, "-I", "-m", "kernelgate.jupyter.eglauncher", *args],
        capture_output=True,
        text=True,
        timeout=30,
        env=env,
    )
    assert done.returncode != 0 and says in done.stderr, done.stderr


def test_gatewayrest_doctests() -> None:
    assert doctest.testmod(gatewayrest).failed == 0


def _request(port: int, request: dict[str, int]) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(json.dumps(request).encode())


@contextlib.contextmanager
def _launched(kernel_id: str) -> Iterator[tuple[subprocess.Popen[bytes], dict[str, object]]]:
    """A launcher answering a response address of the test's; it and what it told."""
    private, public = _gateway_key()
    with socket.create_server(("127.0.0.1", 0)) as response:
        response.settimeout(60)
        launcher = subprocess.Popen(
            [
                sys.executable,
                "-I",
                "-m",
                "kernelgate.jupyter.eglauncher",
                "--kernel-id",
                kernel_id,
                "--response-address",
                f"127.0.0.1:{response.getsockname()[1]}",
                "--public-key",
                public,
                "--",
                "--bindings",
                "kernelgate.demo:BINDINGS",
            ],
            env={**os.environ, "TMPDIR": tempfile.gettempdir()},
        )
        try:
            conn, _ = response.accept()
            with conn:
                data = b""
                while chunk := conn.recv(65536):
                    data += chunk
            info = _decrypt_as_the_gateway_does(data, private)
            assert info["kernel_id"] == kernel_id and info["pid"] == launcher.pid
            yield launcher, info
        finally:
            if launcher.poll() is None:
                launcher.kill()
                launcher.wait()


@pytest.mark.timeout(90)
def test_the_communication_port_passes_on_only_the_gateways_signals_then_shuts_down() -> None:
    """The launcher's port has no authentication (as Enterprise Gateway's own launchers):
    a SIGSTOP sent there would freeze the kernel with its runs, so only SIGINT, SIGTERM and
    SIGKILL go on (SIGUSR1 here: unhandled, it would end the kernel and show in the
    launcher's exit status); a shutdown request ends the kernel and the launcher, leaving
    nothing. The port listens before the gateway hears of it: its first poll may come at
    once, and a refused one means "no kernel" to the gateway."""
    kernel_id = str(uuid.uuid4())
    before = set(Path(tempfile.gettempdir()).glob("kernelgate-eg-*"))
    with _launched(kernel_id) as (launcher, info):
        (kernel,) = processes_with(f"kernel-{kernel_id}.json")
        comm = int(str(info["comm_port"]))
        _request(comm, {"signum": 0})  # the gateway's liveness poll, at once
        _request(comm, {"signum": int(signal.SIGUSR1)})
        _request(comm, {"shutdown": 1})  # served after the SIGUSR1 (one at a time, in order)
        code = launcher.wait(timeout=30)  # the launcher ends with its kernel
    # 0 (the kernel stopped on SIGTERM) or 143 (SIGTERM before its handler was set); 138
    # would be the SIGUSR1 passed on.
    assert code in (0, 128 + signal.SIGTERM), f"the launcher exited {code}"
    assert wait_gone({kernel}) == set()
    assert set(Path(tempfile.gettempdir()).glob("kernelgate-eg-*")) == before


@pytest.mark.timeout(90)
def test_a_launcher_killed_outright_takes_its_kernel_with_it() -> None:
    kernel_id = str(uuid.uuid4())
    with _launched(kernel_id) as (launcher, _info):
        (kernel,) = processes_with(f"kernel-{kernel_id}.json")
        with open(f"/proc/{kernel}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
        private = Path(os.fsdecode(argv[argv.index(b"-f") + 1])).parent
        launcher.kill()
        launcher.wait()
    assert wait_gone({kernel}, timeout=20) == set()
    shutil.rmtree(private)  # what a launcher killed outright cannot remove (in a pod: gone)
