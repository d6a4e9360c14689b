"""The host-side transform of a TypeScript or JavaScript program into what the Node child runs.

On the trusted side, before a program is sent, :class:`ProgramTransformer` turns the agent's
source into plain JavaScript, the body of an async function:

* TypeScript types are stripped (blanked out: every offset of the source is kept);
* in both languages the last top-level statement, when it is an expression statement, gets a
  ``return`` put right before it, on its own line, so the run's value is the program's last
  expression (as in the Python kernel) and the child needs no parser;
* every line number stays the source's (only the one rewritten line has its columns shifted), so
  the child's tracebacks need no source map;
* what cannot be stripped or parsed raises :class:`ProgramSyntaxError` with the 1-based line and
  1-based column (in characters, i.e. code points) of the SOURCE.

The tools, and why (measured: docs/benchmarks.md "TypeScript type stripping", made by
benchmarks/bench_strip.py): **amaro**'s strip-only mode strips the types. amaro is the stripper
Node itself ships (``--experimental-strip-types``, ``module.stripTypeScriptTypes``: swc compiled
to wasm), so a program that runs under a newer Node's own type stripping runs here the same way;
it keeps every offset (so lines AND columns of errors and tracebacks are the source's), it is a
real TypeScript parser (syntax errors with positions), and it refuses, with a clear message and
position, the TypeScript that is not just types (enum, namespace with values, parameter
properties, ``<T>x`` assertions) instead of transforming it onto other lines. The others tried:
esbuild (npm; its PyPI bindings ``esbuild-py`` take no options, answer "" on TypeScript and need
``distutils``, gone in Python 3.12) and TypeScript's ``transpileModule`` reprint the program, so
lines move; sucrase keeps lines but not columns, silently drops a ``namespace`` that holds values
(the program then fails at run time with "NS is not defined") and does not validate syntax;
ts-blank-space keeps offsets like amaro but needs the 9 MB ``typescript`` package (slower to
start, and it reports no syntax errors itself); Debian's node-typescript is 4.8 (no
``satisfies``). **acorn** (the parser Node uses internally) then parses the JavaScript: it finds
the last top-level statement and reports the syntax that stripping let through (decorators,
which Node 20 cannot run). A tokenizer-level scan of our own would have to know regular
expressions, templates and automatic semicolon insertion to find a statement's start; acorn is
245 kB and exact.

Both are vendored, unmodified, in ``kernelgate/gateway/jsstrip/`` (versions, hashes and how to
refresh: its README.md), as Node vendors amaro itself: ``pip install -e .`` is all a machine
needs besides ``node`` (>= 18), and Python users need nothing new (nothing here runs on import).
They run in one long-lived ``node`` helper per transformer (``jsstrip/helper.js``): starting it
and compiling amaro's wasm costs ~140 ms once (and again after a program over 256 KiB, whose
wasm memory the helper would keep), a 20-line program then ~1 ms, a 500-line one ~10 ms. The
helper only parses text; it never evaluates the program. swc's wasm stack bounds nesting: about
300 levels of nested object literals or arrow functions, 600-800 of brackets, calls or blocks,
5000 terms in one ``+`` chain (CPython stops at 200 nested brackets); deeper is a
:class:`ProgramSyntaxError` saying so.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import itertools
import json
import os
import re
import shutil
import unicodedata
import weakref
from pathlib import Path
from typing import Literal

from .helperpid import HelperPid

__all__ = [
    "DEFAULT_TIMEOUT",
    "MAX_SOURCE_CHARS",
    "RECYCLE_AFTER_CHARS",
    "Language",
    "ProgramSyntaxError",
    "ProgramTransformError",
    "ProgramTransformer",
    "transform_program",
]

Language = Literal["typescript", "javascript"]
_LANGUAGES = ("typescript", "javascript")

HELPER = Path(__file__).with_name("jsstrip") / "helper.js"

# Seconds one transform may take, starting the helper included (~0.1 s cold here; a
# 4 MiB program ~2 s). Past it the helper is killed and the transform fails.
DEFAULT_TIMEOUT = 20.0
#: The longest a helper may take to start (node, the stripper's wasm compiled), whatever
#: the per-program timeout.
START_TIMEOUT = 60.0
#: The line a started helper writes first, once it can transform.
READY = b'{"ready":true}\n'
# The program must fit in one execute_request frame (kernelgate.wire DEFAULT_MAX_FRAME_BYTES,
# 8 MiB of UTF-8 JSON) with room to spare.
MAX_SOURCE_CHARS = 4 * 1024 * 1024

# After a program this long the helper is replaced (the next program pays a cold start): swc's
# wasm memory grows with the largest program and never shrinks (a 4 MiB program leaves the
# helper at ~220 MB resident instead of ~60-90 MB).
RECYCLE_AFTER_CHARS = 256 * 1024

# The helper never gets the host's NODE_OPTIONS (a --require there would run in it).
_HELPER_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}
_STDERR_TAIL = 4096

# JavaScript's line terminators: what V8 (and so the child's tracebacks) and acorn count.
_LINE_BREAK = re.compile(r"\r\n|[\n\r\u2028\u2029]")
_SWC_LINE_BREAK = re.compile(r"\r\n|[\n\r]")
_TRAILING_BREAK = re.compile(r"(?:\r\n|[\n\r\u2028\u2029])\Z")
_SURROGATE = re.compile(r"[\ud800-\udfff]")

# swc says how to write the TypeScript it refuses to strip; these add what to write instead.
_HINTS = {
    "enum": "types are stripped, not compiled: use an object, e.g. "
    "`const Color = { Red: 0, Green: 1 } as const`",
    "namespace": "types are stripped, not compiled: use an object or plain declarations",
    "parameter property": "types are stripped, not compiled: declare the field in the class "
    "and assign it in the constructor",
}


class ProgramTransformError(Exception):
    """The program could not be transformed for a reason other than its syntax: the helper
    (``node``) is missing, died, or took longer than the transformer's timeout."""


