"""One module for binding signatures: callable -> spec -> Signature, and text -> Signature."""

from __future__ import annotations

import inspect
import keyword
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernelgate.model.signatures import (
    ANY_PARAMS,
    MAX_SIGNATURE_TEXT,
    PARAMETER_KINDS,
    Source,
    params_of,
    signature_from_spec,
    signature_from_text,
    signature_of,
    signature_text,
    spec_from_signature,
)

P = inspect.Parameter


def every_kind(a, /, b: int, *args: str, c: list[int] = [1], d=None, **kw: Any) -> dict:  # noqa: B006
    return {}


def test_the_kinds_are_inspect_s() -> None:
    assert PARAMETER_KINDS == {k.name: k for k in inspect._ParameterKind}


def test_a_spec_of_every_kind_round_trips() -> None:
    sig = signature_of(every_kind)
    spec = spec_from_signature(sig, "doc")
    assert spec["params"] == [
        ["a", "POSITIONAL_ONLY", False],
        ["b", "POSITIONAL_OR_KEYWORD", False],
        ["args", "VAR_POSITIONAL", False],
        ["c", "KEYWORD_ONLY", True],
        ["d", "KEYWORD_ONLY", True],
        ["kw", "VAR_KEYWORD", False],
    ]
    # string annotations are shown unquoted, as the program's author wrote them
    assert (
        spec["signature"]
        == "(a, /, b: int, *args: str, c: list[int] = [1], d=None, **kw: Any) -> dict"
    )
    assert spec["doc"] == "doc"
    shown = signature_from_spec(spec)
    assert str(shown) == spec["signature"]
    assert params_of(shown) == params_of(sig)
    bare = signature_from_spec(spec, text=False)
    assert str(bare) == "(a, /, b, *args, c=..., d=..., **kw)"
    for s in (shown, bare):  # both accept and refuse the same calls
        assert s.bind(1, 2, "x", c=[], z=1)
        with pytest.raises(TypeError):
            s.bind(a=1, b=2)
        with pytest.raises(TypeError):
            s.bind(1)


def test_a_callable_without_signature_takes_anything() -> None:
    class NoSignature:
        __signature__ = "not a signature"

        def __call__(self, *a: Any) -> None: ...

    assert signature_of(NoSignature()) is None
    spec = spec_from_signature(None)
    assert spec["params"] == [list(p) for p in ANY_PARAMS]
    assert spec["signature"] == signature_text(None) == "(*args, **kwargs)"
    assert signature_from_spec(spec).bind(1, 2, x=3)


@pytest.mark.parametrize(
    "spec, phrase",
    [
        ({}, "needs 'params'"),
        ({"params": "a"}, "needs 'params'"),
        ({"params": [["a", "SOMETIMES", False]]}, "kind one of POSITIONAL_ONLY"),
        ({"params": [["a", "POSITIONAL_ONLY"]]}, "must be \\[name, kind, has_default\\]"),
        ({"params": [[1, "POSITIONAL_ONLY", False]]}, "must be \\[name, kind, has_default\\]"),
        ({"params": [["a b", "POSITIONAL_ONLY", False]]}, "'a b'"),
        (
            {"params": [["a", "KEYWORD_ONLY", False], ["b", "POSITIONAL_ONLY", False]]},
            "not a valid signature",
        ),
        (
            {"params": [["a", "POSITIONAL_ONLY", False], ["a", "KEYWORD_ONLY", False]]},
            "not a valid signature",
        ),
    ],
)
def test_a_bad_spec_says_what_is_wrong(spec: dict[str, Any], phrase: str) -> None:
    with pytest.raises(ValueError, match=phrase):
        signature_from_spec(spec)


def test_a_text_that_lies_about_the_params_is_not_shown() -> None:
    params = [["a", "POSITIONAL_OR_KEYWORD", True]]
    for text in ("(b=1)", "(a)", "(a=1, b=2)", "(*, a=1)", "(a=1", 7, None):
        assert str(signature_from_spec({"params": params, "signature": text})) == "(a=...)"
    assert str(signature_from_spec({"params": params, "signature": "(a: int = 1)"})) == (
        "(a: int = 1)"
    )


