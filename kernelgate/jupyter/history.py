"""The kernel's execute history, for ``history_request`` (tail, range and search).

Kept in memory for the kernel's life, as ipykernel does without its sqlite file: a
kernelgate kernel's cells share no state, and its history is only what the front end asks
to see again (``Up`` in a console, ``%history``-like tools).

>>> h = History()
>>> h.add("x = 1"); h.add("print(x)"); h.add("x = 2")
>>> h.tail(2)
[(1, 2, 'print(x)'), (1, 3, 'x = 2')]
>>> h.search("x =*", n=None, unique=True)
[(1, 1, 'x = 1'), (1, 3, 'x = 2')]
"""

from __future__ import annotations

import fnmatch
from typing import Any

__all__ = ["History", "history_reply"]

#: Entries kept: enough for any session a person types; bounded so a long-lived kernel
#: driven by a tool does not grow without end.
MAX_ENTRIES = 10_000

Entry = tuple[int, int, str]


class History:
    """The sources of executed cells, numbered from 1 in session 1 (this kernel's life)."""

    session = 1

    def __init__(self) -> None:
        self._entries: list[Entry] = []
        self._next = 1

    def add(self, source: str) -> None:
        self._entries.append((self.session, self._next, source))
        self._next += 1
        if len(self._entries) > MAX_ENTRIES:
            del self._entries[: len(self._entries) - MAX_ENTRIES]

    def tail(self, n: int) -> list[Entry]:
        return self._entries[-n:] if n > 0 else []

    def range(self, session: int, start: int, stop: int | None) -> list[Entry]:
        # session 0 is "the current one", negative counts back: there is only one here.
        if session not in (0, self.session) and session >= 0:
            return []
        return [e for e in self._entries if e[1] >= start and (stop is None or e[1] < stop)]

    def search(self, pattern: str, n: int | None, unique: bool) -> list[Entry]:
        found = [e for e in self._entries if fnmatch.fnmatchcase(e[2], pattern)]
        if unique:
            seen: set[str] = set()
            kept: list[Entry] = []
            for entry in reversed(found):  # the latest of equal sources is kept
                if entry[2] not in seen:
                    seen.add(entry[2])
                    kept.append(entry)
            found = kept[::-1]
        return found[-n:] if n else found


def _int(value: Any, default: int) -> int:
    return value if type(value) is int else default


def history_reply(history: History, content: dict[str, Any]) -> dict[str, Any]:
    """The ``history_reply`` content for a ``history_request``'s ``content``."""
    kind = content.get("hist_access_type")
    if kind == "tail":
        entries = history.tail(_int(content.get("n"), 10))
    elif kind == "range":
        stop = content.get("stop")
        entries = history.range(
            _int(content.get("session"), 0),
            _int(content.get("start"), 1),
            stop if type(stop) is int else None,
        )
    elif kind == "search":
        pattern = content.get("pattern")
        n = content.get("n")
        entries = history.search(
            pattern if isinstance(pattern, str) else "*",
            n if type(n) is int and n > 0 else None,
            bool(content.get("unique", False)),
        )
    else:
        return {
            "status": "error",
            "ename": "ValueError",
            "evalue": f"hist_access_type must be tail, range or search, got {kind!r}",
            "traceback": [],
            "history": [],
        }
    # output=True asks for (input, output) pairs: outputs are not kept (a run's outputs are
    # in the notebook and in the recording), so the output is None as in ipykernel's
    # history without output logging.
    if content.get("output"):
        return {"status": "ok", "history": [[s, n_, [src, None]] for s, n_, src in entries]}
    return {"status": "ok", "history": [list(e) for e in entries]}
