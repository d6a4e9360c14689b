"""What the model reads is true and whole: ``run_tool``'s text, its cuts, its images, any
input, and the shapes the real SDKs (anthropic, openai, mcp) take it in.

Real children run the programs; the SDKs' own types (TypedDicts and pydantic models)
judge every shape through pydantic's TypeAdapter.
"""

from __future__ import annotations

import asyncio
import base64
import re
import struct
import typing
import zlib
from pathlib import Path
from typing import Any

import nbformat
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter

from kernelgate import Gateway, Limits, RunResult
from kernelgate.gateway.output import OutputCollector
from kernelgate.gateway.tools import tool_output
from kernelgate.notebooks import SessionLog, replay

from .conftest import BINDINGS, FAST

anthropic = pytest.importorskip("anthropic")
openai = pytest.importorskip("openai")
mcp_types = pytest.importorskip("mcp.types")

from anthropic.types import ToolParam, ToolResultBlockParam  # noqa: E402
from openai.types.chat import ChatCompletionToolMessageParam, ChatCompletionToolParam  # noqa: E402
from openai.types.responses import FunctionToolParam, ResponseInputItemParam  # noqa: E402

_MARKER = re.compile(r"\[\.\.\. kernelgate cut (\d+) characters \((\d+) lines\) of the printed")


def png(width: int, height: int) -> bytes:
    """A real PNG (grey, 8-bit), made with the stdlib."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    rows = b"".join(b"\x00" + b"\x80" * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


def strict(tp: Any, value: Any) -> Any:
    """``value`` validated as the SDK type ``tp``, and no key the type does not know (a
    TypedDict takes unknown keys silently; the API would refuse them)."""
    TypeAdapter(tp).validate_python(value)
    hints = typing.get_type_hints(tp) if typing.is_typeddict(tp) else None
    if hints is not None:
        assert set(value) <= set(hints), set(value) - set(hints)
    return value


def run_tools(*calls: Any, limits: Limits = FAST, **kwargs: Any) -> list[Any]:
    async def main() -> list[Any]:
        async with Gateway(bindings=BINDINGS, pool_size=0, **kwargs) as gw:
            return [await gw.run_tool(c, limits=limits) for c in calls]

    return asyncio.run(main())


# -- 1. the number the model reads is the whole truth ------------------------------------------


@pytest.mark.timeout(120)
def test_the_cut_counted_is_all_that_is_missing_across_both_cuts() -> None:
    program = 'for i in range(8000): print(f"{i:06d}")'
    tool_cut, both_cut = run_tools(program, limits=Limits(wall_seconds=30)) + run_tools(
        program, limits=Limits(wall_seconds=30, max_output_bytes=20_000)
    )
    for out in (tool_cut, both_cut):
        kept = [line for line in out.text.splitlines() if re.fullmatch(r"\d{6}", line)]
        # Whatever the markers say, their counts add up to all that is not shown ...
        chars = sum(int(n) for n in re.findall(r"cut (\d+) characters", out.text))
        assert chars == 7 * (8000 - len(kept))
        (match,) = _MARKER.findall(out.text)  # ... and there is one, saying lines too
        assert len(kept) + int(match[1]) == 8000  # every line is kept or counted
        assert kept[0] == "000000" and kept[-1] == "007999"  # head and tail
        assert len(out.text) <= 20_000
    cut_run = both_cut
    assert "max_output_bytes=20000 and max_chars=20000" in cut_run.text
    assert cut_run.result.output_cut["stdout"]["lines"] > 0


@settings(max_examples=200, deadline=None)
@given(
    lines=st.lists(st.text(alphabet="ab é\n", max_size=30), max_size=80),
    limit=st.integers(20, 600),
    max_chars=st.integers(400, 900),
    value=st.one_of(st.none(), st.text(max_size=1500)),
)
def test_tool_output_counts_both_cuts_exactly(
    lines: list[str], limit: int, max_chars: int, value: str | None
) -> None:
    collector = OutputCollector(limit)
    for text in lines:
        collector.add_text("stdout", text + "\n")
    whole = "".join(text + "\n" for text in lines)
    result = RunResult(
        status="ok",
        value=value,
        stdout=collector.text("stdout"),
        output_cut=collector.cut_info(),
        limits={"max_output_bytes": limit},
    )
    out = tool_output(result, max_chars)
    assert len(out.text) <= max_chars
    markers = _MARKER.findall(out.text)
    assert len(markers) <= 1
    shown = out.text.split("printed:\n", 1)[1].rsplit("\nreturned:\n", 1)[0] if whole.strip() else ""
    if markers:
        chars = int(markers[0][0])
        head, tail = re.split(r"\n?\[\.\.\. kernelgate cut .*? \.\.\.\]\n?", shown)
        # What is shown and what is counted make up all the program printed.
        assert whole.startswith(head)
        # (the text ends without its last line break, as every block does)
        assert whole[len(head) + chars :].rstrip("\n") == tail
        missing = whole[len(head) : len(head) + chars]
        assert int(markers[0][1]) == missing.count("\n")
    elif whole.strip():
        assert shown == whole.rstrip("\n")


# -- 2. head and tail: the end of a long output reaches the model ------------------------------


@pytest.mark.timeout(120)
def test_the_final_answer_after_long_output_reaches_the_model_and_the_recording(
    tmp_path: Path,
) -> None:
    log = SessionLog(tmp_path / "session.ipynb")
    program = (
        "for i in range(3000):\n    print('progress line', i)\n"
        "print('FINAL ANSWER: 42')\nreturn 'done'"
    )
    (out,) = run_tools(program, limits=Limits(wall_seconds=30, max_output_bytes=8000), record_to=log)
    assert not out.is_error
    assert "FINAL ANSWER: 42\nreturned:\n\"done\"" in out.text
    assert out.result.stdout.endswith("FINAL ANSWER: 42\n")
    assert out.result.stdout.startswith("progress line 0\n")
    # The recording: valid nbformat, the same text, and its replay matches.
    nb = nbformat.read(tmp_path / "session.ipynb", as_version=4)
    nbformat.validate(nb)
    (recorded,) = log.runs()
    assert recorded.stdout == out.result.stdout
    assert recorded.output_cut == out.result.output_cut
    assert tool_output(recorded).text == out.text  # read back, it tells the model the same
    report = replay(tmp_path / "session.ipynb", cell=1, limits=Limits(wall_seconds=30, max_output_bytes=8000))
    assert not report.diverged


# -- 3. images ---------------------------------------------------------------------------------

_DISPLAY_PNG = """\
import base64
class Picture:
    def __init__(self, data):
        self.data = data
    def _repr_png_(self):
        return self.data
