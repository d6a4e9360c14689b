"""Escapes through what the namespaces and the mount view must close (issue 9, findings 3,
4, 5, 8, 9, 10 and 11): each test runs the attack (and shows it reached the kernel), then
checks the secure outcome, at every level where it applies, warm and cold; the key ones
also with an unprivileged host (:mod:`tests.hardening.asuser`).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import errno
import os
import shutil
import signal
import socket
import tempfile
import textwrap
import time
from collections.abc import Iterator
from typing import Any

import pytest

from kernelgate import Gateway, Limits
from kernelgate.gateway import runids
from kernelgate.gateway.cgroups import CgroupRoots
from kernelgate.gateway.sandbox import LEVELS
from kernelgate.kernels.python import sandbox as child_sandbox
from kernelgate.kernels.python import userns as child_userns

from .asuser import HOST_FD
from .conftest import ALL_LEVELS, NEEDS_NAMESPACES, ROOT_HOST, at_levels
from .conftest import NS_LEVELS as NS_ONLY

BOTH = pytest.mark.parametrize("warm", [True, False], ids=["warm", "cold"])
#: Every level; at ``process`` only on a root host, where the program has a uid of its own.
ALL_LEVELS_ROOT_AT_PROCESS = at_levels(*LEVELS, process_needs_root=True)
SLACK = 5.0
_libc = ctypes.CDLL(None, use_errno=True)


def program(source: str) -> str:
    return textwrap.dedent(source).strip() + "\n"


# -- SysV IPC and POSIX message queues (finding 3) ---------------------------------------------

_IPC_CREAT, _IPC_RMID = 0o1000, 0

_SYSV = """
import ctypes, errno, os
libc = ctypes.CDLL(None, use_errno=True)
libc.shmget.restype = ctypes.c_int
libc.shmget.argtypes = [ctypes.c_int, ctypes.c_size_t, ctypes.c_int]
libc.msgget.argtypes = [ctypes.c_int, ctypes.c_int]

def call(fn, *args):
    r = fn(*args)
    return r if r >= 0 else -ctypes.get_errno()
"""


def _host_shm(key: int) -> int:
    _libc.shmget.restype = ctypes.c_int
    _libc.shmget.argtypes = [ctypes.c_int, ctypes.c_size_t, ctypes.c_int]
    shmid = _libc.shmget(key, 4096, _IPC_CREAT | 0o666)
    assert shmid >= 0, os.strerror(ctypes.get_errno())
    return int(shmid)


def _host_shm_remove(shmid: int) -> None:
    _libc.shmctl(shmid, _IPC_RMID, None)


def _sysv_keys() -> set[int]:
    keys = set()
    for name in ("shm", "msg"):
        with open(f"/proc/sysvipc/{name}") as f:
            for line in f.read().splitlines()[1:]:
                keys.add(int(line.split()[0]))
    return keys


@ALL_LEVELS
@BOTH
def test_sysv_ipc_is_private_to_the_run_and_gone_after_it(hostile, level, warm):
    key, host_key = 0x6B670000 + os.getpid() % 0xFFFF, 0x6B680000 + os.getpid() % 0xFFFF
    host_id = _host_shm(host_key)  # the host's own same-uid segment, mode 0666
    try:
        make = _SYSV + program(
            f"""
            made = [call(libc.shmget, {key} + i, 256 << 20, 0o1000 | 0o666) for i in range(3)]
            queue = call(libc.msgget, {key}, 0o1000 | 0o666)
            host = call(libc.shmget, {host_key}, 0, 0)
            return {{"made": made, "queue": queue, "host": host}}
            """
        )
        look = _SYSV + program(
            f"""
            return {{"segment": call(libc.shmget, {key}, 0, 0),
                     "queue": call(libc.msgget, {key}, 0)}}
            """
        )
        gw = hostile.gateway(sandbox=level, strict=True, pool_size=1 if warm else 0)
        a = hostile.run(make, warm=warm, gateway=gw)
        b = hostile.run(look, warm=warm, gateway=gw)
        keys_after = _sysv_keys()
    finally:
        _host_shm_remove(host_id)
    assert a.status == "ok" and b.status == "ok", (a.message, b.message)
    if level == "process":
        # No IPC namespace at this level: the seccomp filter refuses SysV IPC outright.
        assert a.value["made"] == [-errno.EPERM] * 3 and a.value["queue"] == -errno.EPERM
        assert a.value["host"] == -errno.EPERM
    else:
        assert all(m >= 0 for m in a.value["made"]) and a.value["queue"] >= 0  # 768 MiB made
        assert a.value["host"] == -errno.ENOENT  # the host's segment is not there
        # The next run does not see them, and the kernel freed them with the namespace.
        assert b.value == {"segment": -errno.ENOENT, "queue": -errno.ENOENT}
    assert not {key, key + 1, key + 2} & keys_after


_MQ = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.mq_open.restype = ctypes.c_int
libc.mq_open.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_int, ctypes.c_void_p]

def mq(name, flags):
    r = libc.mq_open(name, flags, 0o666, None)
    return r if r >= 0 else -ctypes.get_errno()
"""


