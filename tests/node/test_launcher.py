"""A Node child confined by the launcher (kernelgate/kernels/python/launcher.py), attacked
from JavaScript at every level, cold, as root (the asuser file: from an unprivileged host).

Each claim of docs/security.md that applies to a Node child has an attack here; where the
attack is shown to work, it is run once more on an unconfined Node (``confined=False``, the
control): the test can fail.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator

import pytest

from kernelgate.gateway.launch import NODE_KERNEL_DIR, LaunchCommand, spawn_launched_child
from kernelgate.gateway.process import ChildProcess
from kernelgate.kernels.python import package_root
from kernelgate.model.limits import Limits
from kernelgate.wire.connection import HOST, Connection
from kernelgate.wire.events import ExecuteRequest, OpenBindings
from tests.hardening.conftest import (
    ALL_LEVELS,
    NEEDS_LANDLOCK,
    ROOT_HOST,
    SUPPORT,
    at_levels,
)
from tests.node.attacks import NATIVE_PYTHON, PRELUDE
from tests.node.launched import (
    FAST,
    NODE,
    NODE_MISSING,
    NodeRun,
    run_script,
    script_dir,
    write_script,
)
from tests.procs import descendants, marker_for, pid_alive, processes_with

pytestmark = [
    pytest.mark.skipif(NODE is None, reason=f"needs Node.js >= 18: {NODE_MISSING}"),
    pytest.mark.skipif(
        not os.access(NATIVE_PYTHON, os.X_OK), reason=f"the native attacks need {NATIVE_PYTHON}"
    ),
]

#: The process-level case of a claim that holds there on a root host only (the run's own uid).
PROCESS_ON_ROOT = at_levels("process", "namespaces", "namespaces+landlock", process_needs_root=True)


@pytest.fixture
def base() -> Iterator[str]:
    """The runs' tmp_dir for one test (every run directory in it is gone after)."""
    path = tempfile.mkdtemp(prefix="kg-node-runs-")
    os.chmod(path, 0o755)
    yield path
    left = [n for n in os.listdir(path) if n.startswith("kernelgate-")]
    shutil.rmtree(path, ignore_errors=True)
    assert left == [], "run directories are left"


@pytest.fixture
def outside() -> Iterator[str]:
    """A host directory outside /tmp and every path Node reads: a secret any uid may read,
    and a directory any uid may write (only the sandbox stands in the way)."""
    path = tempfile.mkdtemp(prefix="kg-node-outside-", dir="/var/tmp")
    os.chmod(path, 0o755)
    with open(os.path.join(path, "secret.txt"), "w") as f:
        f.write("host secret\n")
    os.chmod(os.path.join(path, "secret.txt"), 0o644)
    os.mkdir(os.path.join(path, "drop"))
    os.chmod(os.path.join(path, "drop"), 0o1777)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def attack(body: str, level: str, base: str, confined: bool = True, **kwargs: object) -> dict:
    """Run PRELUDE + ``body`` through the launcher (or unconfined): its JSON answer."""
    ended = run_script(PRELUDE + body, level, base=base, confined=confined, **kwargs)  # type: ignore[arg-type]
    assert isinstance(ended.answer, dict), ended.why()
    return ended.answer


def refused(value: str) -> bool:
    return value.startswith("err:")


def attempts(got: dict) -> dict:
    """The attempts that must fail: not the steps towards them (``step_*``, e.g. a pidfd,
    which any process may open for a pid it sees)."""
    return {k: v for k, v in got.items() if not k.startswith("step_")}


# -- it runs, and is what the sandbox made it --------------------------------------------------

