"""``kernelgate kernel install``, ``list`` and ``uninstall``, as a user runs them.

A kernel installed from one directory, with bindings that live there, starts from any
other (Jupyter starts kernels in the notebook's directory, which is never searched).
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from jupyter_client.manager import start_new_kernel

from kernelgate.cli import main
from tests.procs import kernelgate_command

from .conftest import drain
from .helpers import execute

pytestmark = pytest.mark.timeout(120)

BINDINGS = """
def triple(x: int) -> int:
    return 3 * x


BINDINGS = {"triple": triple}
"""


@pytest.fixture
def place(tmp_path: Path) -> Iterator[Path]:
    """A prefix of our own, first on JUPYTER_PATH for the test (restored after)."""
    prefix = tmp_path / "prefix"
    saved = os.environ.get("JUPYTER_PATH")
    os.environ["JUPYTER_PATH"] = os.pathsep.join(
        [str(prefix / "share" / "jupyter"), *filter(None, [saved])]
    )
    try:
        yield prefix
    finally:
        if saved is None:
            os.environ.pop("JUPYTER_PATH", None)
        else:
            os.environ["JUPYTER_PATH"] = saved


def test_installed_from_one_directory_it_starts_from_another(
    place: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "mytools.py").write_text(BINDINGS)
    monkeypatch.chdir(project)
    code = main(
        ["kernel", "install", "--prefix", str(place), "--name", "kg-mine", "--bindings", "mytools:BINDINGS"]
    )
    assert code == 0
    spec = json.loads((place / "share/jupyter/kernels/kg-mine/kernel.json").read_text())
    # Recorded by its absolute path: the kernel will not search its working directory.
    assert spec["argv"][spec["argv"].index("--bindings") + 1] == f"{project / 'mytools.py'}:BINDINGS"
    # The launcher's icon, in the names JupyterLab looks for.
    spec_dir = place / "share/jupyter/kernels/kg-mine"
    for size in (32, 64):
        png = (spec_dir / f"logo-{size}x{size}.png").read_bytes()
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and png[16:24] == struct.pack(">II", size, size)
    assert (spec_dir / "logo-svg.svg").read_text().startswith("<svg ")

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    km, kc = start_new_kernel(kernel_name="kg-mine", startup_timeout=60, cwd=str(elsewhere))
    try:
        drain(kc)
        reply = kc.execute_interactive("return await tools.triple(14)", timeout=60)
        assert reply["content"]["status"] == "ok"
    finally:
        kc.stop_channels()
        km.shutdown_kernel()

    capsys.readouterr()
    assert main(["kernel", "list"]) == 0
    listed = capsys.readouterr().out
    assert "kg-mine" in listed and "mytools.py:BINDINGS" in listed, listed
    assert main(["kernel", "list", "--json"]) == 0
    entries = json.loads(capsys.readouterr().out)
    mine = [e for e in entries if e["name"] == "kg-mine"]
    assert mine and mine[0]["bindings"].endswith("mytools.py:BINDINGS")


def test_uninstall_removes_only_kernelgate_kernels(
    place: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["kernel", "install", "--prefix", str(place), "--name", "kg-gone"]) == 0
    kernels = place / "share/jupyter/kernels"
    assert (kernels / "kg-gone" / "kernel.json").is_file()
    # Another kernel's spec in the same place is refused, with what to do instead.
    other = kernels / "not-ours"
    other.mkdir()
    (other / "kernel.json").write_text(
        json.dumps({"argv": ["python", "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                    "display_name": "other", "language": "python"})
    )
    capsys.readouterr()
    assert main(["kernel", "uninstall", "--prefix", str(place), "--name", "not-ours"]) == 2
    err = capsys.readouterr().err
    assert "does not start kernelgate" in err and "jupyter kernelspec remove" in err
    assert other.is_dir()

    # Without a place: the one Jupyter would start is removed, wherever it is.
    assert main(["kernel", "uninstall", "--name", "kg-gone"]) == 0
    assert not (kernels / "kg-gone").exists()
    assert main(["kernel", "uninstall", "--name", "kg-gone"]) == 2
    assert "no kernelgate kernel named 'kg-gone'" in capsys.readouterr().err
    # A place that does not hold it says where it looked.
    assert main(["kernel", "uninstall", "--prefix", str(place), "--name", "kg-gone"]) == 2
    assert str(kernels) in capsys.readouterr().err


# -- what the kernel will be able to load (it runs python -I: no PYTHONPATH) ----------------


def _install(place: Path, name: str, bindings: str, *, cwd: Path, pythonpath: Path | None = None):
    """``kernelgate kernel install`` as a user runs it (its own process, this environment)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    return subprocess.run(
        [*kernelgate_command(), "kernel", "install", "--prefix", str(place), "--name", name,
         "--bindings", bindings],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=120,
    )


def _recorded(place: Path, name: str) -> str:
    spec = json.loads((place / f"share/jupyter/kernels/{name}/kernel.json").read_text())
    return spec["argv"][spec["argv"].index("--bindings") + 1]


