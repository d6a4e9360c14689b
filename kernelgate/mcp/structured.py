"""``run_code``'s structured result: the run as JSON beside the text, with its schema.

The text content is what a model reads (:attr:`kernelgate.ToolOutput.text`); the
structured content (``structuredContent``, declared by the tool's ``outputSchema``) is
for the client's code: the status, the value as JSON, what was printed, the error's
kind, message and program-only traceback, how many binding calls were made. What was
printed is cut in the middle to ``max_chars`` here too (head and tail, one marker saying
how much), as a client may show it to a model; the recording keeps what the run kept.

>>> from kernelgate.model.result import RunResult
>>> structured(RunResult(status="ok", value=[1, 2], stdout="hi\\n"))["value"]
[1, 2]
"""

from __future__ import annotations

from typing import Any

from kernelgate.gateway.tools import MAX_CHARS
from kernelgate.model.result import STATUSES, RunResult

__all__ = ["OUTPUT_SCHEMA", "structured"]

_ERROR: dict[str, Any] = {
    "type": "object",
    "description": "Why the run failed: the exception's kind and message and the program's "
    "own traceback (its frames only).",
    "properties": {
        "ename": {"type": "string"},
        "evalue": {"type": "string"},
        "traceback": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["ename", "evalue", "traceback"],
    "additionalProperties": False,
}

#: The ``outputSchema`` of the ``run_code`` tool (JSON Schema 2020-12).
OUTPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "status": {
            "type": "string",
            "enum": list(STATUSES),
            "description": "How the run ended; only 'ok' returned a value.",
        },
        "ok": {"type": "boolean"},
        "value": {"description": "What the program returned, as JSON (null unless ok)."},
        "stdout": {"type": "string", "description": "What it printed (cut to max_chars)."},
        "stderr": {"type": "string", "description": "What it wrote to stderr (cut alike)."},
        "error": {"anyOf": [_ERROR, {"type": "null"}]},
        "calls": {"type": "integer", "minimum": 0, "description": "Binding calls made."},
        "failed_calls": {"type": "integer", "minimum": 0},
        "duration_s": {"type": "number", "minimum": 0},
        "run_id": {"type": "string"},
        "note": {"type": "string", "description": "What to know about a run that ended ok."},
        "cut": {
            "type": "boolean",
            "description": "stdout or stderr was cut here to stay within max_chars.",
        },
    },
    "required": [
        "status",
        "ok",
        "value",
        "stdout",
        "stderr",
        "error",
        "calls",
        "failed_calls",
        "duration_s",
        "run_id",
        "note",
        "cut",
    ],
    "additionalProperties": False,
}


def _clip(text: str, keep: int) -> str:
    """``text`` with its middle cut out to about ``keep`` characters, and one marker
    saying exactly how many were cut."""
    if len(text) <= keep:
        return text
    head = keep // 2
    tail = keep - head
    cut = len(text) - head - tail
    return f"{text[:head]}\n[... kernelgate cut {cut} characters here ...]\n{text[-tail:]}"


def structured(result: RunResult, max_chars: int = MAX_CHARS) -> dict[str, Any]:
    """``result`` as the structured content :data:`OUTPUT_SCHEMA` describes."""
    stderr = _clip(result.stderr, max(100, max_chars // 4))
    stdout = _clip(result.stdout, max(100, max_chars - len(stderr)))
    error = result.error
    return {
        "status": result.status,
        "ok": result.ok,
        "value": result.value if result.ok else None,
        "stdout": stdout,
        "stderr": stderr,
        "error": None
        if error is None
        else {"ename": error.ename, "evalue": error.evalue, "traceback": list(error.traceback)},
        "calls": len(result.calls),
        "failed_calls": sum(1 for c in result.calls if not c.ok),
        "duration_s": result.duration_s,
        "run_id": result.run_id,
        "note": result.note,
        "cut": stdout is not result.stdout or stderr is not result.stderr,
    }
