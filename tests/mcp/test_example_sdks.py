"""examples/agent_loop.py with the real SDKs: the anthropic and openai clients, unchanged,
against a fake API server on loopback that answers as the real APIs do.

The fake Messages API answers with the example's own scripted model (so the requests the
SDK serialised, assistant blocks as pydantic objects included, are what it reads); the
fake Chat Completions API with a script of tool calls. Both check what the loop sends.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from kernelgate.notebooks import SessionLog

anthropic = pytest.importorskip("anthropic")
openai = pytest.importorskip("openai")

EXAMPLE = Path(__file__).parents[2] / "examples" / "agent_loop.py"


def _example() -> Any:
    spec = importlib.util.spec_from_file_location("agent_loop_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@contextmanager
def fake_api(path: str, answer: Callable[[dict[str, Any]], dict[str, Any]]) -> Iterator[str]:
    """An HTTP server on 127.0.0.1 answering POSTs to ``path`` with ``answer(request
    JSON)``; its base URL. A failed check in ``answer`` is a 500 the client raises."""
    errors: list[BaseException] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            try:
                assert self.path == path, self.path
                reply, status = json.dumps(answer(json.loads(body))).encode(), 200
            except BaseException as exc:  # the test fails with it, below
                errors.append(exc)
                reply, status = json.dumps({"error": {"message": repr(exc)}}).encode(), 500
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)
    if errors:
        raise errors[0]


@pytest.mark.timeout(180)
def test_the_loop_runs_with_the_real_anthropic_client(tmp_path: Path) -> None:
    example = _example()
    script = example.ScriptedModel()
    requests: list[dict[str, Any]] = []

    def messages_api(request: dict[str, Any]) -> dict[str, Any]:
        requests.append(request)
        blocks = script.respond(request["system"], request["tools"], request["messages"])
        uses = any(b["type"] == "tool_use" for b in blocks)
        return {
            "id": f"msg_{len(requests)}",
            "type": "message",
            "role": "assistant",
            "model": request["model"],
            "content": blocks,
            "stop_reason": "tool_use" if uses else "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": 10, "output_tokens": 10},
        }

    with fake_api("/v1/messages", messages_api) as url:
        client = anthropic.Anthropic(api_key="test-key", base_url=url, max_retries=0)
        model = example.AnthropicModel(client, "claude-test")
        answer, messages = asyncio.run(example.agent(tmp_path / "s.ipynb", model))

    assert answer.endswith("Mean stars: 300.0.")
    # The SDK's own objects went back as the assistant's turns, and arrived as blocks.
    assert isinstance(messages[1]["content"][0], anthropic.types.ToolUseBlock)
    assert requests[1]["messages"][1]["content"][0]["type"] == "tool_use"
    assert requests[2]["messages"][3]["content"][1]["input"] == {"code": example.SECOND_PROGRAM}
    assert [r.status for r in SessionLog(tmp_path / "s.ipynb").runs()] == ["exception", "ok"]


@pytest.mark.timeout(180)
def test_the_openai_loop_runs_with_the_real_openai_client(tmp_path: Path) -> None:
    example = _example()
    requests: list[dict[str, Any]] = []

    def call(n: int, arguments: str) -> dict[str, Any]:
        return {
            "id": f"call_{n}",
            "type": "function",
            "function": {"name": "run_code", "arguments": arguments},
        }

    def completions_api(request: dict[str, Any]) -> dict[str, Any]:
        requests.append(request)
        turn = len(requests)
        assert request["tools"][0]["function"]["name"] == "run_code"
        last = request["messages"][-1]
        content: str | None = None
        calls: list[dict[str, Any]] = []
        if turn == 1:
            calls = [call(1, json.dumps({"code": example.FIRST_PROGRAM})), call(2, "{not json")]
        elif turn == 2:
            tool_messages = request["messages"][-2:]
            assert "unexpected keyword argument 'top_k'" in tool_messages[0]["content"]
            assert tool_messages[1]["content"].startswith("error (invalid input): run_code")
            calls = [call(3, json.dumps({"code": example.SECOND_PROGRAM}))]
        else:
            assert last["role"] == "tool" and last["tool_call_id"] == "call_3"
            value = json.loads(last["content"].split("returned:\n", 1)[1])
            content = f"Mean stars: {value['mean_stars']:.1f}."
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if calls:
            message["tool_calls"] = calls
        return {
            "id": f"chatcmpl-{turn}",
            "object": "chat.completion",
            "created": 0,
            "model": request["model"],
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": "tool_calls" if calls else "stop",
                }
            ],
        }

    with fake_api("/v1/chat/completions", completions_api) as url:
        client = openai.OpenAI(api_key="test-key", base_url=f"{url}/v1", max_retries=0)
        answer, messages = asyncio.run(
            example.agent_openai(tmp_path / "s.ipynb", client, "gpt-test")
        )
    assert answer == "Mean stars: 300.0."
    assert [m["role"] for m in messages] == [
        "system", "user", "assistant", "tool", "tool", "assistant", "tool", "assistant",
    ]
    # The malformed call ran nothing: two runs recorded.
    assert [r.status for r in SessionLog(tmp_path / "s.ipynb").runs()] == ["exception", "ok"]
