"""Hostile directory trees for the removal tests: deep chains, mode 000, links out, odd
file types, made the way a program would (one level at a time, relative to the last)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

#: What a program builds at the bottom of its chain (and the attack tests check survived):
#: a link to a host directory, a link to a host file, a FIFO, a unix socket, a file.
BOTTOM = ("out", "secret", "fifo", "sock", "leaf")


def deep_tree(
    top: str, depth: int, *, outside: str = "", zero: bool = False, uid: int = -1
) -> None:
    """A chain of ``depth`` directories ``d/d/...`` below ``top`` (which exists), with
    :data:`BOTTOM` at its end (the links only with ``outside``: a host directory holding
    ``secret.txt``). ``zero``: every directory of the chain, ``top`` included, ends with
    mode 000. ``uid``: everything is chowned to it (a tree another user made)."""
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(depth):
            os.mkdir("d", dir_fd=fd)
            child = os.open("d", os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            _seal(fd, zero, uid)
            os.close(fd)
            fd = child
        if outside:
            os.symlink(outside, "out", dir_fd=fd)
            os.symlink(os.path.join(outside, "secret.txt"), "secret", dir_fd=fd)
        os.mkfifo("fifo", dir_fd=fd)
        with socket.socket(socket.AF_UNIX) as sock:
            sock.bind(f"/proc/self/fd/{fd}/sock")
        leaf = os.open("leaf", os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=fd)
        os.write(leaf, b"x")
        if uid >= 0:
            os.fchown(leaf, uid, uid)
            for name in BOTTOM[:-1]:
                if outside or name not in ("out", "secret"):
                    os.chown(name, uid, uid, dir_fd=fd, follow_symlinks=False)
        os.close(leaf)
        _seal(fd, zero, uid)
    finally:
        os.close(fd)


def _seal(fd: int, zero: bool, uid: int) -> None:
    if uid >= 0:
        os.fchown(fd, uid, uid)
    if zero:
        os.fchmod(fd, 0)


def dead_process() -> tuple[int, int]:
    """The pid and start time of a process that has exited (and been reaped)."""
    proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=-1)
    with open(f"/proc/{proc.pid}/stat", "rb") as f:
        data = f.read()
    start = int(data[data.rfind(b")") + 2 :].split()[19])
    assert proc.stdin is not None
    proc.stdin.close()
    proc.wait(timeout=10)
    return proc.pid, start


def dead_owner() -> str:
    """The name prefix of a host that is gone (see ``gateway.process.owner_prefix``)."""
    pid, start = dead_process()
    return f"kernelgate-{pid}-{start}-{os.stat('/proc/self/ns/pid').st_ino}-"
