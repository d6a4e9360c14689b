from __future__ import annotations

import os

import pytest


def _open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


@pytest.fixture
def no_fd_leak():
    """Fail the test if it leaves file descriptors open in the test process."""
    before = _open_fds()
    yield
    leaked = {
        fd: os.readlink(f"/proc/self/fd/{fd}")
        for fd in _open_fds() - before
        if os.path.exists(f"/proc/self/fd/{fd}")
    }
    assert not leaked, f"file descriptors leaked: {leaked}"
