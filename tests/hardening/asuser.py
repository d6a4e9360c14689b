"""Run a gateway host as an unprivileged user, from a root test process.

The suite runs as root here; a host without privileges takes other paths (the child maps
its own uid, no idmapped read paths, no writable pids cgroup, ``process`` level keeps the
host's uid). :class:`AsUser` runs a host script as uid/gid :data:`USER_UID` (no
supplementary groups, through ``setpriv``) with the system interpreter
(:data:`SYSTEM_PYTHON`: world-readable, where the pyenv one under /root is not), the checkout
on ``PYTHONPATH`` and a ``tmp_dir`` the user owns, and returns what the script printed as
JSON on its last line.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import textwrap
from typing import Any

from kernelgate.kernels.python import package_root

#: The number of an inheritable pipe every host script holds from its start.
HOST_FD = 900
#: An id nothing else uses here (65534 is the shared run uid when a root host cannot give
#: each run its own, gateway/runids.py).
USER_UID = USER_GID = 65533
SYSTEM_PYTHON = "/usr/bin/python3"
#: Third-party modules the host imports, copied where the user can read them (the
#: checkout's own dependencies live in the pyenv's site-packages, under /root).
_HOST_DEPS = ("nh3", "markdown_it", "mdurl")


def unavailable() -> str:
    """Why this machine cannot run a host as another user ("" when it can)."""
    if os.geteuid() != 0:
        return "not root: cannot switch to another user"
    if shutil.which("setpriv") is None:
        return "no setpriv"
    if not os.access(SYSTEM_PYTHON, os.X_OK):
        return f"no {SYSTEM_PYTHON}"
    root = package_root()
    path = root
    while path != "/":
        if not os.stat(path).st_mode & 0o001:
            return f"{path} is not searchable by others: the user cannot import kernelgate"
        path = os.path.dirname(path)
    return ""


#: The start of every host script: a gateway factory and a result encoder.
_PRELUDE = '''
import asyncio, json, os, sys
from kernelgate import Gateway, Limits

HOST_FD = 900

ARGS = json.loads(sys.argv[1])
# An inheritable host fd, as a supervisor's log pipe would be: no child may get it.
_held = os.pipe()
os.dup2(_held[1], HOST_FD, inheritable=True)
FAST = Limits(wall_seconds=10, kill_grace_seconds=0.3, cpu_seconds=5)


def gateway(**kwargs):
    kwargs.setdefault("limits", FAST)
    kwargs.setdefault("strict", True)
    return Gateway(python=ARGS["python"], tmp_dir=ARGS["tmp_dir"], **kwargs)


async def warmed(gw):
    """A first run fills the pool; wait until it holds a booted child."""
    first = await gw.run("'warm-up'")
    assert first.ok, first.message
    filler = getattr(getattr(gw, "_pool", None), "_filler", None)
    if filler is not None:
        await asyncio.shield(filler)


def encode(r):
    return {
        "status": r.status, "value": r.value, "message": r.message, "stdout": r.stdout,
        "isolation": r.isolation, "warm": r.usage.get("warm"),
    }


def run_one(program, level, warm, **kwargs):
    async def main():
        async with gateway(sandbox=level, pool_size=1 if warm else 0, **kwargs) as gw:
            if warm:
                await warmed(gw)
            return await gw.run(program)

    return encode(asyncio.run(main()))
'''


class AsUser:
    """Host scripts run as :data:`USER_UID`, with their files under ``base``."""

    def __init__(self, base: str) -> None:
        os.chmod(base, 0o755)
        self.base = base
        self.home = os.path.join(base, "home")
        self.tmp_dir = os.path.join(base, "runs")
        self.deps = os.path.join(base, "deps")
        for path in (self.home, self.tmp_dir):
            os.mkdir(path, 0o700)
            os.chown(path, USER_UID, USER_GID)
        os.mkdir(self.deps, 0o755)
        for name in _HOST_DEPS:
            module = __import__(name)
            source = os.path.dirname(module.__file__ or "")
            shutil.copytree(source, os.path.join(self.deps, name))

    def run_script(self, body: str, args: dict[str, Any] | None = None, timeout: float = 90) -> Any:
        """Run ``body`` (after the prelude: ``gateway()``, ``warmed()``, ``encode()``,
        ``run_one()``, ``ARGS``) as the user; it prints its answer as JSON, last."""
        script = os.path.join(self.home, "host.py")
        with open(script, "w") as f:
            f.write(_PRELUDE + "\n" + textwrap.dedent(body))
        os.chmod(script, 0o644)
        payload = {"python": SYSTEM_PYTHON, "tmp_dir": self.tmp_dir, **(args or {})}
        env = {
            "PATH": "/usr/bin:/bin",
            "HOME": self.home,
            "TMPDIR": self.tmp_dir,
            "PYTHONPATH": f"{package_root()}:{self.deps}",
        }
        proc = subprocess.run(
            [
                "setpriv",
                f"--reuid={USER_UID}",
                f"--regid={USER_GID}",
                "--clear-groups",
                SYSTEM_PYTHON,
                "-B",
                script,
                json.dumps(payload),
            ],
            cwd=self.home,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        lines = proc.stdout.strip().splitlines()
        if proc.returncode != 0 or not lines:
            raise AssertionError(
                f"the host script as uid {USER_UID} failed ({proc.returncode}):\n"
                f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
            )
        return json.loads(lines[-1])

    def venv(self) -> str:
        """A virtual environment of the system interpreter that the user owns (made once):
        its site-packages is on the child's sys.path, and the user may write it."""
        path = os.path.join(self.home, "venv")
        if not os.path.isdir(path):
            subprocess.run(
                [
                    "setpriv",
                    f"--reuid={USER_UID}",
                    f"--regid={USER_GID}",
                    "--clear-groups",
                    SYSTEM_PYTHON,
                    "-m",
                    "venv",
                    "--without-pip",
                    path,
                ],
                cwd=self.home,
                env={"PATH": "/usr/bin:/bin", "HOME": self.home},
                check=True,
                capture_output=True,
                timeout=60,
            )
        return os.path.join(path, "bin", "python3")

    def run(
        self,
        program: str,
        level: str,
        warm: bool,
        python: str = SYSTEM_PYTHON,
        **gateway_kwargs: Any,
    ) -> dict[str, Any]:
        """One program on a fresh gateway as the user: the result's main fields."""
        body = """
        print(json.dumps(run_one(ARGS["program"], ARGS["level"], ARGS["warm"], **ARGS["kw"])))
        """
        args = {
            "program": program,
            "level": level,
            "warm": warm,
            "kw": gateway_kwargs,
            "python": python,
        }
        result: dict[str, Any] = self.run_script(body, args)
        return result


def make_as_user() -> tuple[AsUser, str]:
    """An :class:`AsUser` on a fresh directory outside /tmp (and its path, to remove)."""
    base = tempfile.mkdtemp(prefix="kg-asuser-", dir="/var/tmp")
    return AsUser(base), base
