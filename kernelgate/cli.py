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

__all__ = ["main", "load_bindings", "resolve_bindings", "UsageError"]

#: Modules that add subcommands with ``register(subparsers)``.
_COMMAND_MODULES = ("kernelgate.notebooks.cli", "kernelgate.gateway.kernel.cli")


class UsageError(Exception):
    """The command line was wrong: exit status 2 with this message."""


def _is_cwd(entry: str) -> bool:
    """True for a ``sys.path`` entry that means the working directory."""
    if entry in ("", "."):
        return True
    try:
        return os.path.realpath(entry) == os.path.realpath(os.getcwd())
    except OSError:
        return False


def _looks_like_path(module: str) -> bool:
    return module.endswith(".py") or os.sep in module or module.startswith(".")


def _module_file(directory: str, name: str) -> str | None:
    """``directory/name.py``, or the package ``directory/name/__init__.py``, if there."""
    for candidate in (
        os.path.join(directory, name + ".py"),
        os.path.join(directory, name, "__init__.py"),
    ):
        if os.path.isfile(candidate):
            return os.path.abspath(candidate)
    return None


def resolve_bindings(
    spec: str, search: Sequence[str] = (), fallback: Sequence[str] = ()
) -> tuple[str, str]:
    """Where ``--bindings spec`` comes from, found without importing anything else:
    ``(source, attr)``, where ``source`` is an absolute ``.py`` path or an installed
    module's name.

    ``spec`` is ``MODULE:ATTR`` (or ``MODULE``). ``MODULE`` may be a path to a file
    (``./tools.py``, ``/abs/dir/tools.py``; a package's ``__init__.py`` or directory too),
    or a module name. A name is looked up in ``search`` (directories the user named, in
    order: the file ``NAME.py`` or the package ``NAME/``), then among the standard library
    and the installed modules (``sys.path`` without the working directory), and last in
    ``fallback`` (e.g. the working directory, for ``kernelgate run``): a file there never
    shadows a module that is importable anyway, and nothing else found there is imported.
    """
    module, sep, attr = spec.rpartition(":") if ":" in spec else (spec, "", "")
    if not sep:
        module, attr = spec, ""
    if not module or (attr and not all(part.isidentifier() for part in attr.split("."))):
        raise UsageError(
            f"--bindings {spec!r}: expected MODULE:ATTR, e.g. mytools:BINDINGS or "
            "./mytools.py:BINDINGS"
        )
    if _looks_like_path(module):
        path = os.path.abspath(module)
        if os.path.isdir(path):
            path = os.path.join(path, "__init__.py")
        if not os.path.isfile(path) or not path.endswith(".py"):
            raise UsageError(
                f"--bindings {spec!r}: cannot import {module!r}: no Python file {path!r}"
            )
        return path, attr
    if not all(part.isidentifier() for part in module.split(".")):
        raise UsageError(
            f"--bindings {spec!r}: cannot import {module!r}: not a module name or a path "
            "to a .py file"
        )
    top = module.split(".")[0]
    single = "." not in module
    for directory in search if single else ():
        found = _module_file(directory, module)
        if found is not None:
            return found, attr
    if _find_installed(top):
        return module, attr
    for directory in fallback if single else ():
        found = _module_file(directory, module)
        if found is not None:
            return found, attr
    where = " or ".join(
        [*(repr(d) for d in search), "the installed modules", *(repr(d) for d in fallback)]
    )
    raise UsageError(
        f"--bindings {spec!r}: cannot import {module!r}: no such module in {where}. Give "
        f"a path to its file (e.g. ./{top}.py:{attr or 'BINDINGS'}), or install it"
    )


def _installed_path() -> list[str]:
    return [entry for entry in sys.path if not _is_cwd(entry)]


