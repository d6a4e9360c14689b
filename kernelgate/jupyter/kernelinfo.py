"""What a kernel says of itself in ``kernel_info_reply``: its language (the runtime's),
banner, help links and whether it has a debugger."""

from __future__ import annotations

import platform
from collections.abc import Mapping
from typing import Any

from kernelgate.gateway.runtime import CodeRuntime
from kernelgate.model.language import LANGUAGES, title
from kernelgate.notebooks.render import LANGUAGE_INFO
from kernelgate.wire.messages import PROTOCOL_VERSION

__all__ = ["kernel_info_content", "node_version"]


#: Where a kernel's ``help_links`` point, per language (Jupyter's Help menu shows them).
_HELP_LINKS: dict[str, list[dict[str, str]]] = {
    "python": [],
    "typescript": [
        {"text": "TypeScript Handbook", "url": "https://www.typescriptlang.org/docs/handbook/"},
        {"text": "Node.js API", "url": "https://nodejs.org/docs/latest/api/"},
    ],
    "javascript": [
        {"text": "JavaScript (MDN)", "url": "https://developer.mozilla.org/docs/Web/JavaScript"},
        {"text": "Node.js API", "url": "https://nodejs.org/docs/latest/api/"},
    ],
}


def kernel_info_content(
    language_info: Mapping[str, Any] | None = None,
    *,
    debugger: bool = True,
    runs_on: str | None = None,
) -> dict[str, Any]:
    """The ``kernel_info_reply``; ``language_info`` is the kernel's runtime's (default
    Python's, :data:`LANGUAGE_INFO`), ``debugger`` whether its runs can be debugged
    (JupyterLab offers its debugger only then), ``runs_on`` what the banner says runs the
    cells (default: this Python)."""
    from kernelgate import __version__

    info = dict(LANGUAGE_INFO if language_info is None else language_info)
    name = str(info.get("name", "python"))
    shown = title(name) if name in LANGUAGES else name
    runs_on = runs_on or f"Python {platform.python_version()}"
    call = "'await tools.name(...)'"
    return {
        "status": "ok",
        "protocol_version": PROTOCOL_VERSION,
        "implementation": "kernelgate",
        "implementation_version": __version__,
        "language_info": info,
        "banner": (
            f"kernelgate {__version__} ({shown} on {runs_on}): every cell is a fresh "
            f"{shown} program in its own child process; bindings are {call}."
            if name != "python"
            else f"kernelgate {__version__} ({runs_on}): every cell is a fresh program in "
            f"its own child process; bindings are {call}."
        ),
        "help_links": [dict(link) for link in _HELP_LINKS.get(name, [])],
        # JupyterLab's debugger (docs/kernel.md, "Debugging"; jupyter/debugger.py): only
        # where the runtime's children can be debugged (Python's).
        "debugger": debugger,
        "supported_features": ["debugger"] if debugger else [],
    }


def node_version(runtime: CodeRuntime) -> str:
    """The Node version a runtime found (``""`` when it does not say)."""
    version = getattr(getattr(runtime, "install", None), "version", None)
    if isinstance(version, tuple):
        return ".".join(str(part) for part in version)
    return ""
