from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from .nodechild import NODE, KernelRun


@pytest.fixture
def kernel() -> Iterator[Callable[..., KernelRun]]:
    """Make runs of the real Node kernel (closed, killed and cleaned up after the test)."""
    if NODE is None:
        pytest.skip("node (>= 18) is not installed: the Node kernel's tests need it")
    made: list[KernelRun] = []

    def make(**kwargs: Any) -> KernelRun:
        run = KernelRun(**kwargs)
        made.append(run)
        return run

    yield make
    for run in made:
        run.close()
