"""Attacks on what a warm child inherits: the zygote rehearses runs itself before it forks
(rehearsal.rehearse_in_zygote), and a namespace level's init is cloned with the
interpreter's parent-side fork hooks only (syscalls.clone_with_flags ``init_only``), the
program being forked from it with ``os.fork``.

Nothing of the rehearsal, of the zygote's state or of an earlier run reaches a program;
its interpreter is that of a fresh process (random reseeded, threads, ``os.fork`` and
signals as in any process), at every level, warm and cold, as root and as a non-root host.
"""

from __future__ import annotations

import textwrap
from typing import Any

import pytest

from kernelgate import Limits

from .conftest import ALL_LEVELS, NS_LEVELS

WARM_COLD = pytest.mark.parametrize("warm", [True, False], ids=["warm", "cold"])
SLACK = 5.0


def _runs(hostile: Any, level: str, warm: bool, program: str, n: int = 1) -> list[Any]:
    """``program`` run ``n`` times on one gateway at ``level`` (warm: each in a child of
    the warm pool)."""
    gw = hostile.gateway(sandbox=level, strict=True, pool_size=1 if warm else 0)
    src = textwrap.dedent(program)
    return [hostile.run(src, gateway=gw, warm=warm) for _ in range(n)]


_RANDOM = """
import os, random
mine = [random.random(), random.getrandbits(128)]
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    os.write(w, repr(random.getrandbits(128)).encode())
    os._exit(0)
os.close(w)
theirs = int(os.read(r, 100))
_, status = os.waitpid(pid, 0)
return mine + [theirs, random.getrandbits(128), os.waitstatus_to_exitcode(status)]
"""


@pytest.mark.timeout(120)
@ALL_LEVELS
@WARM_COLD
def test_each_run_and_each_fork_draws_its_own_random_numbers(hostile, level, warm):
    runs = _runs(hostile, level, warm, _RANDOM, n=3)
    for r in runs:
        assert r.status == "ok", r.message
        assert r.value[4] == 0
        assert r.value[2] != r.value[3]  # a program's fork is reseeded, as os.fork does
    draws = [v for r in runs for v in r.value[:4]]
    assert len(set(draws)) == len(draws), draws  # no two runs share the zygote's state


_THREADS_AND_FORK = """
import os, threading, concurrent.futures
start = threading.active_count()
main = threading.main_thread() is threading.current_thread()
out = []
lock = threading.Lock()
def work(i):
    with lock:
        out.append(i * i)
threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
with concurrent.futures.ThreadPoolExecutor(3) as ex:
    pooled = list(ex.map(lambda x: x + 1, range(5)))
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    # The forked program: a thread of its own, and its answer through the pipe.
    box = []
    t = threading.Thread(target=lambda: box.append(threading.active_count()))
    t.start()
    t.join()
    os.write(w, repr(box[0]).encode())
    os._exit(7)
os.close(w)
in_child = int(os.read(r, 100))
_, status = os.waitpid(pid, 0)
return [start, main, sorted(out), pooled, in_child, os.waitstatus_to_exitcode(status),
        threading.active_count()]
"""


@pytest.mark.timeout(120)
@ALL_LEVELS
@WARM_COLD
def test_a_program_s_threads_and_forks_work_as_in_a_fresh_process(hostile, level, warm):
    (r,) = _runs(hostile, level, warm, _THREADS_AND_FORK)
    assert r.status == "ok", r.message
    assert r.value == [1, True, [0, 1, 4, 9], [1, 2, 3, 4, 5], 2, 7, 1]


_SIGNALS = """
import signal
mask = sorted(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, []))
got = []
signal.signal(signal.SIGALRM, lambda signum, frame: got.append(signum))
signal.setitimer(signal.ITIMER_REAL, 0.05)
while not got:
    signal.pause()   # returns once the handler ran
signal.signal(signal.SIGUSR1, lambda signum, frame: got.append(signum))
signal.raise_signal(signal.SIGUSR1)
# No wakeup fd left by a rehearsal's (closed) event loop: a signal would write to an fd
# number the child reuses (fd 3 included). The program's loop takes its signals.
import asyncio, os
wakeup = signal.set_wakeup_fd(-1)
loop = asyncio.get_running_loop()
fut = loop.create_future()
loop.add_signal_handler(signal.SIGUSR2, fut.set_result, 'usr2')
os.kill(os.getpid(), signal.SIGUSR2)
got.append(await asyncio.wait_for(fut, 5))
return [mask, got, wakeup]
"""


@pytest.mark.timeout(120)
@ALL_LEVELS
@WARM_COLD
def test_a_program_s_signal_handlers_run_and_nothing_is_blocked(hostile, level, warm):
    (r,) = _runs(hostile, level, warm, _SIGNALS)
    assert r.status == "ok", r.message
    assert r.value == [[], [14, 10, "usr2"], -1]


