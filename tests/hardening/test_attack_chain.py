"""Forged frames while fd 3 is lent to a binding thread (a chain of sequential calls,
kernelgate/gateway/calls.py ``_run_chain``): the thread takes only a plain call it would
admit on the loop; everything else, a call past ``max_calls``, arguments that do not
fit, a frame cut in two, goes back to the loop and is refused or admitted exactly as
there. Warm and cold, at the strongest level this machine has.
"""

from __future__ import annotations

import textwrap

import pytest

from kernelgate import Limits

from .conftest import FAST
from .test_attack_chain2 import _PRELUDE

WARM_COLD = pytest.mark.parametrize("warm", [True, False], ids=["warm", "cold"])

# The chain's prelude (two sequential calls, then fd 3 read by the thread that answers;
# ``forge`` and ``expect``): one copy, test_attack_chain2's.


def _run(hostile, warm, body, limits=FAST, **kw):
    return hostile.run(_PRELUDE + textwrap.dedent(body), limits, warm=warm, **kw)


@WARM_COLD
def test_calls_past_max_calls_in_a_chain_end_as_protocol(hostile, warm):
    limits = Limits(wall_seconds=10, kill_grace_seconds=0.3, cpu_seconds=5, max_calls=3)
    r = _run(
        hostile,
        warm,
        """
        for i in range(2, 50):
            forge(b'["call",%d,"tools","add",[1,2],{}]\\n' % i)
        time.sleep(5)
        """,
        limits,
    )
    assert r.status == "protocol", r.message
    assert "past max_calls=3" in r.error.evalue
    assert len(r.calls) <= 3


@WARM_COLD
def test_a_call_that_does_not_fit_in_a_chain_never_reaches_the_binding(hostile, warm):
    seen: list[object] = []

    def add(a: int, b: int) -> int:
        seen.append((a, b))
        return a + b

    gw = hostile.gateway(bindings={"add": add}, pool_size=1 if warm else 0)
    r = _run(
        hostile,
        warm,
        """
        fut = expect(2)
        forge(b'["call",2,"tools","add",[1,2,3],{"c":4}]\\n')
        try:
            await fut
        except ToolError as exc:
            print('host refused:', exc.ename, flush=True)
        return await tools.add(3, 4)
        """,
        gateway=gw,
    )
    assert r.status == "ok", r.message
    assert r.value == 7
    assert r.stdout == "host refused: TypeError\n"
    assert seen == [(1, 2), (2, 3), (3, 4)]
    assert [c.ok for c in r.calls] == [True, True, False, True]


@WARM_COLD
def test_a_call_frame_cut_in_two_across_the_hand_back_is_admitted_whole(hostile, warm):
    # The first half reaches the thread, which gives fd 3 back once its wait runs out;
    # the loop reads the second half into the same buffer: one call, admitted once.
    r = _run(
        hostile,
        warm,
        """
        fut = expect(2)
        frame = b'["call",2,"tools","add",[20,22],{}]\\n'
        forge(frame[:9])
        time.sleep(0.05)
        forge(frame[9:])
        return [await fut, await tools.add(1, 1)]
        """,
    )
    assert r.status == "ok", r.message
    assert r.value == [42, 2]
    assert [(c.id, c.args, c.value) for c in r.calls] == [
        (0, [1, 2], 3),
        (1, [2, 3], 5),
        (2, [20, 22], 42),
        (3, [1, 1], 2),
    ]
