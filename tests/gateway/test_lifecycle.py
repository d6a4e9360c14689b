"""Processes, isolation, limits, statuses decided by the host, cancellation, misuse."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys

import pytest

from kernelgate import Gateway, Limits
from tests.procs import marker_for, processes_with

from .conftest import BINDINGS, FAST, sleeper, warmed_up


@pytest.fixture(params=[None, "process"], ids=["strongest", "process"])
def gateway(request, run_dir_base, no_fd_leak):
    """Each lifecycle test runs at the strongest level here and at the plain process level."""
    gw = Gateway(bindings=BINDINGS, limits=FAST, tmp_dir=run_dir_base, sandbox=request.param)
    yield gw
    gw.close()


def test_timeout_kills_program_ignoring_sigterm_and_its_grandchildren(gateway, request):
    marker = marker_for(request.node.name)
    program = f"""
import signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
child = {sleeper(marker, ignore_sigterm=True)}
print('started', flush=True)
while True:
    time.sleep(0.01)
"""
    r = gateway.run_sync(program, limits=Limits(wall_seconds=1.5, kill_grace_seconds=0.3))
    assert r.status == "timeout"
    assert "wall_seconds=1.5" in r.error.evalue
    assert r.signal == 9  # SIGTERM was ignored: SIGKILL after the grace
    assert r.stdout == "started\n"
    assert processes_with(marker) == []
    assert r.outputs[-1]["output_type"] == "error" and r.outputs[-1]["ename"] == "Timeout"


def test_background_processes_do_not_outlive_a_successful_run(run, request):
    marker = marker_for(request.node.name)
    r = run(f"import subprocess, sys\np = {sleeper(marker)}\nreturn 'ok'")
    assert r.ok
    assert processes_with(marker) == []


def test_the_same_test_running_elsewhere_is_not_a_leftover(run, request):
    """Another test run on the machine (another engineer's, CI's) runs this very test at
    the same time: its programs' processes carry the test's name too, and are not ours.
    The marker names this test process as well, so only our own leftovers count."""
    elsewhere = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(120)", f"kg-marker-{request.node.name}"],
        stdin=subprocess.DEVNULL,
    )
    try:
        marker = marker_for(request.node.name)
        r = run(f"import subprocess, sys\np = {sleeper(marker)}\nreturn 'ok'")
        assert r.ok, r.message
        assert processes_with(marker) == []  # ours are gone; the other run's is not ours
        assert elsewhere.poll() is None  # and it was there all along, untouched
    finally:
        elsewhere.kill()
        elsewhere.wait(timeout=10)


def test_setsid_grandchild_holding_stdout_does_not_block_settling(gateway, request):
    marker = marker_for(request.node.name)
    program = f"""
import subprocess, sys
p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)', {marker!r}],
                     start_new_session=True)  # keeps fd 1 and 2 open, out of the group
