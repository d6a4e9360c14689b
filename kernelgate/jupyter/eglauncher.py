"""Enterprise Gateway's kernel launcher for the kernelgate kernel (remote process proxies).

Enterprise Gateway's remote process proxies (Kubernetes, Docker, Distributed/SSH, YARN)
start a *launcher* where the kernel is to run, with ``{kernel_id}``, ``{response_address}``,
``{public_key}`` and ``{port_range}`` filled into the kernelspec's ``argv``. The launcher:

1. picks the kernel's five ports (in ``--port-range``, when one is given), writes a
   connection file (a private directory, removed on exit) with a fresh HMAC key;
2. sends the connection information, with its pid, pgid and a *communication port*, to the
   gateway's response address, encrypted as the gateway expects (payload version 1: the
   JSON encrypted with a fresh AES key, that key encrypted with the gateway's RSA key);
3. runs ``kernelgate kernel run -f <file> <the arguments after -->`` and, on the
   communication port, takes the gateway's requests: ``{"signum": n}`` (0: a liveness poll;
   SIGINT, SIGTERM, SIGKILL go to the kernel, no other) and ``{"shutdown": 1}`` (the kernel
   is stopped);
4. exits with the kernel's status once the kernel has ended.

It needs the ``cryptography`` package (``pip install 'kernelgate[enterprise-gateway]'``).

    python -I -m kernelgate.jupyter.eglauncher --kernel-id {kernel_id} \\
        --response-address {response_address} --public-key {public_key} \\
        --port-range {port_range} --ip 0.0.0.0 -- --bindings mypkg.tools:BINDINGS

In a container started by the Kubernetes or Docker proxy, the first four come from the
variables ``KERNEL_ID``, ``RESPONSE_ADDRESS``, ``PUBLIC_KEY`` and ``PORT_RANGE``.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import ctypes
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["encrypt_payload", "main"]

#: How long one request on the communication port may take to arrive.
_REQUEST_SECONDS = 5.0
#: The signals the gateway sends (interrupt, terminate, kill); the port has no
#: authentication (as in Enterprise Gateway's own launchers), so no other (SIGSTOP would
#: freeze the kernel with every run in it) is passed on.
_SIGNALS = frozenset({signal.SIGINT, signal.SIGTERM, signal.SIGKILL})
#: prctl(2): the signal a process gets when its parent dies (Linux).
_PR_SET_PDEATHSIG = 1


def encrypt_payload(info: dict[str, Any], public_key: str) -> bytes:
    """The version-1 payload Enterprise Gateway decrypts: base64 of a JSON holding the AES
    key (RSA PKCS#1 v1.5 with the gateway's ``public_key``, base64 DER) and the connection
    info (AES-128-ECB, PKCS#7 padded), each base64."""
    from cryptography.hazmat.primitives import padding
    from cryptography.hazmat.primitives.asymmetric import padding as rsa_padding
    from cryptography.hazmat.primitives.asymmetric.rsa import RSAPublicKey
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
    from cryptography.hazmat.primitives.serialization import load_der_public_key

    rsa_key = load_der_public_key(base64.b64decode(public_key))
    if not isinstance(rsa_key, RSAPublicKey):
        raise ValueError("--public-key is not an RSA public key (base64 DER, as the gateway gives)")
    aes_key = secrets.token_bytes(16)
    padder = padding.PKCS7(128).padder()
    plain = padder.update(json.dumps(info).encode()) + padder.finalize()
    # ECB because the gateway decrypts with AES.MODE_ECB (payload version 1); the key is
    # fresh for this one message.
    encryptor = Cipher(algorithms.AES(aes_key), modes.ECB()).encryptor()
    sealed = encryptor.update(plain) + encryptor.finalize()
    payload = {
        "version": 1,
        "key": base64.b64encode(rsa_key.encrypt(aes_key, rsa_padding.PKCS1v15())).decode(),
        "conn_info": base64.b64encode(sealed).decode(),
    }
    return base64.b64encode(json.dumps(payload).encode())


def _die_with(parent: int) -> Callable[[], None]:
    """For ``preexec_fn`` (the launcher has no other thread yet when it starts the
    kernel): SIGTERM the child when ``parent`` dies, or at once if it already has."""

    def arrange() -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent:  # died between the fork and the prctl
            os.kill(os.getpid(), signal.SIGTERM)

    return arrange


def _bind(ip: str, lower: int, upper: int) -> socket.socket:
    """A listening socket on a free port (in ``lower..upper`` unless that is ``0..0``)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if lower == 0 and upper == 0:
        sock.bind((ip, 0))
        return sock
    for _ in range(1000):
        port = lower + secrets.randbelow(upper - lower + 1)
        try:
            sock.bind((ip, port))
            return sock
        except OSError:
            continue
    sock.close()
    raise OSError(f"no free port in {lower}..{upper} on {ip}")


def _port_range(text: str | None) -> tuple[int, int]:
    if not text:
        return 0, 0
    lower, _, upper = text.partition("..")
    try:
        lo, hi = int(lower), int(upper)
    except ValueError:
        raise SystemExit(f"--port-range must be LOWER..UPPER, got {text!r}") from None
    if not (lo == hi == 0 or 0 < lo <= hi < 65536):
        raise SystemExit(f"--port-range must be LOWER..UPPER within 1..65535, got {text!r}")
    return lo, hi


def _listen(comm: socket.socket, kernel: subprocess.Popen[bytes]) -> None:
    """The gateway's requests on the communication port, until shutdown or the kernel ends."""
    comm.settimeout(1.0)
    while kernel.poll() is None:
        try:
            conn, _ = comm.accept()
        except TimeoutError:
            continue
        except OSError:
            return
        with conn:
            conn.settimeout(_REQUEST_SECONDS)
            data = b""
            with contextlib.suppress(OSError):
                while chunk := conn.recv(4096):
                    data += chunk
                    if len(data) > 65536:
                        break
        try:
            request = json.loads(data or b"{}")
        except ValueError:
            continue
        if not isinstance(request, dict):
            continue
        signum = request.get("signum")
        if signum in _SIGNALS and kernel.poll() is None:
            with contextlib.suppress(OSError):
                kernel.send_signal(signum)
        if request.get("shutdown"):
            kernel.terminate()
            return


def _options(argv: list[str] | None) -> tuple[argparse.Namespace, list[str]]:
    """The launcher's options (from the command line or the environment) and the
    kernel's own arguments (after ``--``)."""
    args = sys.argv[1:] if argv is None else argv
    ours, kernel_args = (
        (args[: args.index("--")], args[args.index("--") + 1 :]) if "--" in args else (args, [])
    )
    parser = argparse.ArgumentParser(
        prog="python -m kernelgate.jupyter.eglauncher",
        description="Start a kernelgate kernel for Jupyter Enterprise Gateway.",
    )
    # Each may come from the environment instead: Enterprise Gateway's Kubernetes and
    # Docker proxies start the image's command with these variables set.
    env = os.environ.get
    parser.add_argument("--kernel-id", default=env("KERNEL_ID"))
    parser.add_argument("--response-address", default=env("RESPONSE_ADDRESS"), help="HOST:PORT")
    parser.add_argument("--public-key", default=env("PUBLIC_KEY"), help="the gateway's key")
    parser.add_argument("--port-range", default=env("PORT_RANGE"), help="LOWER..UPPER")
    parser.add_argument(
        "--ip", default="127.0.0.1", help="where the kernel listens (a pod: 0.0.0.0)"
    )
    parser.add_argument("--kernel-name", default="kernelgate")
    opts = parser.parse_args(ours)
    for name in ("kernel_id", "response_address", "public_key"):
        if not getattr(opts, name):
            flag = "--" + name.replace("_", "-")
            parser.error(
                f"{flag} is required (or its variable {name.upper()}), as the gateway gives it"
            )
    host, _, port = opts.response_address.rpartition(":")
    if not host or not port.isdigit():
        parser.error(f"--response-address must be HOST:PORT, got {opts.response_address!r}")
    return opts, kernel_args


def main(argv: list[str] | None = None) -> int:
    opts, kernel_args = _options(argv)
    host, _, port = opts.response_address.rpartition(":")
    lower, upper = _port_range(opts.port_range)

    socks = [_bind(opts.ip, lower, upper) for _ in range(6)]
    ports = [s.getsockname()[1] for s in socks]
    comm = socks.pop()
    connection = {
        "shell_port": ports[0],
        "iopub_port": ports[1],
        "stdin_port": ports[2],
        "control_port": ports[3],
        "hb_port": ports[4],
        "ip": opts.ip,
        "key": secrets.token_hex(32),
        "transport": "tcp",
        "signature_scheme": "hmac-sha256",
        "kernel_name": opts.kernel_name,
    }
    for sock in socks:  # the kernel binds them itself
        sock.close()
    private = tempfile.mkdtemp(prefix="kernelgate-eg-")
    try:
        path = os.path.join(private, f"kernel-{opts.kernel_id}.json")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(connection, f)
        command = [sys.executable, "-I", "-m", "kernelgate.cli", "kernel", "run", "-f", path]
        # The kernel ends when this launcher does, even SIGKILLed: a SIGTERM from the
        # kernel of the OS (PR_SET_PDEATHSIG: the kernelgate kernel watches its parent only
        # once started, and a launcher gone before then left it orphaned), and
        # JPY_PARENT_PID as under jupyter_client.
        kernel_env = {**os.environ, "JPY_PARENT_PID": str(os.getpid())}
        kernel = subprocess.Popen(
            [*command, *kernel_args], env=kernel_env, preexec_fn=_die_with(os.getpid())
        )
        # Listening before the gateway hears of the port: its first liveness poll may
        # come at once, and a refused one means "no kernel" to it.
        comm.listen(8)
        info = {
            **connection,
            "pid": os.getpid(),
            "pgid": os.getpgid(0),
            "comm_port": comm.getsockname()[1],
            "kernel_id": opts.kernel_id,
        }
        try:
            with socket.create_connection((host, int(port)), timeout=30) as out:
                out.sendall(encrypt_payload(info, opts.public_key))
        except BaseException:
            kernel.kill()
            kernel.wait()
            raise
        # SIGTERM (the gateway stopping a kernel without the comm port) stops the kernel too.
        signal.signal(signal.SIGTERM, lambda *_: kernel.terminate())
        listener = threading.Thread(target=_listen, args=(comm, kernel), daemon=True)
        listener.start()
        code = kernel.wait()
        comm.close()
        return code if code >= 0 else 128 - code
    finally:
        comm.close()
        shutil.rmtree(private, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
