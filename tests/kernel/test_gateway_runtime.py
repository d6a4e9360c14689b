"""GatewayRuntime against a real Jupyter Kernel Gateway on loopback that requires a token.

Programs run in kernelgate kernels the gateway starts; their client bindings are answered
by this test process over the gateway's websocket. Several runs and two runtimes at once,
a kernel killed mid-run, a websocket dropped mid-run, a missing or wrong token: each ends
in a result or a clear error, and after close the gateway has no kernel and no process of
theirs is left.
"""

from __future__ import annotations

import asyncio
import http.server
import json
import os
import secrets
import signal
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from tornado.httpclient import HTTPRequest
from tornado.websocket import websocket_connect

from kernelgate import CodeGateway, RunResult
from kernelgate.jupyter import GatewayError, GatewayRuntime
from kernelgate.jupyter.gatewayrest import GatewayEndpoint
from kernelgate.jupyter.wsclient import _decode
from tests.procs import descendants, processes_with

from .helpers import KERNEL_NAME, wait_gone
from .kernelgateway import KernelGatewayServer, kernel_gateway

pytestmark = pytest.mark.timeout(120)

TOKEN = secrets.token_urlsafe(24)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KernelGatewayServer]:
    with kernel_gateway(tmp_path_factory.mktemp("gateway-runtime"), token=TOKEN) as gw:
        yield gw


def kernel_pids(kernel_id: str) -> list[int]:
    """The kernel process of ``kernel_id`` (its connection file is named after the id)."""
    return processes_with(f"kernel-{kernel_id}.json")


def assert_nothing_left(server: KernelGatewayServer, kernel_ids: set[str]) -> None:
    """No kernel at the gateway, no process of any of ``kernel_ids``, no gateway child."""
    assert server.kernels() == []
    assert kernel_ids
    pids = {p for k in kernel_ids for p in kernel_pids(k)} | descendants(server.proc.pid)
    assert wait_gone(pids) == set()


def mul(a: int, b: int) -> int:
    """Multiply, answered by the test process."""
    return a * b


def test_a_program_calls_bindings_answered_here(server: KernelGatewayServer) -> None:
    async def main() -> tuple[list[RunResult], str, set[str]]:
        async with GatewayRuntime(
            server.url, KERNEL_NAME, namespaces={"mine": {"mul": mul}}, auth_token=TOKEN
        ) as gw:
            assert isinstance(gw, CodeGateway)
            ok = await gw.run(
                "x = await tools.compute('sum', [2, 3])\nprint('x is', x)\nawait mine.mul(x, 10)"
            )
            failed = await gw.run("await mine.mul(2, 3)\n1 / 0")
            refused = await gw.run("await mine.mul('not json', float('nan'))")
            ids = set(gw.kernel_ids)
            assert [k["id"] for k in server.kernels()] == list(ids)
            return [ok, failed, refused], gw.describe(), ids

    (ok, failed, refused), stub, ids = asyncio.run(main())
    assert ok.ok, ok.message
    assert (ok.stdout, ok.value) == ("x is 5.0\n", 50.0)
    assert [(c.namespace, c.name) for c in ok.calls] == [("tools", "compute"), ("mine", "mul")]
    assert failed.status == "exception" and failed.error is not None
    assert failed.error.ename == "ZeroDivisionError"
    assert refused.status == "exception", refused
    assert "class mine:" in stub and "async def compute(" in stub
    assert_nothing_left(server, ids)


def test_run_sync_keeps_its_kernel_between_calls_and_close_shuts_it_down(
    server: KernelGatewayServer,
) -> None:
    gw = GatewayRuntime(server.url, bindings={"mul": mul}, auth_token=TOKEN)
    first = gw.run_sync("await tools.mul(6, 7)")
    ids = set(gw.kernel_ids)
    second = gw.run_sync("await tools.mul(2, 3)")
    assert (first.value, second.value) == (42, 6), (first, second)
    assert set(gw.kernel_ids) == ids  # the same kernel, reconnected to
    gw.close()
    assert_nothing_left(server, ids)
    with pytest.raises(RuntimeError, match="closed"):
        gw.run_sync("1")


