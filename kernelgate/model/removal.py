"""Removing a directory tree a program made, whatever it made in it. Stdlib only.

The host removes each run directory after its run, the zygote removes its host's when the
host dies, and a later gateway removes what dead hosts left: three places, one remover
(here, the one layer all of them may import). The program chose everything inside the tree:
its depth (any: a chain of ``mkdir``/``chdir`` has no limit), its width, its names (any
bytes), its modes, its file types; and a program that outlives its run, or a user who
planted the tree, may change it while it is being removed. So :func:`remove_tree`:

- never recurses: an explicit stack of directories, any depth, in constant Python stack;
- never follows anything: each step opens one name relative to a directory it holds open
  (``O_NOFOLLOW | O_DIRECTORY``), so a symbolic link is only unlinked and a directory
  swapped for a link midway is unlinked as a link; a directory it has closed is found
  again through ``..`` only if that is the very directory (device and inode) it left,
  else by name from the top; it never enters another file system (a mount point is left);
- holds a bounded number of file descriptors (:data:`OPEN_DIRS` levels, whatever the
  depth), and remembers a bounded number of names per listing (:data:`BATCH`);
- gives search and write back to a directory the program took them from (a non-root host
  owns its program's files; root needs no such help), through the fd it holds;
- ends: it stops at its deadline, and says what it left and why, instead of raising.
"""

from __future__ import annotations

import errno
import os
import time

__all__ = ["BATCH", "OPEN_DIRS", "REMOVE_TIMEOUT", "remove_tree"]

#: Directory levels held open at once (the top of the tree and the deepest few): the rest
#: are closed, and found again on the way back up.
OPEN_DIRS = 32
#: Subdirectories one listing remembers before they are entered (a directory with more is
#: listed again): memory stays bounded however wide a directory is.
BATCH = 4096
#: Seconds a removal may take before it gives up and reports what is left. Removing costs
#: about what making cost (some microseconds an entry), so a run's tree is gone long
#: before; this bounds a program that outlives its run and keeps refilling its tree.
REMOVE_TIMEOUT = 300.0

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
_PATH = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
#: What opening a name as a directory says when it is something else (a link, a file).
_NOT_A_DIR = (errno.ELOOP, errno.ENOTDIR)
#: How many problems a report names (it counts the rest).
_NAMED = 3


class _Dir:
    """One directory of the walk: its name in its parent, its fd (-1: closed for now),
    its identity, the subdirectories to enter next, and what could not be removed."""

    __slots__ = ("name", "fd", "ident", "todo", "left", "fixed", "more")

    def __init__(self, name: str, fd: int, ident: tuple[int, int]) -> None:
        self.name = name
        self.fd = fd
        self.ident = ident
        self.todo: list[str] = []
        self.left: set[str] = set()  # names not removable: skipped when listed again
        self.fixed = False  # its mode was given back once already
        self.more = True  # a listing may still find something


