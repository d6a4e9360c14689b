"""The rough edges of ``kernelgate run`` and ``Limits`` (issue 10, items 4 and 5), driven as
a user drives them: the installed ``kernelgate`` command in a subprocess.

Independent limits: ``max_frame_bytes`` follows ``max_value_bytes`` unless set.
The command line: ``--timeout`` and ``--limit`` refuse bad values with a usage error (exit
2, no traceback); ``--record`` says where it saved and refuses a bad path before running;
SIGTERM, SIGINT and SIGHUP stop a run cleanly (child killed, run directory removed, one
line on stderr, exit 128 + the signal).
"""

from __future__ import annotations

import dataclasses
import json
import os
import pickle
import signal
import subprocess
import time
from pathlib import Path

import pytest

import kernelgate
from kernelgate import Gateway, Limits, save_run
from kernelgate.model.limits import frame_headroom
from kernelgate.notebooks import load_run
from tests.procs import descendants, kernelgate_command, pid_alive

pytestmark = pytest.mark.timeout(120)

#: The checkout under test: the command imports kernelgate from here, as the tests do.
ROOT = str(Path(kernelgate.__file__).resolve().parent.parent)


def command() -> list[str]:
    return kernelgate_command()


def environment(tmpdir: Path) -> dict[str, str]:
    """The command's environment: its own TMPDIR (so what a run leaves is seen), and this
    checkout first on the path."""
    env = dict(os.environ)
    env["TMPDIR"] = str(tmpdir)
    env["PYTHONPATH"] = os.pathsep.join([ROOT, *filter(None, [env.get("PYTHONPATH")])])
    return env