@pytest.mark.parametrize("layout", ["module", "package"])
def test_a_module_found_only_through_pythonpath_is_recorded_by_its_path(
    place: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, layout: str
) -> None:
    """``PYTHONPATH=lib kernelgate kernel install --bindings pptools:BINDINGS``: the kernel
    (``python -I``) does not see PYTHONPATH, so the module is recorded by its file, and the
    kernel started through jupyter_client runs a cell with it."""
    lib = tmp_path / "lib"
    lib.mkdir()
    if layout == "module":
        (lib / "pptools.py").write_text(BINDINGS)
        expected = lib / "pptools.py"
    else:
        (lib / "pptools").mkdir()
        (lib / "pptools" / "impl.py").write_text(BINDINGS)
        (lib / "pptools" / "__init__.py").write_text("from .impl import BINDINGS\n")
        expected = lib / "pptools" / "__init__.py"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    p = _install(place, "kg-pp", "pptools:BINDINGS", cwd=elsewhere, pythonpath=lib)
    assert p.returncode == 0, p.stderr
    assert _recorded(place, "kg-pp") == f"{expected}:BINDINGS"
    assert "PYTHONPATH" in p.stderr and str(expected) in p.stderr  # says what it did, and why
    monkeypatch.chdir(elsewhere)
    monkeypatch.setenv("PYTHONPATH", str(lib))  # as in the user's shell: the kernel ignores it
    km, kc = start_new_kernel(kernel_name="kg-pp", startup_timeout=60, cwd=str(elsewhere))
    try:
        drain(kc)
        cell = execute(kc, "return await tools.triple(14)", timeout=60)
        assert cell.status == "ok", cell.events
        assert cell.outputs("execute_result")[0]["content"]["data"]["text/plain"] == "42"
    finally:
        kc.stop_channels()
        km.shutdown_kernel()


def test_what_the_kernel_cannot_load_is_refused_at_install(place: Path, tmp_path: Path) -> None:
    """A module of a package found only through PYTHONPATH has no file of its own to record
    (its package would not import): install refuses, saying why and what to do, and installs
    nothing. So does a bindings file whose own imports need PYTHONPATH."""
    lib = tmp_path / "lib"
    (lib / "ppkg").mkdir(parents=True)
    (lib / "ppkg" / "__init__.py").write_text("")
    (lib / "ppkg" / "tools.py").write_text(BINDINGS)
    (lib / "pphelper.py").write_text("FACTOR = 3\n")
    (tmp_path / "uses_helper.py").write_text("import pphelper\n" + BINDINGS)
    p = _install(place, "kg-no", "ppkg.tools:BINDINGS", cwd=tmp_path, pythonpath=lib)
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert "PYTHONPATH" in p.stderr and "python -I" in p.stderr, p.stderr
    assert "pip install" in p.stderr and "--bindings-path" not in p.stderr
    assert "Traceback" not in p.stderr
    p = _install(place, "kg-no", "./uses_helper.py:BINDINGS", cwd=tmp_path, pythonpath=lib)
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert "pphelper" in p.stderr and "python -I" in p.stderr, p.stderr
    assert not (place / "share/jupyter/kernels/kg-no").exists()


@pytest.mark.parametrize("breakage", ["deleted", "raises"])
def test_a_kernel_whose_bindings_fail_to_load_starts_and_says_why_in_every_cell(
    place: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, breakage: str
) -> None:
    """Its bindings module deleted (or broken) after install: the kernel still starts (a
    kernel that exits at start is restarted by JupyterLab in a loop), answers kernel_info,
    and every cell's reply is an error naming the module and what to do."""
    project = tmp_path / "project"
    project.mkdir()
    module = project / "gonetools.py"
    module.write_text(BINDINGS)
    p = _install(place, "kg-broken", "./gonetools.py:BINDINGS", cwd=project)
    assert p.returncode == 0, p.stderr
    if breakage == "deleted":
        module.unlink()
        why = "gonetools.py"
    else:
        module.write_text("raise RuntimeError('the database is down')\n")
        why = "RuntimeError: the database is down"
    monkeypatch.chdir(tmp_path)
    km, kc = start_new_kernel(kernel_name="kg-broken", startup_timeout=60, cwd=str(tmp_path))
    try:
        pid = km.provisioner.process.pid
        info = kc.kernel_info(reply=True, timeout=30)
        assert info["content"]["implementation"] == "kernelgate"
        drain(kc)
        for code in ("return await tools.triple(14)", "1 + 1"):
            cell = execute(kc, code, stop_on_error=False, timeout=60)
            assert cell.status == "error", cell.events
            reply = cell.reply["content"]
            assert reply["ename"] == "BindingsError", reply
            assert str(module) in reply["evalue"] and why in reply["evalue"], reply["evalue"]
            assert "kernelgate kernel install" in reply["evalue"], reply["evalue"]
            errors = cell.outputs("error")
            assert errors and errors[0]["content"]["evalue"] == reply["evalue"]
        assert km.is_alive() and km.provisioner.process.pid == pid  # never restarted
    finally:
        kc.stop_channels()
        km.shutdown_kernel()
