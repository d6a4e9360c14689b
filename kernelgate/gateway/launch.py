"""Starting a child whose runtime cannot confine itself (Node): found, probed, launched.

A Python child applies its sandbox to itself; JavaScript cannot. So the host starts the
launcher (:mod:`kernelgate.kernels.python.launcher`, ``python -I -S -c LAUNCHER ROOT``),
puts it in the run's cgroup, and only then hands it its config on fd 0 and lets it go: it
applies the same sandbox code, then execs the runtime with fds 0-3.

- :func:`probe_node`: the Node binary (on ``PATH`` or given), its version (>= 18) and the
  shared libraries it maps, found once per binary by running it;
- :class:`LaunchCommand`: what to exec and what it reads (the view keeps it, landlock allows
  it);
- :func:`spawn_launched_child`: the child, as :func:`.process.spawn_child` gives one.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kernelgate.kernels.python import LAUNCHER, package_root
from kernelgate.model.constants import LAUNCH_CONFIG_MAX as MAX_CONFIG_BYTES

from .process import ChildProcess, high_fd, start_child

__all__ = [
    "MIN_NODE",
    "NODE_KERNEL_DIR",
    "NodeUnavailable",
    "NodeInstall",
    "LaunchCommand",
    "probe_node",
    "spawn_launched_child",
]

#: The oldest Node kernelgate runs programs with.
MIN_NODE = (18, 0, 0)
#: The Node kernel's directory (read by the child: the view keeps it, landlock allows it).
NODE_KERNEL_DIR = os.path.join(package_root(), "kernelgate", "kernels", "node")

# Prints what the probe needs as JSON: the version, the real binary, and every file the
# process maps once started (the binary, its shared libraries, the loader).
_PROBE_JS = (
    "const fs=require('fs');"
    "const maps=fs.readFileSync('/proc/self/maps','utf8').split('\\n')"
    ".map(l=>l.split(/\\s+/).slice(5).join(' ')).filter(p=>p.startsWith('/'));"
    "process.stdout.write(JSON.stringify({version:process.versions.node,"
    "exec:fs.realpathSync(process.execPath),maps:[...new Set(maps)]}))"
)
_cache: dict[str, NodeInstall] = {}
_cache_lock = threading.Lock()


class NodeUnavailable(RuntimeError):
    """No usable Node here: the message names what was looked for and what to do."""


@dataclass(frozen=True)
class LaunchCommand:
    """What the launcher execs once the sandbox is in place: ``runtime`` (whose seccomp
    filter and rlimits, :data:`kernelgate.kernels.python.seccomp.RUNTIMES`), ``executable``
    (absolute), ``argv`` (``argv[0]`` included) and ``paths``, what it reads (its binary,
    libraries, kernel): brought back read-only where the view hides them, and readable
    under landlock with the system's paths."""

    runtime: str
    executable: str
    argv: tuple[str, ...]
    paths: tuple[str, ...]


@dataclass(frozen=True)
class NodeInstall:
    """A probed Node: its real binary, version and the shared libraries it maps."""

    executable: str
    version: tuple[int, int, int]
    libraries: tuple[str, ...]

    @property
    def paths(self) -> tuple[str, ...]:
        """What a Node child reads: its binary, its libraries and the Node kernel."""
        return (self.executable, *self.libraries, NODE_KERNEL_DIR)

    def command(self, args: Sequence[str], max_old_space_mib: int | None = None) -> LaunchCommand:
        """``node [--max-old-space-size=MiB] *args`` as a :class:`LaunchCommand`.

        ``max_old_space_mib``: V8's own heap bound (RLIMIT_AS does not suit V8: the run's
        memory cgroup and this bound it instead).
        """
        # No OpenSSL config file: Node reads the system's (/etc/ssl/openssl.cnf) at start and
        # exits 13 when it cannot, and landlock keeps /etc out of reach. Node uses only a
        # "nodejs_conf" section of it, which distributions do not ship.
        flags = ["--openssl-config=/dev/null"]
        if max_old_space_mib is not None:
            flags.append(f"--max-old-space-size={max_old_space_mib}")
        argv = (self.executable, *flags, *args)
        return LaunchCommand("node", self.executable, argv, self.paths)


def _find(node: str | os.PathLike[str], path_env: str | None) -> str:
    text = os.fspath(node)
    search = path_env if path_env is not None else os.environ.get("PATH", os.defpath)
    found = text if os.sep in text else shutil.which(text, path=search)
    if not found or not os.path.isfile(found) or not os.access(found, os.X_OK):
        where = f"at {text!r}" if os.sep in text else f"as {text!r} on PATH={search!r}"
        raise NodeUnavailable(
            f"Node.js was not found: looked for an executable {where}. Install Node.js "
            f">= {MIN_NODE[0]} (Debian: apt-get install nodejs), or pass node='/path/to/node'"
        )
    return os.path.abspath(found)


