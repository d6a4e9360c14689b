"""The ``kernelgate`` command: run, demo, and the commands other parts register."""

from __future__ import annotations

import argparse
import asyncio
import importlib
import inspect
import json
import os
import sys
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

__all__ = ["main", "load_bindings", "UsageError"]

#: Modules that add subcommands with ``register(subparsers)``.
_COMMAND_MODULES = ("kernelgate.notebooks.cli", "kernelgate.gateway.kernel.cli")


class UsageError(Exception):
    """The command line was wrong: exit status 2 with this message."""


def load_bindings(spec: str) -> dict[str, dict[str, Callable[..., Any]]]:
    """Load ``module:attr`` (or ``module``) as namespaces of bindings.

    ``attr`` may be a dict of callables (namespace ``tools``), a dict of such dicts
    (several namespaces), or a module; a module gives its public functions.
    """
    module_name, _, attr = spec.partition(":")
    if not module_name:
        raise UsageError(f"--bindings {spec!r}: expected module:attr, e.g. mytools:BINDINGS")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # so a module next to the program is found
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise UsageError(f"--bindings {spec!r}: cannot import {module_name!r}: {exc}") from None
    for part in attr.split(".") if attr else []:
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise UsageError(
                f"--bindings {spec!r}: {module_name} has no attribute {attr!r}"
            ) from None
    if isinstance(obj, ModuleType):
        funcs: dict[str, Callable[..., Any]] = {
            name: fn
            for name, fn in vars(obj).items()
            if not name.startswith("_") and inspect.isfunction(fn) and fn.__module__ == obj.__name__
        }
        return {"tools": funcs}
    if isinstance(obj, dict):
        if obj and all(isinstance(v, dict) for v in obj.values()):
            return obj
        return {"tools": obj}
    raise UsageError(
        f"--bindings {spec!r}: expected a dict of callables or a module, got {type(obj).__name__}"
    )


def _read_program(path: str) -> str:
    if path == "-":
        return sys.stdin.read()
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as exc:
        raise UsageError(f"cannot read program {path!r}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise UsageError(f"program {path!r} is not UTF-8 text") from None


def _print_live(output: dict[str, Any]) -> None:
    if output["output_type"] == "stream":
        stream = sys.stdout if output["name"] == "stdout" else sys.stderr
        stream.write(output["text"])
        stream.flush()


def format_value(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, indent=2, ensure_ascii=False)


def _report(result: Any, as_json: bool, show_calls: bool = False) -> int:
    if as_json:
        print(json.dumps(result.to_dict(), indent=2, ensure_ascii=False))
        return 0 if result.ok else 1
    if show_calls and result.calls:
        print(f"\n-- {len(result.calls)} binding calls --")
        for call in result.calls:
            args = ", ".join(
                [json.dumps(a) for a in call.args]
                + [f"{k}={json.dumps(v)}" for k, v in call.kwargs.items()]
            )
            outcome = _short(json.dumps(call.value)) if call.ok else f"raised {call.error.ename}"
            print(
                f"  {call.namespace}.{call.name}({_short(args)}) -> {outcome}  "
                f"{call.duration_s * 1000:.1f} ms"
            )
    if result.ok:
        if result.value is not None:
            if show_calls:
                print("\n-- value --")
            print(format_value(result.value))
        return 0
    print(f"Error: the program failed ({result.status}): {result.message}", file=sys.stderr)
    if result.error is not None and result.error.traceback:
        print("\n".join(result.error.traceback), file=sys.stderr)
    return 1


def _short(text: str, limit: int = 70) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


async def _run_once(gw: Any, program: str, on_output: Any) -> Any:
    async with gw:  # returns once the run is torn down, not just answered
        return await gw.run(program, on_output=on_output)


def _cmd_run(args: argparse.Namespace) -> int:
    from kernelgate import Gateway, Limits

    program = _read_program(args.program)
    namespaces = load_bindings(args.bindings) if args.bindings else {"tools": {}}
    limits = Limits(wall_seconds=args.timeout) if args.timeout else None
    # One run: a warm pool would only cost a second interpreter.
    gw = Gateway(namespaces=namespaces, limits=limits, pool_size=0)
    on_output = None if args.json else _print_live
    result = asyncio.run(_run_once(gw, program, on_output))
    if getattr(args, "record", None):
        result.save(args.record)
    return _report(result, args.json)


def _cmd_demo(args: argparse.Namespace) -> int:
    from kernelgate import Gateway
    from kernelgate.demo import BINDINGS, DEMO_PROGRAM

    if not args.json:
        print("-- program --")
        print(DEMO_PROGRAM.rstrip())
        print("\n-- output --")
    gw = Gateway(bindings=BINDINGS, pool_size=0)
    result = asyncio.run(_run_once(gw, DEMO_PROGRAM, None if args.json else _print_live))
    return _report(result, args.json, show_calls=True)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kernelgate",
        description="Run programs that AI agents write, each in a fresh CPython child.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    run = sub.add_parser(
        "run", help="run a program file (or - for stdin) and print what it printed and returned"
    )
    run.add_argument("program", help="path of a Python program, or - to read it from stdin")
    run.add_argument(
        "--bindings",
        metavar="MODULE:ATTR",
        help="a dict of callables, or a module (its public functions)",
    )
    run.add_argument(
        "--timeout", type=_positive_float, metavar="S", help="wall-clock budget in seconds"
    )
    run.add_argument("--json", action="store_true", help="print RunResult.to_dict() as JSON")
    run.add_argument("--record", metavar="PATH", help="also save the run as a notebook (.ipynb)")
    run.set_defaults(func=_cmd_run)
    demo = sub.add_parser("demo", help="run a sample agent program against demo bindings")
    demo.add_argument("--json", action="store_true", help="print RunResult.to_dict() as JSON")
    demo.set_defaults(func=_cmd_demo)
    for name in _COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if not exc.name or not name.startswith(exc.name):
                raise
            continue
        module.register(sub)
    return parser


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds as a number, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}")
    return value


def main(argv: Sequence[str] | None = None) -> int:
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
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