_SELF = r"""
const status = fs.readFileSync('/proc/self/status', 'utf8');
const field = (k) => (status.match(new RegExp('^' + k + ':\\s*(.*)$', 'm')) || [])[1];
const limits = fs.readFileSync('/proc/self/limits', 'utf8');
const limit = (k) => (limits.split('\n').find((l) => l.startsWith(k)) || '').slice(26).trim().split(/\s+/)[0];
setTimeout(async () => {
  fs.writeFileSync('made.txt', 'x');
  const again = await fs.promises.readFile('made.txt', 'utf8');
  const own = await new Promise((ok, no) => fs.readFile(__filename, 'utf8', (e, d) => e ? no(e) : ok(d)));
  process.stdout.write(JSON.stringify({
    pid: process.pid, uid: process.getuid(), cwd: process.cwd(), tmp: process.env.TMPDIR,
    again, own: own.length > 0,
    CapEff: field('CapEff'), CapPrm: field('CapPrm'), CapAmb: field('CapAmb'), CapBnd: field('CapBnd'),
    NoNewPrivs: field('NoNewPrivs'), Seccomp: field('Seccomp'),
    as: limit('Max address space'), nofile: limit('Max open files'), fsize: limit('Max file size'),
    cpu: limit('Max cpu time'), core: limit('Max core file size'),
  }) + '\n');
}, 5);
"""


@ALL_LEVELS
@pytest.mark.parametrize("io_uring", ["default", "UV_USE_IO_URING=1"])
def test_a_node_script_runs_at_every_level_as_the_sandbox_made_it(base, level, io_uring):
    env = {"UV_USE_IO_URING": "1"} if io_uring != "default" else {}
    ended = run_script(PRELUDE + _SELF, level, base=base, env=env)
    assert ended.returncode == 0, ended.why()
    got = ended.answer
    # timers, the thread pool's fs calls (io_uring denied: libuv fell back), stdout
    assert got["again"] == "x" and got["own"], got
    assert got["NoNewPrivs"] == "1" and got["Seccomp"] == "2", got
    assert got["CapEff"] == got["CapPrm"] == got["CapAmb"] == "0000000000000000", got
    # no RLIMIT_AS for V8; the other rlimits as for a Python child
    assert got["as"] == "unlimited", got
    assert got["nofile"] == str(FAST.max_open_files), got
    assert got["fsize"] == str(FAST.max_file_bytes), got
    assert got["cpu"] == str(int(FAST.cpu_seconds)), got
    assert got["core"] == "0", got
    if level == "process":
        assert got["tmp"] == got["cwd"], got
        if ROOT_HOST:
            assert got["uid"] >= 0x7B470000 or got["uid"] == 65534, got  # the run's own uid
    else:
        # pid 2 under the run's init, root of its user namespace without a capability
        assert got["pid"] == 2 and got["uid"] == 0 and got["tmp"] == "/tmp", got
        assert got["CapBnd"] == "0000000000000000", got


# -- descriptors: fds 0-3 only, fd 3 the socketpair --------------------------------------------

_FDS = r"""
const links = {};
for (const fd of fs.readdirSync('/proc/self/fd')) {
  try { links[fd] = fs.readlinkSync('/proc/self/fd/' + fd); } catch (e) { links[fd] = 'err:' + e.code; }
}
fs.writeSync(3, 'hello host\n');
out.links = links;
done();
"""


@ALL_LEVELS
def test_the_host_s_inheritable_fds_never_reach_node_and_fd3_is_the_socketpair(base, level):
    pipe_r, pipe_w = os.pipe()
    os.set_inheritable(pipe_w, True)
    listener = socket.create_server(("127.0.0.1", 0))
    listener.set_inheritable(True)
    try:
        host_links = {os.readlink(f"/proc/self/fd/{fd}") for fd in (pipe_w, listener.fileno())}
        scripts = script_dir(base)
        with NodeRun(level, base, read_paths=(scripts,)) as run:
            child = run.start(write_script(scripts, PRELUDE + _FDS))
            ended = run.finish()
            os.set_blocking(child.control.fileno(), True)
            child.control.settimeout(5)
            heard = child.control.recv(100)
        shutil.rmtree(scripts)
    finally:
        os.close(pipe_r)
        os.close(pipe_w)
        listener.close()
    assert ended.returncode == 0, ended.why()
    links = ended.answer["links"]
    assert not host_links & set(links.values()), (host_links, links)
    assert heard == b"hello host\n"
    assert links["0"] == "/dev/null", links


# -- files -------------------------------------------------------------------------------------