def _find_installed(name: str) -> bool:
    """Whether a top-level module ``name`` is importable without the working directory."""
    import importlib.machinery

    for finder in sys.meta_path:
        find_spec = getattr(finder, "find_spec", None)
        if find_spec is None:
            continue
        if finder is importlib.machinery.PathFinder:
            found = importlib.machinery.PathFinder.find_spec(name, _installed_path())
        else:
            try:
                found = find_spec(name, None)
            except (ImportError, ValueError):
                found = None
        if found is not None:
            return True
    return False


def _import_installed(name: str) -> ModuleType:
    """Import ``name`` with the working directory off ``sys.path`` while it imports."""
    saved = sys.path[:]
    sys.path[:] = _installed_path()
    try:
        return importlib.import_module(name)
    finally:
        kept = [entry for entry in sys.path if entry not in saved]
        sys.path[:] = saved + kept


def _import_file(path: str) -> ModuleType:
    """Load the module at ``path`` by itself: its directory is not put on ``sys.path``,
    and the name it is registered under shadows no other module."""
    import importlib.util

    directory, filename = os.path.split(path)
    is_package = filename == "__init__.py"
    stem = os.path.basename(directory) if is_package else filename[: -len(".py")]
    name = stem
    if (
        not stem.isidentifier()
        or stem in sys.modules
        or stem in sys.stdlib_module_names
        or _find_installed(stem)
    ):
        base = f"_kernelgate_bindings_{stem if stem.isidentifier() else 'module'}"
        name, n = base, 1
        while name in sys.modules:
            n += 1
            name = f"{base}_{n}"
    spec = importlib.util.spec_from_file_location(
        name, path, submodule_search_locations=[directory] if is_package else None
    )
    if spec is None or spec.loader is None:
        raise ImportError(f"not a loadable Python file: {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # decorators (dataclasses) look their module up here
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


def load_bindings(
    spec: str, search: Sequence[str] = (), fallback: Sequence[str] = ()
) -> dict[str, dict[str, Callable[..., Any]]]:
    """Load ``MODULE:ATTR`` (or ``MODULE``) as namespaces of bindings.

    ``MODULE`` is resolved by :func:`resolve_bindings` (a path, a name in one of the
    ``search`` directories, an installed module, or one in the ``fallback`` directories):
    only that module is loaded from
    where it was found; no directory is put on ``sys.path``, so a ``queue.py`` or
    ``asyncio.py`` lying next to it (or in the working directory) is never imported.
    ``attr`` may be a dict of callables (namespace ``tools``), a dict of such dicts
    (several namespaces), or a module; a module gives its public functions.
    """
    source, attr = resolve_bindings(spec, search, fallback)
    try:
        obj: Any = _import_file(source) if os.path.isabs(source) else _import_installed(source)
    except ImportError as exc:
        raise UsageError(f"--bindings {spec!r}: cannot import {source!r}: {exc}") from None
    for part in attr.split(".") if attr else []:
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise UsageError(f"--bindings {spec!r}: {source} has no attribute {attr!r}") from None
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


def add_bindings_path_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--bindings-path",
        action="append",
        default=[],
        metavar="DIR",
        help="a directory to find the --bindings module in (repeatable); the module named "
        "is loaded from there, nothing else (the directory is not put on sys.path)",
    )


def bindings_search(args: argparse.Namespace) -> list[str]:
    """The directories a ``--bindings`` name is looked up in first: ``--bindings-path``."""
    dirs = [os.path.abspath(d) for d in getattr(args, "bindings_path", None) or []]
    for directory in dirs:
        if not os.path.isdir(directory):
            raise UsageError(f"--bindings-path {directory!r} is not a directory")
    return dirs


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
    namespaces = (
        load_bindings(args.bindings, bindings_search(args), fallback=[os.getcwd()])
        if args.bindings
        else {"tools": {}}
    )
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
        help="a dict of callables, or a module (its public functions): MODULE:ATTR, where "
        "MODULE is a file (./tools.py), a module in --bindings-path or the working directory "
        "(tools.py there), or an installed module",
    )
    add_bindings_path_argument(run)
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
