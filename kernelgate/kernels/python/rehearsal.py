"""A warm child's rehearsal of a run: what a pooled child does, booted, while it waits.

The zygote encodes the frames once (:func:`rehearsal_frames`, from its warm-up); each child
it forks goes once through the child's side of a run on throwaway objects
(:func:`rehearse`), so that the first run does not pay the page copies its code paths would.
"""

from __future__ import annotations

import asyncio
import builtins
import types
from typing import Any

from kernelgate.wire.connection import CHILD, HOST, Connection
from kernelgate.wire.events import (
    CallReply,
    CallRequest,
    ExecuteReply,
    ExecuteRequest,
    ExecuteResult,
    OpenBindings,
    Stream,
)
from kernelgate.wire.values import check_json

from .display import plain_repr
from .namespace import Binding, Namespace
from .program import bind_globals, compile_program, forget_source
from .report import with_usage

__all__ = ["rehearse", "rehearsal_frames", "rehearse_in_zygote", "ZYGOTE_REHEARSALS"]


# The common shapes of an agent's program: parsing and compiling them writes the reference
# counts of the AST node types and the compiler's objects they use, which the run's own
# compile then finds copied. Each line costs CPU in every warm child: the 11-line program
# this replaced cost 2.5-2.8 ms and ~265 page faults a child at load (this one ~2.0 ms,
# ~255), and 2 lines (~1.3 ms) left a 6-line program's compile in the run 0.1 ms slower
# (issue 23). Run as it is: no output, no side effect, a JSON value.
_REHEARSAL_PROGRAM = """
import json
def f(a, b=2):
    return [a * b + i for i in range(3) if i % 2 == 0]
data = {"a": [1.5, None, True], "b": (f(1), f"{len('x'):>4}", json.dumps([1])[0])}
results = [await tools.echo(n) for n in range(1)]
len(results)
"""
_REHEARSAL_SPEC = {"params": [["x", "POSITIONAL_OR_KEYWORD", False]], "signature": "(x)", "doc": ""}
_rehearsal_frames: list[bytes] | None = None
#: The rehearsal's program, compiled once: by the zygote's first rehearsal, before it forks.
_program: types.FunctionType | None = None
#: What a rehearsal compiles once the program is compiled: a short program through the
#: same path (``ast.parse``, the wrapping, ``compile``). What makes the run's own compile
#: fast is that path's pages, whatever the program: in each child the whole program's
#: compile cost 1.4 ms of CPU, this one 0.5 ms (~100 faults, mostly of pages the run's
#: compile would copy anyway). The run's critical path (the child's CPU from parked to
#: its program's first line / past its first call): 0.89-0.91 / 1.66-1.71 ms with the
#: whole program, 0.93-0.97 / 1.80-1.83 ms with this, 1.09-1.12 / 2.08-2.16 ms with no
#: compile (issue 23, root host, interleaved A/B).
_WARM_COMPILE = "x = len('a')\nx\n"


def rehearsal_frames() -> list[bytes]:
    """What a host sends in a run with one call (comm_open, execute_request, the call's
    reply), encoded once: the zygote makes them, its children only read them."""
    global _rehearsal_frames
    if _rehearsal_frames is None:
        host = Connection(HOST, session="rehearsal", compact=True)
        child = Connection(CHILD, session="rehearsal", compact=True)
        frames = [
            host.send(OpenBindings("rehearsal", {"tools": {"echo": _REHEARSAL_SPEC}})),
            host.send(ExecuteRequest(_REHEARSAL_PROGRAM, {"cwd": "/"})),
        ]
        for frame in frames:
            child.receive_data(frame)
            child.next_event()
        host.receive_data(child.send(CallRequest(0, "tools", "echo", [1], {})))
        host.next_event()
        frames.append(host.send(CallReply(0, True, [1, "a", {"b": None}])))
        _rehearsal_frames = frames
    return _rehearsal_frames


#: How many runs the zygote rehearses itself before it forks (:func:`rehearse_in_zygote`):
#: CPython 3.11+ rewrites a function's bytecode in place (quickening, then specializing
#: each instruction) only after it has run some times (8 before quickening), and every
#: call until then writes to the code object. Rehearsed a dozen times in the zygote, the
#: child's side of a run is already specialized there, and no child copies those pages
#: to do it again: -0.5 ms of rehearsal and -0.15 ms of event loop per warm child, ~90
#: page faults fewer (issue 23, root host, interleaved A/B).
ZYGOTE_REHEARSALS = 12


def rehearse_in_zygote(times: int = ZYGOTE_REHEARSALS) -> None:
    """In the zygote, before its first fork (and after the code is rehomed: that replaces
    code objects, so it would throw their specialized bytecode away): rehearse ``times``
    runs, each on an event loop of its own, closed after it. What the rehearsal makes
    dies with it (nothing reaches fd 1, 2 or 3: the frames are only encoded); what stays
    is the specialized bytecode of the code paths every child and every run go through."""
    for _ in range(times):
        loop = asyncio.new_event_loop()
        try:
            rehearse(loop)
        finally:
            loop.close()


def _compiled(code: str) -> types.FunctionType:
    """The rehearsal's program ``code`` compiled, once per zygote; each later rehearsal
    compiles :data:`_WARM_COMPILE` instead."""
    global _program
    if _program is None:
        _program = compile_program(code)
    else:
        compile_program(_WARM_COMPILE)
    return _program


def rehearse(loop: asyncio.AbstractEventLoop) -> None:
    """In a warm child, booted, before its program arrives: go once through the child's
    side of a run, on throwaway objects, on the run's event loop ``loop``.

    A forked child shares the zygote's memory until it writes to it, and merely using an
    object writes its reference count: the first run of every code path pays a page
    copy for each page it touches. This pays them before the program arrives. Nothing
    here outlives the call. What :meth:`.runner.Child.prepare` makes right after (the
    output streams, the builtins snapshot, the globals, the loop current and watching
    fd 3) is not rehearsed: preparing it pays the same page copies, once.
    """
    opening, executing, replying = rehearsal_frames()
    peer = Connection(CHILD, session="rehearsal", compact=True)
    peer.receive_data(opening + executing)
    opened, request = peer.next_event(), peer.next_event()
    assert type(opened) is OpenBindings and type(request) is ExecuteRequest

    def start(*_call: Any) -> asyncio.Future[Any]:
        fut = loop.create_future()
        loop.call_soon(fut.set_result, getattr(reply, "value", None))
        return fut

    echo = Binding("tools", "echo", _REHEARSAL_SPEC, start, 1 << 20)
    namespace = Namespace("tools", {"echo": echo})
    fn = bind_globals(_compiled(request.code), {"tools": namespace, "__builtins__": builtins})
    peer.send(Stream("stdout", "rehearsal\n"))
    peer.send(CallRequest(peer.next_call_id, "tools", "echo", [1], {}))
    peer.receive_data(replying)
    reply = peer.next_event()

    async def one_run() -> Any:
        await namespace.echo(1)
        return await fn()

    outcome = loop.run_until_complete(one_run())
    check_json(outcome[1], "value", 1 << 20)
    peer.send(ExecuteResult({"application/json": 1, "text/plain": plain_repr(1)}))
    peer.send(with_usage(ExecuteReply("ok")))
    forget_source()