_READ = r"""
for (const [name, path] of Object.entries(ARGS.paths)) attempt(name, () => fs.readFileSync(path, 'utf8'));
done();
"""


@NEEDS_LANDLOCK
@pytest.mark.parametrize("confined", [True, False], ids=["launched", "unconfined-control"])
def test_host_files_outside_the_read_paths_cannot_be_read(base, outside, confined):
    paths = {
        "secret": os.path.join(outside, "secret.txt"),
        "passwd": "/etc/passwd",
        "hostname": "/etc/hostname",
        # the checkout around the kernel: a Python child reads sys.path, Node does not
        "project": os.path.join(package_root(), "pyproject.toml"),
    }
    got = attack(_READ, "namespaces+landlock", base, confined, args=[json.dumps({"paths": paths})])
    if confined:
        assert all(v == "err:EACCES" for v in got.values()), got
    else:
        assert all(v.startswith("ok:") for v in got.values()), got


_WRITE = r"""
for (const [name, path] of Object.entries(ARGS.paths)) attempt(name, () => { fs.writeFileSync(path, 'planted'); return path; });
attempt('run_dir', () => { fs.writeFileSync('mine.txt', 'ok'); return 'written'; });
done();
"""


@PROCESS_ON_ROOT
@pytest.mark.parametrize("confined", [True, False], ids=["launched", "unconfined-control"])
def test_writing_outside_the_run_directory_fails(base, outside, level, confined):
    paths = {
        "world_writable": os.path.join(outside, "drop", "planted.txt"),
        "var_tmp": f"/var/tmp/kg-node-planted-{os.getpid()}.txt",
        # a code path: the Node kernel's directory (or where it goes), the package
        "kernels": os.path.join(os.path.dirname(NODE_KERNEL_DIR), "planted.js"),
        "usr_bin": "/usr/bin/kg-node-planted",
    }
    try:
        got = attack(_WRITE, level, base, confined, args=[json.dumps({"paths": paths})])
    finally:
        for path in paths.values():
            if os.path.exists(path):
                os.unlink(path)
    assert got.pop("run_dir") == "ok:written", got
    if not confined:
        assert all(v.startswith("ok:") for v in got.values()), got
        return
    if level == "process":
        # The run's uid may write what any uid may (not promised at process), never root's.
        del got["world_writable"], got["var_tmp"]
    assert all(refused(v) for v in attempts(got).values()), json.dumps(got)


# -- the network and the host's sockets --------------------------------------------------------

_NET = r"""
(async () => {
  await attemptAsync('tcp', () => connectTo({host: '127.0.0.1', port: ARGS.port}));
  await attemptAsync('unix_path', () => connectTo({path: ARGS.path}));
  await attemptAsync('unix_abstract', () => connectTo({path: '\0' + ARGS.abstract}));
  done();
})();
"""


@ALL_LEVELS
@pytest.mark.parametrize("confined", [True, False], ids=["launched", "unconfined-control"])
def test_the_host_s_sockets_are_out_of_reach(base, outside, level, confined):
    tcp = socket.create_server(("127.0.0.1", 0))
    path = os.path.join(outside, "drop", "host.sock")
    unix = socket.socket(socket.AF_UNIX)
    unix.bind(path)
    os.chmod(path, 0o777)
    unix.listen()
    name = f"kg-node-abstract-{os.getpid()}-{level}"
    abstract = socket.socket(socket.AF_UNIX)
    abstract.bind(("\0" + name).encode().ljust(108, b"\0"))  # Node pads abstract names
    abstract.listen()
    try:
        args = {"port": tcp.getsockname()[1], "path": path, "abstract": name}
        got = attack(_NET, level, base, confined, args=[json.dumps(args)])
    finally:
        for s in (tcp, unix, abstract):
            s.close()
    if not confined:
        assert set(got.values()) == {"ok:connected"}, got
        return
    # Abstract unix sockets: socket(AF_UNIX) is EACCES at the namespace levels, and at
    # process landlock's scope (ABI 6+) refuses one made outside the run. A pathname socket
    # any uid may connect to, and the network, are not promised at process.
    assert refused(got["unix_abstract"]), got
    if level != "process":
        assert refused(got["unix_path"]) and refused(got["tcp"]), got


