"""What a warm child makes ahead, while it waits for its program (``Child.prepare``: its
output streams, the snapshot of the builtins, the globals but the bindings, the reporter,
the event loop; issue 23), attacked: the run's limits apply to it, the program finds only
its own run's objects (none of the rehearsal's, none of another run's), and a warm program
sees what a cold one sees. At every level, warm and cold.
"""

from __future__ import annotations

import pytest

from kernelgate import Limits

from .conftest import ALL_LEVELS, BINDINGS

BOTH = pytest.mark.parametrize("warm", [True, False], ids=["warm", "cold"])

#: What the program finds of kernelgate's child-side objects in its own process, by type
#: (gc.get_objects(): every object it can reach with introspection, live or garbage not
#: yet collected).
_CENSUS = """
import asyncio, gc, sys
gc.collect()
counts = {}
for obj in gc.get_objects():
    t = type(obj)
    if t.__module__.startswith("kernelgate.") or isinstance(obj, asyncio.AbstractEventLoop):
        name = "event loop" if isinstance(obj, asyncio.AbstractEventLoop) else t.__qualname__
        counts[name] = counts.get(name, 0) + 1
names = sorted(tools.__dict__) if hasattr(tools, "__dict__") else None
census = {k: counts.get(k, 0) for k in (
    "OutputStream", "OutputLedger", "Reporter", "Namespace", "Binding", "event loop",
)}
"""


@ALL_LEVELS
@BOTH
def test_the_run_s_limits_apply_to_what_was_made_before_the_program_came(hostile, level, warm):
    """The streams' budget and the reporter's value limit are the run's, not the defaults
    they were made with: the child itself refuses a value over ``max_value_bytes`` (its
    own message, "the first items"), and its ledger starts at ``max_output_bytes``."""
    limits = Limits(
        wall_seconds=20, kill_grace_seconds=0.5, max_value_bytes=64, max_output_bytes=1000
    )
    r = hostile.run(
        "import sys\nprint(sys.stdout._ledger.remaining, sys.stderr._ledger.remaining)\n"
        "return 'x' * 100",
        limits,
        warm=warm,
        sandbox=level,
    )
    assert r.status == "output_limit", r.message
    assert "max_value_bytes=64" in r.message and "the first items" in r.message, r.message
    assert r.stdout == "1000 1000\n"


@ALL_LEVELS
@BOTH
def test_the_program_finds_only_its_own_run_s_objects(hostile, level, warm):
    """Nothing of the rehearsal (its streams, ledger, namespace, bindings), of a run before
    or of the zygote is among what the program can find: one reporter, one pair of streams
    on one ledger, one event loop, and the namespaces and bindings of this run alone."""
    r = hostile.run(
        _CENSUS + "return census",
        warm=warm,
        sandbox=level,
    )
    assert r.status == "ok", r.message
    assert r.value == {
        "OutputStream": 2,
        "OutputLedger": 1,
        "Reporter": 1,
        "Namespace": 1,  # tools
        "Binding": len(BINDINGS),
        "event loop": 1,
    }


@ALL_LEVELS
def test_a_warm_program_sees_what_a_cold_one_sees(hostile, level):
    """The same globals, builtins, streams and loop state whether they were made before
    the program came (warm) or after (cold)."""
    src = (
        "import asyncio, builtins, sys\n"
        "loop = asyncio.get_running_loop()\n"
        "return {'globals': sorted(globals()), 'builtins': sorted(builtins.__dict__),\n"
        "        'stdout': [type(sys.stdout).__name__, sys.stdout._parts, sys.stdout.name],\n"
        "        'stderr': [type(sys.stderr).__name__, sys.stderr._parts, sys.stderr.name],\n"
        "        'current': asyncio.get_event_loop() is loop,\n"
        "        'readers': len(loop._selector.get_map()),\n"
        "        'clock': loop.time.__name__}\n"
    )
    warm = hostile.run(src, warm=True, sandbox=level)
    cold = hostile.run(src, warm=False, sandbox=level)
    assert warm.status == cold.status == "ok", (warm.message, cold.message)
    assert warm.value == cold.value
    assert warm.value["stdout"] == ["OutputStream", [], "<stdout>"]
    assert warm.value["current"] is True


@ALL_LEVELS
def test_nothing_a_warm_run_leaves_in_its_prepared_objects_reaches_the_next(hostile, level):
    """A program writes into everything made before it came (its streams, their class,
    its globals, the builtins, its loop, the reporter): the next run, in another warm child
    of the same pool, finds none of it."""
    gw = hostile.gateway(pool_size=2, sandbox=level)
    taint = (
        "import asyncio, builtins, gc, sys\n"
        "sys.stdout.taint = type(sys.stdout).taint = 'secret'\n"
        "sys.stdout._ledger.remaining = -1\n"
        "builtins.taint = 'secret'\n"
        "globals()['__doc__'] = 'secret'\n"
        "asyncio.get_running_loop().taint = 'secret'\n"
        "for o in gc.get_objects():\n"
        "    if type(o).__name__ == 'Reporter':\n"
        "        o.taint = 'secret'\n"
        "return 'tainted'"
    )
    look = (
        "import asyncio, builtins, gc, sys\n"
        "seen = [hasattr(sys.stdout, 'taint'), hasattr(type(sys.stdout), 'taint'),\n"
        "        sys.stdout._ledger.remaining, hasattr(builtins, 'taint'),\n"
        "        __doc__, hasattr(asyncio.get_running_loop(), 'taint')]\n"
        "seen += [hasattr(o, 'taint') for o in gc.get_objects()\n"
        "         if type(o).__name__ == 'Reporter']\n"
        "return seen"
    )
    first = hostile.run(taint, gateway=gw)
    second = hostile.run(look, gateway=gw)
    assert first.value == "tainted", first.message
    assert second.status == "ok", second.message
    budget = Limits().max_output_bytes
    assert second.value == [False, False, budget, False, None, False, False]
