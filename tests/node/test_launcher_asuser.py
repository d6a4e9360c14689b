"""The launcher's Node child attacked from JavaScript with an unprivileged host
(tests/hardening/asuser.py: the host runs as uid 65533 with Debian's python3, which also runs
the launcher): the child maps its own uid, gets no idmapped read paths and no writable
cgroup, and at ``process`` shares the host's uid (only landlock's scope keeps it from the
host and other runs there)."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from typing import Any

import pytest

from kernelgate.gateway.sandbox import LEVELS
from tests.hardening.asuser import AsUser, make_as_user, unavailable
from tests.hardening.conftest import SUPPORT, at_levels
from tests.node.attacks import NATIVE_PYTHON, PRELUDE
from tests.node.launched import NODE, NODE_MISSING

pytestmark = [
    pytest.mark.skipif(NODE is None, reason=f"needs Node.js >= 18: {NODE_MISSING}"),
    pytest.mark.skipif(
        bool(unavailable()), reason=f"needs a host as another user: {unavailable()}"
    ),
    pytest.mark.skipif(
        not os.access(NATIVE_PYTHON, os.X_OK), reason=f"the native attacks need {NATIVE_PYTHON}"
    ),
]


@pytest.fixture(scope="module")
def as_user() -> Iterator[AsUser]:
    user, base = make_as_user()
    yield user
    shutil.rmtree(base, ignore_errors=True)


# Host script (as the user): the attack, through the launcher with the system python3, and a
# concurrent run A whose process the attack also goes for (its pid, run directory, environ).
_HOST = """
import json, os, socket, sys
from tests.node.launched import NodeRun, run_script, script_dir, write_script

level = ARGS["level"]
base = ARGS["tmp_dir"]
scripts = script_dir(base)
os.chmod(scripts, 0o755)
neighbour = write_script(scripts, ARGS["neighbour"], "neighbour.js")
abstract = socket.socket(socket.AF_UNIX)
abstract.bind(("\\0kg-node-asuser-" + level).encode().ljust(108, b"\\0"))
abstract.listen()
with NodeRun(level, base, read_paths=(scripts,), python=ARGS["python"], env={"SECRET": "A"}) as a:
    child = a.start(neighbour)
    os.set_blocking(child.stdout_fd, True)
    assert os.read(child.stdout_fd, 100) == b"ready\\n"
    target = child.pid  # process level: the node itself (exec'd in place)
    args = {"pid": target, "host": os.getpid(), "dir": a.run_dir,
            "file": os.path.join(a.run_dir, "secret.txt"), "secret": ARGS["secret"],
            "abstract": "kg-node-asuser-" + level}
    ended = run_script(ARGS["attack"], level, base=base, args=[json.dumps(args)],
                       python=ARGS["python"])
    alive = os.path.exists(f"/proc/{target}") and open(f"/proc/{target}/stat").read().split()[2] != "Z"
abstract.close()
print(json.dumps({"answer": ended.answer, "why": ended.why(), "alive": alive}))
"""

_NEIGHBOUR = r"""
require('fs').writeFileSync('secret.txt', 'run A secret');
process.stdout.write('ready\n');
setInterval(() => {}, 1000);
"""

_ATTACK = (
    PRELUDE
    + r"""
(async () => {
  attempt('secret', () => fs.readFileSync(ARGS.secret, 'utf8'));
  attempt('a_file', () => fs.readFileSync(ARGS.file, 'utf8'));
  attempt('a_plant', () => { fs.writeFileSync(ARGS.dir + '/planted.js', 'x'); return 'planted'; });
  for (const [name, pid] of [['a', ARGS.pid], ['host', ARGS.host]]) {
    attempt(name + '_environ', () => fs.readFileSync(`/proc/${pid}/environ`, 'latin1'));
    attempt(name + '_mem', () => { fs.closeSync(fs.openSync(`/proc/${pid}/mem`, 'r')); return 'opened'; });
    attempt(name + '_fd3', () => fs.readlinkSync(`/proc/${pid}/fd/3`));
    attempt(name + '_signal', () => process.kill(pid, 'SIGCONT'));
  }
  // the host script's inheritable pipe (tests/hardening/asuser.py HOST_FD), opened through /proc
  attempt('host_pipe', () => { fs.closeSync(fs.openSync(`/proc/${ARGS.host}/fd/900`, 'w')); return 'opened'; });
  await attemptAsync('abstract', () => connectTo({path: '\0' + ARGS.abstract}));
  const n = native(`
res["ptrace_seize_host"] = sc(101, 0x4206, ${ARGS.host}, 0, 0)
res["io_uring_setup"] = sc(425, 8, ctypes.addressof(ctypes.create_string_buffer(120)))
res["unshare_user"] = sc(272, 0x10000000)
res["mount"] = sc(165, 0, 0, 0, 0, 0)
`);
  Object.assign(out, Object.fromEntries(Object.entries(n).map(([k, v]) => [k, v === 'ok' ? 'ok:' : 'err:' + v])));
  done();
})();
"""
)


def _run(as_user: AsUser, level: str) -> dict[str, Any]:
    secret = os.path.join(as_user.base, "secret.txt")
    if not os.path.exists(secret):
        with open(secret, "w") as f:
            f.write("host secret\n")
        os.chmod(secret, 0o644)
    args = {"level": level, "neighbour": _NEIGHBOUR, "attack": _ATTACK, "secret": secret}
    result: dict[str, Any] = as_user.run_script(_HOST, args, timeout=120)
    return result


@at_levels(*LEVELS)
@pytest.mark.timeout(150)
def test_the_node_attacks_from_an_unprivileged_host(as_user, level):
    result = _run(as_user, level)
    got = result["answer"]
    assert isinstance(got, dict), result["why"]
    assert result["alive"], "the attack killed run A"
    native = {
        k: got.pop(k) for k in ("ptrace_seize_host", "io_uring_setup", "unshare_user", "mount")
    }
    assert set(native.values()) == {"err:EPERM"}, native
    if level == "namespaces+landlock":
        assert got["secret"] == "err:EACCES", got
    else:
        assert got["secret"].startswith("ok:"), got  # reading is not promised there
    del got["secret"]
    if level == "process" and SUPPORT.landlock_abi < 6:
        pytest.skip("at 'process' a non-root host shares its uid: landlock ABI 6 scoping needed")
    if level == "process":
        # Same uid as the host and run A: the run directory is the host's to share (not
        # promised), processes and abstract sockets are kept apart by landlock's scope.
        del got["a_file"], got["a_plant"]
    refused = {k: v for k, v in got.items() if v.startswith("err:")}
    assert refused == got, json.dumps(got, indent=1)


_SAME_UID = """
import os
from tests.node.launched import NodeRun, script_dir, write_script
scripts = script_dir(ARGS["tmp_dir"])
script = write_script(scripts, "process.stdout.write('up\\\\n'); setInterval(() => {}, 1000);", "n.js")
with NodeRun(ARGS["level"], ARGS["tmp_dir"], read_paths=(scripts,), python=ARGS["python"],
             env={"SECRET": "in the environ"}) as run:
    child = run.start(script)
    os.set_blocking(child.stdout_fd, True)
    os.read(child.stdout_fd, 10)
    node = next(int(p) for p in os.listdir("/proc") if p.isdigit()
                and os.path.exists(f"/proc/{p}/cmdline")
                and script.encode() in open(f"/proc/{p}/cmdline", "rb").read())
    try:
        got = open(f"/proc/{node}/environ", "rb").read().decode(errors="replace")
    except OSError as exc:
        got = "refused: " + exc.strerror
