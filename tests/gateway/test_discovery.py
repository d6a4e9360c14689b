"""What the run_code description says of a run's rules, and progressive discovery: a search
over bindings (host, tool, program), the stub of only what is asked, a size budget, the stub
in the system prompt (issue 21)."""

from __future__ import annotations

import ast
import re
import shutil
from collections.abc import Callable
from typing import Any

import jsonschema
import mcp.types
import pytest
from anthropic.types import ToolParam
from openai.types.chat import ChatCompletionToolParam
from pydantic import TypeAdapter

from kernelgate import Gateway, Limits
from kernelgate.demo import BINDINGS

FAST = Limits(wall_seconds=30, kill_grace_seconds=0.5)
NODE = shutil.which("node")
META = jsonschema.Draft202012Validator

WORDS = (
    "issue label comment user repository branch commit release invoice payment customer "
    "order shipment ticket calendar event meeting message channel file folder document "
    "report metric alert incident deploy build test secret token"
).split()
VERBS = "create list get update delete close search archive export import".split()


def many(n: int) -> dict[str, dict[str, Callable[..., Any]]]:
    """``n`` bindings over several namespaces, each with its own words."""
    namespaces: dict[str, dict[str, Callable[..., Any]]] = {}
    for i in range(n):
        verb, noun = VERBS[i % len(VERBS)], WORDS[(i // len(VERBS)) % len(WORDS)]
        ns = f"svc{i % 7}"
        name = f"{verb}_{noun}_{i}"

        def fn(ident: str, note: str = "") -> dict[str, Any]:
            return {}

        fn.__doc__ = (
            f"{verb.capitalize()} a {noun} (variant {i}).\n\nArgs:\n    ident: The {noun}'s id."
        )
        namespaces.setdefault(ns, {})[name] = fn
    return namespaces


def test_the_description_states_the_limits_the_network_and_the_imports() -> None:
    limits = Limits(wall_seconds=5, cpu_seconds=3, memory_bytes=256 << 20, max_calls=7)
    isolated = Gateway(bindings=BINDINGS, limits=limits, sandbox="namespaces")
    text = isolated.tool_schema()["description"]
    assert "at most 5 s of wall time and 3 s of CPU, 256 MiB of memory" in text
    assert "7 binding calls" in text and "printed output past 64 KiB is cut" in text
    assert "No network: the program reaches nothing outside" in text
    assert "Imports: the Python standard library and the " in text
    assert "Nothing can be installed." in text
    assert text.index("Rules of every run") < text.index("The bindings, as a Python stub")
    open_net = Gateway(bindings=BINDINGS, sandbox="process").tool_schema()["description"]
    assert "The network is not cut off at this gateway's sandbox level ('process')" in open_net
    assert "No network" not in open_net and "Nothing can be installed" not in open_net


def test_what_the_description_says_is_importable_can_be_imported() -> None:
    # "the packages installed in the interpreter's environment": one of them, in a run
    # at the level the description states.
    gw = Gateway(sandbox="namespaces", pool_size=0)
    assert "No network" in gw.run_rules()
    with gw:
        r = gw.run_sync("import jsonschema, pydantic\nreturn jsonschema.__name__", limits=FAST)
    assert r.status == "ok" and r.value == "jsonschema", r.message


@pytest.mark.skipif(NODE is None, reason="node is not on PATH")
def test_a_typescript_description_states_what_require_gives() -> None:
    text = Gateway(bindings=BINDINGS, language="typescript").tool_schema()["description"]
    assert "Rules of every run" in text and "`require` gives Node's built-in modules" in text
    assert text.index("Rules of every run") < text.index("The bindings, as TypeScript")


def test_search_over_a_thousand_bindings_finds_the_one_asked_for() -> None:
    gw = Gateway(namespaces=many(1000))
    assert (
        gw.search_bindings("archive invoice", limit=3)[0]
        .split(".")[1]
        .startswith("archive_invoice_")
    )
    hits = gw.search_bindings("close incident", limit=5)
    assert all("incident" in h for h in hits[:3]) and hits[0].split(".")[1].startswith("close_")
    assert gw.search_bindings("svc3.get_shipment_122")[0] == "svc3.get_shipment_122"
    assert gw.search_bindings("nothing here matches") == []
    answer = gw.search_tools("export shipment", limit=2)
    ast.parse(answer)
    assert answer.count("async def ") == 2 and "export_shipment_" in answer
    assert "# Bindings are async" not in answer  # run_code's description says it
    assert "No binding matches" in gw.search_tools("zzz")
    # A model's bad call is answered, not raised.
    assert gw.search_tools(None, 2).startswith("search_tools: query must be a string")  # type: ignore[arg-type]
    assert "limit must be an integer from 1 to 50" in gw.search_tools("x", 0)
    assert gw.search_tools("export shipment", None) == gw.search_tools("export shipment", 5)
    with pytest.raises(ValueError, match="limit must be an integer from 1 to 50"):
        gw.search_bindings("x", limit=500)


def test_describe_names_gives_the_stub_of_only_those() -> None:
    gw = Gateway(
        namespaces={
            "tracker": {"search": BINDINGS["search"]},
            "math": {"compute": BINDINGS["compute"]},
        }
    )
    stub = gw.describe(names=["math.compute"])
    ast.parse(stub)
    assert "async def compute(" in stub and "search" not in stub.split("class math:")[1]
    assert "class tracker" not in stub and "await math.name(...)" in stub
    assert "class tracker:" in gw.describe(names=["tracker"])  # a whole namespace
    assert [e["name"] for e in gw.describe("json", names=["search"])] == ["search"]
    assert "compute(" in gw.describe("typescript", names=["math.compute"])
    with pytest.raises(ValueError, match=r"no binding 'math.nope'; .*tracker.search, math.compute"):
        gw.describe(names=["math.nope"])


def _validate(tool: dict[str, Any], api: str) -> None:
    if api == "anthropic":
        TypeAdapter(ToolParam).validate_python(tool)
        META.check_schema(tool["input_schema"])
    elif api == "openai":
        TypeAdapter(ChatCompletionToolParam).validate_python(tool)
        META.check_schema(tool["function"]["parameters"])
    else:
        mcp.types.Tool.model_validate(tool)
        META.check_schema(tool["inputSchema"])


def _description(tool: dict[str, Any]) -> str:
    return str(tool["function"]["description"] if "function" in tool else tool["description"])


@pytest.mark.parametrize("api", ["anthropic", "openai", "mcp"])
def test_a_description_budget_lists_names_and_points_at_the_search(api: str) -> None:
    gw = Gateway(namespaces=many(100), tool_search=True)
    whole = _description(gw.tool_schema(api))
    assert len(whole) > 10_000 and whole.endswith(gw.describe())
    for budget in (4000, 1024, 700):
        tool = gw.tool_schema(api, max_description_chars=budget)
        _validate(tool, api)
        text = _description(tool)
        assert len(text) <= budget
        assert "call the search_tools tool" in text
        assert "await kernelgate.search_tools(query)" in text
    assert "svc0.create_issue_0" in _description(gw.tool_schema(api, max_description_chars=4000))
    partial = _description(gw.tool_schema(api, max_description_chars=1500))
    assert "The bindings (100): svc0.create_issue_0, " in partial
    assert re.search(r", \.\.\. and \d+ more\.\n", partial)
    assert "There are 100 bindings." in _description(
        gw.tool_schema(api, max_description_chars=1024)
    )
    with pytest.raises(ValueError, match="too small for any run_code description: the shortest"):
        gw.tool_schema(api, max_description_chars=100)
    search = gw.search_tool_schema(api)
    _validate(search, api)
    assert (search.get("name") or search["function"]["name"]) == "search_tools"


def test_the_search_tool_in_the_responses_api_shape_is_strict() -> None:
    from openai.types.responses import FunctionToolParam

    tool = Gateway(bindings=BINDINGS).search_tool_schema("openai-responses")
    TypeAdapter(FunctionToolParam).validate_python(tool)
    schema = tool["parameters"]
    META.check_schema(schema)
    assert tool["strict"] is True and schema["additionalProperties"] is False
    assert sorted(schema["required"]) == sorted(schema["properties"])  # strict: all required
    assert META(schema).is_valid({"query": "issue", "limit": None})


def test_the_stub_can_go_in_the_system_prompt() -> None:
    gw = Gateway(bindings=BINDINGS)
    text = gw.tool_schema(stub_in="system")["description"]
    assert "The bindings are described in the system prompt." in text
    assert "class tools" not in text and "Rules of every run" in text
    assert gw.system_prompt().endswith(gw.describe())
    assert gw.system_prompt().startswith(
        "The bindings run_code programs can call, as a Python stub"
    )
    with pytest.raises(ValueError, match="stub_in='prompt': use 'description'"):
        gw.tool_schema(stub_in="prompt")


@pytest.mark.parametrize("pool_size", [0, 1], ids=["cold", "warm"])
def test_programs_search_the_bindings_in_the_reserved_namespace(pool_size: int) -> None:
    user = {**BINDINGS, "search_tools": lambda query: "the user's own"}
    program = (
        "found = await kernelgate.search_tools('document', limit=2)\n"
        "one = await kernelgate.describe(['tools.compute'])\n"
        "return [found, one, await tools.search_tools('x')]"
    )
    with Gateway(bindings=user, tool_search=True, pool_size=pool_size) as gw:
        r = gw.run_sync(program, limits=FAST)
    assert r.status == "ok", r.message
    found, one, own = r.value
    ast.parse(found)
    assert "async def fetch(" in found and "async def compute(" not in found
    assert "async def compute(" in one and own == "the user's own"
    assert [c.namespace for c in r.calls] == ["kernelgate", "kernelgate", "tools"]
    # Off by default: no such global.
    with Gateway(bindings=BINDINGS, pool_size=0) as gw:
        r = gw.run_sync("return await kernelgate.search_tools('x')", limits=FAST)
    assert r.error is not None and r.error.ename == "NameError"


def test_no_user_namespace_can_take_the_reserved_name() -> None:
    with pytest.raises(ValueError, match="namespace 'kernelgate' would shadow a name"):
        Gateway(namespaces={"kernelgate": {"search_tools": lambda q: q}})
    with pytest.raises(ValueError, match="namespace 'kernelgate' would shadow a name"):
        Gateway(bindings={"x": lambda: 1}, namespace="kernelgate", tool_search=True)


@pytest.mark.skipif(NODE is None, reason="node is not on PATH")
def test_typescript_programs_search_the_bindings_too() -> None:
    with Gateway(bindings=BINDINGS, tool_search=True, language="typescript", pool_size=0) as gw:
        r = gw.run_sync("await kernelgate.search_tools('document', {limit: 1})", limits=FAST)
    assert r.status == "ok", r.message
    assert r.value.startswith("declare const tools: {") and "fetch(doc_id: string)" in r.value


@pytest.mark.parametrize("pool_size", [0, 1], ids=["cold", "warm"])
def test_a_program_cannot_make_the_search_costly(pool_size: int) -> None:
    # The search is a host entry point a program reaches: what it sends is bounded before
    # any work, and answered as text (or a ToolError), never a host failure.
    program = (
        "import time\n"
        "t0 = time.monotonic()\n"
        "big = await kernelgate.search_tools('issue ' * 500_000)\n"
        "try:\n"
        "    await kernelgate.describe(['tools.fetch'] * 10_000)\n"
        "except ToolError as exc:\n"
        "    many = str(exc)\n"
        "odd = await kernelgate.search_tools('fetch', limit=10**9)\n"
        "return [big, many, odd, time.monotonic() - t0]"
    )
    with Gateway(namespaces=many(1000), tool_search=True, pool_size=pool_size) as gw:
        r = gw.run_sync(program, limits=FAST)
    assert r.status == "ok", r.message
    big, many_names, odd, took = r.value
    assert big.startswith("search_tools: the query is 3000000 characters; search with a few")
    assert "10000 names asked for; describe at most 200 at once" in many_names
    assert "limit must be an integer from 1 to 50" in odd
    assert took < 10