def probe_node(node: str | os.PathLike[str] = "node", path_env: str | None = None) -> NodeInstall:
    """Find ``node`` (a path, or a name looked up on ``path_env``, default ``$PATH``), run
    it once and return what it is: version >= :data:`MIN_NODE` and the libraries it maps.
    Cached per binary. Raises :class:`NodeUnavailable`, naming what was looked for, when
    it is missing, fails to run, or is too old."""
    found = _find(node, path_env)
    with _cache_lock:
        if found in _cache:
            return _cache[found]
    try:
        out = subprocess.run(
            [found, "-e", _PROBE_JS],
            capture_output=True,
            timeout=30,
            env={"PATH": "/usr/bin:/bin"},
            check=False,
            stdin=subprocess.DEVNULL,
        )
        info: dict[str, Any] = json.loads(out.stdout)
        version = tuple(int(part) for part in str(info["version"]).split(".")[:3])
        executable = str(info["exec"])
        maps = [str(p) for p in info["maps"]]
    except (OSError, subprocess.TimeoutExpired, ValueError, KeyError, TypeError) as exc:
        detail = ""
        if isinstance(exc, ValueError) and "out" in locals():
            detail = f" (exit {out.returncode}, stderr {out.stderr[-300:]!r})"
        raise NodeUnavailable(
            f"{found} did not run as Node.js: {exc!r}{detail}. Install Node.js >= "
            f"{MIN_NODE[0]}, or pass node='/path/to/node'"
        ) from None
    if len(version) != 3 or version < MIN_NODE:
        raise NodeUnavailable(
            f"{found} is Node.js {'.'.join(map(str, version))}; kernelgate needs Node.js >= "
            f"{'.'.join(map(str, MIN_NODE))}. Install a newer one, or pass node='/path/to/node'"
        )
    libraries = tuple(
        sorted(
            {
                os.path.realpath(p)
                for p in maps
                if os.path.isfile(p) and os.path.realpath(p) != executable
            }
        )
    )
    install = NodeInstall(executable, (version[0], version[1], version[2]), libraries)
    with _cache_lock:
        _cache[found] = install
    return install


def spawn_launched_child(
    python: str,
    env: Mapping[str, str],
    run_dir: str,
    sandbox: Mapping[str, Any],
    command: LaunchCommand,
    before_start: Callable[[ChildProcess], None] | None = None,
    warm: bool = False,
) -> ChildProcess:
    """Start the launcher (``python -I -S -c LAUNCHER ROOT``) for ``command``: a new
    session, fd 0 the config pipe, fd 1 and 2 pipes to us, fd 3 a socketpair to us.

    ``sandbox``: what a Python child would get as ``options["sandbox"]``
    (:meth:`.sandbox.SandboxPlan.child_options`, with the run's ids on a root host);
    ``run_dir``: its run directory (made for the run's uid). ``before_start(child)`` runs
    while the launcher waits, before anything is confined or forked: put it in the run's
    cgroup there (:meth:`.cgroups.RunCgroup.attach`), so the sandbox's processes and the
    program are counted from the start; if it raises, the child is killed and reaped and
    the exception goes on. ``warm``: started ahead of its run; if it cannot enter its
    sandbox it exits 71 (the pool drops it) instead of answering ``sandbox_unavailable``.

    Returns once the launcher has its config; the exec of ``command`` follows in the child.
    """
    config = json.dumps(
        {
            "cwd": run_dir,
            "sandbox": dict(sandbox),
            "runtime": command.runtime,
            "executable": command.executable,
            "argv": list(command.argv),
            "runtime_paths": list(command.paths),
            "warm": warm,
        }
    ).encode()
    if len(config) > MAX_CONFIG_BYTES:
        raise ValueError(
            f"the launch config is {len(config)} bytes, over {MAX_CONFIG_BYTES}: fewer or "
            "shorter read_paths, or a shorter command"
        )
    config_r, config_w = os.pipe()
    config_r = high_fd(config_r)
    argv = [python, "-I", "-S", "-c", LAUNCHER, package_root()]
    try:
        child = start_child(python, argv, env, stdin_fd=config_r)
    except BaseException:
        os.close(config_w)
        raise
    finally:
        os.close(config_r)
    try:
        if before_start is not None:
            before_start(child)
        # Fits the pipe's buffer (MAX_CONFIG_BYTES): never blocks. EOF is the go.
        os.write(config_w, config)
    except BaseException:
        child.abandon()  # it is still waiting for its config
        raise
    finally:
        os.close(config_w)
    return child