class ProgramSyntaxError(ProgramTransformError):
    """The program is not valid TypeScript/JavaScript, or uses what stripping cannot handle.

    ``line`` and ``column`` are 1-based and point into the SOURCE (``column`` counts code
    points, as Python's ``str`` does), like a Python ``SyntaxError``.
    """

    def __init__(self, message: str, line: int, column: int) -> None:
        super().__init__(message, line, column)
        self.message = message
        self.line = line
        self.column = column

    def __str__(self) -> str:
        return f"{self.message} (line {self.line}, column {self.column})"


def _lines(source: str) -> list[str]:
    return _LINE_BREAK.split(source)


def _swc_width(char: str) -> int:
    """How far one character moves swc's column: its terminal width (tab 4, combining 0,
    wide 2) plus one for a character beyond the BMP (measured against amaro 1.2.1;
    tests/node/test_jsprogram.py::test_error_columns_count_characters pins it)."""
    if char == "\t":
        return 4
    if unicodedata.combining(char) or unicodedata.category(char) in ("Mn", "Me", "Cf"):
        width = 0
    elif unicodedata.east_asian_width(char) in ("W", "F"):
        width = 2
    else:
        width = 1
    return width + (1 if ord(char) > 0xFFFF else 0)


def _index_from(text: str, column: int, swc: bool) -> int:
    """The index in ``text`` of a tool's 0-based column: swc's width or UTF-16 units."""
    seen = 0
    for index, char in enumerate(text):
        if seen >= column:
            return index
        seen += _swc_width(char) if swc else (2 if ord(char) > 0xFFFF else 1)
    return len(text)


def _content(line: str) -> str:
    """A line without its line break (a column past its end points at the end, not beyond)."""
    return _TRAILING_BREAK.sub("", line)


def _line_starts(source: str, breaks: re.Pattern[str]) -> list[int]:
    return [0, *(match.end() for match in breaks.finditer(source))]