class _Removal:
    """One :func:`remove_tree` call: the stack of open directories and what went wrong."""

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.problems: list[str] = []
        self.count = 0
        self.dev = -1
        self.stack: list[_Dir] = []
        self.low = 1  # stack[1:low] are closed; stack[0] and stack[low:] are open

    def problem(self, where: str, why: object) -> None:
        self.count += 1
        if len(self.problems) < _NAMED:
            self.problems.append(f"{where}: {why}")

    def where(self, name: str = "") -> str:
        depth = len(self.stack) + (1 if name else 0)
        return f"{name or self.stack[-1].name!r} at depth {depth}"

    # -- one entry ---------------------------------------------------------------------------

    def enter(self, parent: int, name: str) -> tuple[int, tuple[int, int]]:
        """Open directory ``name`` in ``parent``, never following a link; mode 000 is
        given back first (if it is ours to change). Raises OSError."""
        try:
            fd = os.open(name, _DIR, dir_fd=parent)
        except PermissionError:
            fd = _open_denied(parent, name)
        try:
            st = os.fstat(fd)
            if self.dev != -1 and st.st_dev != self.dev:
                raise OSError(errno.EXDEV, "another file system (a mount point): not entered")
        except BaseException:
            os.close(fd)
            raise
        return fd, (st.st_dev, st.st_ino)

    def unlink(self, d: _Dir, fd: int, name: str) -> None:
        """Remove the non-directory ``name`` (a link only loses its name); one that
        became a directory since it was listed is queued; one that stays is reported."""
        try:
            os.unlink(name, dir_fd=fd)
            return
        except FileNotFoundError:
            return
        except IsADirectoryError:
            d.todo.append(name)
            return
        except PermissionError as exc:
            error: OSError = exc
            if self.give_back(d, fd):
                try:
                    os.unlink(name, dir_fd=fd)
                    return
                except FileNotFoundError:
                    return
                except OSError as exc2:
                    error = exc2
        except OSError as exc:
            error = exc
        self.problem(self.where(name), error.strerror)
        d.left.add(name)

    def rmdir(self, d: _Dir, fd: int, name: str, full_ok: bool = False) -> bool:
        """Remove the directory ``name`` if it is empty; True once it is gone. A full one
        is entered next (``full_ok``) or was reported on its way out; other failures are
        reported here. Either way a name that stays is skipped from then on."""
        try:
            os.rmdir(name, dir_fd=fd)
            return True
        except FileNotFoundError:
            return True
        except NotADirectoryError:
            self.unlink(d, fd, name)  # swapped for a link since it was listed
            return True
        except PermissionError as exc:
            error: OSError = exc
            if self.give_back(d, fd):
                try:
                    os.rmdir(name, dir_fd=fd)
                    return True
                except FileNotFoundError:
                    return True
                except OSError as exc2:
                    error = exc2
        except OSError as exc:
            error = exc
        if error.errno in (errno.ENOTEMPTY, errno.EEXIST):
            if not full_ok:
                d.left.add(name)
            return False
        self.problem(self.where(name), error.strerror)
        d.left.add(name)
        return False

    @staticmethod
    def give_back(d: _Dir, fd: int) -> bool:
        """Give the owner write and search in ``d`` again (once); False if it was done
        already or is not ours to do."""
        if d.fixed:
            return False
        d.fixed = True
        try:
            os.fchmod(fd, 0o700)
        except OSError:
            return False
        return True

    # -- the walk ----------------------------------------------------------------------------

    def remove(self, top: int, name: str) -> None:
        """Remove ``name`` in the directory ``top`` (held open by the caller)."""
        try:
            fd, ident = self.enter(top, name)
        except FileNotFoundError:
            return
        except OSError as exc:
            if exc.errno in _NOT_A_DIR:  # the run directory replaced by a link or a file
                try:
                    os.unlink(name, dir_fd=top)
                except FileNotFoundError:
                    pass
                except OSError as exc2:
                    self.problem(repr(name), exc2.strerror)
            else:
                self.problem(repr(name), exc.strerror)
            return
        self.dev = ident[0]
        self.stack = [_Dir(name, fd, ident)]
        try:
            self.walk()
        finally:
            for d in self.stack:
                if d.fd >= 0:
                    os.close(d.fd)
        try:
            os.rmdir(name, dir_fd=top)
        except FileNotFoundError:
            pass
        except OSError as exc:
            if not self.count:
                self.problem(repr(name), exc.strerror)  # else: the reasons are named already

    def walk(self) -> None:
        stack = self.stack
        while stack:
            if time.monotonic() > self.deadline:
                self.problem(self.where(), "the removal ran out of time")
                return
            d = stack[-1]
            if d.fd < 0 and not self.reopen(len(stack) - 1, -1):
                self.lost(len(stack) - 1)
            elif d.todo:
                self.descend(d, d.todo.pop())
            elif d.more:
                d.more = self.list(d)
            elif len(stack) > 1:
                self.ascend()
            else:
                return  # the top: the caller removes it

    def list(self, d: _Dir) -> bool:
        """List ``d`` once: unlink what is not a directory, remove empty subdirectories,
        queue the others (up to :data:`BATCH`). True if it should be listed again once
        they are removed (it queued some: what was added meanwhile is found then)."""
        queued = False
        try:
            with os.scandir(d.fd) as entries:
                for entry in entries:
                    name = entry.name
                    if name in d.left:
                        continue
                    try:
                        is_dir = entry.is_dir(follow_symlinks=False)
                    except OSError:
                        is_dir = False  # gone, or not statable: unlink says which
                    if not is_dir:
                        self.unlink(d, d.fd, name)
                    elif not self.rmdir(d, d.fd, name, full_ok=True) and name not in d.left:
                        d.todo.append(name)
                        queued = True
                        if len(d.todo) >= BATCH:
                            break
        except OSError as exc:
            self.problem(self.where(), f"cannot be listed: {exc.strerror}")
            return False
        return queued

    def descend(self, d: _Dir, name: str) -> None:
        try:
            fd, ident = self.enter(d.fd, name)
        except FileNotFoundError:
            return
        except OSError as exc:
            if exc.errno in _NOT_A_DIR:
                self.unlink(d, d.fd, name)  # swapped for a link since it was listed
            else:
                self.problem(self.where(name), exc.strerror)
                d.left.add(name)
            return
        self.stack.append(_Dir(name, fd, ident))
        if len(self.stack) - self.low > OPEN_DIRS:  # bound the fds: close the shallowest
            shallow = self.stack[self.low]
            os.close(shallow.fd)
            shallow.fd = -1
            self.low += 1

    def ascend(self) -> None:
        """Leave the finished top directory: its parent (open again if it was closed)
        removes it."""
        done = self.stack.pop()
        i = len(self.stack) - 1
        parent = self.stack[i]
        try:
            found = parent.fd >= 0 or self.reopen(i, done.fd)
        finally:
            os.close(done.fd)
        if found:
            self.rmdir(parent, parent.fd, done.name)
        else:
            self.lost(i)

    def reopen(self, i: int, child: int) -> bool:
        """Open ``stack[i]`` again (closed to bound the fds): ``..`` of its open ``child``
        if that is the very directory, else by name from the top, each step checked."""
        d = self.stack[i]
        if child >= 0:
            try:
                fd = os.open("..", _DIR, dir_fd=child)
            except OSError:
                fd = -1
            if fd >= 0:
                try:
                    same = _ident(fd) == d.ident
                except OSError:
                    same = False
                if same:
                    d.fd = fd
                    self.low = i
                    return True
                os.close(fd)
        # stack[1:i + 1] are closed (stack[0] never is): down from the top, one at a time.
        for k in range(1, i + 1):
            here, above = self.stack[k], self.stack[k - 1]
            try:
                fd, ident = self.enter(above.fd, here.name)
            except OSError:
                fd, ident = -1, (0, 0)
            if fd >= 0 and ident != here.ident:
                os.close(fd)
                fd = -1
            if k > 1:
                os.close(above.fd)
                above.fd = -1
            if fd < 0:
                return False
            here.fd = fd
        self.low = i
        return True

    def lost(self, i: int) -> None:
        """``stack[i]`` is no longer where it was (a live program moved it): it and what
        is below it are out of reach; its parent lists again (it is never the top)."""
        self.problem(self.where(), "moved away while it was being removed")
        for d in self.stack[i:]:
            if d.fd >= 0:
                os.close(d.fd)
        del self.stack[i:]
        self.low = min(self.low, len(self.stack))
        self.stack[-1].more = True

    def report(self) -> str:
        if not self.count:
            return ""
        more = f" (and {self.count - len(self.problems)} more)" if self.count > _NAMED else ""
        return "; ".join(self.problems) + more


