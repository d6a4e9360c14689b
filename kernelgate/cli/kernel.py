"""``kernelgate kernel install|uninstall|list|run`` (``run`` is the kernelspec's argv)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from typing import Any

from kernelgate.model.language import LANGUAGES
from kernelgate.model.limits import Limits

from .common import (
    UsageError,
    _installed_path,
    add_bindings_path_argument,
    bindings_search,
    load_bindings,
    positive_seconds,
    resolve_bindings,
)

__all__ = ["register", "add_run_arguments", "run_from_args"]


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-f",
        "--connection-file",
        required=True,
        metavar="FILE",
        help="the connection file Jupyter gives the kernel ({connection_file})",
    )
    parser.add_argument(
        "--bindings",
        metavar="MODULE:ATTR",
        help="the kernel's bindings: a dict of callables, or a module (its public functions); "
        "MODULE is a path to its file, a module in --bindings-path, or an installed module "
        "(never one in the working directory: a notebook's directory is not trusted)",
    )
    add_bindings_path_argument(parser)
    parser.add_argument(
        "--timeout", type=positive_seconds, metavar="S", help="wall-clock budget of each cell"
    )
    _add_language_arguments(parser)


def _add_language_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--language",
        choices=LANGUAGES,
        default="python",
        help="what the cells are written in (default python); typescript and javascript "
        "cells run on Node",
    )
    parser.add_argument(
        "--node",
        metavar="PATH",
        help="the Node binary of a typescript/javascript kernel (default: node on PATH)",
    )


def _kernel_bindings(
    args: argparse.Namespace,
) -> tuple[dict[str, dict[str, Callable[..., Any]]], str | None]:
    """The kernel's namespaces, and why its bindings could not be loaded (None if they
    were). A kernel that exits at start is started again by its frontend, and again, with
    nothing shown but "restarting": so it starts with no bindings and every cell says why."""
    if not args.bindings:
        return {"tools": {}}, None
    try:
        # Jupyter starts the kernel in the notebook's directory: only the kernelspec's
        # --bindings-path is searched, never the working directory.
        return load_bindings(args.bindings, bindings_search(args)), None
    except Exception as exc:  # the module's own import may raise anything
        why = (
            str(exc)
            if isinstance(exc, UsageError)
            else (f"--bindings {args.bindings!r}: importing it raised {type(exc).__name__}: {exc}")
        )
    return {"tools": {}}, (
        f"the kernel's bindings could not be loaded, so no cell runs: {why}. Fix the module "
        "(the kernel imports it as 'python -I', without PYTHONPATH or the notebook's "
        "directory), or install the kernelspec again with bindings it can load "
        "('kernelgate kernel install --bindings MODULE:ATTR'; 'kernelgate kernel list' "
        "shows what is installed), then restart the kernel"
    )


def run_from_args(args: argparse.Namespace) -> int:
    from kernelgate.jupyter.server import run_kernel

    namespaces, bindings_error = _kernel_bindings(args)
    if bindings_error is not None:
        print(f"kernelgate kernel: {bindings_error}", file=sys.stderr, flush=True)
    limits = Limits(wall_seconds=args.timeout) if args.timeout else None
    if args.node is not None and args.language == "python":
        raise UsageError("--node is for --language typescript or javascript")
    try:
        return run_kernel(
            args.connection_file,
            namespaces,
            limits=limits,
            bindings_error=bindings_error,
            language=args.language,
            node=args.node,
        )
    except RuntimeError as exc:  # NodeUnavailable: no usable Node, naming what was looked for
        raise UsageError(f"cannot start the {args.language} kernel: {exc}") from None
    except OSError as exc:
        raise UsageError(f"cannot read connection file {args.connection_file!r}: {exc}") from None
    except ValueError as exc:
        raise UsageError(f"cannot start the kernel: {exc}") from None


#: Loads ``--bindings sys.argv[1]`` as ``kernel run`` does, in ``python -I`` (what the
#: kernelspec's argv runs): no PYTHONPATH, no user site-packages, no working directory.
_KERNEL_LOAD_CHECK = """\
import sys
try:
    from kernelgate.cli.common import UsageError, load_bindings
except ImportError:
    sys.exit(3)
try:
    load_bindings(sys.argv[1])
except UsageError as exc:
    sys.stderr.write(str(exc))
    sys.exit(2)
except Exception as exc:
    sys.stderr.write(f"importing it raised {type(exc).__name__}: {exc}")
    sys.exit(2)
