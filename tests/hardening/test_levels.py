"""The hostile suite where user namespaces are unavailable: it runs at ``process`` and says
what it skipped and why (tests/hardening/conftest.py), shown by forcing the machine's
strongest level down with the test-only ``KERNELGATE_TEST_LEVELS``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import LEVELS_ENV

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(180)
def test_without_namespaces_the_suite_runs_at_process_and_names_its_skips():
    selected = [
        "tests/hardening/test_hostile.py::test_what_each_level_isolates",
        "tests/hardening/test_hostile.py::test_host_processes_are_not_visible",
        "tests/hardening/test_hostile.py::test_strict_with_an_available_level_runs_at_that_level",
    ]
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", *selected],
        cwd=ROOT,
        env={**os.environ, LEVELS_ENV: "process"},
        capture_output=True,
        text=True,
        timeout=170,
        check=False,
    )
    out = done.stdout
    assert done.returncode == 0, out[-3000:] + done.stderr[-2000:]
    # The process case and the test at the strongest level ran (at process: it asserts the
    # isolation it got); the namespace cases were skipped, each naming what is missing.
    assert "2 passed, 4 skipped" in out, out[-3000:]
    missing = "unprivileged user namespaces are not allowed here"
    assert out.count("SKIPPED [1] tests/hardening/test_hostile.py") == 2, out[-3000:]
    assert f"needs the 'namespaces' level: {missing}" in out
    assert f"needs the 'namespaces+landlock' level: {missing}" in out
    # The session's summary: the levels, then one line per reason with its count.
    assert "kernelgate hostile suite: levels and skips" in out
    assert "levels here: process ('process' forced by KERNELGATE_TEST_LEVELS); 2 cases ran, 4 skipped" in out
    assert f"     3 skipped: needs the 'namespaces' level: {missing}" in out
    assert f"     1 skipped: needs the 'namespaces+landlock' level: {missing}" in out
