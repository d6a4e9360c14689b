"""kernels/python/streams.py in-process: sys.stdout/sys.stderr of the child as ``stream``
messages, metered by one output budget, any text sent faithfully."""

from __future__ import annotations

import math
import threading
import time

import pytest

from kernelgate.kernels.python.streams import OutputLedger, OutputStream

CHUNK = 64 * 1024  # the largest stream message (streams._CHUNK)


class Sent:
    """What the streams sent, in order: (name, text)."""

    def __init__(self) -> None:
        self.messages: list[tuple[str, str]] = []
        self._lock = threading.Lock()

    def __call__(self, name: str, text: str) -> None:
        with self._lock:
            self.messages.append((name, text))

    def text(self, name: str | None = None) -> str:
        return "".join(t for n, t in self.messages if name is None or n == name)


def streams(budget: int = 64 * 1024) -> tuple[OutputStream, OutputStream, Sent]:
    sent = Sent()
    ledger = OutputLedger(budget)
    return OutputStream("stdout", sent, ledger), OutputStream("stderr", sent, ledger), sent


# -- lines and flushing --------------------------------------------------------------------


def test_a_print_is_one_message_and_a_tail_waits_for_flush():
    out, _, sent = streams()
    print("hello", "world", file=out)
    assert sent.messages == [("stdout", "hello world\n")]
    out.write("no newline yet")
    assert len(sent.messages) == 1
    out.write(" and more\nstill open")
    assert sent.messages[-1] == ("stdout", "no newline yet and more\n")
    out.flush()
    assert sent.messages[-1] == ("stdout", "still open")
    out.flush()  # nothing buffered: nothing sent
    assert len(sent.messages) == 3


def test_a_huge_write_goes_out_in_bounded_messages():
    out, _, sent = streams(budget=10**7)
    out.write("x" * (3 * CHUNK + 5))
    out.finish()
    assert sent.text() == "x" * (3 * CHUNK + 5)
    assert max(len(t) for _, t in sent.messages) <= CHUNK


def test_close_keeps_the_stream_usable():
    out, _, sent = streams()
    out.write("before close")
    out.close()
    assert sent.text() == "before close"
    print("after", file=out)
    assert sent.text() == "before closeafter\n"


def test_write_takes_str_only_and_counts_characters():
    out, _, sent = streams()

    class Text(str):
        def __str__(self) -> str:
            return "hijacked"

    assert out.write(Text("kept")) == 4
    out.flush()
    assert sent.text() == "kept"  # the str value itself, not what __str__ says
    with pytest.raises(TypeError, match="must be str, not bytes"):
        out.write(b"bytes")  # type: ignore[arg-type]
    assert out.writable() and not out.isatty() and out.encoding == "utf-8"
    assert out.name == "<stdout>"


# -- the budget ------------------------------------------------------------------------------


def test_both_streams_draw_on_one_budget_and_past_it_everything_still_goes_out_in_order():
    out, err, sent = streams(budget=100)
    for i in range(50):
        print(f"out {i}", file=out)
        print(f"err {i}", file=err)
    out.finish()
    err.finish()
    # The host keeps head and tail and counts the middle: it must see every character.
    assert sent.text("stdout") == "".join(f"out {i}\n" for i in range(50))
    assert sent.text("stderr") == "".join(f"err {i}\n" for i in range(50))
    within = [t for _, t in sent.messages[:16]]
    assert within == [f"{s} {i}\n" for i in range(8) for s in ("out", "err")]  # line by line


def test_past_the_budget_lines_go_in_bulk_and_the_first_one_at_once():
    out, _, sent = streams(budget=10)
    assert out.write("a" * 20) == 20  # the program sees a normal write
    assert sent.messages == []
    print("first past the budget", file=out)  # nothing went out lately: sent at once
    assert sent.text() == "a" * 20 + "first past the budget\n"
    t0 = time.monotonic()
    for i in range(20_000):
        print(f"line {i}", file=out)
    elapsed = time.monotonic() - t0
    out.finish()
    assert sent.text().endswith("".join(f"line {i}\n" for i in range(20_000)))
    # A message per 20 ms at most, or per 64 KiB: not one per line. (Each bound can start
    # one message early at its edge: a flush timer that fires mid-chunk splits it, seen
    # under a loaded full suite as 8 messages against 7.7.)
    assert len(sent.messages) <= 3 + elapsed / 0.02 + math.ceil(len(sent.text()) / CHUNK) + 1
    assert len(sent.messages) < 2_000


def test_a_zero_budget_sends_everything_in_bulk():
    out, _, sent = streams(budget=0)
    out.write("any")
    print("thing", file=out)
    out.finish()
    assert sent.text() == "anything\n"


# -- any text, sent faithfully -------------------------------------------------------------------


def test_lone_surrogates_are_sent_escaped():
    out, err, sent = streams()
    print("lone \ud800 surrogate", file=out)
    err.write("escaped \udcff byte\n")
    assert sent.messages == [
        ("stdout", "lone \\ud800 surrogate\n"),
        ("stderr", "escaped \\udcff byte\n"),
    ]
    for _, text in sent.messages:
        text.encode("utf-8")  # every message is valid UTF-8


def test_buffer_decodes_utf8_and_shows_other_bytes_escaped():
    out, _, sent = streams()
    out.buffer.write("é ok\n".encode())
    out.buffer.write(b"bad \xff\xfe\n")
    assert sent.text() == "é ok\nbad \\xff\\xfe\n"


def test_a_character_split_across_buffer_writes_is_joined():
    out, _, sent = streams()
    data = "snow ☃\n".encode()
    for i in range(len(data)):
        out.buffer.write(data[i : i + 1])
    assert sent.text() == "snow ☃\n"


def test_an_incomplete_character_at_the_end_is_shown_as_its_bytes():
    out, _, sent = streams()
    out.buffer.write(b"cut \xe2\x98")
    out.buffer.flush()  # a split character waits for the next write
    assert sent.text() == "cut "
    out.finish()
    assert sent.text() == "cut \\xe2\\x98"


# -- threads -----------------------------------------------------------------------------------


def test_threads_writing_at_once_never_split_a_written_line():
    out, _, sent = streams(budget=10**7)

    def writer(n: int) -> None:
        # One write per line: print() writes its end separately, so lines printed by two
        # threads may interleave, as on any stream.
        for j in range(500):
            out.write(f"thread {n} line {j} " + "." * 40 + "\n")

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    out.finish()
    lines = sent.text().splitlines()
    assert len(lines) == 8 * 500
    assert set(lines) == {f"thread {n} line {j} " + "." * 40 for n in range(8) for j in range(500)}
    assert all(t.endswith("\n") for _, t in sent.messages)  # each message whole lines
