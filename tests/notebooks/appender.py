"""A process that appends a recorded run to a session log, for the crash tests.

    python appender.py RUN.ipynb LOG.ipynb MODE READY_FD HOLD_FD [COUNT]

MODE ``loop``: append COUNT times (forever if 0), writing one byte to READY_FD after each.
MODE ``write``, ``fsync``, ``replace``: append once, but stop *inside* the atomic write
at that step (after the first chunk of the temporary file is written; before its fsync;
right after the rename), tell the parent through READY_FD, and block reading HOLD_FD
until killed. The parent decides when to kill: no timing is involved.
"""

from __future__ import annotations

import os
import sys

from kernelgate.gateway.recording import store
from kernelgate.notebooks import SessionLog, load_run


def main() -> None:
    run_path, log_path, mode, ready_fd, hold_fd = sys.argv[1:6]
    count = int(sys.argv[6]) if len(sys.argv) > 6 else 0
    ready, hold = int(ready_fd), int(hold_fd)
    run = load_run(run_path)
    log = SessionLog(log_path)
    real_write, real_replace = os.write, os.replace

    def stop_here() -> None:
        real_write(ready, b"!")
        os.read(hold, 1)  # the parent never writes: blocks until SIGKILL
        os._exit(3)

    if mode == "loop":
        n = 0
        while count == 0 or n < count:
            log.append(run)
            n += 1
            real_write(ready, b".")
        return
    if mode == "write":
        store._CHUNK = 512  # many small writes: stop after the first one

        def write(fd: int, data: bytes) -> int:
            written = real_write(fd, data)
            if fd not in (ready, hold):
                stop_here()
            return written

        os.write = write  # type: ignore[assignment]
    elif mode == "fsync":

        def fsync(fd: int) -> None:
            stop_here()

        os.fsync = fsync  # type: ignore[assignment]
    elif mode == "replace":

        def replace(src: str, dst: str) -> None:
            real_replace(src, dst)
            stop_here()  # before the directory is synced

        os.replace = replace  # type: ignore[assignment]
    else:
        raise SystemExit(f"unknown mode {mode!r}")
    log.append(run)
    raise SystemExit("the append finished: the stop point was never reached")


if __name__ == "__main__":
    main()
