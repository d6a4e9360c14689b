"""The TypeScript kernel as its users meet it: a notebook executed by nbclient (and
papermill), two RemoteGateway clients with their own bindings on one kernel, the
debugger refused, setup and replay cells, and nothing left running after shutdown (the
kernel, a cell's child, the transformer's helper process)."""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import signal
from typing import Any

import nbformat
import pytest
from jupyter_client.asynchronous.client import AsyncKernelClient
from jupyter_client.manager import AsyncKernelManager, start_new_kernel
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError
from nbformat.v4 import new_code_cell, new_notebook

from kernelgate import RemoteGateway
from kernelgate.cli import main as kernelgate_main
from kernelgate.notebooks import load_run
from kernelgate.wire.messages import CALL_MIME
from tests.procs import descendants, pid_alive

from .conftest import NEEDS_NODE
from .helpers import TS_KERNEL_NAME, execute, wait_gone

pytestmark = NEEDS_NODE

_KERNELSPEC = {
    "name": TS_KERNEL_NAME,
    "display_name": "kernelgate (TypeScript)",
    "language": "typescript",
}


def _notebook() -> nbformat.NotebookNode:
    return new_notebook(
        cells=[
            new_code_cell("console.log('hello from a TypeScript cell')"),
            new_code_cell("//| setup\nconst query: string = 'messages';"),
            new_code_cell(
                "const hits = await tools.search(query);\n"
                "console.log(hits.map((h: { id: number }) => h.id));\n"
                "hits.length"
            ),
            new_code_cell("const f = (o: any) => o.a.b;\nf({})"),
        ],
        metadata={"kernelspec": dict(_KERNELSPEC)},
    )


@pytest.mark.timeout(180)
def test_nbclient_executes_a_typescript_notebook(tmp_path: pathlib.Path) -> None:
    nb = _notebook()
    client = NotebookClient(
        nb,
        kernel_name=TS_KERNEL_NAME,
        timeout=60,
        allow_errors=True,
        resources={"metadata": {"path": str(tmp_path)}},
    )
    client.execute()
    cells = nb.cells
    assert [c.execution_count for c in cells] == [1, 2, 3, 4]
    assert nb.metadata["language_info"]["name"] == "typescript"
    assert cells[0].outputs[0].text == "hello from a TypeScript cell\n"
    # The setup cell is kept, not run: its note only.
    assert "setup cell [2]" in cells[1].outputs[0].data["text/plain"]
    kinds = [o.output_type for o in cells[2].outputs]
    assert kinds == ["display_data", "stream", "execute_result", "display_data"]
    call = cells[2].outputs[0].data[CALL_MIME]
    assert (call["namespace"], call["name"], call["args"], call["ok"]) == (
        "tools",
        "search",
        ["messages"],
        True,
    )
    assert cells[2].outputs[2].data["text/plain"] == "2"
    assert cells[2].outputs[3].metadata["kernelgate"]["role"] == "run"
    # The failing cell: Node's error, its stack named by the cell, and its run record.
    error = cells[3].outputs[0]
    assert error.output_type == "error" and error.ename == "TypeError"
    shown = "\n".join(error.traceback)
    assert "Cell In[4]:1:" in shown and "Cell In[4]:2:" in shown and "<program>" not in shown
    assert cells[3].outputs[1].metadata["kernelgate"]["status"] == "exception"
    # Saved, the notebook is a recording: each executed cell's run reads back, in TypeScript.
    path = tmp_path / "ran.ipynb"
    nbformat.write(nb, str(path))
    run = load_run(str(path), 3)
    assert run.language == "typescript" and run.value == 2 and len(run.calls) == 1
    assert "//| setup" in run.program and run.program.endswith("hits.length")


@pytest.mark.timeout(180)
def test_nbclient_stops_at_a_failing_cell() -> None:
    nb = _notebook()
    with pytest.raises(CellExecutionError) as failed:
        NotebookClient(nb, kernel_name=TS_KERNEL_NAME, timeout=60).execute()
    assert "TypeError" in str(failed.value)


@pytest.mark.timeout(180)
def test_papermill_executes_a_typescript_notebook(tmp_path: pathlib.Path) -> None:
    papermill = pytest.importorskip("papermill")
    nb = _notebook()
    nb.cells = nb.cells[:3]
    source, out = tmp_path / "in.ipynb", tmp_path / "out.ipynb"
    nbformat.write(nb, str(source))
    papermill.execute_notebook(
        str(source), str(out), kernel_name=TS_KERNEL_NAME, progress_bar=False
    )
    done = nbformat.read(str(out), as_version=4)
    assert [o.output_type for o in done.cells[2].outputs][2] == "execute_result"
    assert load_run(str(out), 3).value == 2


