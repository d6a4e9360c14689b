"""Bytes <-> frames on fd 3: one UTF-8 JSON object per line, with a size ceiling.

Sans-I/O: feed bytes with :meth:`FrameDecoder.receive_data`, take whole frames with
:meth:`FrameDecoder.next_frame`. A frame longer than ``max_frame_bytes`` is refused as soon
as the decoder has seen that many bytes without a newline: an unbounded newline-free flood is
never joined into one buffer.
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
    """

    __slots__ = ("_buf", "_closed", "_failed", "_max", "_scan_from")

    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        if max_frame_bytes < 2:
            raise ValueError(f"max_frame_bytes must be at least 2, got {max_frame_bytes}")
        self._buf = bytearray()
        self._scan_from = 0
        self._max = max_frame_bytes
        self._closed = False
        self._failed: RemoteProtocolError | None = None

    @property
    def max_frame_bytes(self) -> int:
        return self._max

    @property
    def pending_bytes(self) -> int:
        """Bytes received but not yet returned as a frame."""
        return len(self._buf)

    def receive_data(self, data: bytes) -> None:
        """Add bytes from the peer. ``b""`` means end of stream."""
        if self._failed is not None:
            return  # after a violation the stream is dead; nothing more is buffered
        if not data:
            self._closed = True
            return
        if self._closed:
            raise RemoteProtocolError("data received after end of stream")
        self._buf += data
        # Refuse early when the unterminated tail already exceeds the ceiling: the check
        # in next_frame would only run once a newline shows up.
        if len(self._buf) > self._max and self._buf.find(b"\n", self._scan_from) < 0:
            self._fail_oversized()

    def _fail_oversized(self) -> None:
        self._failed = RemoteProtocolError(
            f"frame over max_frame_bytes={self._max} bytes without a newline; "
            "frames must be one JSON object per line"
        )
        self._buf.clear()
        self._scan_from = 0
        raise self._failed

    def next_frame(self) -> bytes | None:
        """Return the next complete frame (without its newline), or ``None`` if none yet.

        Raises :class:`RemoteProtocolError` for an oversized frame, or at end of stream
        with a partial frame left over.
        """
        if self._failed is not None:
            raise self._failed
        buf = self._buf
        nl = buf.find(b"\n", self._scan_from)
        if nl < 0:
            if len(buf) > self._max:
                self._fail_oversized()
            self._scan_from = len(buf)
            if self._closed and buf:
                self._failed = RemoteProtocolError(
                    f"stream ended inside a frame ({len(buf)} bytes without a newline)"
                )
                raise self._failed
            return None
        if nl > self._max:
            self._fail_oversized()
        frame = bytes(buf[:nl])
        del buf[: nl + 1]
        self._scan_from = 0
        return frame

    @property
    def at_eof(self) -> bool:
        """True once the peer ended the stream and every frame has been taken."""
        return self._closed and not self._buf
