"""A uid and gid of its own for every run on a root host, unique machine-wide.

On a root host a run's child drops to an unprivileged uid (``process`` level) or maps uid
0 of its user namespace to one (the namespace levels). A uid shared by every run let one
run reach another's processes: signal them, and read the environment and memory of what
they ``exec`` (``execve`` makes a process dumpable again: issue 18, finding 5). So each
run gets a uid (and the same-numbered gid) of its own, held for the run's life.

**Where from.** :data:`BASE` .. ``BASE + COUNT - 1`` (0x7B470000, 65536 ids): in the
range systemd documents as unused (0x70000000-0x7FFDFFFF; below it lie the container
ranges systemd-nspawn picks from, above it the "foreign" range and the ids some tools read
as negative). Ids named in /etc/passwd, /etc/group, /etc/subuid or /etc/subgid are
skipped; if this host's user namespace does not map the whole range (a container with a
narrow map), runs share :data:`~kernelgate.model.constants.RUN_UID` as before, and
:attr:`RunIds.shared` says so.

**Unique among all hosts on the machine** (gateways, kernels, ``kernelgate run`` loops in
other processes): an id is taken by an open-file-description lock (``F_OFD_SETLK``) on
its byte of one root-only file, :data:`LOCK_FILE`, through a description of the file
opened for that run and closed when the run is over. The kernel drops the locks of a host
that dies, so a crashed host's ids come back by themselves. Taking one is an ``open`` and
an ``fcntl`` (no fork, no file per id); the start is random, so an id is rarely taken
again soon after it was let go.

A process-level program keeps CAP_DAC_READ_SEARCH and can open the lock file for reading
and set a read lock: it can make the allocator skip ids while its processes live, never
make two runs share one.
"""

from __future__ import annotations

import errno
import fcntl
import os
import secrets
import stat
import struct

from kernelgate.model.constants import RUN_GID, RUN_UID

__all__ = ["BASE", "COUNT", "LOCK_FILE", "RunIds", "allocate_ids", "in_range", "own_ids"]

#: The first id of the range (0x7B47: "KG" in the high half).
BASE = 0x7B470000
#: How many ids the range holds.
COUNT = 0x10000
#: Where the ids are locked: a root-only directory on the machine's run-time tmpfs (empty
#: after a reboot, when no run can be left).
LOCK_DIR = "/run/kernelgate"
LOCK_FILE = os.path.join(LOCK_DIR, "run-ids.lock")

_F_OFD_SETLK = getattr(fcntl, "F_OFD_SETLK", 37)
_FLOCK = "hhqqi4x"  # struct flock on 64-bit Linux: type, whence, start, len, pid


def in_range(uid: int) -> bool:
    """Whether ``uid`` is one of the per-run ids."""
    return BASE <= uid < BASE + COUNT


class RunIds:
    """The uid and gid one run has; :meth:`release` gives them back (idempotent).

    ``shared``: the machine cannot give runs ids of their own (see the module's doc); every
    run has :data:`RUN_UID` then, and releasing does nothing.
    """

    __slots__ = ("uid", "gid", "shared", "_fd")

    def __init__(self, uid: int, gid: int, shared: bool = False, fd: int = -1) -> None:
        self.uid, self.gid, self.shared = uid, gid, shared
        self._fd = fd  # the description holding the id's lock

    def release(self) -> None:
        """Let another run have these ids: call once the run's processes are gone and its
        run directory is removed."""
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)  # the lock goes with the description's last fd

    def __repr__(self) -> str:
        held = "shared" if self.shared else ("held" if self._fd >= 0 else "released")
        return f"RunIds(uid={self.uid}, gid={self.gid}, {held})"