@pytest.mark.timeout(180)
def test_replay_cell_of_a_typescript_recording(tmp_path: pathlib.Path) -> None:
    """A ``//| replay`` cell in the TypeScript kernel runs a TypeScript recording's program
    against its answers (no live call), on the kernel's runtime."""
    nb = _notebook()
    nb.cells = nb.cells[1:3]
    NotebookClient(
        nb, kernel_name=TS_KERNEL_NAME, timeout=60, resources={"metadata": {"path": str(tmp_path)}}
    ).execute()
    nbformat.write(nb, str(tmp_path / "rec.ipynb"))
    km, kc = start_new_kernel(kernel_name=TS_KERNEL_NAME, startup_timeout=60, cwd=str(tmp_path))
    try:
        cell = execute(kc, "//| replay rec.ipynb --cell 2\n", timeout=60)
        assert cell.status == "ok", cell.reply
        replayed = [
            m
            for m in cell.outputs("display_data")
            if (m["content"].get("metadata") or {}).get("kernelgate", {}).get("role") == "replay"
        ]
        assert replayed and "MATCHES" in json.dumps(replayed[0]["content"]["data"])
        # A Python marker is no marker here: '#|' is not TypeScript, and says so.
        wrong = execute(kc, "#| replay rec.ipynb --cell 2\n1", timeout=60)
        assert wrong.status == "error"
        assert wrong.reply is not None and wrong.reply["content"]["ename"] == "SyntaxError"
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def _with_kernel(body: Any, pid: list[int]) -> None:
    async def main() -> None:
        km = AsyncKernelManager(kernel_name=TS_KERNEL_NAME)
        await km.start_kernel()
        pid.append(_kernel_pid(km))
        # The second client has a Session of its own (km.client() would share the
        # first's, whose replay check then drops iopub messages the other saw first).
        other = AsyncKernelClient()
        other.load_connection_info(km.get_connection_info())
        clients = [km.client(), other]
        for kc in clients:
            kc.start_channels()
        try:
            await asyncio.wait_for(body(*clients), 90)
        finally:
            for kc in clients:
                kc.stop_channels()
            await km.shutdown_kernel()
        assert not await km.is_alive()

    asyncio.run(main())


@pytest.mark.timeout(180)
def test_two_clients_with_their_own_bindings_on_one_typescript_kernel() -> None:
    async def price(item: str, quantity: int = 1) -> dict[str, Any]:
        """The price of some items."""
        return {"item": item, "total": 3 * quantity}

    async def weather(city: str) -> str:
        return f"sunny in {city}"

    async def body(first: Any, second: Any) -> None:
        async with (
            RemoteGateway(first, bindings={"price": price}, namespace="shop") as a,
            RemoteGateway(second, bindings={"weather": weather}, namespace="sky") as b,
        ):
            ra, rb = await asyncio.gather(
                a.run(
                    "const [p, hits] = await Promise.all([shop.price('tea', {quantity: 2}), "
                    "tools.search('messages')]);\nreturn {total: p.total, hits: hits.length};"
                ),
                b.run("const w: string = await sky.weather('Oslo');\nw"),
            )
            assert ra.status == "ok", ra.error
            assert ra.value == {"total": 6, "hits": 2}
            assert rb.status == "ok", rb.error
            assert rb.value == "sunny in Oslo"
            shop_call = next(c for c in ra.calls if c.namespace == "shop")
            assert shop_call.kwargs == {"quantity": 2}
            # Each client's bindings are its own: the other's namespace is not defined.
            other = await b.run("await shop.price('tea')")
            assert other.status == "exception"
            assert other.error is not None and other.error.ename == "ReferenceError"
            described = a.describe()
            assert "declare const shop" in described and "price(item: string" in described
            # Three gateways (the kernel's, one per client) ran programs: one runtime, so
            # one transformer helper in the kernel, not one per client.
            assert len(_helpers(kernel_pid[0])) == 1

    kernel_pid: list[int] = []
    _with_kernel(body, kernel_pid)


def _kernel_pid(km: Any) -> int:
    pid = km.provisioner.pid
    assert isinstance(pid, int) and pid_alive(pid)
    return pid


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _helpers(kernel_pid: int) -> list[int]:
    """The kernel's transformer helpers (``node .../helper.js``)."""
    return [p for p in descendants(kernel_pid) if "helper.js" in _cmdline(p)]


