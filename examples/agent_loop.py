"""An agent loop you can read: a scripted model, the run_code tool, a session notebook.

The model here is a script (no network, no API key): it answers the way a real model's
Messages API would, with ``tool_use`` blocks holding programs. Swap ``ScriptedModel`` for
a real client (``anthropic.Anthropic().messages.create(model=..., system=SYSTEM,
tools=[tool], messages=messages)``) and the loop stays the same:

1. the prompt is built from ``gw.tool_schema("anthropic")`` (its description embeds
   ``gw.describe()``: the bindings as a Python stub);
2. the model's first program fails (a wrong argument), the failure text goes back to it as
   the ``tool_result``;
3. it corrects the program, which runs; it answers;
4. the whole session is one notebook (``Gateway(record_to=SessionLog(...))``), replayed
   at the end without the live bindings.

Run it: ``python examples/agent_loop.py [session.ipynb]``.
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from kernelgate import Gateway, Limits
from kernelgate.demo import BINDINGS
from kernelgate.notebooks import SessionLog, replay

SYSTEM = (
    "You answer questions about a small document corpus. Use the run_code tool: write one "
    "program per step that calls the bindings and returns what you need."
)
QUESTION = "Which documents mention messages, and what is their mean star count?"

# What the scripted model writes. The first program passes a keyword the binding does not
# take (`top_k` instead of `limit`): kernelgate refuses it at the program's line, before
# any call is made, and says what the signature is.
FIRST_PROGRAM = """\
hits = await tools.search("messages", top_k=3)
return hits
"""
SECOND_PROGRAM = """\
import asyncio
hits = await tools.search("messages", limit=3)
docs = await asyncio.gather(*(tools.fetch(h["id"]) for h in hits))
mean = await tools.compute("mean", [d["stars"] for d in docs])
print(f"{len(docs)} documents")
return {"documents": [d["title"] for d in docs], "mean_stars": mean}
"""


class ScriptedModel:
    """Stands in for a model: reads the conversation, answers with content blocks."""

    def __init__(self) -> None:
        self.turn = 0

    def respond(
        self, system: str, tools: list[dict[str, Any]], messages: list[dict[str, Any]]
    ) -> list[dict[str, Any]]:
        assert tools[0]["name"] == "run_code" and "async def search" in tools[0]["description"]
        self.turn += 1
        if self.turn == 1:
            return [
                {
                    "type": "tool_use",
                    "id": "call-1",
                    "name": "run_code",
                    "input": {"code": FIRST_PROGRAM},
                }
            ]
        last = messages[-1]["content"][0]
        if self.turn == 2:
            # A real model reads the error; the script checks it got the right one.
            assert last["is_error"] and "unexpected keyword argument 'top_k'" in last["content"]
            return [
                {"type": "text", "text": "The search takes `limit`, not `top_k`; retrying."},
                {
                    "type": "tool_use",
                    "id": "call-2",
                    "name": "run_code",
                    "input": {"code": SECOND_PROGRAM},
                },
            ]
        assert not last["is_error"]
        value = json.loads(last["content"].split("returned:\n", 1)[1])
        titles = "; ".join(value["documents"])
        return [{"type": "text", "text": f"{titles}. Mean stars: {value['mean_stars']:.1f}."}]


async def agent(session_path: Path) -> tuple[str, list[dict[str, Any]]]:
    """Run the loop; return the final answer and the conversation."""
    log = SessionLog(session_path, title="agent_loop.py session")
    model = ScriptedModel()
    async with Gateway(bindings=BINDINGS, record_to=log, limits=Limits(wall_seconds=30)) as gw:
        tool = gw.tool_schema("anthropic")
        messages: list[dict[str, Any]] = [{"role": "user", "content": QUESTION}]
        for _ in range(5):  # a bound on the turns: a loop that never ends is a bug
            reply = model.respond(SYSTEM, [tool], messages)
            messages.append({"role": "assistant", "content": reply})
            uses = [block for block in reply if block["type"] == "tool_use"]
            if not uses:
                return reply[-1]["text"], messages
            results = []
            for use in uses:
                out = await gw.run_tool(use["input"]["code"], max_chars=4000)
                print(f"--- run_code ({'error' if out.is_error else 'ok'}) ---\n{out.text}\n")
                results.append(out.to_anthropic(use["id"]))
            messages.append({"role": "user", "content": results})
    raise RuntimeError("the model did not answer within 5 turns")


def main(argv: list[str]) -> int:
    path = Path(argv[1]) if len(argv) > 1 else Path(tempfile.mkdtemp()) / "session.ipynb"
    answer, _ = asyncio.run(agent(path))
    print(f"--- answer ---\n{answer}\n")
    print(f"session notebook: {path} ({len(SessionLog(path))} runs)")
    # Replay the corrected run from the recording: no live bindings are called.
    report = replay(path, cell=2)
    print(
        f"replay of run 2: {'diverged' if report.diverged else 'same as recorded'}, "
        f"{len(report.matched)} calls answered from the recording"
    )
    return 1 if report.diverged else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
