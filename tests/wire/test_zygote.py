"""The zygote's codec (kernelgate/wire/zygote.py): events valid by construction, every
message round-trips, anything else is a ZygoteProtocolError naming the field; and a real
zygote answers a request it cannot read with ForkFailed and goes on serving."""

from __future__ import annotations

import asyncio
import json
import os
import select
import shutil
import socket
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernelgate.wire import LocalProtocolError, RemoteProtocolError
from kernelgate.wire.zygote import (
    Exited,
    Forked,
    ForkFailed,
    ForkRequest,
    ZygoteProtocolError,
    decode_reply,
    decode_request,
    encode,
)

REQUEST = ForkRequest(
    3,
    "process",
    "/tmp/kernelgate-1-run",
    ("/sys/fs/cgroup/pids/x", "/sys/fs/cgroup/memory/x"),
    ("/data",),
    "o-",
)


@pytest.mark.parametrize(
    "event",
    [
        REQUEST,
        ForkRequest(0, "namespaces", "/r", (), (), ""),
        # paths the host made from bytes that are not UTF-8 (os.fsdecode's escapes)
        ForkRequest(1, "process", "/tmp/caf\udce9", (), ("/d\udcff",), "o-"),
        # a root host's run: its own uid and gid
        ForkRequest(2, "namespaces", "/r", (), (), "o-", (2068250624, 2068250625)),
    ],
)
def test_requests_round_trip(event):
    data = encode(event)
    assert data.isascii()
    assert decode_request(data) == event


@pytest.mark.parametrize(
    "event",
    [
        Forked(3, 4242),
        ForkFailed(3, "fork: Resource temporarily unavailable"),
        ForkFailed(None, "bad fork request"),
        Exited(4242, 0),
        Exited(4242, 9, 0.25, 0.5, 20480),
        Exited(4242, 0x137F),  # a stop status: any int crosses, the host judges it
    ],
)
def test_replies_round_trip(event):
    assert decode_reply(encode(event)) == event