# -- other runs, the host, and their processes ------------------------------------------------

_NEIGHBOUR = r"""
require('fs').writeFileSync('secret.txt', 'run A secret');
process.stdout.write('ready\n');
setInterval(() => {}, 1000);
"""

_REACH = r"""
const pid = ARGS.pid;
attempt('environ', () => fs.readFileSync(`/proc/${pid}/environ`, 'latin1'));
attempt('mem', () => { const fd = fs.openSync(`/proc/${pid}/mem`, 'r'); fs.closeSync(fd); return 'opened'; });
attempt('fd_dir', () => fs.readdirSync(`/proc/${pid}/fd`).join(','));
for (const n of ARGS.fds || []) attempt('fd_' + n, () => { const fd = fs.openSync(`/proc/${pid}/fd/${n}`, 'r'); return 'opened ' + fd; });
if (ARGS.file) attempt('file', () => fs.readFileSync(ARGS.file, 'utf8'));
if (ARGS.dir) attempt('dir', () => fs.readdirSync(ARGS.dir).join(','));
if (ARGS.dir) attempt('plant', () => { fs.writeFileSync(ARGS.dir + '/planted.js', 'x'); return 'planted'; });
attempt('signal', () => process.kill(pid, 0));
const n = native(`
pid = ${pid}
res["ptrace_seize"] = sc(101, 0x4206, pid, 0, 0)  # PTRACE_SEIZE: never stops the target
buf = ctypes.create_string_buffer(8)
local = (ctypes.c_void_p * 2)(ctypes.addressof(buf), 8)
remote = (ctypes.c_void_p * 2)(0x400000, 8)
res["process_vm_readv"] = sc(310, pid, ctypes.addressof(local), 1, ctypes.addressof(remote), 1, 0)
pidfd = libc.syscall(ctypes.c_long(434), ctypes.c_long(pid), ctypes.c_long(0))
res["step_pidfd_open"] = "ok" if pidfd >= 0 else errno.errorcode[ctypes.get_errno()]
res["pidfd_getfd"] = sc(438, pidfd, ${(ARGS.fds || [3])[0]}, 0) if pidfd >= 0 else "no pidfd"
`);
Object.assign(out, Object.fromEntries(Object.entries(n).map(([k, v]) => [k, v === 'ok' ? 'ok:' : 'err:' + v])));
done();
"""


def _node_pid_below(pid: int, script: str) -> int:
    """The host pid of the Node process below a launcher ``pid`` (itself at process level)."""
    for candidate in [pid, *sorted(descendants(pid))]:
        try:
            with open(f"/proc/{candidate}/cmdline", "rb") as f:
                if script.encode() in f.read() and os.readlink(f"/proc/{candidate}/exe").endswith(
                    "node"
                ):
                    return candidate
        except OSError:
            continue
    raise AssertionError(f"no node process below {pid}")


@PROCESS_ON_ROOT
def test_a_concurrent_run_cannot_reach_another_runs_files_or_processes(base, level):
    scripts = script_dir(base)
    try:
        neighbour = write_script(scripts, _NEIGHBOUR, "neighbour.js")
        with NodeRun(level, base, read_paths=(scripts,)) as a:
            child = a.start(neighbour)
            os.set_blocking(child.stdout_fd, True)
            assert os.read(child.stdout_fd, 100) == b"ready\n"
            target = _node_pid_below(child.pid, neighbour)
            args = {"pid": target, "file": os.path.join(a.run_dir, "secret.txt"), "dir": a.run_dir}
            got = attack(_REACH, level, base, args=[json.dumps(args)])
            assert pid_alive(target), "run B killed run A"
            assert not os.path.exists(os.path.join(a.run_dir, "planted.js"))
    finally:
        shutil.rmtree(scripts, ignore_errors=True)
    assert all(refused(v) for v in attempts(got).values()), json.dumps(got)


