"""What an interpreter's ``site`` module makes when it starts, as one JSON text. Stdlib only.

The host probes it once per interpreter (:func:`kernelgate.gateway.sandbox.probe_support`);
a cold child, started without ``site`` (``python -I -S``), is given it as argv[2] and adopts
it (:mod:`kernelgate.kernels.python.sitehook`): ``site`` and the code in ``.pth`` files (an
editable install's finder, a certificate hook) cost a cold start 3 to 15 ms, for programs
that mostly import nothing outside the standard library. One format, checked here for both.

>>> state = SiteState(("/lib",), "/", "/", ("/",), False)
>>> state.to_json()
'{"path":["/lib"],"prefix":"/","exec_prefix":"/","prefixes":["/"],"enable_user_site":false}'
>>> SiteState.from_json(state.to_json()) == state
True
>>> SiteState.from_json('{"path": "/lib"}')  # doctest: +ELLIPSIS
Traceback (most recent call last):
ValueError: the site state must be an object with path, prefix, ...; got '{"path": "/lib"}'
"""

from __future__ import annotations

import json
import site
import sys
from collections.abc import Sequence
from typing import Any, NamedTuple

__all__ = ["SiteState"]


class SiteState(NamedTuple):
    """sys.path (site-packages and the directories ``.pth`` files add), sys.prefix and
    sys.exec_prefix (a venv's), and ``site``'s own ``PREFIXES`` and ``ENABLE_USER_SITE``
    (from which ``site.getsitepackages()`` finds the directories whose ``.pth`` files it
    reads)."""

    path: tuple[str, ...]
    prefix: str
    exec_prefix: str
    prefixes: tuple[str, ...]
    enable_user_site: bool | None

    @classmethod
    def made_here(cls, path: Sequence[str]) -> SiteState:
        """This interpreter's, ``path`` being sys.path as ``site`` left it."""
        return cls(
            tuple(p for p in path if p),
            sys.prefix,
            sys.exec_prefix,
            tuple(site.PREFIXES),
            site.ENABLE_USER_SITE,
        )

    def to_json(self) -> str:
        return json.dumps(self._asdict(), separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> SiteState:
        """Parse and check; ``ValueError`` (quoting ``text``) if it is not what
        :meth:`to_json` writes."""
        try:
            found: Any = json.loads(text)
        except (TypeError, ValueError):
            found = None
        state = _checked(found) if isinstance(found, dict) else None
        if state is None:
            raise ValueError(
                "the site state must be an object with path, prefix, exec_prefix, prefixes "
                f"and enable_user_site as site makes them; got {str(text)[:200]!r}"
            )
        return state


def _checked(found: dict[str, Any]) -> SiteState | None:
    path, prefixes = _paths(found.get("path")), _paths(found.get("prefixes"))
    prefix = _paths([found.get("prefix"), found.get("exec_prefix")])
    user = found.get("enable_user_site")
    if path is None or prefixes is None or prefix is None or user not in (True, False, None):
        return None
    return SiteState(path, prefix[0], prefix[1], prefixes, user)


def _paths(value: Any) -> tuple[str, ...] | None:
    if isinstance(value, list) and all(type(p) is str and p for p in value):
        return tuple(value)
    return None
