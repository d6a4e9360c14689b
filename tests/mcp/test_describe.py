"""describe(), the run_code tool, ToolOutput, bindings with their own JSON Schema."""

from __future__ import annotations

import asyncio
import dataclasses
import doctest
import enum
import importlib
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from kernelgate import Gateway, Limits, input_schema
from kernelgate.demo import BINDINGS
from kernelgate.gateway.bindings import BindingRegistry
from kernelgate.gateway.tools import tool_output
from kernelgate.jupyter.introspect import inspect_code, plain_doc
from kernelgate.model.result import ErrorInfo, RunResult
from kernelgate.model.schema import check_value
from kernelgate.notebooks import SessionLog

FAST = Limits(wall_seconds=30, kill_grace_seconds=0.5)
README = Path(__file__).parents[2] / "README.md"
META = jsonschema.Draft202012Validator


@input_schema(
    {
        "type": "object",
        "properties": {
            "n": {"type": "integer", "minimum": 1, "description": "How many."},
            "unit": {"enum": ["m", "km"], "default": "m"},
        },
        "required": ["n"],
        "additionalProperties": False,
    }
)
def measure(n, unit="m"):  # type: ignore[no-untyped-def]
    return f"{n} {unit}"


@pytest.mark.parametrize(
    "module",
    [
        "kernelgate.model.schema",
        "kernelgate.model.describe",
        "kernelgate.gateway.describe",
        "kernelgate.gateway.tools",
        "kernelgate.gateway.schemas",
        "kernelgate.mcp.server",
    ],
)
def test_doctests(module: str) -> None:
    result = doctest.testmod(importlib.import_module(module), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0


def test_describe_json_schemas_are_valid_and_describe_the_calls() -> None:
    gw = Gateway(namespaces={"tools": BINDINGS, "units": {"measure": measure}})
    entries = gw.describe(format="json")
    assert [(e["namespace"], e["name"]) for e in entries] == [
        ("tools", "compute"),
        ("tools", "fetch"),
        ("tools", "search"),
        ("units", "measure"),
    ]
    for entry in entries:
        META.check_schema(entry["parameters"])
        META.check_schema(entry["returns"])
    search = entries[2]
    assert search["description"].startswith("Find documents")
    assert search["parameters"] == {
        "type": "object",
        "properties": {"query": {"type": "string"}, "limit": {"type": "integer", "default": 3}},
        "required": ["query"],
        "additionalProperties": False,
    }
    assert search["returns"] == {"type": "array", "items": {"type": "object"}}
    params = search["parameters"]
    assert META(params).is_valid({"query": "x", "limit": 2})
    assert not META(params).is_valid({"limit": 2})
    assert not META(params).is_valid({"query": "x", "limit": "2"})
    # A binding's own schema is what describe shows.
    assert entries[3]["parameters"] == measure.__kernelgate_schema__  # type: ignore[attr-defined]


def test_tool_schemas_are_valid_for_each_api() -> None:
    gw = Gateway(bindings=BINDINGS)
    stub = gw.describe()
    anthropic = gw.tool_schema("anthropic")
    openai = gw.tool_schema("openai")
    mcp = gw.tool_schema("mcp")
    for schema in (anthropic["input_schema"], openai["function"]["parameters"], mcp["inputSchema"]):
        META.check_schema(schema)
        assert META(schema).is_valid({"code": "return 1"})
        assert not META(schema).is_valid({})
    assert anthropic["name"] == openai["function"]["name"] == mcp["name"] == "run_code"
    assert openai["type"] == "function"
    for description in (anthropic["description"], openai["function"]["description"]):
        assert description.endswith(stub) and "return <value>" in description
    with pytest.raises(ValueError, match="use one of anthropic, openai, openai-responses, mcp"):
        gw.tool_schema("gemini")
    with pytest.raises(ValueError, match=r"'text' .*'json'"):
        gw.describe(format="yaml")  # type: ignore[call-overload]


def test_readme_shows_the_real_describe_and_tool_schema_output() -> None:
    readme = README.read_text()
    gw = Gateway(bindings=BINDINGS)
    assert gw.describe() in readme
    assert '"name": "run_code"' in readme


def test_help_in_a_program_prints_describe_and_inspect_shows_it() -> None:
    namespaces = {"tools": BINDINGS, "units": {"measure": measure}}
    with Gateway(namespaces=namespaces, pool_size=0) as gw:
        r = gw.run_sync("help(tools)\nhelp(units.measure)\nhelp(len)", limits=FAST)
    assert r.status == "ok", r.message
    alone = Gateway(bindings=BINDINGS).describe()
    assert r.stdout.startswith(alone)
    binding = (
        "async def measure(n: int, unit: Literal['m', 'km'] = 'm'):\n"
        '    """(no description)\n\n    Args:\n        n: How many.\n    """\n'
    )
    assert r.stdout[len(alone) :].startswith(binding)
    assert "len(obj, /)" in r.stdout  # Python's own help for anything else
    registry = BindingRegistry({"tools": BINDINGS})
    shown = inspect_code("tools", None, registry.namespaces)["data"]["text/plain"]
    assert shown == plain_doc(alone)  # the same text, reST literals shown plainly


@dataclasses.dataclass
class Point:
    """A point on the map."""

    x: int
    y: int


class Unit(enum.Enum):
    METRE = "m"
    KILOMETRE = "km"


def distance(a: Point, b: Point, unit: Unit = Unit.METRE) -> Point:
    """How far apart two points are."""
    return Point(b.x - a.x, b.y - a.y)


def test_help_in_a_program_shows_named_types_as_describe_does() -> None:
    """A binding taking a dataclass and an Enum: ``help(tools)`` in a program prints the
    stub ``describe()`` gives a model (``Point`` defined once as a TypedDict, ``Unit`` as
    its Literal), never ``__main__.Point`` with nothing saying what a Point is; so do
    ``help(tools.distance)`` and the Jupyter kernel's inspect of it."""
    bindings = {"distance": distance, **BINDINGS}
    with Gateway(bindings=bindings, pool_size=0) as gw:
        described = gw.describe()
        r = gw.run_sync("help(tools)\nprint('@@')\nhelp(tools.distance)", limits=FAST)
    assert r.status == "ok", r.message
    whole, one = r.stdout.split("@@\n")
    assert whole == described
    assert "class Point(TypedDict):" in whole and "Unit = Literal['m', 'km']" in whole
    assert "__main__" not in r.stdout and "test_describe." not in r.stdout
    assert one.startswith("# Types the bindings take and return")
    assert "class Point(TypedDict):" in one
    assert "async def distance(a: Point, b: Point, unit: Unit = ...) -> Point:" in one
    registry = BindingRegistry({"tools": bindings})
    shown = inspect_code("tools.distance", None, registry.namespaces)["data"]["text/plain"]
    assert shown == plain_doc(one.rstrip("\n"))


def test_a_binding_without_named_types_sends_the_child_no_more_than_before() -> None:
    """Only bindings with named types carry their described entry to the child: the
    announcement every run sends grows by nothing for the rest."""
    registry = BindingRegistry({"tools": {"distance": distance, **BINDINGS}})
    specs = registry.specs()["tools"]
    assert "described" in specs["distance"]
    assert all("described" not in spec for name, spec in specs.items() if name != "distance")


def test_a_binding_schema_is_checked_in_the_child_and_on_the_host() -> None:
    with Gateway(bindings={"measure": measure}, pool_size=0) as gw:
        r = gw.run_sync("await tools.measure(2, unit='mi')", limits=FAST)
        assert r.error is not None and r.error.ename == "TypeError"
        assert r.error.evalue == (
            "tools.measure() argument unit: str 'mi' is not one of 'm', 'km'; "
            "its signature is measure(n, unit='m')"
        )
        assert r.calls == []  # refused in the child
        r = gw.run_sync("return await tools.measure(3, unit='km')", limits=FAST)
        assert r.value == "3 km"
    # The host checks again: a child that skipped its check gets the same answer.
    binding = BindingRegistry({"tools": {"measure": measure}}).lookup("tools", "measure")
    assert binding is not None and binding.spec()["schema"]["required"] == ["n"]
    with pytest.raises(TypeError, match=r"argument n: must be at least 1, got 0"):
        binding.check_arguments([0], {})
    binding.check_arguments([1], {"unit": "m"})


@pytest.mark.parametrize(
    ("value", "schema", "error"),
    [
        ({"a": 1}, {"properties": {"a": {"type": "string"}}}, "argument a: expected string, got int 1"),
        ({"a": True}, {"properties": {"a": {"type": "integer"}}}, "expected integer, got bool True"),
        ({"a": 2.0}, {"properties": {"a": {"type": "integer"}}}, None),
        ({"a": [1, "x"]}, {"properties": {"a": {"items": {"type": "integer"}}}}, "argument a[1]: expected integer"),
        ({"a": {"b": 1}}, {"properties": {"a": {"additionalProperties": False}}}, "unexpected key 'b' in argument a"),
        ({"a": "xy"}, {"properties": {"a": {"maxLength": 1}}}, "argument a: must be at most 1 characters, got 2"),
        ({"a": 5}, {"properties": {"a": {"exclusiveMaximum": 5}}}, "argument a: must be less than 5, got 5"),
        ({"a": None}, {"properties": {"a": {"anyOf": [{"type": "string"}, {"type": "null"}]}}}, None),
        ({"a": 1}, {"properties": {"a": {"oneOf": [{"type": "string"}, {"type": "null"}]}}}, "fits none of the allowed forms"),
        ({"a": 1}, {"properties": {"a": {"$ref": "#/$defs/S"}}, "$defs": {"S": {"type": "string"}}}, "argument a: expected string"),
        ({"a": 1}, {"properties": {"a": {"format": "email", "x-vendor": 1}}}, None),
        ({"a": [1]}, {"properties": {"a": {"minItems": 2}}}, "must have at least 2 items"),
        ({"a": 1}, {"properties": {"a": {"$ref": "#"}}}, None),  # a cycle ends, never recurses forever
    ],
)
def test_schema_checker(value: Any, schema: dict[str, Any], error: str | None) -> None:
    found = check_value(value, schema)
    if error is None:
        assert found is None
    else:
        assert found is not None and error in found
    if error is None:  # agrees with a full validator where it accepts
        assert META(schema).is_valid(value)


def test_bad_schemas_are_refused_at_the_boundary() -> None:
    with pytest.raises(ValueError, match="type is 'object'"):
        input_schema({"type": "string"})
    with pytest.raises(ValueError, match="must be JSON"):
        input_schema({"type": "object", "default": {1, 2}})


def test_tool_output_text() -> None:
    ok = tool_output(RunResult(status="ok", value=[1, "a"], stdout="x\n", stderr="warn\n"))
    assert ok.text == 'printed:\nx\nstderr:\nwarn\nreturned:\n[1, "a"]' and not ok.is_error
    failed = tool_output(
        RunResult(
            status="exception",
            stdout="before\n",
            error=ErrorInfo("ValueError", "bad", ["Traceback (most recent call last):", "ValueError: bad"]),
        )
    )
    assert failed.is_error
    assert failed.text == (
        "error (exception): ValueError: bad\nTraceback (most recent call last):\nValueError: bad\n"
        "printed before the failure:\nbefore"
    )
    timeout = tool_output(RunResult(status="timeout", error=ErrorInfo("", "over wall_seconds=1")))
    assert timeout.text == "error (timeout): over wall_seconds=1"


def test_run_tool_cuts_long_output_with_a_marker_and_the_session_log_keeps_it(tmp_path: Path) -> None:
    log = SessionLog(tmp_path / "session.ipynb")

    async def main() -> Any:
        async with Gateway(bindings=BINDINGS, record_to=log, pool_size=0) as gw:
            long = await gw.run_tool(
                "for i in range(2000):\n    print('line', i)\nreturn 'done'", max_chars=1000, limits=FAST
            )
            failed = await gw.run_tool("print('x' * 5000)\n1 / 0", max_chars=500, limits=FAST)
            return long, failed

    long, failed = asyncio.run(main())
    assert len(long.text) <= 1000
    assert long.text.startswith("printed:\nline 0\n")
    assert "kernelgate cut" in long.text and "max_chars=1000" in long.text
    assert long.text.endswith("line 1999\nreturned:\n\"done\"")  # the value is kept whole
    assert failed.is_error and len(failed.text) <= 500
    assert failed.text.startswith("error (exception): ZeroDivisionError: division by zero")
    runs = log.runs()
    assert [r.status for r in runs] == ["ok", "exception"]
    assert runs[0].stdout.count("\n") == 2000  # the recording keeps everything


def test_record_to_refuses_what_is_neither_a_directory_nor_a_recorder() -> None:
    with pytest.raises(TypeError, match=r"record_to must be a directory .* or a recorder"):
        Gateway(record_to=42)  # type: ignore[arg-type]