@pytest.mark.timeout(180)
def test_runs_spread_over_the_pool_and_two_runtimes_at_once(server: KernelGatewayServer) -> None:
    """Three runs in flight at once (two kernels of one runtime, one of another): each
    waits in a binding until all three have arrived, which only runs in parallel can do."""
    arrived = 0
    everyone = asyncio.Event()

    async def meet(who: int) -> int:
        nonlocal arrived
        arrived += 1
        if arrived % 3 == 0:
            everyone.set()
        await asyncio.wait_for(everyone.wait(), 60)
        return who

    async def main() -> tuple[list[RunResult], set[str], list[int]]:
        async with (
            GatewayRuntime(server.url, bindings={"meet": meet}, auth_token=TOKEN, pool_size=2) as a,
            GatewayRuntime(server.url, bindings={"meet": meet}, auth_token=TOKEN) as b,
        ):
            results = await asyncio.gather(
                a.run("await tools.meet(1)"),
                a.run("await tools.meet(2)"),
                b.run("await tools.meet(3)"),
            )
            ids = {*a.kernel_ids, *b.kernel_ids}
            assert len(ids) == 3
            return list(results), ids, [k.runs for k in a.kernels]

    results, ids, runs = asyncio.run(main())
    assert [r.value for r in results] == [1, 2, 3], results
    assert runs == [1, 1]  # one run in each of the pool's kernels
    assert_nothing_left(server, ids)


def test_a_kernel_killed_mid_run_gives_worker_exit_and_is_replaced(
    server: KernelGatewayServer,
) -> None:
    """The kernel is SIGKILLed while its run sleeps: the run ends ``worker_exit`` (the
    gateway restarts the kernel, which the runtime notices), the next run gets a fresh one."""
    box: list[GatewayRuntime] = []
    killed: list[int] = []
    below: set[int] = set()

    def started() -> None:
        (kid,) = box[0].kernel_ids
        pids = kernel_pids(kid)
        assert len(pids) == 1, pids
        below.update(descendants(pids[0]))  # the run's own process among them
        os.kill(pids[0], signal.SIGKILL)
        killed.append(pids[0])

    gw = GatewayRuntime(server.url, bindings={"mul": mul, "started": started}, auth_token=TOKEN)
    box.append(gw)

    async def main() -> tuple[RunResult, RunResult, set[str]]:
        async with gw:
            first_ids = set(gw.kernel_ids)
            died = await gw.run("await tools.started()\nimport time\ntime.sleep(60)")
            after = await gw.run("await tools.mul(3, 4)")
            return died, after, first_ids | set(gw.kernel_ids)

    died, after, ids = asyncio.run(main())
    assert killed
    assert died.status == "worker_exit" and died.error is not None, died
    assert "died" in died.error.evalue, died.error
    assert after.value == 12, after
    assert gw.replaced == 1 and len(ids) == 2
    assert wait_gone(below) == set()  # the killed kernel's run did not outlive it
    assert_nothing_left(server, ids)


def test_a_websocket_dropped_mid_run_reconnects_and_the_run_completes(
    server: KernelGatewayServer,
) -> None:
    """The connection drops while the kernel waits for a binding's answer: the answer is
    sent once the websocket is back, and what the kernel sent meanwhile is replayed."""
    box: list[GatewayRuntime] = []

    def drop() -> str:
        client = box[0].kernels[0].client
        assert client is not None
        client.drop_connection()
        return "dropped"

    gw = GatewayRuntime(server.url, bindings={"drop": drop}, auth_token=TOKEN)
    box.append(gw)

    async def main() -> tuple[RunResult, int, set[str]]:
        async with gw:
            result = await gw.run(
                "print('before')\nr = await tools.drop()\nprint(r)\nprint('after')\nreturn 7"
            )
            client = gw.kernels[0].client
            assert client is not None
            return result, client.reconnects, set(gw.kernel_ids)

    result, reconnects, ids = asyncio.run(main())
    assert result.ok, result
    assert (result.stdout, result.value) == ("before\ndropped\nafter\n", 7)
    assert reconnects == 1
    assert_nothing_left(server, ids)


