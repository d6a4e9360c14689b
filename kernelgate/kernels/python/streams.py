"""``sys.stdout`` and ``sys.stderr`` of the child, as ordered ``stream`` messages on fd 3.

Writes are coalesced into lines (one ``print`` is one message); an unterminated tail goes out
on ``flush()``, before every binding call, and at the end. One ledger meters both streams:
once the program has written more than the output budget, the rest is not sent (the host
marks the truncation), so a flood costs neither pipe bandwidth nor host memory.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

__all__ = ["OutputLedger", "OutputStream", "clean_text"]

_CHUNK = 64 * 1024  # largest stream message; keeps frames far below the ceiling


def clean_text(text: str) -> str:
    """Replace lone surrogates (no UTF-8 form) with U+FFFD."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return "".join("\ufffd" if "\ud800" <= ch <= "\udfff" else ch for ch in text)


class OutputLedger:
    """The output budget both streams draw on (characters; the host meters exact bytes)."""

    __slots__ = ("remaining",)

    def __init__(self, budget: int) -> None:
        # One character past the budget is sent so the host sees the overflow and marks it.
        self.remaining = budget + 1


class OutputStream(io.TextIOBase):
    """A text stream that sends what is written as Jupyter ``stream`` messages."""

    def __init__(self, name: str, send: Callable[[str, str], None], ledger: OutputLedger) -> None:
        super().__init__()
        self._name = name
        self._send = send
        self._ledger = ledger
        self._parts: list[str] = []
        self._size = 0

    @property
    def name(self) -> str:  # type: ignore[override]
        return f"<{self._name}>"

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return "utf-8"

    @property
    def errors(self) -> str | None:  # type: ignore[override]
        return "replace"

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return False

    def write(self, s: Any) -> int:
        if type(s) is not str:
            if not isinstance(s, str):
                raise TypeError(f"write() argument must be str, not {type(s).__name__}")
            s = str.__str__(s)
        n = len(s)
        ledger = self._ledger
        if not n or ledger.remaining <= 0:
            return n
        if n > ledger.remaining:
            s = s[: ledger.remaining]
        ledger.remaining -= len(s)
        self._parts.append(s)
        self._size += len(s)
        if "\n" in s or self._size >= _CHUNK or ledger.remaining <= 0:
            self._emit(whole_lines_only=ledger.remaining > 0)
        return n

    def _emit(self, whole_lines_only: bool) -> None:
        text = "".join(self._parts)
        self._parts.clear()
        self._size = 0
        if whole_lines_only and len(text) < _CHUNK:
            cut = text.rfind("\n") + 1
            if cut < len(text):
                self._parts.append(text[cut:])
                self._size = len(text) - cut
                text = text[:cut]
        text = clean_text(text)
        for i in range(0, len(text), _CHUNK):
            self._send(self._name, text[i : i + _CHUNK])

    def flush(self) -> None:
        if self._parts:
            self._emit(whole_lines_only=False)

    def close(self) -> None:
        # Programs that close sys.stdout must not lose what is buffered; the stream stays
        # usable because the bootstrap flushes it at the end.
        self.flush()
