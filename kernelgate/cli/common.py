"""What every ``kernelgate`` subcommand shares: usage errors, stopping on a signal, the
``--timeout``/``--limit`` parsers, and finding and loading ``--bindings``."""

from __future__ import annotations

import argparse
import asyncio
import importlib
import inspect
import math
import os
import re
import signal
import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import fields
from types import ModuleType
from typing import Any, TypeVar

from kernelgate.model.limits import Limits, frame_headroom
from kernelgate.model.text import escape_controls, escape_text

__all__ = [
    "positive_seconds",
    "add_limit_arguments",
    "add_bindings_path_argument",
    "bindings_search",
    "load_bindings",
    "resolve_bindings",
    "UsageError",
    "Stopped",
    "run_stoppable",
    "parse_limit",
    "limits_from_args",
    "shown",
]

T = TypeVar("T")


class UsageError(Exception):
    """The command line was wrong: exit status 2 with this message."""


class Stopped(Exception):
    """A signal stopped the command; what it ran has been torn down. Exit ``128 + signum``."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


#: The signals that stop a command cleanly: ``timeout``, CI runners and ``docker stop``
#: send SIGTERM, Ctrl-C SIGINT, a closed terminal SIGHUP.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def run_stoppable(make: Callable[[], Awaitable[T]]) -> T:
    """``asyncio.run(make())``, stopped cleanly by a signal in :data:`STOP_SIGNALS`.

    The first such signal cancels the work: a run being awaited kills its child and
    process group and removes its run directory before the cancellation comes out (and
    ``asyncio.run`` finishes whatever teardown is still scheduled). Then :class:`Stopped`
    is raised. Further signals while that happens are ignored, so a second Ctrl-C cannot
    leave the teardown half done.
    """

    async def main() -> T:
        loop = asyncio.get_running_loop()
        task = asyncio.ensure_future(make())
        caught: list[int] = []

        def on_signal(signum: int) -> None:
            if not caught:
                caught.append(signum)
                task.cancel()

        for sig in STOP_SIGNALS:
            loop.add_signal_handler(sig, on_signal, sig)
        try:
            try:
                result = await task
            except asyncio.CancelledError:
                if caught:
                    raise Stopped(caught[0]) from None
                raise
            if caught:  # the work ended on its own as the signal came: still a stop
                raise Stopped(caught[0])
            return result
        finally:
            for sig in STOP_SIGNALS:
                loop.remove_signal_handler(sig)

    return asyncio.run(main())


# -- limits on the command line -----------------------------------------------------------

_SIZE_SUFFIXES = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_INT_FORM = re.compile(r"(\d[\d_]*)\s*(?:([kmgt])(?:i?b)?)?", re.IGNORECASE)
_SECONDS_FORM = re.compile(r"(.+?)\s*s?", re.IGNORECASE)


def _limit_fields() -> dict[str, str]:
    """``{name: "int" | "float"}`` for every :class:`Limits` field."""

    return {f.name: str(f.type) for f in fields(Limits)}


def _known_limits() -> str:
    return ", ".join(_limit_fields())


def parse_limit(text: str) -> tuple[str, int | float]:
    """``NAME=VALUE`` for ``--limit``: a :class:`~kernelgate.Limits` field and its value.

    Sizes and counts are integers, optionally with a binary suffix: ``K``, ``M``, ``G``,
    ``T`` (also ``KiB``, ``MB``, ...: all powers of 1024), e.g. ``max_value_bytes=1M``.
    Seconds are numbers, optionally ending in ``s`` (``wall_seconds=2.5``). Every value
    must be positive and finite.

    >>> parse_limit("max_value_bytes=64M")
    ('max_value_bytes', 67108864)
    >>> parse_limit("wall_seconds=2.5s")
    ('wall_seconds', 2.5)
    >>> parse_limit("max_valu_bytes=1")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: unknown limit 'max_valu_bytes' in 'max_valu_bytes=1'; known: ...
    """
    name, sep, raw = text.partition("=")
    name, raw = name.strip(), raw.strip()
    kinds = _limit_fields()
    if not sep or not name or not raw:
        raise argparse.ArgumentTypeError(
            f"expected NAME=VALUE (e.g. max_value_bytes=1M or wall_seconds=30), got {text!r}; "
            f"known names: {_known_limits()}"
        )
    if name not in kinds:
        raise argparse.ArgumentTypeError(
            f"unknown limit {name!r} in {text!r}; known: {_known_limits()}"
        )
    if kinds[name] == "float":
        m = _SECONDS_FORM.fullmatch(raw)
        try:
            seconds = float(m.group(1) if m else raw)
        except ValueError:
            seconds = math.nan
        if not (math.isfinite(seconds) and seconds > 0):
            raise argparse.ArgumentTypeError(
                f"{name} is a positive number of seconds (finite, e.g. {name}=30 or "
                f"{name}=2.5), got {raw!r}"
            )
        return name, seconds
    m = _INT_FORM.fullmatch(raw)
    value = (
        int(m.group(1).replace("_", "")) * _SIZE_SUFFIXES[(m.group(2) or "").lower()] if m else 0
    )
    if value <= 0:
        raise argparse.ArgumentTypeError(
            f"{name} is a positive integer, optionally with a K, M, G or T suffix (powers of "
            f"1024; e.g. {name}=1M), got {raw!r}"
        )
    return name, value


def add_limit_arguments(parser: argparse.ArgumentParser, what: str = "run") -> None:
    """``--timeout S`` and ``--limit NAME=VALUE`` (repeatable)."""
    parser.add_argument(
        "--timeout",
        type=positive_seconds,
        metavar="S",
        help=f"wall-clock budget of the {what} in seconds (the same as --limit wall_seconds=S)",
    )
    parser.add_argument(
        "--limit",
        type=parse_limit,
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help=f"set one of the {what}'s Limits (repeatable): sizes and counts as integers with "
        "an optional K/M/G/T suffix (powers of 1024), seconds as numbers; e.g. --limit "
        "max_value_bytes=1M --limit cpu_seconds=5. Names: " + _known_limits(),
    )


def limits_from_args(args: argparse.Namespace) -> Any:
    """The :class:`~kernelgate.Limits` that ``--timeout`` and ``--limit`` ask for, or
    ``None`` when they ask for nothing. A later ``--limit`` of the same name wins."""

    given: dict[str, int | float] = dict(getattr(args, "limit", None) or [])
    timeout = getattr(args, "timeout", None)
    if timeout is not None:
        if "wall_seconds" in given and given["wall_seconds"] != timeout:
            raise UsageError(
                f"--timeout {timeout:g} and --limit wall_seconds={given['wall_seconds']:g} "
                "disagree: give one of them"
            )
        given["wall_seconds"] = timeout
    if not given:
        return None
    frame = given.get("max_frame_bytes")
    if frame is not None:
        value = int(given.get("max_value_bytes", Limits().max_value_bytes))
        need = value + frame_headroom(value)
        if frame < need:
            raise UsageError(
                f"--limit max_frame_bytes={_format_limit(frame)} is too small for "
                f"max_value_bytes={_format_limit(value)}: it must be at least {need} (the "
                "value travels in one frame with its text form); raise it, or leave out "
                "--limit max_frame_bytes and it follows max_value_bytes"
            )
    try:
        return Limits(**given)  # type: ignore[arg-type]
    except ValueError as exc:
        raise UsageError(f"--limit: {exc}") from None


def _format_limit(value: int | float) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    for suffix, size in (("T", 1 << 40), ("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if value >= size and value % size == 0:
            return f"{value // size}{suffix}"
    return str(value)


def limit_hints(message: str, limits: Any) -> list[str]:
    """The ``Limits`` fields a failed run's message names (``Limits.max_value_bytes``,
    ``wall_seconds=...``), each as the ``--limit`` that raises it, in the order named."""
    names = list(_limit_fields())
    pattern = re.compile(r"\b(" + "|".join(map(re.escape, names)) + r")\b")
    hints: list[str] = []
    for name in dict.fromkeys(pattern.findall(message)):
        now = _format_limit(getattr(limits, name))
        hints.append(f"--limit {name}=N, now {now}")
    return hints


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


def positive_seconds(text: str) -> float:
    """The one parser of ``--timeout`` seconds, for every subcommand: positive and finite
    (``inf`` and ``nan`` are refused)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(
            f"expected a positive number of seconds (finite, e.g. 30 or 2.5), got {text!r}"
        )
    return value


# -- text for a terminal ---------------------------------------------------------------


def shown(text: str) -> str:
    """``text`` safe for a terminal: control characters (ANSI escapes, OSC, bells) and
    lone surrogates written as Python escapes, newlines and tabs kept."""
    return escape_text(escape_controls(text))