@ALL_LEVELS
@BOTH
def test_posix_message_queues_are_private_to_the_run(hostile, level, warm):
    name = f"/kg-mq-{os.getpid()}".encode()
    create = os.O_CREAT | os.O_RDWR
    make = _MQ + f"return mq({name!r}, {create})\n"
    look = _MQ + f"return mq({name!r}, {os.O_RDWR})\n"
    gw = hostile.gateway(sandbox=level, strict=True, pool_size=1 if warm else 0)
    a = hostile.run(make, warm=warm, gateway=gw)
    b = hostile.run(look, warm=warm, gateway=gw)
    assert a.status == "ok" and b.status == "ok", (a.message, b.message)
    if level == "process":
        assert a.value == -errno.EPERM  # refused by the seccomp filter
    elif level == "namespaces":
        assert a.value >= 0  # made, in the run's IPC namespace
    else:
        assert a.value >= 0 or a.value == -errno.EACCES  # landlock may refuse the mqueue fs
    assert b.value in (-errno.ENOENT, -errno.EPERM)
    _libc.mq_open.restype = ctypes.c_int
    _libc.mq_open.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
    fd = _libc.mq_open(name, os.O_RDWR, 0, None)
    if fd >= 0:
        os.close(fd)
        _libc.mq_unlink(name)
    assert fd < 0 and ctypes.get_errno() == errno.ENOENT, "the queue reached the host"


# -- uid 0 is not root on the host (finding 4) -------------------------------------------------


@ALL_LEVELS
@BOTH
def test_global_sysctls_cannot_be_written(hostile, level, warm):
    path = "/proc/sys/kernel/core_pattern"
    before = open(path).read()
    src = program(
        f"""
        import os
        seen = open({path!r}).read()  # reachable and readable: the attack targets it
        try:
            with open({path!r}, 'w') as f:
                f.write('|/bin/sh -c "touch /kg-pwned"')
            return [seen, 'written']
        except OSError as exc:
            return [seen, exc.errno]
        """
    )
    r = hostile.run(src, warm=warm, sandbox=level, strict=True)
    assert r.status == "ok", r.message
    seen, outcome = r.value
    assert seen == before
    assert outcome in (errno.EROFS, errno.EACCES, errno.EPERM)
    assert open(path).read() == before


