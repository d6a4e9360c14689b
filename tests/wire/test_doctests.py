"""The examples in the wire modules' docstrings are true."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = ["values", "framing", "messages", "events", "state", "reader", "connection", "zygote"]


@pytest.mark.parametrize("name", MODULES)
def test_doctests(name):
    module = importlib.import_module(f"kernelgate.wire.{name}")
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0
    assert result.failed == 0
