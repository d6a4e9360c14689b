"""The hostile suite for TypeScript programs: every isolation claim of docs/security.md that
a Python program attacks in this directory, attacked again by a TypeScript program through
``Gateway(language="typescript")``, at each level, warm (a child of the Node pool) and cold,
with the same ``hostile`` fixture (nothing left: processes with the test's marker, children,
run directories, cgroups, fds).

Each attack is plain JavaScript (valid TypeScript) built on tests/node/attacks.py's prelude,
so it also runs as a plain Node script: the ``unconfined-control`` case runs it on a Node
outside every sandbox, where it succeeds, so each test can fail. Budgets are shown the
other way: the same program under a looser limit gets past where the tight one stops it.
"""

from __future__ import annotations

import asyncio
import errno
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import Any

import pytest

from kernelgate import Limits, RunResult
from kernelgate.gateway.cgroups import CgroupRoots
from kernelgate.gateway.launch import NODE_KERNEL_DIR
from kernelgate.gateway.sandbox import LEVELS
from kernelgate.kernels.python import package_root
from tests.node.attacks import NATIVE_PYTHON, PRELUDE
from tests.node.launched import NODE, NODE_MISSING, run_script
from tests.procs import processes_with

from .conftest import (
    FAST,
    NEEDS_ROOT_HOST_AT_PROCESS_CASE,
    ROOT_HOST,
    SUPPORT,
    Hostile,
    kernelgate_cgroups,
    needs_level,
)

pytestmark = [
    pytest.mark.skipif(NODE is None, reason=f"needs Node.js >= 18: {NODE_MISSING}"),
    pytest.mark.skipif(
        not os.access(NATIVE_PYTHON, os.X_OK), reason=f"the native attacks need {NATIVE_PYTHON}"
    ),
    pytest.mark.timeout(120),
]

SLACK = 5.0
CGROUPS = SUPPORT.cgroups
NEEDS_MEMORY_CGROUP = pytest.mark.skipif(
    CGROUPS is None or CGROUPS.memory is None,
    reason="needs a writable memory cgroup: without RLIMIT_AS it is Node's only off-heap bound",
)
NEEDS_PIDS_CGROUP = pytest.mark.skipif(
    CGROUPS is None or CGROUPS.pids is None,
    reason="needs a writable pids cgroup (max_processes and the killing of escapees at process)",
)


def where(
    levels: tuple[str, ...] = LEVELS, *, process_needs_root: bool = False, control: bool = True
) -> pytest.MarkDecorator:
    """Parametrize ``level`` and ``warm`` over ``levels`` x (warm, cold), each skipped where
    the machine lacks the level; ``control`` adds the unconfined run (``level`` None)."""
    params = []
    for level in levels:
        marks = [needs_level(level)]
        if level == "process" and process_needs_root:
            marks.append(NEEDS_ROOT_HOST_AT_PROCESS_CASE)
        for warm in (True, False):
            params.append(
                pytest.param(level, warm, marks=marks, id=f"{level}-{'warm' if warm else 'cold'}")
            )
    if control:
        params.append(pytest.param(None, False, id="unconfined-control"))
    return pytest.mark.parametrize(("level", "warm"), params)


def script(body: str, args: dict[str, Any]) -> str:
    """The attack: tests/node/attacks.py's prelude with ``args`` as ``ARGS``, then ``body``
    (which fills ``out``)."""
    prelude = PRELUDE.replace("'use strict';", "").replace(
        "const ARGS = JSON.parse(process.argv[2] || '{}');", f"const ARGS = {json.dumps(args)};"
    )
    assert "const ARGS = {" in prelude or args == {}, "the prelude changed: ARGS not replaced"
    return prelude + body


def attack(
    hostile: Hostile,
    level: str | None,
    warm: bool,
    body: str,
    args: dict[str, Any] | None = None,
    *,
    limits: Limits | None = None,
    env: dict[str, str] | None = None,
    **gateway: Any,
) -> dict[str, Any]:
    """``body`` run as a TypeScript program at ``level`` (warm or cold), or, with ``level``
    None, as a plain script on an unconfined Node (the control): what it put in ``out``."""
    code = script(body, args or {})
    if level is None:
        wrapped = (
            "(async () => {\n" + code + "\nprocess.stdout.write(JSON.stringify(out) + '\\n');"
            "\nprocess.exit(0);\n})().catch((e) => { console.error(e); process.exit(1); });"
        )
        ended = run_script(wrapped, "process", base=hostile.base, confined=False, env=env)
        assert isinstance(ended.answer, dict), ended.why()
        return ended.answer
    if env is not None:
        gateway["env"] = env
    r = ts(hostile, code + "\nout", level, warm, limits, **gateway)
    assert r.status == "ok", (r.status, r.message, r.stderr[-2000:])
    assert isinstance(r.value, dict), r.value
    return r.value


def ts(
    hostile: Hostile,
    program: str,
    level: str,
    warm: bool,
    limits: Limits | None = None,
    **gateway: Any,
) -> RunResult:
    """``program`` run by a TypeScript gateway at ``level``, in a pooled child or cold."""
    return hostile.run(
        program, limits, warm=warm, sandbox=level, strict=True, language="typescript", **gateway
    )


def refused(value: str) -> bool:
    return value.startswith("err:")


def attempts(got: dict[str, Any]) -> dict[str, Any]:
    """The attempts that must fail (not the ``step_*`` towards them)."""
    return {k: v for k, v in got.items() if not k.startswith("step_")}


def native_to_out(body: str) -> str:
    """JavaScript that runs ``body`` through the prelude's ``native`` (raw system calls from
    a binary the program execs) and adds each result to ``out``."""
    return (
        "{ const n = native(`\n" + body + "\n`);\n"
        "Object.assign(out, Object.fromEntries(Object.entries(n).map(([k, v]) => "
        "[k, v === 'ok' ? 'ok:' : 'err:' + v]))); }\n"
    )


@pytest.fixture
def drop() -> Iterator[str]:
    """A host directory outside /tmp and every path Node reads: a secret any uid may read,
    and a directory any uid may write (only the sandbox stands in the way)."""
    path = tempfile.mkdtemp(prefix="kg-hostile-node-", dir="/var/tmp")
    os.chmod(path, 0o755)
    with open(os.path.join(path, "secret.txt"), "w") as f:
        f.write("host secret\n")
    os.chmod(os.path.join(path, "secret.txt"), 0o644)
    os.mkdir(os.path.join(path, "drop"))
    os.chmod(os.path.join(path, "drop"), 0o1777)
    yield path
    shutil.rmtree(path, ignore_errors=True)


# -- the file system ----------------------------------------------------------------------------

_FILES = r"""
for (const [name, path] of Object.entries(ARGS.read)) attempt('read_' + name, () => fs.readFileSync(path, 'utf8'));
// Node's raw binding: the same system calls without the fs module's checks
attempt('read_binding', () => {
  const b = process.binding('fs');
  const fd = b.open(ARGS.read.secret, fs.constants.O_RDONLY, 0);
  if (typeof fd !== 'number' || fd < 0) throw Object.assign(new Error('no fd'), {code: 'EBINDING'});
  return 'opened ' + fd;
});
for (const [name, path] of Object.entries(ARGS.write)) attempt('write_' + name, () => { fs.writeFileSync(path, 'planted'); return path; });
// a global sysctl: written back with what it holds, so the control changes nothing
attempt('sysctl', () => { const v = fs.readFileSync(ARGS.sysctl, 'utf8'); fs.writeFileSync(ARGS.sysctl, v); return 'rewritten'; });
// the run's own pids cgroup (raise it) and the root one (leave it)
attempt('step_cgroup', () => fs.readFileSync('/proc/self/cgroup', 'utf8'));
if (ARGS.cgroups) {
  attempt('cgroup_raise', () => {
    const line = fs.readFileSync('/proc/self/cgroup', 'utf8').split('\n').find((l) => /(^|,)pids(,|$)/.test(l.split(':')[1] || ''));
    const mine = '/sys/fs/cgroup/pids' + line.split(':').slice(2).join(':');
    fs.writeFileSync(mine + '/pids.max', fs.readFileSync(mine + '/pids.max', 'utf8'));
    return mine;
  });
  attempt('cgroup_leave', () => { fs.writeFileSync(ARGS.cgroups + '/cgroup.procs', String(process.pid)); return 'left'; });
}
// the run's own memory cgroup: raise its bound, or leave it for the root one (never tried by
// the unconfined control, whose cgroup is not the test's)
if (ARGS.memcg) {
  const line = fs.readFileSync('/proc/self/cgroup', 'utf8').split('\n').find((l) => /(^|,)memory(,|$)/.test(l.split(':')[1] || ''));
  const mine = '/sys/fs/cgroup/memory' + line.split(':').slice(2).join(':');
  out.step_memcg = mine;
  attempt('memcg_raise', () => { fs.writeFileSync(mine + '/memory.limit_in_bytes', String(8 << 30)); return 'raised'; });
  attempt('memcg_leave', () => { fs.writeFileSync('/sys/fs/cgroup/memory/cgroup.procs', String(process.pid)); return 'left'; });
}
// setuid and setgid modes, on a copy of a binary the run owns
attempt('step_copy', () => { fs.copyFileSync(process.execPath, 'suid'); return 'copied'; });
attempt('chmod_setuid', () => { fs.chmodSync('suid', 0o4755); return (fs.statSync('suid').mode & 0o7777).toString(8); });
attempt('create_setgid', () => { fs.closeSync(fs.openSync('sgid', 'w', 0o2755)); return (fs.statSync('sgid').mode & 0o7777).toString(8); });
// an exec'd binary (node itself, with the inspector asked for) reading the host's secret
attempt('child_node', () => {
  const r = cp.spawnSync(process.execPath, ['-e', `process.stdout.write(require('fs').readFileSync(${JSON.stringify(ARGS.read.secret)}, 'utf8'))`],
                         {encoding: 'utf8', env: {PATH: '/usr/bin:/bin', NODE_OPTIONS: '--inspect=127.0.0.1:0'}});
  if (!String(r.stdout).includes('host secret')) throw Object.assign(new Error(String(r.stderr).slice(-200)), {code: 'CHILD_REFUSED'});
  return r.stdout;
});
"""


