"""Memory a run holds outside any address space (issue 18, finding 3, and its class).

``memory_bytes`` was RLIMIT_AS per process only: memfds filled with ``write()`` (never
mapped), SysV segments filled then detached, tmpfs files, socket and pipe buffers, and many
processes each under the limit held memory no address space shows (384 MiB and more with
``memory_bytes=96 MiB``, while the host-measured peak said 21 MB). A per-run memory cgroup
now bounds everything the run's processes hold together; past it the kernel kills, the run
ends ``worker_exit`` naming memory_bytes, and ``usage`` reports the cgroup's peak.

Each attack runs at every level where it applies, warm and cold, and checks that the run
was stopped at ``memory_bytes`` (not after holding what it asked for) and that the peak the
host reports is the run's real one.
"""

from __future__ import annotations

import errno
import glob
import os
import textwrap
from collections.abc import Iterator

import pytest

from kernelgate import Limits
from kernelgate.gateway.cgroups import CgroupRoots
from kernelgate.gateway.sandbox import LEVELS, SandboxSupport, plan_sandbox

from .conftest import ALL_LEVELS, NS_LEVELS, SUPPORT, at_levels

BOTH = pytest.mark.parametrize("warm", [True, False], ids=["warm", "cold"])
NEEDS_MEMORY_CGROUP = pytest.mark.skipif(
    SUPPORT.cgroups is None or SUPPORT.cgroups.memory is None,
    reason="needs a writable memory cgroup (v1, or v2 with memory delegated): without one "
    "memory_bytes bounds each process only (the plan's notes say so)",
)
pytestmark = pytest.mark.timeout(120)

MIB = 1 << 20
#: The finding's figures: a 96 MiB bound, and four times that asked for.
LIMIT = 96 * MIB
ASKED = 384 * MIB
LIMITS = Limits(wall_seconds=30, kill_grace_seconds=0.3, cpu_seconds=20, memory_bytes=LIMIT)


def program(source: str) -> str:
    return textwrap.dedent(source).strip() + "\n"


def assert_stopped_at_the_bound(r, limits: Limits = LIMITS) -> None:  # type: ignore[no-untyped-def]
    """The run ended for its memory, said so, and its usage shows what it really held."""
    assert r.status == "worker_exit", (r.status, r.message, r.stdout)
    assert f"memory_bytes={limits.memory_bytes}" in r.error.evalue
    assert "in total" in r.error.evalue and "raise Limits.memory_bytes" in r.error.evalue
    assert "done" not in r.stdout  # it never got all it asked for
    assert r.usage["measured_by"] == "host" and r.usage["peak_memory_scope"] == "run"
    # The real peak: near the bound (the bound itself, at most), not the 20 MB an
    # interpreter's RSS shows.
    assert limits.memory_bytes * 0.75 <= r.usage["peak_memory_bytes"] <= limits.memory_bytes


@pytest.fixture
def tmpfs_files(hostile) -> Iterator[str]:  # type: ignore[no-untyped-def]
    """A name for files in /dev/shm and /tmp (the host's at ``process``): removed after."""
    yield hostile.marker
    for path in glob.glob(f"/dev/shm/{hostile.marker}*") + glob.glob(f"/tmp/{hostile.marker}*"):
        os.unlink(path)


# -- the finding -------------------------------------------------------------------------------


@NEEDS_MEMORY_CGROUP
@ALL_LEVELS
@BOTH
def test_memfds_written_past_memory_bytes_end_the_run(hostile, level, warm):
    # write(), never mmap: no address space grows, so RLIMIT_AS never sees it. Several
    # memfds, each under max_file_bytes (RLIMIT_FSIZE caps a single one).
    src = program(
        f"""
        import os
        print('before', flush=True)
        fds, chunk = [], b'x' * (1 << 20)
        for i in range({ASKED // MIB}):
            if i % 32 == 0:
                fds.append(os.memfd_create('hold'))
            os.write(fds[-1], chunk)
        print('done', flush=True)
        """
    )
    r = hostile.run(src, LIMITS, warm=warm, sandbox=level, strict=True)
    assert r.stdout.startswith("before")
    assert_stopped_at_the_bound(r)


_SYSV = """
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
libc.shmget.restype = ctypes.c_int
libc.shmget.argtypes = [ctypes.c_int, ctypes.c_size_t, ctypes.c_int]
libc.shmat.restype = ctypes.c_void_p
libc.shmat.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int]
libc.shmdt.argtypes = [ctypes.c_void_p]
"""


