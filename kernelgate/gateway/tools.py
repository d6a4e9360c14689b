"""The ``run_code`` tool: its definition in an API's shape, and a run as text for a model.

An agent loop gives a model one tool, ``run_code``, whose description explains the
program model and embeds ``describe()``; runs the code the model sends with
``Gateway.run_tool``; and hands back :attr:`ToolOutput.text`: what the program printed,
then its value as JSON, or, on failure, the kind, the message, the program's traceback and
what it printed before failing, cut to ``max_chars`` with a marker saying so.

>>> from kernelgate.model.result import RunResult
>>> print(tool_output(RunResult(status="ok", value={"n": 3}, stdout="hi\\n")).text)
printed:
hi
returned:
{"n": 3}
"""

from __future__ import annotations

import json
from typing import Any

from kernelgate.model.result import RunResult

from .toolresult import MAX_CHARS, MIN_CHARS, ToolOutput, tool_output

__all__ = [
    "APIS",
    "MAX_CHARS",
    "MIN_CHARS",
    "INTROS",
    "TOOL_NAME",
    "RunResult",
    "ToolOutput",
    "tool_description",
    "tool_output",
    "tool_schema",
]

#: The tool's name in every API.
TOOL_NAME = "run_code"
#: The API shapes :func:`tool_schema` knows: Anthropic's Messages API, OpenAI's Chat
#: Completions (``openai``) and Responses API (``openai-responses``), MCP.
APIS = ("anthropic", "openai", "openai-responses", "mcp")

_PYTHON_INTRO = """\
Run a Python program in a fresh, isolated Python interpreter and get back what it printed \
and the value it returned. Write the program as the body of an async function: use `await` \
at top level and end with `return <value>` (JSON: dict, list, str, int, float, bool, None). \
Nothing is kept between runs: do all the work one task needs in one program, calling the \
bindings below with `await` (several at once with `asyncio.gather`) and printing or \
returning only what you need. On failure you get the error, the program's traceback and \
what it printed: fix the program and run it again.

The bindings, as a Python stub:

"""

_NODE_INTRO = """\
Run a {name} program in a fresh, isolated Node.js process and get back what it printed \
(console.log) and the value of its last expression or `return`. Write the program as the \
body of an async function: use `await` at top level; values and arguments are JSON \
(objects, arrays, strings, numbers, booleans, null). Nothing is kept between runs: do all \
the work one task needs in one program, calling the bindings below with `await` (several \
at once with `Promise.all`) and printing or returning only what you need. On failure you \
get the error, the program's stack and what it printed: fix the program and run it again.

The bindings, as {name} declarations:

"""

#: What a model is told about programs, per language (the runtime's name). A language
#: kernelgate runs but has no text for here yet is refused by tool_description.
INTROS: dict[str, str] = {
    "python": _PYTHON_INTRO,
    "typescript": _NODE_INTRO.format(name="TypeScript"),
    "javascript": _NODE_INTRO.format(name="JavaScript"),
}
#: The ``code`` argument's description, per language.
_CODE_HELP: dict[str, str] = {
    "python": "The Python program: the body of an async function (top-level await, "
    "`return value`).",
    "typescript": "The TypeScript program: the body of an async function (top-level await; "
    "the last expression, or `return value`, is its value).",
    "javascript": "The JavaScript program: the body of an async function (top-level await; "
    "the last expression, or `return value`, is its value).",
}

_INPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"code": {"type": "string", "description": _CODE_HELP["python"]}},
    "required": ["code"],
    "additionalProperties": False,
}


def tool_description(stub: str, language: str = "python", rules: str = "") -> str:
    """The ``run_code`` description: how ``language`` programs run, the ``rules`` of a
    run (limits, network, imports: :func:`kernelgate.gateway.rules.run_rules`, which
    ``Gateway.tool_schema`` makes from the gateway), then the bindings' stub (in that
    language: ``describe()`` of the gateway that runs them)."""
    intro = INTROS.get(language)
    if intro is None:
        raise ValueError(
            f"there is no run_code description for {language!r} programs yet; this "
            f"kernelgate describes {', '.join(sorted(INTROS))} programs"
        )
    if rules:
        intro = intro.replace("\n\nThe bindings, as ", f"\n\n{rules}\n\nThe bindings, as ", 1)
    return intro + stub


def tool_schema(
    stub: str,
    api: str = "anthropic",
    language: str = "python",
    *,
    rules: str = "",
    description: str | None = None,
) -> dict[str, Any]:
    """The ``run_code`` tool definition in ``api``'s shape (``anthropic``: ``name``,
    ``description``, ``input_schema``; ``openai``: a Chat Completions ``function`` tool;
    ``openai-responses``: a Responses API ``function`` tool, strict (the schema is closed
    and every property required, as strict mode wants); ``mcp``: an MCP ``Tool`` with
    ``inputSchema``), for programs in ``language``.

    >>> tool_schema("class tools: ...", "openai")["function"]["parameters"]["required"]
    ['code']
    """
    if description is None:  # else the caller made it (Gateway.tool_schema, within a budget)
        description = tool_description(stub, language, rules)
    schema = json.loads(json.dumps(_INPUT_SCHEMA))  # a fresh copy the caller may edit
    schema["properties"]["code"]["description"] = _CODE_HELP[language]
    if api == "anthropic":
        return {"name": TOOL_NAME, "description": description, "input_schema": schema}
    if api == "openai":
        return {
            "type": "function",
            "function": {"name": TOOL_NAME, "description": description, "parameters": schema},
        }
    if api == "openai-responses":
        return {
            "type": "function",
            "name": TOOL_NAME,
            "description": description,
            "parameters": schema,
            "strict": True,
        }
    if api == "mcp":
        return {"name": TOOL_NAME, "description": description, "inputSchema": schema}
    raise ValueError(f"tool_schema(api={api!r}): use one of {', '.join(APIS)}")
