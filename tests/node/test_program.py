"""The program model of the Node kernel, driven by a host ``Connection`` over a real fd 3.

Each test runs ``node kernel.js`` once with a small JavaScript program written as the host
sends it (the body of an async function whose last expression the host turned into
``return``) and checks what the host received: values, errors and their tracebacks,
concurrent calls, output order, the JSON boundary, the calling convention and the limits
the child enforces itself (calls, output, frame, value).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from .nodechild import KernelRun, Outcome, echo_spec

Make = Callable[..., KernelRun]

pytestmark = pytest.mark.timeout(60)


def run(kernel: Make, code: str, **options: Any) -> Outcome:
    k = kernel()
    return k.run(code, **options)


def value_of(out: Outcome) -> Any:
    results = out.of("ExecuteResult")
    assert len(results) == 1, out.events
    return results[0].data["application/json"]


def reply_of(out: Outcome) -> Any:
    assert out.reply is not None, (out.events, out.stderr_raw)
    return out.reply


def error_of(out: Outcome) -> Any:
    errors = out.of("ErrorOutput")
    assert len(errors) == 1, (out.events, out.stderr_raw)
    return errors[0]


# -- values --------------------------------------------------------------------------------


def test_a_returned_value_is_the_runs_value(kernel: Make) -> None:
    out = run(
        kernel,
        'const r = await tools.search("q", {limit: 2})\nreturn {n: r.length, first: r[0], ok: true, x: 1.5, none: null}',
    )
    assert out.status == "ok", out.events
    assert value_of(out) == {"n": 2, "first": "q-0", "ok": True, "x": 1.5, "none": None}
    assert out.of("ExecuteResult")[0].data["text/plain"].startswith("{")
    assert out.kinds() == ["CallRequest", "ExecuteResult", "ExecuteReply"]
    assert set(reply_of(out).usage) == {"cpu_user_s", "cpu_system_s", "peak_memory_bytes"}


@pytest.mark.parametrize("code", ["return undefined", "return null", "const x = 1", ""])
def test_no_value_sends_no_execute_result(kernel: Make, code: str) -> None:
    out = run(kernel, code)
    assert out.status == "ok"
    assert out.kinds() == ["ExecuteReply"]


def test_a_value_that_is_not_json_is_invalid_output_naming_the_path(kernel: Make) -> None:
    out = run(kernel, "return {a: [1, new Set([2])]}")
    assert out.status == "invalid_output"
    err = error_of(out)
    assert err.ename == "InvalidOutput"
    assert "value.a[1]: Set is not JSON" in err.evalue
    assert "ExecuteResult" not in out.kinds()


def test_a_value_over_max_value_bytes_is_output_limit(kernel: Make) -> None:
    out = run(kernel, 'return "x".repeat(5000)', max_value_bytes=1000)
    assert out.status == "output_limit"
    assert "max_value_bytes=1000" in error_of(out).evalue


def test_a_value_exactly_at_max_value_bytes_is_sent(kernel: Make) -> None:
    out = run(kernel, 'return "x".repeat(998)', max_value_bytes=1000)
    assert out.status == "ok"
    assert value_of(out) == "x" * 998


# -- errors and tracebacks -----------------------------------------------------------------


def test_an_error_has_the_programs_frames_only_with_its_lines(kernel: Make) -> None:
    code = "function inner(x) {\n  return x.nope.deeper\n}\nconst a = 1\nawait null\ninner({})"
    out = run(kernel, code)
    assert out.status == "exception"
    err = error_of(out)
    assert err.ename == "TypeError"
    assert "deeper" in err.evalue
    assert err.traceback[0].startswith("TypeError: ")
    frames = err.traceback[1:]
    assert frames and all("<program>:" in line for line in frames), err.traceback
    assert "    at inner (<program>:2:" in frames[0]
    assert any("<program>:6:" in line for line in frames)
    text = "\n".join(err.traceback)
    assert "kernel" not in text and "node:" not in text and ".js" not in text
    assert reply_of(out).ename == "TypeError" and reply_of(out).traceback == err.traceback


def test_line_one_columns_are_the_programs(kernel: Make) -> None:
    out = run(kernel, "null.x")
    frames = error_of(out).traceback[1:]
    assert frames == ["    at <program>:1:6"], frames


def test_a_syntax_error_says_where(kernel: Make) -> None:
    out = run(kernel, "const a = 1\nconst b = ;\n")
    err = error_of(out)
    assert out.status == "exception" and err.ename == "SyntaxError"
    assert err.traceback[0] == "<program>:2"
    assert err.traceback[1] == "const b = ;"
    assert err.traceback[-1].startswith("SyntaxError: ")


def test_error_subclasses_errors_in_callbacks_and_rejections(kernel: Make) -> None:
    out = run(kernel, "class Oops extends Error {}\nthrow new Oops('mine')")
    assert (error_of(out).ename, error_of(out).evalue) == ("Oops", "mine")
    out = run(
        kernel,
        "setTimeout(() => { throw new RangeError('late') }, 1)\nawait new Promise(r => setTimeout(r, 10000))",
    )
    assert out.status == "exception" and error_of(out).ename == "RangeError"
    out = run(
        kernel,
        "Promise.reject(new Error('nobody handles me'))\nawait new Promise(r => setTimeout(r, 10000))",
    )
    assert out.status == "exception" and error_of(out).evalue == "nobody handles me"


def test_a_thrown_non_error_and_a_cause(kernel: Make) -> None:
    out = run(kernel, 'throw "just a string"')
    err = error_of(out)
    assert out.status == "exception" and "just a string" in err.evalue
    out = run(kernel, "try { null.x } catch (e) { throw new Error('outer', {cause: e}) }")
    err = error_of(out)
    assert "Caused by:" in err.traceback and any(
        line.startswith("TypeError") for line in err.traceback
    )


@pytest.mark.parametrize("code", ["}); (function () { return 7", "}); 5; (async function () {"])
def test_a_program_that_escapes_its_function_still_ends_with_a_reply(
    kernel: Make, code: str
) -> None:
    out = run(kernel, code)
    assert out.reply is not None and out.protocol_error is None, (out.events, out.stderr_raw)


def test_a_promise_that_can_never_settle_ends_the_run(kernel: Make) -> None:
    out = run(kernel, "await new Promise(() => {})")
    assert out.status == "exception"
    assert error_of(out).ename == "UnsettledPromise"


def test_process_exit(kernel: Make) -> None:
    out = run(kernel, 'console.log("before")\nprocess.exit(0)\nconsole.log("after")')
    assert out.status == "ok" and out.text("stdout") == "before\n"
    out = run(kernel, "process.exit(3)")
    assert out.status == "exception" and error_of(out).ename == "ProcessExit"
    assert "process.exit(3)" in error_of(out).evalue


def test_a_run_directory_it_cannot_enter_is_sandbox_unavailable(kernel: Make) -> None:
    out = run(kernel, "return 1", cwd="/nonexistent/kernelgate-run")
    assert out.status == "sandbox_unavailable"
    assert (
        error_of(out).ename == "SandboxUnavailable"
        and "/nonexistent/kernelgate-run" in error_of(out).evalue
    )


def test_a_debugged_run_is_refused_cleanly(kernel: Make) -> None:
    out = run(kernel, "return 1", debug={"breakpoints": [{"line": 1}]})
    assert out.status == "exception"
    assert error_of(out).ename == "DebuggerUnavailable"
    assert "not available for JavaScript" in error_of(out).evalue
    assert out.kinds() == ["ErrorOutput", "ExecuteReply"]


# -- bindings ------------------------------------------------------------------------------


def test_a_failed_binding_is_a_tool_error_with_tool_and_ename(kernel: Make) -> None:
    code = (
        'try { await tools.fail("bad input") } catch (e) {\n'
        "  return [e instanceof ToolError, e instanceof Error, e.tool, e.ename, e.message, e.name]\n}"
    )
    out = run(kernel, code)
    assert value_of(out) == [
        True,
        True,
        "tools.fail",
        "ValueError",
        "tools.fail failed: ValueError: bad input",
        "ToolError",
    ]


def test_an_uncaught_tool_error_shows_the_calling_line(kernel: Make) -> None:
    out = run(kernel, "const x = 1\n\nawait tools.fail()")
    err = error_of(out)
    assert (err.ename, err.evalue) == ("ToolError", "tools.fail failed: ValueError: boom")
    assert any("<program>:3:" in line for line in err.traceback), err.traceback


def test_promise_all_makes_the_calls_concurrently(kernel: Make) -> None:
    k = kernel()
    k.start(
        'const rs = await Promise.all([tools.search("a"), tools.search("b"), tools.search("c")])\nreturn rs.map(r => r[0])'
    )
    out = k.pump(hold=lambda held: len(held) < 3)
    assert out.max_in_flight == 3  # all three were at the host before any answer
    assert value_of(out) == ["a-0", "b-0", "c-0"]  # answered in reverse, each to its caller


def test_many_concurrent_calls_and_large_answers(kernel: Make) -> None:
    # 500 calls in flight at once, and answers of 300 KB: replies cross fd 3's read
    # chunks (64 KiB) and arrive in any order.
    k = kernel(bindings={"search": lambda query, limit=3: [query] * limit})
    k.start(
        "const rs = await Promise.all(Array.from({length: 500}, (_, i) => tools.search('q' + i, {limit: 1})))\n"
        "const big = await tools.search('x'.repeat(1000), {limit: 300})\n"
        "return [rs.length, rs[499][0], big.length, big[299].length]"
    )
    out = k.pump(hold=lambda held: len(held) < 500 and len(k.outcome.of("CallRequest")) < 501)
    assert out.max_in_flight == 500
    assert value_of(out) == [500, "q499", 300, 1000]


def test_bindings_by_name_with_a_dash_and_unknown_ones(kernel: Make) -> None:
    specs = {"web-search": echo_spec([["q", "POSITIONAL_OR_KEYWORD", False]], "(q)")}
    k = kernel(bindings={"web-search": lambda q: q.upper()}, specs=specs)
    out = k.run(
        'const a = await tools["web-search"]("x")\nlet e1, e2\ntry { tools.nope } catch (e) { e1 = e.message }\n'
        "try { tools.x = 1 } catch (e) { e2 = e.message }\nreturn [a, e1, e2]"
    )
    a, missing, readonly = value_of(out)
    assert a == "X"
    assert missing == 'tools has no binding "nope"; it has: web-search'
    assert "read-only" in readonly


CONVENTION = {
    "f": echo_spec(
        [
            ["a", "POSITIONAL_OR_KEYWORD", False],
            ["b", "POSITIONAL_OR_KEYWORD", True],
            ["c", "KEYWORD_ONLY", True],
        ],
        "(a, b=2, *, c=3)",
    ),
    "g": echo_spec([["data", "POSITIONAL_ONLY", False]], "(data, /)"),
    "h": echo_spec(
        [["args", "VAR_POSITIONAL", False], ["kw", "VAR_KEYWORD", False]], "(*args, **kw)"
    ),
}


@pytest.mark.parametrize(
    ("call", "args", "kwargs"),
    [
        ("tools.f(1)", [1], {}),
        ("tools.f(1, 5)", [1, 5], {}),
        ("tools.f(1, {c: 4})", [1], {"c": 4}),
        ("tools.f({a: 1, c: 4})", [], {"a": 1, "c": 4}),
        ("tools.f({z: 1})", [{"z": 1}], {}),  # not all parameter names: positional
        ("tools.g({a: 1})", [{"a": 1}], {}),  # positional-only: not keyword-capable
        ("tools.g({data: 1})", [{"data": 1}], {}),
        ("tools.h(1, {x: 2})", [1, {"x": 2}], {}),  # **kw does not make any key one
        ("tools.f(1, {})", [1, {}], {}),  # an empty object is a value here
    ],
)
def test_the_calling_convention(
    kernel: Make, call: str, args: list[Any], kwargs: dict[str, Any]
) -> None:
    k = kernel(bindings={n: (lambda *a, **kw: None) for n in CONVENTION}, specs=CONVENTION)
    out = k.run(f"await {call}")
    assert out.status == "ok", out.events
    sent = out.of("CallRequest")[0]
    assert (sent.args, sent.kwargs) == (args, kwargs)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            "tools.f()",
            "tools.f() missing a required argument: 'a'; its signature is f(a, b=2, *, c=3)",
        ),
        (
            "tools.f(1, 2, 3)",
            "tools.f() too many positional arguments; its signature is f(a, b=2, *, c=3)",
        ),
        ("tools.f(1, 2, {c: 1}, 4)", "tools.f() too many positional arguments"),
        ("tools.g()", "tools.g() missing a required argument: 'data'"),
    ],
)
def test_arguments_that_do_not_fit_throw_at_the_call(kernel: Make, call: str, message: str) -> None:
    k = kernel(bindings={n: (lambda *a, **kw: None) for n in CONVENTION}, specs=CONVENTION)
    out = k.run(f"try {{ {call} }} catch (e) {{ return [e.name, e.message] }}")
    name, text = value_of(out)
    assert name == "TypeError" and text.startswith(message), text
    assert "CallRequest" not in out.kinds()


FIND_SCHEMA = {
    "type": "object",
    "properties": {"query": {"type": "string"}, "max-results": {"type": "integer", "minimum": 1}},
    "required": ["query"],
    "additionalProperties": False,
}
#: An MCP tool as kernelgate binds it: named parameters, and **kwargs for the properties
#: no Python name can spell; its inputSchema travels with it.
MCP_LIKE = {
    "find": {
        **echo_spec(
            [["query", "POSITIONAL_OR_KEYWORD", False], ["kwargs", "VAR_KEYWORD", False]],
            "(query: str, **kwargs)",
        ),
        "schema": FIND_SCHEMA,
    },
    "anything": echo_spec([["kwargs", "VAR_KEYWORD", False]], "(**kwargs)"),
}


@pytest.mark.parametrize(
    ("call", "args", "kwargs"),
    [
        ('tools.find({query: "x", "max-results": 3})', [], {"query": "x", "max-results": 3}),
        ('tools.find("x", {"max-results": 3})', ["x"], {"max-results": 3}),
        ("tools.anything({a: 1, 'b-c': 2})", [], {"a": 1, "b-c": 2}),
        ("tools.anything({})", [], {}),
    ],
)
def test_schema_properties_and_kwargs_only_bindings_take_keywords(
    kernel: Make, call: str, args: list[Any], kwargs: dict[str, Any]
) -> None:
    k = kernel(bindings={n: (lambda *a, **kw: None) for n in MCP_LIKE}, specs=MCP_LIKE)
    out = k.run(f"await {call}")
    assert out.status == "ok", out.events
    sent = out.of("CallRequest")[0]
    assert (sent.args, sent.kwargs) == (args, kwargs)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            'tools.find("x", {"max-results": 0})',
            "tools.find() argument max-results: must be at least 1, got 0",
        ),
        ("tools.find(5)", "tools.find() argument query: expected string, got number 5"),
        (
            "tools.find({query: 'x', 'max-results': 2.5})",
            "tools.find() argument max-results: expected integer, got number 2.5",
        ),
    ],
)
def test_a_bindings_schema_is_checked_before_the_call_leaves(
    kernel: Make, call: str, message: str
) -> None:
    k = kernel(bindings={n: (lambda *a, **kw: None) for n in MCP_LIKE}, specs=MCP_LIKE)
    out = k.run(f"try {{ {call} }} catch (e) {{ return [e.name, e.message] }}")
    name, text = value_of(out)
    assert name == "TypeError" and text == f"{message}; its signature is find(query: str, **kwargs)"
    assert "CallRequest" not in out.kinds()


@pytest.mark.parametrize(
    ("arg", "message"),
    [
        ("undefined", "tools.search() argument query: undefined is not JSON"),
        ("{a: undefined}", "tools.search() argument query.a: undefined is not JSON"),
        ("[1, () => 1]", "tools.search() argument query[1]: function is not JSON"),
        ("{s: Symbol('x')}", "tools.search() argument query.s: symbol is not JSON"),
        ("{n: 10n}", "tools.search() argument query.n: bigint 10n is not JSON"),
        ("[NaN]", "tools.search() argument query[0]: number NaN is not JSON"),
        (
            "{'a b': [Infinity]}",
            'tools.search() argument query["a b"][0]: number Infinity is not JSON',
        ),
        ("-0", "tools.search() argument query: number -0 is not lossless JSON"),
        ("new Map()", "tools.search() argument query: Map is not JSON"),
        ("{d: new Date(0)}", "tools.search() argument query.d: Date is not JSON"),
        ("[new (class Point {})()]", "tools.search() argument query[0]: Point is not JSON"),
        (
            "Promise.resolve(1)",
            "tools.search() argument query: Promise is not JSON (a promise: did you forget `await`?)",
        ),
        ("new Uint8Array(2)", "tools.search() argument query: Uint8Array is not JSON"),
        ("new Proxy({}, {})", "tools.search() argument query: Proxy is not JSON"),
        ("[1, , 3]", "tools.search() argument query[1]: an empty array slot (a hole) is not JSON"),
        ("'\\ud800'", "tools.search() argument query: string holds a lone surrogate"),
        (
            "(() => { const o = {}; o.self = o; return o })()",
            "tools.search() argument query.self: object contains itself (a cycle)",
        ),
    ],
)
def test_the_json_boundary_refuses_with_the_path(kernel: Make, arg: str, message: str) -> None:
    out = run(kernel, f"try {{ tools.search({arg}) }} catch (e) {{ return [e.name, e.message] }}")
    name, text = value_of(out)
    assert name == "TypeError"
    assert text.startswith(message), text
    assert "CallRequest" not in out.kinds()


def test_null_prototype_objects_and_nested_values_cross(kernel: Make) -> None:
    k = kernel(bindings={"search": lambda query, limit=3: query}, specs=None)
    out = k.run(
        "const o = Object.create(null); o.k = [1, 'é', {x: null}]\nreturn await tools.search(o)"
    )
    assert value_of(out) == {"k": [1, "é", {"x": None}]}


def test_deep_values_are_refused_not_crashed(kernel: Make) -> None:
    out = run(
        kernel,
        "let v = 1; for (let i = 0; i < 600; i++) v = [v]\ntry { tools.search(v) } catch (e) { return e.message }",
    )
    assert "nested deeper than 500 levels" in value_of(out)


# -- output --------------------------------------------------------------------------------


def test_output_is_in_order_with_calls_and_displays(kernel: Make) -> None:
    code = (
        'console.log("one")\n'
        'process.stdout.write("partial ")\n'
        'await tools.search("x", {limit: 1})\n'
        'console.error("two")\n'
        'console.warn("three")\n'
        'console.info("four"); console.debug("five")\n'
        "display({a: 1})\n"
        'process.stderr.write(Buffer.from("six\\n"))\n'
    )
    out = run(kernel, code)
    seen = [
        (type(e).__name__, getattr(e, "name", None), getattr(e, "text", None))
        for e in out.events
        if type(e).__name__ in ("Stream", "CallRequest", "DisplayData")
    ]
    assert seen == [
        ("Stream", "stdout", "one\n"),
        ("Stream", "stdout", "partial "),
        ("CallRequest", "search", None),
        ("Stream", "stderr", "two\n"),
        ("Stream", "stderr", "three\n"),
        ("Stream", "stdout", "four\n"),
        ("Stream", "stdout", "five\n"),
        ("DisplayData", None, None),
        ("Stream", "stderr", "six\n"),
    ]
    assert out.of("DisplayData")[0].data == {"text/plain": "{ a: 1 }"}


def test_rich_display_and_an_oversized_one(kernel: Make) -> None:
    code = (
        'display({[Symbol.for("Jupyter.display")]() { return {"text/html": "<b>hi</b>", "application/json": {"v": 1}} }})\n'
        'display({[Symbol.for("Jupyter.display")]() { return {"text/html": "y".repeat(100000)} }})\n'
    )
    out = run(kernel, code, max_frame_bytes=64 * 1024)
    first, second = out.of("DisplayData")
    assert first.data["text/html"] == "<b>hi</b>" and first.data["application/json"] == {"v": 1}
    assert second.data == {
        "text/plain": "[kernelgate: display output over max_frame_bytes=65536 not shown]"
    }
    assert out.protocol_error is None and out.status == "ok"


def test_output_past_max_output_bytes_is_all_sent_for_the_host_to_keep_head_and_tail(
    kernel: Make,
) -> None:
    out = run(
        kernel,
        'for (let i = 0; i < 1000; i++) console.log("0123456789")\nreturn 1',
        max_output_bytes=100,
    )
    # The host keeps head and tail and counts the middle exactly: it sees every character.
    assert out.text("stdout") == "0123456789\n" * 1000
    assert value_of(out) == 1


def test_lone_surrogates_in_output_are_escaped(kernel: Make) -> None:
    out = run(kernel, 'console.log("a\\ud800b 😀")')
    assert out.text("stdout") == "a\\ud800b 😀\n"


# -- the child's limits --------------------------------------------------------------------


def test_max_calls_is_a_tool_error_in_the_program(kernel: Make) -> None:
    code = (
        'await tools.search("a"); await tools.search("b")\n'
        'try { await tools.search("c") } catch (e) { return [e.name, e.ename, e.tool, e.message] }'
    )
    out = run(kernel, code, max_calls=2)
    name, ename, tool, message = value_of(out)
    assert (name, ename, tool) == ("ToolError", "LimitExceeded", "tools.search")
    assert "max_calls=2" in message
    assert len(out.of("CallRequest")) == 2  # the third never left the child


def test_call_arguments_are_budgeted_to_the_frame(kernel: Make) -> None:
    out = run(
        kernel,
        'try { tools.search("x".repeat(70000)) } catch (e) { return [e.name, e.message] }',
        max_frame_bytes=64 * 1024,
    )
    name, message = value_of(out)
    assert name == "RangeError"
    assert message == (
        "the arguments of tools.search() are over 61440 bytes as JSON (max_frame_bytes); pass less data per call"
    )
    assert out.protocol_error is None and "CallRequest" not in out.kinds()


def test_large_output_stays_under_the_frame_ceiling(kernel: Make) -> None:
    # 200 KiB of output in one write: sent as 64 KiB messages, never one frame over 128 KiB.
    out = run(
        kernel,
        'process.stdout.write("z".repeat(200000) + "\\n")',
        max_output_bytes=1 << 20,
        max_frame_bytes=128 * 1024,
    )
    assert out.protocol_error is None and out.status == "ok"
    assert out.text("stdout") == "z" * 200000 + "\n"


# -- what the program sees -----------------------------------------------------------------


def test_require_cwd_and_argv(kernel: Make) -> None:
    k = kernel()
    out = k.run(
        'const path = require("path")\nreturn [process.cwd(), path.join("a", "b"), process.argv.slice(1)]'
    )
    assert value_of(out) == [k.run_dir, "a/b", ["<program>"]]


MONKEYPATCHES = [
    "JSON.stringify = () => 'lie'; JSON.parse = () => ({})",
    "Object.prototype.toJSON = function () { return 'lie' }",
    "Array.prototype.push = () => { throw new Error('no push') }; Array.prototype.join = () => 'lie'",
    "Array.prototype[Symbol.iterator] = function* () {}",
    "Promise.prototype.then = function () { throw new Error('no then') }",
    "globalThis.Promise = function () { throw new Error('no Promise') }",
    "Buffer.from = () => { throw new Error('no Buffer') }; Buffer.byteLength = () => 0",
    "String.prototype.slice = () => 'lie'; String.prototype.indexOf = () => -1",
    "Object.keys = () => []; Object.getPrototypeOf = () => null",
    "Function.prototype.call = () => 'lie'; Function.prototype.apply = () => 'lie'",
    "Error.prepareStackTrace = () => 'lie'; Error.captureStackTrace = () => {}",
    "Date.prototype.toISOString = () => 'lie'; Date.now = () => -1",
    "require('fs').writeSync = () => 0",
    "process.reallyExit = () => {}; process.on = () => {}",
    # Setters and getters where the kernel builds or reads its own objects.
    "Object.defineProperty(Array.prototype, '0', {set(v) {}, get() { return 'lie' }, configurable: true})",
    "Object.defineProperty(Object.prototype, 'ename', {set(v) {}, get() { return 'lie' }, configurable: true})",
    "Object.defineProperty(Object.prototype, 'run_status', {get() { return 'exception' }, configurable: true})",
    "Object.defineProperty(Object.prototype, 'user_expressions', {set(v) { throw new Error('no') }, configurable: true})",
    # Every promise resolved with an object now waits for a `then` that never calls back.
    "Object.prototype.then = function () {}",
]


@pytest.mark.parametrize("patch", MONKEYPATCHES)
def test_a_program_that_replaces_builtins_still_gets_a_true_report(
    kernel: Make, patch: str
) -> None:
    out = run(
        kernel,
        f'{patch}\nconst r = await tools.search("q", {{limit: 2}})\nconsole.log("n", 2)\nreturn {{r, n: 2}}',
    )
    assert out.protocol_error is None, out.protocol_error
    if out.status == "exception":
        # The patch broke the program itself (its own `await` or console): a true report.
        assert out.of("ErrorOutput"), out.events
        return
    assert out.status == "ok", (out.events, out.stderr_raw)
    assert value_of(out) == {"r": ["q-0", "q-1"], "n": 2}
    assert out.of("CallRequest")[0].kwargs == {"limit": 2}


@pytest.mark.parametrize("patch", MONKEYPATCHES)
def test_a_program_that_replaces_builtins_then_throws_is_reported(kernel: Make, patch: str) -> None:
    out = run(kernel, f"{patch}\nthrow new TypeError('mine')")
    assert out.protocol_error is None
    assert out.status == "exception"
    assert (reply_of(out).ename, reply_of(out).evalue) == ("TypeError", "mine")


def test_a_non_blocking_fd_3_still_carries_everything(kernel: Make) -> None:
    # The host makes fd 3 blocking; one that is not (a launcher that set O_NONBLOCK) costs
    # latency, not correctness: writes wait out EAGAIN, reads poll.
    k = kernel(nonblocking=True)
    out = k.run(
        'const rs = await Promise.all([1, 2, 3].map(i => tools.search("q" + i, {limit: 1})))\n'
        'process.stdout.write("y".repeat(300000) + "\\n")\n'
        "return rs.flat()",
        max_output_bytes=1 << 20,
    )
    assert value_of(out) == ["q1-0", "q2-0", "q3-0"]
    assert out.text("stdout") == "y" * 300000 + "\n"


def test_running_out_of_heap_ends_the_process(kernel: Make) -> None:
    # V8's heap ceiling (the runtime's own flag) ends the process with no reply: the host
    # decides (worker_exit); V8 says why on fd 2.
    k = kernel(extra_args=("--max-old-space-size=32",))
    out = k.run("const keep = []\nfor (;;) keep.push(new Array(100000).fill({a: 1}))", timeout=60)
    assert out.reply is None and out.protocol_error is None
    code = k.wait_exit(30)
    k.pump(lambda o: False, timeout=5)
    assert code != 0
    assert b"heap out of memory" in out.stderr_raw or b"heap limit" in out.stderr_raw, (
        out.stderr_raw[-500:]
    )
