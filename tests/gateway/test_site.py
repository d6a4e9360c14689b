"""A cold child starts without ``site`` (``python -I -S``): it is given the path ``site``
would have made, the builtins ``site`` adds, and ``site`` itself the first time a program
imports a module that path does not hold. A program sees what it saw with ``site``: the
same sys.path, the same importable modules, warm or cold, at every level."""

from __future__ import annotations

import ast
import asyncio
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kernelgate import Gateway
from kernelgate.gateway.sandbox import LEVELS, probe_support

from .conftest import FAST, warmed_up

# A finder module in site-packages that a .pth import line loads, as an editable install's
# finder is loaded: the only way to import ``kg_hooked`` is to run that line.
_FINDER = '''
import importlib.abc, importlib.util, sys

class _Loader(importlib.abc.Loader):
    def create_module(self, spec):
        return None

    def exec_module(self, module):
        module.WHERE = "a finder a .pth import line installed"

class _Finder:
    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name == "kg_hooked":
            return importlib.util.spec_from_loader(name, _Loader())
        return None

sys.meta_path.append(_Finder)
sys.kg_pth_ran = True
'''

PROGRAM = textwrap.dedent(
    """
    import sys
    before = getattr(sys, "kg_pth_ran", False)
    import kg_plain, kg_path_line
    between = getattr(sys, "kg_pth_ran", False)
    import kg_hooked
    return {
        "no_site": sys.flags.no_site,
        "ran_before_any_miss": before,
        "ran_after_found_imports": between,
        "ran_at_the_end": getattr(sys, "kg_pth_ran", False),
        "where": [kg_plain.WHERE, kg_path_line.WHERE, kg_hooked.WHERE],
    }
    """
)
WHERE = ["site-packages", "a .pth path line", "a finder a .pth import line installed"]


@pytest.fixture(scope="module")
def site_python(tmp_path_factory) -> str:
    """A venv whose site-packages holds a module, a .pth path line and a .pth import line."""
    root = tmp_path_factory.mktemp("site")
    venv = root / "venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120
    )
    python = str(venv / "bin" / "python")
    purelib = subprocess.run(
        [python, "-I", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.strip()
    extra = root / "extra"
    extra.mkdir()
    (extra / "kg_path_line.py").write_text("WHERE = 'a .pth path line'\n")
    site_packages = Path(purelib)
    (site_packages / "kg_plain.py").write_text("WHERE = 'site-packages'\n")
    (site_packages / "kg_finder.py").write_text(_FINDER)
    (site_packages / "kg_test.pth").write_text(f"{extra}\nimport kg_finder\n")
    return python


def _levels(python: str) -> list[str]:
    support = probe_support(python)
    return [level for level in LEVELS if not support.missing(level)]


@pytest.mark.parametrize("level", LEVELS)
def test_cold_child_runs_site_only_when_a_program_needs_it(level, site_python, make_gateway):
    if level not in _levels(site_python):
        pytest.skip(f"{level} is not available here")
    gw: Gateway = make_gateway(python=site_python, pool_size=0, sandbox=level, limits=FAST)
    r = gw.run_sync(PROGRAM)
    assert r.ok, r.message + r.stderr
    assert r.value == {
        "no_site": 1,
        "ran_before_any_miss": False,  # nothing of the .pth import line ran at start
        "ran_after_found_imports": False,  # site-packages and path lines need no site
        "ran_at_the_end": True,  # the miss of kg_hooked ran it, and the import succeeded
        "where": WHERE,
    }
    assert r.stderr == ""


@pytest.mark.parametrize("level", LEVELS)
def test_warm_and_cold_children_see_the_same_interpreter(level, site_python, make_gateway):
    if level not in _levels(site_python):
        pytest.skip(f"{level} is not available here")
    gw: Gateway = make_gateway(python=site_python, pool_size=1, sandbox=level, limits=FAST)
    cold: Gateway = make_gateway(python=site_python, pool_size=0, sandbox=level, limits=FAST)
    seen = textwrap.dedent(
        """
        import builtins, site, sys, sysconfig
        names = ["exit", "quit", "copyright", "credits", "license", "help"]
        return {
            "path": sys.path,
            "prefixes": [sys.prefix, sys.exec_prefix, sysconfig.get_paths()["purelib"]],
            "site": [site.getsitepackages(), site.ENABLE_USER_SITE],
            "builtins": {n: type(getattr(builtins, n, None)).__name__ for n in names},
            "exit": repr(exit),
        }
        """
    )

    async def main():
        await warmed_up(gw)
        warm_seen, warm_program = await gw.run(seen), await gw.run(PROGRAM)
        return warm_seen, warm_program, await cold.run(seen)

    warm_seen, warm_program, cold_seen = asyncio.run(main())
    assert warm_seen.ok and warm_program.ok and cold_seen.ok
    assert warm_seen.usage["warm"] and not cold_seen.usage["warm"]
    assert warm_seen.value == cold_seen.value
    assert cold_seen.value["prefixes"][0].endswith("venv")  # the venv's, as site sets it
    assert cold_seen.value["builtins"]["exit"] == "Quitter"
    assert cold_seen.value["builtins"]["help"] == "_Helper"
    # The zygote ran site when it started: its children have what the .pth line did.
    assert warm_program.value["where"] == WHERE and warm_program.value["no_site"] == 0


def test_program_exit_and_help_work_cold(make_gateway):
    gw: Gateway = make_gateway(pool_size=0, limits=FAST, bindings={"add": lambda a, b: a + b})
    r = gw.run_sync("help(tools)\nprint(repr(quit))\nexit(0)")
    assert r.ok, r.message
    assert "def add(" in r.stdout and "Use quit() or Ctrl-D (i.e. EOF) to exit" in r.stdout


def test_probe_reports_what_site_makes(site_python):
    support = probe_support(site_python)
    made = subprocess.run(
        [
            site_python,
            "-I",
            "-c",
            "import sys, site; print(repr([[p for p in sys.path if p], sys.prefix, "
            "site.PREFIXES]))",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    path, prefix, prefixes = ast.literal_eval(made)
    assert support.site is not None
    assert list(support.site.path) == path and any(p.endswith("extra") for p in path)
    assert support.site.prefix == support.site.exec_prefix == prefix  # the venv's
    assert prefix.endswith("venv") and list(support.site.prefixes) == prefixes
    assert support.site.enable_user_site is False  # -I