def _position(source: str, kind: str, line: int, column: int) -> tuple[int, int]:
    """The helper's (line, tool column) as a 1-based (line, code point column) of the source.

    Lines are JavaScript's (what V8's tracebacks count): acorn's already are; swc counts no
    U+2028/U+2029 as line breaks, so its position goes through the offset in the source."""
    starts = _line_starts(source, _LINE_BREAK)
    if kind == "swc":
        swc_starts = _line_starts(source, _SWC_LINE_BREAK)
        if line > len(swc_starts):
            # The helper's closing brace: the source ended too early (an unclosed bracket).
            offset = len(source)
        else:
            line = max(line, 1)
            begin = swc_starts[line - 1]
            end = swc_starts[line] if line < len(swc_starts) else len(source)
            offset = begin + _index_from(_content(source[begin:end]), max(column, 0), swc=True)
    elif kind == "acorn" and 1 <= line <= len(starts):
        begin = starts[line - 1]
        end = starts[line] if line < len(starts) else len(source)
        offset = begin + _index_from(_content(source[begin:end]), max(column, 0), swc=False)
    else:
        return 1, 1
    js_line = bisect.bisect_right(starts, offset)
    return js_line, offset - starts[js_line - 1] + 1


def _message(source: str, answer: dict[str, object], line: int, column: int) -> str:
    kind, message = answer.get("kind"), str(answer.get("message", ""))
    if kind == "nesting":
        return (
            f"the program is nested too deeply to parse ({message}); "
            "flatten its deepest expression or block"
        )
    for what, hint in _HINTS.items():
        if message.startswith(f"TypeScript {what}"):
            return f"{message}; {hint}"
    if "outside of module code" in message or "may appear only with" in message:
        return (
            "a program is the body of a function: it cannot import or export (only "
            "`import type` lines go, stripped with the types, in a program without a "
            "top-level `return`)"
        )
    text = _lines(source)[line - 1]
    if kind == "acorn" and text[column - 1 : column] == "@":
        return f"{message}: decorators are not supported (the program runs as plain JavaScript)"
    return message


def _check_source(source: object, language: object, limit: int) -> None:
    if not isinstance(source, str):
        raise TypeError(f"source must be a str, not {type(source).__name__}")
    if language not in _LANGUAGES:
        raise ValueError(f"language must be 'typescript' or 'javascript', not {language!r}")
    if len(source) > limit:
        raise ProgramSyntaxError(
            f"the program has {len(source):,} characters, more than the {limit:,} a program "
            "may have; send a shorter program",
            1,
            1,
        )
    bad = _SURROGATE.search(source)
    if bad is not None:
        before = _lines(source[: bad.start()])
        raise ProgramSyntaxError(
            f"the program holds a lone surrogate U+{ord(bad.group()):04X}, which is no "
            "character: a program must be valid Unicode text",
            len(before),
            len(before[-1]) + 1,
        )