@pytest.mark.timeout(120)
@ALL_LEVELS
@WARM_COLD
@pytest.mark.parametrize(
    "ending, signum",
    [
        ("import signal\nsignal.setitimer(signal.ITIMER_REAL, 0.05)\nsignal.pause()", 14),
        ("import os, signal\nos.kill(os.getpid(), signal.SIGTERM)\nsignal.pause()", 15),
        ("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\nsignal.pause()", 9),
    ],
    ids=["alarm", "sigterm", "sigkill"],
)
def test_a_signal_that_kills_the_program_ends_the_run_as_worker_exit(
    hostile, level, warm, ending, signum
):
    (r,) = _runs(hostile, level, warm, "print('before', flush=True)\n" + ending)
    assert r.status == "worker_exit", r.message
    assert r.signal == signum, r.message
    assert r.stdout == "before\n"
    assert r.duration_s < SLACK


@pytest.mark.timeout(120)
@ALL_LEVELS
@WARM_COLD
def test_a_program_trapping_sigterm_still_ends_at_its_wall_clock(hostile, level, warm):
    gw = hostile.gateway(sandbox=level, strict=True, pool_size=1 if warm else 0)
    limits = Limits(wall_seconds=1, kill_grace_seconds=0.3, cpu_seconds=5)
    src = "import signal\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nwhile True:\n    pass\n"
    r = hostile.run(src, limits, gateway=gw, warm=warm)
    assert r.status == "timeout", r.message
    assert r.duration_s < limits.wall_seconds + SLACK


_LEAVE = """
import builtins, os, random, sys
random.seed(42)
sys.modules['kg_leak'] = sys
builtins.kg_leak = 1
os.environ['KG_LEAK'] = '1'
sys.setrecursionlimit(77)
return 'left'
"""

_LOOK = """
import asyncio, builtins, gc, linecache, os, random, sys, threading
return {
    'seeded': random.random() == random.Random(42).random(),
    'module': 'kg_leak' in sys.modules,
    'builtin': hasattr(builtins, 'kg_leak'),
    'env': 'KG_LEAK' in os.environ,
    'recursion': sys.getrecursionlimit() == 77,
    # The rehearsal's program defines f, data, results (and imports json).
    'globals': sorted(k for k in globals() if not k.startswith('__')),
    'linecache': sorted(linecache.cache),
    'tasks': len(asyncio.all_tasks()),
    'threads': threading.active_count(),
    'exc': sys.exc_info()[0] is None,
    'garbage': len(gc.garbage),
}
"""


@pytest.mark.timeout(120)
@ALL_LEVELS
def test_nothing_of_an_earlier_run_or_of_the_rehearsal_reaches_a_warm_program(hostile, level):
    gw = hostile.gateway(sandbox=level, strict=True, pool_size=1)
    first = hostile.run(textwrap.dedent(_LEAVE), gateway=gw, warm=True)
    assert first.status == "ok" and first.value == "left", first.message
    r = hostile.run(textwrap.dedent(_LOOK), gateway=gw, warm=True)
    assert r.status == "ok", r.message
    v = r.value
    assert not (v["seeded"] or v["module"] or v["builtin"] or v["env"] or v["recursion"]), v
    assert v["globals"] == [
        "ToolError",
        "asyncio",
        "builtins",
        "clear_output",
        "display",
        "gc",
        "help",
        "linecache",
        "os",
        "random",
        "sys",
        "threading",
        "tools",
        "update_display",
    ]
    assert v["linecache"] == ["<program>"]
    assert (v["tasks"], v["threads"], v["exc"], v["garbage"]) == (1, 1, True, 0)


@pytest.mark.timeout(120)
@NS_LEVELS
@WARM_COLD
def test_the_main_thread_s_native_id_is_the_program_s_own(hostile, level, warm):
    (r,) = _runs(
        hostile,
        level,
        warm,
        "import os, threading\n"
        "return [threading.main_thread().native_id, threading.get_native_id(), os.getpid()]",
    )
    assert r.status == "ok", r.message
    assert r.value[0] == r.value[1] == r.value[2], r.value


_AS_USER = """
async def main():
    async with gateway(sandbox=ARGS["level"], pool_size=1) as gw:
        await warmed(gw)
        return [encode(await gw.run(p)) for p in ARGS["programs"]]

print(json.dumps(asyncio.run(main())))
"""


@pytest.mark.timeout(180)
@ALL_LEVELS
def test_an_unprivileged_host_s_warm_programs_are_fresh_processes(as_user, level):
    programs = [textwrap.dedent(p) for p in (_RANDOM, _RANDOM, _THREADS_AND_FORK, _SIGNALS)]
    rs = as_user.run_script(_AS_USER, {"level": level, "programs": programs})
    for r in rs:
        assert r["status"] == "ok" and r["warm"] is True, r["message"]
    a, b, threads, signals = (r["value"] for r in rs)
    draws = a[:4] + b[:4]
    assert len(set(draws)) == len(draws), draws
    assert threads == [1, True, [0, 1, 4, 9], [1, 2, 3, 4, 5], 2, 7, 1]
    assert signals == [[], [14, 10, "usr2"], -1]
