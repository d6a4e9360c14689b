"""``kernelgate replay --debug``, driven as a user drives it: the installed command, a
recording it made itself, debugger commands piped into its standard input."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

from tests.notebooks.test_replay_debug import PROGRAM
from tests.procs import descendants, kernelgate_command, pid_alive

pytestmark = pytest.mark.timeout(180)

#: Line 3 is the call that failed when the program ran (the binding raised KeyError).
# The recorded agent program, shared with tests/notebooks/test_replay_debug.py.

BINDINGS = """\
def search(query: str) -> list:
    return [query + "-1", query + "-gone"]


def fetch(doc_id: str) -> dict:
    if doc_id.endswith("-gone"):
        raise KeyError("no document " + repr(doc_id))
    return {"id": doc_id}


BINDINGS = {"search": search, "fetch": fetch}
"""


def cli(tmp_path: Path, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    """The command in ``tmp_path``, with a TMPDIR of its own that it must leave empty."""
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir(exist_ok=True)
    p = subprocess.run(
        [*kernelgate_command(), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=150,
        cwd=tmp_path,
        env={**os.environ, "TMPDIR": str(tmpdir)},
    )
    assert os.listdir(tmpdir) == [], f"the command left {os.listdir(tmpdir)} in its TMPDIR"
    return p


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run recorded by ``kernelgate run --record``: its second call failed."""
    where = tmp_path_factory.mktemp("recorded")
    (where / "agenttools.py").write_text(BINDINGS)
    (where / "prog.py").write_text(PROGRAM)
    p = cli(where, "run", "prog.py", "--bindings", "agenttools:BINDINGS", "--record", "r.ipynb")
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("fetch failed: KeyError\n")
    (where / "agenttools.py").unlink()  # a replay needs no bindings: prove it
    return where / "r.ipynb"


def debug(recording: Path, *args: str, stdin: str) -> subprocess.CompletedProcess[str]:
    return cli(recording.parent, "replay", recording.name, "--debug", *args, stdin=stdin)


def test_stepping_through_the_call_that_failed_when_it_ran(recording: Path) -> None:
    commands = "p hits\nn\nn\nn\nn\np failure\np failure.ename\nlocals\nbt\nl\nc\n"
    p = debug(recording, "--break", "3", stdin=commands)
    out = p.stdout
    assert p.returncode == 0, (out, p.stderr)
    assert "Traceback" not in p.stderr, p.stderr
    assert out.startswith(f"debugging a replay of {recording.name}: breakpoints at line 3;")
    assert "stopped at line 3 (breakpoint)\n    3 ->     doc = await tools.fetch(hits[1])" in out
    assert "(replay) p hits\n['kernel-1', 'kernel-gone']\n" in out
    # the call lines as the program reaches them: the first before the stop, the failed
    # one (answered from the recording: the bindings module is gone) after stepping over
    before, after = out.split("stopped at line 3", 1)
    assert "call: tools.search('kernel') -> ['kernel-1', 'kernel-gone']" in before
    assert "call: tools.fetch('kernel-gone') -> raised KeyError" in after
    assert "stopped at line 6" in after
    assert "fetch failed: KeyError" in after
    assert "ToolError" in after and "no document 'kernel-gone'" in after
    assert "(replay) p failure.ename\n'KeyError'\n" in out
    assert "\nfailure = " in out and "\nhits = " in out  # locals (the top level's)
    assert "> line " in out and " in <module>: " in out  # bt
    assert out.rstrip().endswith(
        "MATCHES: same calls with the same answers, same status, stdout, stderr and value"
    )


def test_without_a_breakpoint_it_stops_at_the_first_statement(recording: Path) -> None:
    p = debug(recording, stdin="l\nc\n")
    assert p.returncode == 0, (p.stdout, p.stderr)
    assert "stopping at the first statement (line 1)" in p.stdout
    assert "stopped at line 1 (entry)\n    1 -> hits = await tools.search" in p.stdout
    assert "\n    1  -> hits = await" in p.stdout  # the listing, the current line marked
    assert "\n    3         doc = await tools.fetch(hits[1])\n" in p.stdout
    assert p.stdout.count("stopped at") == 1


def test_the_end_of_input_continues_to_the_end(recording: Path) -> None:
    p = debug(recording, "--break", "3", "--break", "6", stdin="")
    assert p.returncode == 0, (p.stdout, p.stderr)
    assert "(end of input: the program continues to its end)" in p.stdout
    assert "stopped at line 3" in p.stdout and "stopped at line 6" in p.stdout
    assert "MATCHES" in p.stdout


