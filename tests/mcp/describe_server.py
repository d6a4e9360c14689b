"""An MCP server written with the official SDK whose schemas name types (``$defs``/``$ref``,
as pydantic makes them) and take a parameter Python cannot name (``from``). Started by
tests/mcp/test_stub.py as a subprocess: ``python describe_server.py``."""

from __future__ import annotations

import inspect
from enum import Enum
from typing import Annotated

from mcp.server import MCPServer
from pydantic import BaseModel, Field

server = MCPServer("kernelgate-test-describe")


class Color(str, Enum):
    red = "red"
    green = "green"


class Point(BaseModel):
    x: float
    y: float


class Issue(BaseModel):
    """An issue of the tracker."""

    number: int
    title: str = Field(description="One line.")
    color: Color = Color.red
    at: Point | None = None
    children: list[Issue] = []


@server.tool()
def create_issue(title: str, color: Color, where: Point) -> Issue:
    """Create an issue."""
    return Issue(number=1, title=title, color=color, at=where)


def send(to: str, **arguments: str) -> str:
    """Send a message.

    Args:
        to: Who gets it.
        from: Who sends it.
    """
    return f"{arguments['from']}->{to}"


# The SDK calls the function with the alias as the keyword: the signature it reads names
# the parameter ``sender`` (aliased ``from``), the function takes it through ``**``.
send.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
    [
        inspect.Parameter("to", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=str),
        inspect.Parameter(
            "sender",
            inspect.Parameter.POSITIONAL_OR_KEYWORD,
            annotation=Annotated[str, Field(alias="from", description="Who sends it.")],
        ),
    ],
    return_annotation=str,
)
server.tool()(send)


if __name__ == "__main__":
    server.run()
