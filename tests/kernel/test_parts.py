"""The kernel's parts without a kernel: call outputs, introspection, comm specs, install."""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import pathlib
import subprocess
import sys
from typing import Any

import pytest

from kernelgate.cli import main as kernelgate_main
from kernelgate.demo import BINDINGS
from kernelgate.gateway.bindings import BindingRegistry
from kernelgate.jupyter.calls import call_display, call_record_from_data
from kernelgate.jupyter.comms import (
    ClientBindings,
    remote_error,
    signature_from_spec,
)
from kernelgate.jupyter.introspect import complete, inspect_code, is_complete
from kernelgate.jupyter.spec import kernel_json
from kernelgate.model.result import CallRecord, ErrorInfo
from kernelgate.wire.messages import CALL_MIME

NAMESPACES = BindingRegistry({"tools": BINDINGS, "db": {"web-search": len}}).namespaces


# -- call outputs ----------------------------------------------------------------------------


def test_call_display_round_trips() -> None:
    record = CallRecord(
        id=3,
        namespace="tools",
        name="search",
        args=["x"],
        kwargs={"limit": 3},
        ok=True,
        value=[1, 2, 3],
        start_s=0.5,
        duration_s=0.0012,
        output_index=2,
    )
    out = call_display(record)
    assert out["output_type"] == "display_data"
    assert out["data"]["text/plain"] == "tools.search('x', limit=3) -> [1, 2, 3]  1.2 ms"
    back = call_record_from_data(json.loads(json.dumps(out["data"][CALL_MIME])), output_index=2)
    assert back == record


def test_call_display_is_the_saved_runs_output_when_available() -> None:
    record = CallRecord(
        id=1,
        namespace="tools",
        name="fetch",
        args=["comms"],
        kwargs={},
        ok=False,
        error=ErrorInfo("KeyError", "'comms'"),
        start_s=0.1,
        duration_s=0.002,
        output_index=4,
    )
    out = call_display(record)
    assert out["output_type"] == "display_data"
    assert out["data"]["text/plain"].startswith("tools.fetch('comms') -> raised KeyError")
    back = call_record_from_data(json.loads(json.dumps(out["data"][CALL_MIME])), output_index=9)
    assert back is not None
    assert (back.id, back.namespace, back.name, back.args, back.ok) == (
        1,
        "tools",
        "fetch",
        ["comms"],
        False,
    )
    assert back.error is not None and (back.error.ename, back.error.evalue) == (
        "KeyError",
        "'comms'",
    )
    assert back.output_index in (4, 9)  # the payload's own index when it has one


def test_call_text_for_failures_and_odd_names() -> None:
    record = CallRecord(
        id=0,
        namespace="db",
        name="web-search",
        args=[],
        kwargs={},
        ok=False,
        error=ErrorInfo("KeyError", "'nope'"),
        duration_s=0.25,
    )
    out = call_display(record)
    assert out["data"]["text/plain"].startswith("db['web-search']() -> raised KeyError")
    data = out["data"][CALL_MIME]
    assert data["error"]["ename"] == "KeyError" and "value" not in data
    assert call_record_from_data({"name": "x"}) is None
    assert call_record_from_data("nope") is None


# -- complete / inspect / is_complete ---------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "matches", "start"),
    [
        ("tools.se", ["search"], 6),
        ("x = await tools.", ["compute", "fetch", "search"], 16),
        ("db['we", ["web-search"], 4),
        ("too", ["tools"], 0),
        ("Tool", ["ToolError"], 0),
        ("disp", ["display"], 0),
        ("zi", ["zip"], 0),
        ("my_var = 1\nmy_", ["my_var"], 11),
        ("1.re", [], 4),
        ("", [], 0),
        ("other.se", [], 6),
    ],
)
def test_complete(code: str, matches: list[str], start: int) -> None:
    reply = complete(code, None, NAMESPACES)
    assert reply["matches"] == matches
    assert reply["cursor_start"] == start
    assert reply["cursor_end"] == len(code)


def test_complete_in_the_middle_and_types() -> None:
    code = "await tools.fe(1)"
    reply = complete(code, len("await tools.fe"), NAMESPACES)
    assert reply["matches"] == ["fetch"]
    types = reply["metadata"]["_jupyter_types_experimental"]
    assert types[0]["signature"] == "(doc_id: str) -> dict[str, Any]"


@pytest.mark.parametrize(
    ("code", "pos", "head"),
    [
        ("tools.search", None, "async def search(query: str, limit: int = 3)"),
        ("await tools.search('x', limit=", None, "async def search(query: str"),
        ("tools.fetch('a')", 3, "# Bindings are async"),
        ("print", None, "print("),
        ("ToolError", None, "ToolError(message"),
        ("display", None, "display(*objs)"),
    ],
)
def test_inspect(code: str, pos: int | None, head: str) -> None:
    reply = inspect_code(code, pos, NAMESPACES)
    assert reply["found"] is True
    assert reply["data"]["text/plain"].startswith(head)


