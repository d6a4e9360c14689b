"""Several clients of one kernel: nothing one client sends runs inside another's run, reaches
its bindings or answers its calls (kernelgate issue 18, finding 2).

Each test starts a kernel with two real ``jupyter_client`` clients: the victim, driven by a
real :class:`RemoteGateway`, and an attacker holding the same connection file (so the same
key), which reads iopub as any client can (session ids, comm ids, call ids and message ids
are all visible there) and sends what it likes on shell. After every test, nothing the
attacker saw (iopub, its replies) nor the kernel's log holds the gateway's owner secret.
"""

from __future__ import annotations

import asyncio
import json
import math
import pathlib
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import zmq
import zmq.asyncio
from jupyter_client.asynchronous.client import AsyncKernelClient
from jupyter_client.connect import write_connection_file
from jupyter_client.jsonutil import json_default
from jupyter_client.manager import AsyncKernelManager

from kernelgate import RemoteGateway
from kernelgate.jupyter.comms import call_request_data
from kernelgate.jupyter.server import KernelServer

from .helpers import KERNEL_NAME

pytestmark = pytest.mark.timeout(120)

#: What the victim's binding guards: it must never reach the attacker.
SECRET_VALUE = "the-victim-s-secret-7f3a"


class Attacker:
    """A second client of the kernel: reads every iopub message, sends what it likes."""

    def __init__(self, kc: AsyncKernelClient) -> None:
        self.kc = kc
        self.iopub: list[dict[str, Any]] = []
        self.replies: list[dict[str, Any]] = []
        self._changed = asyncio.Condition()
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        # No heartbeat: a client without a manager would count a heart that has not
        # beaten yet as a dead kernel.
        self.kc.start_channels(hb=False)
        await self.kc.wait_for_ready(timeout=30)
        self._tasks = [
            asyncio.create_task(self._pump(self.kc.get_iopub_msg, self.iopub)),
            asyncio.create_task(self._pump(self.kc.get_shell_msg, self.replies)),
        ]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self.kc.stop_channels()

    async def _pump(self, get: Callable[[], Awaitable[dict[str, Any]]], into: list[Any]) -> None:
        while True:
            msg = await get()
            async with self._changed:
                into.append(msg)
                self._changed.notify_all()

    async def until(
        self, where: list[dict[str, Any]], found: Callable[[dict[str, Any]], bool]
    ) -> dict[str, Any]:
        """The first message of ``where`` (iopub or replies) for which ``found`` holds."""

        def first() -> dict[str, Any] | None:
            return next((m for m in where if found(m)), None)

        async with self._changed:
            await asyncio.wait_for(self._changed.wait_for(lambda: first() is not None), 30)
        msg = first()
        assert msg is not None
        return msg

    def send(
        self,
        msg_type: str,
        content: dict[str, Any],
        *,
        session: str | None = None,
        metadata: dict[str, Any] | None = None,
        channel: str = "shell",
    ) -> str:
        """Send a request, pretending to be ``session`` if given; return its msg_id."""
        msg = self.kc.session.msg(msg_type, content, metadata=metadata)
        if session is not None:
            msg["header"]["session"] = session
        getattr(self.kc, f"{channel}_channel").send(msg)
        return str(msg["header"]["msg_id"])

    async def request(self, msg_type: str, content: dict[str, Any], **kw: Any) -> dict[str, Any]:
        """Send a request and return its reply's content."""
        msg_id = self.send(msg_type, content, **kw)
        reply = await self.until(self.replies, lambda m: _parent(m) == msg_id)
        return dict(reply["content"])

    async def execute(self, code: str, **kw: Any) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """Run a cell; return its reply and its iopub messages."""
        content = {
            "code": code,
            "silent": False,
            "store_history": True,
            "user_expressions": {},
            "allow_stdin": False,
            "stop_on_error": False,
        }
        msg_id = self.send("execute_request", content, **kw)
        reply = await self.until(self.replies, lambda m: _parent(m) == msg_id)
        await self.until(self.iopub, lambda m: _parent(m) == msg_id and _idle(m))
        return reply, [m for m in self.iopub if _parent(m) == msg_id]

    async def sync(self) -> None:
        """Return once the kernel has handled everything this client sent before."""
        await self.request("kernel_info_request", {})

    async def victim_session(self) -> str:
        """The gateway's session id, as iopub shows it (the parent of its comm's ready)."""
        msg = await self.until(
            self.iopub, lambda m: m["parent_header"].get("msg_type") == "comm_open"
        )
        return str(msg["parent_header"]["session"])


