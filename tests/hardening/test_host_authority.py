"""The host is the authority on every fact it reports (issue 9, findings 6 and 7).

Each test first makes the attack happen (frames written straight to fd 3, past every check
the child makes), then shows what the host does with it. Warm and cold, at the strongest
level this machine has.
"""

from __future__ import annotations

import asyncio
import os
import textwrap

import pytest

from kernelgate import Limits

from .conftest import FAST

WARM_COLD = pytest.mark.parametrize("warm", [True, False], ids=["warm", "cold"])

_FIND_CONN = (
    "import gc, json, os\n"
    "from kernelgate.wire.connection import Connection\n"
    "from kernelgate.wire.events import CallRequest, ExecuteReply\n"
    "conn = [o for o in gc.get_objects() if type(o) is Connection][0]\n"
    "os.set_blocking(3, True)\n"
    "def write_all(data):\n"
    "    while data:\n"
    "        data = data[os.write(3, data):]\n"
)


def _rss_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS in /proc/self/status")


# -- finding 6: a call flood is neither recorded nor read without bound -----------------------


@WARM_COLD
def test_call_flood_past_max_calls_ends_as_protocol_and_is_not_kept(hostile, warm):
    # 250 forged call frames of 4 MiB each with max_calls=5: the host grew by 1 GB before.
    src = _FIND_CONN + textwrap.dedent(
        """
        big = 'x' * (4 << 20)
        sent = 0
        for _ in range(250):
            try:
                write_all(conn.send(CallRequest(conn.next_call_id, 'tools', 'echo', [big], {})))
            except OSError:
                break  # the host stopped reading and killed us
            sent += 1
        print('sent', sent, flush=True)
        return sent
        """
    )
    limits = Limits(wall_seconds=30, kill_grace_seconds=0.3, cpu_seconds=20,
                    max_calls=5, max_frame_bytes=5 << 20, memory_bytes=2 << 30)
    before = _rss_bytes()
    r = hostile.run(src, limits, warm=warm)
    grown = _rss_bytes() - before
    assert r.status == "protocol", r.message
    assert "past max_calls=5" in r.error.evalue
    assert len(r.calls) <= 5  # nothing past the budget is recorded
    # Five calls of 4 MiB and the frames in flight, not 250 of them.
    assert grown < 200 << 20, f"the host grew by {grown >> 20} MiB"


@WARM_COLD
def test_an_honest_program_past_max_calls_gets_limit_exceeded_not_protocol(hostile, warm):
    src = textwrap.dedent(
        """
        out = []
        for i in range(4):
            try:
                out.append(await tools.add(i, 1))
            except ToolError as exc:
                out.append(exc.ename)
        return out
        """
    )
    limits = Limits(wall_seconds=10, kill_grace_seconds=0.3, max_calls=2)
    r = hostile.run(src, limits, warm=warm)
    assert r.status == "ok", r.message
    assert r.value == [1, 2, "LimitExceeded", "LimitExceeded"]
    assert len(r.calls) == 2


@WARM_COLD
def test_calls_beyond_the_slots_wait_in_the_child_and_all_are_answered(hostile, warm):
    # With one slot and a slow binding, the host stops reading fd 3 while calls queue up
    # (back-pressure); every call is still answered, in order, and the reply still arrives.
    release = asyncio.Event()
    started = 0

    async def slow(i: int, blob: str) -> int:
        nonlocal started
        started += 1
        if started == 1:
            # The others pile up in the child's socket buffer meanwhile.
            asyncio.get_running_loop().call_later(0.2, release.set)
        await release.wait()
        return i

    gw = hostile.gateway(bindings={"slow": slow}, pool_size=1 if warm else 0)
    src = textwrap.dedent(
        """
        import asyncio
        blob = 'y' * (256 << 10)
        got = await asyncio.gather(*(tools.slow(i, blob) for i in range(40)))
        print('done', flush=True)
        return got
        """
    )
    limits = Limits(wall_seconds=30, kill_grace_seconds=0.3, max_calls_in_flight=1)
    r = hostile.run(src, limits, gateway=gw, warm=warm)
    assert r.status == "ok", r.message
    assert r.value == list(range(40))
    assert r.stdout == "done\n"
    assert [c.args[0] for c in r.calls] == list(range(40))


