"""The run's view of the file system, arranged in its mount namespace. Stdlib only (ctypes).

What a program sees at the namespace levels (issue 9, findings 4, 5 and 9):

- the whole host tree **read-only and nosuid**, recursively (``mount_setattr`` on ``/``):
  no code path (a site-packages ``.pth``, the interpreter, kernelgate itself), no
  world-writable directory (``/var/tmp``: a channel between runs), no setuid file, no
  ``/sys`` (cgroupfs: ``pids.max``, the root cgroup's ``cgroup.procs``) can be written.
  Setting flags on mounts the namespace inherited (locked mounts) is allowed; only clearing
  them is not, so this works in an unprivileged user namespace too;
- **private directories**, each an empty tmpfs over the host's: ``/tmp`` and ``/dev/shm``
  (writable, private to the run), the run directory's parent (the host's other runs live
  there: finding 9, wherever ``tmp_dir`` is), ``/dev/mqueue`` if mounted, and (root host
  only) each topmost directory the run's unprivileged uid could not traverse on the way to
  a path it needs (``/root`` for a pyenv interpreter). What must stay visible under them
  (the interpreter's paths, the configured read paths) comes back read-only, detached copies
  of its mount trees taken before anything was hidden; the run directory comes back last,
  writable. The parent's and the ancestors' tmpfs are made read-only once filled;
- (root host) the configured read paths come back **idmapped** (file uid/gid 0 shown as the
  run's uid): a run whose uid 0 is its own uid outside reads them as root did before.

``/proc`` is mounted by the namespace's init, read-only (``/proc/sys`` above all).
"""

from __future__ import annotations

import os
import stat

from kernelgate.model.constants import RUN_GID, RUN_UID

from .syscalls import (
    CLONE_NEWUSER,
    MOUNT_ATTR_IDMAP,
    MOUNT_ATTR_NODEV,
    MOUNT_ATTR_NOSUID,
    MOUNT_ATTR_RDONLY,
    MS_NODEV,
    MS_NOSUID,
    MS_PRIVATE,
    MS_REC,
    mount,
    move_mount,
    open_tree,
    unshare,
)
from .syscalls import mount_setattr as set_attr

__all__ = [
    "RUN_UID",
    "RUN_GID",
    "private_view",
    "private_dirs",
    "untraversable_ancestors",
    "warm",
    "idmap_userns",
    "writable_proc",
    "write_maps",
]


def _open_tree(path: str, attr_set: int, userns_fd: int = -1) -> int:
    """A detached copy of the mount trees at ``path``, with ``attr_set`` on all of them
    (and idmapped through ``userns_fd`` when >= 0; without the idmap if the file system
    cannot have one)."""
    tree = open_tree(path)
    try:
        if userns_fd >= 0:
            try:
                set_attr(tree, attr_set | MOUNT_ATTR_IDMAP, userns_fd=userns_fd)
                return tree
            except OSError:
                pass  # e.g. a file system without idmapped mounts: readable as before
        set_attr(tree, attr_set)
    except BaseException:
        os.close(tree)
        raise
    return tree


def _move_mount(tree: int, target: str) -> None:
    if not os.path.lexists(target):
        if os.path.isdir(f"/proc/self/fd/{tree}"):
            os.makedirs(target, exist_ok=True)
        else:  # a single file kept: its mount point is an empty file
            os.makedirs(os.path.dirname(target), exist_ok=True)
            os.close(os.open(target, os.O_WRONLY | os.O_CREAT, 0o644))
    move_mount(tree, target)


def _inside(path: str, top: str) -> bool:
    return path == top or path.startswith(top.rstrip("/") + "/")


def _outermost(paths: list[str]) -> list[str]:
    """The paths not inside another one of them."""
    kept: list[str] = []
    for path in sorted(set(paths)):
        if not any(_inside(path, k) for k in kept):
            kept.append(path)
    return kept


def untraversable_ancestors(paths: list[str], uid: int = RUN_UID) -> list[str]:
    """For each path, its topmost ancestor that ``uid`` (not its owner, not in its group)
    may not search: ``/root`` (mode 0700) for an interpreter under it."""
    found: list[str] = []
    for path in paths:
        parts = path.split("/")
        for end in range(2, len(parts)):
            ancestor = "/".join(parts[:end])
            owner_mode = _known_ancestors.get(ancestor) or _owner_mode(ancestor)
            if owner_mode is None:
                break
            if owner_mode[0] != uid and not owner_mode[1] & stat.S_IXOTH:
                found.append(ancestor)
                break
    return found


