"""The JSON boundary: check_json, dumps and loads (pure functions, no I/O)."""

from __future__ import annotations

import collections
import decimal
import enum
import json
import math
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kernelgate.wire.values import (
    MAX_DEPTH,
    NotJSONError,
    ValueTooLargeError,
    check_json,
    describe_path,
    dumps,
    loads,
)

# -- strategies -------------------------------------------------------------------------------

HERE = __name__ + "."  # local classes are named with their module

finite_floats = st.floats(allow_nan=False, allow_infinity=False).filter(
    lambda f: not (f == 0.0 and math.copysign(1.0, f) < 0)
)
scalars = st.none() | st.booleans() | st.integers() | finite_floats | st.text()
#: JSON values as check_json accepts them (tuples included: they serialize as lists).
json_values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=8)
        | st.lists(inner, max_size=8).map(tuple)
        | st.dictionaries(st.text(max_size=8), inner, max_size=8)
    ),
    max_leaves=25,
)
#: JSON values that survive a round trip unchanged (no tuples).
plain_json = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=8) | st.dictionaries(st.text(max_size=8), inner, max_size=8)
    ),
    max_leaves=25,
)
#: Long runs of scalars, so the bulk path (2048 elements per step) is taken too.
scalar_runs = st.lists(scalars, min_size=0, max_size=5000)


def serialized_size(value):
    return len(dumps(value).encode("utf-8"))


# -- accepted values ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        None,
        True,
        False,
        0,
        -1,
        10**4000,
        -(10**4000),
        1.5,
        0.0,
        -1.25,
        1e308,
        5e-324,
        "",
        "text",
        'quote " and backslash \\',
        "control \x00\x01\n\t\x1f\x7f",
        "unicode é 漢字 😀 \u2028",
        [],
        [1, "a", None],
        (),
        (1, (2, 3)),
        {},
        {"a": 1, "b": [True, False, None], "": {"nested": "x"}},
    ],
    ids=repr,
)
def test_accepted_values_and_their_exact_size(value):
    assert check_json(value) == serialized_size(value)


def test_shared_reference_is_not_a_cycle():
    shared = [1, 2]
    value = {"a": shared, "b": [shared, shared]}
    assert check_json(value) == serialized_size(value)


def test_tuples_serialize_as_lists():
    assert dumps((1, ("a", None))) == '[1,["a",null]]'
    assert check_json((1, ("a", None))) == len('[1,["a",null]]')


def test_dumps_is_compact_and_not_ascii_escaped():
    assert dumps({"a": [1, 2], "é": "漢"}) == '{"a":[1,2],"é":"漢"}'


# -- refused values, with the exact path --------------------------------------------------------


class DictSub(dict):
    pass


class ListSub(list):
    pass


class IntSub(int):
    pass


class StrSub(str):
    pass


class FloatSub(float):
    pass


class Color(enum.IntEnum):
    RED = 1


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"a": [1, 2, {3}]}, "value['a'][2]: set is not JSON"),
        ({3}, "value: set is not JSON"),
        (frozenset(), "value: frozenset is not JSON"),
        ([decimal.Decimal("1.5")], "value[0]: decimal.Decimal is not JSON"),
        ({"b": b"bytes"}, "value['b']: bytes is not JSON"),
        ([bytearray(b"x")], "value[0]: bytearray is not JSON"),
        ({"a": {"b": [0, DictSub()]}}, f"value['a']['b'][1]: {HERE}DictSub is not JSON"),
        ([ListSub()], f"value[0]: {HERE}ListSub is not JSON"),
        ([IntSub(1)], f"value[0]: {HERE}IntSub is not JSON"),
        ({"k": StrSub("x")}, f"value['k']: {HERE}StrSub is not JSON"),
        ([FloatSub(1.0)], f"value[0]: {HERE}FloatSub is not JSON"),
        ([Color.RED], f"value[0]: {HERE}Color is not JSON"),
        (collections.OrderedDict(), "value: collections.OrderedDict is not JSON"),
        ([1, 2, object()], "value[2]: object is not JSON"),
        ({"f": len}, "value['f']: builtin_function_or_method is not JSON"),
        ([1j], "value[0]: complex is not JSON"),
        ({"a": [float("nan")]}, "value['a'][0]: float nan is not JSON"),
        ([0, float("inf")], "value[1]: float inf is not JSON"),
        ({"x": -math.inf}, "value['x']: float -inf is not JSON"),
        ([[-0.0]], "value[0][0]: float -0.0 is not lossless JSON"),
        ({"a": {1: "x"}}, "value['a']: dict key 1 is int, not str"),
        ({(1, 2): "x"}, "value: dict key (1, 2) is tuple, not str"),
        ({None: 1}, "value: dict key None is NoneType, not str"),
        ({StrSub("k"): 1}, f"value: dict key 'k' is {HERE}StrSub, not str"),
        (["ok", "bad \ud800 str"], "value[1]: str holds a lone surrogate '\\ud800' at index 4"),
        ({"a\udc00": 1}, "value['a\\udc00']: str holds a lone surrogate '\\udc00' at index 1"),
        ([10**5000], "value[0]: int with 16610 bits is too large to serialize"),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_refused_values_name_type_and_path(value, message):
    with pytest.raises(NotJSONError) as info:
        check_json(value)
    assert str(info.value).startswith(message), str(info.value)
    path = message.split(": ", 1)[0]
    assert info.value.path == path