@pytest.mark.timeout(180)
def test_shutdown_leaves_no_kernel_child_or_transformer_helper() -> None:
    km, kc = start_new_kernel(kernel_name=TS_KERNEL_NAME, startup_timeout=60)
    left: set[int] = set()
    try:
        kernel_pid = _kernel_pid(km)
        assert execute(kc, "const x: number = 1;\nx + 1", timeout=60).status == "ok"
        # A client's bindings gateway runs on the kernel's one runtime: still one helper.
        assert len(_helpers(kernel_pid)) == 1, [(p, _cmdline(p)) for p in descendants(kernel_pid)]
        # Shut down while a cell's Node child is busy.
        msg_id = kc.execute("console.log('started');\nwhile (true) {}")
        while True:
            msg = kc.get_iopub_msg(timeout=60)
            if (
                msg["parent_header"].get("msg_id") == msg_id
                and msg["msg_type"] == "stream"
                and "started" in msg["content"]["text"]
            ):
                break
        left = descendants(kernel_pid) | {kernel_pid}
        assert len(left) >= 3  # the kernel, the helper, the cell's child
    finally:
        kc.stop_channels()
        km.shutdown_kernel()
    still = wait_gone(left, timeout=20)
    assert not still, [(p, _cmdline(p)) for p in still]


@pytest.mark.timeout(120)
def test_debug_request_is_refused_clearly() -> None:
    km, kc = start_new_kernel(kernel_name=TS_KERNEL_NAME, startup_timeout=60)
    try:
        msg = kc.session.msg(
            "debug_request", {"type": "request", "seq": 1, "command": "initialize", "arguments": {}}
        )
        kc.control_channel.send(msg)
        while True:
            reply = kc.get_control_msg(timeout=30)
            if reply["parent_header"].get("msg_id") == msg["header"]["msg_id"]:
                break
        content = reply["content"]
        assert reply["msg_type"] == "debug_reply"
        assert content["success"] is False and content["command"] == "initialize"
        assert "TypeScript" in content["message"] and "no debugger" in content["message"]
        # The kernel goes on serving cells.
        assert execute(kc, "1 + 1", timeout=60).status == "ok"
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


@pytest.mark.timeout(120)
def test_install_and_list_say_the_language(tmp_path: pathlib.Path, capsys: Any) -> None:
    prefix = tmp_path / "p"
    code = kernelgate_main(
        ["kernel", "install", "--prefix", str(prefix), "--language", "javascript"]
    )
    assert code == 0
    spec_dir = prefix / "share" / "jupyter" / "kernels" / "kernelgate-javascript"
    spec = json.loads((spec_dir / "kernel.json").read_text())
    assert spec["display_name"] == "kernelgate (JavaScript)"
    assert spec["language"] == "javascript"
    assert spec["metadata"]["debugger"] is False
    argv = spec["argv"]
    assert argv[argv.index("--language") + 1] == "javascript"
    node = argv[argv.index("--node") + 1]
    assert os.path.isabs(node) and os.access(node, os.X_OK)
    saved = os.environ.get("JUPYTER_PATH")
    os.environ["JUPYTER_PATH"] = str(prefix / "share" / "jupyter")
    try:
        capsys.readouterr()
        assert kernelgate_main(["kernel", "list", "--json"]) == 0
        listed = {k["name"]: k for k in json.loads(capsys.readouterr().out)}
        assert listed["kernelgate-javascript"]["language"] == "javascript"
        assert kernelgate_main(["kernel", "list"]) == 0
        line = next(x for x in capsys.readouterr().out.splitlines() if "kernelgate-javascript" in x)
        assert "javascript" in line.split("kernelgate-javascript", 1)[1]
        # It serves JavaScript cells: plain JavaScript runs, TypeScript's types do not.
        km, kc = start_new_kernel(kernel_name="kernelgate-javascript", startup_timeout=60)
        try:
            info = kc.kernel_info(reply=True, timeout=30)["content"]
            assert info["language_info"]["name"] == "javascript" and info["debugger"] is False
            ok = execute(kc, "const xs = [1, 2].map((x) => x * 2);\nxs.length", timeout=60)
            assert ok.status == "ok"
            assert ok.outputs("execute_result")[0]["content"]["data"]["text/plain"] == "2"
            typed = execute(kc, "const n: number = 1;\nn", timeout=60)
            assert typed.status == "error" and typed.reply is not None
            assert typed.reply["content"]["ename"] == "SyntaxError"
        finally:
            kc.stop_channels()
            km.shutdown_kernel(now=True)
    finally:
        if saved is None:
            os.environ.pop("JUPYTER_PATH", None)
        else:
            os.environ["JUPYTER_PATH"] = saved


