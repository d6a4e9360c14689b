"""The rules of a run, as the ``run_code`` description tells a model: its limits, the
network, and what it can import.

A model that does not know a run stops at 600 s, or that there is no network, writes a
program that downloads a file and waits; one that does not know what it can import guesses.
The text is made from what the gateway really does: its :class:`~kernelgate.Limits`, the
sandbox level its runs get (only the namespace levels cut the network off), and the
interpreter's environment (the child imports whatever that has: the Python standard
library and the distributions installed for it; nothing is installed per run).

>>> print(run_rules(Limits(), "namespaces", "python", python_imports=None))
... # doctest: +NORMALIZE_WHITESPACE
Rules of every run: at most 600 s of wall time and 60 s of CPU, 512 MiB of memory, 64
processes, 10000 binding calls; printed output past 64 KiB is cut; the returned value is
at most 32 KiB as JSON. No network: the program reaches nothing outside (use the
bindings for that). Imports: the Python standard library and the packages installed in
the interpreter's environment; an ImportError says a module is not there. Nothing can be
installed.
"""

from __future__ import annotations

import importlib.metadata
import os
import sys

from kernelgate.model.limits import Limits

__all__ = ["python_imports", "run_rules"]

#: Distribution names a description lists at most (beyond, it gives their number).
MAX_LISTED = 20
#: Not for programs: what runs them, and what installs packages.
_TOOLING = frozenset({"kernelgate", "pip", "setuptools", "wheel", "distribute"})


def _size(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} bytes"


def _seconds(s: float) -> str:
    return f"{s:g} s"


def python_imports(python: str) -> list[str] | None:
    """The distributions installed for ``python`` when it is this interpreter (read from
    its metadata: no process is started), sorted; None for another interpreter (it is not
    asked: the text then names no package)."""
    if os.path.abspath(python) != os.path.abspath(sys.executable):
        return None
    names = set()
    for dist in importlib.metadata.distributions():
        name = dist.metadata["Name"] if dist.metadata is not None else None
        if name and name.lower() not in _TOOLING:
            names.add(name)
    return sorted(names, key=str.lower)


def run_rules(
    limits: Limits, level: str, language: str, *, python_imports: list[str] | None = None
) -> str:
    """The rules paragraph for programs in ``language`` run at sandbox ``level`` with
    ``limits``; ``python_imports``: what :func:`python_imports` found (None: unknown)."""
    rules = (
        f"Rules of every run: at most {_seconds(limits.wall_seconds)} of wall time and "
        f"{_seconds(limits.cpu_seconds)} of CPU, {_size(limits.memory_bytes)} of memory, "
        f"{limits.max_processes} processes, {limits.max_calls} binding calls; printed output "
        f"past {_size(limits.max_output_bytes)} is cut; the returned value is at most "
        f"{_size(limits.max_value_bytes)} as JSON."
    )
    isolated = level.startswith("namespaces")
    if isolated:
        network = "No network: the program reaches nothing outside (use the bindings for that)."
    else:
        network = (
            f"The network is not cut off at this gateway's sandbox level ({level!r}), but "
            "reach outside only through the bindings."
        )
    if language == "python":
        if python_imports is None:
            what = "the packages installed in the interpreter's environment"
        elif not python_imports:
            what = "no other package (none is installed in the interpreter's environment)"
        elif len(python_imports) <= MAX_LISTED:
            what = f"the packages installed in its environment: {', '.join(python_imports)}"
        else:
            what = (
                f"the {len(python_imports)} distributions installed in the interpreter's "
                "environment"
            )
        imports = (
            f"Imports: the Python standard library and {what}; an ImportError says a module "
            "is not there."
        )
    else:
        imports = (
            "Imports: `require` gives Node's built-in modules (fs, path, crypto, ...); npm "
            "packages are not provided."
        )
    if isolated:
        imports += " Nothing can be installed."
    return f"{rules} {network} {imports}"