@NEEDS_MEMORY_CGROUP
@NS_LEVELS
@BOTH
def test_sysv_segments_filled_and_detached_end_the_run(hostile, level, warm):
    # In the run's own IPC namespace (process level refuses SysV IPC: seccomp). Detached,
    # a segment is in no address space, and stays until the namespace goes.
    src = _SYSV + program(
        f"""
        print('before', flush=True)
        for i in range({ASKED // (32 * MIB)}):
            shmid = libc.shmget(0, 32 << 20, 0o1000 | 0o600)
            assert shmid >= 0, ctypes.get_errno()
            addr = libc.shmat(shmid, None, 0)
            ctypes.memset(addr, 1, 32 << 20)
            libc.shmdt(addr)
        print('done', flush=True)
        """
    )
    r = hostile.run(src, LIMITS, warm=warm, sandbox=level, strict=True)
    assert_stopped_at_the_bound(r)


# -- the class: what else holds memory outside an address space ------------------------------


@NEEDS_MEMORY_CGROUP
@NS_LEVELS
@BOTH
def test_sysv_message_queues_count(hostile, level, warm):
    # An IPC namespace allows 32000 queues of 16 KiB each (500 MiB) by default; messages
    # sit in the kernel until read.
    src = _SYSV + program(
        f"""
        libc.msgget.argtypes = [ctypes.c_int, ctypes.c_int]
        libc.msgsnd.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        buf = ctypes.create_string_buffer(8 + 8000)
        ctypes.memmove(buf, (1).to_bytes(8, 'little'), 8)
        print('before', flush=True)
        total = 0
        while total < {ASKED}:
            q = libc.msgget(0, 0o1000 | 0o600)
            assert q >= 0, ctypes.get_errno()
            while libc.msgsnd(q, buf, 8000, 0o4000) == 0:  # IPC_NOWAIT: until the queue is full
                total += 8000
        print('done', flush=True)
        """
    )
    r = hostile.run(src, LIMITS, warm=warm, sandbox=level, strict=True)
    assert_stopped_at_the_bound(r)


@NEEDS_MEMORY_CGROUP
@ALL_LEVELS
@BOTH
def test_tmpfs_files_count(hostile, level, warm, tmpfs_files):
    # /dev/shm and /tmp: private 64 MiB tmpfs each at the namespace levels (128 MiB
    # together), the host's /dev/shm at process. Written, never mapped.
    src = program(
        f"""
        import errno, os
        print('before', flush=True)
        chunk, written, full = b'x' * (1 << 20), 0, set()
        places = ['/dev/shm/{tmpfs_files}', '/tmp/{tmpfs_files}']
        n = 0
        while written < {ASKED} and len(full) < 2:
            place = places[n % 2]
            n += 1
            if place in full:
                continue
            try:
                with open(f'{{place}}-{{n}}', 'wb') as f:
                    for _ in range(16):
                        f.write(chunk)
                        written += len(chunk)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
                full.add(place)
        print('done', written >> 20, flush=True)
        """
    )
    r = hostile.run(src, LIMITS, warm=warm, sandbox=level, strict=True)
    assert_stopped_at_the_bound(r)


@NEEDS_MEMORY_CGROUP
@ALL_LEVELS
@BOTH
def test_socket_buffers_count(hostile, level, warm):
    # Unix socketpairs with large buffers (net.core.wmem_max allows MiBs here), filled and
    # never read: the data sits in the kernel, in no address space.
    src = program(
        """
        import socket
        print('before', flush=True)
        held, total = [], 0
        while len(held) < 120:
            a, b = socket.socketpair()
            for s in (a, b):
                s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8 << 20)
                s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
            a.setblocking(False)
            try:
                while True:
                    total += a.send(b'x' * 65536)
            except BlockingIOError:
                pass
            held.append((a, b))
        print('done', total >> 20, flush=True)
        """
    )
    limits = Limits(**{**LIMITS.to_dict(), "max_open_files": 512})
    r = hostile.run(src, limits, warm=warm, sandbox=level, strict=True)
    if r.status == "ok":  # only if the kernel's own socket limits held it below the bound
        assert int(r.stdout.split()[-1]) * MIB < LIMIT, r.stdout
    else:
        assert_stopped_at_the_bound(r, limits)


@NEEDS_MEMORY_CGROUP
@ALL_LEVELS
@BOTH
def test_tcp_buffers_are_bounded(hostile, level, warm):
    # Loopback TCP connections with large buffers, filled and never read (held 1 GiB under
    # memory_bytes=96 MiB before). cgroup v1 keeps TCP buffers apart, bounded to
    # memory_bytes on their own: past it a send waits (EAGAIN here), nothing is killed.
    # The namespace levels have no network at all.
    src = program(
        """
        import socket
        held, total = [], 0
        try:
            srv = socket.socket()
            srv.bind(('127.0.0.1', 0))
            srv.listen(200)
            while len(held) < 100:
                c = socket.socket()
                c.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8 << 20)
                c.connect(srv.getsockname())
                s, _ = srv.accept()
                s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
                c.setblocking(False)
                try:
                    while True:
                        total += c.send(b'x' * 65536)
                except BlockingIOError:
                    pass
                held.append((c, s))
        except OSError as exc:
            print('refused', exc.errno)
        return total
        """
    )
    limits = Limits(**{**LIMITS.to_dict(), "max_open_files": 512})
    r = hostile.run(src, limits, warm=warm, sandbox=level, strict=True)
    if r.status == "ok":
        assert r.value <= LIMIT, r.value >> 20
        if level == "process":
            assert r.value > LIMIT // 2  # it reached the bound, and was stopped there
            assert r.usage["peak_memory_bytes"] >= r.value  # counted
    else:
        assert_stopped_at_the_bound(r, limits)