def _parent(msg: dict[str, Any]) -> str:
    return str(msg["parent_header"].get("msg_id", ""))


def _idle(msg: dict[str, Any]) -> bool:
    return bool(msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle")


def _stdout(messages: list[dict[str, Any]]) -> str:
    return "".join(m["content"]["text"] for m in messages if m["msg_type"] == "stream")


def allow_nan(server: KernelServer) -> None:
    """Let the kernel's publisher send NaN as JSON does by default (a hostile kernel)."""
    server.channels.session.pack = lambda o: json.dumps(o, default=json_default).encode()


Body = Callable[[AsyncKernelClient, Attacker], Awaitable[None]]


def two_clients(body: Body, tmp_path: pathlib.Path) -> None:
    """A fresh kernel, the victim's client and the attacker's; then the secret check."""
    log = tmp_path / "kernel.log"
    owners: list[str] = []

    async def main() -> None:
        km = AsyncKernelManager(kernel_name=KERNEL_NAME)
        with log.open("wb") as err:
            await km.start_kernel(stderr=err)
        victim = km.client()
        victim.start_channels()
        # A client of its own (km.client() would share the victim's Session, whose
        # replay check then drops every iopub message the other client saw first).
        stranger = AsyncKernelClient()
        stranger.load_connection_info(km.get_connection_info())
        attacker = Attacker(stranger)
        await attacker.start()
        try:
            await asyncio.wait_for(body(victim, attacker), 90)
            owners.extend(_OWNERS)
            # What a client can ask about the others: nothing of the secret either.
            await attacker.request("history_request", {"hist_access_type": "tail", "n": 1000})
            await attacker.request("comm_info_request", {})
        finally:
            _OWNERS.clear()
            await attacker.stop()
            victim.stop_channels()
            await km.shutdown_kernel()
        seen = json.dumps([attacker.iopub, attacker.replies], default=str)
        assert owners, "no RemoteGateway was made"
        for owner in owners:
            assert owner not in seen
            assert owner not in log.read_text(errors="replace")

    asyncio.run(main())


#: Owner secrets of the gateways a test made (read back for the final check).
_OWNERS: list[str] = []


def gateway(kc: AsyncKernelClient, **kw: Any) -> RemoteGateway:
    gw = RemoteGateway(kc, **kw)
    _OWNERS.append(getattr(gw, "_owner", "no owner secret: the old RemoteGateway"))
    return gw


class Guarded:
    """The victim's bindings: a secret, and a question the test answers when it wants."""

    def __init__(self) -> None:
        self.secret_calls: list[tuple[Any, ...]] = []
        self.release = asyncio.Event()
        self.asked = asyncio.Event()

    async def secret(self, *args: Any) -> str:
        """Read the secret."""
        self.secret_calls.append(args)
        return SECRET_VALUE

    async def ask(self) -> str:
        """Wait for the test, then answer."""
        self.asked.set()
        await self.release.wait()
        return "the owner's answer"

    def namespaces(self) -> dict[str, Any]:
        return {"agent": {"secret": self.secret, "ask": self.ask}}


def test_a_parameters_program_through_remote_gateway_is_one_run(tmp_path: pathlib.Path) -> None:
    async def body(victim: AsyncKernelClient, attacker: Attacker) -> None:
        guarded = Guarded()
        async with gateway(victim, namespaces=guarded.namespaces()) as gw:
            r = await gw.run("# Parameters\nx = 6 * 7\nreturn x")
            assert r.ok and r.value == 42, r  # not kept as a setup cell: it ran
            r = await gw.run("#| setup\nplanted = 'kept'\nreturn 'ran'")
            assert r.ok and r.value == "ran", r
            r = await gw.run("return 6 * 7")
            assert r.ok and r.value == 42 and r.stdout == ""
            r = await gw.run("return planted")
            assert r.status == "exception" and r.error is not None
            assert r.error.ename == "NameError"
        # Nor did they become setup cells of the other clients.
        reply, _ = await attacker.execute("print(x)")
        assert reply["content"]["ename"] == "NameError"
        # A RemoteGateway's runs are not in the kernel's history.
        history = await attacker.request("history_request", {"hist_access_type": "tail", "n": 50})
        assert [h[2] for h in history["history"]] == ["print(x)"]

    two_clients(body, tmp_path)


def test_another_client_s_setup_cell_never_runs_in_a_remote_gateway_run(
    tmp_path: pathlib.Path,
) -> None:
    async def body(victim: AsyncKernelClient, attacker: Attacker) -> None:
        guarded = Guarded()
        async with gateway(victim, namespaces=guarded.namespaces()) as gw:
            planted = "#| setup\nprint('planted read:', await agent.secret('planted'))\n"
            reply, _ = await attacker.execute(planted)
            assert reply["content"]["status"] == "ok"  # an ordinary client's setup cell
            r = await gw.run("return 6 * 7")
            assert r.stdout == "", r.stdout  # the planted cell did not run in the run
            assert r.ok and r.value == 42 and r.calls == []
            assert guarded.secret_calls == []
            r = await gw.run("return await agent.secret()")  # the owner's own call works
            assert r.ok and r.value == SECRET_VALUE and guarded.secret_calls == [()]
        # The planted setup cell does apply to the attacker's own (ordinary) cells, where
        # the victim's bindings are not there.
        reply, _ = await attacker.execute("1")
        assert reply["content"]["ename"] == "NameError"
        assert "agent" in reply["content"]["evalue"]

    two_clients(body, tmp_path)


def test_another_client_cannot_call_or_see_a_remote_gateway_s_bindings(
    tmp_path: pathlib.Path,
) -> None:
    async def body(victim: AsyncKernelClient, attacker: Attacker) -> None:
        guarded = Guarded()
        async with gateway(victim, namespaces=guarded.namespaces()) as gw:
            session = await attacker.victim_session()
            # 3,001 calls at once from a cell that claims the gateway's session, while no
            # run of the gateway is in flight.
            flood = (
                "import asyncio\n"
                "got = await asyncio.gather(*(agent.secret(i) for i in range(3001)))\n"
                "print(got[0])\n"
            )
            reply, outputs = await attacker.execute(flood, session=session)
            assert guarded.secret_calls == [], len(guarded.secret_calls)
            assert reply["content"]["status"] == "error"
            assert reply["content"]["ename"] == "NameError", reply["content"]
            assert SECRET_VALUE not in _stdout(outputs)
            # Completion and inspection with the gateway's session know nothing of them.
            found = await attacker.request(
                "complete_request", {"code": "agent.", "cursor_pos": 6}, session=session
            )
            assert found["matches"] == []
            seen = await attacker.request(
                "inspect_request",
                {"code": "agent.secret", "cursor_pos": 12, "detail_level": 0},
                session=session,
            )
            assert seen["found"] is False
            # The gateway is still fine and quick.
            t0 = time.monotonic()
            r = await gw.run("return await agent.secret('mine')")
            assert r.ok and r.value == SECRET_VALUE and guarded.secret_calls == [("mine",)]
            assert time.monotonic() - t0 < 10

    two_clients(body, tmp_path)


def test_another_client_cannot_take_over_or_close_a_gateway_s_comm(
    tmp_path: pathlib.Path,
) -> None:
    async def body(victim: AsyncKernelClient, attacker: Attacker) -> None:
        guarded = Guarded()
        async with gateway(victim, namespaces=guarded.namespaces()) as gw:
            session = await attacker.victim_session()
            spec = {"params": [], "signature": "() -> str", "doc": "mine now"}
            attacker.send(
                "comm_open",
                {
                    "comm_id": gw.comm_id,
                    "target_name": "kernelgate.bindings",
                    "data": {"namespaces": {"agent": {"secret": spec}}},
                },
                session=session,
            )
            attacker.send("comm_close", {"comm_id": gw.comm_id, "data": {}}, session=session)
            await attacker.sync()
            r = await gw.run("return await agent.secret('still mine')")
            assert r.ok and r.value == SECRET_VALUE, r
            assert guarded.secret_calls == [("still mine",)]

    two_clients(body, tmp_path)


def test_a_forged_answer_never_reaches_the_program(tmp_path: pathlib.Path) -> None:
    async def body(victim: AsyncKernelClient, attacker: Attacker) -> None:
        guarded = Guarded()
        async with gateway(victim, namespaces=guarded.namespaces()) as gw:
            session = await attacker.victim_session()
            run = asyncio.create_task(gw.run("return await agent.ask()"))
            call = await attacker.until(
                attacker.iopub,
                lambda m: (
                    m["msg_type"] == "comm_msg"
                    and m["content"]["comm_id"] == gw.comm_id
                    and m["content"]["data"].get("method") == "call"
                ),
            )
            forged = {
                "method": "reply",
                "call_id": call["content"]["data"]["call_id"],
                "ok": True,
                "value": "forged",
            }
            for who in (None, session):
                attacker.send("comm_msg", {"comm_id": gw.comm_id, "data": forged}, session=who)
            await attacker.sync()  # the kernel has read the forged answers
            guarded.release.set()
            r = await run
            assert r.ok and r.value == "the owner's answer", r

    two_clients(body, tmp_path)


def test_a_remote_gateway_answers_only_calls_of_its_own_runs(tmp_path: pathlib.Path) -> None:
    """Whatever publishes on iopub (a hostile kernel, or anyone who binds a dead kernel's
    ports with the connection file): a RemoteGateway answers only the calls of its own run
    in flight, once, with JSON arguments that fit the signature."""
    fname, info = write_connection_file(
        str(tmp_path / "kernel.json"), ip="127.0.0.1", key=uuid.uuid4().hex.encode()
    )

    async def main() -> None:
        server = KernelServer(info)
        serving = asyncio.create_task(server.serve())
        kc = AsyncKernelClient()
        kc.load_connection_file(fname)
        kc.start_channels(hb=False)
        guarded = Guarded()
        publish = server.channels.publish

        def forge(call_id: str, args: list[Any], parent: dict[str, Any] | None) -> None:
            data = call_request_data(call_id, "agent", "secret", args, {})
            publish("comm_msg", {"comm_id": gw.comm_id, "data": data}, parent)

        try:
            async with RemoteGateway(kc, namespaces=guarded.namespaces()) as gw:
                r = await gw.run("return 1")
                assert r.ok
                # An idle gateway: 3,001 calls with no parent or a stranger's, one with NaN.
                for i in range(1500):
                    forge(f"f{i}", [i], None)
                    forge(f"g{i}", [i], {"msg_id": f"stranger-{i}", "session": "x"})
                allow_nan(server)
                forge("nan", [math.nan], None)
                t0 = time.monotonic()
                r = await gw.run("return 2")  # the host stays responsive
                assert r.ok and r.value == 2 and time.monotonic() - t0 < 10
                assert guarded.secret_calls == []
                # In flight: a call with NaN, and one whose call id comes twice.
                run = asyncio.create_task(gw.run("return await agent.ask()"))
                await asyncio.wait_for(guarded.asked.wait(), 30)
                parent = {"msg_id": next(iter(gw._runs))}  # the test plays the kernel
                forge("nan-in-flight", [math.nan], parent)
                forge("twice", ["twice"], parent)
                forge("twice", ["twice"], parent)
                guarded.release.set()
                assert (await run).value == "the owner's answer"
                assert guarded.secret_calls in ([], [("twice",)]), guarded.secret_calls
                # The run is over: its calls are no longer answered.
                forge("late", ["late"], parent)
                r = await gw.run("return 3")
                assert r.ok and ("late",) not in guarded.secret_calls
        finally:
            kc.stop_channels()
            server.stop()
            await asyncio.wait_for(serving, 30)

    asyncio.run(main())


#: A cell that keeps the kernel busy for a while, then prints (no sleep: it is the attacker's
#: program, and the test waits on its messages, not on time).
_SPIN = "import time\nt0 = time.monotonic()\nwhile time.monotonic() - t0 < {s}:\n    pass\n"


def test_another_client_cannot_put_output_in_a_gateway_s_run(tmp_path: pathlib.Path) -> None:
    """Outputs are known by their parent's msg_id: a client that can guess (jupyter_client
    numbers ids after the session id, which iopub shows) or reuse a gateway's request id
    would have the kernel publish its own cell's output as the gateway's."""

    async def body(victim: AsyncKernelClient, attacker: Attacker) -> None:
        guarded = Guarded()
        async with gateway(victim, namespaces=guarded.namespaces()) as gw:
            opened = await attacker.until(
                attacker.iopub, lambda m: m["parent_header"].get("msg_type") == "comm_open"
            )
            head, _, number = str(opened["parent_header"]["msg_id"]).rpartition("_")
            guess = f"{head}_{int(number) + 1}" if number.isdigit() else "no-guess"
            # The guessed id of the gateway's next request, on a cell that prints later.
            content = {
                "code": _SPIN.format(s=3) + "print('forged')",
                "silent": False,
                "store_history": True,
                "user_expressions": {},
                "allow_stdin": False,
                "stop_on_error": False,
            }
            msg = attacker.kc.session.msg("execute_request", content)
            msg["header"]["msg_id"] = msg["msg_id"] = guess
            attacker.kc.shell_channel.send(msg)
            await attacker.until(
                attacker.iopub, lambda m: _parent(m) == guess and m["msg_type"] == "execute_input"
            )
            r = await gw.run("print('mine')\nreturn 1")
            assert r.ok and r.stdout == "mine\n" and r.value == 1, r.stdout

            # An id seen on iopub, reused while the gateway's run is in flight: dropped.
            run = asyncio.create_task(gw.run("print('mine')\nreturn await agent.ask()"))
            await asyncio.wait_for(guarded.asked.wait(), 30)
            started = [m for m in attacker.iopub if m["msg_type"] == "execute_input"]
            taken = _parent(started[-1])
            for msg_type, body_ in (
                ("kernel_info_request", {}),
                ("execute_request", {**content, "code": "print('forged')"}),
                ("comm_open", {"comm_id": "x", "target_name": "nope", "data": {}}),
            ):
                forged = attacker.kc.session.msg(msg_type, body_)
                forged["header"]["msg_id"] = forged["msg_id"] = taken
                attacker.kc.shell_channel.send(forged)
            await attacker.sync()
            guarded.release.set()
            r = await run
            assert r.ok and r.stdout == "mine\n" and r.value == "the owner's answer", r.stdout
            assert [m for m in attacker.replies if _parent(m) == taken] == []

    two_clients(body, tmp_path)


def test_another_client_s_failure_never_aborts_a_gateway_s_run(tmp_path: pathlib.Path) -> None:
    async def body(victim: AsyncKernelClient, attacker: Attacker) -> None:
        async with gateway(victim, namespaces=Guarded().namespaces()) as gw:
            content = {
                "code": _SPIN.format(s=2) + "raise ValueError('fails')",
                "silent": False,
                "store_history": True,
                "user_expressions": {},
                "allow_stdin": False,
                "stop_on_error": True,  # aborts what is queued behind it
            }
            failing = attacker.send("execute_request", content)
            await attacker.until(
                attacker.iopub,
                lambda m: _parent(m) == failing and m["msg_type"] == "execute_input",
            )
            r = await gw.run("return 'ran'")  # queued behind the failing cell
            assert r.ok and r.value == "ran", r
            reply = await attacker.until(attacker.replies, lambda m: _parent(m) == failing)
            assert reply["content"]["status"] == "error"

    two_clients(body, tmp_path)


def test_another_client_cannot_take_a_gateway_s_connection(tmp_path: pathlib.Path) -> None:
    """jupyter_client connects its shell socket under the session id (which iopub shows) as
    routing identity, and the kernel (as ipykernel, for reconnects) lets a new connection
    take an identity over: a client connecting under the gateway's session id would take
    its requests and replies. The gateway sends and reads on connections of its own."""

    async def body(victim: AsyncKernelClient, attacker: Attacker) -> None:
        guarded = Guarded()
        async with gateway(victim, namespaces=guarded.namespaces()) as gw:
            session = await attacker.victim_session()
            port = attacker.kc.get_connection_info()["shell_port"]
            thief = zmq.asyncio.Context.instance().socket(zmq.DEALER)
            thief.setsockopt(zmq.IDENTITY, session.encode())
            thief.setsockopt(zmq.LINGER, 0)
            thief.connect(f"tcp://127.0.0.1:{port}")
            got: list[list[bytes]] = []
            try:
                # Once the kernel answers the thief, the identity is the thief's.
                sess = attacker.kc.session
                sess.send(thief, sess.msg("kernel_info_request", {}))
                await asyncio.wait_for(thief.recv_multipart(), 30)
                r = await asyncio.wait_for(gw.run("return await agent.secret('mine')"), 30)
                assert r.ok and r.value == SECRET_VALUE, r
                while await thief.poll(0):
                    got.append(await thief.recv_multipart())
            finally:
                thief.close()
            assert got == [], "the thief got a message meant for the gateway"

    two_clients(body, tmp_path)