def test_inspect_shows_the_docstring_and_misses_cleanly() -> None:
    text = inspect_code("tools.compute", None, NAMESPACES)["data"]["text/plain"]
    assert "Aggregate values with op" in text  # reST literals shown plainly
    assert inspect_code("nothing_here", None, NAMESPACES) == {
        "status": "ok",
        "found": False,
        "data": {},
        "metadata": {},
    }


@pytest.mark.parametrize(
    ("code", "status", "indent"),
    [
        ("1", "complete", None),
        ("await tools.search('x')\nreturn 3", "complete", None),
        ("def f(x):\n  return x*2\n\n\n", "complete", None),
        ("print('''hello", "incomplete", ""),
        ("def f(x):\n  x*2", "incomplete", "  "),
        ("for x in y:", "incomplete", "    "),
        ("x = (1,\n", "incomplete", ""),
        ("import = 7q", "invalid", None),
        ("x = )", "invalid", None),
    ],
)
def test_is_complete(code: str, status: str, indent: str | None) -> None:
    reply = is_complete(code)
    assert reply["status"] == status
    assert reply.get("indent") == indent


# -- announced signatures and forwarded calls --------------------------------------------------


def test_signature_from_spec_keeps_the_announced_text() -> None:
    def search(query: str, *, limit: int = 3, **extra: Any) -> list[str]:
        return []

    spec = BindingRegistry({"t": {"search": search}}).lookup("t", "search")
    assert spec is not None
    sig = signature_from_spec(spec.spec())
    assert str(sig) == spec.signature_text  # what the client's registry shows
    assert "limit" in str(sig) and "= 3" in str(sig)
    assert sig.bind("x", limit=2, more=1)
    with pytest.raises(TypeError):
        sig.bind("x", 2)


def test_signature_from_spec_falls_back_to_params() -> None:
    spec = {"params": [["a", "POSITIONAL_OR_KEYWORD", True]], "signature": "(a=<object>)"}
    assert str(signature_from_spec(spec)) == "(a=...)"
    lying = {"params": [["a", "POSITIONAL_OR_KEYWORD", False]], "signature": "(b)"}
    assert str(signature_from_spec(lying)) == "(a)"
    with pytest.raises(ValueError, match="kind"):
        signature_from_spec({"params": [["a", "SOMETIMES", False]]})
    with pytest.raises(ValueError, match="params"):
        signature_from_spec({})


def test_client_bindings_forward_and_fail() -> None:
    sent: list[dict[str, Any]] = []

    async def main() -> None:
        client = ClientBindings(
            "c1",
            {
                "agent": {
                    "ask": {
                        "params": [["q", "POSITIONAL_OR_KEYWORD", False]],
                        "signature": "(q: str) -> str",
                        "doc": "Ask.",
                    }
                }
            },
            sent.append,
        )
        ask = client.namespaces["agent"]["ask"]
        assert str(inspect.signature(ask)) == "(q: str) -> str" and ask.__doc__ == "Ask."
        task = asyncio.ensure_future(ask("why"))
        await asyncio.sleep(0)
        call = sent[-1]
        assert call == {
            "method": "call",
            "call_id": "1",
            "namespace": "agent",
            "name": "ask",
            "args": ["why"],
            "kwargs": {},
        }
        client.on_message({"method": "reply", "call_id": "1", "ok": True, "value": "because"})
        assert await task == "because"

        task = asyncio.ensure_future(ask("how"))
        await asyncio.sleep(0)
        client.on_message(
            {"method": "reply", "call_id": "2", "ok": False, "ename": "KeyError", "evalue": "no"}
        )
        with pytest.raises(Exception) as info:
            await task
        assert type(info.value).__name__ == "KeyError" and str(info.value) == "no"

        task = asyncio.ensure_future(ask("cancel me"))
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert sent[-1] == {"method": "cancel", "call_id": "3"}

        task = asyncio.ensure_future(ask("left waiting"))
        await asyncio.sleep(0)
        client.close("the client went away")
        with pytest.raises(ConnectionError, match="went away"):
            await task
        with pytest.raises(ConnectionError):
            await ask("after close")
        assert client.pending == 0

    asyncio.run(main())


def test_remote_error_names() -> None:
    err = remote_error("ToolTimeout", "too slow")
    assert type(err).__name__ == "ToolTimeout" and str(err) == "too slow"
    assert type(remote_error("ToolTimeout", "x")) is type(err)
    assert type(remote_error("", "x")).__name__ == "RemoteCallError"


def test_client_bindings_refuse_bad_announcements() -> None:
    for bad in (None, {}, {"ns": []}, {"ns": {"f": "spec"}}):
        with pytest.raises(ValueError):
            ClientBindings("c", bad, lambda data: None)


# -- kernelspec and command line -----------------------------------------------------------------


