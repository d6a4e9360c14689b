"""Per-run cgroups: one "run cgroup" over the controllers the host may use (pids, memory).

cgroup v1 has a hierarchy per controller, so a run's cgroup is a directory under each
controller's root (the same name in each); cgroup v2 has one directory for both. Either
way it is named ``kernelgate-<owner>-<run_id>``
(:func:`~kernelgate.gateway.process.owner_prefix`), so :meth:`RunCgroup.sweep` finds those
of hosts that are gone, and the warm pool reuses them (mkdir and rmdir cost milliseconds).

- pids: ``pids.max`` caps how many processes the run may have at once.
- memory: the limit (v1 ``memory.limit_in_bytes`` and ``memory.memsw.limit_in_bytes``; v2
  ``memory.max``, ``memory.swap.max`` = 0) bounds everything the run's processes hold
  together, memory no address space shows included: memfd and tmpfs pages, SysV shared
  memory and message queues, socket and pipe buffers and the other kernel memory the kernel
  charges. Swap is bounded with it, so it cannot hide any. Past it the kernel's OOM killer
  kills in the cgroup (counted: :meth:`RunCgroup.memory_used`). v1 keeps TCP buffers apart
  (``memory.kmem.tcp.limit_in_bytes``, set to the same bound: past it sends wait).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from dataclasses import dataclass

from .process import backoff, owner_alive, owner_prefix

__all__ = ["CgroupRoots", "MemoryUse", "RunCgroup"]

_V1_MEMORY = "/sys/fs/cgroup/memory"
_V1_PIDS = "/sys/fs/cgroup/pids"
_V2 = "/sys/fs/cgroup"
_V1_TCP_LIMIT = "memory.kmem.tcp.limit_in_bytes"
_V1_TCP_PEAK = "memory.kmem.tcp.max_usage_in_bytes"


@dataclass(frozen=True)
class CgroupRoots:
    """Where a host makes its runs' cgroups, per controller (None: that controller is not
    writable here). Under cgroup v2 both name the same directory."""

    pids: str | None = None
    memory: str | None = None

    def dirs(self) -> tuple[str, ...]:
        """The distinct directories a run's cgroup is made in."""
        return tuple(dict.fromkeys(d for d in (self.pids, self.memory) if d is not None))

    @staticmethod
    def find() -> CgroupRoots | None:
        """The cgroup directories this process may create children in (None: none)."""
        try:
            with open("/proc/self/cgroup") as f:
                lines = f.read().splitlines()
        except OSError:
            return None
        found = {
            controller: _find(lines, controller, mount)
            for controller, mount in (("pids", _V1_PIDS), ("memory", _V1_MEMORY))
        }
        if not any(found.values()):
            return None
        return CgroupRoots(pids=found["pids"], memory=found["memory"])


def _find(lines: list[str], controller: str, v1_mount: str) -> str | None:
    """The v1 hierarchy of ``controller`` where we are, else our v2 cgroup if it delegates
    ``controller`` to its children; only if we may make a cgroup there that has it."""
    probe_file = "pids.max" if controller == "pids" else "memory.max"
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controller in controllers.split(","):
            root = os.path.join(v1_mount, path.lstrip("/"))
            v1_file = "pids.max" if controller == "pids" else "memory.limit_in_bytes"
            if _usable(root, v1_file):
                return root
    for line in lines:
        if line.startswith("0::"):
            base = os.path.join(_V2, line[3:].lstrip("/"))
            try:
                with open(os.path.join(base, "cgroup.subtree_control")) as f:
                    if controller in f.read().split() and _usable(base, probe_file):
                        return base
            except OSError:
                pass
    return None


def _usable(root: str, needs: str) -> bool:
    if not os.path.isdir(root) or not os.access(root, os.W_OK):
        return False
    probe = os.path.join(root, f"{owner_prefix()}probe")
    try:
        os.mkdir(probe)
    except FileExistsError:
        pass  # a probe of ours that a crash left: it works all the same
    except OSError:
        return False
    try:
        return os.path.exists(os.path.join(probe, needs))
    finally:
        try:
            os.rmdir(probe)
        except OSError:
            pass


@dataclass(frozen=True)
class MemoryUse:
    """What a run's memory cgroup counted since the run began: the most it held at once
    (bytes) and how many of its processes the OOM killer killed for its limit."""

    peak_bytes: int
    oom_kills: int


# cgroupfs files are read and written with os-level calls (a run touches a few of them:
# its limits, peak and OOM kills, and Python's buffered open costs more than the kernel's
# side of it), the ones of every run through fds kept open (_Kept).


def _write(path: str, value: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)