@ALL_LEVELS_ROOT_AT_PROCESS
@BOTH
def test_cgroupfs_cannot_be_written(hostile, level, warm):
    if (CgroupRoots.find() or CgroupRoots()).pids is None:
        pytest.skip("no writable pids cgroup here")
    src = program(
        """
        import os
        line = [l for l in open('/proc/self/cgroup').read().splitlines()
                if 'pids' in l.split(':')[1].split(',')][0]
        mine = '/sys/fs/cgroup/pids' + line.split(':', 2)[2]
        out = {'mine': mine}
        for name, path, text in (
            ('raise', mine + '/pids.max', 'max'),
            ('escape', '/sys/fs/cgroup/pids/cgroup.procs', str(os.getpid())),
        ):
            try:
                with open(path, 'w') as f:
                    f.write(text)
                out[name] = 'written'
            except OSError as exc:
                out[name] = exc.errno
        out['after'] = open('/proc/self/cgroup').read()
        return out
        """
    )
    r = hostile.run(src, warm=warm, sandbox=level, strict=True)
    assert r.status == "ok", r.message
    assert "kernelgate-" in r.value["mine"]  # its own per-run cgroup: the attack's target
    assert r.value["raise"] in (errno.EROFS, errno.EACCES, errno.EPERM)
    assert r.value["escape"] in (errno.EROFS, errno.EACCES, errno.EPERM)
    assert r.value["mine"].rsplit("/", 1)[-1] in r.value["after"]  # still counted


def _stat(path: str) -> list[int]:
    st = os.stat(path)
    return [st.st_mode, st.st_uid]


@ALL_LEVELS
@BOTH
def test_no_setuid_root_file_can_be_made(hostile, level, warm):
    src = program(
        """
        import os, shutil, sys
        path = os.path.abspath('suid')
        shutil.copy(sys.executable, path)
        out = {'uid': os.getuid()}
        try:
            os.chmod(path, 0o4755)
            out['chmod'] = 'done'
        except OSError as exc:
            out['chmod'] = exc.errno
        try:
            os.close(os.open(path + '2', os.O_CREAT | os.O_WRONLY, 0o4755))
            out['create'] = 'done'
        except OSError as exc:
            out['create'] = exc.errno
        out['host'] = await tools.stat(path)  # as the host sees it, during the run
        return out
        """
    )
    r = hostile.run(src, warm=warm, sandbox=level, strict=True, bindings={"stat": _stat})
    assert r.status == "ok", r.message
    mode, uid = r.value["host"]
    assert r.value["chmod"] in ("done", errno.EPERM)
    assert not (mode & 0o4000 and uid == 0), "a setuid-root file on the host"
    assert mode & 0o4000 == 0  # the filter refused the mode outright
    if ROOT_HOST:
        assert runids.in_range(uid)  # the run's own uid (tests/hardening/test_escapes_uid.py)


@ALL_LEVELS_ROOT_AT_PROCESS
@BOTH
def test_code_paths_cannot_be_planted(hostile, level, warm):
    src = program(
        """
        import os, site, sysconfig
        dirs = sorted({*site.getsitepackages(), sysconfig.get_paths()['purelib'],
                       sysconfig.get_paths()['stdlib'], os.path.dirname(os.__file__)})
        out = {}
        for d in dirs:
            path = os.path.join(d, 'kg-planted.pth')
            try:
                with open(path, 'w') as f:
                    f.write('import os; os.system("touch /kg-pwned")\\n')
                out[path] = 'written'
            except OSError as exc:
                out[path] = exc.errno
        return out
        """
    )
    r = hostile.run(src, warm=warm, sandbox=level, strict=True)
    assert r.status == "ok", r.message
    assert r.value, "no site-packages found to attack"
    for path, outcome in r.value.items():
        assert outcome in (errno.EROFS, errno.EACCES, errno.EPERM), (path, outcome)
        assert not os.path.exists(path)


