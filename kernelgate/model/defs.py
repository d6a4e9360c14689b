"""Named types of JSON Schemas (``$defs``/``$ref``), defined once for every binding.

MCP servers' schemas (made by pydantic) and the host's own (TypedDicts, dataclasses, Enums)
name their object and enum types in ``$defs`` and point at them with ``$ref``. A stub that
showed ``-> Issue`` without saying what an ``Issue`` is would leave the model guessing: the
renderers (:mod:`.describe`, :mod:`.describe_ts`) ask :class:`Definitions` for the name of
each ``$ref`` they meet, and write every definition once, at the top.

One name per distinct definition across all bindings: two servers' identical ``Issue`` are
one definition; different ones are ``Issue`` and ``Issue_2``. The number of definitions is
bounded (:data:`MAX_DEFINITIONS`; past it a ``$ref`` is written out in place), and a
recursive definition refers to itself by name, so rendering always ends.
Stdlib only and free of I/O.

>>> defs = Definitions()
>>> root = {"$defs": {"Color": {"enum": ["red", "blue"]}}, "$ref": "#/$defs/Color"}
>>> defs.name_for(root["$ref"], root)
'Color'
>>> defs.name_for("#/$defs/Color", {"$defs": {"Color": {"enum": ["red", "blue"]}}})
'Color'
>>> defs.name_for("#/$defs/Color", {"$defs": {"Color": {"enum": ["cyan"]}}})
'Color_2'
"""

from __future__ import annotations

import json
import keyword
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["Definitions", "MAX_DEFINITIONS", "resolve", "safe_name"]

#: Definitions one stub defines at most; past it a ``$ref`` is written out where it is.
MAX_DEFINITIONS = 200


def safe_name(name: str) -> str:
    """``name`` as an identifier both Python and TypeScript accept.

    >>> safe_name("Issue-Comment"), safe_name("2d"), safe_name("class")
    ('Issue_Comment', '_2d', '_class')
    """
    cleaned = "".join(c if c.isalnum() or c == "_" else "_" for c in name)
    if not cleaned.isascii():
        cleaned = "".join(c if c.isascii() else "_" for c in cleaned)
    if not cleaned or cleaned[0].isdigit() or keyword.iskeyword(cleaned):
        cleaned = "_" + cleaned
    return cleaned


def resolve(ref: str, root: Any) -> Any:
    """The node a local ``$ref`` (``#/...``) points at in ``root``, or None."""
    if not ref.startswith("#/"):
        return None
    node: Any = root
    for part in ref[2:].split("/"):
        part = part.replace("~1", "/").replace("~0", "~")
        node = node.get(part) if isinstance(node, Mapping) else None
    return node


class Definitions:
    """The named types one stub defines: ``name_for`` gives (and records) a ``$ref``'s
    name; :attr:`order` lists ``(name, schema, root)`` in the order they were met (a
    renderer walks it while rendering a definition adds more)."""

    def __init__(self, reserved: Iterable[str] = ()) -> None:
        self._names: dict[tuple[int, str], str] = {}
        self._taken: dict[str, str] = {name: "" for name in reserved}
        self.order: list[tuple[str, Mapping[str, Any], Mapping[str, Any]]] = []
        self._roots: list[Any] = []  # kept alive: their id() keys _names

    def name_for(self, ref: str, root: Mapping[str, Any]) -> str | None:
        """The name ``ref`` (in ``root``) is defined as; None to write it out in place (not
        a local ``$defs``/``definitions`` entry, or too many definitions already)."""
        parts = ref[2:].split("/") if ref.startswith("#/") else []
        if len(parts) != 2 or parts[0] not in ("$defs", "definitions"):
            return None
        key = (id(root), ref)
        known = self._names.get(key)
        if known is not None:
            return known
        node = resolve(ref, root)
        if not isinstance(node, Mapping) or len(self.order) >= MAX_DEFINITIONS:
            return None
        text = json.dumps(node, sort_keys=True, default=str)
        # A definition that points at others is the same only if they are too.
        defs = root.get(parts[0]) if "$ref" in text else None
        canonical = text + json.dumps(defs, sort_keys=True, default=str)
        return self._named(
            key, node, root, parts[1].replace("~1", "/").replace("~0", "~"), canonical
        )

    def name_root(self, schema: Any) -> str | None:
        """The name of a whole schema that is itself a named model (an object with a
        ``title``, ``properties`` and ``$defs``: what pydantic makes of a model an MCP tool
        returns), so ``-> Issue`` is shown rather than its fields; None for any other."""
        if (
            not (
                isinstance(schema, Mapping)
                and isinstance(schema.get("title"), str)
                and isinstance(schema.get("properties"), Mapping)
                and isinstance(schema.get("$defs"), Mapping)
            )
            or len(self.order) >= MAX_DEFINITIONS
        ):
            return None
        key = (id(schema), "#")
        known = self._names.get(key)
        if known is not None:
            return known
        body = {k: v for k, v in schema.items() if k != "$defs"}
        text = json.dumps(body, sort_keys=True, default=str)
        defs = schema["$defs"] if "$ref" in text else None
        canonical = text + json.dumps(defs, sort_keys=True, default=str)
        return self._named(key, body, schema, str(schema["title"]), canonical)

    def _named(
        self,
        key: tuple[int, str],
        node: Mapping[str, Any],
        root: Mapping[str, Any],
        wanted: str,
        canonical: str,
    ) -> str:
        base = safe_name(wanted)
        name, n = base, 2
        while name in self._taken and self._taken[name] != canonical:
            name, n = f"{base}_{n}", n + 1
        self._names[key] = name
        if name not in self._taken:
            self._taken[name] = canonical
            self.order.append((name, node, root))
            self._roots.append(root)
        return name