# -- finding 7: the host checks what it is told ----------------------------------------------


@WARM_COLD
def test_forged_call_that_does_not_fit_the_signature_never_reaches_policy_or_binding(
    hostile, warm
):
    seen: list[object] = []

    def add(a: int, b: int) -> int:
        seen.append(("binding", a, b))
        return a + b

    def policy(namespace, name, args, kwargs):
        seen.append(("policy", args, kwargs))
        return True

    gw = hostile.gateway(bindings={"add": add}, policy=policy, pool_size=1 if warm else 0)
    src = _FIND_CONN + textwrap.dedent(
        """
        import asyncio
        # The child's own check refuses this:
        try:
            await tools.add(1, 2, 3)
        except TypeError as exc:
            print('child refused:', type(exc).__name__, flush=True)
        # Written straight to fd 3, past the child's check: too many, an unknown keyword.
        for args, kwargs in (([1, 2, 3], {}), ([1], {'c': 2}), ([], {})):
            call_id = conn.next_call_id
            fut = asyncio.get_running_loop().create_future()
            client = [o for o in gc.get_objects() if type(o).__name__ == 'CallClient'][0]
            client.pending[call_id] = (fut, 'tools.add')
            write_all(conn.send(CallRequest(call_id, 'tools', 'add', args, kwargs)))
            try:
                await fut
            except ToolError as exc:
                print('host refused:', exc.ename, str(exc)[:80], flush=True)
        return await tools.add(2, 3)
        """
    )
    r = hostile.run(src, FAST, gateway=gw, warm=warm)
    assert r.status == "ok", r.message
    assert r.value == 5
    lines = r.stdout.splitlines()
    assert lines[0] == "child refused: TypeError"
    assert len(lines) == 4 and all(line.startswith("host refused: TypeError") for line in lines[1:])
    assert "tools.add()" in lines[1]
    # Only the honest call reached the policy and the binding.
    assert seen == [("policy", [2, 3], {}), ("binding", 2, 3)]
    refused = [c for c in r.calls if not c.ok]
    assert [c.error.ename for c in refused] == ["TypeError"] * 3


@WARM_COLD
def test_a_call_that_breaks_the_bindings_type_hints_never_reaches_policy_or_binding(
    hostile, warm
):
    """The child does not check types at all: the host does, for honest calls and for
    frames written straight to fd 3 alike, before the policy and the binding (issue 21)."""
    seen: list[object] = []

    def add(a: int, b: int) -> int:
        seen.append(("binding", a, b))
        return a + b

    def policy(namespace, name, args, kwargs):
        seen.append(("policy", args, kwargs))
        return True

    gw = hostile.gateway(bindings={"add": add}, policy=policy, pool_size=1 if warm else 0)
    src = _FIND_CONN + textwrap.dedent(
        """
        import asyncio
        try:
            await tools.add(1, '2')
        except ToolError as exc:
            print('host refused:', exc.ename, str(exc)[:80], flush=True)
        for args, kwargs in (([True, 2], {}), ([1], {'b': [2]}), ([1.5, 2], {})):
            call_id = conn.next_call_id
            fut = asyncio.get_running_loop().create_future()
            client = [o for o in gc.get_objects() if type(o).__name__ == 'CallClient'][0]
            client.pending[call_id] = (fut, 'tools.add')
            write_all(conn.send(CallRequest(call_id, 'tools', 'add', args, kwargs)))
            try:
                await fut
            except ToolError as exc:
                print('host refused:', exc.ename, str(exc)[:80], flush=True)
        return await tools.add(2, 3.0)
        """
    )
    r = hostile.run(src, FAST, gateway=gw, warm=warm)
    assert r.status == "ok", r.message
    assert r.value == 5
    lines = r.stdout.splitlines()
    assert len(lines) == 4 and all(line.startswith("host refused: TypeError") for line in lines)
    assert "tools.add() argument b: expected int, got str '2'" in lines[0]
    assert "tools.add() argument a: expected int, got bool True" in lines[1]
    # Only the honest call reached the policy (as JSON) and the binding (3.0 as the int 3).
    assert seen == [("policy", [2, 3.0], {}), ("binding", 2, 3)]
    assert [c.error.ename for c in r.calls if not c.ok] == ["TypeError"] * 4