@ALL_LEVELS
@pytest.mark.parametrize("confined", [True, False], ids=["launched", "unconfined-control"])
def test_the_host_and_its_end_of_fd3_are_out_of_reach(base, level, confined):
    # The host (this process) holds the other end of every run's socketpair: its fd numbers
    # are given to the program, which tries /proc/<host>/fd/N, pidfd_getfd, ptrace, and
    # the host's environ and memory.
    spare = socket.socketpair()
    try:
        args = {"pid": os.getpid(), "fds": [spare[0].fileno(), spare[1].fileno()]}
        got = attack(_REACH, level, base, confined, args=[json.dumps(args)])
    finally:
        spare[0].close()
        spare[1].close()
    if not confined:
        assert got["environ"].startswith("ok:") and got["pidfd_getfd"] == "ok:", got
        return
    if level == "process" and not ROOT_HOST:
        pytest.skip("a non-root host shares its uid with a process-level run")
    assert all(refused(v) for v in attempts(got).values()), json.dumps(got)


# -- the filter, across node and what it execs --------------------------------------------------

_FILTER = r"""
const n = native(`
res["io_uring_setup"] = sc(425, 8, ctypes.addressof(ctypes.create_string_buffer(120)))
res["unshare_user"] = sc(272, 0x10000000)
res["unshare_ns"] = sc(272, 0x00020000)
res["mount"] = sc(165, 0, 0, 0, 0, 0)
res["setns"] = sc(308, 0, 0)
res["ptrace_traceme"] = sc(101, 0, 0, 0, 0)
res["bpf"] = sc(321, 0, 0, 0)
res["keyctl"] = sc(250, 0, 0, 0, 0, 0)
res["personality_no_aslr"] = sc(135, 0x0040000)
res["clone3"] = sc(435, 0, 0)
res["socket_packet"] = sc(41, 17, 3, 0)
res["setuid_0"] = sc(105, 0) if os.getuid() != 0 else "EPERM"
`);
Object.assign(out, Object.fromEntries(Object.entries(n).map(([k, v]) => [k, v === 'ok' ? 'ok:' : 'err:' + v])));
fs.writeFileSync('plain', '');
attempt('chmod_setuid', () => fs.chmodSync('plain', 0o4755));
attempt('open_setgid', () => fs.closeSync(fs.openSync('made', 'w', 0o2755)));
attempt('unshare_binary', () => cp.execFileSync('/usr/bin/unshare', ['-U', '-r', 'true'], {stdio: 'pipe'}).toString());
done();
"""


@ALL_LEVELS
@pytest.mark.parametrize("confined", [True, False], ids=["launched", "unconfined-control"])
def test_the_filter_holds_for_node_and_for_what_it_execs(base, level, confined):
    got = attack(_FILTER, level, base, confined)
    if not confined:
        for name in ("io_uring_setup", "unshare_user", "chmod_setuid", "unshare_binary"):
            assert got[name].startswith("ok:"), (name, got)
        assert got["bpf"] != "err:EPERM" and got["clone3"] != "err:ENOSYS", (
            got
        )  # the kernel saw them
        return
    assert got.pop("clone3") == "err:ENOSYS", got  # glibc falls back to clone
    assert got.pop("socket_packet") == "err:EAFNOSUPPORT", got
    unshare_binary = got.pop("unshare_binary")
    assert refused(unshare_binary), unshare_binary
    assert set(got.values()) == {"err:EPERM"}, got


# -- budgets ------------------------------------------------------------------------------------

_FORKS = r"""
(async () => {
  const kids = [];
  let failed = null;
  for (let i = 0; i < 200 && failed === null; i++) {
    const c = cp.spawn('/bin/sleep', ['30'], {stdio: 'ignore'});
    if (c.pid === undefined) failed = await new Promise((ok) => c.on('error', (e) => ok(e.code)));
    else kids.push(c);
  }
  out.spawned = kids.length;
  out.failed = failed;
  for (const c of kids) c.kill('SIGKILL');
  done();
})();
"""