def _owner_mode(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_uid, st.st_mode


#: What :func:`warm` found: the interpreter's paths that exist (per list, normalised), and
#: the owner and mode of each of their ancestors. Found once in the zygote, not by each of
#: its children (about 100 stat calls). A path that appears later is not brought back
#: (the interpreter would not see it), one that goes away is skipped: neither opens
#: anything up.
_known_kept: dict[tuple[str, ...], list[str]] = {}
_known_ancestors: dict[str, tuple[int, int]] = {}


def warm(kept: list[str]) -> None:
    """Find once what :func:`private_view` needs to know of the interpreter's paths
    ``kept`` (which exist, and their ancestors' owners and modes), for every child."""
    existing = _existing(kept)
    for path in existing:
        parts = path.split("/")
        for end in range(2, len(parts)):
            ancestor = "/".join(parts[:end])
            owner_mode = _owner_mode(ancestor)
            if owner_mode is None:
                break
            _known_ancestors[ancestor] = owner_mode
    _known_kept[tuple(kept)] = existing


def _existing(paths: list[str]) -> list[str]:
    return [os.path.normpath(p) for p in paths if p and os.path.exists(p)]


def private_dirs(
    run_dir: str, kept: list[str], root_host: bool, uid: int = RUN_UID
) -> list[tuple[str, bool]]:
    """The directories hidden behind an empty tmpfs, outermost only: (path, writable).
    ``uid``: the run's uid outside (a root host)."""
    dirs: dict[str, bool] = {"/tmp": True, "/dev/shm": True}
    if os.path.isdir("/dev/mqueue"):
        dirs["/dev/mqueue"] = False
    parent = os.path.dirname(run_dir.rstrip("/"))
    if parent not in ("", "/"):
        dirs.setdefault(parent, False)
    if root_host:
        for ancestor in untraversable_ancestors([*kept, run_dir], uid):
            dirs.setdefault(ancestor, False)
    outer = _outermost([d for d in dirs if os.path.isdir(d)])
    return [(d, dirs[d]) for d in outer]


def idmap_userns(uid: int = RUN_UID, gid: int = RUN_GID) -> int:
    """An fd of a user namespace mapping 0 to ``uid``/``gid`` (for an idmapped mount),
    made by a short-lived child; the caller must be root (it writes the maps).

    The child names itself as ``/proc`` knows it: the caller may be in a new pid
    namespace of its own (a root zygote's child) while ``/proc`` is still the host's.
    """
    ready_r, ready_w = os.pipe()
    done_r, done_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the forked helper
        try:
            os.close(ready_r)
            os.close(done_w)
            unshare(CLONE_NEWUSER, "unshare user namespace")
            os.write(ready_w, os.readlink("/proc/self").encode())
            os.read(done_r, 1)
        finally:
            os._exit(0)
    os.close(ready_w)
    os.close(done_r)
    try:
        seen = os.read(ready_r, 32)
        if not seen.isdigit():
            raise OSError("could not make a user namespace for an idmapped mount")
        write_maps(int(seen), uid, gid)
        return os.open(f"/proc/{int(seen)}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
    finally:
        os.close(ready_r)
        os.close(done_w)
        os.waitpid(pid, 0)


def writable_proc() -> int:
    """A detached copy of the /proc mount: the maps stay writable through it once the view
    has made /proc read-only."""
    return open_tree("/proc", recursive=False)


def write_maps(pid: int, uid: int, gid: int, proc: int | None = None) -> None:
    """Map 0 inside ``pid``'s user namespace to ``uid``/``gid`` outside (written from the
    parent namespace, which needs CAP_SETUID/CAP_SETGID there for an id not its own), and
    deny setgroups in it. ``proc``: a /proc to write through (:func:`writable_proc`)."""
    for name, text in (("uid_map", f"0 {uid} 1"), ("setgroups", "deny"), ("gid_map", f"0 {gid} 1")):
        try:
            if proc is None:
                fd = os.open(f"/proc/{pid}/{name}", os.O_WRONLY)
            else:
                fd = os.open(f"{pid}/{name}", os.O_WRONLY, dir_fd=proc)
        except FileNotFoundError:
            if name == "setgroups":
                continue  # a kernel before 3.19
            raise
        try:
            os.write(fd, text.encode())
        finally:
            os.close(fd)


def private_view(
    run_dir: str,
    kept: list[str],
    read_paths: list[str],
    root_host: bool,
    ids: tuple[int, int] = (RUN_UID, RUN_GID),
) -> None:
    """Arrange the run's view (see the module's doc) in this process's mount namespace.

    ``kept``: the paths the interpreter reads (they come back read-only when hidden);
    ``read_paths``: the configured ones (the same, idmapped on a root host to ``ids``, the
    run's uid and gid outside).
    """
    mount("none", "/", None, MS_REC | MS_PRIVATE)
    run_dir = os.path.normpath(run_dir)
    known = _known_kept.get(tuple(kept))
    kept = _existing(kept) if known is None else known
    read_paths = _existing(read_paths)
    private = private_dirs(run_dir, [*kept, *read_paths], root_host, ids[0])

    def hidden(path: str) -> bool:
        return any(_inside(path, d) for d, _ in private)

    ro = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV
    trees: list[tuple[str, int]] = []
    idmap = -1
    try:
        # Every copy is taken before anything is hidden or made read-only. Order of
        # attaching: the interpreter's trees, then the read paths (which may lie inside
        # them), then the run directory (which may lie inside any of them).
        for path in _outermost([p for p in kept if hidden(p)]):
            try:
                trees.append((path, _open_tree(path, ro)))
            except FileNotFoundError:
                continue  # gone since :func:`warm` found it: nothing to bring back
        if root_host:
            wanted = [p for p in read_paths if p != "/"]
            if wanted:
                idmap = idmap_userns(*ids)
        else:
            wanted = [p for p in read_paths if hidden(p)]
        for path in _outermost(wanted):
            trees.append((path, _open_tree(path, ro, idmap)))
        trees.append((run_dir, _open_tree(run_dir, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV)))
        set_attr("/", MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID)
        for path, writable in private:
            options = "mode=1777,size=64m" if writable else "mode=0755,size=1m"
            mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV, options)
        for path, tree in trees:
            _move_mount(tree, path)
        for path, writable in private:
            if not writable:  # only mount points for what came back: nothing to write
                set_attr(path, MOUNT_ATTR_RDONLY, recursive=False)
    finally:
        for _, tree in trees:
            os.close(tree)
        if idmap >= 0:
            os.close(idmap)