def test_refusal_carries_type_name():
    with pytest.raises(NotJSONError) as info:
        check_json({"a": [decimal.Decimal(1)]})
    assert info.value.type_name == "decimal.Decimal"
    assert info.value.path == "value['a'][0]"
    assert isinstance(info.value, TypeError)


def test_root_name_is_used_in_paths():
    with pytest.raises(NotJSONError, match=re.escape("tool() args[1]: set is not JSON")):
        check_json([1, set()], root="tool() args")


def test_list_cycle():
    a: list = [1]
    a.append(a)
    with pytest.raises(NotJSONError, match=re.escape("value[1]: list contains itself (a cycle)")):
        check_json(a)


def test_dict_cycle_deep():
    d: dict = {"x": []}
    d["x"].append({"back": d})
    with pytest.raises(
        NotJSONError, match=re.escape("value['x'][0]['back']: dict contains itself (a cycle)")
    ):
        check_json(d)


@pytest.mark.parametrize("pos", [0, 1, 2047, 2048, 2049, 4095, 5999])
@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (float("nan"), "float nan is not JSON"),
        (-0.0, "float -0.0 is not lossless JSON"),
        ("\udfff", "str holds a lone surrogate"),
        (10**5000, "is too large to serialize"),
        ({1}, "set is not JSON"),
        (IntSub(3), "IntSub is not JSON"),
    ],
    ids=["nan", "negzero", "surrogate", "bigint", "set", "intsub"],
)
def test_long_scalar_runs_report_the_exact_index(pos, bad, message):
    # Long runs of scalars are checked in bulk; a refusal must still name the element.
    value = [0.5, "s", 7, None, True] * 1200
    value[pos] = bad
    with pytest.raises(NotJSONError) as info:
        check_json({"rows": value})
    assert info.value.path == f"value['rows'][{pos}]"
    assert message in str(info.value)


def test_strings_that_look_like_negative_zero_are_fine():
    value = ["-0.0", ",-0.0,", -0.01, -0.001, 0.0, "[-0.0]"] * 500
    assert check_json(value) == serialized_size(value)


# -- size metering ------------------------------------------------------------------------------


@settings(max_examples=120, suppress_health_check=[HealthCheck.too_slow])
@given(json_values)
def test_size_equals_serialized_utf8_length(value):
    assert check_json(value) == serialized_size(value)


@settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow])
@given(scalar_runs)
def test_size_of_long_scalar_runs(value):
    assert check_json(value) == serialized_size(value)
    assert check_json(tuple(value)) == serialized_size(value)


@settings(max_examples=100, suppress_health_check=[HealthCheck.too_slow])
@given(json_values, st.integers(min_value=-3, max_value=3))
def test_max_bytes_is_exact(value, delta):
    size = serialized_size(value)
    limit = max(0, size + delta)
    if size > limit:
        with pytest.raises(ValueTooLargeError) as info:
            check_json(value, max_bytes=limit)
        assert info.value.limit == limit
    else:
        assert check_json(value, max_bytes=limit) == size


@settings(max_examples=40, suppress_health_check=[HealthCheck.too_slow])
@given(scalar_runs, st.floats(min_value=0.0, max_value=1.2))
def test_max_bytes_is_exact_for_long_runs(value, fraction):
    size = serialized_size(value)
    limit = int(size * fraction)
    if size > limit:
        with pytest.raises(ValueTooLargeError):
            check_json(value, max_bytes=limit)
    else:
        assert check_json(value, max_bytes=limit) == size


def test_max_bytes_stops_before_walking_the_rest():
    # The set at the end is never reached: metering stops at the third string.
    value = ["a" * 100] * 10 + [{1, 2}]
    with pytest.raises(ValueTooLargeError) as info:
        check_json(value, max_bytes=300)
    # 2 brackets + 10 commas, then 102 bytes per string: over 300 at index 2.
    assert str(info.value) == "value is over 300 bytes as JSON (limit reached at value[2])"
    assert isinstance(info.value, ValueError)


def test_max_bytes_stops_at_a_huge_container_without_walking_it():
    big = [None] * 2_000_000
    with pytest.raises(ValueTooLargeError, match=re.escape("(limit reached at value['big'])")):
        check_json({"big": big, "bad": {1}}, max_bytes=1000)


def test_max_bytes_zero_and_exact():
    assert check_json([], max_bytes=2) == 2
    with pytest.raises(ValueTooLargeError):
        check_json([], max_bytes=1)
    with pytest.raises(ValueTooLargeError):
        check_json(None, max_bytes=0)


# -- big and deep values ------------------------------------------------------------------------