print(json.dumps(got))
"""


@at_levels(*LEVELS)
@pytest.mark.xfail(
    strict=True,
    reason="known gap: execve makes the Node child dumpable again and JavaScript cannot clear "
    "it, so on a non-root host any unconfined process of the host's uid reads its environ and "
    "memory (a Python child is not dumpable). At the namespace levels dumpability is not even "
    "the whole story: node is exec'd inside the run's user namespace, which the host's uid "
    "owns, so that uid holds CAP_SYS_PTRACE over it (a Python child's memory was made outside "
    "it, before the namespaces). An execute-only copy of node (mode 0111) does make the "
    "process-level child non-dumpable, but the copy would be a code path every process-level "
    "program of that uid can rewrite for later runs. Other runs are kept out (landlock scope, "
    "pid namespaces: test_the_node_attacks_from_an_unprivileged_host).",
)
@pytest.mark.timeout(150)
def test_a_same_uid_host_process_cannot_read_a_node_childs_environ(as_user, level):
    got = as_user.run_script(_SAME_UID, {"level": level}, timeout=120)
    assert "in the environ" not in got, got


# A warm pool (gateway/nodepool.py) as the user: the run that takes one child goes for the
# other, idle one (the next run's): its environ, memory, fd 3, a signal, its run directory.
_POOLED = """
import asyncio
from kernelgate import Gateway, Limits

ATTACK = '''
const fs = require('fs');
const out: Record<string, string> = {};
function attempt(name: string, fn: () => any) {
  try { out[name] = 'ok:' + String(fn()).slice(0, 60) } catch (e: any) { out[name] = 'err:' + (e.code || e.name) }
}
attempt('environ', () => fs.readFileSync('/proc/PID/environ', 'latin1'));
attempt('mem', () => { fs.closeSync(fs.openSync('/proc/PID/mem', 'r')); return 'opened' });
attempt('fd3', () => fs.readlinkSync('/proc/PID/fd/3'));
attempt('signal', () => process.kill(PID, 'SIGKILL'));
attempt('plant', () => { fs.writeFileSync('DIR/planted.js', 'x'); return 'planted' });
out
'''

async def main():
    async with Gateway(language="typescript", sandbox=ARGS["level"], pool_size=2,
                       tmp_dir=ARGS["tmp_dir"], limits=Limits(wall_seconds=60),
                       env={"SECRET": "in the environ"}) as gw:
        first = await gw.run("1")
        pool = gw._pool
        await pool.filled()
        other = pool._ready[1]
        code = ATTACK.replace("PID", str(other.pid)).replace("DIR", other.run_dir)
        result = await gw.run(code)
        alive = other.alive()
        nxt = await gw.run("2")
    return {"first": first.status, "warm": result.usage.get("warm"), "status": result.status,
            "error": str(result.error), "got": result.value, "alive": alive,
            "next": [nxt.status, nxt.usage.get("warm")]}

print(json.dumps(asyncio.run(main())))
"""


@at_levels(*LEVELS)
@pytest.mark.timeout(150)
def test_a_pooled_run_cannot_reach_the_idle_child_beside_it_from_an_unprivileged_host(
    as_user, level
):
    result = as_user.run_script(_POOLED, {"level": level}, timeout=120)
    assert result["warm"] is True and result["status"] == "ok", result
    got = result["got"]
    if level == "process" and SUPPORT.landlock_abi < 6:
        pytest.skip("at 'process' a non-root host shares its uid: landlock ABI 6 scoping needed")
    if level == "process":
        # The host's uid owns every run directory there (not promised, as for cold runs).
        del got["plant"]
    assert {k: v for k, v in got.items() if v.startswith("err:")} == got, got
    assert result["alive"] and result["next"] == ["ok", True], result