class _Range:
    """What this process found out once: whether the range can be used, and which ids of
    it to skip."""

    def __init__(self) -> None:
        self._excluded: frozenset[int] | None = None
        self._usable: bool | None = None
        self._dir_checked = False

    def usable(self) -> bool:
        """Whether this host's user namespace maps the whole range (uids and gids)."""
        if self._usable is None:
            self._usable = _mapped("/proc/self/uid_map") and _mapped("/proc/self/gid_map")
        return self._usable

    def excluded(self) -> frozenset[int]:
        if self._excluded is None:
            self._excluded = frozenset(_named_ids())
        return self._excluded

    def open(self) -> int:
        """A new description of :data:`LOCK_FILE` (one per run: a lock lives as long as
        its description, and OFD locks of two descriptions conflict even in one process)."""
        if not self._dir_checked:
            os.makedirs(LOCK_DIR, mode=0o700, exist_ok=True)
            st = os.lstat(LOCK_DIR)
            if not stat.S_ISDIR(st.st_mode) or st.st_uid != 0 or st.st_mode & 0o022:
                raise OSError(
                    errno.EPERM,
                    f"{LOCK_DIR} must be a directory owned by root and writable by root only "
                    f"(found mode {oct(st.st_mode)}, uid {st.st_uid}): remove it, kernelgate "
                    "makes it again",
                )
            self._dir_checked = True
        return os.open(LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)

    def take(self) -> tuple[int, int]:
        """Lock a free id: (its index in the range, the description holding the lock)."""
        fd = self.open()
        try:
            excluded = self.excluded()
            start = secrets.randbelow(COUNT)
            for step in range(COUNT):
                index = (start + step) % COUNT
                if BASE + index in excluded:
                    continue
                lock = struct.pack(_FLOCK, fcntl.F_WRLCK, 0, index, 1, 0)
                try:
                    fcntl.fcntl(fd, _F_OFD_SETLK, lock)
                except OSError as exc:
                    if exc.errno in (errno.EAGAIN, errno.EACCES):
                        continue  # another run has it
                    raise
                return index, fd
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)
        raise OSError(
            errno.EAGAIN,
            f"all {COUNT} run ids ({BASE}..{BASE + COUNT - 1}) are taken by runs on this "
            f"machine (locks on {LOCK_FILE}): wait for runs to end",
        )


_RANGE = _Range()


def _mapped(path: str) -> bool:
    try:
        with open(path) as f:
            lines = f.read().split("\n")
    except OSError:
        return True  # no user namespaces here: the initial one maps everything
    for line in lines:
        fields = line.split()
        if len(fields) == 3:
            first, _, length = (int(x) for x in fields)
            if first <= BASE and BASE + COUNT <= first + length:
                return True
    return False


def _named_ids() -> set[int]:
    """Ids of the range some account, group or subordinate range already names."""
    found: set[int] = set()
    for path, field in (("/etc/passwd", 2), ("/etc/group", 2)):
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                for line in f:
                    parts = line.split(":")
                    if len(parts) > field and parts[field].isdigit():
                        found.add(int(parts[field]))
        except OSError:
            pass
    for path in ("/etc/subuid", "/etc/subgid"):
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                for line in f:
                    parts = line.strip().split(":")
                    if len(parts) == 3 and parts[1].isdigit() and parts[2].isdigit():
                        first, length = int(parts[1]), int(parts[2])
                        lo, hi = max(first, BASE), min(first + length, BASE + COUNT)
                        found.update(range(lo, hi))
        except OSError:
            pass
    return {uid for uid in found if in_range(uid)}


def own_ids() -> bool:
    """Whether runs here get a uid of their own (a root host whose user namespace maps the
    range): per-uid limits (RLIMIT_NPROC) then count one run's processes only."""
    return os.geteuid() == 0 and _RANGE.usable()


def allocate_ids() -> RunIds | None:
    """The ids for a new run: None on a non-root host (the run keeps the host's uid);
    shared ones if the machine cannot give a run its own (see the module's doc).

    Raises OSError, with what to do, when the lock file cannot be used or every id is taken.
    """
    if os.geteuid() != 0:
        return None
    if not _RANGE.usable():
        return RunIds(RUN_UID, RUN_GID, shared=True)
    index, fd = _RANGE.take()
    return RunIds(BASE + index, BASE + index, fd=fd)