print('started')
"""
    r = gateway.run_sync(program)
    assert r.ok and r.stdout == "started\n"
    assert r.duration_s < 10  # settled without waiting for the grandchild's pipes
    assert processes_with(marker) == []  # pid namespace or pids cgroup took it down


def test_worker_exit_with_code_and_output_kept(run):
    r = run("print('partial')\nimport os\nos._exit(7)")
    assert r.status == "worker_exit"
    assert r.exit_code == 7 and r.signal is None
    assert r.stdout == "partial\n"
    assert "exited with code 7" in r.error.evalue


def test_worker_exit_by_signal(run):
    r = run("import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)")
    assert r.status == "worker_exit"
    assert r.signal == 11 and r.exit_code is None
    assert "SIGSEGV" in r.error.evalue


@pytest.mark.parametrize("pool_size", [0, 1], ids=["cold", "warm"])
def test_a_crash_in_c_shows_the_programs_line_on_stderr(make_gateway, pool_size):
    """faulthandler is on in every child (a warm one has it from the zygote, writing to
    its own fd 2): a segfault leaves the Python traceback in stderr."""
    gw = make_gateway(pool_size=pool_size)
    program = "import ctypes\nprint('before', flush=True)\nctypes.string_at(0)\n"

    async def main():
        if pool_size:
            await warmed_up(gw)
        return await gw.run(program)

    r = asyncio.run(main())
    assert r.status == "worker_exit" and r.signal == 11
    assert r.usage["warm"] is bool(pool_size)
    assert r.stdout == "before\n"
    assert "Fatal Python error: Segmentation fault" in r.stderr
    assert 'File "<program>", line 3' in r.stderr


def test_os_exit_in_the_middle_of_a_call(run_dir_base, make_gateway):
    async def slow() -> int:
        await asyncio.sleep(30)
        return 1

    gw = make_gateway(bindings={"slow": slow})
    r = gw.run_sync(
        "import asyncio, os\nt = asyncio.ensure_future(tools.slow())\nawait asyncio.sleep(0)\nos._exit(4)"
    )
    assert r.status == "worker_exit" and r.exit_code == 4
    assert r.duration_s < 10  # the pending host call was cancelled, not awaited


def test_host_environment_is_not_visible(run, monkeypatch):
    monkeypatch.setenv("KG_HOST_SECRET", "s3cret")
    r = run("import os\nreturn dict(os.environ)")
    assert "KG_HOST_SECRET" not in r.value
    assert "s3cret" not in json.dumps(r.value)


def test_caller_env_is_passed(run_dir_base, make_gateway):
    gw = make_gateway(env={"MY_VAR": "yes"})
    assert gw.run_sync("import os\nreturn os.environ['MY_VAR']").value == "yes"


def test_stdin_is_at_eof(run):
    assert run("import sys\nreturn sys.stdin.read()").value == ""


def test_runs_share_no_state(run, gateway):
    first = run(
        "import json, os, random\njson.kg_marker = 1\nrandom.seed(1)\n"
        "os.environ['KG_SET'] = '1'\nopen('left.txt', 'w').write('x')\nopen('/tmp/left.txt', 'w').write('x')"
    )
    second = run(
        "import json, os, random\nreturn [hasattr(json, 'kg_marker'), os.path.exists('left.txt'), "
        "os.environ.get('KG_SET'), os.path.exists('/tmp/left.txt'), random.random()]"
    )
    assert first.ok and second.ok
    import random

    shared_tmp = gateway.sandbox == "process"  # only the namespace levels have a private /tmp
    if shared_tmp:
        os.remove("/tmp/left.txt")
    assert second.value[:4] == [False, False, None, shared_tmp]
    assert second.value[4] != random.Random(1).random()  # the seed did not carry over


def test_temp_dir_is_the_cwd_and_is_removed(run):
    r = run("import os\nopen('f.txt', 'w').write('data')\nos.mkdir('sub')\nreturn os.getcwd()")
    assert r.ok and "kernelgate-" in r.value
    assert not os.path.exists(r.value)


def test_temp_dir_removed_even_if_program_locks_it(run):
    r = run(
        "import os\nos.mkdir('locked')\nopen('locked/f', 'w').close()\nos.chmod('locked', 0)\nreturn os.getcwd()"
    )
    assert r.ok and not os.path.exists(r.value)


@pytest.mark.parametrize(
    "payload, expect",
    [
        (b"garbage\n", "starts with b'garbage'"),
        (b"[1, 2]\n", "must be a JSON object"),
        (
            b'{"header": {"msg_type": "shutdown_request"}, "parent_header": {}, "metadata": {}, "content": {}}\n',
            "unexpected message type 'shutdown_request'",
        ),
        (
            b'{"header": {"msg_type": "stream"}, "parent_header": {}, "metadata": {}, "content": {"name": "fd9", "text": "x"}}\n',
            "stream name must be",
        ),
    ],
)
def test_garbage_on_fd3_ends_run_with_protocol(run, payload, expect):
    r = run(
        f"print('before')\nimport os\nos.write(3, {payload.decode()!r}.encode())\nimport time\ntime.sleep(30)"
    )
    assert r.status == "protocol"
    assert expect in r.error.evalue
    assert r.stdout == "before\n"
    assert r.duration_s < 10


def _forged_call(call_id: int) -> str:
    msg = {
        "header": {"msg_type": "comm_msg"},
        "parent_header": {},
        "metadata": {},
        "content": {
            "comm_id": "COMM",
            "data": {
                "method": "call",
                "id": call_id,
                "namespace": "tools",
                "name": "add",
                "args": [1, 2],
                "kwargs": {},
            },
        },
    }
    return json.dumps(msg)


def test_call_on_an_unknown_comm_is_refused(run):
    r = run(f"import os, time\nos.write(3, {_forged_call(0)!r}.encode() + b'\\n')\ntime.sleep(30)")
    assert r.status == "protocol"
    assert "comm_msg on unknown comm 'COMM'" in r.error.evalue
    assert r.calls == []


def test_forged_and_duplicate_call_ids_on_the_real_comm(run):
    # Take the real comm id from the child's own connection, then forge ids.
    program = """
