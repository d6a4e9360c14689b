from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from kernelgate import Gateway, Limits, RunResult, save_run
from kernelgate.demo import BINDINGS, DEMO_PROGRAM

FAST = Limits(wall_seconds=30, kill_grace_seconds=0.5)

#: A gather program against the demo bindings whose value and stdout depend on the answers.
GATHER_PROGRAM = """\
import asyncio
hits = await tools.search("the", limit=5)
docs = await asyncio.gather(*(tools.fetch(h["id"]) for h in hits))
for d in docs:
    print(d["id"], list(d), d["stars"])
total = await tools.compute("sum", [d["stars"] for d in docs])
print("total", total)
{"ids": [d["id"] for d in docs], "total": total}
"""


def demo_gateway(**kwargs: Any) -> Gateway:
    return Gateway(bindings=BINDINGS, limits=FAST, **kwargs)


@pytest.fixture(scope="module")
def demo_run() -> RunResult:
    """The demo program run for real against the demo bindings."""
    result = demo_gateway().run_sync(DEMO_PROGRAM)
    assert result.ok, result.message
    return result


@pytest.fixture(scope="module")
def gather_run() -> RunResult:
    result = demo_gateway().run_sync(GATHER_PROGRAM)
    assert result.ok, result.message
    assert len(result.calls) >= 4
    return result


@pytest.fixture
def saved_demo(tmp_path: Path, demo_run: RunResult) -> Path:
    return save_run(demo_run, tmp_path / "demo.ipynb")


class Ordered:
    """Bindings whose completion order is forced: ``slow`` finishes only after ``fast``.

    No sleeps: ``slow`` waits on an event that ``fast`` sets, so the recording has the
    first-issued call completing last, whatever the machine's speed.
    """

    def __init__(self) -> None:
        self.fast_done: asyncio.Event | None = None

    def _event(self) -> asyncio.Event:
        if self.fast_done is None:
            self.fast_done = asyncio.Event()
        return self.fast_done

    async def slow(self, key: str) -> dict[str, Any]:
        await self._event().wait()
        return {"key": key, "from": "slow"}

    async def fast(self, key: str) -> dict[str, Any]:
        self._event().set()
        return {"key": key, "from": "fast"}

    def bindings(self) -> dict[str, Any]:
        return {"slow": self.slow, "fast": self.fast}