def _files_args(drop: str, level: str | None) -> dict[str, Any]:
    tag = f"{os.getpid()}-{level}"
    pids = CgroupRoots.find()
    return {
        "read": {
            "secret": os.path.join(drop, "secret.txt"),
            "passwd": "/etc/passwd",
            "project": os.path.join(package_root(), "pyproject.toml"),
        },
        "write": {
            "world_writable": os.path.join(drop, "drop", f"planted-{tag}"),
            "var_tmp": f"/var/tmp/kg-hostile-node-planted-{tag}",
            "kernel_dir": os.path.join(NODE_KERNEL_DIR, f"planted-{tag}.js"),
            "package": os.path.join(package_root(), "kernelgate", f"planted-{tag}.py"),
            "usr_bin": f"/usr/bin/kg-hostile-node-{tag}",
        },
        "sysctl": "/proc/sys/kernel/core_pattern",
        "memcg": level is not None and CGROUPS is not None and CGROUPS.memory is not None,
        "cgroups": pids.pids if pids is not None and pids.pids is not None else "",
    }


@where()
def test_the_file_system_holds_against_a_typescript_program(hostile, drop, level, warm):
    args = _files_args(drop, level)
    core_pattern = open(args["sysctl"]).read()
    try:
        got = attack(hostile, level, warm, _FILES, args)
    finally:
        planted = [p for p in args["write"].values() if os.path.exists(p)]
        for path in planted:
            os.unlink(path)
    assert open(args["sysctl"]).read() == core_pattern
    if level is None:  # unconfined: every attempt works
        # (not raising its pids.max: the control is in the root pids cgroup, which has none)
        got.pop("cgroup_raise", None)
        assert all(v.startswith("ok:") for v in got.values()), json.dumps(got, indent=1)
        assert got["chmod_setuid"] == "ok:4755", got
        return
    assert planted == [] or level == "process", planted
    if level == "process":
        # The run's uid may write what any uid may, and read what the machine lets it (not
        # promised at process); with a shared uid (a non-root host), also the host's files.
        for name in (
            "read_secret",
            "read_passwd",
            "read_project",
            "read_binding",
            "child_node",
            "write_world_writable",
            "write_var_tmp",
        ):
            got.pop(name)
        if not ROOT_HOST:
            for name in ("write_kernel_dir", "write_package", "cgroup_raise", "memcg_raise"):
                got.pop(name, None)
    elif level == "namespaces":
        # Reading is not promised there; writing anywhere but the run directory is.
        for name in ("read_secret", "read_passwd", "read_project", "read_binding", "child_node"):
            got.pop(name)
    if CGROUPS is not None and CGROUPS.memory is not None:
        assert "kernelgate-" in got["step_memcg"], got  # its own per-run cgroup: the target
    bad = {k: v for k, v in attempts(got).items() if not refused(v)}
    assert bad == {}, json.dumps(got, indent=1)


# -- sockets and the network --------------------------------------------------------------------

_NET = r"""
await attemptAsync('tcp_host', () => connectTo({host: '127.0.0.1', port: ARGS.port}));
await attemptAsync('unix_path', () => connectTo({path: ARGS.path}));
await attemptAsync('unix_abstract', () => connectTo({path: '\0' + ARGS.abstract}));
await attemptAsync('tcp_listen', () => new Promise((ok, no) => {
  const s = net.createServer(); s.on('error', no); s.listen(0, '127.0.0.1', () => { const p = s.address().port; s.close(); ok(p); });
}));
// the inspector, listening for a debugger: can anyone outside the run drive it?
await attemptAsync('inspector', async () => {
  const inspector = require('inspector');
  inspector.open(0, '127.0.0.1');
  const url = inspector.url();
  if (!url) throw Object.assign(new Error('not listening'), {code: 'NO_INSPECTOR'});
  const port = Number(new URL(url).port);
  try {
    // from the host (a binding), or, for the unconfined control, from its own network
    if (typeof tools !== 'undefined') {
      if (!(await tools.reach(port))) throw Object.assign(new Error('unreachable'), {code: 'UNREACHABLE'});
    } else await connectTo({host: '127.0.0.1', port});
    return url;
  } finally { inspector.close(); }
});
""" + native_to_out(
    """
res["socket_packet"] = sc(41, 17, 3, 0)
res["socket_vsock"] = sc(41, 40, 1, 0)
res["socket_alg"] = sc(41, 38, 5, 0)
"""
)


def _reach(port: int) -> bool:
    """Whether the host can connect to ``port`` on its loopback."""
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    except OSError:
        return False
    return True


@where()
def test_sockets_and_the_network_hold_against_a_typescript_program(hostile, drop, level, warm):
    tcp = socket.create_server(("127.0.0.1", 0))
    path = os.path.join(drop, "drop", "host.sock")
    unix = socket.socket(socket.AF_UNIX)
    unix.bind(path)
    os.chmod(path, 0o777)
    unix.listen()
    name = f"kg-hostile-node-{os.getpid()}-{level}-{warm}"
    abstract = socket.socket(socket.AF_UNIX)
    abstract.bind(("\0" + name).encode().ljust(108, b"\0"))  # Node pads abstract names
    abstract.listen()
    try:
        args = {"port": tcp.getsockname()[1], "path": path, "abstract": name}
        got = attack(hostile, level, warm, _NET, args, bindings={"reach": _reach})
    finally:
        for s in (tcp, unix, abstract):
            s.close()
    if level is None:
        for key in ("tcp_host", "unix_path", "unix_abstract", "tcp_listen", "inspector"):
            assert got[key].startswith("ok:"), (key, got)
        assert got["socket_packet"] == "ok:", got  # root: AF_PACKET reaches the kernel
        return
    families = {k: got.pop(k) for k in ("socket_packet", "socket_vsock", "socket_alg")}
    assert set(families.values()) == {"err:EAFNOSUPPORT"}, families
    # Abstract sockets: EACCES for AF_UNIX at the namespace levels, landlock's scope at
    # process. The network and pathname sockets any uid may use are not promised at process.
    assert refused(got["unix_abstract"]), got
    if level == "namespaces":
        # The run's own network namespace: a listener there is the run's alone (the host
        # cannot reach the inspector: the inspector attempt fails).
        assert got.pop("tcp_listen").startswith("ok:"), got
    if level != "process":
        assert all(refused(v) for v in got.values()), json.dumps(got, indent=1)


# -- the host's processes, and Node's own ways in (SIGUSR1, the inspector) -----------------------

