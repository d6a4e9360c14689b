"""Which runtime a gateway runs its programs on: :func:`runtime_for` reads
``Gateway(runtime=, language=, python=, node=)``.

>>> runtime_for(language="python").name
'python'
"""

from __future__ import annotations

import os

from kernelgate.model.language import Language, check_language

from .noderuntime import NodeRuntime
from .runtime import CodeRuntime, PythonRuntime

__all__ = ["BASE_ENV", "node_runtime", "runtime_for"]

#: What the interpreter needs in an otherwise empty environment. The host's own variables
#: never reach the child; ``Gateway(env=...)`` adds to (or overrides) these.
BASE_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}


def node_runtime(language: Language, node: str | os.PathLike[str] | None = None) -> CodeRuntime:
    """The runtime of ``language`` (``"typescript"`` or ``"javascript"``) programs, run by
    Node (``node``: the binary, default ``node`` on PATH). What ``Gateway(language=...,
    node=...)`` calls; :class:`~.launch.NodeUnavailable` (naming what was looked for) when
    there is no usable Node.
    """
    return NodeRuntime(language, node)


def runtime_for(
    *,
    runtime: CodeRuntime | None = None,
    language: str | None = None,
    python: str | os.PathLike[str] | None = None,
    node: str | os.PathLike[str] | None = None,
) -> CodeRuntime:
    """The runtime ``Gateway(runtime=, language=, python=, node=)`` asks for: ``runtime``
    as given, else the runtime of ``language`` (default Python) with its binary.
    Arguments that contradict each other are a ``TypeError`` naming them, an unknown
    language a ``ValueError``.

    >>> runtime_for(language="python").name
    'python'
    >>> runtime_for(language="typescript", python="python3")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    TypeError: Gateway(language='typescript', python=...): python= names the interpreter ...
    """
    if runtime is not None:
        if not isinstance(runtime, CodeRuntime):
            raise TypeError(
                "runtime must be a kernelgate.gateway.runtime.CodeRuntime (e.g. "
                f"PythonRuntime(python=...)), got {type(runtime).__name__}"
            )
        named = (("language", language), ("python", python), ("node", node))
        given = [name for name, value in named if value is not None]
        if given and not (given == ["language"] and language == runtime.name):
            raise TypeError(
                f"Gateway(runtime=...) takes its language and binary from the runtime "
                f"({runtime!r}); leave out {', '.join(g + '=' for g in given)}"
            )
        return runtime
    lang = check_language("python" if language is None else language)
    if lang == "python":
        if node is not None:
            raise TypeError(
                "Gateway(node=...) is for language='typescript' or 'javascript'; Python "
                "programs run on python= (default: this interpreter)"
            )
        return PythonRuntime(python)
    if python is not None:
        raise TypeError(
            f"Gateway(language={lang!r}, python=...): python= names the interpreter of "
            f"Python programs; {lang} programs run on Node: give node= (or leave it out "
            "for the node on PATH)"
        )
    return node_runtime(lang, node)
