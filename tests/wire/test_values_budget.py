"""check_json stops at its budget without building the serialized text, and its messages are
bounded whatever the value holds (issue 10: a 60 MB string of control characters ran the
child out of memory; a 10 MiB key or class name made a message too big to send)."""

from __future__ import annotations

import json
import tracemalloc

import pytest

from kernelgate.wire.values import (
    NotJSONError,
    ValueTooLargeError,
    check_json,
    describe_path,
    dumps,
)

pytestmark = pytest.mark.timeout(60)


def exact(value: object) -> int:
    return len(dumps(value).encode("utf-8"))


@pytest.mark.parametrize(
    "text",
    [
        "\x01" * 200_000,  # every character escaped (6 bytes each)
        "é☃𝄞" * 70_000,  # 2-, 3- and 4-byte characters
        ('a"b\\c\n' * 30_000) + "tail",  # escapes landing on chunk boundaries
        "x" * 65_535 + "\x00" + "y" * 65_537,
    ],
)
def test_long_strings_are_metered_exactly_in_chunks(text):
    assert check_json(text) == exact(text) == len(json.dumps(text, ensure_ascii=False).encode())
    assert check_json({text: [text]}) == exact({text: [text]})


def test_a_huge_string_stops_at_the_budget_without_building_its_text():
    big = "\x01" * (60 << 20)  # 360 MB as JSON
    tracemalloc.start()
    try:
        with pytest.raises(ValueTooLargeError):
            check_json(big, "value", 1 << 20)
        with pytest.raises(ValueTooLargeError):
            check_json({"a": [1, big]}, "value", 1 << 20)
        with pytest.raises(ValueTooLargeError):
            check_json({big: 1}, "value", 1 << 20)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20, f"metering held {peak} bytes at once"


def test_a_list_of_long_strings_is_not_serialized_in_bulk():
    big = ["\x01" * (4 << 20)] * 8  # 192 MB as JSON, in one bulk step before
    tracemalloc.start()
    try:
        with pytest.raises(ValueTooLargeError):
            check_json(big, "value", 1 << 20)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20, f"metering held {peak} bytes at once"
    small = ["\x01" * 1000, "é" * 1000, 1, None] * 600
    assert check_json(small) == exact(small)
    mixed = ["x" * 600_000, "y" * 600_000, 3]  # over the bulk cap: walked one by one
    assert check_json(mixed) == exact(mixed)


def test_a_huge_key_in_a_path_is_cut():
    key = "k" * (10 << 20)
    with pytest.raises(NotJSONError) as info:
        check_json({key: [1, {2}]})
    message = str(info.value)
    assert len(message) < 500
    assert message.endswith(f"...({10 << 20} chars)][1]: set is not JSON")
    assert len(info.value.path) < 500


def test_a_huge_class_name_is_cut():
    cls = type("C" * (10 << 20), (), {})
    with pytest.raises(NotJSONError) as info:
        check_json({"a": cls()})
    assert len(str(info.value)) < 500
    assert len(info.value.type_name) <= 200
    assert f"({(10 << 20) + len(__name__) + 1} chars)" in info.value.type_name


def test_a_lone_surrogate_in_a_class_name_is_escaped():
    cls = type("C", (), {})
    cls.__qualname__ = "bad\ud800"  # a class statement could not name it so
    with pytest.raises(NotJSONError) as info:
        check_json([cls()])
    str(info.value).encode("utf-8")  # sendable
    assert "bad\\ud800" in str(info.value)


def test_a_long_path_is_cut_in_the_middle():
    path = describe_path("value", ["k" * 70] * 400)
    assert len(path) <= 4096 + 3
    assert path.startswith("value['kkk") and path.endswith("k']")
    assert describe_path("value", ["a", 2, "k" * 80]) == "value['a'][2]['" + "k" * 80 + "']"
