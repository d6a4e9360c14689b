"""The examples in kernelgate.notebooks' docstrings run and say what they show."""

from __future__ import annotations

import doctest
import importlib
import tempfile

import pytest

MODULES = [
    "kernelgate.notebooks",
    "kernelgate.notebooks._values",
    "kernelgate.notebooks.render",
    "kernelgate.notebooks.store",
    "kernelgate.notebooks.session",
    "kernelgate.notebooks.replay",
    "kernelgate.notebooks.timeline",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str, tmp_path, monkeypatch) -> None:
    # The examples save notebooks under tempfile.mkdtemp(), as a reader would: here that
    # is the test's own directory, so nothing is left in $TMPDIR.
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0
    assert result.failed == 0


def test_package_imports_without_pyzmq_or_nbformat() -> None:
    import subprocess
    import sys

    code = (
        "import sys\n"
        "import kernelgate.notebooks\n"
        "bad = [m for m in ('zmq', 'nbformat', 'jupyter_client') if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=30)
