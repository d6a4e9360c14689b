"""An agent loop you can read: a model, the run_code tool, a session notebook.

The model here is a script by default (no network, no API key): it answers the way a real
model's Messages API would, with ``tool_use`` blocks holding programs. The same loop runs
with a real client: ``AnthropicModel(anthropic.Anthropic())`` (the SDK's ``Message``
content blocks are pydantic objects, not dicts: the loop reads both), and
``agent_openai`` is the loop for OpenAI's Chat Completions with ``openai.OpenAI()``:

1. the prompt is built from ``gw.tool_schema("anthropic")`` (its description embeds
   ``gw.describe()``: the bindings as a Python stub);
2. the model's first program fails (a wrong argument), the failure text goes back to it as
   the ``tool_result``;
3. it corrects the program, which runs; it answers;
4. the whole session is one notebook (``Gateway(record_to=SessionLog(...))``), replayed
   at the end without the live bindings.

Run it: ``python examples/agent_loop.py [session.ipynb]``; with a real model,
``--anthropic MODEL`` or ``--openai MODEL`` (the SDK reads its API key and base URL from
the environment, as usual).
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


def field(block: Any, name: str) -> Any:
    """``block[name]`` for a dict, ``block.name`` for an SDK object (a pydantic model)."""
    return block[name] if isinstance(block, dict) else getattr(block, name)


class ScriptedModel:
    """Stands in for a model: reads the conversation, answers with content blocks."""

    def __init__(self) -> None:
        self.turn = 0

    def respond(
        self, system: str, tools: list[dict[str, Any]], messages: list[dict[str, Any]]
    ) -> list[Any]:
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


class AnthropicModel:
    """A real model through the anthropic SDK (``anthropic.Anthropic()``): its answer is
    the ``Message``'s content blocks, SDK objects the loop reads as they are."""

    def __init__(self, client: Any, model: str, max_tokens: int = 4096) -> None:
        self.client, self.model, self.max_tokens = client, model, max_tokens

    def respond(
        self, system: str, tools: list[dict[str, Any]], messages: list[dict[str, Any]]
    ) -> list[Any]:
        message = self.client.messages.create(
            model=self.model,
            max_tokens=self.max_tokens,
            system=system,
            tools=tools,
            messages=messages,
        )
        return list(message.content)


async def agent(session_path: Path, model: Any = None) -> tuple[str, list[dict[str, Any]]]:
    """Run the loop with ``model`` (a :class:`ScriptedModel` unless given); return the
    final answer and the conversation."""
    log = SessionLog(session_path, title="agent_loop.py session")
    model = model if model is not None else ScriptedModel()
    async with Gateway(bindings=BINDINGS, record_to=log, limits=Limits(wall_seconds=30)) as gw:
        tool = gw.tool_schema("anthropic")
        messages: list[dict[str, Any]] = [{"role": "user", "content": QUESTION}]
        for _ in range(5):  # a bound on the turns: a loop that never ends is a bug
            # The model's client blocks: off the event loop the gateway runs on.
            reply = await asyncio.to_thread(model.respond, SYSTEM, [tool], messages)
            messages.append({"role": "assistant", "content": reply})
            uses = [block for block in reply if field(block, "type") == "tool_use"]
            if not uses:
                return field(reply[-1], "text"), messages
            results = []
            for use in uses:
                # The tool input as the model sent it ({"code": ...}): run_tool answers a
                # malformed one with an error the model can read.
                out = await gw.run_tool(field(use, "input"), max_chars=4000)
                print(f"--- run_code ({'error' if out.is_error else 'ok'}) ---\n{out.text}\n")
                results.append(out.to_anthropic(field(use, "id")))
            messages.append({"role": "user", "content": results})
    raise RuntimeError("the model did not answer within 5 turns")


def _arguments(text: str) -> Any:
    """A tool call's arguments (JSON text) as the tool input, or what run_tool refuses
    with a message the model reads."""
    try:
        return json.loads(text)
    except ValueError:
        return {"arguments that are not JSON": text[:200]}


async def agent_openai(
    session_path: Path, client: Any, model: str
) -> tuple[str, list[dict[str, Any]]]:
    """The same loop for OpenAI's Chat Completions (``client``: ``openai.OpenAI()``)."""
    log = SessionLog(session_path, title="agent_loop.py session (OpenAI)")
    async with Gateway(bindings=BINDINGS, record_to=log, limits=Limits(wall_seconds=30)) as gw:
        tool = gw.tool_schema("openai")
        messages: list[Any] = [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": QUESTION},
        ]
        for _ in range(5):
            completion = await asyncio.to_thread(
                client.chat.completions.create, model=model, messages=messages, tools=[tool]
            )
            message = completion.choices[0].message
            messages.append(message.model_dump(exclude_none=True))
            if not message.tool_calls:
                return message.content or "", messages
            for call in message.tool_calls:
                out = await gw.run_tool(_arguments(call.function.arguments), max_chars=4000)
                print(f"--- run_code ({'error' if out.is_error else 'ok'}) ---\n{out.text}\n")
                messages.append(out.to_openai(call.id))
    raise RuntimeError("the model did not answer within 5 turns")


def main(argv: list[str]) -> int:
    args = argv[1:]
    vendor = model_name = None
    if args[:1] in (["--anthropic"], ["--openai"]) and len(args) >= 2:
        vendor, model_name, args = args[0][2:], args[1], args[2:]
    path = Path(args[0]) if args else Path(tempfile.mkdtemp()) / "session.ipynb"
    if vendor == "anthropic":
        import anthropic

        answer, _ = asyncio.run(agent(path, AnthropicModel(anthropic.Anthropic(), model_name)))
    elif vendor == "openai":
        import openai

        answer, _ = asyncio.run(agent_openai(path, openai.OpenAI(), str(model_name)))
    else:
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