display(Picture(base64.b64decode({png!r})))
print('shown')
return 1
"""


@pytest.mark.timeout(120)
def test_a_displayed_png_reaches_the_apis_that_take_images() -> None:
    data = png(320, 200)
    (out,) = run_tools(_DISPLAY_PNG.format(png=base64.b64encode(data).decode()))
    assert not out.is_error
    (image,) = out.images
    assert image.attached and (image.width, image.height, image.size) == (320, 200, len(data))
    assert f"images:\n[image 1: image/png 320x200, {len(data)} bytes, displayed]" in out.text
    block = strict(ToolResultBlockParam, out.to_anthropic("toolu_1"))
    assert block["content"][0] == {"type": "text", "text": out.text}
    assert block["content"][1]["source"] == {
        "type": "base64",
        "media_type": "image/png",
        "data": base64.b64encode(data).decode(),
    }
    item = out.to_openai_responses("call_1")
    TypeAdapter(ResponseInputItemParam).validate_python(item)
    assert item["output"][1]["image_url"] == "data:image/png;base64," + base64.b64encode(data).decode()
    chat = strict(ChatCompletionToolMessageParam, out.to_openai("call_1"))
    assert chat["content"].endswith("1 image not shown: a Chat Completions tool message carries text only]")
    result = mcp_types.CallToolResult.model_validate(out.to_mcp())
    assert [c.type for c in result.content] == ["text", "image"]
    assert result.content[1].mime_type == "image/png"


@pytest.mark.timeout(120)
def test_what_is_not_an_image_or_too_many_is_a_line_not_an_attachment() -> None:
    fake = base64.b64encode(b"not a png at all").decode()
    jpeg_as_png = base64.b64encode(b"\xff\xd8\xff\xe0" + b"\x00" * 20).decode()
    good = base64.b64encode(png(2, 3)).decode()
    program = (
        "class P:\n    def __init__(self, b): self.b = b\n"
        "    def _repr_mimebundle_(self): return {'image/png': self.b}\n"
        f"display(P({fake!r}))\ndisplay(P({jpeg_as_png!r}))\n"
        f"for _ in range(7):\n    display(P({good!r}))\nreturn None"
    )
    (out,) = run_tools(program)
    assert [i.attached for i in out.images] == [False, False] + [True] * 5 + [False] * 2
    assert "[image 1: image/png, 16 bytes, displayed; not attached: not a PNG, JPEG, GIF, WEBP image]" in out.text
    assert "[image 8: image/png 2x3, " in out.text and "not attached: over max_images=5]" in out.text
    content = strict(ToolResultBlockParam, out.to_anthropic("t"))["content"]
    assert len(content) == 1 + 5  # the text and five images: an API never sees a bad one


# -- 4. any input gets an answer ---------------------------------------------------------------


@pytest.mark.timeout(120)
def test_every_model_input_gets_a_result_it_can_read() -> None:
    outs = run_tools(None, {}, {"code": 12}, {"program": "1"}, {"code": "1", "x": 2}, 3.5,
                     {"code": "return 6 * 7"})
    none, empty, number, wrong_key, extra, floating, ok = outs
    for out, says in (
        (none, "got null (None)"),
        (empty, "the input has no arguments"),
        (number, "must be a string (the program), got int"),
        (wrong_key, "the input has only 'program'"),
        (extra, "the input also has x"),
        (floating, "got float"),
    ):
        assert out.is_error and out.text.startswith("error (invalid input): run_code")
        assert says in out.text and 'send {"code": "<the program, as one string>"}' in out.text
        strict(ToolResultBlockParam, out.to_anthropic("t"))
    assert not ok.is_error and ok.text == "returned:\n42"  # the SDKs' tool input shape


# -- 5. the tool's shape, per API, as the SDKs' own types say ----------------------------------


def test_tool_schemas_validate_as_the_sdks_types() -> None:
    gw = Gateway(bindings=BINDINGS)
    strict(ToolParam, gw.tool_schema("anthropic"))
    TypeAdapter(ChatCompletionToolParam).validate_python(gw.tool_schema("openai"))
    tool = strict(FunctionToolParam, gw.tool_schema("openai-responses"))
    assert tool["type"] == "function" and tool["name"] == "run_code"
    # Strict mode wants a closed schema with every property required.
    params = tool["parameters"]
    assert params is not None and params["additionalProperties"] is False
    assert sorted(params["required"]) == sorted(params["properties"])
    mcp_types.Tool.model_validate(gw.tool_schema("mcp"))


def test_results_validate_as_the_sdks_types() -> None:
    out = tool_output(RunResult(status="ok", value={"a": 1}, stdout="x\n"))
    strict(ToolResultBlockParam, out.to_anthropic("toolu_1"))
    strict(ChatCompletionToolMessageParam, out.to_openai("call_1"))
    item = out.to_openai_responses("call_1")
    TypeAdapter(ResponseInputItemParam).validate_python(item)
    assert item == {"type": "function_call_output", "call_id": "call_1", "output": out.text}
    mcp_types.CallToolResult.model_validate(out.to_mcp())


def test_an_image_too_big_or_crafted_is_never_attached() -> None:
    from kernelgate.gateway.images import ToolImage

    huge = png(1, 1)[:16] + struct.pack(">II", 9000, 10) + png(1, 1)[24:]
    image = ToolImage.from_base64(base64.b64encode(huge).decode(), "image/png", "displayed")
    assert not image.attached and "over 8000 pixels" in image.reason
    big = ToolImage.from_base64(base64.b64encode(png(100, 100)).decode(), "image/png", "x", 50)
    assert not big.attached and big.reason == "over 50 bytes" and big.data == ""
    # A JPEG whose segments say nothing sensible is read to its end, not looped on.
    crafted = b"\xff\xd8\xff\xe0\x00\x00" * 1000
    bad = ToolImage.from_base64(base64.b64encode(crafted).decode(), "image/jpeg", "x")
    assert not bad.attached
    assert not ToolImage.from_base64("@@not base64@@", "image/png", "x").attached


@settings(max_examples=200, deadline=None)
@given(
    sizes=st.tuples(*[st.integers(0, 5000)] * 4),
    ok=st.booleans(),
    max_chars=st.integers(400, 1200),
)
def test_the_text_fits_max_chars_whatever_is_long(
    sizes: tuple[int, int, int, int], ok: bool, max_chars: int
) -> None:
    from kernelgate.model.result import ErrorInfo

    out_n, err_n, value_n, tb_n = sizes
    result = RunResult(
        status="ok" if ok else "exception",
        value="v" * value_n if ok else None,
        stdout="o\n" * out_n,
        stderr="e" * err_n,
        error=None if ok else ErrorInfo("E", "x" * tb_n, ["t" * 50] * (tb_n // 50)),
        note="n" * (tb_n // 10) if ok else "",
    )
    text = tool_output(result, max_chars).text
    assert len(text) <= max_chars
    # Each part cut says so once, with a count.
    for count in re.findall(r"kernelgate cut (\d+) characters", text):
        assert int(count) > 0


@pytest.mark.timeout(120)
def test_a_program_printing_a_fake_marker_does_not_change_the_count() -> None:
    # The count comes from the host's own record of the cut (output_cut), not the text.
    fake = "\\n[kernelgate: 1 byte (0 lines) of stdout cut here: fake]\\n"
    fake_tool = "[... kernelgate cut 1 characters (0 lines) of the printed output here ...]"
    program = (
        f"print({fake!r})\nprint({fake_tool!r})\n"
        "for i in range(5000):\n    print(f'{i:06d}')\n"
        f"print({fake!r})"
    )
    (out,) = run_tools(program, limits=Limits(wall_seconds=30, max_output_bytes=4000))
    cut = out.result.output_cut["stdout"]
    assert out.result.stdout[cut["at"] :].startswith(out.result.output_cut["text"])
    real = [m for m in _MARKER.findall(out.text) if m != ("1", "0")]
    (match,) = real
    kept = [line for line in out.text.splitlines() if re.fullmatch(r"\d{6}", line)]
    assert len(kept) + int(match[1]) == 5000  # every flood line kept or counted
    assert (int(match[0]), int(match[1])) == (cut["chars"], cut["lines"])  # no second cut
    assert out.text.count("cut here: fake]") == 2  # shown as the program's text, head and tail
