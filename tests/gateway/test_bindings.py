"""Binding calls: dispatch, errors, signatures, ordering, concurrency."""

from __future__ import annotations

import asyncio

import pytest

from kernelgate import Gateway, Limits


def test_sync_and_async_bindings(run):
    r = run(
        "a = await tools.add(1, b=2)\nhits = await tools.search('q', limit=2)\nreturn [a, hits]"
    )
    assert r.ok
    assert r.value == [3, [{"query": "q", "rank": 0}, {"query": "q", "rank": 1}]]
    assert [(c.id, c.name, c.args, c.kwargs, c.ok) for c in r.calls] == [
        (0, "add", [1], {"b": 2}, True),
        (1, "search", ["q"], {"limit": 2}, True),
    ]
    assert r.calls[0].value == 3 and r.calls[0].namespace == "tools"
    assert all(c.duration_s >= 0 and c.start_s >= 0 for c in r.calls)


def test_subscript_for_names_that_are_not_identifiers(run):
    assert run("return await tools['with-dash'](2, 5)").value == 7


def test_unknown_binding_is_attribute_error_listing_names(run):
    r = run("await tools.nope()")
    assert r.status == "exception" and r.error.ename == "AttributeError"
    assert "tools has no binding 'nope'" in r.error.evalue and "search" in r.error.evalue


def test_binding_error_raises_tool_error_with_fields(run):
    program = """
try:
    await tools.fail('bad input')
except ToolError as e:
    return {'tool': e.tool, 'ename': e.ename, 'message': str(e)}
"""
    r = run(program)
    assert r.value == {
        "tool": "tools.fail",
        "ename": "ValueError",
        "message": "tools.fail failed: ValueError: bad input",
    }
    assert r.calls[0].ok is False
    assert (r.calls[0].error.ename, r.calls[0].error.evalue) == ("ValueError", "bad input")


def test_uncaught_tool_error_fails_the_run(run):
    r = run("await tools.fail('x')")
    assert r.status == "exception" and r.error.ename == "ToolError"
    assert r.error.traceback[-1] == "ToolError: tools.fail failed: ValueError: x"


def test_signature_mismatch_is_type_error_at_program_line(run):
    r = run("x = 1\nawait tools.add(1, 2, 3)")
    assert r.status == "exception" and r.error.ename == "TypeError"
    assert "tools.add() too many positional arguments" in r.error.evalue
    assert "add(a: int, b: int) -> int" in r.error.evalue
    assert any('File "<program>", line 2' in line for line in r.error.traceback)
    assert r.calls == []  # it never left the child


def test_non_json_argument_is_refused_before_sending(run):
    r = run("await tools.echo({1, 2})")
    assert r.error.ename == "TypeError"
    assert "tools.echo() argument args[0]: set is not JSON" in r.error.evalue
    assert r.calls == []


def test_binding_returning_non_json_raises_tool_error(gateway, run_dir_base, make_gateway):
    gw = make_gateway(bindings={"bad": lambda: {1, 2}})
    r = gw.run_sync("await tools.bad()")
    assert r.error.ename == "ToolError"
    assert "not JSON" in r.error.evalue and "set" in r.error.evalue
    assert "tools.bad() result: set is not JSON" in r.error.evalue  # names the binding


def test_print_and_calls_are_in_order(run):
    program = """
print('one', end='')
await tools.add(1, 2)
print('two')
await tools.add(3, 4)
print('three')
"""
    r = run(program)
    assert r.stdout == "onetwo\nthree\n"
    # The unterminated 'one' went out before the first call was made, and each call sits
    # between the prints around it.
    assert [o["text"] for o in r.outputs] == ["one", "two\n", "three\n"]
    assert [c.output_index for c in r.calls] == [1, 2]