@NS_ONLY
@BOTH
def test_shared_writable_directories_are_private_to_the_run(hostile, level, warm):
    # /dev/shm and /var/tmp are world-writable on the host: a channel between runs and to
    # the host. Inside, /dev/shm is the run's own tmpfs and /var/tmp is read-only.
    name = f"kg-shared-{os.getpid()}-{level}-{warm}"
    src = program(
        f"""
        import os
        out = {{}}
        for d in ('/dev/shm', '/var/tmp', '/tmp'):
            path = os.path.join(d, {name!r})
            try:
                with open(path, 'w') as f:
                    f.write('from the run')
                out[d] = 'written'
            except OSError as exc:
                out[d] = exc.errno
        out['seen'] = sorted(n for d in ('/dev/shm', '/tmp') for n in os.listdir(d)
                             if n.startswith('kg-shared-'))
        return out
        """
    )
    first = hostile.run(src, warm=warm, sandbox=level, strict=True)
    try:
        assert first.status == "ok", first.message
        v = first.value
        assert v["/dev/shm"] == "written" and v["/tmp"] == "written"  # the run's own
        assert v["/var/tmp"] in (errno.EROFS, errno.EACCES)
        for d in ("/dev/shm", "/var/tmp", "/tmp"):
            assert not os.path.exists(os.path.join(d, name)), d  # nothing reached the host
        # A second run does not see the first one's files.
        second = hostile.run(src.replace("'w')", "'x')"), warm=warm, sandbox=level, strict=True)
        assert second.status == "ok", second.message
        assert second.value["seen"] == [name, name]  # only the ones it made itself
    finally:
        for d in ("/dev/shm", "/var/tmp", "/tmp"):
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(d, name))


@NEEDS_NAMESPACES
def test_proc_inside_is_read_only_and_python_still_works(hostile):
    src = program(
        """
        import os, subprocess, sys
        mount = [l for l in open('/proc/self/mountinfo') if l.split()[4] == '/proc'][-1]
        out = subprocess.run([sys.executable, '-c', 'import os; print(os.getpid())'],
                             capture_output=True, text=True).stdout.strip()
        return [mount.split()[5].split(',')[0], out, open('/proc/self/status').read()[:5]]
        """
    )
    r = hostile.run(src)
    assert r.status == "ok", r.message
    assert r.value == ["ro", "3", "Name:"]


# -- run directories are private (finding 9) ---------------------------------------------------


@pytest.fixture
def outside_tmp_dir() -> Iterator[str]:
    base = tempfile.mkdtemp(prefix="kg-runs-outside-", dir="/var/tmp")
    yield base
    shutil.rmtree(base, ignore_errors=True)


@NS_ONLY
@BOTH
def test_concurrent_runs_cannot_reach_each_others_run_directory(outside_tmp_dir, level, warm):
    b_dir: asyncio.Future[str] | None = None
    a_done: asyncio.Event | None = None

    async def b_started(cwd: str) -> None:
        assert b_dir is not None
        b_dir.set_result(cwd)

    async def wait_b() -> str:
        assert b_dir is not None
        return await b_dir

    async def wait_a() -> None:
        assert a_done is not None
        await a_done.wait()

    def a_finished() -> None:
        assert a_done is not None
        a_done.set()

    attack = program(
        """
        import os
        mine = os.getcwd()
        other = await tools.wait_b()
        out = {'other': other}
        for name, act in (
            ('siblings', lambda: sorted(os.listdir(os.path.dirname(mine)))),
            ('list', lambda: os.listdir(other)),
            ('read', lambda: open(os.path.join(other, 'b.txt')).read()),
            ('write', lambda: open(os.path.join(other, 'planted.txt'), 'w').write('x')),
        ):
            try:
                out[name] = act()
            except OSError as exc:
                out[name] = exc.errno
        await tools.a_finished()  # a call is made when awaited (never otherwise)
        return out
        """
    )
    victim = program(
        """
        import os
        open('b.txt', 'w').write('secret of run b')
        await tools.b_started(os.getcwd())
        await tools.wait_a()
        return sorted(os.listdir('.'))
        """
    )
    bindings = {
        "b_started": b_started,
        "wait_b": wait_b,
        "wait_a": wait_a,
        "a_finished": a_finished,
    }

    async def main() -> tuple[Any, Any]:
        nonlocal b_dir, a_done
        b_dir = asyncio.get_running_loop().create_future()
        a_done = asyncio.Event()
        async with Gateway(
            bindings=bindings,
            tmp_dir=outside_tmp_dir,
            sandbox=level,
            strict=True,
            pool_size=2 if warm else 0,
            limits=Limits(wall_seconds=20, kill_grace_seconds=0.3),
        ) as gw:
            if warm:
                first = await gw.run("'warm-up'")
                assert first.ok, first.message
                filler = getattr(getattr(gw, "_pool", None), "_filler", None)
                if filler is not None:
                    await asyncio.shield(filler)
            a, b = await asyncio.gather(gw.run(attack), gw.run(victim))
            assert a.usage.get("warm") is warm and b.usage.get("warm") is warm
            return a, b

    a, b = asyncio.run(main())
    assert a.status == "ok" and b.status == "ok", (a.message, b.message)
    assert a.value["other"].startswith(outside_tmp_dir + "/")  # b was running, next door
    siblings = a.value["siblings"]  # landlock may refuse listing the parent at all
    assert siblings == errno.EACCES or os.path.basename(a.value["other"]) not in siblings
    assert a.value["list"] == errno.ENOENT and a.value["read"] == errno.ENOENT
    assert a.value["write"] in (errno.ENOENT, errno.EROFS, errno.EACCES)
    assert b.value == ["b.txt"]  # nothing planted
    assert os.listdir(outside_tmp_dir) == []