def kernelgate_cmd(
    tmp_path: Path, *args: str, stdin: str = "", cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir(exist_ok=True)
    p = subprocess.run(
        [*command(), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=100,
        cwd=cwd or tmp_path,
        env=environment(tmpdir),
    )
    assert os.listdir(tmpdir) == [], f"the command left {os.listdir(tmpdir)} in its TMPDIR"
    return p


def assert_usage_error(p: subprocess.CompletedProcess[str], *words: str) -> None:
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    assert "Traceback" not in p.stderr, p.stderr
    assert p.stdout == ""
    for word in words:
        assert word in p.stderr, (word, p.stderr)


# -- Limits: max_frame_bytes follows max_value_bytes ----------------------------------------


def test_raising_max_value_bytes_alone_just_works() -> None:
    big = Limits(max_value_bytes=64 << 20)
    assert big.max_frame_bytes == (64 << 20) + frame_headroom(64 << 20)
    assert Limits().max_frame_bytes == 8 << 20  # the default is unchanged
    assert Limits(max_value_bytes=1 << 20).max_frame_bytes == 8 << 20  # never below it
    # A derived size is an ordinary int everywhere: dict, equality, JSON, pickle.
    as_dict = big.to_dict()
    assert type(as_dict["max_frame_bytes"]) is int
    assert Limits(**as_dict) == big
    assert Limits(**json.loads(json.dumps(as_dict))) == big
    assert pickle.loads(pickle.dumps(big)) == big
    # replace copies max_frame_bytes; None lets it follow again.
    again = dataclasses.replace(Limits(), max_value_bytes=64 << 20, max_frame_bytes=None)
    assert again == big


def test_an_explicit_contradiction_names_both_values_and_what_to_do() -> None:
    with pytest.raises(ValueError) as info:
        Limits(max_value_bytes=64 << 20, max_frame_bytes=8 << 20)
    message = str(info.value)
    assert "max_frame_bytes=8388608" in message and "max_value_bytes=67108864" in message
    assert f"at least {(64 << 20) + frame_headroom(64 << 20)}" in message
    assert "leave it unset (None)" in message
    # An explicit frame size that fits is kept as given.
    assert Limits(max_value_bytes=1000, max_frame_bytes=70_000).max_frame_bytes == 70_000


def test_a_value_over_the_default_frame_size_is_returned() -> None:
    # Before: Limits(max_value_bytes=64 << 20) raised ValueError unless max_frame_bytes
    # was raised by hand too.
    limits = Limits(max_value_bytes=64 << 20, wall_seconds=60)
    result = Gateway(limits=limits, pool_size=0).run_sync("return 'x' * (20 << 20)")
    assert result.ok, result.message
    assert len(result.value) == 20 << 20


@pytest.mark.parametrize(
    "program",
    [
        "return '\\x85' * (VALUE // 2 - 1)",  # repr: '\x85', 5 bytes per character as JSON
        "return '\\\\' * (VALUE // 2 - 1)",  # repr doubles each backslash, JSON again
        "return '\\U0001F600' * (VALUE // 4 - 1)",  # 4 bytes per character either way
    ],
)
@pytest.mark.parametrize("value", [1000, 1 << 20])
def test_the_least_frame_size_allowed_carries_the_largest_value(value: int, program: str) -> None:
    # The value travels with its text form. Before, a frame 64 KiB over the value was
    # allowed, and a 1 MiB value of 4-byte characters ended "protocol" (blaming fd 3).
    limits = Limits(
        max_value_bytes=value, max_frame_bytes=value + frame_headroom(value), wall_seconds=60
    )
    result = Gateway(limits=limits, pool_size=0).run_sync(program.replace("VALUE", str(value)))
    assert result.status == "ok", result.message


def test_a_recording_keeps_the_limits_it_ran_with(tmp_path: Path) -> None:
    limits = Limits(max_value_bytes=16 << 20, wall_seconds=30)
    result = Gateway(limits=limits, pool_size=0).run_sync("return 1")
    assert result.limits["max_frame_bytes"] == limits.max_frame_bytes
    loaded = load_run(save_run(result, tmp_path / "run.ipynb"))
    assert Limits(**loaded.limits) == limits


# -- --timeout and --limit ------------------------------------------------------------------


@pytest.mark.parametrize("value", ["inf", "-inf", "nan", "-1", "0", "soon"])
def test_timeout_refuses_what_is_not_a_positive_finite_number(tmp_path: Path, value: str) -> None:
    # Before: --timeout inf crashed with a traceback (exit 1).
    p = kernelgate_cmd(tmp_path, "run", "-", f"--timeout={value}", stdin="print('ran')")
    assert_usage_error(p, "--timeout", repr(value), "positive number of seconds")


def test_limit_sets_any_field(tmp_path: Path) -> None:
    program = (
        "import resource\n"
        "return [resource.getrlimit(resource.RLIMIT_NOFILE)[0], len('x' * (100 << 10))]"
    )
    p = kernelgate_cmd(
        tmp_path,
        "run",
        "-",
        "--json",
        "--limit",
        "max_open_files=100",
        "--limit=max_value_bytes=1M",
        "--limit",
        "wall_seconds=30s",
        stdin=program,
    )
    assert p.returncode == 0, p.stderr
    result = json.loads(p.stdout)
    assert result["value"] == [100, 100 << 10]
    assert result["limits"]["max_value_bytes"] == 1 << 20
    assert result["limits"]["max_open_files"] == 100
    assert result["limits"]["wall_seconds"] == 30


def test_a_value_past_the_default_budget_with_limit(tmp_path: Path) -> None:
    # 12 MiB: past the default max_frame_bytes too, which follows without being named.
    p = kernelgate_cmd(
        tmp_path, "run", "-", "--limit", "max_value_bytes=16MiB", stdin="return 'y' * (12 << 20)"
    )
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout == "y" * (12 << 20) + "\n"


@pytest.mark.parametrize(
    ("arg", "words"),
    [
        (
            "max_valu_bytes=1M",
            ["unknown limit 'max_valu_bytes'", "max_value_bytes", "wall_seconds"],
        ),
        ("max_value_bytes=lots", ["max_value_bytes", "'lots'", "positive integer"]),
        ("max_value_bytes=0", ["max_value_bytes", "'0'"]),
        ("max_calls=1.5", ["max_calls", "'1.5'"]),
        ("cpu_seconds=inf", ["cpu_seconds", "'inf'", "positive number of seconds"]),
        ("cpu_seconds=-2", ["cpu_seconds", "'-2'"]),
        ("max_calls", ["NAME=VALUE", "'max_calls'", "known names"]),
        (
            "max_frame_bytes=100K",
            ["max_frame_bytes=100K is too small for max_value_bytes=32K", "leave out --limit"],
        ),
    ],
)
def test_limit_usage_errors_name_the_field(tmp_path: Path, arg: str, words: list[str]) -> None:
    p = kernelgate_cmd(tmp_path, "run", "-", "--limit", arg, stdin="print('ran')")
    assert_usage_error(p, "--limit", *words)


def test_timeout_and_a_different_wall_seconds_disagree(tmp_path: Path) -> None:
    p = kernelgate_cmd(
        tmp_path, "run", "-", "--timeout", "5", "--limit", "wall_seconds=3", stdin="1"
    )
    assert_usage_error(p, "--timeout 5", "wall_seconds=3")


def test_a_limit_error_says_how_to_raise_it_from_the_command_line(tmp_path: Path) -> None:
    p = kernelgate_cmd(tmp_path, "run", "-", stdin="return 'x' * 40000")
    assert p.returncode == 1
    assert "raise Limits.max_value_bytes" in p.stderr
    assert "(kernelgate run: --limit max_value_bytes=N, now 32K)" in p.stderr
    p = kernelgate_cmd(
        tmp_path,
        "run",
        "-",
        "--bindings",
        "kernelgate.demo:BINDINGS",
        "--limit",
        "max_calls=2",
        stdin="for _ in range(3):\n    await tools.compute('sum', [1])",
    )
    assert p.returncode == 1
    assert "(kernelgate run: --limit max_calls=N, now 2)" in p.stderr
    # --json is for programs: the result as it is, nothing added.
    p = kernelgate_cmd(tmp_path, "run", "-", "--json", stdin="return 'x' * 40000")
    assert "kernelgate run:" not in p.stdout + p.stderr


# -- --record -------------------------------------------------------------------------------


def test_record_says_where_it_saved(tmp_path: Path) -> None:
    p = kernelgate_cmd(tmp_path, "run", "-", "--record", "out.ipynb", stdin="return 7")
    assert p.returncode == 0, p.stderr
    assert p.stdout == "7\n"  # stdout stays the program's
    assert p.stderr == f"recorded to {tmp_path / 'out.ipynb'}\n"
    assert load_run(tmp_path / "out.ipynb").value == 7
    p = kernelgate_cmd(
        tmp_path, "run", "-", "--json", "--record", str(tmp_path / "j.ipynb"), stdin="return 8"
    )
    assert json.loads(p.stdout)["value"] == 8
    assert p.stderr == f"recorded to {tmp_path / 'j.ipynb'}\n"


@pytest.mark.parametrize(
    ("path", "words"),
    [
        ("run.json", ["--record 'run.json'", "ending in .ipynb", "run.ipynb"]),
        ("run", ["--record 'run'", "ending in .ipynb"]),
        ("missing/run.ipynb", ["--record 'missing/run.ipynb'", "no directory", "missing'"]),
        ("adir.ipynb", ["is a directory"]),
    ],
)
def test_record_refuses_a_bad_path_before_running(
    tmp_path: Path, path: str, words: list[str]
) -> None:
    (tmp_path / "adir.ipynb").mkdir()
    (tmp_path / "tmp").mkdir()
    before = sorted(os.listdir(tmp_path))
    p = kernelgate_cmd(tmp_path, "run", "-", "--record", path, stdin="print('ran')")
    assert_usage_error(p, *words)  # stdout is empty: the program never ran
    assert sorted(os.listdir(tmp_path)) == before  # nothing written, no directory made


# -- signals --------------------------------------------------------------------------------

#: A program with a grandchild, that says when it is running, then waits to be stopped.
SLEEPER = """\
import subprocess, time
subprocess.Popen(["sleep", "300"])
print("ready", flush=True)
time.sleep(300)
"""


def _has_sleeper(pid: int) -> bool:
    for child in descendants(pid):
        try:
            with open(f"/proc/{child}/cmdline", "rb") as f:
                if f.read() == b"sleep\x00300\x00":
                    return True
        except OSError:
            continue
    return False


def stop_with(
    tmp_path: Path, signum: int, *args: str, live: bool = True
) -> tuple[subprocess.CompletedProcess[str], set[int]]:
    """Start ``kernelgate *args``, send ``signum`` once the program is running (it has
    printed a line; or, for a command that shows no output as it comes, its ``sleep``
    grandchild is there); return what it did and the processes it had then."""
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir(exist_ok=True)
    proc = subprocess.Popen(
        [*command(), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        env=environment(tmpdir),
    )
    try:
        assert proc.stdout is not None and proc.stderr is not None
        if live:
            line = proc.stdout.readline()
            assert line == "ready\n", (line, proc.stderr.read() if not line else "")
        else:
            # Waits on a state, not a guess: the test's timeout bounds it.
            while not _has_sleeper(proc.pid):
                assert proc.poll() is None, proc.stderr.read()
                time.sleep(0.02)
        below = descendants(proc.pid)
        assert below, "the program's processes were not found"
        assert os.listdir(tmpdir), "the run directory was not found"
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err), below


def assert_stopped_cleanly(
    tmp_path: Path, signum: int, p: subprocess.CompletedProcess[str], below: set[int]
) -> None:
    name = signal.Signals(signum).name
    assert p.returncode == 128 + signum, (p.returncode, p.stderr)
    lines = p.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"kernelgate: stopped by {name}"), p.stderr
    assert "Traceback" not in p.stderr
    assert os.listdir(tmp_path / "tmp") == [], "the run directory was left behind"
    left = sorted(pid for pid in below if pid_alive(pid))
    assert left == [], f"processes left running: {left}"


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_a_signal_stops_a_run_cleanly(tmp_path: Path, signum: int) -> None:
    # Before: SIGTERM left the run directory (the program's files) in TMPDIR; SIGINT
    # exited 130 without a word.
    (tmp_path / "sleeper.py").write_text(SLEEPER)
    p, below = stop_with(tmp_path, signum, "run", "sleeper.py")
    assert p.stdout == ""
    assert_stopped_cleanly(tmp_path, signum, p, below)


def test_sigterm_stops_a_replay_cleanly(tmp_path: Path) -> None:
    recorded = kernelgate_cmd(tmp_path, "run", "-", "--record", "r.ipynb", stdin="return 1")
    assert recorded.returncode == 0, recorded.stderr
    (tmp_path / "sleeper.py").write_text(SLEEPER)
    p, below = stop_with(
        tmp_path, signal.SIGTERM, "replay", "r.ipynb", "--program", "sleeper.py", live=False
    )
    assert_stopped_cleanly(tmp_path, signal.SIGTERM, p, below)