def test_the_json_shapes():
    assert json.loads(encode(REQUEST)) == {
        "op": "fork",
        "id": 3,
        "level": "process",
        "run_dir": "/tmp/kernelgate-1-run",
        "cgroups": ["/sys/fs/cgroup/pids/x", "/sys/fs/cgroup/memory/x"],
        "read_paths": ["/data"],
        "owner": "o-",
        "ids": None,
        "background": False,
    }
    background = ForkRequest(3, "process", "/r", (), (), "o-", None, True)
    assert decode_request(encode(background)).background is True
    assert (
        decode_request(
            b'{"op": "fork", "id": 1, "level": "process", "run_dir": "/r", '
            b'"cgroups": [], "read_paths": [], "owner": ""}'
        ).background
        is False
    )
    with pytest.raises(ZygoteProtocolError, match="background must be true or false"):
        decode_request(
            b'{"op": "fork", "id": 1, "level": "process", "run_dir": "/r", '
            b'"cgroups": [], "read_paths": [], "owner": "", "background": 1}'
        )
    with_ids = ForkRequest(3, "process", "/r", (), (), "o-", (2068250624, 2068250624))
    assert json.loads(encode(with_ids))["ids"] == [2068250624, 2068250624]
    assert json.loads(encode(Forked(3, 7))) == {"id": 3, "pid": 7}
    assert json.loads(encode(Exited(7, 0, 1.0, 2.0, 3))) == {
        "exit": 7,
        "status": 0,
        "rusage": [1.0, 2.0, 3],
    }
    assert decode_reply(b'{"exit": 7, "status": 0}') == Exited(7, 0, 0.0, 0.0, 0)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: ForkRequest(-1, "process", "/r", (), (), ""), "id must be an integer from 0"),
        (lambda: ForkRequest(0, "", "/r", (), (), ""), "level must be a sandbox level"),
        (lambda: ForkRequest(0, "process", "", (), (), ""), "run_dir must be a non-empty path"),
        (lambda: ForkRequest(0, "process", "/r\0x", (), (), ""), "without NUL"),
        (lambda: ForkRequest(0, "process", "/r", "/c", (), ""), "cgroups must be a tuple"),
        (lambda: ForkRequest(0, "process", "/r", ("",), (), ""), r"cgroups\[0\] must be"),
        (lambda: ForkRequest(0, "process", "/r", (), ["/d"], ""), "read_paths must be a tuple"),
        (lambda: ForkRequest(0, "process", "/r", (), (3,), ""), r"read_paths\[0\] must be"),
        (lambda: ForkRequest(0, "process", "/r", (), (), None), "owner must be a string"),
        (lambda: ForkRequest(0, "process", "/r", (), (), "", [1, 1]), "ids must be a"),
        (lambda: ForkRequest(0, "process", "/r", (), (), "", (0, 1)), r"ids\[0\] must be an id"),
        (lambda: ForkRequest(0, "process", "/r", (), (), "", (1, 2**32 - 1)), r"ids\[1\]"),
        (lambda: ForkRequest(0, "process", "/r", (), (), "", (1, True)), r"ids\[1\]"),
        (lambda: Forked(0, 0), "pid must be a process id"),
        (lambda: Forked(0, True), "pid must be a process id"),
        (lambda: ForkFailed(-2, "x"), "id must be an integer from 0"),
        (lambda: ForkFailed(1, None), "error must be a string"),
        (lambda: Exited(5, "0"), "status must be a wait status"),
        (lambda: Exited(5, 0, -1.0), "user_s must be a number from 0 up"),
        (lambda: Exited(5, 0, 0.0, float("inf")), "system_s must be a number from 0 up"),
        (lambda: Exited(5, 0, 0.0, 0.0, 1.5), "maxrss_kib must be an integer from 0 up"),
        (lambda: encode({"op": "fork"}), "not a zygote message"),
    ],
)
def test_invalid_events_cannot_be_made(make, message):
    with pytest.raises(LocalProtocolError, match=message):
        make()


def test_fork_failures_are_bounded():
    assert len(ForkFailed(1, "x" * 100_000).error) == 8 * 1024


@pytest.mark.parametrize(
    ("data", "message", "request_id"),
    [
        (b"\xff", "zygote fork request is not ASCII JSON", None),
        (b"[1]", r"zygote fork request must be a JSON object, got \[1\]", None),
        (b'{"op": "exec", "id": 4}', "zygote fork request op must be 'fork', got 'exec'", 4),
        (b'{"op": "fork", "id": 4}', "zygote fork request has no field 'read_paths'", 4),
        (b'{"op": "fork", "id": "4", "read_paths": []}', "has no field 'level'", None),
        (
            b'{"op": "fork", "id": 4, "level": "process", "run_dir": "/r", "cgroups": [],'
            b' "read_paths": {}, "owner": ""}',
            "read_paths must be a list, got {}",
            4,
        ),
        (
            b'{"op": "fork", "id": 4, "level": "process", "run_dir": 7, "cgroups": [],'
            b' "read_paths": [], "owner": ""}',
            "zygote fork request run_dir must be a non-empty path without NUL, got 7",
            4,
        ),
        (
            b'{"op": "fork", "id": 4, "level": "process", "run_dir": "/r", "cgroups": "/c",'
            b' "read_paths": [], "owner": ""}',
            "cgroups must be a list, got '/c'",
            4,
        ),
        (
            b'{"op": "fork", "id": 4, "level": "process", "run_dir": "/r", "cgroups": [],'
            b' "read_paths": [], "owner": "", "ids": 5}',
            r"zygote fork request ids must be \[uid, gid\], got 5",
            4,
        ),
        (
            b'{"op": "fork", "id": 4, "level": "process", "run_dir": "/r", "cgroups": [],'
            b' "read_paths": [], "owner": "", "ids": [0, 0]}',
            r"ids\[0\] must be an id from 1",
            4,
        ),
        (b'{"op": "fork", "id": NaN}', "NaN is not JSON", None),
    ],
)
def test_requests_the_zygote_refuses(data, message, request_id):
    with pytest.raises(ZygoteProtocolError, match=message) as info:
        decode_request(data)
    assert info.value.request_id == request_id
    assert isinstance(info.value, RemoteProtocolError)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "not ASCII JSON"),
        (b'"exit"', "must be a JSON object"),
        (
            b'{"exit": 0, "status": 0}',
            r"zygote exit status pid must be a process id \(an integer from 1 up\), got 0",
        ),
        (b'{"exit": 7}', "zygote exit status has no field 'status'"),
        (b'{"exit": 7, "status": 0, "rusage": [1, 2]}', r"rusage must be \[user_s, system_s"),
        (b'{"exit": 7, "status": 0, "rusage": [1, 2, -3]}', "maxrss_kib must be an integer"),
        (b'{"id": 1}', "zygote fork reply has no field 'pid'"),
        (b'{"id": 1, "pid": "7"}', "zygote fork reply pid must be a process id"),
        (b'{"id": 1, "error": 5}', "zygote fork failure error must be a string"),
        (b'{"exit": 7, "status": 1e400}', "out of range"),
    ],
)
def test_replies_the_host_refuses(data, message):
    with pytest.raises(ZygoteProtocolError, match=message):
        decode_reply(data)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300) | st.text(max_size=60).map(lambda t: t.encode("utf-8", "replace")))