"""


def _kernel_cannot_load(bindings: str) -> str | None:
    """Why the kernel (``python -I``, started in a notebook's directory) could not load
    ``--bindings bindings``; None if it can."""
    import subprocess

    try:
        done = subprocess.run(
            [sys.executable, "-I", "-c", _KERNEL_LOAD_CHECK, bindings],
            capture_output=True,
            text=True,
            timeout=120,
            cwd="/",
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"cannot run {sys.executable} -I to check: {exc}"
    if done.returncode in (0, 3):
        # 3: kernelgate itself does not import there; installing says so (and refuses).
        return None
    lines = done.stderr.strip().splitlines() or [f"exit status {done.returncode}"]
    return lines[-1]


def _loadable_by_the_kernel(bindings: str, source: str, attr: str) -> str:
    """``bindings`` as the kernelspec should record it so that the kernel can load them, or
    a UsageError saying why it cannot and what to do.

    The kernel runs ``python -I``: a module this command found through PYTHONPATH (or the
    user's site-packages) is not there for it. A top-level module or package found so is
    recorded by its file's absolute path (said on stderr); anything else is refused."""
    why = _kernel_cannot_load(bindings)
    if why is None:
        return bindings
    if not os.path.isabs(source):
        path = _module_file_here(source)
        if path is not None:
            recorded = f"{path}:{attr}" if attr else path
            if _kernel_cannot_load(recorded) is None:
                print(
                    f"kernelgate: note: {source!r} is found through PYTHONPATH or the user's "
                    "site-packages, which the kernel does not see (it runs 'python -I'): "
                    f"recorded by its path, --bindings {recorded}",
                    file=sys.stderr,
                )
                return recorded
    if os.path.isabs(source):
        fix = (
            f"make what {source} imports importable without PYTHONPATH (pip install it), or "
            "give the module that imports it by its path too"
        )
    else:
        fix = (
            f"pip install the package that holds {source!r} into {sys.prefix} (pip install "
            "-e DIR for your own), or give a module that stands alone by its path: "
            f"--bindings /path/to/module.py:{attr or 'BINDINGS'}"
        )
    # The loader's own hint (a path, or install it) is said below, for this case.
    why = why.removeprefix(f"--bindings {bindings!r}: ").split(". Give a path")[0]
    raise UsageError(
        f"--bindings {bindings!r}: the kernel could not load it: {why}. The kernel runs "
        "'python -I' (no PYTHONPATH, no user site-packages, not the notebook's directory): "
        f"{fix}. Nothing was installed"
    )


def _module_file_here(module: str) -> str | None:
    """The file of top-level ``module`` (a ``.py`` file or a package's ``__init__.py``) as
    this process finds it; None for a submodule, an extension, or nothing found."""
    import importlib.machinery

    if "." in module:
        return None  # pkg.sub needs pkg importable: no file of its own does
    try:
        spec = importlib.machinery.PathFinder.find_spec(module, _installed_path())
    except (ImportError, ValueError):
        return None
    origin = spec.origin if spec is not None else None
    if origin is None or not origin.endswith(".py") or not os.path.isfile(origin):
        return None
    return os.path.abspath(origin)


def _cmd_install(args: argparse.Namespace) -> int:

    from kernelgate.jupyter.spec import default_display_name, default_name, install_kernel_spec

    if sum([bool(args.user), bool(args.sys_prefix), args.prefix is not None]) > 1:
        raise UsageError("choose at most one of --user, --sys-prefix and --prefix")
    bindings = args.bindings
    if bindings:
        search, cwd = bindings_search(args), [os.getcwd()]
        # The kernel starts in a notebook's directory, which it never searches: a module
        # found here (a path, --bindings-path, the working directory) is recorded by its
        # absolute path.
        source, attr = resolve_bindings(bindings, search, cwd)
        load_bindings(bindings, search, cwd)  # fail now, not when a notebook starts the kernel
        if os.path.isabs(source):
            bindings = f"{source}:{attr}" if attr else source
        bindings = _loadable_by_the_kernel(bindings, source, attr)
    prefix = sys.prefix if args.sys_prefix else args.prefix
    name = args.name or default_name(args.language)
    try:
        path = install_kernel_spec(
            name,
            display_name=args.display_name or default_display_name(args.language),
            language=args.language,
            node=args.node,
            bindings=bindings,
            timeout=args.timeout,
            interrupt_mode=args.interrupt_mode,
            user=bool(args.user),
            prefix=prefix,
        )
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    except OSError as exc:
        raise UsageError(
            f"cannot install the kernelspec: {exc} (try --user or --sys-prefix)"
        ) from None
    print(f"Installed kernelspec {name} ({args.language}) in {path}")
    return 0


def _cmd_uninstall(args: argparse.Namespace) -> int:
    from kernelgate.jupyter.spec import uninstall_kernel_spec

    prefix = sys.prefix if args.sys_prefix else args.prefix
    anywhere = not (args.user or prefix is not None)
    try:
        path = uninstall_kernel_spec(
            args.name, user=bool(args.user), prefix=prefix, any_place=anywhere
        )
    except (LookupError, ValueError) as exc:
        raise UsageError(str(exc.args[0] if exc.args else exc)) from None
    except OSError as exc:
        raise UsageError(f"cannot remove the kernelspec: {exc} (run as its owner)") from None
    print(f"Removed kernelspec {args.name} from {path}")
    return 0


def _cmd_list(args: argparse.Namespace) -> int:
    from kernelgate.jupyter.spec import installed_kernels

    kernels = installed_kernels()
    if args.json:
        print(json.dumps(kernels, indent=2))
        return 0
    if not kernels:
        print("No kernelgate kernel is installed; see 'kernelgate kernel install -h'.")
        return 0
    width = max(len(k["name"]) for k in kernels)
    for k in kernels:
        extra = f", timeout {k['timeout']} s" if k["timeout"] else ""
        bindings = k["bindings"] or "no bindings (an empty tools namespace)"
        language = k["language"] + (f" ({k['node']})" if k["node"] else "")
        print(f"{k['name']:<{width}}  {language:<10}  {bindings}{extra}  [{k['resource_dir']}]")
    return 0


def _cmd_kernel(args: argparse.Namespace) -> int:
    raise UsageError(
        "kernel: choose a subcommand: install, uninstall, list or run (see 'kernelgate kernel -h')"
    )


def _add_place_arguments(parser: argparse.ArgumentParser, verb: str) -> None:
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--user", action="store_true", help=f"{verb} for the current user")
    where.add_argument(
        "--sys-prefix", action="store_true", help=f"{verb} in this Python's environment"
    )
    where.add_argument("--prefix", metavar="P", help=f"{verb} in P/share/jupyter/kernels")


def _add_install_command(sub: Any) -> None:
    from kernelgate.jupyter.spec import DEFAULT_DISPLAY_NAME, DEFAULT_NAME

    install = sub.add_parser(
        "install",
        help="install the kernelspec (then 'jupyter kernelspec list' shows it)",
        description="Install a kernelspec that starts the kernelgate kernel with BINDINGS.",
    )
    install.add_argument(
        "--name",
        metavar="N",
        help=f"kernelspec name (default {DEFAULT_NAME}, {DEFAULT_NAME}-typescript or "
        f"{DEFAULT_NAME}-javascript by --language)",
    )
    install.add_argument(
        "--display-name",
        metavar="D",
        help=f"name shown by frontends (default {DEFAULT_DISPLAY_NAME!r}, or the "
        "language's: 'kernelgate (TypeScript)')",
    )
    install.add_argument(
        "--bindings",
        metavar="MODULE:ATTR",
        help="the kernel's bindings: a dict of callables, or a module (its public functions); "
        "MODULE is a path to its file, a module in --bindings-path or the working directory "
        "(recorded by its absolute path), or an installed module",
    )
    add_bindings_path_argument(install)
    install.add_argument(
        "--timeout", type=positive_seconds, metavar="S", help="wall-clock budget of each cell"
    )
    _add_language_arguments(install)
    install.add_argument(
        "--interrupt-mode",
        choices=("signal", "message"),
        default="signal",
        help="how frontends interrupt: SIGINT to the kernel, or interrupt_request (default signal)",
    )
    _add_place_arguments(install, "install")
    install.set_defaults(func=_cmd_install)


def register(subparsers: Any) -> None:
    """Add ``kernel install``, ``uninstall``, ``list`` and ``run`` to ``kernelgate``."""
    from kernelgate.jupyter.spec import DEFAULT_NAME

    kernel = subparsers.add_parser(
        "kernel",
        help="a Jupyter kernel where every cell is a fresh run: install its kernelspec, run it",
        description="The kernelgate Jupyter kernel: every cell is one program in a fresh child.",
    )
    kernel.set_defaults(func=_cmd_kernel)
    sub = kernel.add_subparsers(dest="kernel_command", metavar="SUBCOMMAND")

    _add_install_command(sub)

    uninstall = sub.add_parser(
        "uninstall",
        help="remove an installed kernelgate kernelspec",
        description="Remove a kernelgate kernelspec: the one Jupyter would start, or the one "
        "in the place --user, --sys-prefix or --prefix names. Kernelspecs of other kernels "
        "are never removed.",
    )
    uninstall.add_argument(
        "--name",
        default=DEFAULT_NAME,
        metavar="N",
        help=f"kernelspec name (default {DEFAULT_NAME})",
    )
    _add_place_arguments(uninstall, "remove")
    uninstall.set_defaults(func=_cmd_uninstall)

    listing = sub.add_parser(
        "list",
        help="show the installed kernelgate kernels and their bindings",
        description="Show every kernelgate kernelspec Jupyter finds: name, bindings, where.",
    )
    listing.add_argument("--json", action="store_true", help="print them as JSON")
    listing.set_defaults(func=_cmd_list)

    run = sub.add_parser(
        "run",
        help="run the kernel (what the kernelspec's argv does)",
        description="Run the kernelgate kernel on the sockets of a Jupyter connection file.",
    )
    add_run_arguments(run)
    run.set_defaults(func=run_from_args)