# -- file descriptors (finding 10) -------------------------------------------------------------

_PIPE_FD, _LISTEN_FD = 900, 901


@ALL_LEVELS
@BOTH
def test_host_inheritable_fds_never_reach_the_program(hostile, level, warm):
    r_end, w_end = os.pipe()
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    os.dup2(w_end, _PIPE_FD, inheritable=True)
    os.dup2(listener.fileno(), _LISTEN_FD, inheritable=True)
    pipe_inode = os.fstat(_PIPE_FD).st_ino
    src = program(
        f"""
        import os, socket
        fds = sorted(int(n) for n in os.listdir('/proc/self/fd'))
        links = []
        for fd in fds:
            try:
                links.append(os.readlink(f'/proc/self/fd/{{fd}}'))
            except OSError:
                pass
        out = {{'fds': fds, 'links': links}}
        try:
            os.write({_PIPE_FD}, b'from the program')
            out['write'] = 'written'
        except OSError as exc:
            out['write'] = exc.errno
        try:
            s = socket.socket(fileno={_LISTEN_FD})
            s.settimeout(0.1)
            s.accept()
            out['accept'] = 'accepted'
        except OSError as exc:
            out['accept'] = exc.errno
        return out
        """
    )
    try:
        r = hostile.run(src, warm=warm, sandbox=level, strict=True)
        os.set_blocking(r_end, False)
        try:
            leaked = os.read(r_end, 100)
        except BlockingIOError:
            leaked = b""
    finally:
        for fd in (_PIPE_FD, _LISTEN_FD, r_end, w_end):
            os.close(fd)
        listener.close()
    assert r.status == "ok", r.message
    v = r.value
    assert v["write"] == errno.EBADF and v["accept"] == errno.EBADF and leaked == b""
    assert f"pipe:[{pipe_inode}]" not in v["links"]
    assert v["fds"][:4] == [0, 1, 2, 3] and max(v["fds"]) < 20, v
    # Beyond 0-3, only what the child's own event loop made (an epoll fd and its self-pipe
    # socketpair) and the directory being listed.
    assert all(
        link.startswith(("anon_inode:[eventpoll]", "socket:", "/proc/")) for link in v["links"][4:]
    ), v["links"]


# -- idle pool children (finding 8) ------------------------------------------------------------


