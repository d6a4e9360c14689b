"""Modules and functions stay small enough to read: a module over ~500 lines or a function
over ~80 needs a comment saying why (``# long: <reason>`` in the function's first lines,
or at the top of the module).

A reader of kernelgate should be able to hold one module, or one function, in mind; where
one job honestly takes more (a hot loop kept in one frame for speed, a table), the reason
is written where the reader meets it.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "kernelgate"
MODULE_LINES = 520
FUNCTION_LINES = 80
MARK = "# long:"


def _too_long() -> list[str]:
    found: list[str] = []
    for path in sorted(ROOT.rglob("*.py")):
        source = path.read_text()
        lines = source.splitlines()
        name = path.relative_to(ROOT.parent)
        if len(lines) > MODULE_LINES and not any(MARK in line for line in lines[:40]):
            found.append(f"{name}: {len(lines)} lines (limit {MODULE_LINES})")
        for node in ast.walk(ast.parse(source)):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            assert node.end_lineno is not None
            length = node.end_lineno - node.lineno + 1
            head = lines[max(0, node.lineno - 3) : node.lineno + 30]
            if length > FUNCTION_LINES and not any(MARK in line for line in head):
                found.append(f"{name}:{node.lineno} {node.name}(): {length} lines")
    return found


def test_modules_and_functions_are_short_or_say_why() -> None:
    found = _too_long()
    assert not found, (
        "too long without a '# long: <why>' comment (split it, or say why not):\n"
        + "\n".join(found)
    )
