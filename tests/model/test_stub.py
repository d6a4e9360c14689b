"""What the stub tells a model: whole docstrings with each parameter's description, the
named types of the schemas defined once, the real namespaces (issue 21)."""

from __future__ import annotations

import ast
import shutil
from typing import Any

import pytest

from kernelgate import Gateway, input_schema
from kernelgate.gateway.jsprogram import transform_program
from kernelgate.model.describe import MAX_DOC
from kernelgate.model.docstrings import parse_docstring

NODE = shutil.which("node")


def google(query: str, limit: int = 3) -> list[str]:
    """Search the issues.

    Matches titles and bodies.

    Args:
        query (str): Words that must all appear.
        limit: How many to return,
            best first.

    Returns:
        The issue titles.
    """
    return []


def numpy_style(path: str, mode: str = "r") -> str:
    """Read a file.

    Parameters
    ----------
    path : str
        Where the file is.
    mode : str, optional
        How to open it.

    Returns
    -------
    str
        Its text.
    """
    return ""


def rest_style(user: str, *, admin: bool = False) -> dict[str, Any]:
    """Look a user up.

    :param user: The login name.
    :type user: str
    :param admin: Only administrators.
    :returns: The user record.
    """
    return {}


def compiles(stub: str) -> None:
    ast.parse(stub)  # the stub is Python: a model may copy any of it


def ts_compiles(declarations: str) -> None:
    if NODE is None:
        pytest.skip("node is not on PATH (amaro, the TypeScript parser, runs on it)")
    transform_program(declarations + "\n1", "typescript")  # raises on a syntax error


def test_parameter_descriptions_of_each_docstring_style_reach_the_stub() -> None:
    gw = Gateway(bindings={"google": google, "numpy_style": numpy_style, "rest": rest_style})
    stub = gw.describe()
    compiles(stub)
    assert "        Args:\n            query: Words that must all appear.\n" in stub
    assert "            limit: How many to return, best first.\n" in stub
    assert "Matches titles and bodies." in stub and "The issue titles." in stub
    assert "            path: Where the file is.\n            mode: How to open it.\n" in stub
    assert "            user: The login name.\n            admin: Only administrators.\n" in stub
    assert ":param" not in stub and ":type" not in stub
    ts = gw.describe(format="typescript")
    ts_compiles(ts)
    assert "   * @param query Words that must all appear.\n" in ts
    assert "   * @param path Where the file is.\n" in ts


def test_a_long_docstring_is_cut_to_its_budget_with_a_mark() -> None:
    def long(x: int) -> int:
        return x

    long.__doc__ = "Does a thing.\n\n" + "word " * 400 + "\n\nArgs:\n    x: The thing."
    stub = Gateway(bindings={"long": long}).describe()
    compiles(stub)
    body = stub.split("async def long")[1]
    assert "word word..." in body and "x: The thing." in body
    assert len(body) < MAX_DOC + 200


def test_docstring_parser_keeps_text_outside_the_parameter_sections() -> None:
    doc = parse_docstring(google.__doc__ or "")
    assert doc.params == {
        "query": "Words that must all appear.",
        "limit": "How many to return, best first.",
    }
    assert "Args" not in doc.text and doc.text.endswith("The issue titles.")
    assert parse_docstring("Just text.\n\nArgs: inline, not a section.").params == {}


def test_the_header_names_the_real_namespaces() -> None:
    gw = Gateway(namespaces={"tracker": {"search": google}, "files": {"read": numpy_style}})
    stub = gw.describe()
    compiles(stub)
    assert "`x = await tracker.name(...)`" in stub and "tools." not in stub
    assert "# The namespaces (globals of the program): tracker, files." in stub
    ts = gw.describe(format="typescript")
    assert "`const x = await tracker.name(...)`" in ts and "tools." not in ts
    one = Gateway(bindings={"search": google}, namespace="tracker").describe()
    assert "await tracker.name(...)" in one and "tools" not in one


ISSUE = {
    "type": "object",
    "title": "Issue",
    "description": "An issue.",
    "properties": {
        "number": {"type": "integer"},
        "state": {"$ref": "#/$defs/State"},
        "parent": {"anyOf": [{"$ref": "#/$defs/Issue"}, {"type": "null"}]},
        "from": {"type": "string", "description": "Who opened it."},
    },
    "required": ["number", "state"],
}
STATE = {"enum": ["open", "closed"], "title": "State", "type": "string"}


def _schema(prop: str, defs: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {prop: {"$ref": "#/$defs/Issue"}},
        "required": [prop],
        "$defs": defs,
    }


@input_schema(_schema("issue", {"Issue": ISSUE, "State": STATE}))
def update(issue):  # type: ignore[no-untyped-def]
    return issue


@input_schema(_schema("item", {"Issue": ISSUE, "State": STATE}))
def close(item):  # type: ignore[no-untyped-def]
    return item


