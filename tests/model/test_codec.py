"""The one RunResult <-> JSON codec: every field round-trips; every wrong field is named."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kernelgate.model.codec import (
    FORMAT,
    NotARunError,
    RecordingError,
    call_from_json,
    call_to_json,
    decode_metadata,
    decode_run,
    encode_metadata,
    encode_run,
    metadata_value,
    streams_and_value,
)
from kernelgate.model.result import STATUSES, CallRecord, ErrorInfo, RunResult

EXAMPLES = Path(__file__).resolve().parents[2] / "notebooks"

# -- strategies ------------------------------------------------------------------------------

TEXT = st.text(max_size=20)
SECONDS = st.floats(min_value=0, max_value=1e6, allow_nan=False, allow_infinity=False)
JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=12,
)
ERRORS = st.builds(ErrorInfo, TEXT, TEXT, st.lists(TEXT, max_size=3))


@st.composite
def calls(draw: Any, call_id: int) -> CallRecord:
    ok = draw(st.booleans())
    return CallRecord(
        id=call_id,
        namespace=draw(TEXT),
        name=draw(TEXT),
        args=draw(st.lists(JSON, max_size=3)),
        kwargs=draw(st.dictionaries(TEXT, JSON, max_size=3)),
        ok=ok,
        value=draw(JSON) if ok else None,
        error=None if ok else draw(ERRORS),
        start_s=draw(SECONDS),
        duration_s=draw(SECONDS),
        output_index=draw(st.integers(min_value=0, max_value=50)),
    )


def outputs() -> st.SearchStrategy[dict[str, Any]]:
    stream = st.builds(
        lambda name, text: {"output_type": "stream", "name": name, "text": text},
        st.sampled_from(["stdout", "stderr"]),
        TEXT,
    )
    display = st.builds(
        lambda kind, data: {"output_type": kind, "data": data, "metadata": {}},
        st.sampled_from(["display_data", "execute_result"]),
        st.fixed_dictionaries({"text/plain": TEXT}, optional={"application/json": JSON}),
    )
    error = st.builds(
        lambda e: {"output_type": "error", **e.to_dict()},
        ERRORS,
    )
    return stream | display | error


@st.composite
def runs(draw: Any) -> RunResult:
    n = draw(st.integers(min_value=0, max_value=4))
    ids = draw(
        st.lists(st.integers(min_value=0, max_value=10**6), min_size=n, max_size=n, unique=True)
    )
    return RunResult(
        status=draw(st.sampled_from(STATUSES)),
        value=draw(JSON),
        stdout=draw(TEXT),
        stderr=draw(TEXT),
        outputs=draw(st.lists(outputs(), max_size=4)),
        error=draw(st.none() | ERRORS),
        calls=[draw(calls(i)) for i in ids],
        duration_s=draw(SECONDS),
        exit_code=draw(st.none() | st.integers(min_value=-255, max_value=255)),
        signal=draw(st.none() | st.integers(min_value=1, max_value=64)),
        run_id=draw(TEXT),
        started_at=draw(TEXT),
        program=draw(st.text(max_size=60)),
        interpreter=draw(TEXT),
        limits=draw(st.dictionaries(TEXT, st.integers() | SECONDS, max_size=3)),
        # A namespace without bindings is not kept: bindings list bindings.
        bindings=draw(
            st.dictionaries(TEXT, st.dictionaries(TEXT, TEXT, min_size=1, max_size=3), max_size=3)
        ),
        isolation=draw(st.sampled_from(["", "process", "namespaces", "namespaces+landlock"])),
        usage=draw(st.dictionaries(TEXT, st.integers() | SECONDS | st.booleans(), max_size=3)),
        note=draw(TEXT),
        output_cut=draw(
            st.one_of(
                st.just({}),
                st.fixed_dictionaries(
                    {
                        "stream": st.just("stdout"),
                        "text": TEXT,
                        "stdout": st.fixed_dictionaries(
                            {k: st.integers(0, 10**6) for k in ("at", "bytes", "chars", "lines")}
                        ),
                    }
                ),
            )
        ),
    )


def through_json(data: Any, **dumps: Any) -> Any:
    return json.loads(json.dumps(data, allow_nan=False, **dumps))


# -- round trips -----------------------------------------------------------------------------


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(runs())
def test_every_field_round_trips(run: RunResult) -> None:
    back = decode_run(through_json(encode_run(run)))
    assert back == run
    # dict key order too, everywhere (JSON keeps it; the program may iterate its dicts)
    assert json.dumps(back.to_dict()) == json.dumps(run.to_dict())


@settings(max_examples=100, deadline=None)
@given(runs())
def test_metadata_round_trips_every_field_it_holds(run: RunResult) -> None:
    meta = decode_metadata(through_json(encode_metadata(run, run_number=3)), "run 3")
    assert meta.calls == len(run.calls)
    assert meta.version
    for name, value in meta.fields.items():
        assert getattr(run, name) == value, name
    held = set(RunResult.__dataclass_fields__) - {
        "value",
        "stdout",
        "stderr",
        "outputs",
        "calls",
        "program",
    }
    left_out = {"note"} if not run.note else set()  # empty ones are not written
    left_out |= {"output_cut"} if not run.output_cut else set()
    assert set(meta.fields) == held - left_out


@settings(max_examples=100, deadline=None)
@given(calls(7))
def test_a_call_keeps_its_key_order_through_a_sorted_rewrite(call: CallRecord) -> None:
    # Jupyter sorts keys when it saves a notebook: the answer's order survives it.
    back = call_from_json(through_json(call_to_json(call), sort_keys=True), "run", 0)
    assert back == call
    assert json.dumps(back.value) == json.dumps(call.value)


def test_the_recordings_metadata_is_the_encoders_and_decodes() -> None:
    """The example recording's cell metadata is what the encoder writes: the same keys in
    the same order (recordings made before this codec still load, and read the same)."""
    nb = json.loads((EXAMPLES / "demo_run.ipynb").read_text())
    meta = nb["cells"][0]["metadata"]["kernelgate"]
    decoded = decode_metadata(meta, "demo_run.ipynb run 1")
    # The value is in the metadata too (the cell shows its repr), read by metadata_value.
    found, value = metadata_value(meta, "demo_run.ipynb run 1")
    assert found and value == meta["value"]
    again = encode_metadata(RunResult(**decoded.fields, value=value))
    assert list(again) == list(meta)
    assert {**again, "calls": decoded.calls, "version": decoded.version} == meta
    assert decoded.calls == 5 and decoded.fields["status"] == "ok"


# -- refusals --------------------------------------------------------------------------------


def test_a_newer_format_asks_for_an_upgrade() -> None:
    meta = {**encode_metadata(RunResult("ok")), "format": FORMAT + 1, "version": "9.0"}
    with pytest.raises(NotARunError, match=f"format {FORMAT + 1} by kernelgate 9.0.*upgrade"):
        decode_metadata(meta, "x.ipynb run 1")


@pytest.mark.parametrize(
    "field, value, phrase",
    [
        ("format", "1", "metadata.kernelgate.format is '1'; expected an integer"),
        ("status", 5, "metadata.kernelgate.status is 5"),
        ("duration_s", float("inf"), "duration_s is inf; expected a finite number"),
        ("duration_s", True, "duration_s is True"),
        ("exit_code", "0", "exit_code is '0'; expected an integer"),
        ("signal", 1.5, "signal is 1.5"),
        ("run_id", None, "run_id is null; expected a string"),
        ("error", "boom", "error is 'boom'; expected an object"),
        ("error", {"ename": 1}, "error.ename is 1"),
        ("error", {"traceback": "x"}, "error.traceback is 'x'; expected a list of strings"),
        ("limits", [], "limits is list; expected an object"),
        ("bindings", "x", "bindings is 'x'; expected a list"),
        ("bindings", [{"namespace": "t"}], r"bindings\[0\]\.name is null"),
        ("calls", -1, "calls is -1; expected an integer >= 0"),
        ("usage", [1], "usage is list; expected dict"),
        ("isolation", 3, "isolation is 3; expected str"),
        ("version", 1, "version is 1"),
    ],
)
def test_a_wrong_metadata_field_is_named(field: str, value: Any, phrase: str) -> None:
    meta = {**encode_metadata(RunResult("ok")), field: value}
    with pytest.raises(RecordingError, match=phrase) as caught:
        decode_metadata(meta, "saved.ipynb run 2")
    assert str(caught.value).startswith("saved.ipynb run 2: ")
    assert "edited by hand, crafted or damaged" in str(caught.value)


def test_blame_and_prefix_say_where_the_data_came_from() -> None:
    with pytest.raises(RecordingError) as caught:
        decode_metadata({"status": "?"}, "the reply", prefix="reply.", blame="the kernel lied")
    assert str(caught.value) == (
        "the reply: reply.status is '?'; expected one of "
        + ", ".join(STATUSES)
        + " (the kernel lied)"
    )


@pytest.mark.parametrize(
    "change, phrase",
    [
        (lambda c: c.update(id="0"), "a call's id is '0'"),
        (lambda c: c.update(id=-1), "a call's id is -1; expected an integer >= 0"),
        (lambda c: c.pop("ok"), "lacks ok"),
        (lambda c: c.update(ok="yes"), "call #3: ok is 'yes'; expected true or false"),
        (lambda c: c.update(args={}), "expected a list and an object"),
        (lambda c: c.update(start_s=-1), "call #3: start_s is -1"),
        (lambda c: c.update(output_index=1.0), "call #3: output_index is 1.0"),
        (lambda c: c.update(key_order={"at": 1}), "call #3: key_order is dict"),
        (lambda c: c.update(namespace=None), "call #3: namespace is null"),
    ],
)
def test_a_wrong_call_field_is_named(change: Any, phrase: str) -> None:
    data = call_to_json(CallRecord(3, "tools", "f", [1], {}, ok=True, value={"b": 1, "a": 2}))
    change(data)
    with pytest.raises(NotARunError, match=phrase):
        call_from_json(data, "run 1", 0)


def test_a_whole_run_checks_its_parts() -> None:
    data = encode_run(RunResult("ok", calls=[CallRecord(1, "t", "f", [], {}, ok=True)]))
    with pytest.raises(RecordingError, match="calls is 2; expected 1, the number of call_records"):
        decode_run({**data, "calls": 2})
    with pytest.raises(RecordingError, match="output 0: output_type is 'bogus'"):
        decode_run({**data, "outputs": [{"output_type": "bogus"}]})
    with pytest.raises(RecordingError, match="program is 7"):
        decode_run({**data, "program": 7})
    with pytest.raises(RecordingError, match="the run is list; expected an object"):
        decode_run([])


def test_streams_and_value_read_a_run_s_outputs() -> None:
    outs = [
        {"output_type": "stream", "name": "stdout", "text": "a"},
        {"output_type": "stream", "name": "stderr", "text": ["b", "c"]},
        {"output_type": "execute_result", "data": {"application/json": [1]}},
        {"output_type": "stream", "name": "stdout", "text": "d"},
    ]
    assert streams_and_value(outs, "ok") == ("ad", "bc", [1])
    assert streams_and_value(outs, "exception") == ("ad", "bc", None)