def _ident(fd: int) -> tuple[int, int]:
    st = os.fstat(fd)
    return st.st_dev, st.st_ino


def _open_denied(parent: int, name: str) -> int:
    """Open directory ``name`` in ``parent`` whose mode denies us: give its owner read,
    write and search through an ``O_PATH`` fd (the very inode, never a link), then open
    that inode. Raises the ``PermissionError`` when it is not ours to change."""
    handle = os.open(name, _PATH, dir_fd=parent)
    try:
        proc = f"/proc/self/fd/{handle}"
        os.chmod(proc, 0o700)  # through the fd: the inode we hold, whatever the name is now
        return os.open(proc, _DIR & ~os.O_NOFOLLOW)  # /proc's link is to that inode
    finally:
        os.close(handle)


def remove_tree(path: str, timeout: float = REMOVE_TIMEOUT) -> str:
    """Remove ``path`` and everything below it, never following a link, never leaving
    the tree; return ``""`` once it is gone, else what is left and why (never raises for
    what it finds). ``path``'s parent is trusted (the host's temporary directory); if
    ``path`` itself is no longer a directory, only that entry goes.

    >>> import tempfile
    >>> top = tempfile.mkdtemp()
    >>> os.makedirs(os.path.join(top, "a", "b"))
    >>> remove_tree(top), os.path.exists(top)
    ('', False)
    """
    path = os.path.abspath(path)
    parent, name = os.path.split(path)
    if not name or name in (".", ".."):
        return f"{path!r} names no entry of a directory: nothing removed"
    try:
        top = os.open(parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        return ""
    except OSError as exc:
        return f"{parent!r} cannot be opened: {exc.strerror}"
    removal = _Removal(time.monotonic() + timeout)
    try:
        removal.remove(top, name)
    except OSError as exc:  # each step handles its own; this is the backstop
        removal.problem(repr(name), exc.strerror or exc)
    finally:
        os.close(top)
    left = removal.report()
    return f"{path!r} is not fully removed: {left}" if left else ""
