"""Stream text kept head and tail within ``max_output_bytes``: one ledger for a run's
stdout and stderr, a ring for the tail, and one marker saying exactly what is not there."""

from __future__ import annotations

import codecs
from collections import deque
from dataclasses import dataclass
from typing import Any

from kernelgate.model.result import CallRecord

__all__ = ["OutputCollector", "StreamCut", "truncation_marker"]

_STREAMS = ("stdout", "stderr")
#: A cut moves to the nearest line break within this many characters, so what is kept
#: starts and ends with whole lines where the program wrote lines.
_LINE_REACH = 200
#: Adjacent tail pieces of one stream are joined up to this size (fewer objects held).
_PIECE = 8192


@dataclass
class StreamCut:
    """What one stream lost in the middle: ``at`` is where (characters into the kept
    text, which holds the marker there when the marker is in this stream), then how much:
    UTF-8 ``bytes`` (the budget's unit), ``chars`` and ``lines`` (line breaks)."""

    at: int = 0
    bytes: int = 0
    chars: int = 0
    lines: int = 0

    def add(self, text: str, nbytes: int) -> None:
        self.bytes += nbytes
        self.chars += len(text)
        self.lines += text.count("\n")


def truncation_marker(limit: int, cuts: dict[str, StreamCut]) -> str:
    """The one marker standing where a run's stream output was cut, saying exactly how
    much of each stream is not there."""
    parts = [
        f"{_count(c.bytes, 'byte')} ({_count(c.lines, 'line')}) of {name}"
        for name, c in cuts.items()
        if c.bytes
    ]
    head = limit - limit // 2
    return (
        f"\n[kernelgate: {' and '.join(parts) or 'nothing'} cut here: stdout and stderr "
        f"together passed max_output_bytes={limit}; the first {head} and the last "
        f"{limit // 2} bytes are kept]\n"
    )


def _count(n: int, unit: str) -> str:
    return f"{n} {unit}" if n == 1 else f"{n} {unit}s"


class _Piece:
    """Tail text of one stream that arrived in one ``epoch`` (no output or call between)."""

    __slots__ = ("epoch", "name", "text", "nbytes")

    def __init__(self, epoch: int, name: str, text: str, nbytes: int) -> None:
        self.epoch = epoch
        self.name = name
        self.text = text
        self.nbytes = nbytes


def _utf8(text: str) -> tuple[str, bytes]:
    """``text`` and its UTF-8; a lone surrogate (no UTF-8 form) becomes ``?`` in both, so
    characters and bytes count the same text."""
    encoded = text.encode("utf-8", "replace")
    if not text.isascii() and len(encoded.decode("utf-8")) != len(text):
        text = encoded.decode("utf-8")
    return text, encoded


