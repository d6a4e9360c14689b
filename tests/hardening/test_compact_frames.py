"""Compact call frames from an untrusted child (issue 23): each forged frame, written
straight to fd 3 past every check the child makes, is refused by the host as a full frame
with the same fault would be, with a message naming the fault. Warm and cold, at the
strongest level this machine has (the host's reading does not depend on the level).
"""

from __future__ import annotations

import textwrap

import pytest

from kernelgate import Limits

from .conftest import FAST

WARM_COLD = pytest.mark.parametrize("warm", [True, False], ids=["warm", "cold"])

_PRELUDE = (
    "import gc, os\n"
    "from kernelgate.wire.connection import Connection\n"
    "conn = [o for o in gc.get_objects() if type(o) is Connection][0]\n"
    "def forge(line):\n"
    "    os.set_blocking(3, True)\n"
    "    data = line.encode() + b'\\n'\n"
    "    while data:\n"
    "        data = data[os.write(3, data):]\n"
)


def _run(hostile, warm, body, limits=FAST, **kw):
    return hostile.run(_PRELUDE + textwrap.dedent(body), limits, warm=warm, **kw)


@WARM_COLD
def test_a_compact_call_before_the_agreement_ends_the_run_as_protocol(hostile, warm):
    r = _run(
        hostile,
        warm,
        """
        forge('["call",0,"tools","add",[1,2],{}]')
        import time
        time.sleep(5)
        """,
    )
    assert r.status == "protocol", r.message
    assert "before compact frames were agreed" in r.error.evalue
    assert r.calls == []


@WARM_COLD
@pytest.mark.parametrize(
    "line, words",
    [
        ('["call","1","tools","add",[1,2],{}]', "id must be an integer, got '1'"),
        ('["call",1,"tools","add",{},{}]', "args must be a list, got {}"),
        ('["call",1,"tools","add",[],[]]', "kwargs must be an object, got []"),
        ('["call",1,"tools","add",[1]]', "a compact frame from the child must be"),
        ('["call",7,"tools","add",[1,2],{}]', "call id 7 is out of sequence: expected 1"),
        ('["call",0,"tools","add",[1,2],{}]', "call id 0 is out of sequence: expected 1"),
        ('["call",1,"tools","add",[NaN],{}]', "not valid UTF-8 JSON"),
    ],
    ids=["id-text", "args", "kwargs", "shape", "skip", "repeat", "nan"],
)
def test_a_forged_compact_call_ends_the_run_as_protocol(hostile, warm, line, words):
    r = _run(
        hostile,
        warm,
        f"""
        assert await tools.add(1, 2) == 3   # the full first call: compact from now on
        assert conn.compact
        forge({line!r})
        import time
        time.sleep(5)
        """,
    )
    assert r.status == "protocol", r.message
    assert words in r.error.evalue
    assert [c.id for c in r.calls] == [0]  # only the honest call is recorded


@WARM_COLD
def test_compact_calls_past_max_calls_end_as_protocol(hostile, warm):
    limits = Limits(wall_seconds=10, kill_grace_seconds=0.3, cpu_seconds=5, max_calls=2)
    r = _run(
        hostile,
        warm,
        """
        assert await tools.add(1, 2) == 3
        for i in range(1, 50):
            forge('["call",%d,"tools","add",[1,2],{}]' % i)
        import time
        time.sleep(5)
        """,
        limits,
    )
    assert r.status == "protocol", r.message
    assert "past max_calls=2" in r.error.evalue
    assert len(r.calls) <= 2


@WARM_COLD
def test_a_compact_call_that_does_not_fit_the_signature_never_reaches_the_binding(hostile, warm):
    seen: list[object] = []

    def add(a: int, b: int) -> int:
        seen.append((a, b))
        return a + b

    gw = hostile.gateway(bindings={"add": add}, pool_size=1 if warm else 0)
    r = _run(
        hostile,
        warm,
        """
        import asyncio
        assert await tools.add(1, 2) == 3
        client = [o for o in gc.get_objects() if type(o).__name__ == 'CallClient'][0]
        fut = asyncio.get_running_loop().create_future()
        client.pending[1] = (fut, 'tools.add')
        client.calls += 1
        conn._next_call_id += 1
        conn._outstanding.add(1)
        forge('["call",1,"tools","add",[1,2,3],{"c":4}]')
        try:
            await fut
        except ToolError as exc:
            print('host refused:', exc.ename, flush=True)
        return await tools.add(2, 3)
        """,
        gateway=gw,
    )
    assert r.status == "ok", r.message
    assert r.value == 5
    assert r.stdout == "host refused: TypeError\n"
    assert seen == [(1, 2), (2, 3)]
    assert [c.ok for c in r.calls] == [True, False, True]


@WARM_COLD
def test_compact_calls_keep_the_run_record_whole(hostile, warm):
    """The honest path: after the first call every call is compact, and the result shows
    each call in full (namespace, name, arguments, value), in order with the output."""
    r = _run(
        hostile,
        warm,
        """
        out = []
        for i in range(5):
            print('before', i)
            out.append(await tools.add(i, b=i))
        assert conn.compact
        return out
        """,
    )
    assert r.status == "ok", r.message
    assert r.value == [0, 2, 4, 6, 8]
    assert [(c.id, c.namespace, c.name, c.args, c.kwargs, c.value) for c in r.calls] == [
        (i, "tools", "add", [i], {"b": i}, 2 * i) for i in range(5)
    ]