def _read_all(directory: str, name: str) -> list[bytes]:
    """The whitespace-separated words of a cgroup file of any length (cgroup.procs):
    os.open and reads, cheaper than the builtin open() on a run's reply path."""
    fd = os.open(os.path.join(directory, name), os.O_RDONLY | os.O_CLOEXEC)
    try:
        chunks = []
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
    finally:
        os.close(fd)
    return b"".join(chunks).split()


def _keyed(data: bytes, key: bytes) -> int:
    """``key``'s number in the text of a flat keyed file (memory.oom_control,
    memory.events); 0 when it has none."""
    for line in data.splitlines():
        name, _, value = line.partition(b" ")
        if name == key:
            try:
                return int(value)
            except ValueError:
                return 0
    return 0


class _Kept:
    """Fds of cgroup files, each opened at its first use and kept until :meth:`close`: a
    pooled cgroup serves run after run, and the files a run resets at its start and reads
    at its reply are on its latency path. A read at offset 0 makes a cgroup file's text
    anew (seq_file), and a write is taken whole whatever the offset: what a fresh open
    gives, without the path walk and the open. (Never cgroup.procs: cgroup v1 caches the
    pid list an open file read first, for a second, and serves it to that file again.)"""

    __slots__ = ("_fds",)

    def __init__(self) -> None:
        self._fds: dict[tuple[str, int], int] = {}

    def _fd(self, path: str, flags: int) -> int:
        fd = self._fds.get((path, flags))
        if fd is None:
            fd = os.open(path, flags | os.O_CLOEXEC)
            self._fds[(path, flags)] = fd
        return fd

    def get(self, path: str) -> bytes:
        return os.pread(self._fd(path, os.O_RDONLY), 4096, 0)

    def get_int(self, path: str) -> int:
        """The number ``path`` holds; 0 if it cannot be read."""
        try:
            return int(self.get(path).strip() or 0)
        except (OSError, ValueError):
            return 0

    def put(self, path: str, value: bytes) -> None:
        os.pwrite(self._fd(path, os.O_WRONLY), value, 0)

    def close(self) -> None:
        fds, self._fds = self._fds, {}
        for fd in fds.values():
            os.close(fd)


