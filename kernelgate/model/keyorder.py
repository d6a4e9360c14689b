"""Dict key order inside a JSON value, kept apart from the value.

A binding's answer is replayed to a program that may iterate its dicts, so their key order
is part of what the program saw. JSON keeps it, but Jupyter sorts keys when it saves a
notebook: a recorded call therefore carries, beside its value, the order of every dict
whose keys were not sorted (:func:`key_orders`), and reading puts it back
(:func:`restore_key_orders`). Values are walked iteratively: depth never meets the
recursion limit. Stdlib only.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

__all__ = ["key_orders", "restore_key_orders"]


def _walk_sorted(value: Any) -> Iterator[dict[str, Any]]:
    """Yield every dict in ``value`` in pre-order, visiting dict members by sorted key.

    The order depends only on the value's content, never on its dicts' key order, so it
    survives a file being rewritten with sorted keys (as Jupyter does on save).
    """
    stack = [value]
    while stack:
        item = stack.pop()
        t = type(item)
        if t is dict:
            yield item
            for key in sorted(item, reverse=True):
                stack.append(item[key])
        elif t is list or t is tuple:
            stack.extend(reversed(item))


def key_orders(value: Any) -> dict[str, Any] | None:
    """Describe the key order of every dict in ``value`` whose keys are not sorted.

    Returns ``None`` when every dict is already sorted, else ``{"keys": [[k, ...], ...],
    "at": "dict_index:keys_index,..."}``: which dict (counted in :func:`_walk_sorted`
    order) had which key list. Shared key orders are stored once.

    >>> key_orders({"b": 1, "a": {"x": 1}, "c": [{"z": 1, "y": 2}, {"z": 3, "y": 4}]})
    {'keys': [['b', 'a', 'c'], ['z', 'y']], 'at': '0:0,2:1,3:1'}
    >>> key_orders({"a": 1}) is None
    True
    """
    lists: list[list[str]] = []
    index: dict[tuple[str, ...], int] = {}
    at: list[str] = []
    for n, d in enumerate(_walk_sorted(value)):
        keys = tuple(d)
        if any(keys[i] > keys[i + 1] for i in range(len(keys) - 1)):
            k = index.get(keys)
            if k is None:
                k = index[keys] = len(lists)
                lists.append(list(keys))
            at.append(f"{n}:{k}")
    return {"keys": lists, "at": ",".join(at)} if at else None


def restore_key_orders(value: Any, orders: Any) -> Any:
    """Put the dicts of ``value`` back in the key order :func:`key_orders` described.

    Works in place and returns ``value``. An entry that no longer fits (the recording was
    edited by hand) is skipped: the dict keeps the order it has.
    """
    if not isinstance(orders, dict):
        return value
    lists = orders.get("keys")
    at = orders.get("at")
    if not isinstance(lists, list) or not isinstance(at, str):
        return value
    wanted: dict[int, list[str]] = {}
    for entry in at.split(","):
        dict_no, _, list_no = entry.partition(":")
        if dict_no.isdigit() and list_no.isdigit() and int(list_no) < len(lists):
            keys = lists[int(list_no)]
            if isinstance(keys, list):
                wanted[int(dict_no)] = keys
    if not wanted:
        return value
    for n, d in enumerate(_walk_sorted(value)):
        order = wanted.get(n)
        if order is not None and len(order) == len(d) and set(order) == set(d):
            items = [(k, d[k]) for k in order]
            d.clear()
            d.update(items)
    return value
