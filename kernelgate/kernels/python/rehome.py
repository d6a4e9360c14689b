"""Where kernelgate's frames say they are: ``<kernelgate>/...``, never the host's paths.

A crash dump (faulthandler on SIGSEGV, SIGABRT...) or a traceback the program prints itself
lists the frames below the program's: they must not show where kernelgate is installed on
the host.

>>> HIDDEN_ROOT
'<kernelgate>'
"""

from __future__ import annotations

import os
import sys
import types
from typing import Any

__all__ = ["HIDDEN_ROOT", "PACKAGE_DIR", "rehome_code"]

#: What a frame of kernelgate's own code shows as its file (``<kernelgate>/wire/values.py``).
HIDDEN_ROOT = "<kernelgate>"
#: The ``kernelgate`` package directory on the host (what HIDDEN_ROOT stands for).
PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def rehome_code() -> None:
    """Make every loaded kernelgate function report ``<kernelgate>/...`` as its file.

    Code objects are immutable, so each function gets a copy with the new name (nested
    functions and lambdas through its constants); frames already running keep the old one,
    so this runs before the child's entry point is called.
    """
    prefix = PACKAGE_DIR + os.sep

    def rehomed(code: types.CodeType) -> types.CodeType:
        if not code.co_filename.startswith(prefix):
            return code
        consts = tuple(rehomed(c) if type(c) is types.CodeType else c for c in code.co_consts)
        name = HIDDEN_ROOT + "/" + code.co_filename[len(prefix) :].replace(os.sep, "/")
        return code.replace(co_filename=name, co_consts=consts)

    def fix(fn: Any) -> None:
        if type(fn) is types.FunctionType:
            fn.__code__ = rehomed(fn.__code__)

    seen: set[int] = set()

    def visit_class(cls: type) -> None:
        if id(cls) in seen:
            return
        seen.add(id(cls))
        for attr in list(vars(cls).values()):
            if type(attr) in (staticmethod, classmethod):
                fix(attr.__func__)
            elif type(attr) is property:
                for f in (attr.fget, attr.fset, attr.fdel):
                    fix(f)
            elif isinstance(attr, type) and attr.__module__ == cls.__module__:
                visit_class(attr)
            else:
                fix(attr)

    for name, module in list(sys.modules.items()):
        if module is None or not (name == "kernelgate" or name.startswith("kernelgate.")):
            continue
        for obj in list(vars(module).values()):
            if isinstance(obj, type):
                if obj.__module__ == name:
                    visit_class(obj)
            else:
                fix(obj)
