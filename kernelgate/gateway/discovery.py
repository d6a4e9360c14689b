"""Progressive discovery: a model that has dozens or thousands of bindings finds the ones a
task needs instead of reading them all on every turn.

What the anchors give (Anthropic's tool search, Cloudflare's search + execute, FastMCP's
BM25 over the schemas), here for a gateway's bindings:

- :meth:`Discovery.search`: the bindings whose words (names, docstrings, parameters) best
  match a query (:class:`kernelgate.model.search.BindingIndex`, BM25, built once);
- :meth:`Discovery.answer`: the stub of only the matches, the text a model reads, and
  :func:`search_tool_schema`, the ``search_tools`` tool definition that asks for it;
- :func:`builtin_bindings`: the same search as bindings a program calls
  (``await kernelgate.search_tools("...")``), answered by the host like any binding, in the
  namespace ``kernelgate``, which no user namespace may take;
- :func:`fitted_description`: the ``run_code`` description within a size budget: the whole
  stub when it fits, else the binding names and a pointer at the search, else less.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kernelgate.model.search import BindingIndex, binding_words

from .bindings import BindingRegistry
from .tools import INTROS, tool_description

__all__ = [
    "BUILTIN_NAMESPACE",
    "SEARCH_TOOL_NAME",
    "Discovery",
    "builtin_bindings",
    "fitted_description",
    "search_tool_schema",
]

#: The namespace of the gateway's own bindings inside programs (reserved: see
#: :data:`kernelgate.gateway.bindings.RESERVED_NAMES`).
BUILTIN_NAMESPACE = "kernelgate"
#: The search tool's name in every API.
SEARCH_TOOL_NAME = "search_tools"
#: Matches a search gives at most.
MAX_LIMIT = 50
#: The longest query, and the most names one describe() takes: a program asks for these,
#: so the host's work per call stays small whatever it sends.
MAX_QUERY = 1000
MAX_NAMES = 200

Specs = dict[str, dict[str, dict[str, Any]]]
#: Renders specs (and their ``describe(format="json")`` entries) as a stub.
Render = Callable[[Specs, Sequence[Mapping[str, Any]]], str]


class Discovery:
    """The bindings of ``registry``, searchable and describable a few at a time."""

    def __init__(
        self,
        registry: BindingRegistry,
        render: Render,
        described: Callable[[], list[dict[str, Any]]],
    ) -> None:
        self._registry = registry
        self._render = render
        self._described = described
        self._index: BindingIndex | None = None
        # Programs search from the binding threads: one builds the index, the others wait.
        self._building = threading.Lock()

    @property
    def index(self) -> BindingIndex:
        if self._index is None:  # built on the first search: most gateways never search
            with self._building:
                if self._index is None:
                    self._index = BindingIndex(
                        (ns, name, binding_words(ns, name, spec))
                        for ns, table in self._registry.specs().items()
                        for name, spec in table.items()
                    )
        return self._index

    def names(self) -> list[str]:
        """Every binding as ``namespace.name``."""
        return [f"{ns}.{name}" for ns, table in self._registry.specs().items() for name in table]

    def search(self, query: str, limit: int = 5) -> list[str]:
        """The ``namespace.name`` of the bindings matching ``query`` best, best first."""
        if not isinstance(query, str):
            raise TypeError(f"query must be a string of words, got {type(query).__name__}")
        if len(query) > MAX_QUERY:
            raise ValueError(
                f"the query is {len(query)} characters; search with a few words (at most "
                f"{MAX_QUERY} characters)"
            )
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
            raise ValueError(f"limit must be an integer from 1 to {MAX_LIMIT}, got {limit!r}")
        return [f"{ns}.{name}" for ns, name in self.index.search(query, limit)]

    def select(self, names: Sequence[str]) -> tuple[Specs, list[dict[str, Any]]]:
        """The specs and JSON entries of ``names`` (``namespace.name``, a namespace, or a
        binding name found in one namespace); ``ValueError`` naming the unknown ones."""
        if isinstance(names, str) or not isinstance(names, Sequence):
            raise TypeError(
                f"names must be a list of binding names such as ['tools.search'], got "
                f"{type(names).__name__}"
            )
        if len(names) > MAX_NAMES:
            raise ValueError(f"{len(names)} names asked for; describe at most {MAX_NAMES} at once")
        specs = self._registry.specs()
        chosen: dict[str, set[str]] = {}
        unknown = []
        for item in names:
            text = str(item)
            ns, _, name = text.partition(".")
            if name and name in specs.get(ns, {}):
                chosen.setdefault(ns, set()).add(name)
            elif not name and ns in specs:
                chosen.setdefault(ns, set()).update(specs[ns])
            else:
                found = [n for n, table in specs.items() if text in table]
                for n in found:
                    chosen.setdefault(n, set()).add(text)
                if not found:
                    unknown.append(text)
        if unknown:
            known = self.names()
            shown = ", ".join(known[:30]) + (
                f", ... ({len(known)} in all)" if len(known) > 30 else ""
            )
            raise ValueError(
                f"no binding {', '.join(repr(u) for u in unknown)}; name them as "
                f"'namespace.name' (there are: {shown or 'none'})"
            )
        subset = {
            ns: {name: table[name] for name in sorted(chosen[ns])}
            for ns, table in specs.items()
            if ns in chosen
        }
        entries = [e for e in self._described() if e["name"] in subset.get(str(e["namespace"]), {})]
        return subset, entries

    def describe(self, names: Sequence[str]) -> str:
        """The stub of only ``names`` (with the lines on how to call them)."""
        specs, entries = self.select(names)
        return self._render(specs, entries)

    def answer(self, query: str, limit: int | None = 5) -> str:
        """What the search tool answers: the stub of the best matches, without the lines
        on how to call (the ``run_code`` description has them), or why there is none.
        ``limit`` None is 5 (a strict tool call sends null for "the default")."""
        if limit is None:
            limit = 5
        try:
            found = self.search(query, limit)
        except (TypeError, ValueError) as exc:
            return f"search_tools: {exc}"
        if not found:
            return (
                f"No binding matches {query!r}. Try other words (a thing or an action, such "
                f"as 'issue' or 'send'); there are {len(self.index)} bindings."
            )
        return _without_header(self.describe(found))


def _without_header(stub: str) -> str:
    """``stub`` without its leading comment block (how to call bindings)."""
    head, sep, rest = stub.partition("\n\n")
    lines = head.splitlines()
    if sep and lines and all(line.startswith(("#", "//")) for line in lines):
        return rest
    return stub


def builtin_bindings(discovery: Discovery) -> dict[str, dict[str, Callable[..., Any]]]:
    """The gateway's own bindings as programs see them: ``kernelgate.search_tools`` and
    ``kernelgate.describe``."""

    def search_tools(query: str, limit: int = 5) -> str:
        """The stub of the bindings whose names, descriptions or parameters best match
        ``query`` (at most ``limit``, from 1 to 50), best first."""
        return discovery.answer(query, limit)

    def describe(names: list[str]) -> str:
        """The stub of the bindings ``names`` (``["tracker.create_issue"]``)."""
        return _without_header(discovery.describe(names))

    return {BUILTIN_NAMESPACE: {"search_tools": search_tools, "describe": describe}}


_SEARCH_INPUT: dict[str, Any] = {
    "type": "object",
    "properties": {
        "query": {
            "type": "string",
            "description": "Words for what you need done (e.g. 'create issue', 'read file').",
        },
        "limit": {
            "type": "integer",
            "minimum": 1,
            "maximum": MAX_LIMIT,
            "default": 5,
            "description": "How many bindings to show at most.",
        },
    },
    "required": ["query"],
    "additionalProperties": False,
}


def search_tool_schema(api: str = "anthropic", language: str = "python") -> dict[str, Any]:
    """The ``search_tools`` tool definition in ``api``'s shape (as ``tool_schema``'s):
    one required string ``query``, optional ``limit``; answered by
    ``Gateway.search_tools(query, limit)``."""
    kind = "Python stub" if language == "python" else f"{language} declarations"
    description = (
        "Search the bindings that run_code programs can call, by words (their names, "
        f"descriptions and parameters), and get the {kind} of the best matches: call it "
        "before writing a program that needs bindings you have not seen yet."
    )
    schema = json.loads(json.dumps(_SEARCH_INPUT))
    if api == "anthropic":
        return {"name": SEARCH_TOOL_NAME, "description": description, "input_schema": schema}
    if api == "openai":
        return {
            "type": "function",
            "function": {
                "name": SEARCH_TOOL_NAME,
                "description": description,
                "parameters": schema,
            },
        }
    if api == "openai-responses":
        # Strict mode wants every property required: ``limit`` may be null (the default).
        schema["properties"]["limit"] = {
            "type": ["integer", "null"],
            "description": "How many bindings to show at most (1 to 50; null: 5).",
        }
        schema["required"] = ["query", "limit"]
        return {
            "type": "function",
            "name": SEARCH_TOOL_NAME,
            "description": description,
            "parameters": schema,
            "strict": True,
        }
    if api == "mcp":
        return {"name": SEARCH_TOOL_NAME, "description": description, "inputSchema": schema}
    raise ValueError(
        f"search_tool_schema(api={api!r}): use one of anthropic, openai, openai-responses, mcp"
    )


def _pointer(language: str, in_programs: bool) -> str:
    where = "call the search_tools tool"
    if in_programs:
        where += f" (or, in a program, `await {BUILTIN_NAMESPACE}.search_tools(query)`)"
    if language == "python":
        where += "; in a program `help(namespace.name)` prints one binding's stub"
    return f"To see a binding's signature and description, {where}."


#: The program model in a few words, for a description with a tight budget.
_SHORT_INTROS = {
    "python": "Run a Python program in a fresh, isolated interpreter and get what it printed "
    "and the value it returned. The program is the body of an async function: top-level "
    "`await`, end with `return <value>` (JSON). Nothing is kept between runs. Call bindings "
    "with `await namespace.name(...)`.",
}
_SHORT_NODE = (
    "Run a {name} program in a fresh, isolated Node.js process and get what it printed and "
    "the value of its last expression or `return`. The program is the body of an async "
    "function (top-level `await`; JSON values). Nothing is kept between runs. Call bindings "
    "with `await namespace.name(...)`."
)


def _intro(language: str, short: bool) -> str:
    if not short:
        return INTROS[language].partition("\n\nThe bindings, as ")[0]
    if language in _SHORT_INTROS:
        return _SHORT_INTROS[language]
    return _SHORT_NODE.format(name={"typescript": "TypeScript"}.get(language, "JavaScript"))


def fitted_description(
    stub: str,
    names: Sequence[str],
    language: str,
    rules: str,
    budget: int | None,
    *,
    in_programs: bool = False,
    stub_in: str = "description",
) -> str:
    """The ``run_code`` description within ``budget`` characters (None: no budget).

    The whole stub when it fits (and ``stub_in="description"``); else, in turn: the
    program model, the rules of a run and the binding names with a pointer at the search;
    their number instead of the names; a shorter program model; no rules. ``ValueError``
    for a budget not even the shortest fits.
    """
    if stub_in not in ("description", "system"):
        raise ValueError(
            f"stub_in={stub_in!r}: use 'description' (the stub in the tool's description) or "
            "'system' (in the system prompt: Gateway.system_prompt())"
        )
    if budget is not None and (isinstance(budget, bool) or not isinstance(budget, int)):
        raise TypeError(f"max_description_chars must be an integer, got {budget!r}")
    if stub_in == "description":
        whole = tool_description(stub, language, rules)
        if budget is None or len(whole) <= budget:
            return whole
        pointer = _pointer(language, in_programs)
    heads = [
        "\n\n".join(part for part in (_intro(language, short), with_rules) if part)
        for short, with_rules in ((False, rules), (True, rules), (True, ""))
    ]
    shortest = ""
    for head in heads:
        if stub_in == "system":
            tails = ["The bindings are described in the system prompt."]
        else:
            room = (budget if budget is not None else len(whole)) - len(head) - len(pointer) - 4
            listed = _listed(names, room)
            tails = [f"{listed}\n{pointer}"] if listed else []
            tails.append(f"There are {len(names)} bindings. {pointer}")
        for tail in tails:
            text = f"{head}\n\n{tail}\n"
            if budget is None or len(text) <= budget:
                return text
            shortest = text if not shortest or len(text) < len(shortest) else shortest
    raise ValueError(
        f"max_description_chars={budget} is too small for any run_code description: the "
        f"shortest is {len(shortest)} characters"
    )


def _listed(names: Sequence[str], room: int) -> str:
    """``The bindings (N): a, b, ...`` in at most about ``room`` characters: as many names
    as fit, then how many more there are."""
    head = f"The bindings ({len(names)}): "
    shown: list[str] = []
    used = len(head)
    for i, name in enumerate(names):
        more = len(names) - i - 1
        tail = f", ... and {more} more." if more else "."
        if used + len(name) + 2 + (len(tail) if more else 1) > room:
            break
        shown.append(name)
        used += len(name) + 2
    if len(shown) < min(3, len(names)):
        return ""  # a name or two says little: their number, and the search, then
    rest = len(names) - len(shown)
    return head + ", ".join(shown) + (f", ... and {rest} more." if rest else ".")
