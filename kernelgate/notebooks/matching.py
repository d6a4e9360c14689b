"""Pairing replayed calls with recorded ones: by binding and bound arguments, then by
occurrence, never by arrival order (a program using ``asyncio.gather`` replays whatever
order its calls arrive in)."""

from __future__ import annotations

import inspect
from collections import defaultdict, deque
from collections.abc import Callable, Mapping
from typing import Any

from kernelgate.gateway.recording.values import canonical
from kernelgate.model.result import CallRecord

__all__ = ["NOT_RECORDED", "CallKey", "call_key", "match_calls"]

#: The ``ename`` of the ``ToolError`` a program gets for a call the recording lacks.
NOT_RECORDED = "NotRecorded"

#: (namespace, name, canonical arguments, how they were keyed)
CallKey = tuple[str, str, str, str]


def call_key(
    signatures: Mapping[tuple[str, str], inspect.Signature | None],
) -> Callable[[str, str, list[Any], dict[str, Any]], CallKey]:
    """Calls are equal when they bind the same arguments (``f('x')`` == ``f(query='x')``)."""

    def key(namespace: str, name: str, args: list[Any], kwargs: dict[str, Any]) -> CallKey:
        sig = signatures.get((namespace, name))
        if sig is not None:
            try:
                bound = sig.bind(*args, **kwargs)
            except TypeError:
                pass
            else:
                return (namespace, name, canonical(list(bound.arguments.items())), "bound")
        return (namespace, name, canonical(args), canonical(kwargs))

    return key


def match_calls(
    recorded: list[CallRecord],
    replayed: list[CallRecord],
    key: Callable[[str, str, list[Any], dict[str, Any]], CallKey] | None = None,
) -> tuple[list[tuple[CallRecord, CallRecord]], list[CallRecord], list[CallRecord]]:
    """Pair replayed calls with recorded ones by binding and arguments, then occurrence.

    Returns ``(pairs, unrecorded, unused)``: matched ``(recorded, replayed)`` pairs, replayed
    calls with no recorded counterpart, and recorded calls no replayed call matched.
    """
    key = key or call_key({})
    queues: dict[CallKey, deque[CallRecord]] = defaultdict(deque)
    for rec in sorted(recorded, key=lambda c: c.id):
        queues[key(rec.namespace, rec.name, rec.args, rec.kwargs)].append(rec)
    pairs: list[tuple[CallRecord, CallRecord]] = []
    unrecorded: list[CallRecord] = []
    for rep in sorted(replayed, key=lambda c: (c.start_s, c.id)):
        queue = queues.get(key(rep.namespace, rep.name, rep.args, rep.kwargs))
        if queue:
            pairs.append((queue.popleft(), rep))
        else:
            unrecorded.append(rep)
    used = {id(r) for r, _ in pairs}
    unused = [r for r in sorted(recorded, key=lambda c: c.id) if id(r) not in used]
    return pairs, unrecorded, unused
