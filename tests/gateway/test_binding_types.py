"""Type hints at the JSON boundary: what a binding's annotations say is what it gets.

The host checks every argument against the binding's hints before the binding runs (the
host is the authority: the child does not check types at all), converts what has a
lossless JSON form (dates, Enums, dataclasses, tuples) both ways, checks a result against
the return hint, and refuses a hint JSON cannot carry when the Gateway is built. Real
children: Python programs at every level, warm and cold, and TypeScript programs.
"""

from __future__ import annotations

import asyncio
import collections.abc
import dataclasses
import datetime
import enum
import shutil
from collections.abc import Callable
from typing import Any, Literal, Optional

import pytest
from typing_extensions import NotRequired, TypedDict

from kernelgate import Gateway, Limits, RunResult, input_schema, save_run
from kernelgate.gateway.bindings import BindingRegistry
from kernelgate.gateway.describe import annotation_schema, describe
from tests.gateway.conftest import warmed_up
from tests.hardening.conftest import ALL_LEVELS

FAST = Limits(wall_seconds=30)


class State(enum.Enum):
    """An issue's state."""

    OPEN = "open"
    CLOSED = "closed"


@dataclasses.dataclass
class Point:
    """A point on the plane."""

    x: int
    y: int = 0


class Issue(TypedDict):
    """An issue of the tracker."""

    title: str
    state: Literal["open", "closed"]
    due: NotRequired[datetime.date]


#: What the bindings were called with: empty when every call was refused.
SEEN: list[Any] = []


def file_issue(state: Literal["open", "closed"], count: int, ratio: float = 1.0) -> str:
    """File an issue."""
    SEEN.append((state, count, ratio))
    return f"{state}:{count}:{ratio}"


def plot(
    p: Point,
    when: datetime.date,
    color: State,
    at: tuple[int, int],
    issue: Issue | None = None,
    *more: datetime.time,
) -> dict[str, Any]:
    """Say what the values arrived as."""
    SEEN.append(p)
    return {
        "p": [type(p).__name__, p.x, p.y],
        "when": [type(when).__name__, when.year, when.month, when.day],
        "color": [type(color).__name__, color.name],
        "at": type(at).__name__,
        "due": type(issue["due"]).__name__ if issue and "due" in issue else None,
        "more": [type(t).__name__ for t in more],
    }


def make_point(x: int) -> Point:
    return Point(x, 2 * x)


def next_day(day: datetime.date) -> datetime.date:
    return day + datetime.timedelta(days=1)


def later(when: datetime.datetime) -> datetime.datetime:
    return when + datetime.timedelta(hours=1)


def states() -> list[State]:
    return [State.OPEN, State.CLOSED]


def liar(kind: str) -> int:
    """Breaks its own return hint."""
    return "12" if kind == "str" else True  # type: ignore[return-value]


def anything(value: Any, rest=None) -> Any:
    return [value, rest]


BINDINGS: dict[str, Callable[..., Any]] = {
    "file_issue": file_issue,
    "plot": plot,
    "make_point": make_point,
    "next_day": next_day,
    "states": states,
    "later": later,
    "liar": liar,
    "anything": anything,
}


def run(
    base: str, code: str, *, level: str = "process", warm: bool = False, **kw: Any
) -> RunResult:
    gateway = Gateway(
        bindings=BINDINGS,
        sandbox=level,
        limits=FAST,
        tmp_dir=base,
        pool_size=1 if warm else 0,
        **kw,
    )

    async def main() -> RunResult:
        async with gateway as gw:
            if warm:
                await warmed_up(gw)
            result = await gw.run(code)
            assert result.usage["warm"] is warm
            return result

    return asyncio.run(main())


@pytest.fixture
def base(run_dir_base: str) -> str:
    SEEN.clear()
    return run_dir_base


