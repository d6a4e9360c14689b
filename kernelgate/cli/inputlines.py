"""Lines of standard input for an asyncio program that reads them only now and then
(``kernelgate replay --debug`` reads a command when the program stops)."""

from __future__ import annotations

import asyncio
import os
import threading
from typing import TextIO

__all__ = ["InputLines"]


class InputLines:
    """Lines of standard input, read by a thread of their own (a program may run while
    nobody types), started at the first stop. ``None`` is the end of input."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.queue: asyncio.Queue[str | None] = asyncio.Queue()
        self.started = False
        self.ended = False

    def _read(self, loop: asyncio.AbstractEventLoop) -> None:
        def put(line: str | None) -> None:
            try:
                loop.call_soon_threadsafe(self.queue.put_nowait, line)
            except RuntimeError:  # the loop has closed: nobody is reading any more
                raise SystemExit from None

        try:
            fd = self.stream.fileno()
        except (AttributeError, OSError, ValueError):
            fd = -1
        if fd < 0:
            # Not a file (a test's StringIO): its lines, then the end.
            for line in self.stream:
                put(line)
            put(None)
            return
        # os.read, not the stream: a daemon thread must hold no lock of sys.stdin's that
        # the interpreter's exit would wait for.
        pending = b""
        while True:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                chunk = b""
            if not chunk:
                if pending:
                    put(pending.decode("utf-8", "replace"))
                put(None)
                return
            pending += chunk
            *whole, pending = pending.split(b"\n")
            for raw in whole:
                put(raw.decode("utf-8", "replace"))

    async def line(self) -> str | None:
        if self.ended:
            return None
        if not self.started:
            self.started = True
            loop = asyncio.get_running_loop()
            threading.Thread(target=self._read, args=(loop,), daemon=True).start()
        line = await self.queue.get()
        if line is None:
            self.ended = True
            return None
        return line.rstrip("\r\n")
