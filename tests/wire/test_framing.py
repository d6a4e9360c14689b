"""FrameDecoder: bytes in, newline-terminated frames out, with a size ceiling."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernelgate.wire import DEFAULT_MAX_FRAME_BYTES, FrameDecoder, RemoteProtocolError


def drain(decoder):
    frames = []
    while (frame := decoder.next_frame()) is not None:
        frames.append(frame)
    return frames


def split_at(data, cuts):
    """Split ``data`` at the given offsets (any order, duplicates allowed)."""
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    return [data[a:b] for a, b in itertools.pairwise(points)]


# -- ordinary operation ------------------------------------------------------------------------


def test_default_ceiling_is_8_mib():
    assert DEFAULT_MAX_FRAME_BYTES == 8 * 1024 * 1024
    assert FrameDecoder().max_frame_bytes == DEFAULT_MAX_FRAME_BYTES


def test_one_frame():
    d = FrameDecoder()
    assert d.next_frame() is None
    d.receive_data(b'{"a": 1}\n')
    assert d.next_frame() == b'{"a": 1}'
    assert d.next_frame() is None
    assert d.pending_bytes == 0


def test_partial_frame_waits_for_its_newline():
    d = FrameDecoder()
    d.receive_data(b'{"a"')
    assert d.next_frame() is None
    assert d.pending_bytes == 4
    d.receive_data(b": 1}")
    assert d.next_frame() is None
    d.receive_data(b"\n")
    assert d.next_frame() == b'{"a": 1}'
    assert d.pending_bytes == 0


def test_many_frames_in_one_chunk():
    d = FrameDecoder()
    d.receive_data(b"{}\n[1]\n\n" + b'"x"\n{"tail"')
    assert drain(d) == [b"{}", b"[1]", b"", b'"x"']
    assert d.pending_bytes == len(b'{"tail"')
    d.receive_data(b"}\n")
    assert drain(d) == [b'{"tail"}']


def test_frames_arriving_one_byte_at_a_time():
    data = b'{"a": 1}\n{"b": [2, 3]}\n'
    d = FrameDecoder()
    frames = []
    for i in range(len(data)):
        d.receive_data(data[i : i + 1])
        frames += drain(d)
    assert frames == [b'{"a": 1}', b'{"b": [2, 3]}']


@settings(max_examples=200)
@given(
    st.lists(st.binary(max_size=40).map(lambda b: b.replace(b"\n", b"")), max_size=12),
    st.lists(st.integers(min_value=0), max_size=30),
    st.booleans(),
)
def test_arbitrary_chunk_boundaries(frames, cuts, drain_each_chunk):
    data = b"".join(f + b"\n" for f in frames)
    d = FrameDecoder(max_frame_bytes=64)
    got = []
    for chunk in split_at(data, cuts):
        d.receive_data(chunk)
        if drain_each_chunk:
            got += drain(d)
    got += drain(d)
    assert got == frames
    assert d.pending_bytes == 0
    d.receive_data(b"")
    assert d.at_eof
    assert d.next_frame() is None


@settings(max_examples=200)
@given(st.binary(max_size=300), st.lists(st.integers(min_value=0), max_size=30))
def test_model_random_bytes(data, cuts):
    """Against a model: frames are the newline-separated pieces up to the first oversized
    one; an oversized piece (complete or not) is refused, possibly before its newline."""
    ceiling = 16
    pieces = data.split(b"\n")
    complete, tail = pieces[:-1], pieces[-1]
    expected = []
    oversized = False
    for piece in complete:
        if len(piece) > ceiling:
            oversized = True
            break
        expected.append(piece)
    oversized = oversized or len(tail) > ceiling

    d = FrameDecoder(max_frame_bytes=ceiling)
    got = []
    failed = None
    try:
        for chunk in split_at(data, cuts):
            d.receive_data(chunk)
            assert d.pending_bytes <= ceiling + len(chunk)
            got += drain(d)
            assert d.pending_bytes <= ceiling  # only the unterminated tail is left
        d.receive_data(b"")
        got += drain(d)
    except RemoteProtocolError as exc:
        failed = exc
    if oversized:
        assert failed is not None
        assert "max_frame_bytes=16" in str(failed)
        assert got == expected[: len(got)]
    elif tail:
        assert failed is not None and "stream ended inside a frame" in str(failed)
        assert got == expected
    else:
        assert failed is None
        assert got == expected
        assert d.at_eof


# -- the ceiling --------------------------------------------------------------------------------


def test_frame_exactly_at_the_ceiling_is_accepted():
    d = FrameDecoder(max_frame_bytes=10)
    d.receive_data(b"x" * 10)  # no newline yet, but not over the ceiling
    d.receive_data(b"\n")
    assert d.next_frame() == b"x" * 10


def test_complete_frame_over_the_ceiling_is_refused():
    d = FrameDecoder(max_frame_bytes=10)
    d.receive_data(b"ok\n" + b"x" * 11 + b"\n")
    assert d.next_frame() == b"ok"
    with pytest.raises(RemoteProtocolError, match=r"frame of 11 bytes is over max_frame_bytes=10"):
        d.next_frame()
    assert d.pending_bytes == 0


def test_unterminated_frame_refused_as_soon_as_it_passes_the_ceiling():
    d = FrameDecoder(max_frame_bytes=10)
    d.receive_data(b"x" * 10)
    with pytest.raises(RemoteProtocolError, match="without a newline"):
        d.receive_data(b"x")  # byte 11: refused before any newline arrives


@pytest.mark.parametrize("chunk_size", [1, 7, 1000, 4096, 65536])
@pytest.mark.parametrize("prefix", [b"", b'{"ok": 1}\n', b"{}\n{}\n"])
@pytest.mark.parametrize("drain_each_chunk", [True, False])
def test_newline_free_flood_is_refused_early_and_memory_stays_bounded(
    chunk_size, prefix, drain_each_chunk
):
    ceiling = 64 * 1024
    d = FrameDecoder(max_frame_bytes=ceiling)
    if prefix:
        d.receive_data(prefix)  # complete frames before the flood must not hide it
    fed = 0
    frames = []
    chunk = b"A" * chunk_size
    with pytest.raises(RemoteProtocolError, match=f"max_frame_bytes={ceiling}") as info:
        for _ in range(10 * ceiling // chunk_size + 10):  # a flood far over the ceiling
            d.receive_data(chunk)
            fed += chunk_size
            assert d.pending_bytes <= len(prefix) + ceiling + chunk_size
            if drain_each_chunk:
                frames += drain(d)
    # The refusal came at the first chunk past the ceiling, or (when complete frames were
    # waiting in front of it) right after them: never later than one chunk more.
    assert fed <= ceiling + chunk_size
    if drain_each_chunk:
        assert frames == prefix.split(b"\n")[:-1]  # frames before the flood were delivered
    assert d.pending_bytes <= len(prefix)  # the flood itself is not held
    # ... and stays dead with the same error.
    failed = info.value
    for call in (d.next_frame, lambda: d.receive_data(b"\n"), lambda: d.receive_data(b"")):
        with pytest.raises(RemoteProtocolError) as again:
            call()
        assert again.value is failed or str(again.value) == str(failed)


def test_frames_before_an_oversized_one_are_delivered_first():
    d = FrameDecoder(max_frame_bytes=100)
    d.receive_data(b'{"a": 1}\n{"b": 2}\n' + b"x" * 500)  # one read: output, then a flood
    assert d.next_frame() == b'{"a": 1}'
    assert d.next_frame() == b'{"b": 2}'
    with pytest.raises(RemoteProtocolError, match="max_frame_bytes=100"):
        d.next_frame()


def test_flood_in_one_huge_chunk_is_refused_and_dropped():
    d = FrameDecoder(max_frame_bytes=1024)
    with pytest.raises(RemoteProtocolError):
        d.receive_data(b"x" * 100_000)
    assert d.pending_bytes == 0


def test_ceiling_must_be_at_least_two():
    with pytest.raises(ValueError):
        FrameDecoder(max_frame_bytes=1)


# -- end of stream ------------------------------------------------------------------------------


def test_clean_eof():
    d = FrameDecoder()
    d.receive_data(b"{}\n")
    d.receive_data(b"")
    assert not d.at_eof  # a frame is still waiting
    assert d.next_frame() == b"{}"
    assert d.at_eof
    assert d.next_frame() is None
    d.receive_data(b"")  # a second EOF is harmless
    assert d.at_eof


def test_eof_inside_a_frame():
    d = FrameDecoder()
    d.receive_data(b'{}\n{"a": ')
    d.receive_data(b"")
    assert d.next_frame() == b"{}"
    with pytest.raises(RemoteProtocolError, match=r"stream ended inside a frame \(6 bytes"):
        d.next_frame()


def test_data_after_eof():
    d = FrameDecoder()
    d.receive_data(b"")
    with pytest.raises(RemoteProtocolError, match="data received after end of stream") as info:
        d.receive_data(b"{}\n")
    with pytest.raises(RemoteProtocolError) as again:
        d.next_frame()
    assert again.value is info.value


@pytest.mark.parametrize(
    "feed",
    [
        [b"x" * 20],
        [b"x" * 20 + b"\n"],
        [b"partial", b""],
        [b"", b"late"],
    ],
)
def test_after_a_failure_every_call_raises_the_same_error(feed):
    d = FrameDecoder(max_frame_bytes=10)
    first = None
    try:
        for data in feed:
            d.receive_data(data)
        while d.next_frame() is not None:
            pass
    except RemoteProtocolError as exc:
        first = exc
    assert first is not None
    for call in (
        d.next_frame,
        lambda: d.receive_data(b"{}\n"),
        lambda: d.receive_data(b""),
        d.next_frame,
    ):
        with pytest.raises(RemoteProtocolError) as info:
            call()
        assert info.value is first


def test_data_may_come_before_the_frames_held_are_taken():
    d = FrameDecoder(max_frame_bytes=64)
    d.receive_data(b"[1]\n[2]\n[3")
    assert d.next_frame() == b"[1]"
    d.receive_data(bytearray(b"]\n[4]\n"))
    assert d.pending_bytes == len(b"[2]\n[3]\n[4]\n")
    frames = drain(d)
    assert frames == [b"[2]", b"[3]", b"[4]"]
    assert all(type(f) is bytes for f in frames)
    d.receive_data(bytearray(b"[5]\n[6"))
    assert drain(d) == [b"[5]"] and d.pending_bytes == 2
    d.receive_data(b"]\n")
    assert drain(d) == [b"[6]"] and d.pending_bytes == 0
    d.receive_data(b"")
    assert d.at_eof
