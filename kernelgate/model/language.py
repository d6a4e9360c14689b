"""The languages programs are written in, and what Jupyter is told about each.

A run records its language (``RunResult.language``); a notebook that holds runs says it
in ``metadata.language_info`` and ``metadata.kernelspec``, so JupyterLab highlights the
cells in that language, and a recording read back knows which runtime replays it. One
table here, for the runtime (``CodeRuntime.language_info``), the notebooks and the kernel.

>>> language_info("typescript")["file_extension"], kernelspec("typescript")["language"]
('.ts', 'typescript')
>>> language_of_notebook({"language_info": {"name": "javascript"}})
'javascript'
>>> check_language("ruby")  # doctest: +ELLIPSIS
Traceback (most recent call last):
ValueError: language='ruby' is not one kernelgate runs; use one of python, typescript, ...
"""

from __future__ import annotations

import platform
from typing import Any, Literal, cast, get_args

__all__ = [
    "DEFAULT_LANGUAGE",
    "LANGUAGES",
    "Language",
    "check_language",
    "kernelspec",
    "language_info",
    "language_of_notebook",
    "title",
]

#: What a program may be written in.
Language = Literal["python", "typescript", "javascript"]
LANGUAGES: tuple[Language, ...] = get_args(Language)
#: A run (or a recording made before runs said) without a language is Python.
DEFAULT_LANGUAGE: Language = "python"

# Jupyter's ``language_info`` per language. ``codemirror_mode`` is what JupyterLab looks
# up first (by name or alias, case-insensitively: CodeMirror's "TypeScript" and
# "JavaScript" modes); ``mimetype`` and ``file_extension`` are its fallbacks, and
# ``pygments_lexer`` is what nbconvert highlights with. Python's is ipykernel's, so a
# recording opened in JupyterLab is not marked "modified" when a Python kernel attaches.
_INFO: dict[Language, dict[str, Any]] = {
    "python": {
        "name": "python",
        "version": platform.python_version(),
        "mimetype": "text/x-python",
        "file_extension": ".py",
        "pygments_lexer": "ipython3",
        "codemirror_mode": {"name": "ipython", "version": 3},
        "nbconvert_exporter": "python",
    },
    "typescript": {
        "name": "typescript",
        "version": "",
        "mimetype": "text/typescript",
        "file_extension": ".ts",
        "pygments_lexer": "typescript",
        "codemirror_mode": {"name": "typescript"},
        "nbconvert_exporter": "script",
    },
    "javascript": {
        "name": "javascript",
        "version": "",
        "mimetype": "text/javascript",
        "file_extension": ".js",
        "pygments_lexer": "javascript",
        "codemirror_mode": {"name": "javascript"},
        "nbconvert_exporter": "script",
    },
}

_TITLES: dict[Language, str] = {
    "python": "Python",
    "typescript": "TypeScript",
    "javascript": "JavaScript",
}

# The kernelspec a notebook of each language names (``kernelgate kernel install``'s names).
_SPECS: dict[Language, dict[str, str]] = {
    language: {
        "name": "kernelgate" if language == "python" else f"kernelgate-{language}",
        "display_name": f"kernelgate ({_TITLES[language]})",
    }
    for language in LANGUAGES
}


def check_language(language: Any, what: str = "language") -> Language:
    """``language`` if kernelgate runs programs in it, else ``ValueError`` naming it."""
    if language not in LANGUAGES:
        raise ValueError(
            f"{what}={language!r} is not one kernelgate runs; use one of {', '.join(LANGUAGES)}"
        )
    return cast(Language, language)


def title(language: Language) -> str:
    """How the language is named in text: ``"TypeScript"``."""
    return _TITLES[language]


def language_info(language: Language, version: str | None = None) -> dict[str, Any]:
    """Jupyter's ``language_info`` for ``language`` (a fresh dict), with ``version`` when
    given (the interpreter's or Node's; Python's default is the host's)."""
    info = {k: dict(v) if isinstance(v, dict) else v for k, v in _INFO[language].items()}
    if version is not None:
        info["version"] = version
    return info


def kernelspec(language: Language) -> dict[str, str]:
    """The ``metadata.kernelspec`` of a notebook of ``language`` runs."""
    return {**_SPECS[language], "language": language}


def language_of_notebook(metadata: Any) -> Language:
    """The language a notebook's metadata says its cells are in: ``language_info.name``,
    else ``kernelspec.language``; Python when neither names a language kernelgate runs
    (a notebook written before runs recorded their language)."""
    if isinstance(metadata, dict):
        for key, field in (("language_info", "name"), ("kernelspec", "language")):
            block = metadata.get(key)
            name = block.get(field) if isinstance(block, dict) else None
            if name in LANGUAGES:
                return cast(Language, name)
    return DEFAULT_LANGUAGE
