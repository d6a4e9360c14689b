"""The Jupyter message shape kernelgate speaks, and builders for it.

One vocabulary for every place a message is made: the child's messages on fd 3, the kernel
front's messages to Jupyter frontends, and the outputs a notebook stores (nbformat's
``output_from_msg`` takes these messages as they are).
"""

from __future__ import annotations

import itertools
import keyword
import time
from typing import Any

__all__ = [
    "PROTOCOL_VERSION",
    "BINDINGS_TARGET",
    "CALL_MIME",
    "MessageFactory",
    "iso_now",
    "binding_label",
    "stream_content",
    "clear_output_content",
    "display_data_content",
    "execute_result_content",
    "error_content",
    "execute_reply_content",
    "execute_request_content",
]

PROTOCOL_VERSION = "5.3"
#: comm target for the bindings channel, on fd 3 and on a real kernel's shell socket.
BINDINGS_TARGET = "kernelgate.bindings"
#: MIME type of a binding call shown as a display_data output.
CALL_MIME = "application/vnd.kernelgate.call+json"


def binding_label(namespace: str, name: str) -> str:
    """How a program writes a binding: ``tools.search``, or ``tools['web-search']``.

    >>> binding_label("tools", "search"), binding_label("tools", "class")
    ('tools.search', "tools['class']")
    """
    if name.isidentifier() and not keyword.iskeyword(name):
        return f"{namespace}.{name}"
    return f"{namespace}[{name!r}]"


def iso_now(t: float | None = None) -> str:
    """An ISO 8601 UTC timestamp with microseconds, as Jupyter headers carry."""
    if t is None:
        t = time.time()
    whole = int(t)
    micros = int((t - whole) * 1_000_000)
    global _second
    second = _second
    if second[0] != whole:  # formatting the date and time is most of the cost: once a second
        second = _second = (whole, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole)))
        # (one tuple, swapped whole: any thread reads a matching second and text)
    return f"{second[1]}.{micros:06d}Z"


_second: tuple[int, str] = (-1, "")  # the last second formatted, and its text


class MessageFactory:
    """Make Jupyter messages for one session: headers with unique ids, parent links.

    >>> f = MessageFactory("s1", username="kernelgate")
    >>> m = f.message("stream", {"name": "stdout", "text": "hi"})
    >>> m["header"]["msg_type"], m["header"]["msg_id"], m["content"]["text"]
    ('stream', 's1-1', 'hi')
    """

    __slots__ = ("_ids", "session", "username")

    def __init__(self, session: str, username: str = "kernelgate") -> None:
        self.session = session
        self.username = username
        self._ids = itertools.count(1)

    def header(self, msg_type: str) -> dict[str, Any]:
        return {
            "msg_id": f"{self.session}-{next(self._ids)}",
            "msg_type": msg_type,
            "session": self.session,
            "username": self.username,
            "date": iso_now(),
            "version": PROTOCOL_VERSION,
        }

    def skip(self) -> int:
        """Count a message sent in compact form (it has no header; its number is its id's)."""
        return next(self._ids)

    def message(
        self,
        msg_type: str,
        content: dict[str, Any],
        parent_header: dict[str, Any] | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        return {
            "header": self.header(msg_type),
            "parent_header": parent_header if parent_header is not None else {},
            "metadata": metadata if metadata is not None else {},
            "content": content,
        }


def execute_request_content(code: str) -> dict[str, Any]:
    return {
        "code": code,
        "silent": False,
        "store_history": False,
        "user_expressions": {},
        "allow_stdin": False,
        "stop_on_error": True,
    }


def stream_content(name: str, text: str) -> dict[str, Any]:
    return {"name": name, "text": text}


def display_data_content(
    data: dict[str, Any], metadata: dict[str, Any] | None = None, display_id: str | None = None
) -> dict[str, Any]:
    transient = {} if display_id is None else {"display_id": display_id}
    return {"data": data, "metadata": metadata or {}, "transient": transient}


def clear_output_content(wait: bool) -> dict[str, Any]:
    return {"wait": wait}


def execute_result_content(
    execution_count: int, data: dict[str, Any], metadata: dict[str, Any] | None = None
) -> dict[str, Any]:
    return {"execution_count": execution_count, "data": data, "metadata": metadata or {}}


def error_content(ename: str, evalue: str, traceback: list[str]) -> dict[str, Any]:
    return {"ename": ename, "evalue": evalue, "traceback": traceback}


def execute_reply_content(
    status: str,
    execution_count: int,
    ename: str = "",
    evalue: str = "",
    traceback: list[str] | None = None,
) -> dict[str, Any]:
    content: dict[str, Any] = {"status": status, "execution_count": execution_count}
    if status == "ok":
        content["user_expressions"] = {}
        content["payload"] = []
    elif status == "error":
        content.update(ename=ename, evalue=evalue, traceback=traceback or [])
    return content