REFUSED = """
out = []
for call in [
    lambda: tools.file_issue("merged", 1),
    lambda: tools.file_issue("open", "12"),
    lambda: tools.file_issue("open", True),
    lambda: tools.file_issue("open", 1, ratio="0.5"),
    lambda: tools.plot({"x": 1, "z": 2}, "2024-01-02", "open", [1, 2]),
    lambda: tools.plot({"x": 1}, "2024-1-2", "open", [1, 2]),
    lambda: tools.plot({"x": 1}, "2024-01-02", "purple", [1, 2]),
    lambda: tools.plot({"x": 1}, "2024-01-02", "open", [1, 2, 3]),
    lambda: tools.plot({"x": 1}, "2024-01-02", "open", [1, 2], {"title": "t", "state": "merged"}),
    lambda: tools.plot({"x": 1}, "2024-01-02", "open", [1, 2], None, "10:00", "noon"),
]:
    try:
        await call()
    except ToolError as e:
        out.append([e.ename, str(e)])
out
"""


@ALL_LEVELS
@pytest.mark.parametrize("warm", [False, True], ids=["cold", "warm"])
def test_a_value_that_breaks_a_hint_is_refused_before_the_binding_runs(
    base: str, level: str, warm: bool
) -> None:
    result = run(base, REFUSED, level=level, warm=warm)
    assert result.ok, result.error
    assert SEEN == []  # no binding ran
    errors = [e for _, e in result.value]
    assert [n for n, _ in result.value] == ["TypeError"] * 10
    expected = [
        "tools.file_issue() argument state: expected 'open' or 'closed', got str 'merged'",
        "tools.file_issue() argument count: expected int, got str '12'",
        "tools.file_issue() argument count: expected int, got bool True",
        "tools.file_issue() argument ratio: expected float, got str '0.5'",
        "tools.plot() argument p: unexpected key 'z' (a Point has x, y)",
        "tools.plot() argument when: expected a date as an ISO 8601 string (YYYY-MM-DD), "
        "got str '2024-1-2'",
        "tools.plot() argument color: expected a State: 'open' or 'closed', got str 'purple'",
        "tools.plot() argument at: expected an array of 2 items, got list [1, 2, 3]",
        "tools.plot() argument issue['state']: expected 'open' or 'closed', got str 'merged'",
        "tools.plot() argument more[1]: expected a time as an ISO 8601 string (HH:MM[:SS]), "
        "got str 'noon'",
    ]
    for error, want in zip(errors, expected, strict=True):
        assert want in error, (want, error)
        assert "; its signature is " in error
    assert all(not c.ok and c.error.ename == "TypeError" for c in result.calls)


def test_the_refusal_is_read_at_the_programs_own_line(base: str) -> None:
    result = run(base, "x = 1\nawait tools.file_issue('merged', 1)")
    assert result.status == "exception" and result.error.ename == "ToolError"
    assert any('File "<program>", line 2' in line for line in result.error.traceback)
    assert result.error.traceback[-1].startswith(
        "ToolError: tools.file_issue failed: TypeError: tools.file_issue() argument state: "
        "expected 'open' or 'closed', got str 'merged'; its signature is file_issue(state: "
        "Literal['open', 'closed'], count: int, ratio: float = 1.0) -> str"
    )
    assert SEEN == []


def test_values_with_a_lossless_json_form_are_converted_both_ways(base: str) -> None:
    code = """
seen = await tools.plot({"x": 1}, "2024-02-28", "closed", [3, 4],
                        {"title": "t", "state": "open", "due": "2024-03-01"}, "10:30")
ok = await tools.file_issue("open", 2.0, ratio=2)
return [seen, ok, await tools.make_point(3), await tools.next_day("2024-02-28"),
        await tools.states(), await tools.anything({"a": [1, None]})]
"""
    result = run(base, code)
    assert result.ok, result.error
    seen, ok, point, day, listed, anything = result.value
    assert seen == {
        "p": ["Point", 1, 0],
        "when": ["date", 2024, 2, 28],
        "color": ["State", "CLOSED"],
        "at": "tuple",
        "due": "date",
        "more": ["time"],
    }
    assert ok == "open:2:2"  # 2.0 is JSON's 2 for an int; an int is a float
    assert point == {"x": 3, "y": 6}
    assert day == "2024-02-29"
    assert listed == ["open", "closed"]
    assert anything == [{"a": [1, None]}, None]
    # The record keeps what crossed the wire: JSON, both ways.
    assert result.calls[0].args[1] == "2024-02-28" and result.calls[2].value == {"x": 3, "y": 6}


