"""The CPython child: stdlib only, started with ``python -I`` (any CPython >= 3.10)."""

from __future__ import annotations

import os

__all__ = ["LOADER", "ZYGOTE_LOADER", "LAUNCHER", "package_root"]


def _loader(module: str) -> str:
    # Close every fd but 0-3 first: the host's inheritable ones (a listening socket, a
    # supervisor's pipe) must never reach a program (issue 9, finding 10); close_range
    # makes it one syscall. Then put kernelgate's parent directory first on sys.path just
    # long enough to import the entry module (never the caller's cwd: empty entries go),
    # then run its main().
    return (
        "import os;os.closerange(4,2147483647);import sys;"
        "sys.path[:] = [sys.argv[1]] + [p for p in sys.path if p];"
        f"from kernelgate.kernels.python.{module} import main;"
        "del sys.path[0];"
        "main()"
    )


#: The ``-c`` program that starts a cold child (argv[1]: :func:`package_root`; argv[2], for
#: a child started with ``-S``: what ``site`` would have made, see :mod:`.sitehook`).
LOADER = _loader("bootstrap")
#: The same for the zygote, the template process of the warm pool.
ZYGOTE_LOADER = _loader("zygote")
#: The same for the launcher, which confines a runtime that cannot confine itself (Node)
#: and execs it (:mod:`.launcher`).
LAUNCHER = _loader("launcher")


def package_root() -> str:
    """The directory holding the ``kernelgate`` package (argv[1] of :data:`LOADER`)."""
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
