"""``site`` for a cold child, which the host starts without it (``python -I -S``).

``site`` and the code in ``.pth`` files (an editable install's finder, a certificate hook)
cost a cold start 3 to 15 ms, and most programs import nothing outside the standard
library. So the host probes once what ``site`` makes and gives it to the child as argv[2]
(:class:`kernelgate.model.site.SiteState`). The child:

1. :func:`adopt`, at start: sys.path (site-packages and the directories ``.pth`` files
   add), sys.prefix and sys.exec_prefix (a venv's), ``site.PREFIXES`` and
   ``site.ENABLE_USER_SITE`` as ``site`` would have set them, so the sandbox keeps the
   same paths readable and a program sees the same interpreter;
2. :func:`install`, in the sandbox before the program runs: the builtins ``site`` adds
   (``exit``, ``quit``, ``help``, ``copyright``...), and a finder that runs the rest, the
   ``.pth`` files' import lines and ``sitecustomize``, the first time a program imports a
   top-level module the path does not hold.

A warm child's zygote ran ``site`` when it started: none of this applies to it.

>>> finder = SiteOnDemand()
>>> finder.find_spec("json.decoder", ["/somewhere"]) is None  # a submodule: never
True
"""

from __future__ import annotations

import os
import site
import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType

from kernelgate.model.site import SiteState

__all__ = ["SiteOnDemand", "adopt", "install"]


def adopt(argv: list[str]) -> None:
    """In a child started without ``site``: take what the host's probe says ``site`` makes
    (``argv[2]`` of the loader). Does nothing in a child started with ``site``."""
    if not sys.flags.no_site or len(argv) < 3:
        return
    made = SiteState.from_json(argv[2])
    sys.path[:] = made.path
    sys.prefix, sys.exec_prefix = made.prefix, made.exec_prefix
    site.PREFIXES[:] = made.prefixes
    site.ENABLE_USER_SITE = made.enable_user_site


class SiteOnDemand:
    """A meta path finder, last on ``sys.meta_path``: on the first miss of a top-level
    module it leaves, reads the ``.pth`` files of ``site.getsitepackages()`` as ``site``
    does (their import lines may install a finder; their path lines are on sys.path
    already), imports ``sitecustomize`` if there is one, and asks the finders again."""

    def __init__(self) -> None:
        self.ran = False

    def find_spec(
        self, name: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if path is not None or self.ran:  # a submodule: its package was found already
            return None
        self.ran = True
        if self in sys.meta_path:
            sys.meta_path.remove(self)  # sitecustomize is imported below: no recursion
        for site_dir in site.getsitepackages():
            if os.path.isdir(site_dir):
                site.addsitedir(site_dir)
        site.execsitecustomize()
        for finder in list(sys.meta_path):
            find = getattr(finder, "find_spec", None)
            if find is not None:
                spec: ModuleSpec | None = find(name, None, target)
                if spec is not None:
                    return spec
        return None


def install() -> None:
    """In a child started without ``site``: its builtins now, the ``.pth`` files' code on
    the first miss. Does nothing in one started with ``site``."""
    if not sys.flags.no_site:
        return
    site.setquit()
    site.setcopyright()
    site.sethelper()
    sys.meta_path.append(SiteOnDemand())