_PROCS = r"""
const targets = {host: ARGS.host, node: ARGS.node};
if (typeof tools !== 'undefined') targets.helper = await tools.helper_pid();
out.step_targets = JSON.stringify(targets);
for (const [who, pid] of Object.entries(targets)) {
  attempt(who + '_environ', () => fs.readFileSync(`/proc/${pid}/environ`, 'latin1'));
  attempt(who + '_mem', () => { fs.closeSync(fs.openSync(`/proc/${pid}/mem`, 'r')); return 'opened'; });
  attempt(who + '_fd', () => fs.readdirSync(`/proc/${pid}/fd`).join(','));
  attempt(who + '_signal0', () => process.kill(pid, 0));
  // SIGUSR1 opens a Node process's inspector (process._debugProcess sends it): code execution
  if (who !== 'host') attempt(who + '_sigusr1', () => process._debugProcess(pid));
}
for (const n of ARGS.fds) attempt('host_fd_' + n, () => { const fd = fs.openSync(`/proc/${ARGS.host}/fd/${n}`, 'r'); return 'opened ' + fd; });
""" + native_to_out(
    """
pid = ${ARGS.host}
res["ptrace_seize_host"] = sc(101, 0x4206, pid, 0, 0)
buf = ctypes.create_string_buffer(8)
local = (ctypes.c_void_p * 2)(ctypes.addressof(buf), 8)
remote = (ctypes.c_void_p * 2)(0x400000, 8)
res["process_vm_readv_host"] = sc(310, pid, ctypes.addressof(local), 1, ctypes.addressof(remote), 1, 0)
pidfd = libc.syscall(ctypes.c_long(434), ctypes.c_long(pid), ctypes.c_long(0))
res["step_pidfd_open"] = "ok" if pidfd >= 0 else errno.errorcode[ctypes.get_errno()]
res["pidfd_getfd_host"] = sc(438, pidfd, ${ARGS.fds[0]}, 0) if pidfd >= 0 else "ESRCH"
res["ptrace_traceme"] = sc(101, 0, 0, 0, 0)
res["unshare_user"] = sc(272, 0x10000000)
res["mount"] = sc(165, 0, 0, 0, 0, 0)
res["setns"] = sc(308, 0, 0)
res["keyctl"] = sc(250, 0, 0, 0, 0, 0)
res["bpf"] = sc(321, 0, 0, 0)
res["io_uring_setup"] = sc(425, 8, ctypes.addressof(ctypes.create_string_buffer(120)))
"""
)


def _helper_pid_binding(hostile: Hostile) -> Any:
    async def helper_pid() -> int:
        """The pid of the gateway's type-stripping helper (unconfined, the host's user)."""
        loop = asyncio.get_running_loop()
        for gw in hostile.gateways:
            transformer = gw.runtime._transformers.get(loop)  # type: ignore[attr-defined]
            if transformer is not None and transformer.pid is not None:
                return int(transformer.pid)
        raise AssertionError("no helper on this loop")

    return helper_pid


def _inspector_opened(stderr_fd: int) -> str:
    """What a Node process said on stderr so far (``Debugger listening`` once SIGUSR1
    opened its inspector)."""
    said = b""
    while select.select([stderr_fd], [], [], 0.5)[0]:
        chunk = os.read(stderr_fd, 65536)
        if not chunk:
            break
        said += chunk
    return said.decode(errors="replace")


@where(process_needs_root=True)
def test_the_host_and_its_node_processes_are_out_of_reach(hostile, level, warm):
    assert NODE is not None
    # Another Node process of the host's (as the type-stripping helper is): SIGUSR1 would
    # open its inspector, and the inspector runs any code the connecting side sends.
    bystander = subprocess.Popen(
        [NODE.executable, "-e", "setInterval(() => {}, 1000)", hostile.marker],
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
    )
    spare = socket.socketpair()
    try:
        args = {
            "host": os.getpid(),
            "node": bystander.pid,
            "fds": [spare[0].fileno(), spare[1].fileno()],
        }
        bindings = {"helper_pid": _helper_pid_binding(hostile)}
        got = attack(hostile, level, warm, _PROCS, args, bindings=bindings)
        assert bystander.poll() is None, "the program killed the host's node"
        assert bystander.stderr is not None
        said = _inspector_opened(bystander.stderr.fileno())
    finally:
        spare[0].close()
        spare[1].close()
        bystander.kill()
        bystander.wait(timeout=10)
        if bystander.stderr is not None:
            bystander.stderr.close()
    if level is None:
        for key in ("host_environ", "host_mem", "node_sigusr1", "pidfd_getfd_host", "unshare_user"):
            assert got[key].startswith("ok:"), (key, got)
        assert "Debugger listening" in said, said  # the attack is real
        return
    assert "Debugger listening" not in said, said
    bad = {k: v for k, v in attempts(got).items() if not refused(v)}
    assert bad == {}, json.dumps(got, indent=1)
    assert got["io_uring_setup"] == "err:EPERM" and got["ptrace_traceme"] == "err:EPERM", got


# -- descriptors and the environment -------------------------------------------------------------

_INHERITED = r"""
out.links = {};
for (const fd of fs.readdirSync('/proc/self/fd')) {
  try { out.links[fd] = fs.readlinkSync('/proc/self/fd/' + fd); } catch (e) { out.links[fd] = 'err:' + e.code; }
}
out.env = Object.assign({}, process.env);
out.loaded = typeof globalThis.__kgHostRequire;
out.exec_argv = process.execArgv;
out.seen = [];
for (const pid of fs.readdirSync('/proc').filter((p) => /^\d+$/.test(p))) {
  try { if (fs.readFileSync(`/proc/${pid}/environ`, 'latin1').includes(ARGS.secret)) out.seen.push(pid); } catch (e) {}
}
"""


@where(process_needs_root=True)
def test_the_hosts_fds_and_environment_never_reach_a_typescript_program(
    hostile, drop, level, warm, monkeypatch
):
    secret = f"kg-hostile-node-secret-{os.getpid()}"
    required = os.path.join(drop, "required.js")
    with open(required, "w") as f:
        f.write("globalThis.__kgHostRequire = 1;\n")
    os.chmod(required, 0o644)
    # The host's own environment, as a service would have it: a secret and NODE_OPTIONS that
    # load code into every Node process started with it.
    monkeypatch.setenv("KG_HOSTILE_NODE_SECRET", secret)
    monkeypatch.setenv("NODE_OPTIONS", f"--require={required}")
    pipe_r, pipe_w = os.pipe()
    os.set_inheritable(pipe_w, True)
    listener = socket.create_server(("127.0.0.1", 0))
    listener.set_inheritable(True)
    try:
        host_links = {os.readlink(f"/proc/self/fd/{fd}") for fd in (pipe_w, listener.fileno())}
        env = dict(os.environ) if level is None else None
        got = attack(hostile, level, warm, _INHERITED, {"secret": secret}, env=env)
    finally:
        os.close(pipe_r)
        os.close(pipe_w)
        listener.close()
    if level is None:
        assert got["env"].get("KG_HOSTILE_NODE_SECRET") == secret and got["loaded"] == "number", got
        return
    assert not host_links & set(got["links"].values()), (host_links, got["links"])
    assert got["links"]["0"] == "/dev/null", got["links"]
    assert secret not in json.dumps(got["env"]), got["env"]
    assert not any(k.startswith("NODE_") for k in got["env"]), got["env"]
    assert got["loaded"] == "undefined", got
    assert got["seen"] == [], got


# -- budgets: time ------------------------------------------------------------------------------

BOTH_AT_EVERY_LEVEL = where(control=False)


@BOTH_AT_EVERY_LEVEL
def test_a_busy_loop_trapping_sigterm_ends_at_wall_seconds(hostile, level, warm):
    src = (
        "process.on('SIGTERM', () => {});\nprocess.on('SIGINT', () => {});\n"
        "console.log('before');\nfor (;;) {}\n"
    )
    limits = Limits(wall_seconds=1.5, kill_grace_seconds=0.3, cpu_seconds=30)
    r = ts(hostile, src, level, warm, limits)
    assert r.status == "timeout" and "wall_seconds" in r.error.evalue, r.message
    assert r.stdout == "before\n"
    assert r.duration_s < 1.5 + SLACK


@BOTH_AT_EVERY_LEVEL
def test_a_busy_loop_trapping_sigxcpu_ends_at_cpu_seconds(hostile, level, warm):
    src = "process.on('SIGXCPU', () => {});\nconsole.log('before');\nfor (;;) {}\n"
    limits = Limits(wall_seconds=30, kill_grace_seconds=0.3, cpu_seconds=1)
    r = ts(hostile, src, level, warm, limits)
    assert r.status == "timeout" and "cpu" in r.error.evalue.lower(), r.message
    assert r.stdout == "before\n"
    assert r.duration_s < 30


# -- budgets: processes -------------------------------------------------------------------------


@NEEDS_PIDS_CGROUP
@BOTH_AT_EVERY_LEVEL
def test_an_exponential_fork_bomb_ends_and_nothing_survives(hostile, level, warm):
    # setsid (detached) shell children that fork on: max_processes stops them, the run ends
    # at wall_seconds, and nothing carrying the marker is left (the hostile fixture).
    src = (
        "const cp = require('child_process');\n"
        "const bomb = 'f() { (f &) ; (f &) ; sleep 30; }; f';\n"
        f"for (let i = 0; i < 4; i++) cp.spawn('/bin/sh', ['-c', bomb, {hostile.marker!r}],"
        " {stdio: 'ignore', detached: true}).on('error', () => {});\n"
        "console.log('before');\nawait new Promise(() => setInterval(() => {}, 1000));\n"
    )
    limits = Limits(wall_seconds=3, kill_grace_seconds=0.3, cpu_seconds=10, max_processes=16)
    r = ts(hostile, src, level, warm, limits)
    assert r.status == "timeout", r.message
    assert r.stdout == "before\n"
    assert r.duration_s < 3 + SLACK
    assert processes_with(hostile.marker) == []


