"""The JSON boundary (kernelgate/wire/values.py) at the limits the child applies: binding
arguments within ``max_frame_bytes - FRAME_OVERHEAD``, a display within one frame, nesting
within ``MAX_DEPTH``, exactly at each limit and one past it."""

from __future__ import annotations

from typing import Any

import pytest

from kernelgate.kernels.python.namespace import Binding
from kernelgate.model.constants import FRAME_OVERHEAD
from kernelgate.wire.values import MAX_DEPTH, NotJSONError, ValueTooLargeError, check_json

ECHO = {"params": [["args", "VAR_POSITIONAL", False]], "signature": "(*args)", "doc": ""}


def nested(depth: int) -> list[Any]:
    x: list[Any] = []
    for _ in range(depth - 1):
        x = [x]
    return x


def never_called(*_call: Any) -> Any:
    raise AssertionError("a call left the child")


def test_binding_arguments_exactly_at_the_budget_pass_and_one_byte_over_fails():
    budget = 1000
    echo = Binding("tools", "echo", ECHO, never_called, budget)
    at = "x" * (budget - 4)  # ["..."]: the quotes and the list's brackets
    assert check_json([at]) == budget
    echo(at).close()  # accepted: a call, never made here
    with pytest.raises(ValueError, match="over 1000 bytes as JSON"):
        echo(at + "x")


def test_the_argument_budget_is_the_frame_less_its_overhead():
    frame = 20_000
    echo = Binding("tools", "echo", ECHO, never_called, frame - FRAME_OVERHEAD)
    echo("y" * (frame - FRAME_OVERHEAD - 4)).close()
    with pytest.raises(ValueError, match=f"over {frame - FRAME_OVERHEAD} bytes"):
        echo("y" * (frame - FRAME_OVERHEAD - 3))


def test_multibyte_text_is_metered_in_utf8_bytes():
    echo = Binding("tools", "echo", ECHO, never_called, 100)
    echo("é" * 48).close()  # 96 bytes + quotes + brackets = 100
    with pytest.raises(ValueError):
        echo("é" * 49)


def test_nesting_up_to_max_depth_passes_and_deeper_is_refused_with_its_path():
    assert MAX_DEPTH == 500
    check_json(nested(MAX_DEPTH))
    with pytest.raises(NotJSONError) as info:
        check_json(nested(MAX_DEPTH + 1))
    assert "nested deeper than" in str(info.value)
    echo = Binding("tools", "echo", ECHO, never_called, 10**6)
    with pytest.raises(TypeError, match=r"tools.echo\(\) argument args\[0\]\[0\].*nested deeper"):
        echo(nested(MAX_DEPTH + 5))


@pytest.mark.parametrize(
    "value, message",
    [
        ({"a": {1: 2}}, "value['a']: dict key 1 is int, not str"),
        ([1, float("inf")], "value[1]: float inf is not JSON"),
        ([-0.0], "value[0]: float -0.0 is not lossless JSON"),
        ({"s": "\udc80"}, "surrogate"),
        ([b"bytes"], "value[0]: bytes is not JSON"),
    ],
    ids=["int-key", "inf", "negative-zero", "surrogate", "bytes"],
)
def test_what_is_not_lossless_json_is_named_with_its_path(value, message):
    with pytest.raises(NotJSONError) as info:
        check_json(value)
    assert message in str(info.value)


def test_a_cycle_is_refused_not_walked_forever():
    x: list[Any] = []
    x.append(x)
    with pytest.raises(NotJSONError, match="contains itself"):
        check_json(x)


def test_a_huge_value_stops_being_metered_at_its_budget():
    with pytest.raises(ValueTooLargeError) as info:
        check_json(list(range(6_000_000)), "value", 32 * 1024)
    assert info.value.limit == 32 * 1024
