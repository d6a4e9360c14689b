"""A run as a model reads it: :class:`ToolOutput`, its text within ``max_chars``, and the
shapes the model APIs take it in.

The text is what the program printed, then its value as JSON, or, on failure, the kind,
the message, the program's traceback and what it printed before failing. Text over
``max_chars`` is cut in the middle of each part that has to give (the printed output and
stderr first; the error and the value are kept whole where they fit), each cut marked
once, saying how many characters and lines are not there: for the printed output, what
the run itself dropped (``max_output_bytes``, :attr:`RunResult.output_cut`) counted in,
so the one number is all that is missing. Images the run showed are attached for the APIs
that take them (:mod:`kernelgate.gateway.images`), and a line in the text stands for each.

>>> out = tool_output(RunResult(status="ok", value=[1], stdout="x" * 1000), max_chars=400)
>>> print(out.text.splitlines()[2])  # doctest: +NORMALIZE_WHITESPACE
[... kernelgate cut 766 characters (0 lines) of the printed output here to stay within
max_chars=400; print less, or print a summary ...]
>>> len(out.text) <= 400
True
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kernelgate.model.result import ErrorInfo, RunResult

from .images import MAX_IMAGE_BYTES, MAX_IMAGES, ToolImage, collect_images

__all__ = [
    "MAX_CHARS",
    "MIN_CHARS",
    "ToolOutput",
    "invalid_input",
    "program_of",
    "tool_output",
]

#: How much text a result gives the model by default (the recording keeps everything).
MAX_CHARS = 20_000
#: The least ``max_chars`` can be: room for every part's marker.
MIN_CHARS = 400
#: What a part cut to make room keeps at least, while others still have more to give.
_FLOOR = 100


@dataclass(frozen=True)
class ToolOutput:
    """A run as a model reads it: ``text`` (cut to ``max_chars``), ``is_error``, the
    ``images`` it showed (attached or, with the reason, not), and the whole
    :class:`RunResult` as ``result`` (for the recording and the host)."""

    text: str
    is_error: bool
    result: RunResult
    images: tuple[ToolImage, ...] = field(default=())

    @property
    def attached(self) -> list[ToolImage]:
        """The images that go to the APIs that take them."""
        return [image for image in self.images if image.attached]

    def to_anthropic(self, tool_use_id: str) -> dict[str, Any]:
        """A ``tool_result`` content block answering ``tool_use_id``: the text, then an
        ``image`` block (base64) per attached image."""
        content: str | list[dict[str, Any]] = self.text
        if self.attached:
            content = [{"type": "text", "text": self.text}] + [
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": i.mime_type, "data": i.data},
                }
                for i in self.attached
            ]
        return {
            "type": "tool_result",
            "tool_use_id": tool_use_id,
            "content": content,
            "is_error": self.is_error,
        }

    def to_openai(self, tool_call_id: str) -> dict[str, Any]:
        """A Chat Completions ``tool`` message answering ``tool_call_id``. Its content is
        text only: images are their lines in the text, and a line says they are not
        shown (the Responses API takes them: :meth:`to_openai_responses`)."""
        text = self.text
        n = len(self.attached)
        if n:
            text += (
                f"\n[kernelgate: {n} image{'s' if n > 1 else ''} not shown: a Chat "
                "Completions tool message carries text only]"
            )
        return {"role": "tool", "tool_call_id": tool_call_id, "content": text}

    def to_openai_responses(self, call_id: str) -> dict[str, Any]:
        """A Responses API ``function_call_output`` input item answering ``call_id``: the
        text, and an ``input_image`` (a data URL) per attached image."""
        output: str | list[dict[str, Any]] = self.text
        if self.attached:
            output = [{"type": "input_text", "text": self.text}] + [
                {
                    "type": "input_image",
                    "image_url": f"data:{i.mime_type};base64,{i.data}",
                    "detail": "auto",
                }
                for i in self.attached
            ]
        return {"type": "function_call_output", "call_id": call_id, "output": output}

    def to_mcp(self) -> dict[str, Any]:
        """An MCP ``CallToolResult`` (its JSON): ``content`` is the text, then an
        ``ImageContent`` per attached image; ``isError``."""
        content: list[dict[str, Any]] = [{"type": "text", "text": self.text}]
        content += [
            {"type": "image", "data": i.data, "mimeType": i.mime_type} for i in self.attached
        ]
        return {"content": content, "isError": self.is_error}


# -- model input ---------------------------------------------------------------------------------

_SEND = 'send {"code": "<the program, as one string>"}'


def program_of(call: object) -> str:
    """The program in a ``run_code`` call as a model sent it: the code string itself, or
    the tool input object ``{"code": "..."}`` (what the SDKs give as a tool call's
    input). Raises :class:`ValueError` saying what was wrong and what to send."""
    if isinstance(call, str):
        return call
    if isinstance(call, Mapping):
        code = call.get("code")
        extra = sorted(str(k) for k in call if k != "code")
        if "code" not in call:
            raise ValueError(
                f"run_code takes one argument, code; the input has {_keys(call)}: {_SEND}"
            )
        if not isinstance(code, str):
            raise ValueError(
                f"run_code's argument code must be a string (the program), got "
                f"{_type(code)}: {_SEND}"
            )
        if extra:
            raise ValueError(
                f"run_code takes one argument, code; the input also has {', '.join(extra)}: {_SEND}"
            )
        return code
    raise ValueError(
        f"run_code takes one argument, code (the program as a string); got {_type(call)}: {_SEND}"
    )


def _keys(call: Mapping[Any, Any]) -> str:
    keys = [str(k) for k in list(call)[:10]]
    return "no arguments" if not keys else "only " + ", ".join(repr(k) for k in keys)


def _type(value: object) -> str:
    if value is None:
        return "null (None)"
    return type(value).__name__


def invalid_input(message: str) -> ToolOutput:
    """The answer to a malformed ``run_code`` call: nothing ran; the text says what was
    wrong and what to send."""
    result = RunResult(status="exception", error=ErrorInfo("InvalidToolInput", message))
    return ToolOutput(text=f"error (invalid input): {message}", is_error=True, result=result)


# -- the text ------------------------------------------------------------------------------------


@dataclass
class _Part:
    """One part of the text: a labelled block (or the error, unlabelled), whose body is
    ``head`` then ``tail``: apart when the run dropped text between them (``run``: the
    characters and lines it dropped)."""

    label: str
    head: str
    tail: str = ""
    run: tuple[int, int] | None = None
    what: str = "the printed output"
    advice: str = "print less, or print a summary"
    tier: int = 0  # 0: cut first
    keep: int = 0

    @property
    def size(self) -> int:
        return len(self.head) + len(self.tail)

    def marker(
        self,
        chars: int,
        lines: int,
        ran_over: bool,
        max_chars: int,
        limit: Any,
        compact: bool = False,
    ) -> str:
        if compact:  # when every part must give and full markers would not fit
            return f"\n[... kernelgate cut {chars} characters ({lines} lines) ...]\n"
        why = []
        if self.run is not None:
            why.append(f"max_output_bytes={limit}")
        if ran_over:
            why.append(f"max_chars={max_chars}")
        advice = f"; {self.advice}" if self.advice else ""
        return (
            f"\n[... kernelgate cut {chars} characters ({lines} lines) of {self.what} here "
            f"to stay within {' and '.join(why)}{advice} ...]\n"
        )

    def marker_room(self, max_chars: int, limit: Any, compact: bool) -> int:
        """The longest its marker can be (the counts at their largest)."""
        run_chars, run_lines = self.run or (0, 0)
        chars = self.size + run_chars
        return len(self.marker(chars, chars + run_lines, True, max_chars, limit, compact))

    def render(self, max_chars: int, limit: Any, compact: bool) -> str:
        text = self.head + self.tail
        keep = min(self.keep, len(text))
        if keep >= len(text) and self.run is None:
            body = text
        else:
            h = keep * 2 // 3
            t = keep - h
            if self.run is not None:  # the one cut takes in the run's: the gap is inside it
                gap = len(self.head)
                h = min(h, gap)
                t = min(keep - h, len(text) - gap)
                h = min(gap, keep - t)
            h, t = _on_lines(text, h, t)
            dropped = text[h : len(text) - t]
            run_chars, run_lines = self.run or (0, 0)
            marker = self.marker(
                run_chars + len(dropped),
                run_lines + dropped.count("\n"),
                bool(dropped),
                max_chars,
                limit,
                compact,
            )
            body = text[:h] + marker + (text[len(text) - t :] if t else "")
        body = body.rstrip("\n")
        return f"{self.label}:\n{body}" if self.label else body


def _on_lines(text: str, h: int, t: int) -> tuple[int, int]:
    """``h`` and ``t`` moved in to the nearest line breaks (within 200 characters), so
    what is kept is whole lines where the text is lines."""
    end = len(text) - t
    if 0 < h < end and text[h - 1] != "\n":
        brk = text.rfind("\n", max(0, h - 200), h)
        if brk >= 0:
            h = brk + 1
    if h < end < len(text) and text[end - 1] != "\n":
        brk = text.find("\n", end, min(len(text), end + 200))
        if brk >= 0:
            t = len(text) - brk - 1
    return h, t


def _cap(sizes: list[int], room: int) -> int:
    """The largest ``c`` with ``sum(min(s, c)) <= room`` (``room`` if none is cut)."""
    left = room
    ordered = sorted(sizes)
    for n, size in enumerate(ordered):
        share = left // (len(ordered) - n)
        if size > share:
            return max(share, 0)
        left -= size
    return max(room, 0)


def _fill(parts: list[_Part], room: int, markers: dict[int, int]) -> bool:
    """Share ``room`` among ``parts``, smaller ones whole, each cut one paying for its
    marker; whether it all fits."""
    if not parts:
        return room >= 0
    cut: set[int] = set()
    cap = 0
    for _ in range(len(parts) + 1):
        avail = room - sum(markers[id(p)] for p in parts if id(p) in cut and p.run is None)
        cap = _cap([p.size for p in parts], avail)
        now = {id(p) for p in parts if p.size > cap}
        if now == cut:
            break
        cut = now
    for p in parts:
        p.keep = min(p.size, cap)
    used = sum(p.keep for p in parts)
    used += sum(markers[id(p)] for p in parts if p.keep < p.size and p.run is None)
    return used <= room


def _fit(parts: list[_Part], max_chars: int, limit: Any) -> bool:
    """Set each part's ``keep`` so the text is at most ``max_chars``; whether the markers
    have to be compact."""
    if _fit_with(parts, max_chars, limit, False):
        return False
    _fit_with(parts, max_chars, limit, True)
    return True


def _fit_with(parts: list[_Part], max_chars: int, limit: Any, compact: bool) -> bool:
    """:func:`_fit` with markers of one kind; whether it all fits."""
    markers = {id(p): p.marker_room(max_chars, limit, compact) for p in parts}
    fixed = sum(len(p.label) + 2 for p in parts if p.label) + max(len(parts) - 1, 0)
    budget = max_chars - fixed - sum(markers[id(p)] for p in parts if p.run is not None)
    low = [p for p in parts if p.tier == 0]
    high = [p for p in parts if p.tier == 1]
    for p in high:
        p.keep = p.size
    room = budget - sum(p.size for p in high)
    if room >= min(_FLOOR * len(low), sum(p.size for p in low)) and _fill(low, room, markers):
        return True
    # The error or the value must give too: the printed output keeps a little.
    for p in low:
        p.keep = min(p.size, _FLOOR)
    room = budget - sum(p.keep for p in low)
    room -= sum(markers[id(p)] for p in low if p.keep < p.size and p.run is None)
    return _fill(high, room, markers)


def _json(value: Any) -> str:
    try:
        return json.dumps(value, ensure_ascii=False, indent=None)
    except (TypeError, ValueError):  # a RunResult's value is JSON; be safe anyway
        return repr(value)


def _count(value: Any) -> int:
    return value if type(value) is int else -1


def _stream_part(result: RunResult, name: str, label: str, what: str) -> _Part:
    """The stream's text, split where the run dropped some (per its ``output_cut``)."""
    text = getattr(result, name)
    info = result.output_cut if isinstance(result.output_cut, dict) else {}
    cut = info.get(name)
    if isinstance(cut, dict):
        at, chars, lines = (_count(cut.get(k)) for k in ("at", "chars", "lines"))
        marker = info.get("text") if info.get("stream") == name else ""
        if (  # a recording is data from elsewhere: its numbers are used only when they fit
            at >= 0
            and chars >= 0
            and lines >= 0
            and isinstance(marker, str)
            and at <= len(text)
            and text.startswith(marker, at)
        ):
            tail = text[at + len(marker) :].rstrip("\n")
            return _Part(label, text[:at], tail, run=(chars, lines), what=what)
    return _Part(label, text.rstrip("\n"), what=what)