@pytest.mark.parametrize("token", [None, "not-" + TOKEN])
def test_a_missing_or_wrong_token_is_refused_clearly(
    server: KernelGatewayServer, token: str | None
) -> None:
    gw = GatewayRuntime(server.url, auth_token=token)
    with pytest.raises(GatewayError) as caught:
        gw.run_sync("1")
    message = str(caught.value)
    assert server.url in message and "HTTP 401" in message and "auth_token=" in message
    assert ("no auth token was sent" if token is None else "the auth token is wrong") in message
    assert TOKEN not in message
    gw.close()
    assert server.kernels() == []


def test_an_unknown_kernel_name_is_refused_clearly(server: KernelGatewayServer) -> None:
    gw = GatewayRuntime(server.url, "no-such-kernel", auth_token=TOKEN)
    with pytest.raises(GatewayError, match="no-such-kernel"):
        gw.run_sync("1")
    gw.close()
    assert server.kernels() == []


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="pool_size"):
        GatewayRuntime("http://127.0.0.1:1", pool_size=0)
    with pytest.raises(ValueError, match="http://"):
        GatewayRuntime("127.0.0.1:8888")
    with pytest.raises(ValueError, match="url"):
        GatewayRuntime([])


def test_an_unreachable_gateway_is_an_error_saying_so() -> None:
    gw = GatewayRuntime(f"http://127.0.0.1:{_closed_port()}")
    with pytest.raises(GatewayError, match="could not reach the kernel gateway"):
        gw.run_sync("1")
    gw.close()


def _closed_port() -> int:
    from .kernelgateway import free_port

    return free_port()


def test_another_client_cannot_take_over_the_runtimes_websocket(
    server: KernelGatewayServer,
) -> None:
    """Anyone with the gateway's token can connect to the kernel's channels and read its
    iopub, which shows the session of every request. A connection under the runtime's
    websocket session id would replace the runtime's (jupyter_server drops the "stale"
    one), and get its shell replies and what the gateway buffered for it: that id must
    not be one iopub shows."""
    gw = GatewayRuntime(server.url, bindings={"mul": mul}, auth_token=TOKEN)

    async def main() -> tuple[set[str], list[dict[str, Any]], RunResult, int, set[str]]:
        async with gw:
            (kid,) = gw.kernel_ids
            endpoint = GatewayEndpoint(server.url, TOKEN)
            spy = await websocket_connect(
                HTTPRequest(endpoint.ws_url(kid, "spy"), headers=endpoint.headers())
            )
            first = await gw.run("await tools.mul(2, 3)")
            assert first.ok, first
            seen: set[str] = set()
            while first.value is not None:  # what iopub showed the spy of that run
                raw = await asyncio.wait_for(spy.read_message(), 10)
                assert isinstance(raw, str)
                msg = json.loads(raw)
                seen |= {msg["header"]["session"], msg["parent_header"].get("session", "")}
                if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
                    if msg["parent_header"].get("msg_type") == "execute_request":
                        break
            spy.close()
            taken: list[dict[str, Any]] = []
            thieves = []
            for session in seen - {""}:  # each session iopub showed, as a websocket id
                thief = await websocket_connect(
                    HTTPRequest(endpoint.ws_url(kid, session), headers=endpoint.headers())
                )
                thieves.append(thief)
            second = await gw.run("await tools.mul(4, 5)")
            for thief in thieves:
                thief.close()
                while (raw := await asyncio.wait_for(thief.read_message(), 10)) is not None:
                    msg = json.loads(raw)
                    if msg["channel"] == "shell":
                        taken.append(msg)
            client = gw.kernels[0].client
            assert client is not None
            return seen, taken, second, client.reconnects, {kid}

    seen, taken, second, reconnects, ids = asyncio.run(main())
    assert seen
    assert second.ok and second.value == 20, second
    assert reconnects == 0  # nobody replaced the runtime's connection
    assert taken == []  # and no shell reply of the runtime's went to another client
    assert_nothing_left(server, ids)


