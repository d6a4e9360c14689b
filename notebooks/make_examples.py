"""Regenerate the example notebooks in this folder from real runs.

    python notebooks/make_examples.py

* ``demo_run.ipynb``: ``kernelgate demo``'s program, recorded with ``kernelgate.save_run()``.
* ``session_log.ipynb``: an agent session of four runs, one of them failing, recorded
  with ``kernelgate.notebooks.SessionLog``.

Both run against ``kernelgate.demo:BINDINGS`` and use only ``tools.search``,
``tools.fetch`` and ``tools.compute``. The files are checked in exactly as this script
writes them; ``tests/notebooks/test_examples.py`` checks that they validate, read back,
re-render byte for byte, and replay without divergence.
"""

from __future__ import annotations

import sys
from pathlib import Path

from kernelgate import Gateway, save_run
from kernelgate.demo import BINDINGS, DEMO_PROGRAM
from kernelgate.notebooks import SessionLog

HERE = Path(__file__).resolve().parent
DEMO_RUN = HERE / "demo_run.ipynb"
SESSION_LOG = HERE / "session_log.ipynb"
SESSION_TITLE = "Example agent session: how popular are the protocol documents?"

#: An agent's session, one program per turn: explore, slip, recover, answer.
SESSION = [
    # 1. look around
    """\
hits = await tools.search("kernel messages", limit=5)
for hit in hits:
    print(hit["id"], "-", hit["title"])
[hit["id"] for hit in hits]
""",
    # 2. a guessed document id: the binding raises, the program does not catch it
    """\
doc = await tools.fetch("kernel-messages")
doc["stars"]
""",
    # 3. recover: fetch the ids the search returned, concurrently
    """\
import asyncio

hits = await tools.search("kernel messages", limit=5)
docs = await asyncio.gather(*(tools.fetch(hit["id"]) for hit in hits))
for doc in docs:
    print(f"{doc['id']}: {doc['stars']} stars, {doc['year']}")
{doc["id"]: doc["stars"] for doc in docs}
""",
    # 4. answer: aggregate over everything
    """\
import asyncio

hits = await tools.search("the", limit=5)
docs = await asyncio.gather(*(tools.fetch(hit["id"]) for hit in hits))
stars = [doc["stars"] for doc in docs]
mean, top = await asyncio.gather(tools.compute("mean", stars), tools.compute("max", stars))
best = next(doc["title"] for doc in docs if doc["stars"] == top)
print(f"{len(docs)} documents, {mean:.0f} stars on average; most starred: {best}")
{"documents": len(docs), "mean_stars": mean, "most_starred": best}
""",
]


def main() -> int:
    gw = Gateway(bindings=BINDINGS)
    demo = gw.run_sync(DEMO_PROGRAM)
    if not demo.ok:
        print(f"the demo run failed: {demo.message}", file=sys.stderr)
        return 1
    save_run(demo, DEMO_RUN)
    print(f"wrote {DEMO_RUN.name}: {demo.status}, {len(demo.calls)} calls")

    SESSION_LOG.unlink(missing_ok=True)
    log = SessionLog(SESSION_LOG, title=SESSION_TITLE)
    for program in SESSION:
        result = gw.run_sync(program)
        number = log.append(result)
        print(f"  run {number}: {result.status}, {len(result.calls)} calls")
    print(f"wrote {SESSION_LOG.name}: {len(log)} runs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
