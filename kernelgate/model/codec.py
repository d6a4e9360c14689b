"""The one JSON form of a :class:`~kernelgate.model.result.RunResult`, versioned.

Recordings, the Jupyter kernel front and ``RemoteGateway`` all speak it:

- **run metadata** (:func:`encode_metadata`, :func:`decode_metadata`): what a recorded
  run's cell carries under ``metadata.kernelgate``, and what the kernel front attaches to
  each ``execute_reply`` under the same key. Every RunResult field except the program and
  what the run's outputs hold (``value``, ``stdout``, ``stderr``, ``outputs``, ``calls``;
  of the calls, their count).
- **a call** (:func:`call_to_json`, :func:`call_from_json`): one binding call, as its
  ``application/vnd.kernelgate.call+json`` output holds it.
- **a whole run** (:func:`encode_run`, :func:`decode_run`): the metadata and the rest in
  one JSON object (``program``, ``value``, ``stdout``, ``stderr``, ``outputs``, and the
  calls as ``call_records``).

Decoding validates at the boundary: a recording or a kernel's reply is data from
elsewhere, so every field is checked once, here, and a wrong one raises
:class:`RecordingError` naming where, which field, what it is and what was expected.

>>> import json
>>> from kernelgate.model.result import CallRecord, RunResult
>>> r = RunResult("ok", value={"b": 1, "a": 2}, stdout="hi\\n", run_id="r1",
...               calls=[CallRecord(1, "tools", "add", [1, 2], {}, ok=True, value=3)])
>>> data = encode_run(r)
>>> data["format"], data["status"], data["calls"], data["call_records"][0]["value"]
(1, 'ok', 1, 3)
>>> decode_run(json.loads(json.dumps(data))) == r
True
>>> decode_metadata({**data, "duration_s": -1}, "run r1")  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
kernelgate.model.codec.RecordingError: run r1: metadata.kernelgate.duration_s is -1; ...

A namespace without bindings is not kept (``bindings`` lists bindings, not namespaces).
Stdlib only, like the rest of :mod:`kernelgate.model`.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields, is_dataclass
from typing import Any, cast

from kernelgate import __version__

from .keyorder import key_orders, restore_key_orders
from .language import DEFAULT_LANGUAGE, LANGUAGES
from .result import STATUSES, CallRecord, ErrorInfo, RunResult, Status

__all__ = [
    "FORMAT",
    "NotARunError",
    "RecordingError",
    "RunMetadata",
    "bad_field",
    "call_from_json",
    "call_to_json",
    "check_output",
    "decode_metadata",
    "decode_run",
    "encode_metadata",
    "encode_run",
    "metadata_value",
    "streams_and_value",
]

#: Version of the format (the run metadata and the call JSON). A reader refuses a newer
#: one, saying to upgrade; every change that an older reader would misread raises it.
FORMAT = 1

#: What a wrong field most likely means, for a recording.
RECORDING = "the recording was edited by hand, crafted or damaged"
#: The prefix of run metadata fields in messages: where a notebook cell keeps them.
METADATA = "metadata.kernelgate."


class NotARunError(ValueError):
    """A file is not a kernelgate recording, or does not hold the run that was asked for."""


class RecordingError(NotARunError):
    """A recording is damaged or crafted: a field has the wrong type or an impossible value,
    or the file is too large or too deeply nested. The message names the run and field."""


# -- field checks --------------------------------------------------------------------------------


def _type_name(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def bad_field(
    where: str, field: str, value: Any, expected: str, blame: str = RECORDING
) -> RecordingError:
    """The error for ``field`` of ``where`` being ``value`` where ``expected`` was wanted:
    ``run.ipynb run 1: source is 7; expected a string (the recording was edited ...)``.
    The value is shown when short and plain, else its type."""
    shown = repr(value) if isinstance(value, (int, float, str)) else _type_name(value)
    if len(shown) > 60:
        shown = shown[:57] + "..."
    return RecordingError(f"{where}: {field} is {shown}; expected {expected} ({blame})")


class _Check:
    """The checks of one decode; each failure names ``where``, the field, what it is and
    what was expected, and ends with ``blame`` (what a wrong field most likely means)."""

    __slots__ = ("where", "blame")

    def __init__(self, where: str, blame: str = RECORDING) -> None:
        self.where = where
        self.blame = blame

    def bad(self, field: str, value: Any, expected: str) -> RecordingError:
        return bad_field(self.where, field, value, expected, self.blame)

    def text(self, field: str, value: Any) -> str:
        if not isinstance(value, str):
            raise self.bad(field, value, "a string")
        return value

    def integer(self, field: str, value: Any, *, minimum: int | None = None) -> int:
        if type(value) is not int or (minimum is not None and value < minimum):
            at_least = f" >= {minimum}" if minimum is not None else ""
            raise self.bad(field, value, "an integer" + at_least)
        return value

    def optional_int(self, field: str, value: Any) -> int | None:
        return None if value is None else self.integer(field, value)

    def seconds(self, field: str, value: Any) -> float:
        if type(value) not in (int, float) or not math.isfinite(value) or value < 0:
            raise self.bad(field, value, "a finite number of seconds >= 0")
        return float(value)

    def lines(self, field: str, value: Any) -> str:
        """A notebook multiline string: a string, or a list of strings."""
        if isinstance(value, str):
            return value
        if isinstance(value, list) and all(isinstance(x, str) for x in value):
            return "".join(value)
        raise self.bad(field, value, "a string or a list of strings")

    def obj(self, field: str, value: Any) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.bad(field, value, "an object")
        return value

    def status(self, field: str, value: Any) -> Status:
        if value not in STATUSES:
            raise self.bad(field, value, "one of " + ", ".join(STATUSES))
        return cast(Status, value)

    def error(self, field: str, value: Any) -> ErrorInfo | None:
        if value is None:
            return None
        if not isinstance(value, dict):
            raise self.bad(field, value, "an object with ename, evalue and traceback")
        tb = value.get("traceback", [])
        if not isinstance(tb, list) or not all(isinstance(x, str) for x in tb):
            raise self.bad(f"{field}.traceback", tb, "a list of strings")
        return ErrorInfo(
            self.text(f"{field}.ename", value.get("ename", "")),
            self.text(f"{field}.evalue", value.get("evalue", "")),
            list(tb),
        )

    def key_order(self, field: str, value: Any) -> Any:
        if value is None:
            return None
        keys = value.get("keys") if isinstance(value, dict) else None
        if (
            not isinstance(value, dict)
            or not isinstance(value.get("at"), str)
            or not isinstance(keys, list)
            or not all(isinstance(k, list) and all(isinstance(x, str) for x in k) for k in keys)
        ):
            expected = "an object with 'at' (a string) and 'keys' (lists of strings)"
            raise self.bad(field, value, expected)
        return value


# -- one call ------------------------------------------------------------------------------------


def call_to_json(record: CallRecord) -> dict[str, Any]:
    """The whole call as the ``application/vnd.kernelgate.call+json`` output holds it.

    A value's dict key order is kept in ``key_order`` when it is not sorted, so a file
    rewritten with sorted keys (Jupyter does that on save) still replays the same order.
    """
    data: dict[str, Any] = {
        "id": record.id,
        "namespace": record.namespace,
        "name": record.name,
        "args": record.args,
        "kwargs": record.kwargs,
        "ok": record.ok,
    }
    if record.ok:
        data["value"] = record.value
        orders = key_orders(record.value)
        if orders is not None:
            data["key_order"] = orders
    else:
        error = record.error
        data["error"] = (
            error.to_dict() if error is not None else {"ename": "", "evalue": "", "traceback": []}
        )
    data["start_s"] = record.start_s
    data["duration_s"] = record.duration_s
    data["output_index"] = record.output_index
    return data


_CALL_KEYS = ("id", "namespace", "name", "args", "kwargs", "ok")


def call_from_json(data: Any, where: str, position: int, *, blame: str = RECORDING) -> CallRecord:
    """Rebuild a :class:`CallRecord` from a call's JSON: :class:`NotARunError` if it is not
    one; :class:`RecordingError` naming the field if a field has the wrong type or value.

    ``position`` is the call's place among the outputs when the JSON does not say.
    """
    check = _Check(where, blame)
    if not isinstance(data, dict):
        raise NotARunError(f"{where}: a call output's call data is not an object ({blame})")
    missing = [k for k in _CALL_KEYS if k not in data]
    if missing:
        raise NotARunError(
            f"{where}: a call output lacks {', '.join(missing)} in its call data; a call "
            f"needs {', '.join(_CALL_KEYS)} ({blame})"
        )
    call_id = check.integer("a call's id", data["id"], minimum=0)
    call = f"call #{call_id}"
    namespace = check.text(f"{call}: namespace", data["namespace"])
    name = check.text(f"{call}: name", data["name"])
    args, kwargs = data["args"], data["kwargs"]
    if not isinstance(args, list) or not isinstance(kwargs, dict):
        raise NotARunError(
            f"{where}: call #{call_id} has args {type(args).__name__} and kwargs "
            f"{type(kwargs).__name__}; expected a list and an object ({blame})"
        )
    ok = data["ok"]
    if not isinstance(ok, bool):
        raise check.bad(f"{call}: ok", ok, "true or false")
    order = check.key_order(f"{call}: key_order", data.get("key_order"))
    value = restore_key_orders(data.get("value"), order) if ok else None
    index = data.get("output_index")
    if index is not None:
        check.integer(f"{call}: output_index", index, minimum=0)
    error = None if ok else check.error(f"{call}: error", data.get("error"))
    return CallRecord(
        id=call_id,
        namespace=namespace,
        name=name,
        args=args,
        kwargs=kwargs,
        ok=ok,
        value=value,
        error=error or (None if ok else ErrorInfo("", "")),
        start_s=check.seconds(f"{call}: start_s", data.get("start_s", 0.0)),
        duration_s=check.seconds(f"{call}: duration_s", data.get("duration_s", 0.0)),
        output_index=index if index is not None else position,
    )


# -- run metadata --------------------------------------------------------------------------------

#: RunResult fields the program's source and outputs hold rather than the metadata.
_FROM_OUTPUTS = frozenset({"value", "stdout", "stderr", "outputs", "calls", "program"})


def encode_metadata(result: RunResult, run_number: int | None = None) -> dict[str, Any]:
    """What a run's cell says about it under ``metadata.kernelgate`` (and the kernel front
    in its ``execute_reply`` metadata): every field but the program and what its outputs
    hold; ``calls`` is how many calls it made. ``run_number`` is its place in a session log.
    """
    meta: dict[str, Any] = {
        "format": FORMAT,
        "version": __version__,
        "run_id": result.run_id,
        "status": result.status,
        "started_at": result.started_at,
        "duration_s": result.duration_s,
        "interpreter": result.interpreter,
        "exit_code": result.exit_code,
        "signal": result.signal,
        "error": result.error.to_dict() if result.error is not None else None,
        "limits": dict(result.limits),
        "bindings": [
            {"namespace": ns, "name": name, "signature": sig}
            for ns, table in result.bindings.items()
            for name, sig in table.items()
        ],
        "calls": len(result.calls),
    }
    # Fields added to RunResult later are kept too, as they are (JSON).
    for f in fields(RunResult):
        if f.name not in meta and f.name not in _FROM_OUTPUTS:
            value = getattr(result, f.name)
            if f.name == "note" and not value:
                continue  # most runs have none; recordings made before it stay identical
            if f.name == "output_cut" and not value:
                continue  # the same: most runs cut nothing
            if f.name == "language" and value == DEFAULT_LANGUAGE:
                continue  # the same for Python runs: a run without it is Python's
            is_instance = is_dataclass(value) and not isinstance(value, type)
            meta[f.name] = asdict(value) if is_instance else value
    if result.status == "ok" and result.value is not None:
        # The value is shown as its repr (text/plain, as ipykernel shows it); the JSON
        # that replay and tools read is kept here, with its dict key order.
        meta["value"] = result.value
        orders = key_orders(result.value)
        if orders is not None:
            meta["value_key_order"] = orders
    if run_number is not None:
        meta["run_number"] = run_number
    return meta


def metadata_value(meta: Any, where: str, *, blame: str = RECORDING) -> tuple[bool, Any]:
    """``(True, value)`` when run metadata holds the value (an ``ok`` run's, key order
    restored), else ``(False, None)`` (older recordings: the execute_result's JSON)."""
    if not isinstance(meta, dict) or "value" not in meta:
        return False, None
    field = f"{METADATA}value_key_order"
    order = _Check(where, blame).key_order(field, meta.get("value_key_order"))
    return True, restore_key_orders(meta["value"], order)


@dataclass(frozen=True)
class RunMetadata:
    """Run metadata, checked. ``fields`` are :class:`RunResult` keyword arguments (all but
    the program and what the outputs hold); ``calls`` is how many calls the run made, when
    the metadata says; ``version`` the kernelgate that wrote it."""

    fields: dict[str, Any]
    calls: int | None
    version: str


#: RunResult fields decode_metadata reads itself; any other is taken as it is.
_READ_HERE = _FROM_OUTPUTS | {
    "status",
    "error",
    "duration_s",
    "exit_code",
    "signal",
    "run_id",
    "started_at",
    "interpreter",
    "limits",
    "bindings",
    "language",
}
#: Types of the RunResult fields taken from the metadata as they are.
_EXTRA_TYPES: dict[str, type] = {
    "isolation": str,
    "usage": dict,
    "note": str,
    "output_cut": dict,
}


def _bindings(check: _Check, field: str, entries: Any) -> dict[str, dict[str, str]]:
    if not isinstance(entries, list):
        raise check.bad(field, entries, "a list")
    bindings: dict[str, dict[str, str]] = {}
    for n, entry in enumerate(entries):
        at = f"{field}[{n}]"
        if not isinstance(entry, dict):
            raise check.bad(at, entry, "an object with namespace, name and signature")
        table = bindings.setdefault(check.text(f"{at}.namespace", entry.get("namespace")), {})
        name = check.text(f"{at}.name", entry.get("name"))
        table[name] = check.text(f"{at}.signature", entry.get("signature", "(*args, **kwargs)"))
    return bindings


def decode_metadata(
    meta: Any, where: str, *, prefix: str = METADATA, blame: str = RECORDING
) -> RunMetadata:
    """Check run metadata (:func:`encode_metadata`'s form) and read it.

    ``where`` names the run in messages (``"run.ipynb run 2"``), ``prefix`` where the
    fields are (``metadata.kernelgate.`` in a cell). :class:`NotARunError` for a newer
    format, :class:`RecordingError` for a field of the wrong type or value.
    """
    check = _Check(where, blame)
    meta = check.obj(prefix.rstrip(".") or "the run", meta)
    fmt = meta.get("format", FORMAT)
    if type(fmt) is int and fmt > FORMAT:
        raise NotARunError(
            f"{where} was recorded in kernelgate format {fmt} by kernelgate "
            f"{meta.get('version', '?')}; this kernelgate reads format {FORMAT}: upgrade it"
        )
    check.integer(f"{prefix}format", fmt)
    calls = meta.get("calls")
    if calls is not None:
        check.integer(f"{prefix}calls", calls, minimum=0)
    # Shown as what the run had, never applied: a replay uses the caller's limits.
    limits = check.obj(f"{prefix}limits", meta.get("limits", {}))
    out: dict[str, Any] = {
        "status": check.status(f"{prefix}status", meta.get("status", "")),
        "error": check.error(f"{prefix}error", meta.get("error")),
        "duration_s": check.seconds(f"{prefix}duration_s", meta.get("duration_s", 0.0)),
        "exit_code": check.optional_int(f"{prefix}exit_code", meta.get("exit_code")),
        "signal": check.optional_int(f"{prefix}signal", meta.get("signal")),
        "run_id": check.text(f"{prefix}run_id", meta.get("run_id", "")),
        "started_at": check.text(f"{prefix}started_at", meta.get("started_at", "")),
        "interpreter": check.text(f"{prefix}interpreter", meta.get("interpreter", "")),
        "limits": dict(limits),
        "bindings": _bindings(check, f"{prefix}bindings", meta.get("bindings", [])),
    }
    language = meta.get("language", DEFAULT_LANGUAGE)
    if language not in LANGUAGES:
        raise check.bad(f"{prefix}language", language, "one of " + ", ".join(LANGUAGES))
    out["language"] = language
    for f in fields(RunResult):
        if f.name in _READ_HERE or f.name not in meta:
            continue
        wanted = _EXTRA_TYPES.get(f.name)
        if wanted is not None and not isinstance(meta[f.name], wanted):
            raise check.bad(f"{prefix}{f.name}", meta[f.name], wanted.__name__)
        out[f.name] = meta[f.name]
    version = check.text(f"{prefix}version", meta.get("version", ""))
    return RunMetadata(out, calls, version)


# -- outputs -------------------------------------------------------------------------------------

_OUTPUT_TYPES = ("stream", "display_data", "execute_result", "error", "update_display_data")


def check_output(output: Any, where: str, field: str, *, blame: str = RECORDING) -> dict[str, Any]:
    """``output`` if it is an nbformat v4 output in shape (type, text, data, metadata), else
    :class:`RecordingError`. What it displays is not judged here (see ``sanitize``)."""
    check = _Check(where, blame)
    checked = check.obj(field, output)
    kind = checked.get("output_type")
    if kind not in _OUTPUT_TYPES:
        raise check.bad(f"{field}: output_type", kind, "an nbformat v4 output type")
    if kind == "stream":
        check.lines(f"{field}: text", checked.get("text", ""))
    elif kind == "error":
        check.error(field, checked)
    else:
        check.obj(f"{field}: data", checked.get("data", {}))
    check.obj(f"{field}: metadata", checked.get("metadata", {}))
    return checked


def streams_and_value(outputs: list[dict[str, Any]], status: str) -> tuple[str, str, Any]:
    """``(stdout, stderr, value)`` as a run's outputs hold them: the stream texts joined,
    and for an ``ok`` run its ``execute_result``'s ``application/json`` (else ``None``)."""
    streams: dict[str, list[str]] = {"stdout": [], "stderr": []}
    value = None
    for output in outputs:
        kind = output.get("output_type")
        if kind == "stream" and output.get("name") in streams:
            text = output.get("text", "")
            streams[output["name"]].append(text if isinstance(text, str) else "".join(text))
        elif kind == "execute_result" and status == "ok":
            data = output.get("data")
            if isinstance(data, dict):
                value = data.get("application/json")
    return "".join(streams["stdout"]), "".join(streams["stderr"]), value


# -- a whole run ---------------------------------------------------------------------------------


def encode_run(result: RunResult) -> dict[str, Any]:
    """Every field of ``result`` as one JSON object: :func:`encode_metadata`'s keys, plus
    ``program``, ``value``, ``stdout``, ``stderr``, ``outputs`` and ``call_records``
    (each :func:`call_to_json`). :func:`decode_run` reads it back."""
    data = encode_metadata(result)
    data["program"] = result.program
    data["value"] = result.value
    data["stdout"] = result.stdout
    data["stderr"] = result.stderr
    data["outputs"] = [dict(o) for o in result.outputs]
    data["call_records"] = [call_to_json(c) for c in result.calls]
    return data


def decode_run(data: Any, where: str = "run", *, blame: str = RECORDING) -> RunResult:
    """The :class:`RunResult` :func:`encode_run` wrote, every field checked
    (:class:`RecordingError` naming the field; :class:`NotARunError` for a newer format).

    Outputs are checked for shape only: they are what the program displayed, and whoever
    shows them must sanitize them, as for any run.
    """
    check = _Check(where, blame)
    meta = decode_metadata(data, where, prefix="", blame=blame)
    records = data.get("call_records", [])
    if not isinstance(records, list):
        raise check.bad("call_records", records, "a list")
    calls = [call_from_json(c, where, i, blame=blame) for i, c in enumerate(records)]
    if meta.calls is not None and meta.calls != len(calls):
        raise check.bad("calls", meta.calls, f"{len(calls)}, the number of call_records")
    raw = data.get("outputs", [])
    if not isinstance(raw, list):
        raise check.bad("outputs", raw, "a list")
    outputs = [check_output(o, where, f"output {n}", blame=blame) for n, o in enumerate(raw)]
    return RunResult(
        **meta.fields,
        program=check.lines("program", data.get("program", "")),
        value=data.get("value"),
        stdout=check.text("stdout", data.get("stdout", "")),
        stderr=check.text("stderr", data.get("stderr", "")),
        outputs=outputs,
        calls=calls,
    )
