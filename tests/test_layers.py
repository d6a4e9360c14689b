"""The import contract: kernelgate's layers import downward only, and stay light.

Layers, lowest first (docs/design.md draws them):

    wire                 the fd-3 protocol, stdlib only (the child imports it)
    model                RunResult, Limits, signatures, codec, text: stdlib (+ wire)
    kernels              the child: wire, model, stdlib
    gateway              the host runtime
    notebooks            runs as notebooks
    jupyter, mcp         the Jupyter front; MCP client and server (siblings)
    cli                  the ``kernelgate`` command

Every ``import`` of a kernelgate module is checked, at module level and inside functions
alike (a lazy import is allowed for speed, never to point upward), by reading the AST of
every module, so the contract needs no third-party tool and cannot be skipped.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "kernelgate"

#: Rank of each layer: a module may import modules of its own rank or lower.
RANK = {
    "wire": 0,
    "model": 1,
    "kernels": 2,
    "gateway": 3,
    "notebooks": 4,
    "jupyter": 5,
    "mcp": 5,
    "cli": 7,
}

#: Which same-rank siblings may import each other (none: jupyter and mcp stay apart).
SIBLINGS_APART = {("jupyter", "mcp"), ("mcp", "jupyter")}

#: The wire imports nothing of ours; the model may use the wire, not the reverse.
BOTTOM = {"wire": set(), "model": {"wire"}}

#: Modules outside the layers. ``kernelgate`` (the package) is the facade that exports
#: lazily from every layer; ``kernelgate.demo`` is plain demo bindings (stdlib only).
FACADE = {"kernelgate"}
STDLIB_ONLY = {"kernelgate.demo"}

#: The host uses the children's packages only for their paths and loader source
#: (``package_root``, ``LOADER``, ``ZYGOTE_LOADER``; the Node kernel's ``KERNEL_JS`` and
#: ``kernel_argv``), never the child's code.
HOST_MAY_USE_CHILD = {"kernelgate.kernels.python", "kernelgate.kernels.node"}

def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports(path: Path) -> list[tuple[str, int]]:
    """Every kernelgate module ``path`` imports, with the line, at any depth."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: list[tuple[str, int]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            # ``from kernelgate.x import y`` may import the module kernelgate.x.y.
            targets = [target] + [f"{target}.{a.name}" for a in node.names]
            targets = [t for t in targets if _exists(t)] or [target]
        elif isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        else:
            continue
        if targets == ["kernelgate"] and isinstance(node, ast.ImportFrom):
            if all(a.name == "__version__" for a in node.names):
                continue  # the version lives on the facade; reading it is no layering
        found += [(t, node.lineno) for t in targets if t.split(".")[0] == "kernelgate"]
    return found