@NEEDS_MEMORY_CGROUP
@ALL_LEVELS
@BOTH
def test_pipe_buffers_count(hostile, level, warm):
    # Pipes grown to 1 MiB (F_SETPIPE_SZ) and filled. The kernel lets a uid hold 64 MiB
    # of grown pipe buffers (fs.pipe-user-pages-soft); a bound below that plus the
    # interpreter shows they are counted.
    src = program(
        """
        import fcntl, os
        print('before', flush=True)
        held, total = [], 0
        while len(held) < 100:
            r, w = os.pipe()
            try:
                fcntl.fcntl(w, 1031, 1 << 20)  # F_SETPIPE_SZ
            except OSError:
                break  # the uid's pipe pages are used up
            os.set_blocking(w, False)
            try:
                while True:
                    total += os.write(w, b'x' * 65536)
            except BlockingIOError:
                pass
            held.append((r, w))
        print('done', total >> 20, flush=True)
        """
    )
    limits = Limits(**{**LIMITS.to_dict(), "memory_bytes": 64 * MIB})
    r = hostile.run(src, limits, warm=warm, sandbox=level, strict=True)
    assert_stopped_at_the_bound(r, limits)


@NEEDS_MEMORY_CGROUP
@ALL_LEVELS
@BOTH
def test_many_processes_each_under_rlimit_as_are_bounded_together(hostile, level, warm):
    # Six processes of 50 MiB each: every one well under RLIMIT_AS (96 MiB), 300 MiB
    # together. The program survives to reply when only its children are killed; the run
    # still ends for its memory.
    src = program(
        """
        import os, time
        print('before', flush=True)
        kids = []
        for i in range(6):
            r, w = os.pipe()
            pid = os.fork()
            if pid == 0:
                os.close(r)
                hog = bytearray(50 << 20)
                for j in range(0, len(hog), 4096):
                    hog[j] = 1
                os.write(w, b'x')
                time.sleep(30)
                os._exit(0)
            os.close(w)
            kids.append((pid, r))
        filled = sum(os.read(r, 1) == b'x' for pid, r in kids)
        print('filled', filled, 'done' if filled == 6 else '', flush=True)
        """
    )
    r = hostile.run(src, LIMITS, warm=warm, sandbox=level, strict=True)
    assert_stopped_at_the_bound(r)


# -- the bound cannot be lifted from inside ----------------------------------------------------


