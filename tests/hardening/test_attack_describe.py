"""Attacks on the ``described`` entry a binding's spec now carries (model.describe
render_help / render_stub): the child renders what the host sent; the host renders its own
registry's specs. A program can ask the host to describe bindings (tool search) with any
arguments and can rewrite its own copy of the specs, and the host's stub stays the same.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import TypedDict

import pytest

WARM_COLD = pytest.mark.parametrize("warm", [True, False], ids=["warm", "cold"])


@dataclasses.dataclass
class Node:
    name: str
    children: list[Node]


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Tree(TypedDict):
    node: Node
    color: Color
    more: list[Tree]


def walk(tree: Tree, depth: int = 1) -> Node:
    """Walk it."""
    return tree["node"]


_PROGRAM = """
import io, contextlib
# Rewrite the child's own copy of the spec: a huge, self-referencing, ill-typed entry.
spec = tools.walk._spec
loop = {'$ref': '#/$defs/X'}
spec['described'] = {'parameters': {'$defs': {'X': {'type': 'object', 'properties': {'a': loop}},
                                              'Y': 'not a schema', 'Z': [1, 2, 3]},
                                    'properties': {'tree': loop}},
                     'returns': {'$ref': '#/$defs/nowhere'}, 'name': 7, 'namespace': None}
buf = io.StringIO()
with contextlib.redirect_stdout(buf):
    try:
        help(tools.walk)
    except Exception as exc:
        print(type(exc).__name__)
errors = []
for names in (['tools.walk'] * 200, ['tools'], ['x' * 5000], [{'a': 1}], []):
    try:
        await kernelgate.describe(names)
    except ToolError as exc:
        errors.append(exc.ename)
answers = []
for query in ('(' * 999, 'Tree Node', '\\u0000\\ud7ff' * 400, 'x' * 1001):
    try:
        answers.append(await kernelgate.search_tools(query))
    except ToolError as exc:
        errors.append(exc.ename)
return [await kernelgate.describe(['tools.walk']), errors, answers, buf.getvalue()]
"""


@pytest.mark.timeout(60)
@WARM_COLD
def test_a_program_cannot_change_what_the_host_describes(hostile, warm):
    gw = hostile.gateway(bindings={"walk": walk}, tool_search=True, pool_size=1 if warm else 0)
    before = gw.describe()
    r = hostile.run(_PROGRAM, gateway=gw, warm=warm)
    assert r.status == "ok", r.message
    described, errors, answers, helped = r.value
    assert "class Tree(TypedDict):" in described and "async def walk(" in described
    assert errors == ["ValueError", "TypeError"]  # no binding 'xxx...'; a name not a str
    assert "async def walk(" in answers[1]
    assert "at most 1000 characters" in answers[3]
    assert "walk" in helped  # the child's help() of its own rewritten spec still renders
    assert gw.describe() == before
    again = hostile.run("return await kernelgate.describe(['tools.walk'])", gateway=gw, warm=warm)
    assert again.status == "ok" and again.value == described
