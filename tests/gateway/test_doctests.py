"""The examples in the gateway modules' docstrings are true (they start real children)."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "kernelgate",
    "kernelgate.gateway.gateway",
    "kernelgate.gateway.bindings",
    "kernelgate.gateway.sandbox",
    "kernelgate.gateway.runtime",
    "kernelgate.gateway.plan",
    "kernelgate.gateway.tools",
    "kernelgate.gateway.rules",
    *(
        f"kernelgate.model.{m}"
        for m in ("limits", "result", "text", "search", "defs", "docstrings")
    ),
]


@pytest.mark.parametrize("name", MODULES)
def test_doctests(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0
    assert result.failed == 0
