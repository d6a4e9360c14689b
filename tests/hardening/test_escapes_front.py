"""Escapes through the host's front: wait statuses, imports, and limits from recordings.

- Finding 11: a program that stops itself (traced by its parent, or not; or a child of
  it that stops) never hangs ``run()``, its cancellation, or the kernel.
- Finding 12: the host never imports modules from the working directory or a notebook's
  directory; ``--bindings`` are resolved explicitly.
- Finding 13: limits come from the caller or the kernelspec, never from a notebook or a
  recording; crafted recordings get a clear error (exit 2), never a traceback.

Each attack first shows that it ran (the program reached its syscall, the planted module
exists where a careless import would find it), then that the outcome is secure.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kernelgate import Limits, RunResult, save_run
from tests.procs import kernelgate_command

from .conftest import ALL_LEVELS as EVERY_LEVEL
from .conftest import REAL_LEVELS_ONLY

BOTH = pytest.mark.parametrize("warm", [True, False], ids=["warm", "cold"])

#: Slack on durations: the machine may be loaded.
SLACK = 5.0

STOP_LIMITS = Limits(wall_seconds=2.0, kill_grace_seconds=0.3, cpu_seconds=30)


def program(source: str) -> str:
    return textwrap.dedent(source).strip() + "\n"


# -- finding 11: stopped and traced programs -----------------------------------------------

#: Traced by its parent (init of its namespace, the zygote, or the host), then stopped:
#: the parent's wait reports a stop, not an exit. (A seccomp filter may refuse the
#: PTRACE_TRACEME with EPERM; the stop itself always happens.)
TRACED_STOP = program(
    """
    import ctypes, os, signal
    libc = ctypes.CDLL(None, use_errno=True)
    rc = libc.ptrace(0, 0, 0, 0)
    print("traceme", rc, ctypes.get_errno(), flush=True)
    print("stopping", flush=True)
    os.kill(os.getpid(), signal.SIGSTOP)
    print("resumed", flush=True)
    """
)

#: Stopped without a tracer: no wait without WUNTRACED reports it.
PLAIN_STOP = program(
    """
    import os, signal
    print("stopping", flush=True)
    os.kill(os.getpid(), signal.SIGSTOP)
    print("resumed", flush=True)
    """
)

#: A child that has itself traced by the program and stops; the program waits on it.
CHILD_STOP = program(
    """
    import ctypes, os, signal, sys
    pid = os.fork()
    if pid == 0:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.ptrace(0, 0, 0, 0)
        os.kill(os.getpid(), signal.SIGSTOP)
        os._exit(0)
    _, status = os.waitpid(pid, os.WUNTRACED)
    print("child stopped", os.WIFSTOPPED(status), flush=True)
    print("stopping", flush=True)
    while True:
        os.waitpid(pid, 0)  # blocks: the stopped child never exits
    """
)

STOPPERS = pytest.mark.parametrize(
    "source", [TRACED_STOP, PLAIN_STOP, CHILD_STOP], ids=["traced", "plain", "child"]
)


class LoopErrors:
    """Exceptions raised in event-loop callbacks (the loop only logs them)."""

    def __init__(self) -> None:
        self.errors: list[dict[str, Any]] = []

    def install(self) -> None:
        asyncio.get_running_loop().set_exception_handler(
            lambda _loop, context: self.errors.append(context)
        )


def run_bounded(scenario: Any, seconds: float) -> Any:
    """``asyncio.run(scenario())`` in a thread, failing the test if it has not returned
    after ``seconds``: the bug this guards against hangs the loop's own cancellation, so
    a timeout inside the loop (or pytest-timeout's) would hang with it."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["result"] = asyncio.run(scenario())
        except BaseException as exc:  # handed to the test's thread
            box["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        pytest.fail(f"the gateway hung: the scenario had not returned after {seconds:g} s")
    if "error" in box:
        raise box["error"]
    return box["result"]


def _check_stopped_run(r: RunResult, started: float) -> None:
    took = time.monotonic() - started
    assert "stopping" in r.stdout, r.stdout  # the program reached its stop
    assert "resumed" not in r.stdout
    limit = STOP_LIMITS.wall_seconds + STOP_LIMITS.kill_grace_seconds + SLACK
    assert took < limit, f"run() took {took:.1f} s with a stopped program"
    # The wall-clock budget, or (when the stop ends the run early) a status that says so.
    assert r.status in ("timeout", "worker_exit"), (r.status, r.message)
    if r.status == "worker_exit":
        assert "SIG" in r.message, r.message  # names the signal; never "exit code None"


@pytest.mark.timeout(90)
@STOPPERS
@EVERY_LEVEL
@BOTH
def test_a_stopped_program_never_hangs_run(hostile, level, warm, source):
    gw = hostile.gateway(STOP_LIMITS, sandbox=level, pool_size=1 if warm else 0)
    errors = LoopErrors()

    async def scenario() -> tuple[RunResult, float, RunResult]:
        errors.install()
        if warm:
            first = hostile.record(await gw.run("'warm-up'"))
            assert first.ok, first.message
            filler = getattr(getattr(gw, "_pool", None), "_filler", None)
            if filler is not None:
                await asyncio.shield(filler)
        started = time.monotonic()
        r = hostile.record(await gw.run(source))
        after = hostile.record(await gw.run("return 6 * 7"))  # the gateway still works
        return r, started, after

    r, started, after = run_bounded(scenario, 60)
    assert r.usage.get("warm") is warm
    _check_stopped_run(r, started)
    assert after.ok and after.value == 42, after.message
    assert errors.errors == [], [e.get("message") for e in errors.errors]


@pytest.mark.timeout(90)
@STOPPERS
@EVERY_LEVEL
@BOTH
def test_cancelling_a_stopped_program_returns_promptly(hostile, level, warm, source):
    limits = Limits(wall_seconds=60, kill_grace_seconds=0.3, cpu_seconds=60)
    gw = hostile.gateway(limits, sandbox=level, pool_size=1 if warm else 0)
    errors = LoopErrors()

    async def scenario() -> tuple[float, RunResult]:
        errors.install()
        if warm:
            assert hostile.record(await gw.run("'warm-up'")).ok
            filler = getattr(getattr(gw, "_pool", None), "_filler", None)
            if filler is not None:
                await asyncio.shield(filler)
        seen = asyncio.Event()
        text: list[str] = []

        def on_output(out: dict[str, Any]) -> None:
            text.append(out.get("text", ""))
            if "stopping" in "".join(text):
                seen.set()

        task = asyncio.create_task(gw.run(source, on_output=on_output))
        await asyncio.wait_for(seen.wait(), 30)  # the program is about to stop
        # Let the stop land (and a traced stop reach its parent) before cancelling.
        await asyncio.sleep(0.3)
        started = time.monotonic()
        ended_first = task.done()  # the stop may end the run at once (a traced stop)
        task.cancel()
        try:
            r = await task
        except asyncio.CancelledError:
            assert not ended_first
        else:
            assert ended_first, "the run ignored its cancellation"
            assert r.status == "worker_exit" and "SIG" in r.message, (r.status, r.message)
        took = time.monotonic() - started
        after = hostile.record(await gw.run("return 6 * 7"))
        return took, after

    took, after = run_bounded(scenario, 60)
    assert took < 2.0 + SLACK, f"cancelling took {took:.1f} s"
    assert after.ok and after.value == 42, after.message
    assert errors.errors == [], [e.get("message") for e in errors.errors]


# -- a kernel started through an installed kernelspec ---------------------------------------


def _kernelgate_cmd() -> list[str]:
    return kernelgate_command()


def kernelgate(*args: str, cwd: str | os.PathLike[str] | None = None, stdin: str = "") -> Any:
    """The installed ``kernelgate`` command, as a user runs it."""
    return subprocess.run(
        [*_kernelgate_cmd(), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=100,
        cwd=cwd,
    )


def _clean_exit_2(p: Any) -> None:
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    assert "Traceback" not in p.stderr, p.stderr
    assert p.stderr.startswith("kernelgate: error: "), p.stderr


@contextlib.contextmanager
def started_kernel(
    tmp: Path,
    monkeypatch: pytest.MonkeyPatch,
    *,
    cwd: Path,
    install_args: tuple[str, ...] = ("--bindings", "kernelgate.demo:BINDINGS"),
    install_cwd: Path | None = None,
    extra_env: dict[str, str] | None = None,
) -> Iterator[tuple[Any, Any, dict[str, Any]]]:
    """Install a kernelspec (the real command) into a temporary prefix, start it with
    jupyter_client from ``cwd`` (as Jupyter does: the notebook's directory); yield
    ``(manager, client, kernel.json)``."""
    from jupyter_client.manager import KernelManager

    prefix = tmp / "prefix"
    name = "kg-escapes-front"
    p = kernelgate(
        "kernel",
        "install",
        "--prefix",
        str(prefix),
        "--name",
        name,
        *install_args,
        cwd=install_cwd or tmp,
    )
    assert p.returncode == 0, p.stderr
    spec_dir = prefix / "share" / "jupyter" / "kernels" / name
    spec = json.loads((spec_dir / "kernel.json").read_text())
    runtime = tmp / "runtime"
    runtime.mkdir(exist_ok=True)
    monkeypatch.setenv("JUPYTER_PATH", str(prefix / "share" / "jupyter"))
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(runtime))
    for key, value in (extra_env or {}).items():
        monkeypatch.setenv(key, value)
    km = KernelManager(kernel_name=name)
    km.start_kernel(cwd=str(cwd))
    kc = km.client()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=60)
        yield km, kc, spec
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=False)