def test_a_gateway_that_redirects_is_refused_and_the_token_goes_nowhere_else() -> None:
    """A "gateway" answering with a redirect to another server: a clear error, and the
    other server never sees a request (nor the token)."""
    seen: list[dict[str, str]] = []

    class Elsewhere(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            seen.append(dict(self.headers))
            self.send_response(404)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    elsewhere = http.server.HTTPServer(("127.0.0.1", 0), Elsewhere)
    target = f"http://127.0.0.1:{elsewhere.server_address[1]}"

    class Redirecting(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.send_response(307)
            self.send_header("Location", target + self.path)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    redirecting = http.server.HTTPServer(("127.0.0.1", 0), Redirecting)
    threads = [
        threading.Thread(target=s.serve_forever, daemon=True) for s in (elsewhere, redirecting)
    ]
    for thread in threads:
        thread.start()
    try:
        url = f"http://127.0.0.1:{redirecting.server_address[1]}"
        gw = GatewayRuntime(url, auth_token=TOKEN)
        with pytest.raises(GatewayError, match="HTTP 307"):
            gw.run_sync("1")
        gw.close()
    finally:
        for s in (elsewhere, redirecting):
            s.shutdown()
            s.server_close()
    assert seen == []


@pytest.mark.parametrize(
    "raw",
    [
        "[]",
        "{}",
        '{"header": null, "channel": "iopub"}',
        '{"header": {}, "parent_header": [], "channel": "iopub"}',
        '{"header": {}, "content": "x", "channel": "shell"}',
        b"\x00\x00\x00\x09",  # a binary frame whose offsets are missing
        "not json",
    ],
)
def test_what_is_not_a_jupyter_message_is_dropped_not_raised_on(raw: str | bytes) -> None:
    """A broken or hostile gateway's frames: dropped, so no reader indexes into them."""
    assert _decode(raw) is None


def test_a_jupyter_message_gets_its_missing_parts() -> None:
    msg = _decode('{"header": {"msg_type": "status"}, "channel": "iopub"}')
    assert msg is not None
    assert (msg["msg_type"], msg["parent_header"], msg["content"]) == ("status", {}, {})


def test_interrupt_and_cancel_stop_the_kernels_run_through_the_gateway(
    server: KernelGatewayServer,
) -> None:
    """``interrupt()`` and cancelling ``run()`` reach the kernel over the websocket: the
    300 s sleeps end at once (else the runs after them would wait behind them)."""
    box: list[GatewayRuntime] = []
    counted: list[int] = []
    started = asyncio.Event()

    def interrupt_me() -> None:
        counted.append(box[0].interrupt())

    def cancel_me() -> None:
        started.set()

    gw = GatewayRuntime(
        server.url,
        bindings={"interrupt_me": interrupt_me, "cancel_me": cancel_me},
        auth_token=TOKEN,
    )
    box.append(gw)
    sleeper = "import time\ntime.sleep(300)"

    async def main() -> tuple[RunResult, RunResult, set[str]]:
        async with gw:
            interrupted = await gw.run(f"await tools.interrupt_me()\n{sleeper}")
            task = asyncio.create_task(gw.run(f"await tools.cancel_me()\n{sleeper}"))
            await started.wait()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            after = await gw.run("6 * 7")
            return interrupted, after, set(gw.kernel_ids)

    interrupted, after, ids = asyncio.run(main())
    assert counted == [1]
    assert interrupted.status == "interrupted", interrupted
    assert after.ok and after.value == 42, after
    assert gw.replaced == 0
    assert_nothing_left(server, ids)
