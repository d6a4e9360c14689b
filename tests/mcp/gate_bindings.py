"""Bindings for the progress tests: ``gate()`` waits until the test writes a line into
the FIFO named by ``$KG_TEST_GATE`` (the test does so once it has heard of the run's
progress), and returns that line."""

from __future__ import annotations

import os


def first() -> str:
    """Return at once."""
    return "first"


def gate() -> str:
    """Wait for the test's line in the FIFO ``$KG_TEST_GATE``; return it."""
    with open(os.environ["KG_TEST_GATE"], encoding="utf-8") as fifo:
        return fifo.readline().strip()


BINDINGS = {"first": first, "gate": gate}
