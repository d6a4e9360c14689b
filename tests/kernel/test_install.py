"""``kernelgate kernel install``, ``list`` and ``uninstall``, as a user runs them.

A kernel installed from one directory, with bindings that live there, starts from any
other (Jupyter starts kernels in the notebook's directory, which is never searched).
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest
from jupyter_client.manager import start_new_kernel

from kernelgate.cli import main

from .conftest import drain

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