@WARM_COLD
def test_a_program_cannot_claim_sandbox_unavailable(hostile, warm):
    src = _FIND_CONN + textwrap.dedent(
        """
        import time
        write_all(conn.send(ExecuteReply('error', 'sandbox_unavailable',
                                           ename='SandboxUnavailable', evalue='forged')))
        time.sleep(30)
        """
    )
    r = hostile.run(src, FAST, warm=warm)
    if warm:
        assert r.status == "protocol", r.message
        assert "sandbox_unavailable" in r.error.evalue
    else:
        # A cold child reports a failure to enter its sandbox first, before anything else:
        # as the program's first frame the claim cannot be told from a real one by its
        # order alone, but the host never reports an isolation it did not give.
        assert r.status in ("protocol", "sandbox_unavailable"), r.message
        if r.status == "sandbox_unavailable":
            assert r.isolation == ""


@WARM_COLD
def test_a_program_cannot_claim_sandbox_unavailable_after_output(hostile, warm):
    src = _FIND_CONN + textwrap.dedent(
        """
        import time
        print('ran', flush=True)
        write_all(conn.send(ExecuteReply('error', 'sandbox_unavailable',
                                           ename='SandboxUnavailable', evalue='forged')))
        time.sleep(30)
        """
    )
    r = hostile.run(src, FAST, warm=warm)
    assert r.status == "protocol", r.message
    assert r.stdout == "ran\n"
    assert r.isolation != ""


@WARM_COLD
def test_forged_usage_is_labelled_and_the_host_measures_its_own(hostile, warm):
    src = _FIND_CONN + textwrap.dedent(
        """
        import time
        end = time.process_time() + 0.3
        while time.process_time() < end:
            pass
        x = b'x' * (64 << 20)  # 64 MiB touched
        write_all(conn.send(ExecuteReply('ok', 'ok', usage={
            'cpu_user_s': 0.0, 'cpu_system_s': 0.0, 'peak_memory_bytes': 1})))
        time.sleep(30)
        """
    )
    r = hostile.run(src, FAST, warm=warm)
    assert r.status == "ok", r.message
    assert r.usage["measured_by"] == "host"
    assert r.usage["child_reported"]["peak_memory_bytes"] == 1
    assert r.usage["cpu_user_s"] + r.usage["cpu_system_s"] >= 0.25
    assert r.usage["peak_memory_bytes"] >= 64 << 20


def test_honest_usage_is_measured_by_the_host(hostile):
    r = hostile.run("x = b'x' * (32 << 20)\nreturn 1", FAST, warm=False)
    assert r.status == "ok", r.message
    assert r.usage["measured_by"] == "host"
    assert r.usage["peak_memory_bytes"] >= 32 << 20
    assert "child_reported" in r.usage
    assert os.getpid() > 0


@WARM_COLD
def test_a_process_the_program_left_running_is_measured_at_the_reply(hostile, warm):
    # A warm run's reply reads the /proc files kept as its child parked when the cgroup
    # holds just those processes: a process the program forked, alive at the reply, must
    # send the host back to listing the run's cgroup, and its CPU be counted. (The reply is
    # the program's own, sent while all stay alive: the host measures them as it reads it.)
    src = _FIND_CONN + textwrap.dedent(
        """
        import time
        r, w = os.pipe()
        if os.fork() == 0:
            end = time.process_time() + 0.3
            while time.process_time() < end:
                pass
            os.write(w, b'x')
            time.sleep(30)
            os._exit(0)
        os.read(r, 1)
        write_all(conn.send(ExecuteReply('ok', 'ok')))
        time.sleep(30)
        """
    )
    for _ in range(3):  # a warm run's child may be handed out before its fds are kept
        r = hostile.run(src, FAST, warm=warm)
        assert r.status == "ok", r.message
        assert r.usage["measured_by"] == "host"
        assert r.usage["cpu_user_s"] + r.usage["cpu_system_s"] >= 0.25, r.usage
