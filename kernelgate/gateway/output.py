"""What a run printed and displayed, kept within the output budget, as nbformat outputs."""

from __future__ import annotations

import codecs
from typing import Any

__all__ = ["OutputCollector", "truncation_marker"]


def truncation_marker(limit: int) -> str:
    return (
        f"\n[kernelgate: output cut here: stdout and stderr together passed "
        f"max_output_bytes={limit} bytes]\n"
    )


class OutputCollector:
    """Stream text from fd 3 and from the raw fd 1/2 pipes, in arrival order.

    One ledger for both streams, charged in UTF-8 bytes. The first write that passes the
    budget is cut at the budget, followed by exactly one marker; everything after is
    dropped. Adjacent stream outputs of the same name are merged, as frontends show them.
    """

    def __init__(self, max_output_bytes: int) -> None:
        self.limit = max_output_bytes
        self.used = 0
        self.truncated = False
        self.outputs: list[dict[str, Any]] = []
        self._sealed = 0  # outputs before this index are never merged into
        self._text: dict[str, list[str]] = {"stdout": [], "stderr": []}
        self._decoders = {
            "stdout": codecs.getincrementaldecoder("utf-8")("replace"),
            "stderr": codecs.getincrementaldecoder("utf-8")("replace"),
        }

    def add_raw(self, name: str, data: bytes, final: bool = False) -> str:
        """Bytes written straight to fd 1 or 2; invalid UTF-8 becomes U+FFFD."""
        return self.add_text(name, self._decoders[name].decode(data, final))

    def add_text(self, name: str, text: str) -> str:
        """Add stream text; return what was kept of it (cut and marked, or ``""``)."""
        if not text or self.truncated:
            return ""
        encoded = text.encode("utf-8", "replace")
        room = self.limit - self.used
        if len(encoded) > room:
            text = encoded[:room].decode("utf-8", "ignore") + truncation_marker(self.limit)
            self.truncated = True
            self.used = self.limit
        else:
            self.used += len(encoded)
        self._text[name].append(text)
        last = self.outputs[-1] if len(self.outputs) > self._sealed else None
        if last is not None and last["output_type"] == "stream" and last["name"] == name:
            last["text"] += text
        else:
            self.outputs.append({"output_type": "stream", "name": name, "text": text})
        return text

    def seal(self) -> None:
        """End the current stream output: the next text starts a new one.

        Called where something happened between two prints (a binding call completed), so
        a notebook can show the call between them.
        """
        self._sealed = len(self.outputs)

    def add_output(self, output: dict[str, Any]) -> None:
        self.outputs.append(output)

    def text(self, name: str) -> str:
        return "".join(self._text[name])