def _exists(module: str) -> bool:
    rel = Path(*module.split("."))
    base = ROOT.parent / rel
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def layer(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in RANK else None


def modules() -> list[Path]:
    return sorted(ROOT.rglob("*.py"))


def violations() -> list[str]:
    bad: list[str] = []
    for path in modules():
        source = module_name(path)
        if source in FACADE:
            continue
        here = layer(source)
        for target, line in imports(path):
            where = f"{path.relative_to(ROOT.parent)}:{line}: {source} imports {target}"
            there = layer(target)
            if source in STDLIB_ONLY:
                bad.append(f"{where} (it is stdlib only)")
            elif there is None:
                if target in FACADE and here is not None:
                    bad.append(f"{where} (import from the layer, not the facade)")
                elif target in STDLIB_ONLY:
                    continue
                elif here is not None:
                    bad.append(f"{where} (outside every layer)")
            elif here is None:
                bad.append(f"{where} (a module outside the layers)")
            elif here in BOTTOM:
                if there != here and there not in BOTTOM[here]:
                    bad.append(f"{where} ({here} may import only {sorted(BOTTOM[here])})")
            elif (here, there) in SIBLINGS_APART:
                bad.append(f"{where} ({here} and {there} are siblings, apart)")
            elif RANK[there] > RANK[here]:
                bad.append(f"{where} (upward: {here} is below {there})")
            elif here != "kernels" and there == "kernels" and target not in HOST_MAY_USE_CHILD:
                bad.append(f"{where} (the host imports child code; only its paths)")
    return bad


def test_imports_point_down_only() -> None:
    bad = violations()
    assert not bad, "layering broken (see tests/test_layers.py):\n" + "\n".join(bad)


def test_no_cycles_between_subpackages() -> None:
    edges: dict[str, set[str]] = {}
    for path in modules():
        source = module_name(path)
        here = layer(source)
        if here is None:
            continue
        for target, _ in imports(path):
            there = layer(target)
            if there and there != here:
                edges.setdefault(here, set()).add(there)

    def reach(start: str, seen: set[str]) -> set[str]:
        for nxt in edges.get(start, ()):
            if nxt not in seen:
                seen.add(nxt)
                reach(nxt, seen)
        return seen

    cycles = [p for p in edges if p in reach(p, set())]
    assert not cycles, f"subpackages in an import cycle: {cycles}; edges {edges}"


@pytest.mark.parametrize(
    ("layer_dir", "source"),
    [
        ("wire", "from kernelgate.gateway.gateway import Gateway\n"),
        # The edge there once was: the model writing a run through the notebooks, lazily.
        ("model", "def save(r):\n    from kernelgate.notebooks import save_run\n"),
        # Nor may the gateway reach the notebooks for its record_to=DIR.
        ("gateway", "def save(r):\n    import kernelgate.notebooks.store\n"),
    ],
)
def test_the_contract_catches_an_upward_import(layer_dir: str, source: str) -> None:
    """The checker can fail: an upward import planted in a layer, at module level or inside
    a function, is reported."""
    planted = ROOT / layer_dir / "_planted_for_test.py"
    planted.write_text(source)
    try:
        bad = violations()
    finally:
        planted.unlink()
    assert any("_planted_for_test" in b for b in bad), bad


def _loaded(code: str) -> list[str]:
    """The modules a fresh interpreter has loaded after running ``code``."""
    out = subprocess.run(
        [
            sys.executable,
            "-I",
            "-c",
            f"{code}\nimport sys, json\nprint(json.dumps(list(sys.modules)))",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        cwd="/",
    ).stdout
    return list(json.loads(out.splitlines()[-1]))


HEAVY = ("zmq", "nbformat", "jupyter_client", "nh3", "markdown_it", "mcp")


@pytest.mark.parametrize(
    ("code", "absent"),
    [
        # The facade: nothing but itself.
        ("import kernelgate", ("kernelgate.gateway", "kernelgate.model", *HEAVY)),
        # Recordings are read without the runtime: no pool, no sandbox, no zmq.
        (
            "import kernelgate.notebooks",
            (
                "kernelgate.gateway.pool",
                "kernelgate.gateway.sandbox",
                "kernelgate.gateway.run",
                "kernelgate.jupyter",
                "zmq",
                "nbformat",
                "jupyter_client",
            ),
        ),
        # The model is what every layer shares: stdlib only.
        (
            "import kernelgate.model.result, kernelgate.model.limits, kernelgate.model.text",
            ("kernelgate.gateway", "kernelgate.notebooks", "kernelgate.wire.connection", *HEAVY),
        ),
        # The child: wire, model and its own modules only.
        (
            "import kernelgate.kernels.python.bootstrap",
            ("kernelgate.gateway", "kernelgate.notebooks", "kernelgate.jupyter", *HEAVY),
        ),
        # A Gateway needs neither the Jupyter front nor the notebooks; nor the run writer
        # until a gateway records to a directory.
        (
            "import kernelgate.gateway.gateway",
            (
                "kernelgate.jupyter",
                "kernelgate.notebooks",
                "kernelgate.gateway.recording",
                "kernelgate.cli",
                "zmq",
                "nbformat",
            ),
        ),
        # Writing runs (what record_to=DIR and save_run use) needs no runtime nor nbformat.
        (
            "import kernelgate.gateway.recording.store",
            (
                "kernelgate.notebooks",
                "kernelgate.gateway.pool",
                "kernelgate.gateway.sandbox",
                "kernelgate.gateway.run",
                "zmq",
                "nbformat",
            ),
        ),
    ],
)
def test_imports_stay_light(code: str, absent: tuple[str, ...]) -> None:
    loaded = _loaded(code)
    heavy = [m for m in loaded if any(m == a or m.startswith(a + ".") for a in absent)]
    assert not heavy, f"{code!r} loads {heavy}"