def test_idle_siblings_and_the_zygote_are_unreachable_at_process_level(hostile):
    src = program(
        """
        import ctypes, os
        libc = ctypes.CDLL(None, use_errno=True)
        me, parent = os.getpid(), os.getppid()
        targets = []
        for name in os.listdir('/proc'):
            if not name.isdigit() or int(name) == me:
                continue
            try:
                cmd = open(f'/proc/{name}/cmdline', 'rb').read()
                uid = int(open(f'/proc/{name}/status').read().split('Uid:')[1].split()[0])
            except OSError:
                continue
            if b'kernelgate.kernels.python.zygote' in cmd:
                targets.append((int(name), uid))
        out = {'me': os.getuid(), 'parent': parent, 'targets': []}
        for pid, uid in targets:
            got = {'pid': pid, 'uid': uid}
            try:
                pidfd = os.pidfd_open(pid)
            except ProcessLookupError:
                continue  # gone since the listing (another gateway's zygote on this machine)
            r = libc.syscall(438, pidfd, 3, 0)  # pidfd_getfd(pidfd, 3, 0)
            got['getfd'] = 'fd' if r >= 0 else ctypes.get_errno()
            os.close(pidfd)
            for what in ('fd/3', 'environ', 'mem'):
                try:
                    flags = os.O_RDWR if what == 'mem' else os.O_RDONLY
                    os.close(os.open(f'/proc/{pid}/{what}', flags))
                    got[what] = 'opened'
                except OSError as exc:
                    got[what] = exc.errno
            if 3 in got.values():  # ESRCH: it exited mid-probe (another gateway's child)
                continue
            out['targets'].append(got)
        return out
        """
    )
    r = hostile.run(src, sandbox="process", strict=True, pool_size=2)
    assert r.status == "ok", r.message
    v = r.value
    pids = [t["pid"] for t in v["targets"]]
    assert v["parent"] in pids  # the zygote
    siblings = [t for t in v["targets"] if t["pid"] != v["parent"]]
    assert siblings, "no idle sibling to attack"
    if ROOT_HOST:  # a uid of its own for each child (test_escapes_uid.py), and the dumpable flag
        assert all(t["uid"] != v["me"] for t in siblings)
    else:  # the host's uid for all: only non-dumpable stops it
        assert any(t["uid"] == v["me"] for t in siblings)
    for t in v["targets"]:
        assert t["getfd"] == errno.EPERM, t  # refused by the seccomp filter
        for what in ("environ", "mem"):
            assert t[what] in (errno.EACCES, errno.EPERM), t
        assert t["fd/3"] in (errno.EACCES, errno.EPERM, errno.ENOENT), t  # ENOENT: no fd 3
    assert any(t["fd/3"] == errno.EACCES for t in siblings)  # there, and refused


# -- stopped and traced programs (finding 11) --------------------------------------------------


@ALL_LEVELS
@BOTH
def test_a_traced_self_stopping_program_ends_at_wall_seconds(hostile, level, warm):
    src = program(
        """
        import ctypes, os, signal
        libc = ctypes.CDLL(None, use_errno=True)
        r = libc.ptrace(0, 0, None, None)  # PTRACE_TRACEME
        print('traceme', r, ctypes.get_errno(), flush=True)
        os.kill(os.getpid(), signal.SIGSTOP)
        return 'resumed'
        """
    )
    t0 = time.monotonic()
    r = hostile.run(
        src, Limits(wall_seconds=1.5, kill_grace_seconds=0.3), warm=warm, sandbox=level, strict=True
    )
    assert r.stdout == f"traceme -1 {errno.EPERM}\n"  # reached ptrace: the filter said no
    assert r.status == "timeout", r.message
    assert time.monotonic() - t0 < 1.5 + 0.3 + SLACK + (3 if warm else 0)


def test_init_reports_only_an_ending_of_a_traced_program():
    """Without the filter (an older kernel, a future child), init is the tracer of a program
    that asks for it: its stops must not become the program's status."""
    status_r, status_w = os.pipe()
    init = os.fork()
    if init == 0:  # pragma: no cover - the stand-in for a namespace's init
        try:
            os.close(status_r)
            prog = os.fork()
            if prog == 0:
                ctypes.CDLL(None).ptrace(0, 0, None, None)
                os.kill(os.getpid(), signal.SIGSTOP)
                os._exit(0)
            child_userns.serve_as_init(prog, status_w)
        finally:
            os._exit(99)
    os.close(status_w)
    # The program stops (traced: its init sees the stop); then it is killed from outside.
    prog_pid = None
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and prog_pid is None:
        for name in os.listdir("/proc"):
            if name.isdigit():
                try:
                    stat = open(f"/proc/{name}/stat").read()
                except OSError:
                    continue
                fields = stat[stat.rfind(")") + 2 :].split()
                if int(fields[1]) == init and fields[0] == "t":
                    prog_pid = int(name)
        time.sleep(0.01)
    assert prog_pid is not None, "the program never stopped under its tracer"
    os.kill(prog_pid, signal.SIGKILL)
    _, status = os.waitpid(init, 0)
    reported = child_sandbox.read_status(status_r)
    os.close(status_r)
    assert os.waitstatus_to_exitcode(status) == 0
    assert reported is not None and os.WIFSIGNALED(reported)
    assert os.WTERMSIG(reported) == signal.SIGKILL