# -- finding 11 in the kernel: stopped cells, then an interrupt ------------------------------


@REAL_LEVELS_ONLY  # the kernel runs at the machine's strongest level, whatever it is
@pytest.mark.timeout(120)
def test_stopped_cells_leave_the_kernel_idle_and_usable(tmp_path, monkeypatch):
    from tests.kernel.helpers import collect, execute, send_execute

    wall, grace = 2.0, 3.0  # --timeout sets wall_seconds; kill_grace_seconds is the default
    with started_kernel(
        tmp_path,
        monkeypatch,
        cwd=tmp_path,
        install_args=("--bindings", "kernelgate.demo:BINDINGS", "--timeout", str(wall)),
    ) as (km, kc, _spec):
        for source in (TRACED_STOP, TRACED_STOP, PLAIN_STOP, CHILD_STOP):
            started = time.monotonic()
            cell = execute(kc, source, stop_on_error=False, timeout=wall + grace + 30)
            took = time.monotonic() - started
            assert "stopping" in cell.stdout()
            assert cell.status == "error"
            assert cell.run_status in ("timeout", "worker_exit"), cell.run_status
            assert took < wall + grace + SLACK, f"a stopped cell took {took:.1f} s"
        # A stopped cell, interrupted as soon as it stopped: the interrupt ends it.
        interrupted_at: list[float] = []

        def interrupt_once(msg: dict[str, Any], cell: Any) -> None:
            if not interrupted_at and "stopping" in cell.stdout():
                interrupted_at.append(time.monotonic())
                km.interrupt_kernel()

        msg_id = send_execute(kc, TRACED_STOP, stop_on_error=False)
        cell = collect(kc, msg_id, timeout=60, on_iopub=interrupt_once)
        assert interrupted_at, "the cell never printed 'stopping'"
        assert cell.run_status in ("interrupted", "worker_exit"), cell.run_status
        assert time.monotonic() - interrupted_at[0] < SLACK
        # The kernel is idle (collect waited for it) and runs the next cell.
        after = execute(kc, "return 6 * 7")
        assert after.status == "ok", after.events
        result = after.outputs("execute_result")
        assert result and result[0]["content"]["data"]["text/plain"] == "42"