@NEEDS_MEMORY_CGROUP
@at_levels(*LEVELS, process_needs_root=True)
@BOTH
def test_the_memory_cgroup_cannot_be_raised_or_left(hostile, level, warm):
    # The run's own memory cgroup: raise its limit, or move into the parent (unbounded).
    src = program(
        """
        import os
        line = [l for l in open('/proc/self/cgroup').read().splitlines()
                if 'memory' in l.split(':')[1].split(',')]
        out = {}
        if line:  # v1: our memory hierarchy's path (the namespace levels see it from inside)
            mine = '/sys/fs/cgroup/memory' + line[0].split(':', 2)[2]
            attempts = [('raise', mine + '/memory.limit_in_bytes', '-1'),
                        ('leave', os.path.dirname(mine) + '/cgroup.procs', str(os.getpid()))]
        else:
            mine = '/sys/fs/cgroup' + open('/proc/self/cgroup').read().split('::', 1)[1].strip()
            attempts = [('raise', mine + '/memory.max', 'max'),
                        ('leave', os.path.dirname(mine) + '/cgroup.procs', str(os.getpid()))]
        for name, path, text in attempts:
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
    r = hostile.run(src, LIMITS, warm=warm, sandbox=level, strict=True)
    assert r.status == "ok", r.message
    refused = (errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOENT)
    assert r.value["raise"] in refused and r.value["leave"] in refused, r.value
    memory = [line for line in r.value["after"].splitlines() if "memory" in line or "::" in line]
    assert any("kernelgate-" in line for line in memory), r.value["after"]  # still in it


# -- what the bound leaves intact ----------------------------------------------------------------


@NEEDS_MEMORY_CGROUP
@ALL_LEVELS
def test_a_warm_cgroup_after_a_killed_run_gives_the_next_run_its_whole_bound(hostile, level):
    # The pool reuses a run's cgroup: the killed run's memory must not count against the
    # next one, nor its peak or its OOM kill show in the next one's result.
    gw = hostile.gateway(LIMITS, sandbox=level, strict=True, pool_size=1)
    fill = (
        "import os\nfds = []\nfor i in range({}):\n"
        "    if i % 32 == 0: fds.append(os.memfd_create('m'))\n"
        "    os.write(fds[-1], b'x' * (1 << 20))\n"
    )
    first = hostile.run(fill.format(200) + "print('done')", LIMITS, gateway=gw)
    assert first.status == "worker_exit" and "memory_bytes" in first.error.evalue
    for _ in range(3):
        r = hostile.run(fill.format(50) + "print('ok')", LIMITS, gateway=gw)
        assert r.status == "ok", r.message
        assert r.stdout == "ok\n"
        assert 50 * MIB <= r.usage["peak_memory_bytes"] < LIMIT


@NEEDS_MEMORY_CGROUP
@ALL_LEVELS
@BOTH
def test_honest_usage_counts_what_the_run_held(hostile, level, warm):
    # 40 MiB in a memfd, freed before the reply: the peak still shows it.
    src = program(
        """
        import os
        fd = os.memfd_create('m')
        for _ in range(40):
            os.write(fd, b'x' * (1 << 20))
        os.close(fd)
        return 'freed'
        """
    )
    r = hostile.run(src, LIMITS, warm=warm, sandbox=level, strict=True)
    assert r.status == "ok" and r.value == "freed", r.message
    assert r.usage["peak_memory_scope"] == "run"
    assert 40 * MIB <= r.usage["peak_memory_bytes"] < LIMIT


# -- the host's own size is not the run's -----------------------------------------------------


def _host_peak_kib() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))


@pytest.fixture
def host_peaked() -> Iterator[int]:
    """This (host) process has held 4x the bound at some point, as a long-lived host (or
    this suite, after its earlier files) may have: its peak RSS, in bytes. The kernel keeps
    the peak of the image a process exec()s from in its ru_maxrss, and a cold child is
    exec'd from the host's. The peak is reset after (clear_refs 5) for the tests that follow."""
    held = bytearray(ASKED)
    for i in range(0, len(held), 4096):
        held[i] = 1  # touched: resident
    del held
    peak = _host_peak_kib() * 1024
    assert peak >= ASKED
    yield peak
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


@NEEDS_MEMORY_CGROUP
@ALL_LEVELS
@BOTH
def test_the_peak_is_the_runs_after_the_host_held_more(hostile, level, warm, host_peaked):
    # Found as an order dependence: alone, cold runs passed; after the suite's earlier files
    # had grown the test process past 400 MiB, a cold run killed at 96 MiB reported a
    # 410 MiB peak (the host's, inherited at exec, kept as the larger figure).
    src = program(
        f"""
        import os
        print('before', flush=True)
        fds, chunk = [], b'x' * (1 << 20)
        for i in range({ASKED // MIB}):
            if i % 32 == 0:
                fds.append(os.memfd_create('hold'))
            os.write(fds[-1], chunk)
        print('done', flush=True)
        """
    )
    r = hostile.run(src, LIMITS, warm=warm, sandbox=level, strict=True)
    assert_stopped_at_the_bound(r)


@ALL_LEVELS
@BOTH
def test_a_small_run_after_the_host_held_more_reports_its_own_size(
    hostile, level, warm, host_peaked
):
    # With or without a memory cgroup: an interpreter that printed one line held tens of MB,
    # never the host's peak (which is also not the run's to learn from its record).
    r = hostile.run("print('small')", LIMITS, warm=warm, sandbox=level, strict=True)
    assert r.status == "ok" and r.stdout == "small\n", r.message
    assert r.usage["measured_by"] == "host"
    assert 0 < r.usage["peak_memory_bytes"] < LIMIT < host_peaked, r.usage


# -- without a memory cgroup ------------------------------------------------------------------


@pytest.mark.parametrize("level", ["process", "namespaces"])
def test_without_a_memory_cgroup_the_plan_says_the_bound_is_per_process(level):
    support = SandboxSupport(
        namespaces=True, landlock_abi=0, cgroups=CgroupRoots(pids="/sys/fs/cgroup/pids")
    )
    notes = plan_sandbox(level, LIMITS, support).notes
    assert any("memory_bytes bounds each process" in note for note in notes), notes
    with_memory = SandboxSupport(
        namespaces=True,
        landlock_abi=0,
        cgroups=CgroupRoots(pids="/sys/fs/cgroup/pids", memory="/sys/fs/cgroup/memory"),
    )
    assert not any("memory_bytes" in n for n in plan_sandbox(level, LIMITS, with_memory).notes)