class OutputCollector:
    """Stream text from fd 3 and from the raw fd 1/2 pipes, in arrival order, kept head
    and tail.

    One ledger for both streams, charged in UTF-8 bytes. The first half of
    ``max_output_bytes`` keeps the beginning (the *head*); past it, text goes to a ring
    holding the last half (the *tail*), whose oldest text is dropped as new text comes.
    Where text was dropped, exactly one marker (:func:`truncation_marker`) says how much
    of each stream, in bytes and lines; it is not charged to the budget. Adjacent stream
    outputs of the same name are merged, as frontends show them.

    Memory is bounded: the head, the ring (at most half the budget, in pieces of up to
    8 KiB), and the rich outputs and calls that came meanwhile (their own budgets).

    Outputs and call places that come while the ring is in use are kept beside it with
    the *epoch* they came in (it moves on at each output, call and ``seal``), so the
    outputs can be put back in arrival order around the tail when they are read.
    """

    def __init__(self, max_output_bytes: int) -> None:
        self.limit = max_output_bytes
        self.head_limit = max_output_bytes - max_output_bytes // 2
        self.tail_limit = max_output_bytes // 2
        self.used = 0  # bytes of the head
        self._outputs: list[dict[str, Any]] = []  # the head's outputs (all, before the ring)
        self._sealed = 0  # outputs before this index are never merged into
        self._text: dict[str, list[str]] = {"stdout": [], "stderr": []}
        # Made when a pipe first has bytes: most programs never write to fd 1 or 2.
        self._decoders: dict[str, codecs.IncrementalDecoder] = {}
        # The tail: None until the head is full.
        self._ring: deque[_Piece] | None = None
        self._ring_bytes = 0
        self._epoch = 0
        self._visible_from = 0  # pieces of an earlier epoch were cleared from the outputs
        self._head_merge = True  # the last head output may take the first tail piece
        self._mid: list[tuple[int, dict[str, Any] | CallRecord]] = []
        self._cuts: dict[str, StreamCut] = {}
        self._last_cut_epoch = -1

    # -- adding ----------------------------------------------------------------------------

    def add_raw(self, name: str, data: bytes, final: bool = False) -> str:
        """Bytes written straight to fd 1 or 2; invalid UTF-8 becomes U+FFFD."""
        decoder = self._decoders.get(name)
        if decoder is None:
            if not data:
                return ""  # nothing came on this pipe: its decoder holds nothing
            decoder = self._decoders[name] = codecs.getincrementaldecoder("utf-8")("replace")
        return self.add_text(name, decoder.decode(data, final))

    def add_text(self, name: str, text: str) -> str:
        """Add stream text; return what the head kept of it (shown live; ``""`` once the
        head is full: the tail is shown when the run ends, see :meth:`tail_outputs`)."""
        if not text:
            return ""
        text, encoded = _utf8(text)
        if self._ring is not None:
            self._to_ring(name, text, len(encoded))
            return ""
        room = self.head_limit - self.used
        if len(encoded) > room:
            kept = encoded[:room].decode("utf-8", "ignore")
            brk = kept.rfind("\n")
            if brk >= 0 and len(kept) - brk - 1 <= _LINE_REACH:
                kept = kept[: brk + 1]
            elif len(kept) <= _LINE_REACH and self._ends_a_line():
                kept = ""  # the head ends with the line before
            self.used += len(kept.encode("utf-8"))
            rest = text[len(kept) :]
            if kept:
                self._keep_head(name, kept)
            self._ring = deque()
            self._head_merge = bool(kept)
            self._to_ring(name, rest, len(encoded) - len(kept.encode("utf-8")))
            return kept
        self.used += len(encoded)
        self._keep_head(name, text)
        return text

    def _ends_a_line(self) -> bool:
        """Whether the head's last text ends a line."""
        last = self._outputs[-1] if self._outputs else None
        return last is not None and last["output_type"] == "stream" and last["text"].endswith("\n")

    def _keep_head(self, name: str, text: str) -> None:
        self._text[name].append(text)
        outputs = self._outputs
        last = outputs[-1] if len(outputs) > self._sealed else None
        if last is not None and last["output_type"] == "stream" and last["name"] == name:
            last["text"] += text
        else:
            outputs.append({"output_type": "stream", "name": name, "text": text})

    def _to_ring(self, name: str, text: str, nbytes: int) -> None:
        ring = self._ring
        assert ring is not None
        last = ring[-1] if ring else None
        if (
            last is not None
            and last.name == name
            and last.epoch == self._epoch
            and last.nbytes < _PIECE
        ):
            last.text += text
            last.nbytes += nbytes
        else:
            ring.append(_Piece(self._epoch, name, text, nbytes))
        self._ring_bytes += nbytes
        while self._ring_bytes > self.tail_limit:
            self._drop_oldest(ring, self._ring_bytes - self.tail_limit)

    def _drop_oldest(self, ring: deque[_Piece], excess: int) -> None:
        """Drop at least ``excess`` bytes from the oldest tail piece (all of it if smaller;
        else up to the next line break nearby)."""
        piece = ring[0]
        if piece.nbytes <= excess:
            ring.popleft()
            dropped, nbytes = piece.text, piece.nbytes
        else:
            encoded = piece.text.encode("utf-8")
            rest = encoded[excess:].decode("utf-8", "ignore")
            at_line_start = piece.text[len(piece.text) - len(rest) - 1] == "\n"
            brk = -1 if at_line_start else rest.find("\n", 0, _LINE_REACH)
            if brk >= 0:
                rest = rest[brk + 1 :]
            dropped = piece.text[: len(piece.text) - len(rest)]
            nbytes = len(dropped.encode("utf-8"))
            piece.text, piece.nbytes = rest, piece.nbytes - nbytes
            if not rest:  # what was left of it was part of a character
                ring.popleft()
        self._ring_bytes -= nbytes
        cut = self._cuts.get(piece.name)
        if cut is None:
            cut = self._cuts[piece.name] = StreamCut(at=sum(map(len, self._text[piece.name])))
        cut.add(dropped, nbytes)
        self._last_cut_epoch = piece.epoch

    def seal(self) -> None:
        """End the current stream output: the next text starts a new one.

        Called where something happened between two prints (a binding call completed), so
        a notebook can show the call between them.
        """
        if self._ring is None:
            self._sealed = len(self._outputs)
        else:
            self._epoch += 1

    def place(self, record: CallRecord) -> None:
        """A call that just completed sits here among the outputs (its ``output_index``)."""
        if self._ring is None:
            record.output_index = len(self._outputs)
        else:
            self._mid.append((self._epoch, record))
        self.seal()

    def add_output(self, output: dict[str, Any]) -> None:
        if self._ring is None:
            self._outputs.append(output)
        else:
            self._mid.append((self._epoch, output))
            self._epoch += 1

    def holds(self, output: dict[str, Any]) -> bool:
        """Whether ``output`` (that very object, a rich output) is still among the outputs:
        without putting the tail together (a clear may come after every write)."""
        return any(o is output for o in self._outputs) or any(o is output for _, o in self._mid)

    def remove_output(self, output: dict[str, Any]) -> None:
        """Take ``output`` (that very object) out of the outputs."""
        self._outputs[:] = [o for o in self._outputs if o is not output]
        self._mid = [(e, o) for e, o in self._mid if o is not output]

    def update_outputs(self, transient: Any, data: Any, metadata: Any) -> None:
        """New data for every kept output shown with ``transient`` (its display_id)."""
        # New dicts: the ones passed to on_output earlier stay what was shown then.
        for i, output in enumerate(self._outputs):
            if output.get("transient") == transient:
                self._outputs[i] = {**output, "data": data, "metadata": metadata}
        for i, (epoch, item) in enumerate(self._mid):
            if isinstance(item, dict) and item.get("transient") == transient:
                self._mid[i] = (epoch, {**item, "data": data, "metadata": metadata})

    def clear_outputs(self) -> None:
        """``clear_output``: the outputs so far go (the text printed stays in ``text``)."""
        self._outputs.clear()
        self._sealed = 0
        if self._ring is not None:
            for _, item in self._mid:
                if isinstance(item, CallRecord):
                    item.output_index = 0
            self._mid.clear()
            self._epoch += 1
            self._visible_from = self._epoch
            self._head_merge = False

    # -- reading ---------------------------------------------------------------------------

    @property
    def truncated(self) -> bool:
        """Whether any stream text was dropped."""
        return bool(self._cuts)

    def cuts(self) -> dict[str, StreamCut]:
        """Per stream, what was dropped and where (empty when nothing was)."""
        return dict(self._cuts)

    @property
    def marker_stream(self) -> str | None:
        """The stream whose text holds the marker: stdout if it lost text, else stderr."""
        for name in _STREAMS:
            if name in self._cuts:
                return name
        return None

    def marker(self) -> str:
        return truncation_marker(self.limit, self._cuts) if self._cuts else ""

    def text(self, name: str) -> str:
        """All ``name`` text kept: the head, the marker (in its stream), the tail."""
        head = "".join(self._text[name])
        if self._ring is None:
            return head
        marker = self.marker() if self.marker_stream == name else ""
        return head + marker + "".join(p.text for p in self._ring if p.name == name)

    def cut_info(self) -> dict[str, Any]:
        """What :class:`~kernelgate.model.result.RunResult` keeps as ``output_cut``:
        ``{}`` when nothing was cut, else the marker's ``stream`` and ``text`` and, per
        stream that lost text, ``{"at", "bytes", "chars", "lines"}``."""
        if not self._cuts:
            return {}
        info: dict[str, Any] = {"stream": self.marker_stream, "text": self.marker()}
        for name, cut in self._cuts.items():
            info[name] = {"at": cut.at, "bytes": cut.bytes, "chars": cut.chars, "lines": cut.lines}
        return info

    @property
    def outputs(self) -> list[dict[str, Any]]:
        """The outputs in arrival order: the head's, then (once the head is full) the
        marker where text was dropped, and what came after it, the tail's text among the
        outputs and calls that came with it. Calls placed among them get their index."""
        if self._ring is None:
            return self._outputs
        return self._assemble(with_mid=True)

    def tail_outputs(self) -> list[dict[str, Any]]:
        """What the head did not show live: the marker and the tail's text (not the
        outputs that came meanwhile: those were shown as they came)."""
        if self._ring is None:
            return []
        return self._assemble(with_mid=False, with_head=False)

    def _assemble(self, *, with_mid: bool, with_head: bool = True) -> list[dict[str, Any]]:
        ring = self._ring
        assert ring is not None
        out: list[dict[str, Any]] = list(self._outputs) if with_head else []
        # Stream text joins the last output when it is the same stream and nothing came
        # between (the same epoch); the head's last output counts as epoch 0, when the
        # ring started, unless sealed or cleared since.
        merge: tuple[str, int] | None = None
        if with_head and self._head_merge and len(self._outputs) > self._sealed:
            last = out[-1]
            if last["output_type"] == "stream":
                merge = (last["name"], 0)
                out[-1] = dict(last)  # the head's own output stays as it is
        marker_due = bool(self._cuts) and self._last_cut_epoch >= self._visible_from
        pieces = [p for p in ring if p.epoch >= self._visible_from]
        mid = self._mid if with_mid else []
        i = j = 0
        while i < len(pieces) or j < len(mid) or marker_due:
            # The marker stands right after the last text dropped: before what came later.
            if (
                marker_due
                and (i >= len(pieces) or pieces[i].epoch >= self._last_cut_epoch)
                and (j >= len(mid) or mid[j][0] >= self._last_cut_epoch)
            ):
                name = self.marker_stream or "stdout"
                out.append({"output_type": "stream", "name": name, "text": self.marker()})
                marker_due, merge = False, None
            elif i < len(pieces) and (j >= len(mid) or pieces[i].epoch <= mid[j][0]):
                piece = pieces[i]
                i += 1
                if merge == (piece.name, piece.epoch):
                    out[-1]["text"] += piece.text
                else:
                    out.append({"output_type": "stream", "name": piece.name, "text": piece.text})
                merge = (piece.name, piece.epoch)
            else:
                item = mid[j][1]
                j += 1
                if isinstance(item, CallRecord):
                    item.output_index = len(out)
                else:
                    out.append(item)
                merge = None
        return out