# -- finding 12: the host imports nothing from the working directory ------------------------

#: Modules the host (the kernelgate command, the kernel, their dependencies) imports, or
#: might: planted in the directory the host starts in, each writes a marker when imported.
PLANTED = (
    "argparse",
    "asyncio",
    "json",
    "queue",
    "selectors",
    "signal",
    "socket",
    "inspect",
    "typing",
    "zmq",
    "jupyter_client",
    "mybindings_helper",
)

BINDINGS_SOURCE = program(
    """
    def add(a: int, b: int) -> int:
        return a + b


    BINDINGS = {"add": add}
    """
)


@pytest.fixture
def planted(tmp_path: Path) -> Path:
    """A directory (a notebook's, or where a user runs ``kernelgate run``) holding stdlib-
    and dependency-named modules that leave a marker when imported, and a bindings module."""
    d = tmp_path / "planted"
    d.mkdir()
    for name in PLANTED:
        marker = d / f"MARKER-{name}"
        (d / f"{name}.py").write_text(f"open({str(marker)!r}, 'w').write('imported')\n")
    (d / "mybindings.py").write_text(BINDINGS_SOURCE)
    (d / "prog.py").write_text("return await tools.add(2, 3)\n")
    return d


def markers(d: Path) -> list[str]:
    return sorted(p.name for p in d.glob("MARKER-*"))


