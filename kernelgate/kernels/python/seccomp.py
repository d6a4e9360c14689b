"""The child's seccomp filter, at every sandbox level. Stdlib only (ctypes).

Work in progress: the API is fixed (``build``, ``apply``, ``warm``); the filter lands next.
"""

from __future__ import annotations

__all__ = ["build", "apply", "warm"]


def build(level: str, machine: str | None = None) -> bytes:
    """The BPF program for ``level`` on ``machine`` (``os.uname().machine`` by default)."""
    raise OSError("seccomp filter not implemented yet")


def apply(level: str) -> None:
    """Set no_new_privs and install the filter for ``level`` in this (single-threaded) process."""
    raise OSError("seccomp filter not implemented yet")


def warm() -> None:
    """Build the filter of every level ahead of the children (a zygote calls this)."""
