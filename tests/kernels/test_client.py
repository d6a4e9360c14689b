"""kernels/python/client.py in-process: the child's end of fd 3 over a real socketpair, with
a host-side ``Connection`` on the other end (no gateway, no child process).

The client ends its process when fd 3 closes or cannot be decoded (there is nobody left to
report to), so every test keeps the host's end open and sends only valid frames.
"""

from __future__ import annotations

import asyncio
import os
import select
import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from kernelgate.kernels.python.client import CallClient
from kernelgate.kernels.python.namespace import ToolError
from kernelgate.kernels.python.report import fallback_frame
from kernelgate.kernels.python.streams import OutputLedger, OutputStream
from kernelgate.wire.connection import HOST, Connection
from kernelgate.wire.events import (
    CallReply,
    CallRequest,
    ExecuteRequest,
    OpenBindings,
    Stream,
)

SPEC = {"params": [["x", "POSITIONAL_OR_KEYWORD", False]], "signature": "(x)", "doc": ""}


class Pair:
    """A CallClient on one end of a socketpair, the host's Connection on the other."""

    def __init__(self) -> None:
        host, child = socket.socketpair()
        self.host = host
        self.host.settimeout(10)
        self.fd = os.dup(child.fileno())
        child.close()
        self.client = CallClient(fallback_frame(), fd=self.fd)
        self.conn = Connection(HOST, session="test")
        self.buffer: list[Any] = []

    def start(self, options: dict[str, Any] | None = None) -> ExecuteRequest:
        """The host opens the bindings and sends the program; the client reads them."""
        self.host.sendall(
            self.conn.send(OpenBindings("bindings", {"tools": {"echo": SPEC}}))
            + self.conn.send(ExecuteRequest("1", options or {}))
        )
        return self.client.read_until_request()

    def next_event(self) -> Any:
        """The next message the client sent (blocking, bounded by the socket's timeout)."""
        while True:
            event = self.conn.next_event()
            if event is not None:
                return event
            data = self.host.recv(1 << 16)
            assert data, "the client closed fd 3"
            self.conn.receive_data(data)

    def pending_bytes(self) -> bool:
        return bool(select.select([self.host], [], [], 0)[0])

    def reply(self, event: CallReply) -> None:
        self.host.sendall(self.conn.send(event))

    def close(self) -> None:
        os.close(self.fd)
        self.host.close()


@pytest.fixture
def pair(no_fd_leak) -> Iterator[Pair]:
    p = Pair()
    yield p
    p.close()


def test_the_client_reads_the_bindings_then_the_request(pair):
    request = pair.start({"max_calls": 3})
    assert type(request) is ExecuteRequest and request.options == {"max_calls": 3}
    assert pair.client.namespaces == {"tools": {"echo": SPEC}}


def run_calls(pair: Pair, make_calls: Any, answer: Any, on_stream: Any = None) -> Any:
    """Run ``make_calls()`` on a loop that reads fd 3, answering each call with
    ``answer(request)`` from a host thread (which hands other stream text to
    ``on_stream(text)``)."""

    def host() -> None:
        while True:
            event = pair.next_event()
            if event is None or (type(event) is Stream and event.text == "stop"):
                return
            if type(event) is CallRequest:
                pair.reply(answer(event))
            elif type(event) is Stream and on_stream is not None:
                on_stream(event.text)

    thread = threading.Thread(target=host)
    thread.start()

    async def main() -> Any:
        loop = asyncio.get_running_loop()
        pair.client.loop = loop
        loop.add_reader(pair.fd, pair.client.on_readable)
        try:
            return await make_calls()
        finally:
            loop.remove_reader(pair.fd)
            pair.client.send(Stream("stdout", "stop"))

    try:
        return asyncio.run(main())
    finally:
        thread.join(10)


def test_a_call_goes_out_as_the_next_id_and_its_reply_resolves_it(pair):
    pair.start()
    seen: list[CallRequest] = []

    def answer(req: CallRequest) -> CallReply:
        seen.append(req)
        return CallReply(req.call_id, True, {"echo": req.args})

    async def calls() -> list[Any]:
        return list(
            await asyncio.gather(*[pair.client.call("tools", "echo", [i], {}) for i in range(5)])
        )

    got = run_calls(pair, calls, answer)
    assert got == [{"echo": [i]} for i in range(5)]
    assert [r.call_id for r in seen] == [0, 1, 2, 3, 4]
    assert [(r.namespace, r.name, r.args) for r in seen] == [
        ("tools", "echo", [i]) for i in range(5)
    ]
    assert pair.client.pending == {}


