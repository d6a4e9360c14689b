"""``kernelgate kernel install|uninstall|list|run`` (``run`` is the kernelspec's argv)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from kernelgate.model.limits import Limits

from .common import (
    UsageError,
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


def run_from_args(args: argparse.Namespace) -> int:
    from kernelgate.jupyter.server import run_kernel

    # Jupyter starts the kernel in the notebook's directory: only the kernelspec's
    # --bindings-path is searched, never the working directory.
    namespaces = (
        load_bindings(args.bindings, bindings_search(args)) if args.bindings else {"tools": {}}
    )
    limits = Limits(wall_seconds=args.timeout) if args.timeout else None
    try:
        return run_kernel(args.connection_file, namespaces, limits=limits)
    except OSError as exc:
        raise UsageError(f"cannot read connection file {args.connection_file!r}: {exc}") from None
    except ValueError as exc:
        raise UsageError(f"cannot start the kernel: {exc}") from None


def _cmd_install(args: argparse.Namespace) -> int:

    from kernelgate.jupyter.spec import install_kernel_spec

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
    prefix = sys.prefix if args.sys_prefix else args.prefix
    try:
        path = install_kernel_spec(
            args.name,
            display_name=args.display_name,
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
    print(f"Installed kernelspec {args.name} in {path}")
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
        print(f"{k['name']:<{width}}  {bindings}{extra}  [{k['resource_dir']}]")
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


def register(subparsers: Any) -> None:
    """Add ``kernel install``, ``uninstall``, ``list`` and ``run`` to ``kernelgate``."""
    from kernelgate.jupyter.spec import DEFAULT_DISPLAY_NAME, DEFAULT_NAME

    kernel = subparsers.add_parser(
        "kernel",
        help="a Jupyter kernel where every cell is a fresh run: install its kernelspec, run it",
        description="The kernelgate Jupyter kernel: every cell is one program in a fresh child.",
    )
    kernel.set_defaults(func=_cmd_kernel)
    sub = kernel.add_subparsers(dest="kernel_command", metavar="SUBCOMMAND")

    install = sub.add_parser(
        "install",
        help="install the kernelspec (then 'jupyter kernelspec list' shows it)",
        description="Install a kernelspec that starts the kernelgate kernel with BINDINGS.",
    )
    install.add_argument(
        "--name",
        default=DEFAULT_NAME,
        metavar="N",
        help=f"kernelspec name (default {DEFAULT_NAME})",
    )
    install.add_argument(
        "--display-name",
        default=DEFAULT_DISPLAY_NAME,
        metavar="D",
        help=f"name shown by frontends (default {DEFAULT_DISPLAY_NAME!r})",
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
    install.add_argument(
        "--interrupt-mode",
        choices=("signal", "message"),
        default="signal",
        help="how frontends interrupt: SIGINT to the kernel, or interrupt_request (default signal)",
    )
    _add_place_arguments(install, "install")
    install.set_defaults(func=_cmd_install)

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
