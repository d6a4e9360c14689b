"""``kernelgate run`` and ``kernelgate demo``: one program, its output and value printed."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from kernelgate.demo import BINDINGS, DEMO_PROGRAM
from kernelgate.gateway.gateway import Gateway
from kernelgate.gateway.launch import NodeUnavailable
from kernelgate.model.limits import Limits

from .common import (
    UsageError,
    add_bindings_path_argument,
    add_limit_arguments,
    bindings_search,
    limit_hints,
    limits_from_args,
    load_bindings,
    run_stoppable,
)

__all__ = ["register", "format_value"]


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


def _report(result: Any, as_json: bool, show_calls: bool = False, limits: Any = None) -> int:
    if as_json:
        print(json.dumps(result.to_dict(), indent=2, ensure_ascii=False))
        return 0 if result.ok else 1
    if show_calls and result.calls:
        n = len(result.calls)
        print(f"\n-- {n} binding call{'' if n == 1 else 's'} --")
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
        elif result.note:
            # stderr: stdout stays the program's output and value. Without this a final
            # expression such as `{1, 2}` printed nothing at all.
            shown = _final_repr(result)
            print(f"note: {result.note}", file=sys.stderr)
            if shown is not None:
                print(f"its repr: {shown}", file=sys.stderr)
        return 0
    message = f"Error: the program failed ({result.status}): {result.message}"
    if limits is not None:
        # The message says "raise Limits.max_value_bytes": say how, from here.
        hints = limit_hints(result.message, limits)
        if hints:
            message += f" (kernelgate run: {'; '.join(hints)})"
    print(message, file=sys.stderr)
    if result.error is not None and result.error.traceback:
        print("\n".join(result.error.traceback), file=sys.stderr)
    return 1


def _final_repr(result: Any) -> str | None:
    """The text/plain form of the run's execute_result (a final expression not JSON)."""
    for output in result.outputs:
        if output.get("output_type") == "execute_result":
            text = output.get("data", {}).get("text/plain")
            if isinstance(text, str):
                return _short(text, 2000)
    return None


def _short(text: str, limit: int = 70) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


async def _run_once(gw: Any, program: str, on_output: Any) -> Any:
    async with gw:  # returns once the run is torn down, not just answered
        return await gw.run(program, on_output=on_output)


def _check_record_path(path: str) -> str:
    """Refuse a ``--record`` path before the run, not after it: the absolute path."""
    if not path.lower().endswith(".ipynb"):
        stem = os.path.splitext(os.path.basename(path))[0] or "run"
        raise UsageError(
            f"--record {path!r}: a recording is a notebook; give a name ending in .ipynb "
            f"(e.g. {stem}.ipynb)"
        )
    full = os.path.abspath(path)
    parent = os.path.dirname(full)
    if not os.path.isdir(parent):
        raise UsageError(
            f"--record {path!r}: there is no directory {parent!r}; create it first "
            "(kernelgate does not create directories)"
        )
    if os.path.isdir(full):
        raise UsageError(f"--record {path!r} is a directory; give a file name ending in .ipynb")
    return full


#: The language of a program file, by its extension (anything else: Python).
EXTENSIONS = {".ts": "typescript", ".mts": "typescript", ".js": "javascript", ".mjs": "javascript"}


def _language_of(path: str) -> str:
    return EXTENSIONS.get(os.path.splitext(path)[1].lower(), "python")


def _cmd_run(args: argparse.Namespace) -> int:
    record = _check_record_path(args.record) if args.record else None
    limits = limits_from_args(args)
    program = _read_program(args.program)
    namespaces = (
        load_bindings(args.bindings, bindings_search(args), fallback=[os.getcwd()])
        if args.bindings
        else {"tools": {}}
    )
    language = args.language or _language_of(args.program)
    # One run: a warm pool would only cost a second interpreter.
    try:
        gw = Gateway(
            namespaces=namespaces, limits=limits, pool_size=0, language=language, node=args.node
        )
    except (NodeUnavailable, TypeError) as exc:
        raise UsageError(f"cannot run {language} programs: {exc}") from None
    on_output = None if args.json else _print_live
    result = run_stoppable(lambda: _run_once(gw, program, on_output))
    code = _report(result, args.json, limits=limits or Limits())
    if not args.bindings and result.error is not None and "has no binding" in result.message:
        # The child cannot know the CLI's flags; the CLI can.
        print(
            "kernelgate run: no bindings were given; pass --bindings MODULE:ATTR "
            "(or ./file.py:ATTR) to give the program its tools",
            file=sys.stderr,
        )
    if record is not None:
        # Here, not with the module: every kernelgate command imports this one.
        from kernelgate.gateway.recording.store import save_run

        try:
            saved = save_run(result, record)
        except OSError as exc:
            raise UsageError(f"cannot record to {record!r}: {exc.strerror or exc}") from None
        # stderr: stdout is the program's output and value (or the JSON), nothing else.
        print(f"recorded to {saved}", file=sys.stderr)
    return code


def _cmd_demo(args: argparse.Namespace) -> int:
    if not args.json:
        print("-- program --")
        print(DEMO_PROGRAM.rstrip())
        print("\n-- output --")
    gw = Gateway(bindings=BINDINGS, pool_size=0)
    result = run_stoppable(lambda: _run_once(gw, DEMO_PROGRAM, None if args.json else _print_live))
    return _report(result, args.json, show_calls=True)


def register(subparsers: Any) -> None:
    """Add ``run`` and ``demo`` to the ``kernelgate`` command."""
    run = subparsers.add_parser(
        "run", help="run a program file (or - for stdin) and print what it printed and returned"
    )
    run.add_argument(
        "program",
        help="path of a program (Python; .ts TypeScript, .js JavaScript), or - for stdin",
    )
    run.add_argument(
        "--language",
        choices=["python", "typescript", "javascript"],
        help="the program's language (default: from its extension; Python for stdin)",
    )
    run.add_argument("--node", metavar="PATH", help="the Node binary (TypeScript/JavaScript)")
    run.add_argument(
        "--bindings",
        metavar="MODULE:ATTR",
        help="a dict of callables, or a module (its public functions): MODULE:ATTR, where "
        "MODULE is a file (./tools.py), a module in --bindings-path or the working directory "
        "(tools.py there), or an installed module",
    )
    add_bindings_path_argument(run)
    add_limit_arguments(run)
    run.add_argument("--json", action="store_true", help="print RunResult.to_dict() as JSON")
    run.add_argument(
        "--record",
        metavar="PATH",
        help="also save the run as a notebook: a name ending in .ipynb, in a directory that "
        "exists (says where on stderr)",
    )
    run.set_defaults(func=_cmd_run)
    demo = subparsers.add_parser("demo", help="run a sample agent program against demo bindings")
    demo.add_argument("--json", action="store_true", help="print RunResult.to_dict() as JSON")
    demo.set_defaults(func=_cmd_demo)