@NEEDS_PIDS_CGROUP
@BOTH_AT_EVERY_LEVEL
def test_a_setsid_grandchild_holding_the_pipes_and_fd3_never_holds_the_run(hostile, level, warm):
    src = (
        "const cp = require('child_process');\n"
        f"const c = cp.spawn('/bin/sleep', ['600', {hostile.marker!r}],"
        " {stdio: ['ignore', 'inherit', 'inherit', 3], detached: true});\n"
        "c.unref();\nconsole.log('started');\nc.pid\n"
    )
    r = ts(hostile, src, level, warm)
    assert r.status == "ok" and isinstance(r.value, int), r.message
    assert r.stdout == "started\n"
    assert r.duration_s < SLACK  # settled without waiting for the grandchild's fds
    # (the hostile fixture: no process with the marker is left once the gateway is closed)


# -- budgets: memory, wherever Node holds it ----------------------------------------------------

_MIB = 1 << 20
MEMORY = {
    # Buffers and ArrayBuffers live outside V8's heap: --max-old-space-size never sees them.
    "buffer": "const held = []; for (let i = 0; i < N; i++) held.push(Buffer.alloc(32 << 20, 1));",
    "arraybuffer": (
        "const held = []; for (let i = 0; i < N; i++) "
        "{ const a = new ArrayBuffer(32 << 20); new Uint8Array(a).fill(1); held.push(a); }"
    ),
    "sharedarraybuffer": (
        "const held = []; for (let i = 0; i < N; i++) "
        "{ const a = new SharedArrayBuffer(32 << 20); new Uint8Array(a).fill(1); held.push(a); }"
    ),
    # threads of the run's process, each with its own heap and buffers
    "worker_threads": (
        "const { Worker } = require('worker_threads');\n"
        "const workers = [];\n"
        "for (let i = 0; i < 4; i++) workers.push(new Promise((ok, no) => {\n"
        "  const w = new Worker(`const {parentPort} = require('worker_threads'); const held = [];"
        " for (let i = 0; i < ${Math.ceil(N / 4)}; i++) held.push(Buffer.alloc(32 << 20, 1));"
        " parentPort.postMessage(held.length); setInterval(() => {}, 1000);`, {eval: true});\n"
        "  w.on('message', (m) => ok(w)); w.on('error', no); }));\n"
        "const started = await Promise.all(workers);"
    ),
    # WebAssembly memory grown page by page (64 KiB) and touched
    "wasm": (
        "const held = []; for (let i = 0; i < N; i++) {\n"
        "  const m = new WebAssembly.Memory({initial: 512, maximum: 512});\n"
        "  new Uint8Array(m.buffer).fill(1); held.push(m); }"
    ),
}


