"""``sys.stdout`` and ``sys.stderr`` of the child, as ordered ``stream`` messages on fd 3.

Writes are coalesced into lines (one ``print`` is one message); an unterminated tail goes out
on ``flush()``, before every binding call, and at the end. One ledger meters both streams:
once the program has written more than the output budget, the host keeps only the last
part of what comes (head and tail, the middle counted: it sees every byte, so its count is
exact), so the rest is sent in bulk: a message per 64 KiB, or a line when none went out in
the last 20 ms (a slow printer's lines still go at once). A flood then costs few messages
and no host memory. A run stopped at its wall clock sends what it holds on the host's
SIGTERM (:func:`flush_on_sigterm`) before it dies.

Any text is sent faithfully: lone surrogates (``"\\ud800"``, or undecodable bytes carried
as surrogate escapes) are shown escaped (``\\ud800``), and bytes written to
``sys.stdout.buffer`` that are not UTF-8 as ``\\xff``. Threads may write at once: the
buffer is guarded by a lock, and each message leaves whole.
"""

from __future__ import annotations

import codecs
import io
import signal
import threading
from collections.abc import Callable
from time import monotonic as _monotonic  # bound now: a program's patch changes nothing
from typing import Any

from kernelgate.model.text import escape_text

__all__ = ["OutputLedger", "OutputStream", "escape_text", "flush_on_sigterm"]

# Bound now: a program that rebinds the signal module's names changes nothing here.
_set_handler = signal.signal
_raise_signal = signal.raise_signal
_SIGTERM, _SIG_DFL = signal.SIGTERM, signal.SIG_DFL

_CHUNK = 64 * 1024  # largest stream message; keeps frames far below the ceiling
#: Past the budget, a line waits for more unless no message went out this long.
_QUIET_S = 0.02


class OutputLedger:
    """The output budget both streams draw on (characters; the host meters exact bytes):
    within it, each line is sent as it is written; past it, in bulk."""

    __slots__ = ("remaining", "last_sent")

    def __init__(self, budget: int) -> None:
        self.remaining = budget
        self.last_sent = 0.0  # monotonic time of the last message past the budget


class OutputStream(io.TextIOBase):
    """A text stream that sends what is written as Jupyter ``stream`` messages."""

    def __init__(self, name: str, send: Callable[[str, str], None], ledger: OutputLedger) -> None:
        super().__init__()
        self._name = name
        self._send = send
        self._ledger = ledger
        self._parts: list[str] = []
        self._size = 0
        # Reentrant: a signal handler may print while its thread is inside write().
        self._lock = threading.RLock()
        self._buffer: _BinaryWriter | None = None

    @property
    def name(self) -> str:
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

    @property
    def buffer(self) -> _BinaryWriter:
        """Bytes written here are decoded as UTF-8 (others shown as ``\\xff``) and sent."""
        if self._buffer is None:
            self._buffer = _BinaryWriter(self)
        return self._buffer

    def write(self, s: Any) -> int:
        if type(s) is not str:
            if not isinstance(s, str):
                raise TypeError(f"write() argument must be str, not {type(s).__name__}")
            s = str.__str__(s)
        n = len(s)
        ledger = self._ledger
        if not n:
            return n
        with self._lock:
            ledger.remaining -= n
            self._parts.append(s)
            self._size += n
            text = ""
            if self._size >= _CHUNK:
                text = self._take(whole_lines_only=True)
            elif "\n" in s:
                if ledger.remaining >= 0:
                    text = self._take(whole_lines_only=True)
                else:  # past the budget: bulk, unless the stream has been quiet
                    now = _monotonic()
                    if now - ledger.last_sent >= _QUIET_S:
                        ledger.last_sent = now
                        text = self._take(whole_lines_only=True)
        # Sent outside the lock: sending takes fd 3's lock, which a thread blocked on
        # this one may hold (a signal handler printing mid-write).
        if text:
            self._emit(text)
        return n

    def _take(self, whole_lines_only: bool) -> str:
        """Take what is buffered (up to the last newline when asked); lock held."""
        text = "".join(self._parts)
        self._parts.clear()
        self._size = 0
        if whole_lines_only and len(text) < _CHUNK:
            cut = text.rfind("\n") + 1
            if cut < len(text):
                self._parts.append(text[cut:])
                self._size = len(text) - cut
                text = text[:cut]
        return text

    def _emit(self, text: str) -> None:
        for piece in _pieces(text):
            self._send(self._name, piece)

    def take_rest(self) -> list[tuple[str, str]]:
        """What :meth:`finish` would send, as ``(name, text)`` messages to send, not sent:
        the reporter sends them with its last messages, in one write."""
        if self._buffer is not None:
            self._buffer.finish()
        if not self._parts:
            return []
        with self._lock:
            text = self._take(whole_lines_only=False)
        return [(self._name, piece) for piece in _pieces(text)]

    def finish(self) -> None:
        """Flush, with a character left incomplete in ``buffer`` shown as its bytes."""
        if self._buffer is not None:
            self._buffer.finish()
        self.flush()

    def flush(self) -> None:
        if self._parts:
            with self._lock:
                text = self._take(whole_lines_only=False)
            if text:
                self._emit(text)

    def close(self) -> None:
        # Programs that close sys.stdout must not lose what is buffered; the stream stays
        # usable because the bootstrap flushes it at the end.
        self.flush()


def _pieces(text: str) -> list[str]:
    """``text`` escaped, in messages of at most :data:`_CHUNK` characters."""
    text = escape_text(text)
    return [text[i : i + _CHUNK] for i in range(0, len(text), _CHUNK)]


class _BinaryWriter(io.RawIOBase):
    """``sys.stdout.buffer``: bytes in, text out through the stream (UTF-8, undecodable
    bytes escaped as ``\\xff``; a character split across writes is joined)."""

    def __init__(self, stream: OutputStream) -> None:
        super().__init__()
        self._stream = stream
        self._decoder = codecs.getincrementaldecoder("utf-8")("backslashreplace")
        self._lock = threading.Lock()

    def writable(self) -> bool:
        return True

    def write(self, b: Any) -> int:
        data = bytes(memoryview(b))
        with self._lock:
            text = self._decoder.decode(data)
        if text:
            self._stream.write(text)
        return len(data)

    def flush(self) -> None:
        self._stream.flush()  # a character split across writes stays for the next one

    def finish(self) -> None:
        with self._lock:
            text = self._decoder.decode(b"", final=True)
        if text:
            self._stream.write(text)

    def close(self) -> None:
        self.flush()  # stays usable, as the text stream does


def flush_on_sigterm(streams: tuple[OutputStream, ...]) -> None:
    """On SIGTERM (the host's first word when the wall clock runs out; SIGKILL follows
    after the grace), send what ``streams`` hold, then die of SIGTERM as before: lines
    written past the budget wait for bulk, and a run stopped then would lose them. A
    program that sets its own SIGTERM handler replaces this one."""

    def on_term(signum: int, frame: Any) -> None:
        for stream in streams:
            try:
                stream.flush()
            except BaseException:
                pass
        _set_handler(_SIGTERM, _SIG_DFL)
        _raise_signal(_SIGTERM)

    _set_handler(_SIGTERM, on_term)
