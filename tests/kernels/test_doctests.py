"""The examples in the child's modules' docstrings are true (in-process: none of them starts
a child or enters a sandbox)."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    f"kernelgate.kernels.python.{m}"
    for m in (
        "bootstrap",
        "client",
        "confine",
        "debugbreaks",
        "debugger",
        "debugstop",
        "debugvalues",
        "display",
        "program",
        "rehome",
        "report",
        "runner",
        "sandbox",
        "sitehook",
        "syscalls",
        "userns",
    )
]


@pytest.mark.parametrize("name", MODULES)
def test_doctests(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0
    assert result.failed == 0
