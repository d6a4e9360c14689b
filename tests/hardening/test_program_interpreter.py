"""The program's interpreter after the forks that made its process (issue 23: a warm
child's namespace init skips the interpreter's child-side at-fork work, which the
program's own fork then does): the random generator is reseeded for every run (children of
one zygote share nothing but its address-space layout and string-hash secret), and threads,
logging and imports work in the program. At every level, warm (two runs from one zygote)
and cold.
"""

from __future__ import annotations

import glob
import os
import sys

import pytest

from .conftest import ALL_LEVELS, STRONGEST

_PROGRAM = """
import importlib, io, logging, random, threading
ran = []
worker = threading.Thread(target=lambda: ran.append(threading.get_ident()))
worker.start()
worker.join()
stream = io.StringIO()
log = logging.getLogger("kernelgate-test")
log.addHandler(logging.StreamHandler(stream))
log.warning("logged")
return {
    "bits": random.getrandbits(64),
    "main": threading.main_thread() is threading.current_thread(),
    "ident": threading.main_thread().ident == threading.get_ident(),
    "thread": len(ran) == 1 and ran[0] != threading.get_ident(),
    "logged": stream.getvalue(),
    "imported": importlib.import_module("colorsys").__name__,
}
"""


def _check(hostile, gw, warm: bool) -> None:
    seen = []
    for _ in range(2):
        r = hostile.run(_PROGRAM, warm=warm, gateway=gw)
        assert r.ok, r.message
        assert r.usage["warm"] is warm
        seen.append(r.value)
    for value in seen:
        assert {k: v for k, v in value.items() if k != "bits"} == {
            "main": True,
            "ident": True,
            "thread": True,
            "logged": "logged\n",
            "imported": "colorsys",
        }
    # One zygote's children: a generator state carried over from it (not reseeded in the
    # program's process) would give every run the same bits.
    assert seen[0]["bits"] != seen[1]["bits"]


@ALL_LEVELS
@pytest.mark.parametrize("warm", [True, False], ids=["warm", "cold"])
def test_each_program_gets_a_reseeded_random_and_a_working_interpreter(hostile, level, warm):
    _check(hostile, hostile.gateway(pool_size=1 if warm else 0, sandbox=level), warm)


def _sibling(minor: int) -> str | None:
    """python3.<minor> installed beside this interpreter (pyenv keeps versions side by side)."""
    found = sorted(
        glob.glob(
            os.path.join(
                os.path.dirname(sys.base_prefix), f"3.{minor}.*", "bin", f"python3.{minor}"
            )
        )
    )
    return found[-1] if found else None


@pytest.mark.parametrize("minor", [10, 12, 13])
def test_warm_programs_of_other_interpreters_too(hostile, minor):
    """The init's fork bookkeeping goes through the C API of the child's interpreter: the
    same checks under each version (the strongest level here)."""
    python = _sibling(minor)
    if python is None:
        pytest.skip(f"python3.{minor} is not installed here")
    _check(hostile, hostile.gateway(pool_size=1, sandbox=STRONGEST, python=python), True)