def test_any_bytes_decode_or_are_refused(data):
    for decode in (decode_request, decode_reply):
        try:
            event = decode(data)
        except ZygoteProtocolError as exc:
            assert str(exc)
        else:
            assert decode(encode(event)) == event


# -- a real zygote ----------------------------------------------------------------------------


def _reply(sock: socket.socket) -> object:
    """The zygote's next message (waits at most 30 s for it)."""
    ready, _, _ = select.select([sock], [], [], 30)
    assert ready, "the zygote did not answer"
    return decode_reply(sock.recv(65536))


def test_a_real_zygote_refuses_what_it_cannot_read_and_goes_on(tmp_path):
    from kernelgate.gateway.pool import Zygote, booted  # the gateway layer: only this test

    zygote = Zygote(sys.executable, {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"})
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    try:
        socket.send_fds(zygote.sock, [b'{"op": "fork", "id": 5}'], [])
        failed = _reply(zygote.sock)
        assert type(failed) is ForkFailed and failed.request_id == 5
        assert "has no field 'read_paths'" in failed.error
        # A whole request, but without the three fds it needs.
        request = ForkRequest(6, "process", str(run_dir), (), (), "kernelgate-test-")
        socket.send_fds(zygote.sock, [encode(request)], [])
        failed = _reply(zygote.sock)
        assert failed == ForkFailed(6, "bad fork request: a fork request needs 3 fds, got 0")
        zygote.sock.send(b"\xff\xfe")
        assert _reply(zygote.sock) == ForkFailed(
            None,
            "bad fork request: zygote fork request is not ASCII JSON "
            "('ascii' codec can't decode byte 0xff in position 0: ordinal not in range(128)); "
            "starts with b'\\xff\\xfe'",
        )
        # Still serving: a real fork, through the pool's own client.
        child = asyncio.run(zygote.fork("process", str(run_dir), ()))
        try:
            # It says when it has booted and parked, and only then: then no program comes.
            assert asyncio.run(booted(child, 60))
            child.control.close()  # no program will come: the child exits
            exited = _reply(zygote.sock)
            assert type(exited) is Exited and exited.pid == child.pid
            assert os.waitstatus_to_exitcode(exited.status) == 1
        finally:
            for fd in (child.stdout_fd, child.stderr_fd, child.pidfd):
                if fd >= 0:
                    os.close(fd)
    finally:
        zygote.close()
        shutil.rmtree(run_dir, ignore_errors=True)