OTHER = {"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]}


@input_schema(_schema("issue", {"Issue": OTHER}))
def jira(issue):  # type: ignore[no-untyped-def]
    return issue


def test_named_types_are_defined_once_on_top_and_shared() -> None:
    gw = Gateway(namespaces={"tracker": {"update": update, "close": close}, "jira": {"get": jira}})
    stub = gw.describe()
    compiles(stub)
    assert stub.count("State = Literal['open', 'closed']") == 1
    # 'from' is a key Python cannot spell as a class field: TypedDict's functional form.
    assert stub.count("Issue = TypedDict('Issue', {") == 1
    assert "    'parent': NotRequired[Issue | None],\n" in stub  # recursion: by name
    assert "    'from': NotRequired[str],  # Who opened it.\n" in stub
    assert "class Issue_2(TypedDict):\n    key: str\n" in stub  # another Issue, another name
    assert "async def update(issue: Issue):" in stub
    assert "async def close(item: Issue):" in stub
    assert "async def get(issue: Issue_2):" in stub
    assert stub.index("State = ") < stub.index("class tracker:")
    ts = gw.describe(format="typescript")
    ts_compiles(ts)
    assert ts.count("interface Issue {") == 1 and "interface Issue_2 {" in ts
    assert 'type State = "open" | "closed";' in ts
    assert "  parent?: Issue | null;\n" in ts and "  /** Who opened it. */\n  from?: string;" in ts
    assert "update(issue: Issue): Promise<unknown>;" in ts
    assert "get(issue: Issue_2): Promise<unknown>;" in ts


def test_definitions_are_bounded() -> None:
    defs = {
        f"T{i}": {"type": "object", "properties": {"next": {"$ref": f"#/$defs/T{i + 1}"}}}
        for i in range(400)
    }

    @input_schema({"type": "object", "properties": {"t": {"$ref": "#/$defs/T0"}}, "$defs": defs})
    def chain(t):  # type: ignore[no-untyped-def]
        return t

    stub = Gateway(bindings={"chain": chain}).describe()
    compiles(stub)
    assert "class T199(TypedDict):" in stub and "class T200(" not in stub
    ts_compiles(Gateway(bindings={"chain": chain}).describe(format="typescript"))


def test_hostile_names_docs_and_schemas_cannot_break_out_of_the_stub() -> None:
    # An MCP server's text is not the host's: whatever it says, the stub stays one valid
    # Python module (and the declarations valid TypeScript) with no statement of its own.
    evil_doc = 'Ends early."""\nimport os\nos.system("x")\n"""\\N{oops} \\x \\u12 */ declare const y: 1; /*"'
    schema = {
        "type": "object",
        "properties": {
            "a\nimport os": {"type": "string", "description": "x\nimport os\n*/ let z = 1; /*"},
            "from": {"$ref": "#/$defs/class"},
            'q"uote': {"$ref": "#/$defs/9 bad name"},
        },
        "$defs": {
            "class": {"enum": ["a'\n", '"""', "*/"], "description": "d\nimport os"},
            "9 bad name": {
                "type": "object",
                "description": '"""\nimport os',
                "properties": {"x\ny": {"type": "string", "description": "*/ evil"}},
            },
        },
    }

    @input_schema(schema)
    def hostile(**kwargs):  # type: ignore[no-untyped-def]
        return kwargs

    hostile.__doc__ = evil_doc
    gw = Gateway(namespaces={"tools": {"bad'](); import os #": hostile}})
    stub = gw.describe()
    tree = ast.parse(stub)
    kinds = {type(node).__name__ for node in tree.body}
    assert kinds <= {"ClassDef", "Assign"}, kinds  # types and the namespace, nothing else
    for node in ast.walk(tree):
        assert not isinstance(node, (ast.Import, ast.ImportFrom)), ast.unparse(node)
        if isinstance(node, ast.Call):  # only the functional TypedDict form calls
            assert isinstance(node.func, ast.Name) and node.func.id == "TypedDict"
    ts = gw.describe(format="typescript")
    ts_compiles(ts)
    assert "declare const y" not in ts.replace("*\\/ declare const y", "")


def _random_schema(rng: Any, depth: int = 0) -> Any:
    """A JSON value shaped like a schema, valid or not: what a server might send."""
    if depth > 4 or rng.random() < 0.2:
        return rng.choice(
            [
                {"type": rng.choice(["string", "integer", "object", "array", "null", "bogus"])},
                {"$ref": rng.choice(["#/$defs/A", "#/$defs/B", "#/definitions/C", "#", "#/x/y"])},
                {"$ref": "http://example.com/s.json"},
                {"enum": [rng.random(), "x", None, [1], {"k": 1}]},
                {"const": {"a": [1]}},
                None,
                "string",
                [1, 2],
                {},
            ]
        )
    props = {
        rng.choice(["a", "from", "x-y", "class", "9", "ok", "'q'", "*/"]): _random_schema(
            rng, depth + 1
        )
        for _ in range(rng.randint(0, 4))
    }
    node: dict[str, Any] = {
        "type": rng.choice(["object", ["object", "null"], "array"]),
        "properties": props,
        "required": rng.sample(sorted(props), k=len(props) // 2) if props else [],
        "items": _random_schema(rng, depth + 1),
        "anyOf": [_random_schema(rng, depth + 1) for _ in range(rng.randint(0, 2))],
        "description": rng.choice(["", '"""', "*/", "a\nb", None, 3]),
    }
    if rng.random() < 0.5:
        node["$defs"] = {
            name: _random_schema(rng, depth + 1)
            for name in rng.sample(["A", "B", "bad name", "class"], k=2)
        }
    return node


def test_any_schema_a_server_sends_renders_as_valid_python_and_typescript() -> None:
    import random

    rng = random.Random(21)
    for i in range(150):
        schema = _random_schema(rng)
        if not isinstance(schema, dict):
            continue
        schema["type"] = "object"

        def f(**kwargs):  # type: ignore[no-untyped-def]
            return kwargs

        f.__kernelgate_schema__ = schema  # type: ignore[attr-defined]  # as input_schema does
        f.__kernelgate_output_schema__ = _random_schema(rng)  # type: ignore[attr-defined]
        gw = Gateway(namespaces={"tools": {"f": f}, "more": {"g": f}})
        stub = gw.describe()
        try:
            ast.parse(stub)
        except SyntaxError as exc:  # pragma: no cover - the failure's message
            raise AssertionError(f"schema {i}: {schema!r}\n{stub}") from exc
        gw.describe(format="typescript")
