"""Demo bindings over a small in-memory data set, and a sample agent program.

``kernelgate demo`` runs :data:`DEMO_PROGRAM` against :data:`BINDINGS`; ``kernelgate run
--bindings kernelgate.demo:BINDINGS`` lets you try your own program against them.
"""

from __future__ import annotations

import asyncio
import statistics
from collections.abc import Callable
from typing import Any

__all__ = ["BINDINGS", "DEMO_PROGRAM", "search", "fetch", "compute"]

_DOCS: dict[str, dict[str, Any]] = {
    "jupyter-protocol": {
        "title": "The Jupyter messaging protocol",
        "text": "Kernels and frontends talk in messages: execute_request, stream, "
        "display_data, execute_result, error and execute_reply, on shell, iopub, "
        "stdin, control and heartbeat channels.",
        "year": 2015,
        "stars": 412,
    },
    "comms": {
        "title": "Comms: custom messages between kernel and frontend",
        "text": "A comm is opened with comm_open naming a target; both sides then "
        "exchange comm_msg messages until comm_close.",
        "year": 2014,
        "stars": 188,
    },
    "nbformat": {
        "title": "The notebook format",
        "text": "A notebook is JSON: cells with sources and outputs (stream, "
        "display_data, execute_result, error), and metadata such as the kernelspec.",
        "year": 2016,
        "stars": 301,
    },
    "sandboxing": {
        "title": "Sandboxing untrusted Python",
        "text": "Run untrusted code in a fresh process with resource limits, an empty "
        "environment and namespaces; never in the host interpreter.",
        "year": 2021,
        "stars": 97,
    },
    "asyncio": {
        "title": "asyncio.gather and concurrent calls",
        "text": "asyncio.gather runs awaitables concurrently and returns their results "
        "in order, even when they complete in another order.",
        "year": 2018,
        "stars": 256,
    },
}


async def search(query: str, limit: int = 3) -> list[dict[str, Any]]:
    """Find documents whose title or text mentions every word of ``query``.

    Returns up to ``limit`` hits as ``{"id", "title", "score"}``, best first.
    """
    await asyncio.sleep(0.005)  # stands in for a network round trip
    words = [w for w in query.lower().split() if w]
    hits = []
    for doc_id, doc in _DOCS.items():
        haystack = (doc["title"] + " " + doc["text"]).lower()
        score = sum(haystack.count(w) for w in words)
        if words and all(w in haystack for w in words):
            hits.append({"id": doc_id, "title": doc["title"], "score": score})
    hits.sort(key=lambda h: (-h["score"], h["id"]))
    return hits[:limit]


async def fetch(doc_id: str) -> dict[str, Any]:
    """Return the whole document ``doc_id`` (raises KeyError for an unknown id)."""
    await asyncio.sleep(0.005)
    if doc_id not in _DOCS:
        raise KeyError(f"no document {doc_id!r}; known ids: {', '.join(sorted(_DOCS))}")
    return {"id": doc_id, **_DOCS[doc_id]}


def compute(op: str, values: list[float]) -> float:
    """Aggregate ``values`` with ``op``: one of sum, mean, median, min, max."""
    ops: dict[str, Callable[[list[float]], float]] = {
        "sum": sum,
        "mean": statistics.fmean,
        "median": statistics.median,
        "min": min,
        "max": max,
    }
    if op not in ops:
        raise ValueError(f"unknown op {op!r}; use one of {', '.join(ops)}")
    if not values:
        raise ValueError("values is empty")
    return float(ops[op](values))


BINDINGS: dict[str, Callable[..., Any]] = {"search": search, "fetch": fetch, "compute": compute}

DEMO_PROGRAM = """\
# An agent's program: search, fetch the hits concurrently, aggregate, report.
import asyncio

hits = await tools.search("messages", limit=3)
print(f"search found {len(hits)} documents:")
for hit in hits:
    print(f"  - {hit['id']}: {hit['title']}")

docs = await asyncio.gather(*(tools.fetch(h["id"]) for h in hits))
stars = [d["stars"] for d in docs]
mean = await tools.compute("mean", stars)
print(f"mean stars: {mean:.1f}")

try:
    await tools.fetch("no-such-doc")
except ToolError as exc:
    print(f"as expected, {exc.tool} failed with {exc.ename}")

return {"documents": [d["id"] for d in docs], "mean_stars": mean}
"""
