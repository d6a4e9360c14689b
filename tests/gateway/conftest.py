from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from kernelgate import Gateway, Limits, RunResult
from kernelgate.gateway.process import owner_prefix


async def search(query: str, limit: int = 5) -> list[dict[str, Any]]:
    """Search the test corpus."""
    await asyncio.sleep(0)
    return [{"query": query, "rank": i} for i in range(limit)]


def add(a: int, b: int) -> int:
    return a + b


def fail(message: str) -> None:
    raise ValueError(message)


def echo(*args: Any, **kwargs: Any) -> dict[str, Any]:
    return {"args": list(args), "kwargs": kwargs}


BINDINGS: dict[str, Callable[..., Any]] = {
    "search": search,
    "add": add,
    "fail": fail,
    "echo": echo,
    "with-dash": add,
}

FAST = Limits(wall_seconds=20, kill_grace_seconds=0.5)


def _whose(base: str, name: str) -> str:
    """A left-behind entry, with whose it is (its name carries its owner, see
    ``owner_prefix``) and what is in it: enough to tell one race from another."""
    owner = "this test process" if name.startswith(owner_prefix()) else "another process"
    try:
        inside = sorted(os.listdir(os.path.join(base, name)))[:5]
    except OSError as exc:
        inside = [f"({exc.strerror})"]
    return f"{name} ({owner}; holds {inside})"


@pytest.fixture
def run_dir_base(tmp_path) -> Iterator[str]:
    """A directory of the test's own for its gateways' run directories: empty at the end.
    (Only this test's gateways write here: other kernelgate hosts on the machine use
    their own TMPDIR.)"""
    base = tmp_path / "runs"
    base.mkdir()
    yield str(base)
    left = [_whose(str(base), name) for name in sorted(os.listdir(base))]
    assert not left, f"run directories left behind: {left}"


@pytest.fixture
def gateway(run_dir_base, no_fd_leak) -> Iterator[Gateway]:
    gw = Gateway(bindings=BINDINGS, limits=FAST, tmp_dir=run_dir_base)
    yield gw
    gw.close()


@pytest.fixture
def make_gateway(run_dir_base, no_fd_leak) -> Iterator[Callable[..., Gateway]]:
    """Gateways with their run directories under the checked base; closed at teardown."""
    made: list[Gateway] = []

    def _make(**kwargs: Any) -> Gateway:
        kwargs.setdefault("tmp_dir", run_dir_base)
        gw = Gateway(**kwargs)
        made.append(gw)
        return gw

    yield _make
    for gw in made:
        gw.close()


@pytest.fixture
def run(gateway) -> Callable[..., RunResult]:
    def _run(program: str, **kwargs: Any) -> RunResult:
        return gateway.run_sync(program, **kwargs)

    return _run


async def filled(gw: Gateway) -> None:
    """Wait until the gateway's pool has finished its background refill."""
    pool = gw._pool
    if pool is not None and pool._filler is not None:
        await pool._filler


async def warmed_up(gw: Gateway) -> None:
    """A first run (which starts the zygote), then the pool filled: later runs are warm."""
    first = await gw.run("1")
    assert first.ok, first.message
    await filled(gw)


def sleeper(marker: str, ignore_sigterm: bool = False) -> str:
    """Source for a program line starting a long-lived grandchild tagged with ``marker``."""
    code = "import signal, time; "
    if ignore_sigterm:
        code += "signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    code += "time.sleep(600)"
    return f"subprocess.Popen([sys.executable, '-c', {code!r}, {marker!r}])"
