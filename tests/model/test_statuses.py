"""Statuses: one Literal, the tuples derived from it, and every place that lists them agreeing."""

from __future__ import annotations

import re
import typing
from pathlib import Path

import pytest

from kernelgate.model.codec import RecordingError, decode_metadata, encode_metadata
from kernelgate.model.result import (
    CHILD_STATUSES,
    STATUSES,
    ChildStatus,
    RunResult,
    Status,
)

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_statuses_are_the_literal() -> None:
    assert STATUSES == typing.get_args(Status)
    assert len(set(STATUSES)) == len(STATUSES) == 9
    assert STATUSES[0] == "ok"
    assert set(typing.get_args(ChildStatus)) == CHILD_STATUSES
    # The host alone decides the others: time, the caller, the process, the wire.
    assert set(STATUSES) - CHILD_STATUSES == {"timeout", "interrupted", "worker_exit", "protocol"}


def test_the_wire_accepts_exactly_the_child_statuses() -> None:
    from kernelgate.wire.events import CHILD_RUN_STATUSES

    assert set(CHILD_RUN_STATUSES) == CHILD_STATUSES


def test_the_protocol_doc_lists_every_status() -> None:
    text = (DOCS / "protocol.md").read_text()
    listed = set(re.findall(r"^\| `([a-z_]+)` \|", text, re.MULTILINE))
    assert set(STATUSES) <= listed, set(STATUSES) - listed


@pytest.mark.parametrize("status", STATUSES)
def test_every_status_survives_the_codec(status: Status) -> None:
    r = RunResult(status=status)
    assert r.ok is (status == "ok")
    assert decode_metadata(encode_metadata(r), "run").fields["status"] == status


@pytest.mark.parametrize("bad", ["bogus", "OK", "", 5, None])
def test_an_unknown_status_is_refused_naming_it(bad: object) -> None:
    meta = {**encode_metadata(RunResult("ok")), "status": bad}
    with pytest.raises(
        RecordingError, match=r"metadata\.kernelgate\.status is .*expected one of ok"
    ):
        decode_metadata(meta, "run 1")