def tool_output(
    result: RunResult,
    max_chars: int = MAX_CHARS,
    *,
    max_images: int = MAX_IMAGES,
    max_image_bytes: int = MAX_IMAGE_BYTES,
) -> ToolOutput:
    """``result`` as model-ready text, at most ``max_chars``, and its images (at most
    ``max_images`` attached, each at most ``max_image_bytes``). Printed output comes first
    and is what is cut when the text is over ``max_chars``; the error and the value are
    kept whole where they fit."""
    if not isinstance(max_chars, int) or isinstance(max_chars, bool) or max_chars < MIN_CHARS:
        raise ValueError(f"max_chars must be an integer >= {MIN_CHARS}, got {max_chars!r}")
    for name, bound in (("max_images", max_images), ("max_image_bytes", max_image_bytes)):
        if not isinstance(bound, int) or isinstance(bound, bool) or bound < 0:
            raise ValueError(f"{name} must be an integer >= 0, got {bound!r}")
    images, value, more = collect_images(
        result.outputs, result.value, max_images=max_images, max_image_bytes=max_image_bytes
    )
    printed = _stream_part(
        result,
        "stdout",
        "printed" if result.ok else "printed before the failure",
        "the printed output",
    )
    stderr = _stream_part(result, "stderr", "stderr", "stderr")
    lines = [img.placeholder(n) for n, img in enumerate(images, 1) if img.how == "displayed"]
    if more:
        lines.append(f"[{more} more images, not kept]")
    shown = _Part("images", "\n".join(lines), what="the image lines", advice="", tier=1)
    parts: list[_Part] = []
    if result.ok:
        body = _json(value)
        if result.note:
            body += f"\nnote: {result.note}"
        returned = _Part("returned", body, what="the value", advice="return less", tier=1)
        parts = [printed, stderr, shown, returned]
    else:
        error = result.error
        head = f"error ({result.status}): {result.message}"
        if error is not None and error.traceback:
            head += "\n" + "\n".join(error.traceback)
        failure = _Part("", head, what="the error", advice="", tier=1)
        parts = [failure, printed, stderr, shown]
    parts = [p for p in parts if p.size or p.run is not None]
    limit = result.limits.get("max_output_bytes", "?") if isinstance(result.limits, dict) else "?"
    # MIN_CHARS leaves room for every part's compact marker: it always fits.
    compact = _fit(parts, max_chars, limit)
    text = "\n".join(p.render(max_chars, limit, compact) for p in parts)
    return ToolOutput(text=text, is_error=not result.ok, result=result, images=tuple(images))
