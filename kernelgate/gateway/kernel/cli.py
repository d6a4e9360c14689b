"""``kernelgate kernel install`` and ``kernelgate kernel run`` (the kernelspec's argv)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

__all__ = ["register", "add_run_arguments", "run_from_args"]


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds as a number, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}")
    return value


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
        help="the kernel's bindings: a dict of callables, or a module (its public functions)",
    )
    parser.add_argument(
        "--timeout", type=_positive_float, metavar="S", help="wall-clock budget of each cell"
    )


def run_from_args(args: argparse.Namespace) -> int:
    from kernelgate.cli import UsageError, load_bindings
    from kernelgate.gateway.limits import Limits

    from .server import run_kernel

    namespaces = load_bindings(args.bindings) if args.bindings else {"tools": {}}
    limits = Limits(wall_seconds=args.timeout) if args.timeout else None
    try:
        return run_kernel(args.connection_file, namespaces, limits=limits)
    except OSError as exc:
        raise UsageError(f"cannot read connection file {args.connection_file!r}: {exc}") from None
    except ValueError as exc:
        raise UsageError(f"cannot start the kernel: {exc}") from None


def _cmd_install(args: argparse.Namespace) -> int:
    from kernelgate.cli import UsageError, load_bindings

    from .spec import install_kernel_spec

    if sum([bool(args.user), bool(args.sys_prefix), args.prefix is not None]) > 1:
        raise UsageError("choose at most one of --user, --sys-prefix and --prefix")
    if args.bindings:
        load_bindings(args.bindings)  # fail now, not when a notebook starts the kernel
    prefix = sys.prefix if args.sys_prefix else args.prefix
    try:
        path = install_kernel_spec(
            args.name,
            display_name=args.display_name,
            bindings=args.bindings,
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


def _cmd_kernel(args: argparse.Namespace) -> int:
    from kernelgate.cli import UsageError

    raise UsageError("kernel: choose a subcommand: install or run (see 'kernelgate kernel -h')")


def register(subparsers: Any) -> None:
    """Add ``kernel install`` and ``kernel run`` to the ``kernelgate`` command."""
    from .spec import DEFAULT_DISPLAY_NAME, DEFAULT_NAME

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
        help="the kernel's bindings: a dict of callables, or a module (its public functions)",
    )
    install.add_argument(
        "--timeout", type=_positive_float, metavar="S", help="wall-clock budget of each cell"
    )
    install.add_argument(
        "--interrupt-mode",
        choices=("signal", "message"),
        default="signal",
        help="how frontends interrupt: SIGINT to the kernel, or interrupt_request (default signal)",
    )
    where = install.add_mutually_exclusive_group()
    where.add_argument("--user", action="store_true", help="install for the current user")
    where.add_argument(
        "--sys-prefix", action="store_true", help="install into this Python's environment"
    )
    where.add_argument("--prefix", metavar="P", help="install into P/share/jupyter/kernels")
    install.set_defaults(func=_cmd_install)

    run = sub.add_parser(
        "run",
        help="run the kernel (what the kernelspec's argv does)",
        description="Run the kernelgate kernel on the sockets of a Jupyter connection file.",
    )
    add_run_arguments(run)
    run.set_defaults(func=run_from_args)
