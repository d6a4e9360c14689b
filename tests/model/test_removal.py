"""The remover of what programs leave (issue 18, finding 1), attacked directly.

Depth beyond any recursion limit with a small fd limit, width beyond one listing's batch,
names of any bytes, modes a non-root owner must give back, a directory that is not ours,
and a live racer swapping directories for links to a host directory while root removes
its tree (a user's planted ``kernelgate-*`` leftover in a shared ``/tmp``, or a program
that outlived its run): nothing outside the tree is ever touched, nothing raises.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kernelgate.gateway.process import sweep_run_dirs
from kernelgate.model import removal
from kernelgate.model.removal import remove_tree
from tests.hardening.asuser import SYSTEM_PYTHON, unavailable
from tests.hardening.asuser import USER_UID as USER
from tests.trees import dead_owner, deep_tree

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(removal.__file__))))
#: Acting as another user: root, setpriv, a system interpreter the user may run.
NEEDS_ROOT = pytest.mark.skipif(bool(unavailable()), reason=unavailable() or "-")


@pytest.fixture
def shm(tmp_path: Path) -> Iterator[Path]:
    """A directory on tmpfs where there is one (deep trees cost disk I/O elsewhere)."""
    parent = "/dev/shm" if os.access("/dev/shm", os.W_OK) else str(tmp_path)
    path = Path(parent) / f"kg-removal-{os.getpid()}-{time.monotonic_ns()}"
    path.mkdir()
    yield path
    assert remove_tree(str(path)) == ""


def _as(user: int) -> list[str]:
    """The start of a command line running the system interpreter as ``user`` (-1: us)."""
    if user < 0:
        return [sys.executable, "-I"]
    setpriv = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups"]
    return [*setpriv, SYSTEM_PYTHON, "-I"]


def _python(code: str, *, user: int = -1, timeout: float = 120) -> str:
    """Run ``code`` in a fresh interpreter of this checkout (as ``user``); its stdout."""
    path = f"import sys; sys.path.insert(0, {REPO!r})\n"
    proc = subprocess.run(
        [*_as(user), "-c", path + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


@pytest.mark.timeout(240)
def test_a_chain_far_deeper_than_the_fd_limit_is_removed(shm: Path) -> None:
    """20,000 levels under ``RLIMIT_NOFILE`` = 40: no recursion, a bounded number of fds."""
    top = shm / "top"
    top.mkdir()
    deep_tree(str(top), 20_000)
    out = _python(
        f"""
        import json, resource
        resource.setrlimit(resource.RLIMIT_NOFILE, (40, 40))
        from kernelgate.model.removal import remove_tree
        print(json.dumps(remove_tree({str(top)!r})))
        """
    )
    assert json.loads(out) == ""
    assert not top.exists()


def test_a_wide_directory_with_odd_names_is_removed(
    shm: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """More subdirectories than one listing remembers, names of any bytes, every file
    type; links only lose their names."""
    monkeypatch.setattr(removal, "BATCH", 16)
    host = shm / "host"
    host.mkdir()
    (host / "keep").write_text("x")
    top = shm / "top"
    top.mkdir()
    names = [b"a\nb", b"\xff\xfe", b" ", b"-rf", b"...", b"\x01", "é".encode()]
    for i in range(300):
        (top / f"f{i}").write_text("x")
        sub = top / f"d{i}"
        sub.mkdir()
        (sub / "x").write_text("x")
        (sub / "link").symlink_to(host)
    for name in names:
        with open(os.path.join(os.fsencode(top), name), "w"):
            pass
        os.mkdir(os.path.join(os.fsencode(top), name + b"-dir"))
    os.mkfifo(top / "fifo")
    (top / "hard").hardlink_to(host / "keep")
    assert remove_tree(str(top)) == ""
    assert not top.exists()
    assert (host / "keep").read_text() == "x" and os.listdir(host) == ["keep"]


def test_the_top_replaced_by_a_link_only_loses_the_link(shm: Path) -> None:
    host = shm / "host"
    host.mkdir()
    (host / "keep").write_text("x")
    link = shm / "run"
    link.symlink_to(host)
    assert remove_tree(str(link)) == ""
    assert not os.path.lexists(link) and (host / "keep").read_text() == "x"
    assert remove_tree(str(shm / "gone")) == ""  # nothing there: nothing to say


@NEEDS_ROOT
@pytest.mark.timeout(120)
def test_an_owner_gives_back_modes_and_reports_what_is_not_its_own(shm: Path) -> None:
    """An unprivileged owner (a non-root host, whose program's files are its own) removes
    a chain of mode 000, 0o100 and 0o500 directories; a directory of root's inside is
    left, reported in the answer, never raised."""
    os.chmod(shm, 0o755)
    mine = shm / "mine"  # the user's own directory, where its trees are
    mine.mkdir()
    os.chown(mine, USER, USER)
    top = mine / "top"
    top.mkdir()
    deep_tree(str(top), 1500, zero=True, uid=USER)
    other = mine / "other"
    other.mkdir()
    for mode, name in ((0o100, "x-only"), (0o500, "r-x"), (0o300, "w-x")):
        sub = other / name
        sub.mkdir()
        (sub / "f").write_text("x")
        os.chown(sub / "f", USER, USER)
        os.chown(sub, USER, USER)
        os.chmod(sub, mode)
    roots = other / "roots"
    roots.mkdir()
    (roots / "f").write_text("x")
    os.chmod(roots, 0o755)
    os.chown(other, USER, USER)
    os.chmod(other, 0)
    out = _python(
        f"""
        import json
        from kernelgate.model.removal import remove_tree
        print(json.dumps([remove_tree({str(top)!r}), remove_tree({str(other)!r})]))
        """,
        user=USER,
    )
    first, second = json.loads(out)
    assert first == "" and not top.exists()
    assert "'f' at depth 3: Permission denied" in second, second
    assert sorted(os.listdir(other)) == ["roots"]  # only what is root's is left
    assert (roots / "f").read_text() == "x"


# -- a live racer ----------------------------------------------------------------------------

#: As the planting user: keep a ``kernelgate-<dead>-*`` tree in BASE whose ``x`` is swapped
#: (renameat2 RENAME_EXCHANGE) with a link to HOST as fast as it can, its ``x/y`` refilled,
#: until STOP exists.
_RACER = """
import ctypes, os, sys
base, name, host, stop = sys.argv[1:5]
libc = ctypes.CDLL(None, use_errno=True)
top = os.path.join(base, name)
x, l = os.path.join(top, "x"), os.path.join(top, "l")
n = 0
while not os.path.exists(stop):
    n += 1
    try:
        os.makedirs(os.path.join(x, "y", "z"), exist_ok=True)
        open(os.path.join(x, "y", f"f{n}"), "w").close()
        if not os.path.lexists(l):
            os.symlink(host, l)
        libc.renameat2(-100, x.encode(), -100, l.encode(), 2)
        libc.renameat2(-100, x.encode(), -100, l.encode(), 2)
    except OSError:
        pass
"""


@NEEDS_ROOT
@pytest.mark.timeout(120)
def test_roots_sweep_racing_a_planting_user_never_touches_the_host(shm: Path) -> None:
    """A user plants a dead host's name in a shared, sticky base (``/tmp``) and swaps its
    directories for links to a host directory while root's sweep removes them: the host
    directory keeps its mode and every file, however the race falls."""
    os.chmod(shm, 0o755)
    base = shm / "tmp"
    base.mkdir()
    os.chmod(base, 0o1777)
    host = shm / "host"
    (host / "y" / "z").mkdir(parents=True)
    (host / "keep").write_text("x")
    (host / "y" / "keep").write_text("x")
    os.chmod(host, 0o755)
    before = sorted(str(p.relative_to(host)) for p in host.rglob("*"))
    stop = shm / "stop"
    name = f"{dead_owner()}20250101T000000-0a1b2c3d-race"
    racer = subprocess.Popen([*_as(USER), "-c", _RACER, str(base), name, str(host), str(stop)])
    try:
        deadline = time.monotonic() + 4.0
        sweeps = 0
        while time.monotonic() < deadline:
            sweeps += os.path.lexists(base / name)
            sweep_run_dirs(str(base))  # never raises, whatever it finds
            assert stat.S_IMODE(os.stat(host).st_mode) == 0o755
            assert sorted(str(p.relative_to(host)) for p in host.rglob("*")) == before
    finally:
        stop.touch()
        racer.wait(timeout=10)
    assert sweeps > 10, "the racer's tree was swept too few times to race"
    sweep_run_dirs(str(base))
    assert os.listdir(base) == []
    assert (host / "y" / "keep").read_text() == "x"


# -- the sweep never raises, whatever the names --------------------------------------------


def test_crafted_names_and_types_never_stop_the_sweep(tmp_path: Path) -> None:
    """Names that parse oddly (non-ASCII digits, huge numbers), a dead owner's name on a
    file, a FIFO, a link and an unreadable directory: the sweep returns, removes only
    dead owners' directories, follows nothing."""
    base = tmp_path / "tmp"
    base.mkdir()
    host = tmp_path / "host"
    host.mkdir()
    (host / "keep").write_text("x")
    dead = dead_owner()
    ns = os.stat("/proc/self/ns/pid").st_ino
    kept = [
        "kernelgate-\u0663-\u0663-\u0663-x",  # Arabic-Indic digits: not an owner mark
        f"kernelgate-1-{'9' * 200}-{ns + 1}-x",  # another pid namespace: cannot tell
        f"{dead}file",
        f"{dead}fifo",
        f"{dead}link",
    ]
    (base / kept[0]).mkdir()
    (base / kept[1]).mkdir()
    (base / kept[2]).write_text("x")
    os.mkfifo(base / kept[3])
    (base / kept[4]).symlink_to(host)
    gone = [f"{dead}closed", f"kernelgate-{'9' * 200}-1-{ns}-x"]  # a huge pid: gone
    for name in gone:
        (base / name / "sub").mkdir(parents=True)
        (base / name / "sub" / "f").write_text("x")
        os.chmod(base / name / "sub", 0)
        os.chmod(base / name, 0)
    removed = sweep_run_dirs(str(base))
    assert sorted(removed) == sorted(gone)
    assert sorted(os.listdir(base)) == sorted(kept)
    assert (host / "keep").read_text() == "x"
    for name in kept:
        path = base / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to mount")
def test_a_mount_point_inside_is_left_and_never_entered(shm: Path) -> None:
    """Programs cannot mount in the host's view (tests/hardening/test_deep_trees.py), but
    a mount an administrator left inside is another file system: not entered, reported."""
    top = shm / "top"
    (top / "a" / "m").mkdir(parents=True)
    (top / "a" / "f").write_text("x")
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "none", str(top / "a" / "m")], check=True
    )
    try:
        (top / "a" / "m" / "keep").write_text("x")
        left = remove_tree(str(top))
        # Its rmdir says busy before it would be entered; entered, its device differs.
        assert "'m' at depth 3: Device or resource busy" in left, left
        assert (top / "a" / "m" / "keep").read_text() == "x"
        assert os.listdir(top / "a") == ["m"]
    finally:
        subprocess.run(["umount", str(top / "a" / "m")], check=True)
    assert remove_tree(str(top)) == ""


def test_a_removal_out_of_time_says_so_and_leaves_the_rest(shm: Path) -> None:
    top = shm / "top"
    top.mkdir()
    deep_tree(str(top), 50)
    left = remove_tree(str(top), timeout=0)
    assert left.startswith(repr(str(top))) and "ran out of time" in left, left
    assert top.is_dir()
    assert remove_tree(str(top)) == ""


def test_a_sweep_out_of_time_logs_and_leaves_the_rest_to_the_next(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    base = tmp_path / "tmp"
    base.mkdir()
    left = base / f"{dead_owner()}20250101T000000-0a1b2c3d-x"
    left.mkdir()
    deep_tree(str(left), 20)
    with caplog.at_level("WARNING", logger="kernelgate.gateway"):
        assert sweep_run_dirs(str(base), timeout=0) == []
    assert left.is_dir()
    assert "ran out of time" in caplog.text and str(left) in caplog.text, caplog.text
    assert sweep_run_dirs(str(base)) == [left.name]
    assert os.listdir(base) == []
