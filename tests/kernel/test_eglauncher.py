"""kernelgate's launcher for Enterprise Gateway's remote process proxies, without a gateway.

The payload is decrypted here as Enterprise Gateway decrypts it (RSA PKCS#1 v1.5 for the
AES key, AES-ECB and PKCS#7 for the connection info); a launcher whose gateway cannot be
reached fails, leaving no kernel and no connection file behind. The whole protocol against
a real Enterprise Gateway: tests/kernel/test_enterprise_gateway.py.
"""

from __future__ import annotations

import base64
import doctest
import json
import os
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import pytest

from kernelgate.jupyter import gatewayrest
from tests.procs import processes_with

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
