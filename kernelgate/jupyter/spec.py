"""The kernelspec: what ``kernel.json`` says, and installing it with jupyter_client."""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
from typing import Any

from kernelgate.model.language import check_language, kernelspec

from .logo import write_logos

__all__ = [
    "DEFAULT_NAME",
    "DEFAULT_DISPLAY_NAME",
    "default_display_name",
    "default_name",
    "kernel_json",
    "install_kernel_spec",
    "installed_kernels",
    "uninstall_kernel_spec",
]

DEFAULT_NAME = "kernelgate"
DEFAULT_DISPLAY_NAME = "kernelgate (Python)"


def default_name(language: str = "python") -> str:
    """The kernelspec name ``kernel install --language`` uses by default.

    >>> default_name("python"), default_name("typescript")
    ('kernelgate', 'kernelgate-typescript')
    """
    return str(kernelspec(check_language(language))["name"])


def default_display_name(language: str = "python") -> str:
    """``kernelgate (Python)``, ``kernelgate (TypeScript)``, ``kernelgate (JavaScript)``."""
    return str(kernelspec(check_language(language))["display_name"])


_NAME = re.compile(r"^[a-z0-9._-]+$", re.IGNORECASE)


def kernel_json(
    *,
    bindings: str | None = None,
    display_name: str = DEFAULT_DISPLAY_NAME,
    timeout: float | None = None,
    interrupt_mode: str = "signal",
    python: str | None = None,
    language: str = "python",
    node: str | None = None,
) -> dict[str, Any]:
    """The ``kernel.json`` of a kernelgate kernel with ``bindings`` (``module:attr``)
    whose cells are in ``language`` (run on ``node`` for TypeScript and JavaScript)."""
    lang = check_language(language)
    if node is not None and lang == "python":
        raise ValueError("--node is for --language typescript or javascript")
    if interrupt_mode not in ("signal", "message"):
        raise ValueError(f"interrupt_mode must be 'signal' or 'message', got {interrupt_mode!r}")
    # -I: Jupyter starts the kernel in the notebook's directory, and without it that
    # directory (and PYTHONPATH, and the user's site-packages) would come first on
    # sys.path: an asyncio.py next to a notebook would run as the user before any cell.
    # Isolated mode leaves it out (with -m too: CPython 3.10 computes no sys.path[0] in
    # isolated mode; 3.11+ also sets safe_path).
    argv = [
        python or sys.executable,
        "-I",
        "-m",
        "kernelgate.cli",
        "kernel",
        "run",
        "-f",
        "{connection_file}",
    ]
    if bindings:
        argv += ["--bindings", bindings]
    if timeout is not None:
        argv += ["--timeout", repr(float(timeout))]
    if lang != "python":
        argv += ["--language", lang]
        if node is not None:
            argv += ["--node", node]
    return {
        "argv": argv,
        "display_name": display_name,
        "language": lang,
        "interrupt_mode": interrupt_mode,
        "env": {},
        # JupyterLab offers its debugger only for a kernelspec whose metadata says so:
        # Python's runs can be debugged, TypeScript's and JavaScript's cannot.
        "metadata": {"debugger": lang == "python", "kernelgate": {"bindings": bindings}},
    }


def _checked_node(node: str | None) -> str:
    """The absolute path of the Node a TypeScript/JavaScript kernel will run (``node`` on
    PATH when None); ``ValueError`` naming what was looked for when there is none."""
    from kernelgate.gateway.launch import NodeUnavailable, probe_node

    try:
        return probe_node(node or "node").executable
    except NodeUnavailable as exc:
        raise ValueError(f"{exc}; nothing was installed") from None


def _check_isolated_import(python: str) -> None:
    """The kernel runs as ``python -I``: kernelgate must be importable without the working
    directory, PYTHONPATH or the user's site-packages. Say so now, not when a notebook
    starts the kernel."""
    import subprocess

    try:
        done = subprocess.run(
            [python, "-I", "-c", "import kernelgate.cli.kernel, kernelgate.jupyter.server"],
            capture_output=True,
            text=True,
            timeout=60,
            cwd="/",
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ValueError(f"cannot run the kernel's interpreter {python!r}: {exc}") from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["?"])[-1]
        raise ValueError(
            f"{python} -I cannot import kernelgate ({last}): the kernel runs isolated from "
            "the working directory, PYTHONPATH and the user's site-packages; install "
            "kernelgate into that interpreter's environment (pip install kernelgate)"
        )