class ProgramTransformer:
    """Strips TypeScript types and returns the last expression, in a long-lived ``node`` helper.

    One helper process per transformer, started on the first :meth:`transform` (``node`` is
    looked for then, never on import), restarted if it died, killed by :meth:`aclose`. Safe
    for concurrent transforms from one event loop (they take turns: the helper is single
    threaded anyway). Each transform is bounded by ``timeout`` seconds; past it the helper is
    killed and :class:`ProgramTransformError` raised. Use it as ``async with``.
    """

    def __init__(
        self,
        node: str = "node",
        *,
        timeout: float = DEFAULT_TIMEOUT,
        max_source_chars: int = MAX_SOURCE_CHARS,
    ) -> None:
        if not timeout > 0:
            raise ValueError(f"timeout must be > 0 seconds, not {timeout!r}")
        self.node = node
        self.timeout = timeout
        self.max_source_chars = max_source_chars
        # The helper process, signalled and reaped through its pidfd, never by pid (see
        # .helperpid).
        self._helper: HelperPid | None = None
        self._stderr = bytearray()
        self._stderr_task: asyncio.Task[None] | None = None
        self._reaping: set[asyncio.Task[object]] = set()
        self._lock = asyncio.Lock()
        self._ids = itertools.count(1)
        self._closed = False
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def pid(self) -> int | None:
        """The helper's pid while it runs (for tests and diagnostics)."""
        helper = self._helper
        return helper.proc.pid if helper is not None and helper.proc.returncode is None else None

    async def __aenter__(self) -> ProgramTransformer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def transform(self, source: str, language: Language) -> str:
        """The plain JavaScript the Node child runs for ``source`` (see the module docstring).

        Raises :class:`ProgramSyntaxError` for a program that cannot be stripped or parsed,
        :class:`ProgramTransformError` when the helper cannot do its job.
        """
        _check_source(source, language, self.max_source_chars)
        loop = asyncio.get_running_loop()
        if self._loop is not None and self._loop is not loop:
            raise ProgramTransformError(
                "a ProgramTransformer serves the event loop it was first used in (its helper's "
                "pipes belong to it); make one per event loop"
            )
        self._loop = loop
        request = {"id": next(self._ids), "language": language, "source": source}
        line = (json.dumps(request, ensure_ascii=False) + "\n").encode("utf-8")
        async with self._lock:
            if self._closed:
                raise ProgramTransformError("this ProgramTransformer is closed")
            # Starting a helper (node, then compiling the stripper's wasm) is bounded apart:
            # on a loaded host it can take longer than a short per-program timeout allows.
            bound, what = max(self.timeout, START_TIMEOUT), "starting the transform helper"
            try:
                await asyncio.wait_for(self._ensure(), bound)
                bound, what = self.timeout, "transforming the program"
                answer = await asyncio.wait_for(self._ask(line), bound)
            except asyncio.TimeoutError:
                self._kill()
                raise ProgramTransformError(
                    f"{what} took more than {bound:g} s; its helper was stopped (the next "
                    "program starts a new one)"
                ) from None
            except BaseException:
                # Cancelled (or broken) half way: the helper's output can no longer be trusted
                # to line up with requests.
                self._kill()
                raise
            if (
                answer.get("id") != request["id"]
                or answer.get("exiting")
                or len(source) > RECYCLE_AFTER_CHARS
            ):
                self._kill()
        if answer.get("id") != request["id"]:
            raise ProgramTransformError(f"the transform helper answered out of turn: {answer!r}")
        if answer.get("ok") is True:
            code = answer.get("code")
            if not isinstance(code, str):
                raise ProgramTransformError(f"the transform helper sent no code: {answer!r}")
            return code
        if answer.get("kind") == "internal":
            raise ProgramTransformError(f"the transform helper failed: {answer.get('message')}")
        raw_line, raw_column = answer.get("line"), answer.get("column")
        where = _position(
            source,
            str(answer.get("kind")),
            raw_line if isinstance(raw_line, int) else 1,
            raw_column if isinstance(raw_column, int) else 0,
        )
        raise ProgramSyntaxError(_message(source, answer, *where), *where)

    async def _ask(self, line: bytes) -> dict[str, object]:
        helper = await self._ensure()
        proc = helper.proc
        assert proc.stdin is not None and proc.stdout is not None
        try:
            proc.stdin.write(line)
            await proc.stdin.drain()
            reply = await proc.stdout.readline()
        except (BrokenPipeError, ConnectionResetError):
            reply = b""
        if not reply.endswith(b"\n"):
            await self._reap(helper)
            raise ProgramTransformError(
                f"the transform helper ({self.node} {HELPER}) exited "
                f"(status {proc.returncode}) without an answer; its stderr: "
                f"{self._stderr.decode('utf-8', 'replace').strip() or '(empty)'}"
            )
        try:
            answer = json.loads(reply)
        except ValueError:
            answer = None
        if not isinstance(answer, dict):
            raise ProgramTransformError(f"the transform helper answered {reply[:200]!r}")
        return answer

    async def _ensure(self) -> HelperPid:
        helper = self._helper
        if helper is not None and helper.proc.returncode is None:
            return helper
        if helper is not None:
            self._kill()
        node = shutil.which(self.node)
        if node is None:
            raise ProgramTransformError(
                f"Node.js was not found: looked for {self.node!r} on PATH "
                f"({os.environ.get('PATH', '')}); TypeScript and JavaScript programs need "
                "node >= 18 on the host (Debian: apt-get install nodejs), or give its path"
            )
        self._stderr.clear()
        # Cancelled (or timed out) while spawning, asyncio kills the new process itself
        # (test_cancelled_at_any_step_leaves_no_helper).
        proc = await asyncio.create_subprocess_exec(
            node,
            str(HELPER),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=_HELPER_ENV,
            # One answer holds the whole program (JSON-escaped at worst 6 chars for one).
            limit=6 * self.max_source_chars + 65536,
        )
        self._helper = helper = HelperPid(proc)
        # Not a method: a running task must not keep the transformer alive (see below).
        self._stderr_task = asyncio.ensure_future(_drain_stderr(helper, self._stderr))
        # A transformer dropped without aclose() (a gateway never closed) takes its helper
        # with it: the helper only ever waits on our pipe.
        weakref.finalize(self, helper.kill_and_close)
        assert proc.stdout is not None
        ready = await proc.stdout.readline()  # bounded by the caller
        if ready != READY:
            await self._reap(helper)
            raise ProgramTransformError(
                f"the transform helper ({self.node} {HELPER}) did not start: it said "
                f"{ready[:200]!r} (status {proc.returncode}); its stderr: "
                f"{self._stderr.decode('utf-8', 'replace').strip() or '(empty)'}"
            )
        return helper

    async def _reap(self, helper: HelperPid) -> None:
        helper.kill()
        await helper.proc.wait()
        helper.close()
        if self._stderr_task is not None:
            # Its pipe is at EOF once the process is gone (nothing else holds it).
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(self._stderr_task), 1.0)
        if self._helper is helper:
            self._helper = None

    def _kill(self) -> None:
        """Kill the helper now (no await: also used while being cancelled); reaped in a task
        that :meth:`aclose` waits for."""
        helper, self._helper = self._helper, None
        if helper is None:
            return
        helper.kill()
        task: asyncio.Task[object] = asyncio.ensure_future(helper.proc.wait())
        self._reaping.add(task)
        task.add_done_callback(self._reaping.discard)
        task.add_done_callback(lambda _: helper.close())
        if self._stderr_task is not None:
            self._stderr_task.cancel()
            self._stderr_task = None

    def close_abandoned(self) -> None:
        """Kill and reap the helper of a transformer whose event loop has ended (an
        ``asyncio.run(gw.run(...))`` then ``gw.close()``): nothing of that loop can run any
        more, so the helper is killed and waited for here, and its pipes close as the
        transformer goes. Later transforms raise. Idempotent."""
        self._closed = True
        helper, self._helper = self._helper, None
        if helper is not None:
            # Its returncode may be None for good though it was reaped (the watcher's word
            # never reached the ended loop): by pidfd, never its pid.
            helper.kill_and_reap()

    async def aclose(self) -> None:
        """Kill the helper and wait for it; later transforms raise. Idempotent."""
        self._closed = True
        self._kill()
        if self._reaping:
            await asyncio.gather(*self._reaping, return_exceptions=True)


def transform_program(
    source: str, language: Language, *, node: str = "node", timeout: float = DEFAULT_TIMEOUT
) -> str:
    """:meth:`ProgramTransformer.transform` for synchronous code (one helper per call: ~0.1 s;
    keep a :class:`ProgramTransformer` for many programs). Not inside a running event loop."""

    async def once() -> str:
        async with ProgramTransformer(node, timeout=timeout) as transformer:
            return await transformer.transform(source, language)

    return asyncio.run(once())


async def _drain_stderr(helper: HelperPid, tail: bytearray) -> None:
    """Keep the last of a helper's stderr in ``tail`` (for error messages)."""
    proc = helper.proc
    assert proc.stderr is not None
    try:
        while chunk := await proc.stderr.read(65536):
            tail += chunk
            del tail[:-_STDERR_TAIL]
    except asyncio.CancelledError:
        # By _kill, or by asyncio.run() ending its loop with the helper still up (a
        # gateway's runs in asyncio.run without aclose()): the helper goes with its loop,
        # reaped while that loop still runs, so nothing is left for a closed loop to do.
        if proc.returncode is None:
            helper.kill()
            await proc.wait()
        raise
