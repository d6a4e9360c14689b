"""CI starts where a newcomer starts: ``.ci/run`` runs the README's Quick start commands,
as written, in a fresh venv of its own (none of the machine's installed packages seen)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _quick_start_commands() -> list[str]:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Quick start", 1)[1]
    block = re.search(r"```sh\n(.*?)```", section, re.S)
    assert block, "the README's Quick start has no sh block"
    commands = [line.split("#", 1)[0].strip() for line in block.group(1).splitlines()]
    return [c for c in commands if c]


def test_ci_runs_the_readme_s_commands_in_a_fresh_venv() -> None:
    commands = _quick_start_commands()
    assert commands == [
        "pip install -e . && kernelgate demo",
        "pip install -e '.[test]' && python -m pytest",
    ]
    lines = [line.strip() for line in (ROOT / ".ci/run").read_text().splitlines()]
    code = [line for line in lines if line and not line.startswith("#")]
    # Its own venv, made without the machine's site-packages, and activated before them.
    made = [i for i, line in enumerate(code) if re.search(r"-m venv \S", line)]
    assert made and "--system-site-packages" not in code[made[0]], code
    activated = [i for i, line in enumerate(code) if re.match(r'(\.|source) "?\$venv/bin/activate', line)]
    assert activated and activated[0] > made[0], code
    at = activated[0]
    for command in commands:
        # As written; `|| ...` only keeps set -e from ignoring the first part's failure.
        ran = [i for i, line in enumerate(code) if line.split(" || ")[0] == command]
        assert ran and ran[0] > at, f".ci/run does not run {command!r} in its venv"
        at = ran[0]
    assert any(line.startswith("ruff check") for line in code[at:]), code
    assert any(line.startswith("mypy") for line in code[at:]), code
    # No pip install of the project other than the README's own. Enterprise Gateway goes
    # into a venv of its own (it pins jupyter_client<7), never the project or this venv.
    eg = [line for line in code if "$eg_venv/bin/pip" in line]
    assert all("jupyter_enterprise_gateway" in line and "-e" not in line.split() for line in eg)
    installs = [line for line in code if "pip install" in line and line not in eg]
    assert [line.split(" || ")[0] for line in installs] == commands