def test_install_refuses_a_missing_node(tmp_path: pathlib.Path, capsys: Any) -> None:
    missing = str(tmp_path / "no-such-node")
    code = kernelgate_main(
        [
            "kernel",
            "install",
            "--prefix",
            str(tmp_path),
            "--language",
            "typescript",
            "--node",
            missing,
        ]
    )
    assert code != 0
    err = capsys.readouterr().err
    assert missing in err and "nothing was installed" in err
    assert not (tmp_path / "share").exists()


def test_node_is_refused_for_a_python_kernel(tmp_path: pathlib.Path, capsys: Any) -> None:
    code = kernelgate_main(
        ["kernel", "install", "--prefix", str(tmp_path), "--node", "/usr/bin/node"]
    )
    assert code != 0
    assert "--node is for --language typescript or javascript" in capsys.readouterr().err


_COLOURS = ("\x1b[0;31m", "\x1b[0;32m", "\x1b[0m")


@pytest.mark.timeout(120)
def test_a_hostile_typescript_error_reaches_the_frontend_inert() -> None:
    """A program's error name, message and stack are shown as text: the only escape
    sequences in the error a front end draws are the kernel's own colours."""
    program = (
        "const e = new Error('\\x1b[2J\\x1b]52;c;cHduZWQ=\\x07\\x9b31m');\n"
        "e.name = 'Bad\\x1b[8m';\n"
        "throw e;"
    )
    km, kc = start_new_kernel(kernel_name=TS_KERNEL_NAME, startup_timeout=60)
    try:
        cell = execute(kc, program, timeout=60)
        assert cell.status == "error"
        shown = [m["content"] for m in cell.outputs("error")]
        assert shown
        assert cell.reply is not None
        for content in [*shown, cell.reply["content"]]:
            for line in content["traceback"]:
                for colour in _COLOURS:
                    line = line.replace(colour, "")
                assert not any(c in line for c in "\x1b\x07\x9b"), line
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


@pytest.mark.timeout(120)
def test_the_helper_goes_when_the_kernel_is_killed() -> None:
    """SIGKILL gives the kernel no chance to close its runtime: the transformer helper
    still ends (its stdin, the kernel's pipe, closes)."""
    km, kc = start_new_kernel(kernel_name=TS_KERNEL_NAME, startup_timeout=60)
    try:
        kernel_pid = _kernel_pid(km)
        assert execute(kc, "const a: number = 2;\na * 2", timeout=60).status == "ok"
        helpers = set(_helpers(kernel_pid))
        assert len(helpers) == 1
        os.kill(kernel_pid, signal.SIGKILL)
        still = wait_gone(helpers, timeout=20)
        assert not still, [(p, _cmdline(p)) for p in still]
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


@pytest.mark.timeout(120)
def test_a_kernel_whose_node_is_gone_serves_and_refuses_cells(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Node removed after the install: the kernel still starts (one that exits is
    restarted in a loop), says TypeScript, and every cell's error names what is missing."""
    from kernelgate.jupyter.spec import kernel_json

    gone = str(tmp_path / "gone" / "node")
    spec_dir = tmp_path / "share" / "jupyter" / "kernels" / "kg-ts-no-node"
    spec_dir.mkdir(parents=True)
    spec = kernel_json(language="typescript", node=gone)
    (spec_dir / "kernel.json").write_text(json.dumps(spec))
    monkeypatch.setenv(
        "JUPYTER_PATH",
        os.pathsep.join([str(tmp_path / "share" / "jupyter"), os.environ["JUPYTER_PATH"]]),
    )
    km, kc = start_new_kernel(kernel_name="kg-ts-no-node", startup_timeout=60)
    try:
        info = kc.kernel_info(reply=True, timeout=30)["content"]
        assert info["language_info"]["name"] == "typescript" and info["debugger"] is False
        cell = execute(kc, "1 + 1", timeout=60)
        assert cell.status == "error" and cell.reply is not None
        assert cell.reply["content"]["ename"] == "NodeUnavailable"
        assert gone in cell.reply["content"]["evalue"]
        assert km.is_alive()
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