def install_kernel_spec(
    name: str = DEFAULT_NAME,
    *,
    display_name: str | None = None,
    bindings: str | None = None,
    timeout: float | None = None,
    interrupt_mode: str = "signal",
    user: bool = False,
    prefix: str | None = None,
    python: str | None = None,
    language: str = "python",
    node: str | None = None,
) -> str:
    """Install the kernelspec ``name``; return the directory it was installed to.

    ``language`` is the cells' (``typescript`` and ``javascript`` run on Node: ``node``,
    default the ``node`` on PATH, is checked now and recorded by its absolute path, so the
    kernel finds it whatever PATH Jupyter gives it).

    Where: ``user=True`` for the user's Jupyter data dir, ``prefix`` for
    ``PREFIX/share/jupyter/kernels`` (``sys.prefix`` for the current environment), neither
    for the system-wide directory -- as ``jupyter kernelspec install``.
    """
    from jupyter_client.kernelspec import KernelSpecManager

    if not _NAME.match(name):
        raise ValueError(
            f"kernel name {name!r} may only contain ASCII letters, digits, '.', '_' and '-'"
        )
    lang = check_language(language)
    if lang != "python":
        node = _checked_node(node)
    elif node is not None:
        raise ValueError("--node is for --language typescript or javascript")
    _check_isolated_import(python or sys.executable)
    spec = kernel_json(
        bindings=bindings,
        display_name=display_name or default_display_name(lang),
        timeout=timeout,
        interrupt_mode=interrupt_mode,
        python=python,
        language=lang,
        node=node,
    )
    with tempfile.TemporaryDirectory(prefix="kernelgate-spec-") as tmp:
        with open(os.path.join(tmp, "kernel.json"), "w", encoding="utf-8") as f:
            json.dump(spec, f, indent=1)
        write_logos(tmp)  # the launcher's icon
        return KernelSpecManager().install_kernel_spec(tmp, name, user=user, prefix=prefix)


def kernels_dir(*, user: bool = False, prefix: str | None = None) -> str:
    """The kernels directory ``install_kernel_spec`` writes to for these options."""
    from jupyter_client.kernelspec import KernelSpecManager

    manager = KernelSpecManager()
    if user:
        return str(manager.user_kernel_dir)
    if prefix is not None:
        return os.path.join(prefix, "share", "jupyter", "kernels")
    from jupyter_core.paths import SYSTEM_JUPYTER_PATH

    return os.path.join(SYSTEM_JUPYTER_PATH[0], "kernels")


def is_kernelgate_spec(argv: Any) -> bool:
    """Whether a kernelspec's ``argv`` starts the kernelgate kernel (this release's argv,
    ``-m kernelgate.cli kernel run``, or the one before it, ``-m kernelgate.gateway.kernel``)."""
    if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
        return False
    for i, arg in enumerate(argv[:-1]):
        if arg == "-m" and argv[i + 1] in ("kernelgate.cli", "kernelgate.gateway.kernel"):
            return True
    return False


def spec_option(argv: list[str], option: str) -> str | None:
    """The value of ``option`` (``--bindings``, ``--timeout``) in a kernelspec's argv."""
    for i, arg in enumerate(argv[:-1]):
        if arg == option:
            return argv[i + 1]
    return None


def installed_kernels() -> list[dict[str, Any]]:
    """Every installed kernelgate kernelspec Jupyter finds: name, resource_dir, display_name,
    language, node, bindings, timeout and argv, sorted by name (the first found wins, as in
    Jupyter)."""
    from jupyter_client.kernelspec import KernelSpecManager

    manager = KernelSpecManager()
    found: list[dict[str, Any]] = []
    for name, directory in sorted(manager.find_kernel_specs().items()):
        try:
            with open(os.path.join(directory, "kernel.json"), encoding="utf-8") as f:
                spec = json.load(f)
        except (OSError, ValueError):
            continue  # not readable or not JSON: not ours to describe
        argv = spec.get("argv") if isinstance(spec, dict) else None
        if not is_kernelgate_spec(argv):
            continue
        assert isinstance(argv, list)
        found.append(
            {
                "name": name,
                "resource_dir": directory,
                "display_name": spec.get("display_name", name),
                "language": spec_option(argv, "--language") or "python",
                "node": spec_option(argv, "--node"),
                "bindings": spec_option(argv, "--bindings"),
                "timeout": spec_option(argv, "--timeout"),
                "argv": argv,
            }
        )
    return found


def uninstall_kernel_spec(
    name: str = DEFAULT_NAME, *, user: bool = False, prefix: str | None = None, any_place: bool
) -> str:
    """Remove the kernelgate kernelspec ``name``; return the directory removed.

    With ``any_place`` the one Jupyter would start is removed, wherever it is; otherwise
    only the one in the place ``user``/``prefix`` name (as for install). A kernelspec that
    does not start kernelgate is never removed (``ValueError``), nor is a missing one
    (``LookupError``, naming where it looked).
    """
    import shutil

    if not _NAME.match(name):
        raise ValueError(
            f"kernel name {name!r} may only contain ASCII letters, digits, '.', '_' and '-'"
        )
    if any_place:
        mine = {k["name"]: k["resource_dir"] for k in installed_kernels()}
        directory = mine.get(name)
        if directory is None:
            names = ", ".join(sorted(mine)) or "none"
            raise LookupError(
                f"no kernelgate kernel named {name!r} is installed (installed: {names}); "
                "see 'kernelgate kernel list'"
            )
    else:
        directory = os.path.join(kernels_dir(user=user, prefix=prefix), name)
        if not os.path.isdir(directory):
            raise LookupError(f"no kernelspec {name!r} in {os.path.dirname(directory)}")
    try:
        with open(os.path.join(directory, "kernel.json"), encoding="utf-8") as f:
            argv = json.load(f).get("argv")
    except (OSError, ValueError, AttributeError):
        argv = None
    if not is_kernelgate_spec(argv):
        raise ValueError(
            f"the kernelspec in {directory} does not start kernelgate; remove it with "
            f"'jupyter kernelspec remove {name}' if you mean to"
        )
    shutil.rmtree(directory)
    return directory