@ALL_LEVELS
def test_a_fork_bomb_stops_within_max_processes(base, level):
    if SUPPORT.cgroups is None or SUPPORT.cgroups.pids is None:
        if level == "process":
            pytest.skip("needs a writable pids cgroup at the 'process' level")
    limits = Limits(wall_seconds=20, kill_grace_seconds=0.3, cpu_seconds=10, max_processes=24)
    ended = run_script(PRELUDE + _FORKS, level, base=base, limits=limits)
    got = ended.answer
    assert isinstance(got, dict), ended.why()
    # Node's own threads (libuv's pool, V8's workers) count as tasks: fewer spawns than that.
    assert got["failed"] == "EAGAIN" and 0 < got["spawned"] < 24, got


_FILES = r"""
attempt('past_max_file_bytes', () => { fs.writeFileSync('big', Buffer.alloc(2 * 1024 * 1024)); return 'written'; });
attempt('size_kept', () => fs.statSync('big').size);
const fds = [];
attempt('past_max_open_files', () => { for (let i = 0; i < 1000; i++) fds.push(fs.openSync('/dev/null', 'r')); return fds.length; });
for (const fd of fds) fs.closeSync(fd);
done();
"""


@ALL_LEVELS
def test_file_size_and_open_file_budgets_hold_for_node(base, level):
    limits = Limits(
        wall_seconds=15, kill_grace_seconds=0.3, max_file_bytes=1024 * 1024, max_open_files=64
    )
    got = attack(_FILES, level, base, limits=limits)
    # EFBIG, not a SIGXFSZ death (Node ignores it, as a Python child does)
    assert got["past_max_file_bytes"] == "err:EFBIG", got
    assert got["size_kept"] == f"ok:{1024 * 1024}", got
    assert got["past_max_open_files"] == "err:EMFILE", got


_OFF_HEAP = r"""
const held = [];
for (let i = 0; i < 64; i++) { held.push(Buffer.alloc(32 * 1024 * 1024, 1)); }
process.stdout.write(JSON.stringify({held: held.length}) + '\n');
"""

_HEAP = r"""
const held = [];
for (;;) held.push(new Array(1e6).fill(1.5));
"""


@ALL_LEVELS
@pytest.mark.skipif(
    SUPPORT.cgroups is None or SUPPORT.cgroups.memory is None,
    reason="needs a writable memory cgroup: without RLIMIT_AS it is Node's only bound",
)
def test_memory_outside_v8s_heap_is_bounded_by_the_runs_memory_cgroup(base, level):
    # Buffers live outside V8's heap: --max-old-space-size does not see them, and RLIMIT_AS
    # is not set for Node. 2 GiB of filled buffers against memory_bytes=256 MiB.
    limits = Limits(wall_seconds=20, kill_grace_seconds=0.3, memory_bytes=256 * 1024 * 1024)
    ended = run_script(_OFF_HEAP, level, base=base, limits=limits)
    assert ended.answer is None and ended.returncode == -signal.SIGKILL, ended.why()


@ALL_LEVELS
def test_v8s_heap_is_bounded_by_the_heap_flag(base, level):
    limits = Limits(wall_seconds=20, kill_grace_seconds=0.3, memory_bytes=256 * 1024 * 1024)
    ended = run_script(_HEAP, level, base=base, limits=limits)
    assert ended.returncode not in (0, None) and not ended.timed_out, ended.why()
    assert "heap out of memory" in ended.stderr or ended.returncode == -signal.SIGKILL, ended.why()


# -- the parent-death signal, across the exec ---------------------------------------------------

_COLD_HOST = """
import json, os, sys
sys.path.insert(0, sys.argv[3])
from tests.node.launched import NodeRun, script_dir, write_script
level, base, marker = sys.argv[1], sys.argv[2], sys.argv[4]
scripts = script_dir(base)
script = write_script(scripts, "setInterval(() => {}, 1000); process.stdout.write('up\\\\n');")
# No cgroup: a later host's sweep of a dead host's cgroup must not be what ends the run.
run = NodeRun(level, base, read_paths=(scripts,), cgroup=False)
child = run.start(script, [marker])
os.set_blocking(child.stdout_fd, True)
assert os.read(child.stdout_fd, 10) == b"up\\n"
print(json.dumps({"pid": os.getpid()}), flush=True)
os.read(0, 1)  # until killed
"""