def test_an_edited_line_changes_the_outcome(recording: Path) -> None:
    edited = recording.parent / "edited.py"
    edited.write_text(PROGRAM.replace("hits[1]", "hits[0]"))
    p = debug(recording, "--program", "edited.py", "--break", "6", stdin="p exc\nc\n")
    assert p.returncode == 1, (p.stdout, p.stderr)
    assert "call: tools.fetch('kernel-1') -> raised NotRecorded" in p.stdout
    assert "NotRecorded" in p.stdout.split("(replay) p exc", 1)[1]
    assert "+ tools.fetch('kernel-1')" in p.stdout and "DIVERGED" in p.stdout


def test_breakpoints_set_and_cleared_at_the_prompt(recording: Path) -> None:
    commands = "b 99\nb 2x\nb 4\nb 6\nb\ncl 4\nfrobnicate\nc\nc\n"
    p = debug(recording, "--break", "1", stdin=commands)
    out = p.stdout
    assert p.returncode == 0, (out, p.stderr)
    assert "*** no such line 99: the program has lines 1 to 8" in out
    assert "*** a breakpoint is a program line number, not '2x'" in out
    assert 'breakpoint at line 6: print("fetch failed:", exc.ename)' in out
    assert "cleared the breakpoint at line 4" in out
    assert "*** unknown command 'frobnicate': type help for the commands" in out
    stops = [line for line in out.splitlines() if line.startswith("stopped at")]
    assert stops == ["stopped at line 1 (breakpoint)", "stopped at line 6 (breakpoint)"]


def test_quit_stops_the_program_and_leaves_nothing(recording: Path) -> None:
    p = debug(recording, "--break", "3", stdin="help\nq\n")
    assert p.returncode == 1, (p.stdout, p.stderr)
    assert "n, next" in p.stdout and "p EXPR" in p.stdout  # help
    assert "quit: the program was stopped before its end; no replay report" in p.stdout
    assert "MATCHES" not in p.stdout and "fetch failed" not in p.stdout


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--break", "99"], "--break: no such line 99: the program has lines 1 to 8"),
        (["--break", "two"], "a breakpoint is a program line number, not 'two'"),
        (["--program", "noted.py", "--break", "1"], "line 1 is blank or a comment"),
        (["--live", "--bindings", "x:Y"], "--debug does not go with --live"),
        (["--json"], "--debug does not go with --json"),
        (["--program", "missing.py"], "cannot read program 'missing.py'"),
    ],
)
def test_usage_errors_say_what_was_wrong(recording: Path, args: list[str], says: str) -> None:
    (recording.parent / "noted.py").write_text("# the agent's program\n" + PROGRAM)
    p = debug(recording, *args, stdin="c\n")
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert "Traceback" not in p.stderr and says in p.stderr, p.stderr
    assert p.stdout == ""


def test_break_needs_debug_and_a_missing_file_is_said(recording: Path) -> None:
    p = cli(recording.parent, "replay", recording.name, "--break", "3")
    assert p.returncode == 2 and "--break LINE goes with --debug" in p.stderr
    p = cli(recording.parent, "replay", "nope.ipynb", "--debug")
    assert p.returncode == 2 and "cannot read 'nope.ipynb'" in p.stderr


def test_a_crafted_recording_cannot_drive_the_terminal(recording: Path) -> None:
    """The recording's program and output are shown with control characters escaped: an
    OSC 52 sequence (write the clipboard) or a screen clear reaches the terminal as text."""
    nb = json.loads(recording.read_text())
    cell = nb["cells"][0]
    osc = "\x1b]52;c;ZXZpbA==\x07"
    cell["source"] = f"# {osc} \x1b[2J\n" + "".join(cell["source"]) + "print('\\x1b[2J')\n"
    for output in cell["outputs"]:
        if output.get("output_type") == "stream":
            output["text"] = "".join(output["text"]) + osc + "\n"
    crafted = recording.parent / "crafted.ipynb"
    crafted.write_text(json.dumps(nb))
    p = cli(recording.parent, "replay", crafted.name, "--debug", stdin="l\nc\n")
    assert p.returncode == 1, (p.stdout, p.stderr)  # the recorded stdout differs
    assert "stopped at line 2 (entry)" in p.stdout
    assert "\x1b" not in p.stdout and "\x07" not in p.stdout
    assert "    1     # \\x1b]52;c;ZXZpbA==\\x07 \\x1b[2J" in p.stdout  # the listing
    assert "-\\x1b]52;c;ZXZpbA==\\x07" in p.stdout  # the report's stdout diff