@pytest.mark.parametrize(
    "text",
    [
        "()",
        "(*args, **kwargs)",
        "(query: str, limit: int = 3) -> list[dict[str, Any]]",
        "(query: 'str', limit: 'int' = 3) -> 'list'",
        "(a, /, b, *args, c=None, d: 'x' = 'y', **kw)",
        "(a, /)",
        "(*, key)",
        "(s=\"double\", t='single', n=-1.5e3, xs=(1, [2, {3: 4}]))",
        "(f=lambda x: x + 1, g=__import__('os').system('false'))",  # shown, never run
    ],
)
def test_text_round_trips_as_written(text: str) -> None:
    sig = signature_from_text(text)
    assert sig is not None and str(sig) == text
    assert all(
        isinstance(p.default, Source) or p.default is P.empty for p in sig.parameters.values()
    )


def test_reprs_that_do_not_parse_become_ellipses() -> None:
    sig = signature_from_text("(x, key=<object object at 0x7f>, *, f=<function f at 0x1>)")
    assert sig is not None and str(sig) == "(x, key=..., *, f=...)"
    assert [p.kind for p in sig.parameters.values()] == [
        P.POSITIONAL_OR_KEYWORD,
        P.POSITIONAL_OR_KEYWORD,
        P.KEYWORD_ONLY,
    ]


@pytest.mark.parametrize(
    "text",
    [
        "(a, b",
        "a, b",
        "",
        "(a, a)",
        "(a=1, b)",
        "(a): pass\ndef g()",
        "(a) -> int:\n    import os\n#",
        "(" * 200 + ")" * 200,
        "(a=" + "[" * 5000 + "]" * 5000 + ")",
        "(" + "a" * MAX_SIGNATURE_TEXT + ")",
        "(a=<unbalanced)",
        "(\x00)",
    ],
)
def test_text_that_is_not_one_parameter_list_gives_none(text: str) -> None:
    assert signature_from_text(text) is None


IDENT = st.from_regex(r"[a-z][a-z0-9_]{0,6}", fullmatch=True).filter(
    lambda s: not keyword.iskeyword(s)
)
EXPR = st.sampled_from(["1", "'x'", "None", "[1, 2]", "{'a': (1, 2)}", "-0.5", "..."])
ANNOTATION = st.sampled_from(["int", "str | None", "list[dict[str, Any]]", "'Quoted'"])


@st.composite
def signatures(draw: Any) -> inspect.Signature:
    """Valid signatures of every kind, with annotations and defaults as source text."""
    names = draw(st.lists(IDENT, unique=True, max_size=8))
    params: list[inspect.Parameter] = []
    kinds = sorted(
        draw(
            st.lists(
                st.sampled_from(list(PARAMETER_KINDS.values())),
                min_size=len(names),
                max_size=len(names),
            )
        )
    )
    seen_default = False
    var_seen: set[inspect._ParameterKind] = set()
    for name, kind in zip(names, kinds, strict=True):
        if kind in (P.VAR_POSITIONAL, P.VAR_KEYWORD):
            if kind in var_seen:
                continue
            var_seen.add(kind)
            default: Any = P.empty
        elif kind is P.KEYWORD_ONLY:
            default = Source(draw(EXPR)) if draw(st.booleans()) else P.empty
        else:
            default = Source(draw(EXPR)) if seen_default or draw(st.booleans()) else P.empty
            seen_default = seen_default or default is not P.empty
        annotation = Source(draw(ANNOTATION)) if draw(st.booleans()) else P.empty
        params.append(P(name, kind, default=default, annotation=annotation))
    returns = Source(draw(ANNOTATION)) if draw(st.booleans()) else inspect.Signature.empty
    return inspect.Signature(params, return_annotation=returns)


@settings(max_examples=300, deadline=None)
@given(signatures())
def test_any_signature_goes_through_text_and_spec_unchanged(sig: inspect.Signature) -> None:
    text = signature_text(sig)
    again = signature_from_text(text)
    assert again is not None and str(again) == text and params_of(again) == params_of(sig)
    spec = spec_from_signature(sig)
    assert str(signature_from_spec(spec)) == text
    assert params_of(signature_from_spec(spec, text=False)) == params_of(sig)


def test_the_old_homes_still_export_the_one_implementation() -> None:
    import importlib

    from kernelgate.jupyter import comms
    from kernelgate.kernels.python import namespace

    replay = importlib.import_module("kernelgate.notebooks.replay")

    assert comms.signature_from_spec is signature_from_spec
    assert namespace.signature_from_spec is signature_from_spec
    assert namespace.PARAMETER_KINDS is PARAMETER_KINDS
    assert replay.signature_from_text is signature_from_text