def test_a_binding_that_breaks_its_return_hint_is_named_as_at_fault(base: str) -> None:
    code = """
out = []
for kind in ["str", "bool"]:
    try:
        await tools.liar(kind)
    except ToolError as e:
        out.append(str(e))
out
"""
    result = run(base, code)
    assert result.ok, result.error
    assert result.value == [
        "tools.liar failed: TypeError: the binding tools.liar returned a value its own "
        f"return annotation (-> int) refuses: its result: expected int, got {got}. This is a "
        "fault of the host's binding, not of the program"
        for got in ("str '12'", "bool True")
    ]


def _unannotated(x):
    return x


class Plain:
    pass


def _with(annotation: Any, returns: Any = Any) -> Callable[..., Any]:
    def binding(value):
        return value

    binding.__annotations__ = {"value": annotation, "return": returns}
    return binding


@pytest.mark.parametrize(
    ("fn", "message"),
    [
        (
            _with(bytes),
            "binding tools.f, parameter value: bytes cannot travel as JSON: annotate it as "
            "str and encode the bytes as base64 yourself (or use Any to accept anything JSON)",
        ),
        (
            _with(Any, bytes),
            "binding tools.f, its return: bytes cannot travel as JSON: annotate it as str",
        ),
        (
            _with(set[int]),
            "binding tools.f, parameter value: set cannot travel as JSON: JSON has no sets: "
            "annotate it as list[...]",
        ),
        (
            _with(Plain),
            "binding tools.f, parameter value: Plain is neither a dataclass, a TypedDict nor "
            "an Enum, so JSON cannot carry it: make it one of those, or annotate it as "
            "dict[str, Any] (or Any)",
        ),
        (
            _with(collections.abc.Callable[[int], int]),
            "binding tools.f, parameter value: collections.abc.Callable[[int], int]: a "
            "function cannot travel as JSON",
        ),
        (
            _with(dict[int, str]),
            "binding tools.f, parameter value: dict[int, str]: JSON object keys are strings: "
            "annotate it as dict[str, ...]",
        ),
        (
            _with("Nowhere"),
            "binding tools.f: its annotations do not resolve (NameError: name 'Nowhere' is "
            "not defined); define what they name at module level before the Gateway is built, "
            "or use Any to accept anything JSON",
        ),
        (
            _with(list[datetime.timedelta]),
            "binding tools.f, parameter value: timedelta cannot travel as JSON: annotate it "
            "as float (seconds)",
        ),
    ],
    ids=[
        "bytes",
        "returns-bytes",
        "set",
        "plain-class",
        "callable",
        "int-keys",
        "unresolved",
        "timedelta",
    ],
)
def test_a_hint_json_cannot_carry_is_refused_when_the_gateway_is_built(
    fn: Callable[..., Any], message: str, run_dir_base: str
) -> None:
    with pytest.raises(TypeError) as caught:
        Gateway(bindings={"f": fn}, tmp_dir=run_dir_base)
    assert message in str(caught.value)
    with pytest.raises(TypeError):
        BindingRegistry({"tools": {"f": fn}})


def test_any_unannotated_and_a_schema_of_its_own_are_the_ways_out() -> None:
    """A binding opts out of hint checks with Any or no annotation; one with a JSON
    Schema of its arguments is checked against that instead of its hints."""

    @input_schema({"type": "object", "properties": {"value": {"type": "string"}}})
    def schemaed(value: bytes) -> Any:
        return value

    registry = BindingRegistry(
        {"tools": {"a": _with(Any), "u": _unannotated, "s": schemaed, "d": _with(dict, list)}}
    )
    assert registry.lookup("tools", "a").types is None
    assert registry.lookup("tools", "u").types is None
    assert registry.lookup("tools", "s").types is None
    assert registry.lookup("tools", "s").load_arguments(["x"], {}) == (["x"], {})