@ALL_LEVELS
@pytest.mark.timeout(60)
def test_a_cold_node_run_dies_with_its_host(base, level, request):
    marker = marker_for(request.node.name.replace("[", "-").replace("]", ""))
    host = subprocess.Popen(
        [sys.executable, "-c", _COLD_HOST, level, base, package_root(), marker],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert host.stdout is not None
        line = host.stdout.readline()
        assert line, "the host did not start"
        pid = int(json.loads(line)["pid"])
        nodes = processes_with(marker)
        assert nodes, "no node run below the host"
        os.kill(pid, signal.SIGKILL)
        assert host.wait(timeout=10) == -signal.SIGKILL
    finally:
        if host.poll() is None:
            host.kill()
            host.wait(timeout=10)
    deadline = time.monotonic() + 3  # the program would run for ever
    alive = nodes
    while alive and time.monotonic() < deadline:
        alive = [p for p in nodes if pid_alive(p)]
        time.sleep(0.01)
    for p in alive:
        os.kill(p, signal.SIGKILL)
    for name in os.listdir(base):  # a dead host's run directory and scripts
        shutil.rmtree(os.path.join(base, name), ignore_errors=True)
    assert alive == [], "the node run outlived its host"


# -- a sandbox that cannot be entered runs nothing ----------------------------------------------


def test_a_launcher_that_cannot_enter_its_sandbox_never_execs(base):
    # A run directory that does not exist: the sandbox cannot be entered (chdir fails).
    scripts = script_dir(base)
    try:
        marker = os.path.join(base, "ran")
        script = write_script(scripts, f"require('fs').writeFileSync({marker!r}, 'ran');")
        with NodeRun("process", base, read_paths=(scripts,)) as run:
            os.rmdir(run.run_dir)
            child = run.start(script)
            data = _reply_to_a_program(child)
            ended = run.finish()
            os.mkdir(run.run_dir)  # for the teardown's removal
    finally:
        shutil.rmtree(scripts, ignore_errors=True)
    assert b"sandbox_unavailable" in data and b"could not enter its sandbox" in data, data
    assert not os.path.exists(marker), "the runtime ran outside its sandbox"
    assert "kernelgate launcher:" in ended.stderr, ended.why()


def _reply_to_a_program(child: ChildProcess) -> bytes:
    """Send the bindings and a program on fd 3, as a run does; what comes back until the
    ``execute_reply``."""
    conn = Connection(HOST, session="test")
    child.control.setblocking(True)
    child.control.sendall(conn.send(OpenBindings("bindings-1", {})))
    child.control.sendall(conn.send(ExecuteRequest("1", {})))
    child.control.settimeout(10)
    data = b""
    while b"execute_reply" not in data:
        chunk = child.control.recv(65536)
        assert chunk, data
        data += chunk
    return data


@PROCESS_ON_ROOT
def test_a_runtime_the_runs_uid_cannot_read_is_refused_clearly(base, level):
    # The exec drops the CAP_DAC_READ_SEARCH a process-level Python child keeps: a kernel
    # under a directory only root may enter (a pyenv under /root) would fail inside Node
    # with a bare EACCES. The launcher says which path, before it execs.
    assert NODE is not None
    private = tempfile.mkdtemp(prefix="kg-node-private-", dir=base)  # 0700, root's
    script = write_script(private, "process.stdout.write('ran\\n');")
    command = NODE.command([script])
    command = LaunchCommand(
        command.runtime, command.executable, command.argv, (*command.paths, private)
    )
    with NodeRun(level, base) as run:
        run.child = spawn_launched_child(
            sys.executable, run.env, run.run_dir, run.plan.child_options(run.ids), command
        )
        data = _reply_to_a_program(run.child)
        ended = run.finish()
    shutil.rmtree(private)
    assert "ran" not in ended.stdout, ended.why()
    assert b"sandbox_unavailable" in data and b"cannot read" in data, data
    assert private.encode() in data, data
