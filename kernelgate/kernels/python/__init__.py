"""The CPython child: stdlib only, started with ``python -I`` (any CPython >= 3.10)."""

from __future__ import annotations

import os

__all__ = ["LOADER", "ZYGOTE_LOADER", "package_root"]

#: The ``-c`` program that starts a child: put kernelgate's parent directory first on
#: sys.path just long enough to import the bootstrap (never the caller's cwd), then run it.
LOADER = (
    "import sys;"
    "sys.path[:] = [sys.argv[1]] + [p for p in sys.path if p];"
    "from kernelgate.kernels.python.bootstrap import main;"
    "del sys.path[0];"
    "main()"
)

#: The same for the zygote, the template process of the warm pool.
ZYGOTE_LOADER = LOADER.replace("bootstrap import main", "zygote import main")


def package_root() -> str:
    """The directory holding the ``kernelgate`` package (argv[1] of :data:`LOADER`)."""
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