def test_an_error_reply_is_a_tool_error_naming_the_binding(pair):
    pair.start()

    async def calls() -> ToolError:
        try:
            await pair.client.call("tools", "echo", [1], {})
        except ToolError as exc:
            return exc
        raise AssertionError("no ToolError")

    exc = run_calls(
        pair, calls, lambda req: CallReply(req.call_id, False, ename="KeyError", evalue="'k'")
    )
    assert (exc.tool, exc.ename) == ("tools.echo", "KeyError")
    assert str(exc) == "tools.echo failed: KeyError: 'k'"


def test_calls_past_max_calls_fail_in_the_child_and_are_never_sent(pair):
    pair.start()
    pair.client.max_calls = 2

    async def calls() -> list[Any]:
        out: list[Any] = []
        for i in range(4):
            try:
                out.append(await pair.client.call("tools", "echo", [i], {}))
            except ToolError as exc:
                out.append(exc.ename)
                assert "max_calls=2" in str(exc) and "Limits.max_calls" in str(exc)
        return out

    got = run_calls(pair, calls, lambda req: CallReply(req.call_id, True, req.args[0]))
    assert got == [0, 1, "LimitExceeded", "LimitExceeded"]
    assert pair.client.calls == 2
    assert not pair.pending_bytes()  # nothing more was written


def test_a_call_outside_an_event_loop_says_how_to_run_it(pair):
    pair.start()
    with pytest.raises(RuntimeError, match=r"tools.echo\(\) must run in an event loop: await it"):
        pair.client.call("tools", "echo", [1], {})
    assert not pair.pending_bytes()


def test_output_is_flushed_before_the_call_leaves(pair):
    pair.start()
    ledger = OutputLedger(10_000)
    out = OutputStream("stdout", lambda n, t: pair.client.send(Stream(n, t)), ledger)
    pair.client.streams = (out,)
    order: list[str] = []

    def answer(req: CallRequest) -> CallReply:
        order.append("call")
        return CallReply(req.call_id, True, 1)

    async def calls() -> Any:
        out.write("no newline, still buffered")
        return await pair.client.call("tools", "echo", [1], {})

    assert run_calls(pair, calls, answer, on_stream=lambda t: order.append(f"stream:{t}")) == 1
    assert order == ["stream:no newline, still buffered", "call"]


def test_a_thread_s_own_loop_reads_its_reply_while_the_program_s_loop_is_blocked(pair):
    pair.start()

    def answer(req: CallRequest) -> CallReply:
        return CallReply(req.call_id, True, f"answer {req.args[0]}")

    async def calls() -> list[Any]:
        got: list[Any] = []

        async def one() -> Any:
            return await pair.client.call("tools", "echo", ["from thread"], {})

        def in_thread() -> None:
            got.append(asyncio.run(one()))

        thread = threading.Thread(target=in_thread)
        thread.start()
        thread.join(10)  # blocks the program's loop: only the thread's loop can read fd 3
        got.append(await pair.client.call("tools", "echo", ["from loop"], {}))
        return got

    assert run_calls(pair, calls, answer) == ["answer from thread", "answer from loop"]


def test_frames_from_many_threads_arrive_whole(pair):
    pair.start()
    text = "y" * 50_000  # bigger than a socket buffer: writes are partial

    def sender(n: int) -> None:
        for _ in range(20):
            pair.client.send(Stream("stdout", f"{n}:{text}"))

    received: list[str] = []

    def host() -> None:
        while len(received) < 8 * 20:
            event = pair.next_event()
            assert type(event) is Stream
            received.append(event.text)

    reader = threading.Thread(target=host)
    reader.start()
    senders = [threading.Thread(target=sender, args=(n,)) for n in range(8)]
    for t in senders:
        t.start()
    for t in senders:
        t.join(30)
    reader.join(30)
    assert sorted(received) == sorted(f"{n}:{text}" for n in range(8) for _ in range(20))
