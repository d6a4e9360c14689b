"""kernels/python/namespace.py in-process: what a program sees of the host (namespaces of
bindings, the calls they make, ``ToolError``), with a stand-in for fd 3."""

from __future__ import annotations

import asyncio
import gc
import pickle
import warnings
from typing import Any

import pytest

from kernelgate.kernels.python.namespace import Binding, BindingCall, Namespace, ToolError

SPECS: dict[str, dict[str, Any]] = {
    "add": {
        "params": [["a", "POSITIONAL_OR_KEYWORD", False], ["b", "POSITIONAL_OR_KEYWORD", False]],
        "signature": "(a: int, b: int) -> int",
        "doc": "Add two numbers.",
    },
    "search": {
        "params": [
            ["query", "POSITIONAL_ONLY", False],
            ["limit", "KEYWORD_ONLY", True],
        ],
        "signature": "(query, /, *, limit=5)",
        "doc": "",
    },
    "echo": {
        "params": [["args", "VAR_POSITIONAL", False], ["kwargs", "VAR_KEYWORD", False]],
        "signature": "(*args, **kwargs)",
        "doc": "",
    },
}


class Host:
    """Stands for the call client: records each call when it is sent, answers at once."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, str, list[Any], dict[str, Any]]] = []
        self.error: ToolError | None = None

    def __call__(
        self,
        namespace: str,
        name: str,
        args: list[Any],
        kwargs: dict[str, Any],
        scheduled: bool = False,
    ) -> asyncio.Future[Any]:
        self.sent.append((namespace, name, args, kwargs))
        fut = asyncio.get_running_loop().create_future()
        if self.error is not None:
            fut.set_exception(self.error)
        else:
            fut.set_result({"args": args, "kwargs": kwargs})
        return fut


def tools(host: Host, max_arg_bytes: int = 10_000) -> Namespace:
    return Namespace(
        "tools",
        {name: Binding("tools", name, spec, host, max_arg_bytes) for name, spec in SPECS.items()},
    )


# -- arguments are checked before anything leaves the child ------------------------------------


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda t: t.add(1), "tools.add() missing a required argument: 'b'"),
        (lambda t: t.add(1, 2, 3), "tools.add() too many positional arguments"),
        (lambda t: t.add(1, 2, c=3), "tools.add() got an unexpected keyword argument 'c'"),
        (lambda t: t.search(query="q"), "tools.search() 'query' parameter is positional only"),
        (lambda t: t.search("q", 5), "tools.search() too many positional arguments"),
    ],
    ids=["missing", "too-many", "unexpected", "positional-only", "keyword-only"],
)
def test_a_call_that_does_not_fit_the_signature_is_a_type_error(call, message):
    host = Host()
    with pytest.raises(TypeError) as info:
        call(tools(host))
    text = str(info.value)
    assert text.startswith(message), text
    name = text.split("()")[0].split(".")[1]
    assert text.endswith(f"; its signature is {name}{SPECS[name]['signature']}")
    assert host.sent == []  # nothing left the child
    assert info.value.__cause__ is None and info.value.__suppress_context__


def test_arguments_that_are_not_json_are_a_type_error_naming_where():
    host = Host()
    t = tools(host)
    with pytest.raises(TypeError) as info:
        t.echo(1, {"k": [1, {2, 3}]})
    assert str(info.value).startswith("tools.echo() argument args[1]['k'][1]: set is not JSON")
    assert "binding arguments must be JSON" in str(info.value)
    with pytest.raises(TypeError, match=r"argument kwargs\['x'\]: float nan is not JSON"):
        t.echo(x=float("nan"))
    with pytest.raises(TypeError, match="surrogate"):
        t.echo("bad \udc80")
    assert host.sent == []


def test_arguments_over_the_frame_budget_are_a_value_error():
    host = Host()
    t = tools(host, max_arg_bytes=1000)
    t.echo("x" * 990).close()  # within the budget: a call (closed, never made)
    with pytest.raises(ValueError) as info:
        t.echo("x" * 600, y="x" * 600)  # each fits, together they do not
    assert "over 1000 bytes as JSON (max_frame_bytes)" in str(info.value)
    assert host.sent == []


def test_tuples_are_accepted_as_lists():
    host = Host()
    got = asyncio.run(tools(host).echo((1, 2), k=(3,)))
    assert got == {"args": [(1, 2)], "kwargs": {"k": (3,)}}  # as given; JSON makes them lists


# -- the call is a real coroutine --------------------------------------------------------------


def test_nothing_is_sent_until_the_call_runs():
    host = Host()
    t = tools(host)
    call = t.add(1, 2)
    assert isinstance(call, BindingCall) and asyncio.iscoroutine(call)
    assert host.sent == [] and "not sent" in repr(call)
    assert asyncio.run(call_it(call)) == {"args": [1, 2], "kwargs": {}}
    assert host.sent == [("tools", "add", [1, 2], {})]
    assert "sent" in repr(call) and "not sent" not in repr(call)


async def call_it(call: Any) -> Any:
    return await call


def test_tasks_gather_and_wait_for_drive_the_call():
    host = Host()
    t = tools(host)

    async def main() -> list[Any]:
        task = asyncio.create_task(t.add(1, 2))
        both = await asyncio.gather(t.add(3, 4), t.echo(k=1))
        waited = await asyncio.wait_for(t.add(5, 6), 5)
        return [await task, *both, waited]

    got = asyncio.run(main())
    assert [g["args"] for g in got] == [[1, 2], [3, 4], [], [5, 6]]
    assert len(host.sent) == 4


def test_a_call_awaited_twice_cannot_be_reused():
    host = Host()
    call = tools(host).add(1, 2)

    async def main() -> None:
        await call
        with pytest.raises(RuntimeError, match=r"cannot reuse already awaited call of tools\.add"):
            await call

    asyncio.run(main())
    assert len(host.sent) == 1


def test_a_task_cancelled_before_it_ran_sends_nothing():
    host = Host()

    async def main() -> None:
        task = asyncio.create_task(tools(host).add(1, 2))
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert host.sent == []


def test_a_call_dropped_unawaited_warns_and_is_never_made():
    host = Host()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tools(host).add(1, 2)
        gc.collect()
    messages = [str(w.message) for w in caught if w.category is RuntimeWarning]
    assert messages == [
        "binding call tools.add() was never awaited, so it was not made "
        "(write `await tools.add(...)`)"
    ]
    assert host.sent == []


def test_a_call_closed_unstarted_is_silent():
    host = Host()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        call = tools(host).add(1, 2)
        call.close()
        del call
        gc.collect()
    assert [w for w in caught if w.category is RuntimeWarning] == []
    assert host.sent == []


def test_a_host_error_is_a_tool_error_in_the_program():
    host = Host()
    host.error = ToolError("no such file", tool="tools.add", ename="FileNotFoundError")

    async def main() -> ToolError:
        try:
            await tools(host).add(1, 2)
        except ToolError as exc:
            return exc
        raise AssertionError("no ToolError")

    exc = asyncio.run(main())
    assert exc.tool == "tools.add" and exc.ename == "FileNotFoundError"
    assert str(exc) == "tools.add failed: FileNotFoundError: no such file"


# -- ToolError and Namespace --------------------------------------------------------------------


def test_tool_error_reads_well_and_survives_pickling():
    exc = ToolError("denied", tool="db.drop", ename="PolicyDenied")
    assert str(exc) == "db.drop failed: PolicyDenied: denied"
    assert str(ToolError("plain")) == "plain"
    assert ToolError.__module__ == "builtins"  # tracebacks show just ToolError
    again = pickle.loads(pickle.dumps(exc))
    assert (str(again), again.tool, again.ename) == (str(exc), "db.drop", "PolicyDenied")


def test_a_namespace_lists_its_bindings_and_refuses_what_it_lacks():
    t = tools(Host())
    assert t.add is t["add"]
    assert "add" in t and "nope" not in t
    assert list(t) == dir(t) == ["add", "echo", "search"]
    assert repr(t) == "<namespace tools: add, echo, search>"
    with pytest.raises(
        AttributeError, match="tools has no binding 'nope'; it has: add, echo, search"
    ):
        t.nope  # noqa: B018
    with pytest.raises(KeyError, match="tools has no binding 'nope'"):
        t["nope"]
    with pytest.raises(KeyError):
        t[["unhashable"]]  # type: ignore[index]
    with pytest.raises(AttributeError, match="tools is read-only"):
        t.add = None  # type: ignore[misc,assignment]


def test_a_binding_shows_its_host_signature_and_doc():
    b = tools(Host()).add
    assert repr(b) == "<binding tools.add(a: int, b: int) -> int>"
    assert b.__doc__ == "Add two numbers."
    assert str(b.__signature__) == "(a, b)"
    search = tools(Host()).search
    assert str(search.__signature__) == "(query, /, *, limit=...)"  # defaults stay on the host


def test_names_that_are_not_identifiers_are_reached_by_item():
    spec = {"params": [], "signature": "()", "doc": ""}
    host = Host()
    ns = Namespace("tools", {"do-it": Binding("tools", "do-it", spec, host, 1000)})
    asyncio.run(call_it(ns["do-it"]()))
    assert host.sent == [("tools", "do-it", [], {})]


def test_positional_calls_bind_as_the_signature_does():
    # A call with positional arguments only, to a binding whose parameters may all be
    # passed by position, is bound without Signature.bind: the same names and refusals.
    spec = {
        "params": [["a", "POSITIONAL_ONLY", False], ["b", "POSITIONAL_OR_KEYWORD", True]],
        "signature": "(a, /, b=2)",
    }
    host = Host()
    opt = Namespace("tools", {"opt": Binding("tools", "opt", spec, host, 1000)})
    with pytest.raises(TypeError, match=r"^tools\.opt\(\) argument b: set is not JSON"):
        opt.opt(1, {2})
    with pytest.raises(TypeError, match=r"^tools\.opt\(\) missing a required argument: 'a'"):
        opt.opt()
    with pytest.raises(TypeError, match=r"^tools\.opt\(\) too many positional arguments"):
        opt.opt(1, 2, 3)
    with pytest.raises(ValueError, match="over 1000 bytes"):
        opt.opt("x" * 600, "y" * 600)
    assert asyncio.run(call_it(opt.opt(1))) == {"args": [1], "kwargs": {}}
    assert asyncio.run(call_it(opt.opt(1, b=3))) == {"args": [1], "kwargs": {"b": 3}}
    assert host.sent == [("tools", "opt", [1], {}), ("tools", "opt", [1], {"b": 3})]


def test_a_call_a_task_ran_cannot_be_run_again():
    host = Host()
    call = tools(host).add(1, 2)

    async def main() -> None:
        assert await asyncio.create_task(call) == {"args": [1, 2], "kwargs": {}}
        with pytest.raises(RuntimeError, match=r"cannot reuse already awaited call"):
            call.send(None)
        with pytest.raises(ValueError, match="thrown"):
            call.throw(ValueError("thrown"))
        call.close()

    asyncio.run(main())
    assert len(host.sent) == 1


class SlowHost(Host):
    """Answers each call when the test says (``answer``), as fd 3 would, later."""

    def __init__(self) -> None:
        super().__init__()
        self.futures: list[asyncio.Future[Any]] = []
        self.scheduled: list[bool] = []

    def __call__(
        self,
        namespace: str,
        name: str,
        args: list[Any],
        kwargs: dict[str, Any],
        scheduled: bool = False,
    ) -> asyncio.Future[Any]:
        self.sent.append((namespace, name, args, kwargs))
        self.scheduled.append(scheduled)
        fut = asyncio.get_running_loop().create_future()
        self.futures.append(fut)
        return fut

    def answer(self, i: int, value: Any = None, error: BaseException | None = None) -> None:
        if error is not None:
            self.futures[i].set_exception(error)
        else:
            self.futures[i].set_result(value)


def test_gather_takes_calls_as_futures_without_a_task_each():
    # In a running loop a call not yet run is a future to asyncio (gather, wait_for,
    # shield, ensure_future need no Task per call); sent the moment asyncio takes it.
    host = SlowHost()
    t = tools(host)

    async def main() -> list[Any]:
        calls = [t.add(i, 1) for i in range(3)]
        assert host.sent == []
        gathering = asyncio.gather(*calls)
        assert len(host.sent) == 3 and host.scheduled == [True] * 3
        assert len(asyncio.all_tasks()) == 1  # main alone: no task per call
        for i in (2, 0, 1):
            host.answer(i, i * 10)
        return await gathering

    assert asyncio.run(main()) == [0, 10, 20]
    unstarted = tools(Host()).add(1, 2)
    assert not asyncio.isfuture(unstarted) and asyncio.iscoroutine(unstarted)  # no loop runs
    unstarted.close()


def test_a_gathered_call_is_its_answer_s_future_and_nothing_else_changes():
    host = SlowHost()
    t = tools(host)

    async def main() -> None:
        # a program's call never turns into a future: ensure_future gives a Task, as ever
        call = t.add(1, 2)
        with pytest.raises(AttributeError, match="did you forget `await`"):
            call.result()
        task = asyncio.ensure_future(call)
        assert isinstance(task, asyncio.Task) and not asyncio.isfuture(call)
        done, _ = await asyncio.wait([task, asyncio.ensure_future(t.add(2, 2))], timeout=0)
        assert done == set()
        host.answer(0, 3)
        host.answer(1, 4)
        assert await task == 3
        # a gathered one is the future of its answer (its own methods), awaited again
        a = t.add(5, 5)
        gathering = asyncio.gather(a)
        assert not a.done() and a.get_loop() is asyncio.get_running_loop()
        host.answer(2, 10)
        assert await gathering == [10] and a.result() == 10 and await a == 10
        # a host error is the call's exception, through gather too
        err = t.add(0, 0)
        gathering = asyncio.gather(err, return_exceptions=True)
        host.answer(3, error=ToolError("boom", tool="tools.add", ename="ValueError"))
        (got,) = await gathering
        assert isinstance(got, ToolError) and err.exception() is got
        # cancelling a gather cancels its calls' futures (a late answer goes nowhere)
        c1, c2 = t.add(1, 0), t.add(2, 0)
        g = asyncio.gather(c1, c2)
        g.cancel()
        with pytest.raises(asyncio.CancelledError):
            await g
        assert c1.cancelled() and c2.cancelled()
        assert host.scheduled == [False, False, True, True, True, True]

    asyncio.run(main())
    assert len(host.sent) == 6


def test_a_call_that_cannot_start_in_a_gather_is_that_call_s_error():
    class Full(Host):
        def __call__(self, *call: Any) -> asyncio.Future[Any]:
            raise ToolError("max_calls=0 reached", tool="tools.add", ename="LimitExceeded")

    t = tools(Full())

    async def main() -> list[Any]:
        return await asyncio.gather(t.add(1, 2), t.add(3, 4), return_exceptions=True)

    got = asyncio.run(main())
    assert [type(g) for g in got] == [ToolError, ToolError]
    assert got[0].ename == "LimitExceeded"