class _Memory:
    """The memory controller's files of one cgroup directory (v1 or v2)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.v2 = not os.path.exists(os.path.join(path, "memory.limit_in_bytes"))
        # v1 charges TCP buffers only to a cgroup given a TCP limit, and to a counter of
        # their own (v2 counts them in memory.current): without it a run held 1 GiB of
        # loopback TCP buffers under memory_bytes=96 MiB.
        self.tcp = not self.v2 and os.path.exists(self._file(_V1_TCP_LIMIT))
        self.limit: int | None = None  # None: unlimited
        self._oom_base = 0
        self._peak_fd = -1  # v2: an fd of memory.peak reset at begin (its own peak)
        self._files = _Kept()

    def _file(self, name: str) -> str:
        return os.path.join(self.path, name)

    def _get(self, name: str) -> bytes:
        return self._files.get(self._file(name))

    def _get_int(self, name: str) -> int:
        return self._files.get_int(self._file(name))

    def _put(self, name: str, value: bytes) -> None:
        self._files.put(self._file(name), value)

    def set_limit(self, limit: int | None) -> None:
        """Bound memory and swap together to ``limit`` bytes (None: unlimited)."""
        if limit == self.limit:
            return  # a reused cgroup usually has it already
        if self.v2:
            _write(self._file("memory.max"), "max" if limit is None else str(limit))
            if os.path.exists(self._file("memory.swap.max")):
                _write(self._file("memory.swap.max"), "0")
            # Past the limit the whole run goes, not a part that leaves the rest confused.
            if os.path.exists(self._file("memory.oom.group")):
                _write(self._file("memory.oom.group"), "1")
        else:
            value = "-1" if limit is None else str(limit)
            files = ["memory.limit_in_bytes"]
            if os.path.exists(self._file("memory.memsw.limit_in_bytes")):
                # memsw (memory + swap) may never be below the memory limit: raise it first
                # when raising, lower it last when lowering.
                raising = self.limit is not None and (limit is None or limit > self.limit)
                files = (
                    ["memory.memsw.limit_in_bytes", *files]
                    if raising
                    else [*files, "memory.memsw.limit_in_bytes"]
                )
            for name in files:
                _write(self._file(name), value)
            if self.tcp:
                # Past it a send waits (or fails with EAGAIN): TCP buffers are not killed for.
                _write(self._file(_V1_TCP_LIMIT), value)
        self.limit = limit

    def begin(self) -> None:
        """A run begins: its peak and OOM kills count from now (a reused cgroup's too)."""
        self._oom_base = self.oom_kills()
        if self.v2:
            if self._peak_fd >= 0:
                os.close(self._peak_fd)
                self._peak_fd = -1
            try:
                fd = os.open(self._file("memory.peak"), os.O_RDWR | os.O_CLOEXEC)
            except OSError:
                return  # no memory.peak (before Linux 5.19): memory.current is read instead
            try:
                os.write(fd, b"reset\n")  # Linux 6.12+: this fd's peak counts from now
            except OSError:
                pass  # the peak since the cgroup was made: an overstatement, never less
            self._peak_fd = fd
        else:
            self._put("memory.max_usage_in_bytes", b"0")  # reset to the usage now
            if self.tcp:
                self._put(_V1_TCP_PEAK, b"0")

    def oom_kills(self) -> int:
        try:
            return _keyed(
                self._get("memory.events" if self.v2 else "memory.oom_control"), b"oom_kill"
            )
        except OSError:
            return 0

    def used(self) -> MemoryUse:
        if self.v2:
            peak = 0
            if self._peak_fd >= 0:
                try:
                    peak = int(os.pread(self._peak_fd, 64, 0).strip() or 0)
                except (OSError, ValueError):
                    peak = 0
            peak = max(peak, self._get_int("memory.current"))
        else:
            peak = self._get_int("memory.max_usage_in_bytes")
            if self.tcp:
                # Two peaks, maybe at different times: their sum may overstate, never hide.
                peak += self._get_int(_V1_TCP_PEAK)
        return MemoryUse(peak, max(0, self.oom_kills() - self._oom_base))

    def charged(self) -> int:
        """Bytes still charged (page cache, tmpfs files, kernel memory of the run's)."""
        return self._get_int("memory.current" if self.v2 else "memory.usage_in_bytes")

    def reclaim(self) -> None:
        """Give back what reclaim can (v1 force_empty; v2 memory.reclaim): before reuse."""
        try:
            if self.v2:
                _write(self._file("memory.reclaim"), str(max(self.charged(), 1)))
            else:
                _write(self._file("memory.force_empty"), "0")
        except OSError:
            pass  # what stays is seen by charged(), and the cgroup is not reused

    def close(self) -> None:
        if self._peak_fd >= 0:
            os.close(self._peak_fd)
            self._peak_fd = -1
        self._files.close()


class RunCgroup:
    """A run's cgroup: a directory under each root of ``roots`` (one under cgroup v2),
    with ``pids.max`` = ``max_pids`` and (with a memory root) its memory bounded to
    ``memory_bytes`` (None: unlimited, as for an idle warm child).

    Named ``kernelgate-<owner>-<run_id>``: :meth:`sweep` finds those of hosts that are gone.
    """

    def __init__(
        self, roots: CgroupRoots, run_id: str, max_pids: int, memory_bytes: int | None = None
    ) -> None:
        name = f"{owner_prefix()}{run_id}"
        self.paths: tuple[str, ...] = ()
        self._pids_dir = os.path.join(roots.pids, name) if roots.pids else None
        self._memory: _Memory | None = None
        self._files = _Kept()  # pids.current, read as each run ends (recycle_cgroup)
        self.max_pids = -1
        try:
            for root in roots.dirs():
                path = os.path.join(root, name)
                os.mkdir(path)
                self.paths += (path,)
            if roots.memory is not None:
                self._memory = _Memory(os.path.join(roots.memory, name))
            self.limit(max_pids, memory_bytes)
        except OSError:
            for path in self.paths:
                os.rmdir(path)
            raise

    @classmethod
    def _found(cls, paths: tuple[str, ...]) -> RunCgroup:
        """A cgroup left by another host (to sweep): only its directories are known."""
        cgroup = cls.__new__(cls)
        cgroup.paths = paths
        cgroup._pids_dir = None
        cgroup._memory = None
        cgroup._files = _Kept()
        cgroup.max_pids = -1
        return cgroup

    @property
    def path(self) -> str:
        """Its first directory (the pids one where there is one): for messages and names."""
        return self.paths[0]

    @property
    def bounds_memory(self) -> bool:
        return self._memory is not None

    def attach(self, pid: int) -> None:
        """Move ``pid`` into the run's cgroup under every controller."""
        for path in self.paths:
            _write(os.path.join(path, "cgroup.procs"), str(pid))

    def limit(self, max_pids: int, memory_bytes: int | None) -> None:
        """Set ``pids.max`` and the memory bound (each written only when it changes)."""
        self.set_max(max_pids)
        if self._memory is not None:
            self._memory.set_limit(memory_bytes)

    def set_max(self, max_pids: int) -> None:
        if max_pids == self.max_pids or self._pids_dir is None:
            return  # a reused cgroup usually has it already
        _write(os.path.join(self._pids_dir, "pids.max"), str(max_pids))
        self.max_pids = max_pids

    def begin(self, max_pids: int, memory_bytes: int) -> None:
        """A run takes this cgroup (a warm child's, made for an idle child): its limits
        from now, and its memory peak and OOM kills counted from now. OSError if the
        memory bound cannot be set (the child already holds more than ``memory_bytes``)."""
        self.set_max(max_pids)
        if self._memory is not None:
            self._memory.set_limit(memory_bytes)
            self._memory.begin()

    def memory_used(self) -> MemoryUse | None:
        """The run's memory peak and OOM kills since it began (None: no memory cgroup)."""
        return self._memory.used() if self._memory is not None else None

    def memory_charged(self) -> int:
        """Bytes still charged to the cgroup's memory (0 without a memory cgroup)."""
        return self._memory.charged() if self._memory is not None else 0

    def reclaim(self) -> None:
        """Reclaim what an emptied cgroup still holds (page cache of the run's files)."""
        if self._memory is not None:
            self._memory.reclaim()

    def procs(self) -> list[int]:
        """The processes in the cgroup, as its first controller's directory lists them:
        what a run's reply is measured over. Every process of a run is in the same cgroup
        under each controller (a child is attached to all of them before it runs, and its
        processes inherit them; none may write a cgroup file), so one list is the run's."""
        try:
            return [int(pid) for pid in _read_all(self.paths[0], "cgroup.procs")]
        except (OSError, ValueError):
            return []

    def pids(self) -> list[int]:
        """The processes in the cgroup (under any of its controllers)."""
        found: dict[int, None] = {}
        for path in self.paths:
            try:
                found.update(dict.fromkeys(int(pid) for pid in _read_all(path, "cgroup.procs")))
            except (OSError, ValueError):
                pass
        return list(found)

    def charged(self) -> int:
        """Tasks charged to the cgroup (pids.current): its live processes and threads, and
        exited ones not yet reaped; 0 if it cannot be read."""
        if self._pids_dir is None:
            return 0
        return self._files.get_int(os.path.join(self._pids_dir, "pids.current"))

    def settle(self, remove: bool = True) -> bool:
        """SIGKILL every process in the cgroup (which also holds what escaped its process
        group with setsid); True once it is empty, and removed when ``remove``.

        Killed processes take a moment to leave, so callers retry until True.
        """
        pids = self.pids()
        self._kill(pids)
        if not remove:
            return not pids
        for path in self.paths:
            try:
                os.rmdir(path)
            except FileNotFoundError:
                continue
            except OSError:
                return False  # busy: a process is still on its way out
        self._files.close()
        if self._memory is not None:
            self._memory.close()
        return True

    def _kill(self, pids: list[int]) -> None:
        """SIGKILL the processes ``pids`` read from cgroup.procs, never a stranger: a listed
        process may be reaped right after the read (by its parent in the run, or by init)
        and its number given to any process before the kill. So each is opened as a pidfd
        first (one process, whatever becomes of its number) and signalled only if its
        number is listed again after: the pidfd's process is then the one listed, or it
        was reaped meanwhile and the signal reaches nothing."""
        fds: dict[int, int] = {}
        try:
            for pid in pids:
                try:
                    fds[pid] = os.pidfd_open(pid)
                except ProcessLookupError:
                    continue  # gone already
                except OSError:  # no pidfds (Linux < 5.3), or no fd left: by number
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
            listed = set(self.pids()) if fds else set()
            for pid, fd in fds.items():
                if pid in listed:
                    with contextlib.suppress(ProcessLookupError):
                        signal.pidfd_send_signal(fd, signal.SIGKILL)
        finally:
            for fd in fds.values():
                os.close(fd)

    def settle_blocking(self, timeout: float = 5.0) -> bool:
        """:meth:`settle` and remove, retried until done or ``timeout``: for code that runs
        outside an event loop (close, finalizers, a loop shutting down)."""
        for delay in backoff(timeout):
            if self.settle():
                return True
            time.sleep(delay)
        return self.settle()

    @staticmethod
    def sweep(roots: CgroupRoots | None, timeout: float = 0.5) -> list[str]:
        """Empty and remove the cgroups under ``roots`` whose owner is gone (killing what
        is left in them: a dead host's runs); return their names. One listdir per root; a
        cgroup whose processes have not left within ``timeout`` stays for the next sweep."""
        if roots is None:
            return []
        by_name: dict[str, tuple[str, ...]] = {}
        seen: dict[tuple[int, int], bool] = {}
        for root in roots.dirs():
            try:
                names = os.listdir(root)
            except OSError:
                continue
            for name in names:
                if name.startswith("kernelgate-") and not owner_alive(name, seen):
                    by_name[name] = (*by_name.get(name, ()), os.path.join(root, name))
        left = [RunCgroup._found(paths) for paths in by_name.values()]
        removed = [c for c in left if c.settle()]
        busy = [c for c in left if c not in removed]
        if busy:
            for delay in backoff(timeout):
                busy = [c for c in busy if not c.settle()]
                if not busy:
                    break
                time.sleep(delay)
        return sorted(os.path.basename(c.path) for c in left if c not in busy)
