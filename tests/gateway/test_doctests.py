"""The examples in the gateway modules' docstrings are true (they start real children)."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = ["kernelgate", *(f"kernelgate.gateway.{m}" for m in ("gateway", "limits", "result", "bindings"))]


@pytest.mark.parametrize("name", MODULES)
def test_doctests(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0
    assert result.failed == 0
