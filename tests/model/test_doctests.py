"""The examples in kernelgate.model's docstrings run and say what they show."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "kernelgate.model.codec",
    "kernelgate.model.describe_ts",
    "kernelgate.model.keyorder",
    "kernelgate.model.language",
    "kernelgate.model.limits",
    "kernelgate.model.removal",
    "kernelgate.model.result",
    "kernelgate.model.signatures",
    "kernelgate.model.site",
    "kernelgate.model.text",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0
    assert result.failed == 0


def test_the_model_needs_only_the_standard_library() -> None:
    """The child imports the model: importing all of it loads no other kernelgate layer
    and nothing from outside the standard library."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "before = set(sys.modules)\n"
        f"for m in {MODULES!r}:\n"
        "    __import__(m)\n"
        "new = sorted(set(sys.modules) - before)\n"
        "ours = [m for m in new if m.startswith('kernelgate.') and\n"
        "        not m.startswith('kernelgate.model')]\n"
        "outside = [m for m in new if not m.startswith('kernelgate') and\n"
        "           m.split('.')[0] not in sys.stdlib_module_names]\n"
        "assert not ours and not outside, (ours, outside)\n"
    )
    subprocess.run([sys.executable, "-I", "-c", code], check=True, timeout=30)
