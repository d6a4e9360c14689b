"""``kernelgate run prog.ts|prog.js`` and ``kernelgate replay`` of a TypeScript recording,
as a user types them (a real ``kernelgate`` process each)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.procs import kernelgate_command

pytestmark = [
    pytest.mark.skipif(shutil.which("node") is None, reason="node (>= 18) is not installed"),
    pytest.mark.timeout(120),
]

TOOLS = '''\
def search(query: str, limit: int = 2) -> list:
    """Search."""
    return [f"{query}-{i}" for i in range(limit)]
'''

PROGRAM = """\
interface Hit { id: string }
const hits: string[] = await tools.search("q", {limit: 3});
console.log("found", hits.length);
hits.map((id): Hit => ({id}))
"""


def kernelgate(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*kernelgate_command(), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=100,
        check=False,
    )


def test_a_typescript_file_runs_records_and_replays(tmp_path: Path) -> None:
    (tmp_path / "tools.py").write_text(TOOLS)
    (tmp_path / "agent.ts").write_text(PROGRAM)
    done = kernelgate(
        "run", "agent.ts", "--bindings", "./tools.py", "--record", "agent.ipynb", cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("found 3\n")
    assert "q-2" in done.stdout
    notebook = json.loads((tmp_path / "agent.ipynb").read_text())
    assert notebook["metadata"]["language_info"]["name"] == "typescript"
    assert notebook["metadata"]["kernelspec"]["language"] == "typescript"
    replayed = kernelgate("replay", "agent.ipynb", cwd=tmp_path)
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    assert "1 matched of 1 recorded" in replayed.stdout
    assert "MATCHES" in replayed.stdout


def test_the_extension_or_language_picks_the_language(tmp_path: Path) -> None:
    (tmp_path / "a.js").write_text("const a = 20;\na + 1\n")
    assert kernelgate("run", "a.js", cwd=tmp_path).stdout.strip() == "21"
    (tmp_path / "a.txt").write_text("const a: number = 20;\na * 2\n")
    done = kernelgate("run", "a.txt", "--language", "typescript", cwd=tmp_path)
    assert done.stdout.strip() == "40", done.stderr


def test_a_syntax_error_is_shown_at_its_line_and_column(tmp_path: Path) -> None:
    (tmp_path / "bad.ts").write_text("const ok = 1;\nlet x: = 1\n")
    done = kernelgate("run", "bad.ts", cwd=tmp_path)
    assert done.returncode == 1
    assert "SyntaxError" in done.stderr and "line 2, column 8" in done.stderr
    assert "    let x: = 1\n           ^" in done.stderr


def test_a_missing_node_is_a_usage_error_naming_what_was_looked_for(tmp_path: Path) -> None:
    (tmp_path / "a.ts").write_text("1\n")
    done = kernelgate("run", "a.ts", "--node", str(tmp_path / "no-node"), cwd=tmp_path)
    assert done.returncode == 2
    assert "Node.js was not found" in done.stderr and "no-node" in done.stderr
    assert "Traceback" not in done.stderr