def test_the_planted_modules_run_when_the_directory_comes_first(planted):
    """The attack: the kernelspec's old argv (``python -m ...``, from the notebook's
    directory) imports a planted module (typing, asyncio, argparse, ...) before any cell;
    the kernelspec's argv (``python -I -m ...``) from the same directory imports none.

    Which planted module runs first depends on what the interpreter imported before the
    directory went on ``sys.path``: in a fresh venv nothing, so ``kernelgate``'s own
    ``import typing`` finds the planted one (and fails on it); where a ``.pth`` file of the
    environment imports ``typing`` at start-up (certifi's on some machines), ``asyncio``
    and ``argparse`` are the first. The attack is that any of them runs.
    """
    command = ["-m", "kernelgate.cli", "kernel", "run", "--help"]
    p = subprocess.run(
        [sys.executable, *command], cwd=planted, capture_output=True, text=True, timeout=60
    )
    ran = markers(planted)
    assert ran, (p.returncode, p.stdout, p.stderr)
    assert set(ran) <= {f"MARKER-{name}" for name in PLANTED}
    for marker in ran:
        (planted / marker).unlink()
    p = subprocess.run(
        [sys.executable, "-I", *command], cwd=planted, capture_output=True, text=True, timeout=60
    )
    assert (p.returncode, markers(planted)) == (0, []), p.stderr
    assert "connection file" in p.stdout


def test_kernelgate_run_imports_only_the_named_bindings_module(planted):
    p = kernelgate("run", "prog.py", "--bindings", "mybindings:BINDINGS", cwd=planted)
    assert p.returncode == 0, p.stderr
    assert p.stdout == "5\n"
    for spec in ("./mybindings.py:BINDINGS", f"{planted / 'mybindings.py'}:BINDINGS"):
        p = kernelgate("run", "prog.py", "--bindings", spec, cwd=planted)
        assert (p.returncode, p.stdout) == (0, "5\n"), p.stderr
    # A module found elsewhere, named as a module: the working directory is not searched.
    other = planted.parent / "elsewhere"
    other.mkdir()
    (other / "farbindings.py").write_text(BINDINGS_SOURCE)
    p = kernelgate(
        "run",
        "prog.py",
        "--bindings",
        "farbindings:BINDINGS",
        "--bindings-path",
        str(other),
        cwd=planted,
    )
    assert (p.returncode, p.stdout) == (0, "5\n"), p.stderr
    assert markers(planted) == []


def test_kernelgate_run_never_lets_the_working_directory_shadow_a_module(planted):
    # `json` names the standard library's module: the planted json.py is not it.
    p = kernelgate("run", "prog.py", "--bindings", "json:BINDINGS", cwd=planted)
    _clean_exit_2(p)
    assert "json has no attribute 'BINDINGS'" in p.stderr
    p = kernelgate("run", "prog.py", "--bindings", "nothere:BINDINGS", cwd=planted)
    _clean_exit_2(p)
    assert "cannot import 'nothere'" in p.stderr and "./nothere.py" in p.stderr
    p = kernelgate("run", "prog.py", "--bindings", "./missing.py:BINDINGS", cwd=planted)
    _clean_exit_2(p)
    assert markers(planted) == []


