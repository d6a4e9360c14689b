"""kernels/python/display.py in-process: the MIME bundle of an object, as IPython builds it,
and what one ``display(obj)`` may send."""

from __future__ import annotations

import base64
from typing import Any

from kernelgate.kernels.python.display import display_bundle, mime_bundle, plain_repr
from kernelgate.model.constants import FRAME_OVERHEAD


class Rich:
    def _repr_html_(self) -> str:
        return "<b>rich</b>"

    def _repr_markdown_(self) -> tuple[str, dict[str, Any]]:
        return "**rich**", {"hint": 1}

    def _repr_png_(self) -> bytes:
        return b"\x89PNG fake"

    def _repr_json_(self) -> dict[str, Any]:
        return {"k": [1, 2]}

    def _repr_latex_(self) -> None:
        return None  # no such representation

    def __repr__(self) -> str:
        return "Rich()"


def test_every_repr_method_gives_its_mime_type_and_text_plain_is_always_there():
    data, metadata = mime_bundle(Rich())
    assert data == {
        "text/html": "<b>rich</b>",
        "text/markdown": "**rich**",
        "image/png": base64.b64encode(b"\x89PNG fake").decode("ascii"),
        "application/json": {"k": [1, 2]},
        "text/plain": "Rich()",
    }
    assert metadata == {"text/markdown": {"hint": 1}}
    assert mime_bundle(42) == ({"text/plain": "42"}, {})


def test_a_mimebundle_wins_and_only_json_types_may_hold_non_text():
    class Bundle:
        def _repr_mimebundle_(self) -> tuple[dict[Any, Any], dict[str, Any]]:
            return (
                {"text/html": "<i>b</i>", "application/vnd+json": {"a": 1}, "text/csv": 5, 3: "x"},
                {"text/html": {"isolated": True}},
            )

        def _repr_html_(self) -> str:
            return "not used"

    data, metadata = mime_bundle(Bundle())
    assert data["text/html"] == "<i>b</i>" and data["application/vnd+json"] == {"a": 1}
    assert "text/csv" not in data and 3 not in data
    assert metadata == {"text/html": {"isolated": True}}
    assert data["text/plain"].startswith("<")


def test_a_repr_method_that_raises_or_returns_the_wrong_type_is_skipped():
    class Broken:
        def _repr_html_(self) -> str:
            raise RuntimeError("no html")

        def _repr_svg_(self) -> int:
            return 5

        def _repr_mimebundle_(self) -> None:
            raise ValueError("no bundle")

        def __repr__(self) -> str:
            return "Broken()"

    assert mime_bundle(Broken()) == ({"text/plain": "Broken()"}, {})


def test_methods_are_looked_up_on_the_type_as_ipython_does():
    class Proxy:
        """Answers every attribute, as proxies and mocks do."""

        def __getattr__(self, name: str) -> Any:
            return lambda: "<b>every format</b>"

        def __repr__(self) -> str:
            return "Proxy()"

    assert mime_bundle(Proxy()) == ({"text/plain": "Proxy()"}, {})


def test_plain_repr_never_raises_and_is_cut():
    class BadRepr:
        def __repr__(self) -> str:
            raise RuntimeError("no")

    class NotStr:
        def __repr__(self) -> Any:
            return 5

    assert plain_repr(BadRepr()).endswith(".BadRepr object: repr() failed: RuntimeError>")
    assert plain_repr(NotStr()).endswith(".NotStr object: repr() failed: TypeError>")
    assert plain_repr("x" * 100, limit=10) == "'xxxxxxxxx... [92 more characters cut]"


def test_display_drops_what_is_not_json():
    class Odd:
        def _repr_json_(self) -> Any:
            return {1, 2}  # a set: not JSON

        def _repr_markdown_(self) -> tuple[str, dict[str, Any]]:
            return "ok", {"bad": float("nan")}

        def __repr__(self) -> str:
            return "Odd()"

    data, metadata = display_bundle(Odd(), 8 * 1024 * 1024)
    assert data == {"text/markdown": "ok", "text/plain": "Odd()"}
    assert metadata == {}  # metadata that is not JSON is dropped whole


def test_display_over_the_frame_says_so_instead():
    class Big:
        def _repr_html_(self) -> str:
            return "x" * 20_000

    frame = FRAME_OVERHEAD + 10_000
    data, metadata = display_bundle(Big(), frame)
    assert data == {
        "text/plain": f"[kernelgate: display output over max_frame_bytes={frame} not shown]"
    }
    assert metadata == {}
    small, _ = display_bundle(Big(), FRAME_OVERHEAD + 30_000)
    assert small["text/html"] == "x" * 20_000
