"""Any CPython >= 3.10 on the machine can be the child interpreter."""

from __future__ import annotations

import asyncio
import glob
import os
import shutil
import subprocess
import sys

import pytest

from kernelgate import Gateway

from .conftest import warmed_up


def _real_interpreter(minor: int) -> str | None:
    # On PATH, or installed beside this one (pyenv and similar keep versions side by side).
    siblings = sorted(
        glob.glob(
            os.path.join(
                os.path.dirname(sys.base_prefix), f"3.{minor}.*", "bin", f"python3.{minor}"
            )
        )
    )
    found = siblings[-1] if siblings else shutil.which(f"python3.{minor}")
    if found is None:
        return None
    try:
        out = subprocess.run(
            [found, "-c", "import sys; print(sys.executable)"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


@pytest.mark.parametrize("minor", [10, 11, 12, 13])
def test_child_interpreter_version(minor, make_gateway):
    python = _real_interpreter(minor)
    if python is None:
        pytest.skip(f"python3.{minor} is not installed here")
    gw: Gateway = make_gateway(python=python, bindings={"add": lambda a, b: a + b})
    r = gw.run_sync("import sys\nprint(sys.version_info[:2])\nreturn await tools.add(1, 2)")
    assert r.ok, r.message
    assert r.stdout == f"(3, {minor})\n" and r.value == 3
    r = gw.run_sync("def f():\n    return 1 / 0\nf()")
    assert r.status == "exception" and r.error.ename == "ZeroDivisionError"
    assert 'File "<program>", line 2, in f' in "\n".join(r.error.traceback)
    assert "kernelgate" not in "\n".join(r.error.traceback)


@pytest.mark.parametrize("minor", [10, 11, 12, 13])
def test_warm_children_of_any_interpreter(minor, make_gateway):
    """The zygote runs under the child interpreter: forking into namespaces through its C
    API (PyOS_BeforeFork and friends) works on each version."""
    python = _real_interpreter(minor)
    if python is None:
        pytest.skip(f"python3.{minor} is not installed here")
    gw: Gateway = make_gateway(python=python, pool_size=1)

    async def main():
        await warmed_up(gw)
        return await gw.run("import os, random, sys\nreturn [sys.version_info[1], random.random()]")

    r = asyncio.run(main())
    assert r.ok and r.usage["warm"], r.message
    assert r.value[0] == minor


def test_host_interpreter_is_the_default(make_gateway):
    gw = make_gateway()
    assert gw.python == sys.executable
