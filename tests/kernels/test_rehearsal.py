"""The warm child's rehearsal (``rehearsal.rehearse``): a whole run on throwaway objects that
leaves nothing behind: no output on fd 1 or 2 (the host reads them as the next program's),
the builtins as they were, the loop reusable. Run in its own interpreter: importing the
zygote module rehomes kernelgate's frames, which must not happen in the test process."""

from __future__ import annotations

import json
import subprocess
import sys

from kernelgate.kernels.python import package_root

_SCRIPT = r"""
import asyncio, builtins, json, sys
sys.path.insert(0, sys.argv[1])
from kernelgate.kernels.python import rehearsal as zygote
loop = asyncio.new_event_loop()
before = dict(builtins.__dict__)
zygote.rehearse(loop)
after = dict(builtins.__dict__)
ran = loop.run_until_complete(asyncio.sleep(0, result="loop reusable"))
zygote.rehearse(loop)  # a warm child may be rehearsed once more: nothing carries over
with open(sys.argv[2], "w") as f:
    json.dump({
        "builtins_kept": before == after,
        "loop": ran,
    }, f)
"""


def _run_script(script: str, tmp_path) -> dict:
    """Run ``script`` in a fresh ``python -I``; what it wrote as JSON. It may print nothing:
    fd 1 and 2 are the next run's."""
    out = tmp_path / "out.json"
    proc = subprocess.run(
        [sys.executable, "-I", "-c", script, package_root(), str(out)],
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr.decode()
    assert proc.stdout == b"" and proc.stderr == b""
    return json.loads(out.read_text())


def test_rehearsal_leaves_nothing_behind(tmp_path):
    seen = _run_script(_SCRIPT, tmp_path)
    assert seen == {"builtins_kept": True, "loop": "loop reusable"}


_ZYGOTE_SCRIPT = r"""
import asyncio, builtins, dis, json, linecache, sys
sys.path.insert(0, sys.argv[1])
from kernelgate.kernels.python import rehearsal
from kernelgate.kernels.python.program import FILENAME
from kernelgate.wire.connection import Connection

def adaptive(fn):
    if sys.version_info < (3, 11):
        return []
    return sorted({i.opname for i in dis.get_instructions(fn, adaptive=True)})

before_builtins = dict(builtins.__dict__)
cold = adaptive(Connection.next_event)
rehearsal.rehearse_in_zygote()
warm = adaptive(Connection.next_event)
with open(sys.argv[2], "w") as f:
    json.dump({
        "builtins_kept": before_builtins == dict(builtins.__dict__),
        "running_loop": asyncio._get_running_loop() is not None,
        "source_kept": FILENAME in linecache.cache,
        "specialized": sorted(set(warm) - set(cold)),
        "version": list(sys.version_info[:2]),
    }, f)
"""


def test_the_zygotes_own_rehearsals_leave_only_specialized_code(tmp_path):
    """The zygote rehearses runs itself before it forks (each child then finds their code
    already specialized): nothing of them may stay for a child's program to find, nor reach
    fd 1 or 2; and on CPython 3.11+ the code they ran is specialized afterwards (this fails
    if the rehearsals stop reaching the child's paths, e.g. if they ran before the rehome)."""
    seen = _run_script(_ZYGOTE_SCRIPT, tmp_path)
    assert seen["builtins_kept"] and not seen["running_loop"] and not seen["source_kept"]
    if tuple(seen["version"]) >= (3, 11):
        assert seen["specialized"], "the rehearsed code was not specialized"