import gc, json, os, time
from kernelgate.wire.connection import Connection
conn = [o for o in gc.get_objects() if type(o) is Connection][0]
comm = conn._comm_id
await tools.add(1, 2)  # id 0 is used
msg = {"header": {"msg_type": "comm_msg"}, "parent_header": {}, "metadata": {},
       "content": {"comm_id": comm, "data": {"method": "call", "id": 0, "namespace": "tools",
                   "name": "add", "args": [1, 2], "kwargs": {}}}}
os.write(3, (json.dumps(msg) + "\\n").encode())
time.sleep(30)
"""
    r = run(program)
    assert r.status == "protocol"
    assert "call id 0 is out of sequence: expected 1" in r.error.evalue
    assert len(r.calls) == 1


def test_oversized_frame_is_refused(gateway):
    r = gateway.run_sync(
        "import os, time\nos.write(3, b'x' * 300000)\ntime.sleep(30)",
        limits=Limits(max_frame_bytes=200000, max_value_bytes=1000),
    )
    assert r.status == "protocol"
    assert "max_frame_bytes=200000" in r.error.evalue


def replies_then_hangs(marker: str = "") -> str:
    """A program that forges its own ok reply on fd 3 (after starting a tagged grandchild,
    with ``marker``) and then hangs on."""
    grandchild = f"import subprocess\np = {sleeper(marker)}\n" if marker else ""
    return (
        "import gc, os, sys, time\n"
        + grandchild
        + "from kernelgate.wire.connection import Connection\n"
        "from kernelgate.wire.events import ExecuteReply\n"
        "conn = [o for o in gc.get_objects() if type(o) is Connection][0]\n"
        "print('replying', flush=True)\n"
        "os.write(3, conn.send(ExecuteReply('ok')))\n"
        "time.sleep(60)\n"
    )


def test_forged_reply_then_hang_is_killed(run):
    r = run(replies_then_hangs())
    assert r.status == "ok"  # what the child reported; the host then killed it
    assert r.exit_code == 0 and r.signal is None  # a run that replied ended as it said
    assert r.duration_s < 10


def test_a_run_returns_on_its_reply_and_the_gateway_finishes_it(make_gateway, request):
    """run() returns with the reply; the child (here hanging on after it, with a
    grandchild) is ended by the gateway, and wait_finished/aclose see it gone."""
    marker = marker_for(request.node.name)
    gw = make_gateway(bindings=BINDINGS, limits=FAST)

    async def main():
        r = await gw.run(replies_then_hangs(marker))
        assert r.status == "ok" and r.stdout == "replying\n" and r.exit_code == 0
        await gw.wait_finished()
        assert processes_with(marker) == []
        await gw.aclose()
        assert os.listdir(gw.tmp_dir) == []

    asyncio.run(main())


def test_the_loop_ending_first_still_ends_the_run(make_gateway, request):
    """asyncio.run() ending right after run() returns: the teardown, cancelled with the
    loop, ends the child without it."""
    marker = marker_for(request.node.name)
    gw = make_gateway(bindings=BINDINGS, limits=FAST)
    r = asyncio.run(gw.run(replies_then_hangs(marker)))
    assert r.ok
    assert processes_with(marker) == []
    gw.close()
    assert os.listdir(gw.tmp_dir) == []


def test_flood_of_calls_never_awaited(gateway):
    r = gateway.run_sync(
        "for i in range(5000):\n    tools.add(i, 1)\nreturn 'done'",
        limits=Limits(max_calls=100_000),
    )
    assert r.ok and r.value == "done"


def test_twenty_runs_in_parallel(gateway):
    async def main():
        return await asyncio.gather(
            *[gateway.run(f"x = await tools.add({i}, 1)\nprint(x)\nreturn x") for i in range(20)]
        )

    results = asyncio.run(main())
    assert [r.value for r in results] == [i + 1 for i in range(20)]
    assert [r.stdout for r in results] == [f"{i + 1}\n" for i in range(20)]
    assert len({r.run_id for r in results}) == 20


def test_cancelling_run_kills_child_and_raises(gateway, request):
    marker = marker_for(request.node.name)

    async def main():
        started = asyncio.get_running_loop().create_future()
        task = asyncio.ensure_future(
            gateway.run(
                f"import subprocess, sys, time\np = {sleeper(marker)}\nprint('up', flush=True)\ntime.sleep(600)",
                on_output=lambda o: started.done() or started.set_result(o["text"]),
            )
        )
        await started
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert processes_with(marker) == []


def test_aclose_interrupts_live_runs(run_dir_base, make_gateway):
    async def main():
        gw = make_gateway()
        seen = asyncio.get_running_loop().create_future()
        task = asyncio.ensure_future(
            gw.run(
                "print('up', flush=True)\nimport time\ntime.sleep(600)",
                on_output=lambda o: seen.done() or seen.set_result(True),
            )
        )
        await seen
        await gw.aclose()
        result = await task
        with pytest.raises(RuntimeError, match="closed"):
            await gw.run("1")
        return result

    r = asyncio.run(main())
    assert r.status == "interrupted"
    assert "closed" in r.error.evalue and r.stdout == "up\n"


def test_interrupt_status(run_dir_base, make_gateway):
    async def main():
        gw = make_gateway()
        seen = asyncio.get_running_loop().create_future()
        task = asyncio.ensure_future(
            gw.run(
                "print('up')\nwhile True: pass",
                on_output=lambda o: seen.done() or seen.set_result(True),
            )
        )
        await seen
        assert gw.interrupt() == 1
        return await task

    r = asyncio.run(main())
    assert r.status == "interrupted" and r.error.ename == "Interrupted"


def test_misuse_raises(gateway):
    with pytest.raises(TypeError, match="program must be str"):
        gateway.run_sync(b"print(1)")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="limits must be"):
        gateway.run_sync("1", limits={"wall_seconds": 1})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="wall_seconds must be a positive"):
        Limits(wall_seconds=-1)
    with pytest.raises(ValueError, match="not an executable interpreter"):
        Gateway(python="/no/such/python")

    async def inside_loop():
        gateway.run_sync("1")

    with pytest.raises(RuntimeError, match="running event loop"):
        asyncio.run(inside_loop())


def test_context_managers(run_dir_base):
    async def main():
        async with Gateway(bindings=BINDINGS, tmp_dir=run_dir_base) as gw:
            r = await gw.run("return await tools.add(2, 2)")
        return gw, r

    gw, r = asyncio.run(main())
    assert r.value == 4 and gw.closed
    with Gateway(tmp_dir=run_dir_base) as gw2:
        assert gw2.run_sync("1").value == 1
    assert gw2.closed


def test_to_dict_is_plain_json(run):
    r = run("print('x')\nawait tools.add(1, 2)\nreturn {'k': [1]}")
    d = r.to_dict()
    assert json.loads(json.dumps(d)) == d
    assert d["status"] == "ok" and d["ok"] is True and d["value"] == {"k": [1]}
    assert d["calls"][0]["name"] == "add" and d["calls"][0]["value"] == 3


def test_other_interpreter_path(run_dir_base, make_gateway):
    import sys

    gw = make_gateway(python=os.path.realpath(sys.executable))
    assert gw.run_sync("import sys\nreturn sys.version_info[0]").value == 3