def test_gather_runs_calls_concurrently_on_the_host(run_dir_base, make_gateway):
    n = 8
    arrived = 0
    everyone_here = asyncio.Event()

    async def barrier(i: int) -> int:
        # Completes only once all n calls are in flight at the same time.
        nonlocal arrived
        arrived += 1
        if arrived == n:
            everyone_here.set()
        await everyone_here.wait()
        return i

    gw = make_gateway(bindings={"barrier": barrier}, limits=Limits(wall_seconds=20))
    r = gw.run_sync(
        f"import asyncio\nreturn await asyncio.gather(*[tools.barrier(i) for i in range({n})])"
    )
    assert r.ok, r.message
    assert r.value == list(range(n))


def test_gather_of_more_calls_than_in_flight_cap(run_dir_base, make_gateway):
    gw = make_gateway(
        bindings={"add": lambda a, b: a + b},
        limits=Limits(max_calls_in_flight=16),
    )
    r = gw.run_sync(
        "import asyncio\nr = await asyncio.gather(*[tools.add(i, 1) for i in range(1025)])\nreturn sum(r)"
    )
    assert r.ok, r.message
    assert r.value == sum(range(1, 1026)) and len(r.calls) == 1025


def test_max_calls_raises_in_program(gateway):
    r = gateway.run_sync(
        "n = 0\nwhile True:\n    try:\n        await tools.add(1, 1)\n    except ToolError as e:\n        return [n, e.ename, str(e)]\n    n += 1",
        limits=Limits(max_calls=5),
    )
    assert r.ok
    assert r.value[0] == 5 and r.value[1] == "LimitExceeded" and "max_calls=5" in r.value[2]


def test_several_namespaces(run_dir_base, make_gateway):
    gw = make_gateway(
        namespaces={"tools": {"a": lambda: 1}, "db": {"b": lambda: 2}},
    )
    assert gw.run_sync("return [await tools.a(), await db.b()]").value == [1, 2]


def test_custom_namespace_name(run_dir_base, make_gateway):
    gw = make_gateway(bindings={"a": lambda: 1}, namespace="api")
    r = gw.run_sync("return [await api.a(), 'tools' in globals()]")
    assert r.value == [1, False]


def test_binding_docs_and_signature_visible_in_program(run):
    r = run(
        "import inspect\nreturn [str(inspect.signature(tools.search)), tools.search.__doc__, sorted(dir(tools))]"
    )
    assert r.value == [
        "(query, limit=...)",
        "Search the test corpus.",
        ["add", "echo", "fail", "search", "with-dash"],
    ]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"namespaces": {"not valid": {}}}, "not a valid Python identifier"),
        ({"namespaces": {"ToolError": {}}}, "would shadow"),
        ({"bindings": {"": print}}, "non-empty string"),
        ({"bindings": {"_private": print}}, "not start with '_'"),
        ({"bindings": {"x": 3}}, "must be callable"),
        ({"bindings": {}, "namespaces": {}}, "not both"),
    ],
)
def test_invalid_names_are_caller_misuse(kwargs, message):
    with pytest.raises((ValueError, TypeError), match=message):
        Gateway(**kwargs)


def test_deep_binding_result_is_refused_cleanly(make_gateway):
    def deep():
        value: list = []
        for _ in range(2000):
            value = [value]
        return value

    gw = make_gateway(bindings={"deep": deep})
    r = gw.run_sync("await tools.deep()")
    assert r.status == "exception" and r.error.ename == "ToolError"
    assert "nested deeper than 500 levels" in r.error.evalue


def test_display_with_non_text_value_for_text_mime_is_dropped(run):
    program = """
class Odd:
    def _repr_mimebundle_(self, **kwargs):
        return {'text/html': 5, 'application/json': {'k': 1}}
    def __repr__(self):
        return 'Odd()'
display(Odd())
"""
    r = run(program)
    assert r.ok, r.message
    assert r.outputs[0]["data"] == {"application/json": {"k": 1}, "text/plain": "Odd()"}
