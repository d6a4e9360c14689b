"""TypeScript declarations of the bindings (``describe(format="typescript")``)."""

from __future__ import annotations

from typing import Any, Literal, TypedDict

from kernelgate.gateway.bindings import BindingRegistry
from kernelgate.gateway.describe import describe_json
from kernelgate.model.describe_ts import render_declarations, ts_type


class Issue(TypedDict):
    number: int
    title: str


def search(query: str, limit: int = 3, *, state: Literal["open", "closed"] = "open") -> list[Issue]:
    """Search the issues.

    Args: nobody reads this far."""
    return []


def anything(*values: Any, **options: Any) -> dict[str, Any]:
    return {}


def must(a: str, *, b: int) -> None:
    return None


def declarations(namespaces: dict[str, dict[str, Any]]) -> str:
    registry = BindingRegistry(namespaces)
    return render_declarations(describe_json(registry), registry.specs())


def test_positional_parameters_then_keyword_only_ones_as_the_trailing_object() -> None:
    text = declarations({"tools": {"search": search}})
    assert "declare const tools: {" in text
    # The whole docstring is kept (within MAX_DOC): not only its first paragraph.
    assert "  /**\n   * Search the issues.\n   *\n   * Args: nobody reads this far.\n   */" in text
    [line] = [x for x in text.splitlines() if x.startswith("  search(")]
    assert line.startswith(
        '  search(query: string, limit?: number, keywords?: { state?: "open" | "closed" }): '
    )
    # The answer, a list of the TypedDict Issue: written out, or by name once the host's
    # schema names it (``$defs``), with its interface declared on top.
    assert line.endswith("Promise<{ number: number; title: string }[]>;") or (
        line.endswith("Promise<Issue[]>;")
        and "interface Issue {\n  number: number;\n  title: string;\n}" in text
    )


def test_a_required_keyword_makes_the_object_required() -> None:
    text = declarations({"tools": {"must": must}})
    assert "must(a: string, keywords: { b: number }): Promise<null>;" in text


def test_var_positional_and_var_keyword() -> None:
    text = declarations({"tools": {"anything": anything}})
    assert (
        "anything(...values: unknown[], keywords?: { [key: string]: unknown }): "
        "Promise<Record<string, unknown>>;"
    ) in text


def test_names_that_are_not_identifiers_are_quoted_and_namespaces_kept() -> None:
    text = declarations({"tracker": {"list-issues": search}, "tools": {}})
    assert "declare const tracker: {" in text
    assert '  "list-issues"(query: string' in text
    assert "declare const tools: {\n\n};" in text


def test_json_schema_shapes() -> None:
    assert ts_type({"type": ["string", "null"]}) == "string | null"
    assert ts_type(
        {"type": "array", "items": {"anyOf": [{"type": "string"}, {"type": "integer"}]}}
    ) == ("(string | number)[]")
    assert ts_type({"type": "object", "additionalProperties": {"type": "boolean"}}) == (
        "Record<string, boolean>"
    )
    assert ts_type(
        {"type": "object", "properties": {"a-b": {"const": 1}}, "required": ["a-b"]}
    ) == ('{ "a-b": 1 }')
    root = {"$defs": {"P": {"type": "integer"}}, "$ref": "#/$defs/P"}
    assert ts_type(root) == "number"
    deep: dict[str, Any] = {"type": "array", "items": {}}
    node = deep
    for _ in range(20):
        node["items"] = {"type": "array", "items": {}}
        node = node["items"]
    assert ts_type(deep).startswith("unknown[][]")  # cut at a depth, not a recursion error
    assert ts_type("not a schema") == "unknown"


def test_a_description_cannot_end_the_comment() -> None:
    def evil(x: str) -> str:
        """Close */ the comment."""
        return x

    text = declarations({"tools": {"evil": evil}})
    assert "/** Close *\\/ the comment. */" in text
