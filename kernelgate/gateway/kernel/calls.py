"""A binding call as a notebook output: ``display_data`` with the call MIME and text.

The kernel shows each call as it completes with :func:`call_display`; a client rebuilds the
:class:`~kernelgate.gateway.result.CallRecord` from that output with
:func:`call_record_from_data`.

Saved runs show calls with ``kernelgate.notebooks``' builder; :func:`call_display` uses that
one whenever it is importable, so a live cell and a saved run show a call the same way.
:func:`builtin_call_display` is this package's own small builder (application/vnd.kernelgate.
call+json and text/plain), used only when that one is missing or fails.
"""

from __future__ import annotations

import functools
import importlib
import keyword
from collections.abc import Callable
from typing import Any

from kernelgate.gateway.result import CallRecord, ErrorInfo
from kernelgate.wire.messages import CALL_MIME

__all__ = [
    "call_display",
    "builtin_call_display",
    "call_data",
    "call_text",
    "call_record_from_data",
]

_ARG_LIMIT = 40
_VALUE_LIMIT = 60


def _label(namespace: str, name: str) -> str:
    if name.isidentifier() and not keyword.iskeyword(name):
        return f"{namespace}.{name}"
    return f"{namespace}[{name!r}]"


def _short(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _summary(value: Any) -> str:
    if isinstance(value, list):
        return f"[{len(value)} item{'' if len(value) == 1 else 's'}]"
    if isinstance(value, dict):
        return f"{{{len(value)} key{'' if len(value) == 1 else 's'}}}"
    return _short(repr(value), _VALUE_LIMIT)


def call_text(record: CallRecord) -> str:
    """One line: ``tools.search('x', limit=3) -> [3 items]  1.2 ms``."""
    args = [_short(repr(a), _ARG_LIMIT) for a in record.args]
    args += [f"{k}={_short(repr(v), _ARG_LIMIT)}" for k, v in record.kwargs.items()]
    if record.ok:
        outcome = _summary(record.value)
    elif record.error is not None:
        outcome = f"raised {record.error.ename}: {_short(record.error.evalue, _VALUE_LIMIT)}"
    else:
        outcome = "raised"
    return (
        f"{_label(record.namespace, record.name)}({', '.join(args)}) -> {outcome}  "
        f"{record.duration_s * 1000:.1f} ms"
    )


def call_data(record: CallRecord) -> dict[str, Any]:
    """The ``application/vnd.kernelgate.call+json`` payload of one call."""
    data: dict[str, Any] = {
        "id": record.id,
        "namespace": record.namespace,
        "name": record.name,
        "args": record.args,
        "kwargs": record.kwargs,
        "ok": record.ok,
        "start_s": record.start_s,
        "duration_s": record.duration_s,
    }
    if record.ok:
        data["value"] = record.value
    else:
        error = record.error or ErrorInfo("Exception", "")
        data["error"] = {"ename": error.ename, "evalue": error.evalue}
    return data


@functools.lru_cache(maxsize=1)
def _notebook_builder() -> Callable[[CallRecord], Any] | None:
    # Imported by name: kernelgate.notebooks is optional here and typed on its own.
    try:
        module = importlib.import_module("kernelgate.notebooks.render")
    except ImportError:
        return None
    builder = getattr(module, "call_output", None)
    return builder if callable(builder) else None


def call_display(record: CallRecord) -> dict[str, Any]:
    """The nbformat ``display_data`` output showing one completed binding call.

    The same output saved runs hold (``kernelgate.notebooks``' ``call_output``) when that
    builder is available, else :func:`builtin_call_display`'s.
    """
    builder = _notebook_builder()
    if builder is not None:
        try:
            output = builder(record)
        except Exception:
            output = None
        if (
            isinstance(output, dict)
            and output.get("output_type") == "display_data"
            and isinstance(output.get("data"), dict)
            and CALL_MIME in output["data"]
            and "text/plain" in output["data"]
        ):
            return output
    return builtin_call_display(record)


def builtin_call_display(record: CallRecord) -> dict[str, Any]:
    """This package's own call output: the call JSON and one line of text."""
    return {
        "output_type": "display_data",
        "data": {CALL_MIME: call_data(record), "text/plain": call_text(record)},
        "metadata": {},
    }


def call_record_from_data(data: Any, output_index: int = 0) -> CallRecord | None:
    """Rebuild a :class:`CallRecord` from a call payload; ``None`` if it is not one.

    ``output_index`` is used when the payload does not say where the call belongs.
    """
    if not isinstance(data, dict):
        return None
    try:
        error = data.get("error")
        index = data.get("output_index")
        traceback = error.get("traceback") if isinstance(error, dict) else None
        record = CallRecord(
            id=int(data.get("id", 0)),
            namespace=str(data["namespace"]),
            name=str(data["name"]),
            args=list(data.get("args", [])),
            kwargs=dict(data.get("kwargs", {})),
            ok=bool(data.get("ok", False)),
            value=data.get("value"),
            error=(
                ErrorInfo(
                    str(error.get("ename", "")),
                    str(error.get("evalue", "")),
                    [str(line) for line in traceback] if isinstance(traceback, list) else [],
                )
                if isinstance(error, dict)
                else None
            ),
            start_s=float(data.get("start_s", 0.0)),
            duration_s=float(data.get("duration_s", 0.0)),
            output_index=index if type(index) is int else output_index,
        )
    except (KeyError, TypeError, ValueError):
        return None
    return record
