"""The ``kernelgate`` command.

One module per group of subcommands, each with ``register(subparsers)``: :mod:`.run`
(``run``, ``demo``), :mod:`.notebooks` (``replay``, ``timeline``), :mod:`.kernel`
(``kernel install``/``run``); what they share (usage errors, signals, the ``--timeout`` and
``--limit`` parsers, ``--bindings`` loading) is in :mod:`.common`. Each subcommand imports
the heavy parts it runs only when it runs, so ``kernelgate --help`` stays quick.

>>> main(["run", "--timeout", "inf", "x.py"])        # doctest: +SKIP
kernelgate run: error: argument --timeout: expected a positive number of seconds ...
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Sequence

from . import kernel, mcp, notebooks, run
from .common import Stopped, UsageError

__all__ = ["main", "build_parser", "UsageError"]


def build_parser() -> argparse.ArgumentParser:
    """The ``kernelgate`` argument parser, every subcommand registered."""
    parser = argparse.ArgumentParser(
        prog="kernelgate",
        description="Run programs that AI agents write, each in a fresh CPython child.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in (run, notebooks, kernel, mcp):
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``kernelgate ARGS``; return the exit status (2 for a usage error)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return 2
    try:
        return int(args.func(args))
    except UsageError as exc:
        print(f"kernelgate: error: {exc}", file=sys.stderr)
        return 2
    except Stopped as exc:
        print(
            f"kernelgate: stopped by {exc}: the run was cancelled, its processes killed and "
            "its files removed",
            file=sys.stderr,
        )
        return 128 + exc.signum
    except KeyboardInterrupt:  # before or after a run: nothing of one is left to tear down
        print("kernelgate: stopped by SIGINT", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader of stdout went away (``| head``): no traceback, and none at exit when
        # Python flushes stdout again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + signal.SIGPIPE
