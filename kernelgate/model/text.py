"""Text that can always be shown and sent: cut to a limit with a marker, lone surrogates
escaped. Both sides use it: the child for what a program's objects say about themselves,
the host for what a binding's exception says. Stdlib only; nothing here raises.

>>> safe_str(ValueError("x" * 100), 50)
'xxxxxxxxxx... [90 more characters cut]'
>>> escape_text("bad \\ud800 text")
'bad \\\\ud800 text'
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["MAX_NAME", "cap_text", "escape_text", "safe_str", "strip_ansi", "type_name"]

#: Longest class name a diagnostic shows (the host keeps no more either).
MAX_NAME = 200

#: ANSI escape sequences: CSI (colours, cursor), OSC (titles, links, clipboard) ended by BEL
#: or ST, other two-character ESC sequences, then any ESC left alone.
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-Z\\-_]|\x1b")


def strip_ansi(text: str) -> str:
    """``text`` without ANSI escape sequences (what a kernel's coloured traceback adds), so
    readers that want plain text (agents, recordings read back) get it.

    >>> strip_ansi("\\x1b[0;31mValueError\\x1b[0m: bad")
    'ValueError: bad'
    """
    return _ANSI.sub("", text) if "\x1b" in text else text


#: Control characters but tab and newline: C0, DEL and C1 (``\x9b`` is a CSI to some
#: terminals, as ``\x1b[`` is).
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def escape_controls(text: str) -> str:
    """``text`` with every control character but tab and newline written as its escape:
    what a terminal or a front end would act on (ANSI, OSC, bells) shows as text.

    >>> escape_controls("\\x1b[2J\\x1b]0;pwned\\x07ok")
    '\\\\x1b[2J\\\\x1b]0;pwned\\\\x07ok'
    """
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def escape_text(text: str) -> str:
    """``text`` with each lone surrogate (no UTF-8 form) written as its escape, ``\\udcff``."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")


def safe_str(obj: Any, limit: int) -> str:
    """``str(obj)`` cut to ``limit`` characters with a marker, lone surrogates escaped
    (``\\ud800``) so it can always be sent; never raises (``str()`` is the object's own
    code: in the child, the program's)."""
    try:
        text = str(obj)
        if type(text) is not str:
            raise TypeError
    except BaseException:
        return f"<{type_name(obj)}: str() failed>"
    return cap_text(text, limit)


def cap_text(text: str, limit: int) -> str:
    """``text`` with lone surrogates escaped, cut to ``limit`` characters (the marker
    saying how many were cut included)."""
    if len(text) > limit:
        keep = max(0, limit - 40)
        text = text[:keep] + f"... [{len(text) - keep} more characters cut]"
    try:
        return escape_text(text)
    except BaseException:
        return "<text could not be shown>"


def type_name(obj: Any) -> str:
    """The qualified name of ``obj``'s class, cut to :data:`MAX_NAME`; never raises."""
    try:
        name = type(obj).__qualname__
        if type(name) is not str:
            return "object"
        return cap_text(name, MAX_NAME)
    except BaseException:
        return "object"