def test_ten_thousand_deep_list_fails_cleanly_without_recursion():
    value: list = []
    for _ in range(10_000):
        value = [value]
    with pytest.raises(NotJSONError, match=f"nested deeper than {MAX_DEPTH} levels") as info:
        check_json(value)
    assert info.value.path == "value" + "[0]" * MAX_DEPTH


def test_deepest_allowed_value_passes_and_crosses_the_wire():
    value: list = []
    for _ in range(MAX_DEPTH - 1):
        value = [value]
    assert check_json(value) == 2 * MAX_DEPTH
    assert loads(dumps(value)) == value


def test_ten_thousand_deep_dict_with_bad_leaf_names_the_depth():
    value: object = {1}
    for _ in range(10_000):
        value = {"k": value}
    with pytest.raises(NotJSONError) as info:
        check_json(value)
    assert info.value.path == "value" + "['k']" * MAX_DEPTH


def test_deep_value_cannot_cross_the_wire_but_fails_cleanly():
    value: list = []
    for _ in range(10_000):
        value = [value]
    with pytest.raises(RecursionError):
        dumps(value)
    with pytest.raises(RecursionError):
        loads("[" * 10_000 + "]" * 10_000)


def test_six_million_element_list():
    value = [None] * 6_000_000
    assert check_json(value) == 5 * 6_000_000 + 1
    value[-1] = {1}
    with pytest.raises(NotJSONError, match=re.escape("value[5999999]: set is not JSON")):
        check_json(value)


# -- loads --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "NaN",
        "[Infinity]",
        '{"a": -Infinity}',
        "1e400",
        "[-1e400]",
        "1" + "0" * 400 + ".0",
        '"\\ud800"',
        '["\\udc00"]',
        '"\\ud83d x"',
        '"\\ud83d\\ud83d"',
        '"\\ud83d"',
        '{"\\ud800": 1}',
        "1" * 5000,
    ],
)
def test_loads_refuses(text):
    with pytest.raises(ValueError):
        loads(text)
    with pytest.raises(ValueError):
        loads(text.encode())


@pytest.mark.parametrize(
    "data",
    [
        b'"\xff"',
        b'"\xed\xa0\x80"',  # a surrogate encoded as UTF-8 bytes
        '{"a": 1}'.encode("utf-16-le"),
        '{"a": 1}'.encode("utf-16"),
        '{"a": 1}'.encode("utf-32"),
    ],
)
def test_loads_bytes_must_be_utf8(data):
    with pytest.raises(ValueError):
        loads(data)


def test_loads_refuses_raw_lone_surrogate_in_str():
    with pytest.raises(ValueError, match="lone surrogate"):
        loads('"\ud800"')


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ('"\\ud83d\\ude00"', "😀"),
        ('"\\\\ud800"', "\\ud800"),  # an escaped backslash, not an escape
        ('"\\\\\\ud83d\\ude00"', "\\😀"),
        ('["\\u00e9", "\\n"]', ["é", "\n"]),
        ("-0.0", -0.0),
        ("1e308", 1e308),
        ('"\\u2028"', "\u2028"),
    ],
)
def test_loads_accepts(text, value):
    assert loads(text) == value
    assert loads(text.encode()) == value


@settings(max_examples=100, suppress_health_check=[HealthCheck.too_slow])
@given(plain_json)
def test_loads_round_trips(value):
    assert loads(dumps(value)) == value
    assert loads(dumps(value).encode("utf-8")) == value
    assert loads(json.dumps(value)) == value  # ASCII escapes, surrogate pairs included


def test_describe_path():
    assert describe_path("value", []) == "value"
    assert describe_path("args", [0, "a", 2]) == "args[0]['a'][2]"


@pytest.mark.parametrize(
    ("text", "value"),
    [(" [1]", [1]), ("[1] ", [1]), ('\n{"a": 1}\t', {"a": 1}), ('"x"', "x"), ("7", 7)],
)
def test_loads_takes_one_value_with_whitespace_around_it(text, value):
    # A frame that is one value and nothing else is scanned directly; whitespace around
    # it takes the decoder's own path: both accept it, as json.loads does.
    assert loads(text) == value == json.loads(text)
    assert loads(text.encode()) == value


@pytest.mark.parametrize("text", ["", " ", "[1] [2]", "[1]x", "1 2", '{"a": 1}}', "[1,", "]"])
def test_loads_refuses_anything_but_one_value(text):
    with pytest.raises(ValueError):
        json.loads(text)
    with pytest.raises(ValueError):
        loads(text)
    with pytest.raises(ValueError):
        loads(text.encode())


def test_dumps_refuses_what_json_cannot_carry():
    with pytest.raises(TypeError, match="Object of type set is not JSON serializable"):
        dumps({"a": {1}})
    with pytest.raises(ValueError):
        dumps([float("nan")])
    looped: list[object] = []
    looped.append(looped)
    with pytest.raises((ValueError, RecursionError)):  # check_json refuses it first
        dumps(looped)
    assert dumps([1, "é"]) == '[1,"é"]'  # the encoder is still fine after a refusal
