"""A connection's task cancelled before its first step never runs its own ending: the
link still settles the opening its callers wait for, and says the connection ended."""

from __future__ import annotations

import asyncio

import pytest

from kernelgate.mcp.link import Link, server_spec

from .conftest import TOOLS_SERVER

pytestmark = pytest.mark.timeout(60)


def test_a_link_closed_in_the_turn_it_starts_connecting_leaves_no_caller_waiting():
    """``start()`` makes the connection's task; ``aclose()`` in the same loop turn cancels
    it before it starts. The caller of ``start()`` gets an answer (here: cancelled), not
    a wait for ever, and the connection is marked ended."""
    link = Link(server_spec(TOOLS_SERVER), connect_timeout=10)

    async def main():
        starting = asyncio.ensure_future(link.start())
        await asyncio.sleep(0)  # start() runs up to its wait: the task is made, not run
        seen = link._seen
        assert seen is not None and link._task is not None and not link._task.done()
        await link.aclose()  # cancels the connection's task before its first step
        done, _ = await asyncio.wait([starting], timeout=10)
        if not done:
            starting.cancel()
        return bool(done), starting, seen

    finished, starting, seen = asyncio.run(main())
    assert finished, "start() still waited for an opening that will never come"
    assert starting.cancelled()
    assert seen.ended.is_set() and seen.closed == "it was closed"
