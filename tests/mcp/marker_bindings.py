"""Bindings for the ``kernelgate mcp --http`` attack tests: ``touch`` leaves a line in the
file ``$KG_TEST_MARKER``, so a test can tell whether any program ran at all."""

from __future__ import annotations

import os


def touch(note: str) -> str:
    """Append ``note`` to the marker file; proof that a program ran."""
    with open(os.environ["KG_TEST_MARKER"], "a", encoding="utf-8") as out:
        out.write(note + "\n")
    return note


BINDINGS = {"touch": touch}