def _memory_program(kind: str, mib: int) -> str:
    return (
        "console.log('before');\n"
        + MEMORY[kind].replace("N", str(mib // 32))
        + "\nconsole.log('held');\n'held'\n"
    )


@NEEDS_MEMORY_CGROUP
@pytest.mark.parametrize("kind", list(MEMORY))
@BOTH_AT_EVERY_LEVEL
def test_memory_node_holds_outside_its_heap_is_bounded_by_memory_bytes(hostile, level, warm, kind):
    limits = Limits(wall_seconds=30, kill_grace_seconds=0.3, memory_bytes=256 * _MIB)
    r = ts(hostile, _memory_program(kind, 768), level, warm, limits)
    assert r.status in ("worker_exit", "exception"), (r.status, r.message, r.stderr[-500:])
    if r.status == "worker_exit":
        assert "memory_bytes" in r.error.evalue, r.message
    assert r.stdout == "before\n", r.stdout
    # Far below the 768 MiB asked for. The peak is the larger of the cgroup's and the RSS,
    # which counts Node's own mapped text (file pages charged elsewhere): up to ~290 MiB.
    assert r.usage["peak_memory_bytes"] <= 320 * _MIB, r.usage


@NEEDS_MEMORY_CGROUP
@pytest.mark.parametrize("kind", list(MEMORY))
def test_the_memory_attacks_hold_what_they_say_under_a_looser_bound(hostile, kind):
    # The control: the same programs do hold their memory when the bound allows it.
    limits = Limits(wall_seconds=30, kill_grace_seconds=0.3, memory_bytes=1024 * _MIB)
    r = ts(hostile, _memory_program(kind, 384), "process", False, limits)
    assert r.status == "ok" and r.value == "held", (r.status, r.message, r.stderr[-500:])
    assert r.usage["peak_memory_bytes"] >= 384 * _MIB, r.usage


# -- budgets: files, descriptors, output ----------------------------------------------------------

_FILE_BUDGETS = r"""
// (relative paths: at process a Node run's uid may not search the run directory's parents)
const tmp = require('path').relative(process.cwd(), require('os').tmpdir()) || '.';
for (const [where, path] of [['cwd', 'big.bin'], ['tmp', tmp + '/big2.bin']]) {
  const fd = fs.openSync(path, 'w');
  attempt('fill_' + where, () => { for (;;) fs.writeSync(fd, Buffer.alloc(65536, 120)); });
  fs.closeSync(fd);
  out['size_' + where] = fs.statSync(path).size;
}
const fds = [];
attempt('open_files', () => { for (let i = 0; i < 5000; i++) fds.push(fs.openSync('/dev/null', 'r')); return fds.length; });
out.opened = fds.length;
for (const fd of fds) fs.closeSync(fd);
"""


@BOTH_AT_EVERY_LEVEL
def test_file_and_descriptor_budgets_hold_for_a_typescript_program(hostile, level, warm):
    limits = Limits(
        wall_seconds=20, kill_grace_seconds=0.3, max_file_bytes=1_000_000, max_open_files=64
    )
    got = attack(hostile, level, warm, _FILE_BUDGETS, limits=limits)
    assert got["fill_cwd"] == got["fill_tmp"] == "err:EFBIG", got
    assert got["size_cwd"] == got["size_tmp"] == 1_000_000, got
    assert got["open_files"] == "err:EMFILE" and 0 < got["opened"] < 64, got


@pytest.mark.parametrize(
    ("flood", "out_bytes", "err_bytes"),
    [
        ("for (let i = 0; i < 100000; i++) console.log('line', i);", 1_088_890, 0),
        ("for (let i = 0; i < 100000; i++) process.stdout.write('no newline ');", 1_100_000, 0),
        (
            "const fs = require('fs'); "
            "for (let i = 0; i < 10000; i++) fs.writeSync(1, 'raw bytes '.repeat(10));",
            1_000_000,
            0,
        ),
        (
            "const fs = require('fs'); for (let i = 0; i < 10000; i++) "
            "{ process.stderr.write('e'.repeat(50)); fs.writeSync(1, 'o'.repeat(50)); }",
            500_000,
            500_000,
        ),
    ],
    ids=["console-lines", "no-newlines", "raw-fd1", "mixed"],
)
@pytest.mark.parametrize("warm", [True, False], ids=["warm", "cold"])
def test_an_output_flood_keeps_head_and_tail_with_one_marker_counting_the_rest(
    hostile, flood, out_bytes, err_bytes, warm
):
    limit = 10_000
    r = ts(
        hostile,
        f"console.log('before');\n{flood}\nconsole.log('after');\n'survived'",
        "process",
        warm,
        Limits(wall_seconds=30, kill_grace_seconds=0.3, max_output_bytes=limit),
    )
    assert r.status == "ok" and r.value == "survived", (r.status, r.message)
    cut = r.output_cut
    marker = cut["text"]
    combined = r.stdout + r.stderr
    assert combined.count(marker) == 1 and marker.startswith("\n[kernelgate: ")
    streams = [o for o in r.outputs if o["output_type"] == "stream"]
    assert sum(o["text"] == marker for o in streams) == 1  # one marker in the notebook too
    assert len(combined.replace(marker, "").encode()) <= limit
    assert r.stdout.startswith("before\n")
    if "writeSync" not in flood:  # (raw fd 1 and fd 3 are not ordered with each other)
        assert r.stdout.endswith("after\n")  # the tail is kept
    # What is kept plus what is counted as cut is all the program wrote, per stream.
    written = {"stdout": out_bytes + len("before\nafter\n"), "stderr": err_bytes}
    for name in ("stdout", "stderr"):
        text = getattr(r, name).replace(marker, "")
        assert len(text.encode()) + cut.get(name, {}).get("bytes", 0) == written[name]


# -- teardown: trees the program leaves ---------------------------------------------------------

_TREE = r"""
// Relative paths only: the tree is far deeper than PATH_MAX (uv_cwd fails past it).
fs.mkdirSync('deep');
process.chdir('deep');
for (let i = 0; i < ARGS.depth; i++) { fs.mkdirSync('d'); process.chdir('d'); }
fs.writeFileSync('leaf', 'x');
fs.symlinkSync('/etc/passwd', 'to-host');
attempt('fifo', () => cp.execFileSync('/usr/bin/mkfifo', ['fifo']).toString());
for (let i = 0; i < ARGS.depth; i++) { process.chdir('..'); if (ARGS.zero) fs.chmodSync('d', 0); }
process.chdir('..');
if (ARGS.zero) fs.chmodSync('deep', 0);
out.made = ARGS.depth;
out.fifo = out.fifo || 'none';
"""


@pytest.mark.parametrize("zero", [False, True], ids=["modes-kept", "mode-000"])
@BOTH_AT_EVERY_LEVEL
def test_a_deep_tree_a_typescript_program_leaves_is_gone_after_the_run(hostile, level, warm, zero):
    limits = Limits(wall_seconds=60, kill_grace_seconds=0.3, cpu_seconds=30)
    got = attack(hostile, level, warm, _TREE, {"depth": 3000, "zero": zero}, limits=limits)
    assert got["made"] == 3000, got
    # the hostile fixture: no run directory is left once the gateway is closed


# -- the host is the authority --------------------------------------------------------------------


def _frame(msg_type: str, content: dict[str, Any]) -> str:
    return json.dumps(
        {"header": {"msg_type": msg_type}, "parent_header": {}, "metadata": {}, "content": content}
    )


FORGERIES = {
    "garbage": ("fs.writeSync(3, '\\u0000garbage\\n')", "not valid UTF-8 JSON"),
    # the kernel's own reply then completes the line: not JSON
    "partial-frame": ("fs.writeSync(3, '{\"partial\": ');\nreturn 1", "not valid UTF-8 JSON"),
    "host-message": (
        f"fs.writeSync(3, {_frame('execute_request', {'code': '1'})!r} + '\\n')",
        "unexpected message type 'execute_request'",
    ),
    "comm-open": (
        f"fs.writeSync(3, {_frame('comm_open', {})!r} + '\\n')",
        "unexpected message type 'comm_open'",
    ),
    "bad-stream": (
        f"fs.writeSync(3, {_frame('stream', {'name': 'stdin', 'text': 'x'})!r} + '\\n')",
        "stream name must be",
    ),
    "oversized": ("fs.writeSync(3, 'x'.repeat(300000))", "max_frame_bytes=200000"),
    "deep-json": ("fs.writeSync(3, '['.repeat(150000) + '\\n')", "nested too deeply"),
}


@pytest.mark.parametrize("name", list(FORGERIES))
@pytest.mark.parametrize("warm", [True, False], ids=["warm", "cold"])
def test_forged_fd3_traffic_from_a_typescript_program_ends_the_run_as_protocol(hostile, name, warm):
    forge, expect = FORGERIES[name]
    src = (
        "const fs = require('fs');\nconsole.log('before');\nawait tools.add(1, 2);\n"
        f"{forge};\nawait new Promise((ok) => setTimeout(ok, 30000));\n"
    )
    limits = Limits(
        wall_seconds=30, kill_grace_seconds=0.3, max_frame_bytes=200_000, max_value_bytes=1000
    )
    r = ts(hostile, src, "process", warm, limits)
    assert r.status == "protocol", (r.status, r.message)
    assert expect in r.error.evalue and "fd 3" in r.error.evalue, r.error.evalue
    assert r.duration_s < SLACK


_FORGED_REPLY = r"""
const fs = require('fs');
console.log('ran');
const end = process.cpuUsage().user + 300000;
while (process.cpuUsage().user < end) {}
const held = Buffer.alloc(64 << 20, 1);
fs.writeSync(3, JSON.stringify({header: {msg_type: 'execute_reply'}, parent_header: {},
  metadata: {kernelgate: ARGS.kernelgate}, content: ARGS.content}) + '\n');
await new Promise((ok) => setTimeout(ok, 30000));
"""


@pytest.mark.parametrize("warm", [True, False], ids=["warm", "cold"])
def test_a_typescript_program_cannot_claim_sandbox_unavailable(hostile, warm):
    content = {
        "status": "error",
        "execution_count": 1,
        "ename": "SandboxUnavailable",
        "evalue": "forged",
        "traceback": [],
    }
    forged = {"content": content, "kernelgate": {"status": "sandbox_unavailable"}}
    src = f"const ARGS = {json.dumps(forged)};\n" + _FORGED_REPLY
    r = ts(hostile, src, "process", warm, FAST)
    assert r.status == "protocol" and "sandbox_unavailable" in r.error.evalue, r.message
    assert r.stdout == "ran\n" and r.isolation == "process"


@pytest.mark.parametrize("warm", [True, False], ids=["warm", "cold"])
def test_forged_usage_from_a_typescript_program_is_labelled_and_the_host_measures(hostile, warm):
    usage = {"cpu_user_s": 0.0, "cpu_system_s": 0.0, "peak_memory_bytes": 1}
    content = {"status": "ok", "execution_count": 1, "user_expressions": {}, "payload": []}
    forged = {"content": content, "kernelgate": {"status": "ok", "usage": usage}}
    src = f"const ARGS = {json.dumps(forged)};\n" + _FORGED_REPLY
    r = ts(hostile, src, "process", warm, FAST)
    assert r.status == "ok", (r.status, r.message)
    assert r.usage["measured_by"] == "host"
    assert r.usage.get("child_reported", {}).get("peak_memory_bytes", 1) == 1
    assert r.usage["cpu_user_s"] + r.usage["cpu_system_s"] >= 0.25, r.usage
    assert r.usage["peak_memory_bytes"] >= 64 << 20, r.usage


# -- the same attacks from an unprivileged host --------------------------------------------------

# As uid 65533 (tests/hardening/asuser.py): the run has the host's uid (process) or maps it
# (namespaces); the type-stripping helper is a Node process of that same uid, unconfined,
# whose inspector SIGUSR1 would open on the host's loopback (code execution as the host).
_AS_USER_HOST = """
ATTACK = ARGS["attack"]


def host_pid() -> int:
    return os.getpid()


async def main():
    made = []

    async def helper_pid() -> int:
        return made[0].runtime._transformers[asyncio.get_running_loop()].pid

    async with Gateway(language="typescript", sandbox=ARGS["level"], strict=True,
                       pool_size=1 if ARGS["warm"] else 0, tmp_dir=ARGS["tmp_dir"], limits=FAST,
                       env={"SECRET": "kg-in-the-env"},
                       bindings={"host_pid": host_pid, "helper_pid": helper_pid}) as gw:
        made.append(gw)
        if ARGS["warm"]:
            await warmed(gw)
        r = await gw.run(ATTACK)
        helper = gw.runtime._transformers[asyncio.get_running_loop()]
        said = bytes(helper._stderr).decode(errors="replace")
        alive = helper.pid is not None
    return {**encode(r), "helper_said": said, "helper_alive": alive}

print(json.dumps(asyncio.run(main())))
"""

_AS_USER_ATTACK = r"""
const fs = require('fs');
const net = require('net');
const out = {uid: process.getuid()};
function attempt(name, fn) {
  try { out[name] = 'ok:' + String(fn()).slice(0, 80); } catch (e) { out[name] = 'err:' + (e.code || e.name); }
}
attempt('core_pattern', () => fs.writeFileSync('/proc/sys/kernel/core_pattern', '|/bin/false'));
attempt('root_cgroup', () => fs.writeFileSync('/sys/fs/cgroup/pids/cgroup.procs', String(process.pid)));
attempt('home_plant', () => fs.writeFileSync(HOME + '/kg-planted.js', 'x'));
attempt('host_fd', () => fs.writeSync(HOST_FD, 'x'));
attempt('var_tmp', () => fs.writeFileSync('/var/tmp/kg-cross-run-ts', 'x'));
out.fds = fs.readdirSync('/proc/self/fd').map(Number).sort((a, b) => a - b);
out.env = Object.keys(process.env).sort();
const host = await tools.host_pid();
const helper = await tools.helper_pid();
for (const [who, pid] of [['host', host], ['helper', helper]]) {
  attempt(who + '_environ', () => fs.readFileSync(`/proc/${pid}/environ`, 'latin1'));
  attempt(who + '_mem', () => { fs.closeSync(fs.openSync(`/proc/${pid}/mem`, 'r')); return 'opened'; });
  attempt(who + '_signal', () => process.kill(pid, 0));
}
attempt('helper_sigusr1', () => process._debugProcess(helper));
out.inspector = await new Promise((ok) => {
  const s = net.connect({host: '127.0.0.1', port: 9229});
  s.on('connect', () => { s.destroy(); ok('ok:connected'); });
  s.on('error', (e) => ok('err:' + e.code));
  setTimeout(() => { s.destroy(); ok('err:TIMEOUT'); }, 2000);
});
out
"""


@where(control=False)
@pytest.mark.timeout(150)
def test_the_typescript_attacks_from_an_unprivileged_host(as_user, level, warm):
    from .asuser import HOST_FD

    attack = _AS_USER_ATTACK.replace("HOST_FD", str(HOST_FD)).replace(
        "HOME", json.dumps(as_user.home)
    )
    planted = ["/var/tmp/kg-cross-run-ts", os.path.join(as_user.home, "kg-planted.js")]
    try:
        r = as_user.run_script(
            _AS_USER_HOST, {"attack": attack, "level": level, "warm": warm}, timeout=120
        )
        left = [p for p in planted if os.path.exists(p)]
    finally:
        for path in planted:
            if os.path.exists(path):
                os.unlink(path)
    assert r["status"] == "ok", (r["message"], r["stdout"])
    assert r["isolation"] == level and r["warm"] is warm, r
    v = r["value"]
    assert r["helper_alive"] and "Debugger listening" not in r["helper_said"], r["helper_said"]
    assert v["inspector"].startswith("err:"), v
    assert HOST_FD not in v["fds"] and max(v["fds"]) < 20 and v["host_fd"] == "err:EBADF", v
    assert "SECRET" in v["env"] and not any(k.startswith("NODE_") for k in v["env"]), v["env"]
    if level == "process":
        # No mount namespace and the host's uid: its own files are the program's
        # (documented), and world-writable directories too.
        assert v.pop("home_plant").startswith("ok:") and v.pop("var_tmp").startswith("ok:"), v
        assert v["uid"] == 65533, v
        if SUPPORT.landlock_abi < 6:
            pytest.skip(
                "at 'process' a non-root host shares its uid: landlock ABI 6 scoping needed"
            )
    else:
        assert left == [], left
        assert v["uid"] == 0, v
    for name in ("fds", "env", "uid", "inspector", "host_fd"):
        v.pop(name)
    assert {k: x for k, x in v.items() if x.startswith("err:")} == v, json.dumps(v, indent=1)


# -- SIGUSR1: Node's inspector, opened by a signal -------------------------------------------------
#
# SIGUSR1 makes a Node process open its inspector on 127.0.0.1:9229, and the inspector runs
# whatever code the side that connects sends. Who may signal a run's Node or the host's
# type-stripping helper is the sandbox's business (other uids, pid namespaces, landlock's
# scope: the attacks above); these check that the signal opens nothing even when it arrives
# (a non-root host at process level on a kernel without landlock ABI 6, where the program
# shares the uid of both and the host's network).

_WAIT_FOR_INSPECTOR = r"""
const inspector = require('inspector');
await tools.signal_me(process.pid);
let url = inspector.url() || null;
for (let i = 0; i < 40 && url === null; i++) {
  await new Promise((ok) => setTimeout(ok, 50));
  url = inspector.url() || null;
}
({url})
"""


def _signal(pid: int) -> str:
    os.kill(pid, signal.SIGUSR1)
    return "sent"


@pytest.mark.parametrize("warm", [True, False], ids=["warm", "cold"])
def test_sigusr1_opens_no_inspector_in_a_runs_node(hostile, warm):
    r = ts(hostile, _WAIT_FOR_INSPECTOR, "process", warm, bindings={"signal_me": _signal})
    assert r.status == "ok", (r.status, r.message)
    assert r.value == {"url": None}, r.value
    assert "Debugger listening" not in r.stderr, r.stderr


def test_sigusr1_opens_no_inspector_in_the_type_stripping_helper():
    from kernelgate.gateway.jsprogram import ProgramTransformer

    assert NODE is not None

    async def body() -> tuple[str, str]:
        async with ProgramTransformer(NODE.executable) as helper:
            first = await helper.transform("const a: number = 1;\na", "typescript")
            assert helper.pid is not None
            os.kill(helper.pid, signal.SIGUSR1)
            said = ""
            for _ in range(40):  # the inspector says so on stderr within ms when it opens
                said = bytes(helper._stderr).decode(errors="replace")
                if "Debugger listening" in said:
                    break
                await asyncio.sleep(0.05)
            again = await helper.transform("const b: number = 2;\nb", "typescript")
            assert "2" in again and "1" in first
            return said, again

    said, _ = asyncio.run(body())
    assert "Debugger listening" not in said, said


# -- another run's files and processes ---------------------------------------------------------------

_RUN_A = r"""
require('fs').writeFileSync('secret.txt', 'run A secret');
await tools.hold(process.cwd());
'A done'
"""

_RUN_B = (
    r"""
const t = await tools.targets();
out.step_targets = JSON.stringify(t);
attempt('a_file', () => fs.readFileSync(t.dir + '/secret.txt', 'utf8'));
attempt('a_dir', () => fs.readdirSync(t.dir).join(','));
attempt('a_plant', () => { fs.writeFileSync(t.dir + '/planted.js', 'x'); return 'planted'; });
attempt('a_environ', () => fs.readFileSync(`/proc/${t.pid}/environ`, 'latin1'));
attempt('a_mem', () => { fs.closeSync(fs.openSync(`/proc/${t.pid}/mem`, 'r')); return 'opened'; });
attempt('a_fd3', () => fs.readlinkSync(`/proc/${t.pid}/fd/3`));
attempt('a_signal', () => process.kill(t.pid, 0));
attempt('a_sigstop', () => { process.kill(t.pid, 'SIGSTOP'); process.kill(t.pid, 'SIGCONT'); return 'stopped'; });
"""
    + native_to_out(
        """
pid = ${t.pid}
res["a_ptrace_seize"] = sc(101, 0x4206, pid, 0, 0)
buf = ctypes.create_string_buffer(8)
local = (ctypes.c_void_p * 2)(ctypes.addressof(buf), 8)
remote = (ctypes.c_void_p * 2)(0x400000, 8)
res["a_process_vm_readv"] = sc(310, pid, ctypes.addressof(local), 1, ctypes.addressof(remote), 1, 0)
pidfd = libc.syscall(ctypes.c_long(434), ctypes.c_long(pid), ctypes.c_long(0))
res["step_pidfd_open"] = "ok" if pidfd >= 0 else errno.errorcode[ctypes.get_errno()]
res["a_pidfd_getfd"] = sc(438, pidfd, 3, 0) if pidfd >= 0 else "ESRCH"
"""
    )
    + "await tools.done();\n"
)


class _Rendezvous:
    """Run A waits in ``hold`` (its run directory known) until run B is ``done``; B asks
    for A's ``targets``: its run directory and the host pid of its Node (by its cwd)."""

    def __init__(self) -> None:
        self.a_dir: str | None = None
        self.a_ready = asyncio.Event()
        self.b_done = asyncio.Event()

    async def hold(self, cwd: str) -> str:
        self.a_dir = cwd
        self.a_ready.set()
        await asyncio.wait_for(self.b_done.wait(), 60)
        return "released"

    async def targets(self) -> dict[str, Any]:
        await asyncio.wait_for(self.a_ready.wait(), 60)
        return {"dir": self.a_dir, "pid": self.node_pid()}

    def node_pid(self) -> int:
        for pid in (int(p) for p in os.listdir("/proc") if p.isdigit()):
            try:
                if os.readlink(f"/proc/{pid}/cwd") == self.a_dir and "node" in os.readlink(
                    f"/proc/{pid}/exe"
                ):
                    return pid
            except OSError:
                continue
        raise AssertionError(f"no node process in {self.a_dir}")

    async def done(self) -> str:
        self.b_done.set()
        return "done"

    def bindings(self) -> dict[str, Any]:
        return {"hold": self.hold, "targets": self.targets, "done": self.done}


@where(process_needs_root=True)
def test_a_concurrent_typescript_run_cannot_reach_another_runs_files_or_processes(
    hostile, level, warm
):
    meet = _Rendezvous()
    b_program = script(_RUN_B, {}) + "\nout"

    async def control() -> dict[str, Any]:
        # Run B as a plain Node script outside every sandbox, against a live run A.
        t = await meet.targets()
        body = _RUN_B.replace("await tools.targets()", json.dumps(t))
        body = body.replace("await tools.done();", "")
        try:
            return await asyncio.to_thread(attack, hostile, None, False, body)
        finally:
            await meet.done()

    async def both() -> tuple[RunResult, Any]:
        gw = hostile.gateway(
            language="typescript",
            sandbox=level or "process",
            strict=True,
            pool_size=2 if warm else 0,
            bindings=meet.bindings(),
        )
        try:
            if warm:
                first = hostile.record(await gw.run("'warm-up'"))
                assert first.ok, first.message
                await gw._pool.filled()  # type: ignore[union-attr]
            a_run = asyncio.ensure_future(gw.run(_RUN_A))
            b = await (control() if level is None else gw.run(b_program))
            a = hostile.record(await a_run)
            if isinstance(b, RunResult):
                hostile.record(b)
            return a, b
        finally:
            await gw.runtime.end_loop()

    a, b = asyncio.run(both())
    assert a.status == "ok" and a.value == "A done", (a.status, a.message)
    assert a.usage["warm"] is warm and (level is None or b.usage["warm"] is warm)
    if level is None:
        for key in ("a_file", "a_plant", "a_environ", "a_mem", "a_pidfd_getfd", "a_sigstop"):
            assert b[key].startswith("ok:"), (key, b)
        return
    assert b.status == "ok", (b.status, b.message, b.stderr[-1000:])
    got = b.value
    assert {k: v for k, v in attempts(got).items() if not refused(v)} == {}, json.dumps(
        got, indent=1
    )


# -- a killed host takes its TypeScript runs with it ------------------------------------------------

_HOST_THAT_DIES = """
import asyncio, json, sys
from kernelgate import Gateway, Limits

warm, tmp_dir, marker, level = sys.argv[1] == "warm", sys.argv[2], sys.argv[3], sys.argv[4]
# Each sleeper says when it is up (its new command line is readable from /proc only then).
sleeper = f"['-c', 'echo 1; sleep 600', {marker!r}]"
program = (
    "const cp = require('child_process');\\n"
    "const up = (c) => new Promise((ok) => c.stdout.once('data', ok));\\n"
    f"const a = cp.spawn('/bin/sh', {sleeper}, {{stdio: ['ignore', 'pipe', 'ignore']}});\\n"
    f"const b = cp.spawn('/bin/sh', {sleeper}, {{stdio: ['ignore', 'pipe', 'ignore'], detached: true}});\\n"
    "await Promise.all([up(a), up(b)]);\\n"
    "console.log('up');\\n"
    "for (;;) {}\\n"
)


async def main():
    limits = Limits(wall_seconds=60, cpu_seconds=60)
    gw = Gateway(language="typescript", tmp_dir=tmp_dir, pool_size=1 if warm else 0,
                 limits=limits, sandbox=level, strict=True)
    if warm:
        await gw.run("1")
        await gw._pool.filled()
    up = asyncio.get_running_loop().create_future()
    task = asyncio.ensure_future(
        gw.run(program, on_output=lambda o: up.done() or up.set_result(o))
    )
    await up
    run_id = next(iter(gw._runs)).run_id
    pool = f"nodepool-{gw._pool._token}-" if gw._pool is not None else "no-pool"
    print(json.dumps({"run_id": run_id, "pool": pool}), flush=True)
    await task


asyncio.run(main())
"""


@pytest.mark.parametrize("warm", [True, False], ids=["warm", "cold"])
@pytest.mark.parametrize(
    "level",
    [pytest.param(level, marks=needs_level(level), id=level) for level in LEVELS[1:]],
)
def test_killing_the_host_takes_its_typescript_run_with_it(hostile, tmp_path, level, warm):
    # At process only the child has the death signal (docs/security.md): namespace levels.
    base = tmp_path / "host-runs"
    base.mkdir()
    host = subprocess.Popen(
        [
            sys.executable,
            "-c",
            _HOST_THAT_DIES,
            "warm" if warm else "cold",
            str(base),
            hostile.marker,
            level,
        ],
        stdout=subprocess.PIPE,
    )
    try:
        assert host.stdout is not None
        line = host.stdout.readline()  # the program is up, with its two grandchildren
        assert line, "the host script ended before the program was up"
        names = json.loads(line)
        # the two shells (and, for a moment, a fork of one about to exec sleep)
        assert len(set(processes_with(hostile.marker)) - {host.pid}) >= 2
    finally:
        host.kill()  # SIGKILL: no cleanup of any kind in the host
        host.wait()
        if host.stdout is not None:
            host.stdout.close()
    deadline = time.monotonic() + 10
    while processes_with(hostile.marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert processes_with(hostile.marker) == []
    # What the dead host would have removed: its cgroups, once the killed processes are gone.
    for path in kernelgate_cgroups({names["run_id"], names["pool"]}):
        while True:
            try:
                os.rmdir(path)  # EBUSY while a process is still inside
                break
            except OSError as exc:
                if exc.errno == errno.ENOENT:
                    break
                if exc.errno != errno.EBUSY or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)


# -- the host is the authority, against a program that took the kernel's own client ----------------
#
# The Node kernel keeps its fd-3 client in closures, but the inspector module opens them: a
# program walks [[Scopes]] from a binding to the CallClient and then writes call frames that
# are numbered and addressed as the kernel's own, past every check the child makes.

_TAKE_THE_CLIENT = r"""
const fs = require('fs');
const inspector = require('inspector');
const session = new inspector.Session();
session.connect();
function post(method, params) {
  let result, error;
  session.post(method, params, (e, r) => { error = e; result = r; });
  if (error) throw error;
  return result;
}
globalThis.__kgProbe = tools.add;
const seen = new Set();
let clientId = null;
function walk(objectId, depth) {
  if (depth > 6 || seen.has(objectId) || clientId) return;
  seen.add(objectId);
  const r = post('Runtime.getProperties', {objectId, ownProperties: true});
  for (const p of [...(r.internalProperties || []), ...(r.result || [])]) {
    const v = p.value;
    if (!v || !v.objectId) continue;
    if (p.name === 'client' && v.className === 'CallClient') { clientId = v.objectId; return; }
    if (!/^(__proto__|prototype|constructor)$/.test(p.name)) walk(v.objectId, depth + 1);
  }
}
walk(post('Runtime.evaluate', {expression: 'globalThis.__kgProbe'}).result.objectId, 0);
if (clientId === null) throw new Error('the kernel client was not found');
post('Runtime.callFunctionOn', {objectId: clientId, functionDeclaration: 'function () { globalThis.__kgClient = this; }'});
const client = globalThis.__kgClient;
session.disconnect();
function frame(name, args, kwargs) {
  const id = client.conn.nextCallId;
  return [id, client.conn.send('comm_msg call', {
    comm_id: client.conn.commId, data: {method: 'call', id, namespace: 'tools', name, args, kwargs}})];
}
function forged(name, args, kwargs) {
  const [id, bytes] = frame(name, args, kwargs);
  return new Promise((ok) => { client.pending[id] = {settle: ok}; client.write(bytes); });
}
"""


@pytest.mark.parametrize("warm", [True, False], ids=["warm", "cold"])
def test_forged_calls_that_do_not_fit_never_reach_policy_or_binding(hostile, warm):
    seen: list[object] = []

    def add(a: int, b: int) -> int:
        seen.append(("binding", a, b))
        return a + b

    def policy(namespace: str, name: str, args: Any, kwargs: Any) -> bool:
        seen.append(("policy", args, kwargs))
        return True

    src = _TAKE_THE_CLIENT + (
        "const out = [];\n"
        "try { await tools.add(1, 2, 3); } catch (e) { out.push('child refused: ' + e.name); }\n"
        "for (const [a, k] of [[[1, 2, 3], {}], [[1], {c: 2}], [[], {}]]) {\n"
        "  const reply = await forged('add', a, k);\n"
        "  out.push(reply.ok ? 'answered' : 'host refused: ' + reply.ename + ' ' + reply.evalue);\n"
        "}\n"
        "out.push(await tools.add(2, 3));\nout\n"
    )
    gw = hostile.gateway(
        language="typescript", bindings={"add": add}, policy=policy, pool_size=1 if warm else 0
    )
    r = hostile.run(src, FAST, gateway=gw, warm=warm)
    assert r.status == "ok", (r.status, r.message, r.stderr[-1000:])
    lines = r.value
    assert lines[0] == "child refused: TypeError", lines
    assert all(line.startswith("host refused: TypeError tools.add()") for line in lines[1:4]), lines
    assert lines[4] == 5
    assert seen == [("policy", [2, 3], {}), ("binding", 2, 3)]  # the forged ones: neither
    assert [c.error.ename for c in r.calls if not c.ok] == ["TypeError"] * 3


def _rss_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS in /proc/self/status")


@pytest.mark.parametrize("warm", [True, False], ids=["warm", "cold"])
def test_a_forged_call_flood_past_max_calls_ends_as_protocol_and_is_not_kept(hostile, warm):
    # 250 call frames of 4 MiB each, numbered as the kernel's own, with max_calls=5.
    src = _TAKE_THE_CLIENT + (
        "const big = 'x'.repeat(4 << 20);\nlet sent = 0;\n"
        "for (let i = 0; i < 250; i++) {\n"
        "  const [, bytes] = frame('echo', [big], {});\n"
        "  try { client.write(bytes); } catch (e) { break; }\n"
        "  sent += 1;\n"
        "}\n"
        "console.log('sent', sent);\nsent\n"
    )
    limits = Limits(
        wall_seconds=30,
        kill_grace_seconds=0.3,
        cpu_seconds=20,
        max_calls=5,
        max_frame_bytes=5 << 20,
        memory_bytes=2 << 30,
    )
    before = _rss_bytes()
    r = ts(hostile, src, "process", warm, limits)
    grown = _rss_bytes() - before
    assert r.status == "protocol", (r.status, r.message)
    assert "past max_calls=5" in r.error.evalue, r.error.evalue
    assert len(r.calls) <= 5
    assert grown < 200 << 20, f"the host grew by {grown >> 20} MiB"


# -- other architectures' system calls, from what Node execs ----------------------------------------

_I386 = (
    "import ctypes, mmap\n"
    "CODE = bytes([0x53, 0xB8, 0x67, 0x01, 0, 0, 0xBB, 1, 0, 0, 0, 0xB9, 1, 0, 0, 0,\n"
    "              0x31, 0xD2, 0xCD, 0x80, 0x5B, 0xC3])\n"
    "m = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)\n"
    "m.write(CODE)\n"
    "print(ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.addressof(ctypes.c_char.from_buffer(m)))())\n"
)
_X32 = (
    "import ctypes\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "libc.syscall.restype = ctypes.c_long\n"
    "print(libc.syscall(ctypes.c_long(0x40000000 | 41), ctypes.c_long(1), ctypes.c_long(1), "
    "ctypes.c_long(0)))\n"
)
_FOREIGN = r"""
for (const [name, code] of Object.entries(ARGS.codes)) {
  const r = cp.spawnSync('/usr/bin/python3', ['-I', '-S', '-c', code], {encoding: 'utf8'});
  out[name] = r.signal ? 'killed:' + r.signal : 'exit:' + r.status + ':' + String(r.stdout).trim();
}
"""


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="the i386 and x32 ABIs are x86_64's")
@where()
def test_foreign_abi_system_calls_kill_what_node_execs(hostile, level, warm):
    got = attack(hostile, level, warm, _FOREIGN, {"codes": {"i386": _I386, "x32": _X32}})
    if level is None:  # the kernel runs them: int 0x80 socket(AF_UNIX) gives an fd
        assert got["i386"].startswith("exit:0:") and int(got["i386"].split(":")[2]) >= 0, got
        assert got["x32"].startswith("exit:0:"), got  # ENOSYS where x32 is off: not killed
        return
    assert got == {"i386": "killed:SIGSYS", "x32": "killed:SIGSYS"}, got


# -- waits survive a stopped program ----------------------------------------------------------------


@BOTH_AT_EVERY_LEVEL
def test_a_self_stopping_typescript_program_ends_at_wall_seconds(hostile, level, warm):
    src = (
        "const cp = require('child_process');\n"
        f"cp.spawn('/bin/sh', ['-c', 'kill -STOP $$; sleep 600', {hostile.marker!r}],"
        " {stdio: 'ignore'});\n"
        "console.log('stopping');\nprocess.kill(process.pid, 'SIGSTOP');\n'resumed'\n"
    )
    limits = Limits(wall_seconds=2, kill_grace_seconds=0.3, cpu_seconds=10)
    r = ts(hostile, src, level, warm, limits)
    assert r.status == "timeout" and "wall_seconds" in r.error.evalue, (r.status, r.message)
    assert r.duration_s < 2 + SLACK


# -- SysV IPC: refused at process, private at the namespace levels ----------------------------------

_SYSV = native_to_out(
    """
key = 0x6B6A0000 + ${ARGS.tag}
shm = libc.shmget(key, 4096, 0o1000 | 0o666)
res["shmget"] = "ok" if shm >= 0 else errno.errorcode[ctypes.get_errno()]
mq = libc.syscall(ctypes.c_long(240), b"kg-hostile-node", 0o100 | 0o2, 0o600, None)  # the kernel takes no "/"
res["mq_open"] = "ok" if mq >= 0 else errno.errorcode[ctypes.get_errno()]
"""
)


def _sysv_keys() -> set[int]:
    with open("/proc/sysvipc/shm") as f:
        return {int(line.split()[0]) for line in f.readlines()[1:] if line.strip()}


@where()
def test_sysv_ipc_is_refused_at_process_and_private_at_namespace_levels(hostile, level, warm):
    tag = os.getpid() & 0xFFFF
    key = 0x6B6A0000 + tag
    try:
        got = attack(hostile, level, warm, _SYSV, {"tag": tag})
        during = key in _sysv_keys()
    finally:
        if key in _sysv_keys():  # the control's, on the host: remove it
            subprocess.run(["ipcrm", "-M", str(key)], check=False, capture_output=True)
        if os.path.exists("/dev/mqueue/kg-hostile-node"):
            os.unlink("/dev/mqueue/kg-hostile-node")
    if level is None:
        assert got["shmget"] == got["mq_open"] == "ok:" and during, got
        return
    if level == "process":  # no IPC namespace there: the filter refuses
        assert got["shmget"] == got["mq_open"] == "err:EPERM", got
    else:  # the run's own IPC namespace: made there, gone with it, never the host's
        assert got["shmget"] == "ok:", got
        # landlock keeps the namespace's mqueue file system out of reach too
        assert got["mq_open"] == ("ok:" if level == "namespaces" else "err:EACCES"), got
    assert key not in _sysv_keys() and not os.path.exists("/dev/mqueue/kg-hostile-node")


# -- /tmp and /dev/shm are the run's own; read_paths do grant reading -------------------------------

_SHARED = r"""
for (const dir of ['/tmp', '/dev/shm', '/var/tmp']) {
  attempt('write_' + dir, () => { fs.writeFileSync(dir + '/' + ARGS.name, 'from the run'); return 'written'; });
}
attempt('read_granted', () => fs.readFileSync(ARGS.granted, 'utf8'));
"""


@where(("namespaces", "namespaces+landlock"))
def test_shared_writable_directories_are_the_runs_own_and_read_paths_grant_reading(
    hostile, drop, level, warm
):
    name = f"kg-hostile-node-shared-{os.getpid()}"
    granted = os.path.join(drop, "secret.txt")
    try:
        got = attack(
            hostile, level, warm, _SHARED, {"name": name, "granted": granted}, read_paths=[drop]
        )
        on_host = [d for d in ("/tmp", "/dev/shm", "/var/tmp") if os.path.exists(f"{d}/{name}")]
    finally:
        for d in ("/tmp", "/dev/shm", "/var/tmp"):
            if os.path.exists(f"{d}/{name}"):
                os.unlink(f"{d}/{name}")
    assert got["read_granted"] == "ok:host secret\n", got
    if level is None:
        assert on_host == ["/tmp", "/dev/shm", "/var/tmp"], (on_host, got)
        return
    # /tmp and /dev/shm: private tmpfs, written and gone; /var/tmp: read-only.
    assert got["write_/tmp"] == got["write_/dev/shm"] == "ok:written", got
    assert refused(got["write_/var/tmp"]), got
    assert on_host == [], on_host


# -- the host's per-user counts are not the run's ----------------------------------------------------

_INOTIFY_HOLDER = (
    "import ctypes, sys\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "made = []\n"
    "while len(made) < 512:\n"
    "    fd = libc.inotify_init1(0)\n"
    "    if fd < 0:\n"
    "        break\n"
    "    made.append(fd)\n"
    "print(len(made), flush=True)\n"
    "sys.stdin.read()\n"
)


def _host_inotify() -> str:
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.inotify_init1(0)
    if fd < 0:
        return f"errno {ctypes.get_errno()}"
    os.close(fd)
    return "made"


@pytest.mark.skipif(not ROOT_HOST, reason="a root host's runs each have a uid of their own")
@where(control=False)
def test_a_typescript_run_cannot_use_up_the_hosts_per_user_counts(hostile, level, warm):
    # A process the program execs takes every inotify instance its user may have, and holds
    # them while the host makes one of its own (root's, charged machine-wide).
    src = (
        "const cp = require('child_process');\n"
        "const holder = cp.spawn('/usr/bin/python3', ['-I', '-S', '-c', CODE],"
        " {stdio: ['pipe', 'pipe', 'inherit']});\n"
        "const made = await new Promise((ok) => holder.stdout.once('data', (d) => ok(Number(String(d).trim()))));\n"
        "const host = await tools.host_inotify();\n"
        "holder.stdin.end();\n"
        "await new Promise((ok) => holder.on('exit', ok));\n"
        "[made, host]\n"
    ).replace("CODE", json.dumps(_INOTIFY_HOLDER))
    r = ts(hostile, src, level, warm, bindings={"host_inotify": _host_inotify})
    assert r.status == "ok", (r.status, r.message, r.stderr[-500:])
    made, host = r.value
    assert made >= 100, made  # the run reached its own limit
    assert host == "made", "the run used up the host's inotify instances"
