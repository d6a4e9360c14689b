"""The Node kernel as a wire peer: what it does when the host breaks the protocol, and what
the host does when the program writes fd 3 itself.

A host that sends garbage, a message out of order, a reply to a call that is not waiting
or a frame over the child's ceiling gets the child's pre-encoded ``InternalError``
``execute_reply`` (as from the Python child) and the child exits 70; a host that goes
away gets a child that exits at once (status 1), with nothing left behind. A program that
writes fd 3 itself is refused by the host's ``Connection`` (the run would end
``protocol``).
"""

from __future__ import annotations

import json
import socket
from collections.abc import Callable

import pytest

from kernelgate.kernels.node import KERNEL_DIR
from kernelgate.wire import TRANSITIONS

from .nodechild import NODE, KernelRun, Outcome, needs_node

Make = Callable[..., KernelRun]

pytestmark = [pytest.mark.timeout(60), needs_node]


def assert_gave_up(k: KernelRun, out: Outcome, says: str) -> None:
    """The child ended with its pre-encoded InternalError reply, exit status 70, and
    said why on its stderr."""
    assert out.reply is not None, (out.events, out.stderr_raw)
    assert (out.reply.run_status, out.reply.ename) == ("exception", "InternalError")
    assert out.protocol_error is None  # the reply itself is a message the host accepts
    assert k.wait_exit() == 70
    k.pump(lambda o: False, timeout=5)  # the rest of its stderr, to EOF
    assert says in out.stderr_raw.decode(), out.stderr_raw


def test_garbage_before_the_request(kernel: Make) -> None:
    k = kernel()
    k.send_bytes(b"\x00\xffnot json at all\n")
    out = k.pump()
    assert_gave_up(k, out, "frame is not valid UTF-8 JSON")


@pytest.mark.parametrize(
    ("frame", "says"),
    [
        (b"[1, 2]\n", "message must be a JSON object"),
        (
            b'{"header": {}, "parent_header": {}, "metadata": {}, "content": {}}\n',
            "has no field 'msg_type'",
        ),
        (
            b'{"header": {"msg_type": "kernel_info_request"}, "parent_header": {}, "metadata": {}, "content": {}}\n',
            "unexpected message type 'kernel_info_request' from the host",
        ),
        (
            b'{"header": {"msg_type": "comm_open"}, "parent_header": {}, "metadata": {}, '
            b'"content": {"comm_id": "x", "target_name": "other", "data": {}}}\n',
            "comm_open for unknown target",
        ),
    ],
)
def test_malformed_messages(kernel: Make, frame: bytes, says: str) -> None:
    k = kernel()
    k.send_bytes(frame)
    assert_gave_up(k, k.pump(), says)


def test_a_request_before_the_bindings_is_out_of_order(kernel: Make) -> None:
    k = kernel()
    # The host's own Connection will not send it out of order: write the frame by hand.
    frame = {
        "header": {
            "msg_id": "h-1",
            "msg_type": "execute_request",
            "session": "h",
            "username": "kernelgate",
            "date": "2026-01-01T00:00:00.000000Z",
            "version": "5.3",
        },
        "parent_header": {},
        "metadata": {},
        "content": {"code": "return 1"},
    }
    k.send_bytes(json.dumps(frame).encode() + b"\n")
    out = k.pump()
    assert_gave_up(
        k,
        out,
        "the host sent execute_request in state IDLE (nothing sent yet), where it may send only comm_open",
    )


def test_a_second_request_mid_run(kernel: Make) -> None:
    k = kernel()
    k.start('await tools.search("x")\nreturn 1')
    k.pump(lambda o: bool(o.of("CallRequest")), hold=lambda held: True)
    frame = {
        "header": {"msg_type": "execute_request"},
        "parent_header": {},
        "metadata": {},
        "content": {"code": "return 2"},
    }
    k.send_bytes(json.dumps(frame).encode() + b"\n")
    assert_gave_up(k, k.pump(), "the host sent execute_request in state EXECUTING")


def test_a_reply_to_a_call_that_is_not_waiting(kernel: Make) -> None:
    k = kernel()
    k.start('await tools.search("x")\nreturn 1')
    k.pump(lambda o: bool(o.of("CallRequest")), hold=lambda held: True)
    forged = {
        "header": {"msg_type": "comm_msg"},
        "parent_header": {},
        "metadata": {},
        "content": {
            "comm_id": "bindings-node-test",
            "data": {"method": "reply", "id": 7, "ok": True, "value": 1},
        },
    }
    k.send_bytes(json.dumps(forged).encode() + b"\n")
    assert_gave_up(k, k.pump(), "reply to call 7, which is not waiting")


def test_a_frame_over_the_childs_ceiling(kernel: Make) -> None:
    # The child's ceiling on host frames is 1 GiB (the host is trusted); lowered here.
    k = kernel(kernel_args=("--max-host-frame-bytes=4096",))
    k.open_bindings()
    k.send_bytes(b'{"header": "' + b"x" * 5000)
    assert_gave_up(k, k.pump(), "over max_frame_bytes=4096")


def test_the_host_going_away_before_the_request(kernel: Make) -> None:
    k = kernel()
    k.open_bindings()
    k.sock.shutdown(socket.SHUT_WR)
    assert k.wait_exit() == 1
    out = k.pump()
    assert out.reply is None and out.events == []


def test_the_host_going_away_mid_run(kernel: Make) -> None:
    k = kernel()
    k.start('console.log("started")\nawait tools.search("x")\nconsole.log("never")')
    k.pump(lambda o: bool(o.of("CallRequest")), hold=lambda held: True)
    k.sock.shutdown(socket.SHUT_WR)  # EOF for the child, with a call in flight
    assert k.wait_exit() == 1
    out = k.pump()
    assert out.reply is None and "never" not in out.text("stdout")


@pytest.mark.parametrize(
    ("code", "says"),
    [
        (
            'require("fs").writeSync(3, "garbage\\n")\nawait tools.search("x")',
            "frame is not valid UTF-8 JSON",
        ),
        (
            'require("fs").writeSync(3, JSON.stringify({header: {msg_type: "comm_open"}, parent_header: {}, '
            'metadata: {}, content: {}}) + "\\n")',
            "unexpected message type 'comm_open' from the child",
        ),
        (
            'require("fs").writeSync(3, "{\\"unterminated\\": " + "1".repeat(70000))\nawait new Promise(r => setTimeout(r, 5000))',
            "over max_frame_bytes=65536",
        ),
    ],
)
def test_a_program_writing_fd_3_is_refused_by_the_host(kernel: Make, code: str, says: str) -> None:
    k = kernel(max_frame_bytes=64 * 1024)
    out = k.run(code, max_frame_bytes=64 * 1024)
    assert out.protocol_error is not None and says in out.protocol_error, (
        out.protocol_error,
        out.events,
    )
    assert out.reply is None


def test_the_childs_tables_are_the_wires() -> None:
    """kernelgate/kernels/node/state.js holds kernelgate.wire.TRANSITIONS, by wire name."""
    import subprocess

    assert NODE is not None
    text = subprocess.run(
        [NODE, "-e", "process.stdout.write(JSON.stringify(require('./state.js').TRANSITIONS))"],
        cwd=KERNEL_DIR,
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout
    ours = json.loads(text)

    def key(k: object) -> str:
        if isinstance(k, tuple):
            return f"{k[0].wire_name}@{k[1]}"
        return str(k.wire_name)  # type: ignore[attr-defined]

    wire = {
        role: {state: {key(k): v for k, v in row.items()} for state, row in table.items()}
        for role, table in TRANSITIONS.items()
    }
    assert ours == wire
