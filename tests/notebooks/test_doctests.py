"""The examples in the docstrings of kernelgate.notebooks and the run writer it re-exports
(kernelgate.gateway.recording) run and say what they show."""

from __future__ import annotations

import doctest
import importlib
import os
import tempfile
import time

import pytest

from tests.procs import live_children

MODULES = [
    "kernelgate.notebooks",
    "kernelgate.notebooks.render",
    "kernelgate.notebooks.reading",
    "kernelgate.notebooks.session",
    "kernelgate.notebooks.replay",
    # The writer, a layer below (Gateway(record_to=DIR) uses it); the notebooks re-export it.
    "kernelgate.gateway.recording.values",
    "kernelgate.gateway.recording.calls",
    "kernelgate.gateway.recording.render",
    "kernelgate.gateway.recording.store",
    "kernelgate.gateway.recording.timeline",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str, tmp_path, monkeypatch) -> None:
    # The examples save notebooks under tempfile.mkdtemp(), as a reader would: here that
    # is the test's own directory, so nothing is left in $TMPDIR.
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    module = importlib.import_module(name)
    before = set(live_children(os.getpid()))
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0
    assert result.failed == 0
    # The examples drop their gateways unclosed (``Gateway(...).run_sync(...)``), as a
    # reader may: dropped, a gateway ends its pool. Nothing of them may outlive this test
    # (a later test's leak check would count their zygotes as its own). Polled, bounded:
    # a killed zygote takes a moment to be reaped on a loaded machine.
    deadline = time.monotonic() + 15
    while (left := set(live_children(os.getpid())) - before) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert left == set()


def test_package_imports_without_pyzmq_or_nbformat() -> None:
    import subprocess
    import sys

    # Nor the gateway's runtime: reading and rendering runs needs none of it (replay
    # imports it when called).
    code = (
        "import sys\n"
        "import kernelgate.notebooks\n"
        "heavy = ('zmq', 'nbformat', 'jupyter_client', 'kernelgate.gateway.gateway',\n"
        "         'kernelgate.gateway.pool', 'kernelgate.gateway.sandbox',\n"
        "         'kernelgate.gateway.run', 'kernelgate.jupyter')\n"
        "bad = [m for m in heavy if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=30)