def test_a_crafted_recording_cannot_drive_the_terminal_of_a_plain_replay(
    recording: Path,
) -> None:
    """The same for ``kernelgate replay`` without --debug: its report quotes the recorded
    stdout (a diff), escaped."""
    nb = json.loads(recording.read_text())
    for output in nb["cells"][0]["outputs"]:
        if output.get("output_type") == "stream":
            output["text"] = "".join(output["text"]) + "\x1b]52;c;ZXZpbA==\x07\n"
    crafted = recording.parent / "crafted-plain.ipynb"
    crafted.write_text(json.dumps(nb))
    for args in ([], ["--cell", "1"]):
        p = cli(recording.parent, "replay", crafted.name, *args)
        assert p.returncode == 1, (p.stdout, p.stderr)
        assert "\x1b" not in p.stdout and "\x07" not in p.stdout
        assert "-\\x1b]52;c;ZXZpbA==\\x07" in p.stdout


def test_the_first_stop_skips_a_docstring_and_future_imports(recording: Path) -> None:
    """Neither runs as a line of the program (compiled away, hoisted): the stop without a
    breakpoint is at the first statement that does."""
    program = '"""The agent\'s program."""\nfrom __future__ import annotations\n' + PROGRAM
    (recording.parent / "documented.py").write_text(program)
    p = debug(recording, "--program", "documented.py", stdin="c\n")
    assert "stopping at the first statement (line 3)" in p.stdout, p.stdout
    assert "stopped at line 3 (entry)" in p.stdout, p.stdout
    assert "fetch failed: KeyError" in p.stdout


def test_docstring_examples() -> None:
    import doctest

    from kernelgate.cli import replaydebug

    assert doctest.testmod(replaydebug).failed == 0


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_at_the_prompt_ends_the_session_cleanly(recording: Path, signum: int) -> None:
    """Stopped at a breakpoint, waiting for a command that never comes (stdin open, no
    end): a signal kills the child, removes its run directory and exits 128 + signal."""
    tmpdir = recording.parent / f"tmp-{signum}"
    tmpdir.mkdir()
    proc = subprocess.Popen(
        [*kernelgate_command(), "replay", recording.name, "--debug", "--break", "3"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=recording.parent,
        env={**os.environ, "TMPDIR": str(tmpdir)},
    )
    try:
        assert proc.stdout is not None
        seen = []
        while not seen or not seen[-1].startswith("    3 -> "):  # the stop, then its line
            line = proc.stdout.readline()
            assert line, (seen, proc.poll())
            seen.append(line)
        below = descendants(proc.pid)
        assert below and os.listdir(tmpdir), "the stopped run's child and directory"
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 128 + signum, (proc.returncode, out, err)
    assert err.startswith(f"kernelgate: stopped by {signal.Signals(signum).name}"), err
    assert "Traceback" not in err
    assert os.listdir(tmpdir) == [], "the run directory was left behind"
    assert sorted(pid for pid in below if pid_alive(pid)) == [], "processes left running"


def test_an_uncaught_failure_stops_where_it_was_raised(tmp_path: Path) -> None:
    """A program that did not catch the failed call: stepping over it stops at the
    exception (the recording's answer, raised again), before the program ends with it."""
    (tmp_path / "agenttools.py").write_text(BINDINGS)
    uncaught = 'hits = await tools.search("kernel")\ndoc = await tools.fetch(hits[1])\nprint(doc)\n'
    (tmp_path / "uncaught.py").write_text(uncaught)
    p = cli(
        tmp_path, "run", "uncaught.py", "--bindings", "agenttools:BINDINGS", "--record", "u.ipynb"
    )
    assert p.returncode == 1 and "ToolError" in p.stderr
    p = cli(tmp_path, "replay", "u.ipynb", "--debug", "--break", "2", stdin="n\np hits\nc\n")
    assert p.returncode == 0, (p.stdout, p.stderr)  # it failed as it did when it ran
    assert (
        "stopped at line 2 (exception: ToolError: tools.fetch failed: KeyError: "
        "\"no document 'kernel-gone'\")\n    2 -> doc = await tools.fetch(hits[1])"
    ) in p.stdout
    assert "(replay) p hits\n['kernel-1', 'kernel-gone']\n" in p.stdout
    assert 'File "<program>", line 2, in <module>' in p.stdout  # the program's traceback
    assert "MATCHES" in p.stdout
