"""The Node kernel: a child for JavaScript programs, speaking the same fd-3 protocol as the
CPython child (docs/protocol.md), written in plain JavaScript (CommonJS, Node >= 18, no
packages). The host uses this package only for its paths and argv, never its code.

Start it as ``node [--max-old-space-size=MiB] KERNEL_JS`` with fd 0 ``/dev/null``, fd 1
and 2 pipes, fd 3 an ``AF_UNIX`` stream socket to the host, in a new session (exactly as
a cold Python child: :func:`kernelgate.gateway.process.spawn_child`), an environment
chosen by the host, and the sandbox already applied (JavaScript cannot confine itself).

>>> kernel_argv("/usr/bin/node", heap_mib=256)[1:2]
['--max-old-space-size=256']
"""

from __future__ import annotations

import os

__all__ = ["KERNEL_DIR", "KERNEL_JS", "MIN_NODE_MAJOR", "kernel_argv"]

#: The kernel's directory (its ``*.js`` files and a ``package.json`` pinning CommonJS).
KERNEL_DIR = os.path.dirname(os.path.abspath(__file__))
#: The entry point.
KERNEL_JS = os.path.join(KERNEL_DIR, "kernel.js")
#: The oldest Node the kernel runs on.
MIN_NODE_MAJOR = 18


def kernel_argv(node: str, heap_mib: int | None = None) -> list[str]:
    """The argv of a Node child: ``node`` (an absolute path), V8's heap ceiling when
    given (``--max-old-space-size``: the run's memory is also bounded by its cgroup, as
    RLIMIT_AS does not suit V8), then the kernel."""
    argv = [node]
    if heap_mib is not None:
        argv.append(f"--max-old-space-size={int(heap_mib)}")
    argv.append(KERNEL_JS)
    return argv
