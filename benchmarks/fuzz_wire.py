#!/usr/bin/env python3
"""Fuzz the host side of kernelgate's fd-3 wire protocol for as long as you like.

Every input is a byte stream a hostile child could write on fd 3. It is fed, split into
random chunks, into a HOST ``Connection`` that has already sent ``OpenBindings`` and
``ExecuteRequest``. The only acceptable failure is ``RemoteProtocolError``; every event the
host accepts must be re-serializable as UTF-8 JSON. Anything else is a finding.

Examples::

    python benchmarks/fuzz_wire.py --seconds 60
    python benchmarks/fuzz_wire.py --mode hypothesis --examples 20000
    python benchmarks/fuzz_wire.py --mode both --seconds 300 --seed 7 --save-dir /tmp/finds
    python benchmarks/fuzz_wire.py --compact --seconds 60

``--compact``: the host and the child have agreed on compact call frames (the child's first
call, a full message, took the offer), so the valid frames mutated are compact calls and
random JSON arrays shaped almost like one are fed too.

Exit status: 0 when nothing but RemoteProtocolError was seen, 1 when there were findings.
Standalone: needs only kernelgate (and hypothesis for ``--mode hypothesis``).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import sys
import time
import traceback
from collections import Counter
from collections.abc import Iterator
from typing import Any

from kernelgate.wire import (
    CHILD,
    HOST,
    CallRequest,
    Connection,
    DisplayData,
    ErrorOutput,
    ExecuteReply,
    ExecuteRequest,
    ExecuteResult,
    OpenBindings,
    RemoteProtocolError,
    Stream,
    dumps,
)

COMM_ID = "bindings-fuzz"
SPECS = {"tools": {"add": {"params": [["a", "POSITIONAL_OR_KEYWORD", False]], "signature": "(a)"}}}
WORDS = [
    "header", "parent_header", "metadata", "content", "msg_type", "msg_id", "kernelgate",
    "status", "name", "text", "data", "comm_id", "method", "id", "namespace", "args",
    "kwargs", "execution_count", "ename", "evalue", "traceback", "transient", "text/plain",
    "application/json",
]  # fmt: skip
MSG_TYPES = [
    "stream", "comm_msg", "display_data", "execute_result", "error", "execute_reply",
    "comm_open", "execute_request", "status",
]  # fmt: skip
STRINGS = [
    COMM_ID, "stdout", "stderr", "call", "reply", "ok", "error", "exception",
    "invalid_output", "output_limit", "timeout", "tools", "add", "\\ud800", "\udc80",
    *MSG_TYPES,
]  # fmt: skip
CHILD_EVENTS = (CallRequest, Stream, DisplayData, ExecuteResult, ErrorOutput, ExecuteReply)
#: --compact: both ends agreed on compact call frames before the fuzzed input.
COMPACT = False


# -- the system under test ----------------------------------------------------------------------


def primed(max_frame_bytes: int) -> tuple[Connection, Connection]:
    host = Connection(HOST, session="host", max_frame_bytes=max_frame_bytes, compact=COMPACT)
    child = Connection(CHILD, session="child", compact=COMPACT)
    for event in (OpenBindings(COMM_ID, SPECS), ExecuteRequest("pass", {"max_calls": 10})):
        child.receive_data(host.send(event))
    while child.next_event() is not None:
        pass
    if COMPACT:  # the first call, a full message, takes the offer
        host.receive_data(child.send(CallRequest(0, "tools", "add", [0], {})))
        while host.next_event() is not None:
            pass
        assert host.compact
    return host, child


def valid_frames(max_frame_bytes: int) -> list[bytes]:
    _, child = primed(max_frame_bytes)
    events: list[Any] = [
        Stream("stdout", "hello\n"),
        CallRequest(child.next_call_id, "tools", "add", [1, {"k": [None, 2.5]}], {"b": True}),
        Stream("stderr", "é😀\n"),
        CallRequest(child.next_call_id + 1, "tools", "add", [], {}),
        DisplayData({"text/plain": "x", "application/json": {"a": 1}}, {"m": 1}),
        ExecuteResult({"application/json": [1, "two"], "text/plain": "[1, 'two']"}),
        ErrorOutput("ValueError", "bad", ["Traceback", "ValueError: bad"]),
        ExecuteReply("error", "exception", ename="ValueError", evalue="bad"),
    ]
    # A run has one outcome: the error and its reply come from a second child.
    _, failing = primed(max_frame_bytes)
    return [child.send(e) for e in events[:6]] + [failing.send(e) for e in events[6:]]


class Finding(Exception):
    """Something other than RemoteProtocolError happened."""


def run_one(data: bytes, cuts: list[int], max_frame_bytes: int) -> str:
    """Feed one input; return "accepted" or "refused", raise Finding for anything else."""
    host, _ = primed(max_frame_bytes)
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    chunks = [data[a:b] for a, b in itertools.pairwise(points)] + [b""]
    try:
        for chunk in chunks:
            host.receive_data(chunk)
            while (event := host.next_event()) is not None:
                if type(event) not in CHILD_EVENTS:
                    raise Finding(f"host produced a {type(event).__name__} event")
                try:
                    dumps({k: getattr(event, k) for k in event.__slots__}).encode("utf-8")
                except Exception as exc:
                    raise Finding(f"accepted an event it cannot re-serialize: {exc!r}") from exc
    except RemoteProtocolError as exc:
        try:
            host.next_event()
        except RemoteProtocolError as again:
            if again is not exc:
                raise Finding("a later call raised a different error") from None
            return "refused"
        raise Finding("the connection was not dead after a RemoteProtocolError") from None
    except Finding:
        raise
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt):
            raise
        raise Finding(f"{type(exc).__name__}: {exc}") from exc
    return "accepted"


# -- random-module generators -------------------------------------------------------------------


def rand_json(rng: random.Random, depth: int = 0) -> Any:
    r = rng.random()
    if depth > 3 or r < 0.5:
        return rng.choice(
            [
                None,
                True,
                False,
                rng.randint(-2, 3),
                rng.randint(-(2**70), 2**70),
                rng.choice([0.5, -0.0, float("nan"), float("inf"), 1e308]),
                rng.choice(STRINGS),
                "".join(chr(rng.randint(0, 0x10FFFF)) for _ in range(rng.randint(0, 6))),
            ]
        )
    if r < 0.75:
        return [rand_json(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    return {rng.choice(WORDS): rand_json(rng, depth + 1) for _ in range(rng.randint(0, 5))}


def rand_message(rng: random.Random) -> Any:
    content = {rng.choice(WORDS): rand_json(rng) for _ in range(rng.randint(0, 4))}
    if rng.random() < 0.5:
        content["data"] = {
            "method": rng.choice(["call", "reply", "x"]),
            "id": rng.randint(-1, 3),
            "namespace": "tools",
            "name": "add",
            "args": rand_json(rng),
            "kwargs": rand_json(rng),
        }
    if rng.random() < 0.5:
        content["comm_id"] = COMM_ID
    msg: dict[str, Any] = {
        "header": {"msg_type": rng.choice(MSG_TYPES)},
        "parent_header": rng.choice([{}, None, []]),
        "metadata": rng.choice([{}, {"kernelgate": {"status": rng.choice(STRINGS)}}]),
        "content": content,
    }
    for key in rng.sample(list(msg), rng.randint(0, 2)):
        if rng.random() < 0.5:
            del msg[key]
        else:
            msg[key] = rand_json(rng)
    return msg


def mutate(rng: random.Random, data: bytes, n: int) -> bytes:
    buf = bytearray(data)
    for _ in range(n):
        if not buf:
            break
        pos = rng.randint(0, len(buf))
        op = rng.randrange(5)
        if op == 0 and pos < len(buf):
            buf[pos] = rng.randrange(256)
        elif op == 1:
            buf[pos:pos] = rng.randbytes(rng.randint(1, 8))
        elif op == 2:
            del buf[pos : pos + rng.randint(1, 40)]
        elif op == 3:
            buf[pos:pos] = buf[pos : pos + rng.randint(1, 400)]
        else:
            del buf[pos:]
    return bytes(buf)


def replace_field(rng: random.Random, frames: list[bytes]) -> bytes:
    raws = [json.loads(f) for f in frames[: rng.randint(1, len(frames))]]
    target = raws[-1]
    for _ in range(rng.randint(1, 3)):
        node: Any = target
        path: list[tuple[Any, Any]] = []
        while type(node) in (dict, list) and node and (not path or rng.random() < 0.7):
            key = rng.choice(list(node)) if type(node) is dict else rng.randrange(len(node))
            path.append((node, key))
            node = node[key]
        if path:
            parent, key = path[-1]
            if type(parent) is dict and rng.random() < 0.3:
                del parent[key]
            else:
                parent[key] = rand_json(rng)
    text = "\n".join(json.dumps(r) for r in raws) + "\n"
    return text.encode("utf-8", "surrogatepass")


def random_inputs(
    rng: random.Random, frames: list[bytes], max_frame_bytes: int
) -> Iterator[tuple[str, bytes]]:
    while True:
        kind = rng.randrange(7 if COMPACT else 6)
        if kind == 6:
            fields: list[Any] = ["call", 1, "tools", "add", [1], {}]
            for _ in range(rng.randint(1, 3)):
                at = rng.randrange(len(fields) + 1)
                if at == len(fields) or rng.random() < 0.2:
                    fields.insert(at, rand_json(rng))
                elif rng.random() < 0.2:
                    del fields[at]
                else:
                    fields[at] = rng.choice([rand_json(rng), 1, 2, -1, True, "call", "reply"])
            yield "compact", (json.dumps(fields) + "\n").encode("utf-8", "surrogatepass")
        elif kind == 0:
            n = int(rng.random() ** 3 * 3 * max_frame_bytes)
            yield "bytes", rng.randbytes(n)
        elif kind == 1:
            lines = [rng.randbytes(rng.randint(0, 200)) for _ in range(rng.randint(1, 10))]
            yield "lines", b"\n".join(lines) + b"\n"
        elif kind == 2:
            items = [rand_message(rng) if rng.random() < 0.8 else rand_json(rng) for _ in "abc"]
            text = "\n".join(json.dumps(m, ensure_ascii=rng.random() < 0.5) for m in items)
            yield "jsonish", (text + "\n").encode("utf-8", "surrogatepass")
        elif kind == 3:
            picked = b"".join(rng.choice(frames) for _ in range(rng.randint(1, 10)))
            yield "mutated", mutate(rng, picked, rng.randint(1, 6))
        elif kind == 4:
            yield "replaced", replace_field(rng, frames)
        else:
            yield "flood", b"{" + b"x" * rng.randint(max_frame_bytes - 8, 3 * max_frame_bytes)


# -- drivers ------------------------------------------------------------------------------------


class Report:
    def __init__(self, save_dir: str | None, show: int) -> None:
        self.tried = 0
        self.outcomes: Counter[str] = Counter()
        self.kinds: Counter[str] = Counter()
        self.findings: list[tuple[str, str, bytes, str]] = []
        self.save_dir = save_dir
        self.show = show

    def record(self, kind: str, data: bytes, cuts: list[int], max_frame_bytes: int) -> None:
        self.tried += 1
        self.kinds[kind] += 1
        try:
            self.outcomes[run_one(data, cuts, max_frame_bytes)] += 1
        except Finding as exc:
            self.outcomes["finding"] += 1
            tb = traceback.format_exc()
            self.findings.append((kind, str(exc), data, tb))
            if self.save_dir:
                os.makedirs(self.save_dir, exist_ok=True)
                path = os.path.join(self.save_dir, f"finding-{len(self.findings):04d}.bin")
                with open(path, "wb") as f:
                    f.write(data)

    def print(self, seconds: float) -> None:
        rate = self.tried / seconds if seconds > 0 else 0.0
        print(f"tried {self.tried} inputs in {seconds:.1f} s ({rate:.0f}/s)")
        print("  by kind:    " + ", ".join(f"{k}={v}" for k, v in sorted(self.kinds.items())))
        print("  by outcome: " + ", ".join(f"{k}={v}" for k, v in sorted(self.outcomes.items())))
        if not self.findings:
            print("no exceptions other than RemoteProtocolError")
            return
        print(f"{len(self.findings)} FINDINGS (exceptions other than RemoteProtocolError):")
        by_message = Counter(message for _, message, _, _ in self.findings)
        for message, count in by_message.most_common():
            print(f"  {count} x {message}")
        for kind, message, data, tb in self.findings[: self.show]:
            print(f"\n--- {kind}: {message}\ninput ({len(data)} bytes): {data[:300]!r}\n{tb}")


def run_random(args: argparse.Namespace, report: Report, deadline: float) -> None:
    rng = random.Random(args.seed)
    frames = valid_frames(args.max_frame_bytes)
    for kind, data in random_inputs(rng, frames, args.max_frame_bytes):
        cuts = [rng.randrange(len(data) + 1) for _ in range(rng.randint(0, 12))]
        report.record(kind, data, cuts, args.max_frame_bytes)
        if time.monotonic() > deadline or (args.examples and report.tried >= args.examples):
            return


def run_hypothesis(args: argparse.Namespace, report: Report, deadline: float) -> None:
    try:
        from hypothesis import HealthCheck, given, settings
        from hypothesis import strategies as st
    except ImportError:
        sys.exit("--mode hypothesis needs hypothesis installed (pip install hypothesis)")
    frames = valid_frames(args.max_frame_bytes)
    scalars = (
        st.none()
        | st.booleans()
        | st.integers()
        | st.floats()
        | st.sampled_from(STRINGS)
        | st.text(max_size=10)
    )
    jsonish = st.recursive(
        scalars,
        lambda inner: (
            st.lists(inner, max_size=4)
            | st.dictionaries(st.sampled_from(WORDS) | st.text(max_size=4), inner, max_size=5)
        ),
        max_leaves=10,
    )
    message = st.fixed_dictionaries(
        {
            "header": st.fixed_dictionaries({"msg_type": st.sampled_from(MSG_TYPES)}),
            "parent_header": st.just({}),
            "metadata": st.sampled_from([{}, {"kernelgate": {"status": "ok"}}]),
            "content": st.dictionaries(st.sampled_from(WORDS), jsonish, max_size=5),
        }
    )
    inputs = st.one_of(
        st.tuples(st.just("bytes"), st.binary(max_size=3 * args.max_frame_bytes)),
        st.tuples(
            st.just("lines"),
            st.lists(st.binary(max_size=200), max_size=10).map(lambda ls: b"\n".join(ls) + b"\n"),
        ),
        st.tuples(
            st.just("jsonish"),
            st.lists(message | jsonish, min_size=1, max_size=4).map(
                lambda ms: ("\n".join(json.dumps(m) for m in ms) + "\n").encode(
                    "utf-8", "surrogatepass"
                )
            ),
        ),
        st.tuples(
            st.just("mutated"),
            st.tuples(
                st.lists(st.sampled_from(frames), min_size=1, max_size=8),
                st.integers(0, 2**32),
                st.integers(1, 6),
            ).map(lambda t: mutate(random.Random(t[1]), b"".join(t[0]), t[2])),
        ),
    )
    stop = False

    @settings(
        max_examples=args.batch,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(inputs, st.lists(st.integers(min_value=0), max_size=12))
    def fuzz(item: tuple[str, bytes], cuts: list[int]) -> None:
        nonlocal stop
        if stop:
            return
        kind, data = item
        if args.shrink:
            # let hypothesis see the failure and shrink it to a minimal input
            report.tried += 1
            run_one(data, cuts, args.max_frame_bytes)
        else:
            report.record(kind, data, cuts, args.max_frame_bytes)
        if time.monotonic() > deadline or (args.examples and report.tried >= args.examples):
            stop = True

    while not stop:
        fuzz()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=30.0, help="time budget (default 30)")
    parser.add_argument("--examples", type=int, default=0, help="stop after N inputs (0: no cap)")
    parser.add_argument(
        "--mode", choices=["random", "hypothesis", "both"], default="random", help="generator"
    )
    parser.add_argument("--seed", type=int, default=None, help="seed for --mode random")
    parser.add_argument("--max-frame-bytes", type=int, default=4096, help="host frame ceiling")
    parser.add_argument("--batch", type=int, default=200, help="hypothesis examples per batch")
    parser.add_argument(
        "--shrink", action="store_true", help="hypothesis: stop and shrink the first finding"
    )
    parser.add_argument("--save-dir", default=None, help="write each finding's input here")
    parser.add_argument("--show", type=int, default=3, help="findings to print in full")
    parser.add_argument(
        "--compact", action="store_true", help="after the agreement on compact call frames"
    )
    args = parser.parse_args(argv)
    global COMPACT
    COMPACT = args.compact
    if args.seed is None:
        args.seed = random.randrange(2**32)

    report = Report(args.save_dir, args.show)
    start = time.monotonic()
    modes = ["random", "hypothesis"] if args.mode == "both" else [args.mode]
    print(
        f"fuzzing the HOST decoder: mode={args.mode} compact={COMPACT} seed={args.seed} "
        f"max_frame_bytes={args.max_frame_bytes} budget={args.seconds:g}s"
        + (f" examples={args.examples}" if args.examples else "")
    )
    try:
        for i, mode in enumerate(modes):
            share = args.seconds * (i + 1) / len(modes)
            deadline = start + share
            if mode == "random":
                run_random(args, report, deadline)
            else:
                run_hypothesis(args, report, deadline)
    except KeyboardInterrupt:
        print("interrupted")
    report.print(time.monotonic() - start)
    return 1 if report.findings else 0


if __name__ == "__main__":
    sys.exit(main())
