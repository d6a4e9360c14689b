"""``python -m kernelgate.gateway.kernel -f CONNECTION_FILE [--bindings M:A] [--timeout S]``."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    from kernelgate.cli import UsageError

    from .cli import add_run_arguments, run_from_args

    parser = argparse.ArgumentParser(
        prog="python -m kernelgate.gateway.kernel",
        description="Run the kernelgate Jupyter kernel on a connection file's sockets.",
    )
    add_run_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return run_from_args(args)
    except UsageError as exc:
        print(f"kernelgate kernel: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
