"""Bytes <-> frames on fd 3: one UTF-8 JSON object per line, with a size ceiling.

Sans-I/O: feed bytes with :meth:`FrameDecoder.receive_data`, take whole frames with
:meth:`FrameDecoder.next_frame`. A frame longer than ``max_frame_bytes`` (newline not
counted) is refused as soon as the decoder holds more than that many bytes after the last
newline: an unbounded newline-free flood is never joined into one buffer, and the bytes held
never exceed ``max_frame_bytes`` plus one chunk.
"""

from __future__ import annotations

from .errors import RemoteProtocolError

__all__ = ["DEFAULT_MAX_FRAME_BYTES", "FrameDecoder"]

DEFAULT_MAX_FRAME_BYTES = 8 * 1024 * 1024


class FrameDecoder:
    """Split a byte stream into newline-terminated frames.

    >>> d = FrameDecoder(max_frame_bytes=64)
    >>> d.receive_data(b'{"a": 1}\\n{"b"')
    >>> d.next_frame()
    b'{"a": 1}'
    >>> d.next_frame() is None
    True

    After a violation (oversized frame, data after end of stream, end of stream inside a
    frame) the decoder is dead: every later call raises the same
    :class:`RemoteProtocolError`.
    """

    __slots__ = ("_buf", "_closed", "_deferred", "_failed", "_max", "_pos", "_tail")

    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        if max_frame_bytes < 2:
            raise ValueError(f"max_frame_bytes must be at least 2, got {max_frame_bytes}")
        # The bytes held: the chunk as it came (bytes) while its frames are taken, or a
        # bytearray while a frame is being joined across chunks. Frames are taken from
        # _pos on, without moving what follows (one copy per frame, its own).
        self._buf: bytes | bytearray = b""
        self._pos = 0
        # Offset in _buf just after its last newline: bytes before it are complete frames,
        # bytes after it are the unterminated tail.
        self._tail = 0
        self._max = max_frame_bytes
        self._closed = False
        self._failed: RemoteProtocolError | None = None
        self._deferred: str | None = None  # a refusal waiting behind complete frames

    @property
    def max_frame_bytes(self) -> int:
        return self._max

    @property
    def pending_bytes(self) -> int:
        """Bytes received but not yet returned as a frame."""
        return len(self._buf) - self._pos

    def receive_data(self, data: bytes) -> None:
        """Add bytes from the peer. ``b""`` means end of stream."""
        if self._failed is not None:
            raise self._failed
        if self._deferred is not None:
            self._fail(self._deferred)
        if not data:
            self._closed = True
            return
        if self._closed:
            self._fail("data received after end of stream")
        held = self._buf
        pos = self._pos
        if pos == len(held):  # nothing held (the usual case): the chunk as it is
            buf: bytes | bytearray = data if type(data) is bytes else bytes(data)
            start = self._tail = 0
        else:  # joined to what is held: a bytearray from now on
            if isinstance(held, bytearray):
                del held[:pos]
                buf = held
            else:
                buf = bytearray(memoryview(held)[pos:])
            self._tail -= pos
            start = len(buf)
            buf += data
        self._buf = buf
        self._pos = 0
        nl = data.rfind(b"\n")
        if nl >= 0:
            self._tail = start + nl + 1
        # Refuse as soon as the unterminated tail passes the ceiling: the check in
        # next_frame would only run once a newline shows up.
        tail = len(buf) - self._tail
        if tail > self._max:
            message = (
                f"frame over max_frame_bytes={self._max} bytes ({tail} bytes so far without "
                "a newline); frames must be one JSON object per line"
            )
            if self._tail == 0:
                self._fail(message)
            # Complete frames came before the flood (output printed just before it, say):
            # they are delivered first, the flood is dropped, and the refusal follows.
            self._buf = buf[: self._tail]
            self._deferred = message

    def _fail(self, message: str) -> None:
        self._failed = RemoteProtocolError(message)
        self._buf = b""
        self._pos = self._tail = 0
        raise self._failed

    def next_frame(self) -> bytes | None:
        """Return the next complete frame (without its newline), or ``None`` if none yet.

        Raises :class:`RemoteProtocolError` for an oversized frame, or at end of stream
        with a partial frame left over.
        """
        if self._failed is not None:
            raise self._failed
        pos = self._pos
        buf = self._buf
        if pos >= self._tail:  # no newline held: no complete frame
            if self._deferred is not None:
                self._fail(self._deferred)
            if self._closed and len(buf) > pos:
                self._fail(
                    f"stream ended inside a frame ({len(buf) - pos} bytes without a newline)"
                )
            return None
        nl = buf.find(b"\n", pos, self._tail)
        if nl - pos > self._max:
            self._fail(
                f"frame of {nl - pos} bytes is over max_frame_bytes={self._max}; "
                "frames must be one JSON object per line"
            )
        frame = buf[pos:nl]
        if nl + 1 == len(buf):  # all taken: hold nothing
            self._buf = b""
            self._pos = self._tail = 0
        else:
            self._pos = nl + 1
        return frame if type(frame) is bytes else bytes(frame)

    @property
    def at_eof(self) -> bool:
        """True once the peer ended the stream and every frame has been taken."""
        return self._closed and self._pos >= len(self._buf)