def _normal(schema: Any) -> Any:
    """A schema without what kernelgate leaves out or adds beside pydantic's: property
    titles (noise for a model), ``additionalProperties: false`` of a named object (the
    checker refuses unknown keys, where pydantic drops them), and a root named type
    inlined (kernelgate keeps it a ``$ref``, so a named type is always named)."""
    if isinstance(schema, list):
        return [_normal(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _normal(v) for k, v in schema.items()}
    if isinstance(out.get("properties"), dict):
        out["properties"] = {
            k: {kk: vv for kk, vv in v.items() if kk != "title"}
            for k, v in out["properties"].items()
        }
        if out.get("additionalProperties") is False and "title" in out:
            del out["additionalProperties"]
    return out


def _inline_root(schema: dict[str, Any]) -> dict[str, Any]:
    """pydantic's placement of a non-recursive root type: inline, not a ``$ref``."""
    ref = schema.get("$ref")
    if not isinstance(ref, str) or set(schema) != {"$ref", "$defs"}:
        return schema
    name = ref.rsplit("/", 1)[1]
    defs = dict(schema["$defs"])
    body = defs.pop(name)
    if ref in repr(body) or ref in repr(defs):
        return schema  # recursive: pydantic keeps the $ref too
    return {**body, "$defs": defs} if defs else body


@dataclasses.dataclass
class Tree:
    """A tree of ints."""

    value: int
    children: list[Tree] = dataclasses.field(default_factory=list)


@pytest.mark.parametrize(
    "tp",
    [
        int,
        float,
        Optional[str],  # noqa: UP045 - the spelling is the case
        list[State],
        State,
        Point,
        Issue,
        Optional[Issue],  # noqa: UP045
        tuple[int, str],
        tuple[float, ...],
        dict[str, datetime.datetime],
        datetime.date,
        datetime.time,
        Literal["open", "closed"],
        Literal[1, "a"],
        Tree,
        list[Point] | None,
    ],
    ids=str,
)
def test_the_json_schema_of_a_hint_is_pydantics(tp: Any) -> None:
    pydantic = pytest.importorskip("pydantic")
    ours = _normal(_inline_root(annotation_schema(tp)))
    theirs = _normal(pydantic.TypeAdapter(tp).json_schema())
    assert ours == theirs


def test_describe_names_the_types_in_defs_with_their_docstrings() -> None:
    [entry] = [
        e
        for e in describe(BindingRegistry({"tools": BINDINGS}), format="json")
        if e["name"] == "plot"
    ]
    params = entry["parameters"]
    assert params["properties"]["p"] == {"$ref": "#/$defs/Point"}
    assert params["properties"]["when"] == {"type": "string", "format": "date"}
    assert params["properties"]["more"]["items"] == {"type": "string", "format": "time"}
    assert params["properties"]["issue"] == {
        "anyOf": [{"$ref": "#/$defs/Issue"}, {"type": "null"}],
        "default": None,
    }
    defs = params["$defs"]
    assert defs["State"] == {
        "title": "State",
        "description": "An issue's state.",
        "enum": ["open", "closed"],
        "type": "string",
    }
    assert defs["Point"]["description"] == "A point on the plane."
    assert defs["Issue"]["required"] == ["title", "state"]
    assert defs["Issue"]["properties"]["due"] == {"type": "string", "format": "date"}
    [made] = [
        e
        for e in describe(BindingRegistry({"tools": BINDINGS}), format="json")
        if e["name"] == "make_point"
    ]
    assert made["returns"]["$ref"] == "#/$defs/Point" and "Point" in made["returns"]["$defs"]


needs_node = pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")

TS_PROGRAM = """
const out: unknown[] = [];
for (const call of [
  () => tools.file_issue("merged", 1),
  () => tools.file_issue("open", "12"),
  () => tools.plot({x: 1}, "2024-1-2", "open", [1, 2]),
]) {
  try { await call(); } catch (e: any) { out.push([e.ename, e.message]); }
}
out.push(await tools.plot({x: 1}, "2024-02-28", "closed", [3, 4]));
out.push(await tools.make_point(3), await tools.next_day("2024-02-28"));
out.push(await tools.later(new Date(Date.UTC(2024, 1, 28, 23, 30)).toISOString()));
out
"""


@needs_node
@ALL_LEVELS
@pytest.mark.timeout(120)
def test_a_typescript_program_gets_the_same_refusals_and_conversions(base: str, level: str) -> None:
    result = run(base, TS_PROGRAM, level=level, language="typescript")
    assert result.ok, result.error
    literal, integer, day, seen, point, next_day, later_on = result.value
    assert literal[0] == integer[0] == day[0] == "TypeError"
    assert (
        "tools.file_issue() argument state: expected 'open' or 'closed', got str 'merged'"
        in (literal[1])
    )
    assert "tools.file_issue() argument count: expected int, got str '12'" in integer[1]
    assert "tools.plot() argument when: expected a date as an ISO 8601 string" in day[1]
    assert seen["p"] == ["Point", 1, 0] and seen["color"] == ["State", "CLOSED"]
    assert point == {"x": 3, "y": 6} and next_day == "2024-02-29"
    assert later_on == "2024-02-29T00:30:00+00:00"  # JavaScript's toISOString() read
    assert len(SEEN) == 1  # only the call that fitted ran


def test_replay_with_live_bindings_converts_as_the_gateway_does(base: str, tmp_path: Any) -> None:
    from kernelgate.notebooks import replay

    code = (
        'p = await tools.plot({"x": 1}, "2024-02-28", "closed", [3, 4])\n'
        'return [p, await tools.next_day("2024-02-28"), await tools.make_point(2)]'
    )
    recorded = run(base, code)
    assert recorded.ok, recorded.error
    path = save_run(recorded, tmp_path / "typed.ipynb")
    SEEN.clear()
    report = replay(path, live=BINDINGS, limits=FAST)
    assert report.diverged is False, report.format()
    assert report.result.value == recorded.value
    assert SEEN == [Point(1, 0)]  # the live binding got a Point, the gate matched the JSON


def grow(tree: Tree) -> int:
    """How deep the tree is."""
    depth = 0
    while tree.children:
        tree, depth = tree.children[0], depth + 1
    return depth


def cyclic(n: int) -> Tree:
    tree = Tree(n)
    tree.children.append(tree)  # the binding's own bug: a tree that contains itself
    return tree


def test_a_value_as_deep_as_the_wire_allows_through_a_recursive_hint_is_answered(
    base: str,
) -> None:
    """A recursive dataclass converts by recursion: a program's 245-deep tree (490 JSON levels: the wire
    allows 500) must get an answer, converted or refused, and the host go on; so must a
    binding's result that contains itself."""
    code = """
tree = {"value": 0, "children": []}
for i in range(245):
    tree = {"value": i, "children": [tree]}
out = []
for call in [lambda: tools.grow(tree), lambda: tools.cyclic(1)]:
    try:
        out.append(await call())
    except ToolError as e:
        out.append([e.ename, str(e)])
out.append(await tools.grow({"value": 0, "children": [{"value": 1}]}))
out
"""
    gateway = Gateway(
        bindings={"grow": grow, "cyclic": cyclic}, limits=FAST, tmp_dir=base, pool_size=0
    )
    with gateway as gw:
        result = gw.run_sync(code)
        assert result.ok, result.error
        deep, cycle, shallow = result.value
        assert deep == 245 or (deep[0] == "TypeError" and "too deep" in deep[1]), deep
        assert cycle[0] == "TypeError" and "its result" in cycle[1], cycle
        assert "contains itself or nests too deeply" in cycle[1], cycle
        assert shallow == 1
        assert gw.run_sync("1 + 1").value == 2  # the host goes on


def test_a_union_keeps_a_value_an_option_takes_as_it_is() -> None:
    """``int | float`` keeps 3.0 a float (an option takes it as it is) before ``int``
    would convert it; ``X | None`` reports X's own error."""

    def f(x: int | float, p: Point | None = None) -> int | float:
        return x

    binding = BindingRegistry({"tools": {"f": f}}).lookup("tools", "f")
    assert binding is not None
    args, _ = binding.load_arguments([3.0], {})
    assert type(args[0]) is float
    with pytest.raises(TypeError, match=r"argument p: unexpected key 'z' \(a Point has x, y\)"):
        binding.load_arguments([1, {"x": 1, "z": 0}], {})