def test_the_kernel_imports_nothing_from_the_notebook_directory(tmp_path, planted, monkeypatch):
    """Installed from the directory holding the bindings (recorded by absolute path), the
    kernel starts in the notebook's directory with PYTHONPATH pointing there too."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "mybindings.py").write_text(BINDINGS_SOURCE)
    with started_kernel(
        tmp_path,
        monkeypatch,
        cwd=planted,
        install_args=("--bindings", "mybindings:BINDINGS"),
        install_cwd=home,
        extra_env={"PYTHONPATH": str(planted)},
    ) as (_km, kc, spec):
        from tests.kernel.helpers import execute

        assert spec["argv"][1] == "-I"
        assert spec["argv"][-2:] == ["--bindings", f"{home / 'mybindings.py'}:BINDINGS"]
        cell = execute(kc, "return await tools.add(2, 3)")
        assert cell.status == "ok", cell.events
        assert cell.outputs("execute_result")[0]["content"]["data"]["text/plain"] == "5"
    assert markers(planted) == []


def test_kernel_run_does_not_search_the_working_directory(planted):
    """``kernel run`` (the kernelspec's argv) finds a bare module name only among the
    installed modules and --bindings-path, never in the directory it starts in."""
    p = subprocess.run(
        [
            sys.executable,
            "-I",
            "-m",
            "kernelgate.cli",
            "kernel",
            "run",
            "-f",
            "none.json",
            "--bindings",
            "mybindings:BINDINGS",
        ],
        cwd=planted,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 2, p.stderr
    assert "cannot import 'mybindings'" in p.stderr and "Traceback" not in p.stderr
    assert markers(planted) == []


# -- finding 13: limits from the caller or the kernelspec; crafted recordings -----------------

BIG = {"memory_bytes": 2**40, "max_processes": 100_000, "max_frame_bytes": 2**40}

#: Reads the limits the program really got.
READS_LIMITS = program(
    """
    import resource
    print(resource.getrlimit(resource.RLIMIT_AS)[0], flush=True)
    await tools.add(1, 2)
    return 1
    """
)


@pytest.mark.timeout(120)
def test_a_cell_s_metadata_never_loosens_the_kernelspec_s_limits(tmp_path, monkeypatch):
    from tests.kernel.helpers import collect

    default = Limits()
    with started_kernel(
        tmp_path,
        monkeypatch,
        cwd=tmp_path,
        install_args=("--bindings", f"{_bindings_file(tmp_path)}:BINDINGS"),
    ) as (_km, kc, _spec):
        content = {
            "code": READS_LIMITS,
            "silent": False,
            "store_history": True,
            "user_expressions": {},
            "allow_stdin": False,
            "stop_on_error": False,
        }
        # What a saved (or crafted) cell carries, as JupyterLab sends it back.
        asked = {**default.to_dict(), **BIG, "wall_seconds": 1e9}
        msg = kc.session.msg("execute_request", content, metadata={"kernelgate": {"limits": asked}})
        kc.shell_channel.send(msg)
        cell = collect(kc, msg["header"]["msg_id"])
        assert cell.status == "ok", cell.events
        used = cell.reply["metadata"]["kernelgate"]["limits"]
        assert used == default.to_dict()
        assert int(cell.stdout().split()[0]) == default.memory_bytes  # the child's RLIMIT_AS
        # Tighter limits may be asked for (a client lowering a budget): they apply.
        msg = kc.session.msg(
            "execute_request", content, metadata={"kernelgate": {"limits": {"memory_bytes": 2**28}}}
        )
        kc.shell_channel.send(msg)
        cell = collect(kc, msg["header"]["msg_id"])
        assert cell.status == "ok", cell.events
        assert int(cell.stdout().split()[0]) == 2**28


def _bindings_file(tmp: Path) -> Path:
    path = tmp / "addbindings.py"
    path.write_text(BINDINGS_SOURCE)
    return path


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A real recording (limits, a call, a value) as JSON, to craft from."""
    from kernelgate import Gateway

    def add(a: int, b: int) -> int:
        return a + b

    r = Gateway(bindings={"add": add}, pool_size=0).run_sync(READS_LIMITS)
    assert r.ok, r.message
    path = save_run(r, tmp_path_factory.mktemp("recorded") / "run.ipynb")
    return dict(json.loads(Path(path).read_text()))


def _cell(nb: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in nb["cells"] if c.get("metadata", {}).get("kernelgate", {}).get("run_id"))


def _call(nb: dict[str, Any]) -> dict[str, Any]:
    from kernelgate.wire.messages import CALL_MIME

    return next(
        o["data"][CALL_MIME] for o in _cell(nb)["outputs"] if CALL_MIME in o.get("data", {})
    )


def _meta(nb: dict[str, Any]) -> dict[str, Any]:
    return dict(_cell(nb)["metadata"]["kernelgate"])


def test_replay_uses_the_caller_s_limits_never_the_recording_s(recorded, tmp_path):
    from kernelgate.notebooks import load_run
    from kernelgate.notebooks.replay import replay, replay_budget

    nb = json.loads(json.dumps(recorded))
    _meta_ref = _cell(nb)["metadata"]["kernelgate"]
    _meta_ref["limits"] = {**_meta_ref["limits"], **BIG, "wall_seconds": 1e9}
    path = tmp_path / "big.ipynb"
    path.write_text(json.dumps(nb))
    run = load_run(path)
    assert run.limits["memory_bytes"] == 2**40  # shown as recorded...
    report = replay(path)
    # ...never applied: the defaults, the time budgets only lowered to follow the
    # recorded duration (notebooks.replay.replay_budget), never raised.
    assert report.result.limits == replay_budget(run).to_dict()
    assert report.result.limits["wall_seconds"] <= Limits().wall_seconds
    assert {k: v for k, v in report.result.limits.items() if "seconds" not in k} == {
        k: v for k, v in Limits().to_dict().items() if "seconds" not in k
    }
    assert int(report.result.stdout.split()[0]) == Limits().memory_bytes
    mine = Limits(memory_bytes=2**28)
    report = replay(path, limits=mine)
    assert int(report.result.stdout.split()[0]) == 2**28
    # The command: the replay's own stdout shows the RLIMIT_AS the child got.
    p = kernelgate("replay", str(path), "--json")
    assert p.returncode == 0, p.stderr
    assert int(json.loads(p.stdout)["replay"]["stdout"].split()[0]) == Limits().memory_bytes


WIPE_PROGRAM = program(
    """
    import resource
    print(resource.getrlimit(resource.RLIMIT_AS)[0], flush=True)
    await tools.add(1, 2)
    try:
        await tools.wipe("/home")
    except ToolError as e:
        print("refused", e.ename)
    try:
        await tools.add(1, 2)  # once more than recorded
    except ToolError as e:
        print("refused again", e.ename)
    return 1
    """
)

LIVE_SOURCE = program(
    """
    import os

    MARKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "WIPED")


    def add(a, b):
        return a + b


    def wipe(path):
        with open(MARKER, "a") as f:
            f.write(path + "\\n")
        return "wiped " + path


    BINDINGS = {"add": add, "wipe": wipe}
    """
)


def test_replay_live_calls_only_what_the_recording_held(recorded, tmp_path):
    from kernelgate.notebooks.replay import replay

    path = tmp_path / "run.ipynb"
    path.write_text(json.dumps(recorded))
    wiped: list[str] = []

    def add(a: int, b: int) -> int:
        return a + b

    def wipe(p: str) -> str:
        wiped.append(p)
        return "wiped"

    report = replay(path, program=WIPE_PROGRAM, live={"tools": {"add": add, "wipe": wipe}})
    assert wiped == []  # the binding was never reached
    assert "refused NotRecorded" in report.result.stdout
    assert "refused again NotRecorded" in report.result.stdout
    assert report.diverged and [c.name for c in report.unrecorded] == ["wipe", "add"]
    assert "not called; the program got ToolError NotRecorded" in report.format()
    # The explicit opt-in calls anything.
    report = replay(
        path, program=WIPE_PROGRAM, live={"tools": {"add": add, "wipe": wipe}}, live_any=True
    )
    assert wiped == ["/home"] and "refused" not in report.result.stdout
    assert report.to_dict()["mode"] == "live-any"


def test_replay_live_from_the_command_line(recorded, tmp_path):
    path = tmp_path / "run.ipynb"
    path.write_text(json.dumps(recorded))
    (tmp_path / "edited.py").write_text(WIPE_PROGRAM)
    (tmp_path / "livebindings.py").write_text(LIVE_SOURCE)
    args = ("replay", str(path), "--program", "edited.py", "--live")
    p = kernelgate(*args, "--bindings", "livebindings:BINDINGS", cwd=tmp_path)
    assert p.returncode == 1, p.stderr  # diverged
    assert "DIVERGED" in p.stdout and "NotRecorded" in p.stdout
    assert not (tmp_path / "WIPED").exists()
    p = kernelgate(*args, "--live-any", "--bindings", "./livebindings.py:BINDINGS", cwd=tmp_path)
    assert p.returncode == 1, p.stderr
    assert (tmp_path / "WIPED").read_text() == "/home\n"
    _clean_exit_2(kernelgate("replay", str(path), "--live-any", cwd=tmp_path))


def _deep(n: int) -> str:
    return "[" * n + "]" * n


def _crafted(recorded: dict[str, Any]) -> dict[str, Any]:
    """name -> (the file's text, a phrase the error must contain)."""
    cases: dict[str, Any] = {}

    def case(name: str, change: Any, phrase: str) -> None:
        nb = json.loads(json.dumps(recorded))
        text = change(nb)
        cases[name] = (text if isinstance(text, str) else json.dumps(nb), phrase)

    case("string call id", lambda nb: _call(nb).update(id="0"), "id is '0'")
    case("word call id", lambda nb: _call(nb).update(id="zero"), "id is 'zero'")
    case("bool call ok", lambda nb: _call(nb).update(ok="yes"), "ok is 'yes'")
    case("NaN start", lambda nb: _call(nb).update(start_s=float("nan")), "NaN")
    case("inf duration", lambda nb: _call(nb).update(duration_s=float("inf")), "Infinity")
    case("negative time", lambda nb: _call(nb).update(start_s=-1), "start_s is -1")
    case("string time", lambda nb: _call(nb).update(duration_s="1"), "duration_s is '1'")
    case(
        "run NaN duration",
        lambda nb: _cell(nb)["metadata"]["kernelgate"].update(duration_s=float("nan")),
        "NaN",
    )
    case("missing ok", lambda nb: _call(nb).pop("ok"), "lacks ok")
    case("args not a list", lambda nb: _call(nb).update(args={"a": 1}), "expected a list")
    case(
        "status not text",
        lambda nb: _cell(nb)["metadata"]["kernelgate"].update(status=5),
        "status is 5",
    )
    case(
        "bindings not a list",
        lambda nb: _cell(nb)["metadata"]["kernelgate"].update(bindings="x"),
        "bindings is 'x'",
    )
    case(
        "error not an object",
        lambda nb: _cell(nb)["metadata"]["kernelgate"].update(error="boom"),
        "error is 'boom'",
    )
    case(
        "exit code text",
        lambda nb: _cell(nb)["metadata"]["kernelgate"].update(exit_code="0"),
        "exit_code is '0'",
    )
    case("outputs not a list", lambda nb: _cell(nb).update(outputs="x"), "outputs is 'x'")
    case("output not an object", lambda nb: _cell(nb)["outputs"].append(7), "output")
    case("source not text", lambda nb: _cell(nb).update(source=7), "source is 7")
    case(
        "key order junk",
        lambda nb: _call(nb).update(key_order={"at": "0:0", "keys": [[[]]]}),
        "key_order",
    )
    case(
        "usage not an object",
        lambda nb: _cell(nb)["metadata"]["kernelgate"].update(usage=[1]),
        "usage",
    )

    def deep_meta(nb: dict[str, Any]) -> str:
        _cell(nb)["metadata"]["kernelgate"]["usage"] = "@DEEP@"
        return json.dumps(nb).replace('"@DEEP@"', _deep(100_000))

    case("100,000-deep metadata", deep_meta, "nests JSON deeper")

    def deep_output(nb: dict[str, Any]) -> str:
        _call(nb)["value"] = "@DEEP@"
        return json.dumps(nb).replace('"@DEEP@"', _deep(100_000))

    case("100,000-deep output", deep_output, "nests JSON deeper")

    def medium_deep(nb: dict[str, Any]) -> str:  # parses, but deeper than any recording
        _call(nb)["args"] = ["@DEEP@"]
        return json.dumps(nb).replace('"@DEEP@"', _deep(700))

    case("700-deep args", medium_deep, "nests JSON deeper")
    return cases


CRAFTED_NAMES = sorted(
    [
        "string call id", "word call id", "bool call ok", "NaN start", "inf duration",
        "negative time", "string time", "run NaN duration", "missing ok", "args not a list",
        "status not text", "bindings not a list", "error not an object", "exit code text",
        "outputs not a list", "output not an object", "source not text", "key order junk",
        "usage not an object", "100,000-deep metadata", "100,000-deep output", "700-deep args",
    ]
)  # fmt: skip


@pytest.mark.parametrize("name", CRAFTED_NAMES)
def test_a_crafted_recording_gets_a_clear_error(recorded, tmp_path, name):
    from kernelgate.notebooks import load_run
    from kernelgate.notebooks.replay import replay
    from kernelgate.notebooks.store import NotARunError

    text, phrase = _crafted(recorded)[name]
    path = tmp_path / "crafted.ipynb"
    path.write_text(text)
    with pytest.raises(NotARunError) as caught:  # a ValueError
        load_run(path)
    assert phrase in str(caught.value), str(caught.value)
    assert str(path) in str(caught.value)
    with pytest.raises(ValueError):
        replay(path)
    for command in ("replay", "timeline"):
        p = kernelgate(command, str(path), cwd=tmp_path)
        _clean_exit_2(p)
        assert phrase in p.stderr, p.stderr


def test_a_huge_recording_is_refused_before_it_is_read(tmp_path):
    from kernelgate.notebooks import load_run
    from kernelgate.notebooks.store import MAX_RECORDING_BYTES, RecordingError

    path = tmp_path / "huge.ipynb"
    with open(path, "wb") as f:
        f.truncate(MAX_RECORDING_BYTES + 1)  # sparse: no disk used
    with pytest.raises(RecordingError, match="refused"):
        load_run(path)
    p = kernelgate("replay", str(path))
    _clean_exit_2(p)
    assert "refused" in p.stderr


def test_recorded_outputs_are_loaded_inert(recorded, tmp_path):
    """A recording edited to carry active content loses it when read back."""
    from kernelgate.notebooks import load_run

    nb = json.loads(json.dumps(recorded))
    _cell(nb)["outputs"].append(
        {
            "output_type": "display_data",
            "data": {
                "application/javascript": "window.pwned = 1",
                "text/html": "<b>hi</b><script>window.pwned = 1</script><img src=x onerror=alert(1)>",
                "text/plain": "hi",
            },
            "metadata": {},
        }
    )
    path = tmp_path / "active.ipynb"
    path.write_text(json.dumps(nb))
    run = load_run(path)
    shown = json.dumps(run.outputs)
    assert all("application/javascript" not in o.get("data", {}) for o in run.outputs)
    assert "<script" not in shown and "onerror" not in shown
    assert "<b>hi</b>" in shown