# -- the same attacks from an unprivileged host ------------------------------------------------

_UNPRIVILEGED_ATTACK = program(
    """
    import ctypes, errno, os, site
    libc = ctypes.CDLL(None, use_errno=True)
    out = {'uid': os.getuid()}
    def attempt(name, fn):
        try:
            fn()
            out[name] = 'done'
        except OSError as exc:
            out[name] = exc.errno
    attempt('core_pattern', lambda: open('/proc/sys/kernel/core_pattern', 'w').write('|x'))
    attempt('root_cgroup', lambda: open('/sys/fs/cgroup/pids/cgroup.procs', 'w').write('1'))
    out['site'] = site.getsitepackages()[0]
    attempt('pth', lambda: open(os.path.join(out['site'], 'kg.pth'), 'w').write('import os\\n'))
    attempt('host_fd', lambda: os.write(HOST_FD, b'x'))
    attempt('var_tmp', lambda: open('/var/tmp/kg-cross-run', 'w'))
    r = libc.shmget(0x6B69, 4096, 0o1000 | 0o666)
    out['shm'] = 'made' if r >= 0 else ctypes.get_errno()
    out['fds'] = sorted(int(n) for n in os.listdir('/proc/self/fd'))
    try:
        out['siblings'] = len(os.listdir(os.path.dirname(os.getcwd())))
    except OSError as exc:
        out['siblings'] = -exc.errno
    return out
    """
)


@ALL_LEVELS
@BOTH
def test_the_attacks_from_an_unprivileged_host(as_user, level, warm):
    python = as_user.venv()  # its site-packages belongs to the host's user
    attack = _UNPRIVILEGED_ATTACK.replace("HOST_FD", str(HOST_FD))
    try:
        r = as_user.run(attack, level, warm, python=python)
        planted = os.path.exists("/var/tmp/kg-cross-run")
    finally:
        if os.path.exists("/var/tmp/kg-cross-run"):
            os.unlink("/var/tmp/kg-cross-run")
    assert r["status"] == "ok", r["message"]
    assert r["isolation"] == level and r["warm"] is warm
    v = r["value"]
    assert v["site"].startswith(os.path.dirname(os.path.dirname(python)))  # the venv's
    pth = os.path.join(v["site"], "kg.pth")
    pth_planted = os.path.exists(pth)
    if pth_planted:
        os.unlink(pth)
    for name in ("core_pattern", "root_cgroup"):
        assert v[name] in (errno.EROFS, errno.EACCES, errno.EPERM), (name, v)
    assert v["host_fd"] == errno.EBADF and HOST_FD not in v["fds"]
    if level == "process":
        # No mount namespace: the host user's own files are the program's (documented).
        assert v["pth"] == "done" and pth_planted
    else:
        assert v["pth"] in (errno.EROFS, errno.EACCES) and not pth_planted
        assert v["var_tmp"] in (errno.EROFS, errno.EACCES) and not planted
    assert max(v["fds"]) < 20
    if level == "process":
        assert v["uid"] == 65533 and v["shm"] == errno.EPERM
    else:
        assert v["uid"] == 0 and v["shm"] == "made"
        # The run directory's parent: its own directory only (or not even listable).
        assert v["siblings"] in (1, -errno.EACCES)
    assert 0x6B69 not in _sysv_keys()