def test_kernel_json() -> None:
    spec = kernel_json(bindings="m:B", timeout=5, interrupt_mode="message")
    assert spec["argv"] == [
        sys.executable,
        "-I",  # isolated: nothing from the notebook's directory is imported (security.md)
        "-m",
        "kernelgate.cli",
        "kernel",
        "run",
        "-f",
        "{connection_file}",
        "--bindings",
        "m:B",
        "--timeout",
        "5.0",
    ]
    assert spec["language"] == "python" and spec["interrupt_mode"] == "message"
    # JupyterLab shows its debugger only for a kernelspec whose metadata says so.
    assert spec["metadata"] == {"debugger": True, "kernelgate": {"bindings": "m:B"}}
    with pytest.raises(ValueError):
        kernel_json(interrupt_mode="sometimes")


def test_cli_install_and_kernelspec_list(tmp_path: pathlib.Path) -> None:
    code = kernelgate_main(
        [
            "kernel",
            "install",
            "--prefix",
            str(tmp_path),
            "--name",
            "kg-cli-test",
            "--display-name",
            "KG test",
            "--bindings",
            "kernelgate.demo:BINDINGS",
        ]
    )
    assert code == 0
    path = tmp_path / "share" / "jupyter" / "kernels" / "kg-cli-test" / "kernel.json"
    spec = json.loads(path.read_text())
    assert spec["display_name"] == "KG test"
    assert spec["argv"][-2:] == ["--bindings", "kernelgate.demo:BINDINGS"]
    env = {**os.environ, "JUPYTER_PATH": str(tmp_path / "share" / "jupyter")}
    listed = subprocess.run(
        [sys.executable, "-m", "jupyter", "kernelspec", "list", "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=30,
    )
    assert listed.returncode == 0, listed.stderr
    assert "kg-cli-test" in json.loads(listed.stdout)["kernelspecs"]


def test_cli_misuse(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert kernelgate_main(["kernel"]) == 2
    assert "install, uninstall, list or run" in capsys.readouterr().err
    bad = ["kernel", "install", "--prefix", str(tmp_path), "--bindings", "no_such_module:X"]
    assert kernelgate_main(bad) == 2
    assert "cannot import" in capsys.readouterr().err
    assert kernelgate_main(["kernel", "install", "--prefix", str(tmp_path), "--name", "a b"]) == 2
    assert "kernel name" in capsys.readouterr().err
    missing = ["kernel", "run", "-f", str(tmp_path / "none.json")]
    assert kernelgate_main(missing) == 2
    assert "connection file" in capsys.readouterr().err


# -- a remote run, decoded from the kernel's messages ------------------------------------------


def _remote_run(reply_metadata: Any, status: str = "ok") -> Any:
    from kernelgate.jupyter.remoterun import RemoteRun

    run = RemoteRun("print('hi')\n6 * 7", None, None)
    run.on_iopub({"msg_type": "stream", "content": {"name": "stdout", "text": "hi\n"}})
    data = {"text/plain": "42", "application/json": 42}
    content = {"execution_count": 1, "data": data, "metadata": {}}
    run.on_iopub({"msg_type": "execute_result", "content": content})
    run.on_reply({"content": {"status": status}, "metadata": reply_metadata})
    return run.result()


def test_a_remote_run_takes_its_facts_from_the_reply_s_run_metadata() -> None:
    from kernelgate.model.codec import encode_metadata
    from kernelgate.model.result import RunResult

    facts = RunResult(
        "ok",
        run_id="r1",
        started_at="2026-01-01T00:00:00Z",
        duration_s=0.25,
        exit_code=0,
        interpreter="/usr/bin/python3",
        limits={"wall_seconds": 5.0},
        bindings={"tools": {"search": "(query: str)"}},
        isolation="process",
        usage={"calls": 0},
        language="typescript",
    )
    result = _remote_run({"kernelgate": encode_metadata(facts), "status": "ok"})
    assert (result.status, result.value, result.stdout) == ("ok", 42, "hi\n")
    assert result.program == "print('hi')\n6 * 7"
    for name in ("run_id", "started_at", "duration_s", "exit_code", "interpreter", "limits",
                 "bindings", "isolation", "usage", "language"):  # fmt: skip
        assert getattr(result, name) == getattr(facts, name), name


@pytest.mark.parametrize(
    "metadata, phrase",
    [
        ({}, "carries no kernelgate run metadata"),
        ({"kernelgate": {"status": "fine"}}, "metadata.kernelgate.status is 'fine'"),
        ({"kernelgate": {"status": "ok", "duration_s": "1"}}, "duration_s is '1'"),
        ({"kernelgate": []}, "metadata.kernelgate is list"),
        # A language kernelgate does not run is no run of a kernelgate kernel.
        ({"kernelgate": {"status": "ok", "language": "ruby"}}, "language is 'ruby'"),
    ],
)
def test_a_remote_run_with_bad_run_metadata_ends_protocol(metadata: Any, phrase: str) -> None:
    result = _remote_run(metadata)
    assert result.status == "protocol" and result.error is not None
    assert result.error.ename == "ProtocolError" and phrase in result.error.evalue
    assert result.stdout == "hi\n" and result.value is None  # what arrived is kept
