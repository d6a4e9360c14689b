"""Attacks on ``kernelgate mcp --http``: DNS rebinding (a foreign Host), a foreign Origin, a
missing or wrong token, on 127.0.0.1, on another loopback address (127.0.0.2, which the
SDK's own check leaves open) and on ::1. Each attack is a real HTTP request to the real
server, through every entry (initialize, a call with the session it would get, the
stateless-era call, the SSE stream, DELETE); ``touch`` writes a marker file whenever a
program runs, so "run_code never ran" is checked, not assumed."""

from __future__ import annotations

import asyncio
import json
import os
import selectors
import socket
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from .conftest import HERE, http_client, kernelgate_cmd, stop

TOKEN = "test-token-" + "x" * 32


def _has_ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
    except OSError:
        return False
    return True


BIND_HOSTS = [
    "127.0.0.1",
    "127.0.0.2",
    pytest.param("::1", marks=pytest.mark.skipif(not _has_ipv6_loopback(), reason="no ::1")),
]


@dataclass
class Served:
    url: str
    host: str  # as a Host header spells it: 127.0.0.2 or [::1]
    port: int
    marker: Path

    def ran(self) -> list[str]:
        return self.marker.read_text().split() if self.marker.exists() else []


def _first_lines(proc: subprocess.Popen[bytes], n: int, timeout: float = 30.0) -> list[str]:
    """The first ``n`` lines ``proc`` writes on stderr (read from the descriptor, so two
    lines written together are both seen), waiting at most ``timeout`` seconds."""
    assert proc.stderr is not None
    out = b""
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stderr, selectors.EVENT_READ)
        while out.count(b"\n") < n:
            if not sel.select(timeout):
                proc.kill()
                raise AssertionError(f"{n} lines on stderr not within {timeout} s: {out!r}")
            chunk = os.read(proc.stderr.fileno(), 4096)
            if not chunk:
                raise AssertionError(f"stderr closed after {out!r}")
            out += chunk
    return out.decode().splitlines()[:n]


def _start(
    bind: str, tmp: Path, env: dict[str, str], *extra: str
) -> tuple[subprocess.Popen[bytes], str, str]:
    """``kernelgate mcp --http BIND:0 EXTRA``: the process, its URL, what it said of the
    token."""
    shown = f"[{bind}]" if ":" in bind else bind
    proc = subprocess.Popen(
        kernelgate_cmd(
            "mcp",
            "--bindings-path",
            str(HERE),
            "--bindings",
            "marker_bindings:BINDINGS",
            "--timeout",
            "30",
            "--http",
            f"{shown}:0",
            *extra,
        ),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env,
        cwd=tmp,
    )
    line, said = _first_lines(proc, 2)
    assert line.startswith(f"kernelgate mcp: serving http://{shown}:"), line
    return proc, line.split("serving ", 1)[1].strip(), said


@pytest.fixture(scope="module", params=BIND_HOSTS)
def served(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    """``kernelgate mcp --http BIND:0`` with the token in $KERNELGATE_MCP_TOKEN."""
    bind: str = request.param
    tmp = tmp_path_factory.mktemp("guard")
    marker = tmp / "marker"
    env = dict(os.environ, KERNELGATE_MCP_TOKEN=TOKEN, KG_TEST_MARKER=str(marker))
    env.pop("PYTHONPATH", None)
    proc, url, _ = _start(bind, tmp, env)
    try:
        shown = f"[{bind}]" if ":" in bind else bind
        port = int(url.rsplit(":", 1)[1].split("/")[0])
        yield Served(url, shown, port, marker)
    finally:
        stop(proc)


def _headers(served: Served, **override: str | None) -> dict[str, str]:
    base: dict[str, str | None] = {
        "Host": f"{served.host}:{served.port}",
        "Origin": None,
        "Authorization": f"Bearer {TOKEN}",
    }
    base.update(override)
    return {k: v for k, v in base.items() if v is not None}


INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "attacker", "version": "1"},
    },
}
MCP_JSON = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def _call(note: str, id_: int) -> dict[str, object]:
    return {
        "jsonrpc": "2.0",
        "id": id_,
        "method": "tools/call",
        "params": {
            "name": "run_code",
            "arguments": {"code": f"return await tools.touch({note!r})"},
        },
    }


def _attack(served: Served, headers: dict[str, str], note: str) -> list[int]:
    """Every way in a client has, with ``headers``: the status of each answer (a session
    id, if the server ever hands one out, is used for the rest)."""
    statuses: list[int] = []
    with httpx.Client(timeout=30) as http:

        def post(body: object, **more: str) -> httpx.Response:
            r = http.post(
                served.url, headers={**MCP_JSON, **headers, **more}, content=json.dumps(body)
            )
            statuses.append(r.status_code)
            return r

        r = post(INIT)
        session = (
            {"mcp-session-id": r.headers["mcp-session-id"]} if "mcp-session-id" in r.headers else {}
        )
        legacy = {"mcp-protocol-version": "2025-06-18", **session}
        post({"jsonrpc": "2.0", "method": "notifications/initialized"}, **legacy)
        post(_call(note, 2), **legacy)
        # The stateless era: one POST, no initialize, no session.
        post(_call(note, 3), **{"mcp-protocol-version": "2026-07-28"})
        stream = {**headers, **legacy, "Accept": "text/event-stream"}
        with http.stream("GET", served.url, headers=stream) as r:
            statuses.append(r.status_code)
        statuses.append(http.delete(served.url, headers={**headers, **legacy}).status_code)
    return statuses


ATTACKS = {
    # DNS rebinding: the page's own name, pointed at 127.0.0.x, with the token even.
    "rebound-host": lambda s: _headers(
        s, Host=f"attacker.example:{s.port}", Origin=f"http://attacker.example:{s.port}"
    ),
    "rebound-host-no-origin": lambda s: _headers(s, Host=f"attacker.example:{s.port}"),
    "foreign-origin": lambda s: _headers(s, Origin="http://attacker.example"),
    "null-origin": lambda s: _headers(s, Origin="null"),
    "missing-token": lambda s: _headers(s, Authorization=None),
    "wrong-token": lambda s: _headers(s, Authorization="Bearer " + "y" * 43),
    "token-prefix": lambda s: _headers(s, Authorization=f"Bearer {TOKEN[:-1]}"),
    "basic-not-bearer": lambda s: _headers(s, Authorization=f"Basic {TOKEN}"),
    # What a browser page would send after rebinding: no token, its own Host and Origin.
    "browser-rebinding": lambda s: _headers(
        s,
        Host=f"attacker.example:{s.port}",
        Origin=f"http://attacker.example:{s.port}",
        Authorization=None,
    ),
}
EXPECTED = {
    "rebound-host": 421,
    "rebound-host-no-origin": 421,
    "foreign-origin": 403,
    "null-origin": 403,
    "missing-token": 401,
    "wrong-token": 401,
    "token-prefix": 401,
    "basic-not-bearer": 401,
    "browser-rebinding": 421,
}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("attack", list(ATTACKS))
def test_attack_gets_no_session_and_runs_nothing(served: Served, attack: str) -> None:
    statuses = _attack(served, ATTACKS[attack](served), f"attack-{attack}")
    assert statuses == [EXPECTED[attack]] * len(statuses), statuses
    assert not [n for n in served.ran() if n.startswith("attack")], served.ran()


@pytest.mark.timeout(120)
def test_honest_client_with_the_token_runs_code(served: Served) -> None:
    async def main() -> str:
        async with http_client(served.url, TOKEN) as client:
            result = await client.call_tool(
                "run_code", {"code": "return await tools.touch('honest')"}
            )
            assert result.is_error is False, result.content
            return str(result.content[0].text)  # type: ignore[union-attr]

    assert asyncio.run(main()) == 'returned:\n"honest"'
    assert "honest" in served.ran()


@pytest.mark.timeout(120)
def test_a_live_session_id_is_no_key(served: Served) -> None:
    """An honest client's session (its id leaked, say) still needs the Host and the token:
    the id alone reaches neither its stream nor run_code."""
    with httpx.Client(timeout=30) as http:
        r = http.post(served.url, headers={**MCP_JSON, **_headers(served)}, json=INIT)
        assert r.status_code == 200
        session = {
            "mcp-session-id": r.headers["mcp-session-id"],
            "mcp-protocol-version": "2025-06-18",
        }
        honest = {**MCP_JSON, **_headers(served), **session}
        note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        assert http.post(served.url, headers=honest, json=note).status_code == 202
        for name in ("browser-rebinding", "missing-token", "wrong-token", "foreign-origin"):
            stolen = {**MCP_JSON, **ATTACKS[name](served), **session}
            assert (
                http.post(
                    served.url, headers=stolen, json=_call(f"attack-sid-{name}", 9)
                ).status_code
                == (EXPECTED[name])
            )
            stream = {**stolen, "Accept": "text/event-stream"}
            with http.stream("GET", served.url, headers=stream) as got:
                assert got.status_code == EXPECTED[name]
            assert http.delete(served.url, headers=stolen).status_code == EXPECTED[name]
        # The session is still there for its owner.
        r = http.post(served.url, headers=honest, json=_call("sid-owner", 10))
        assert r.status_code == 200 and "sid-owner" in r.text
    assert "sid-owner" in served.ran()
    assert not [n for n in served.ran() if n.startswith("attack")], served.ran()


@pytest.mark.timeout(120)
def test_kernelgate_connect_sends_the_token(served: Served) -> None:
    """kernelgate.mcp.connect(url, headers=...) wraps a token-protected server (here
    kernelgate's own); without the header it gets a clear error, not a hang."""
    import kernelgate.mcp

    async def listed(headers: dict[str, str] | None) -> list[str]:
        async with kernelgate.mcp.connect(served.url, headers=headers, connect_timeout=30) as ns:
            return sorted(ns)

    assert asyncio.run(listed({"Authorization": f"Bearer {TOKEN}"})) == ["run_code"]
    with pytest.raises(kernelgate.mcp.McpServerError) as caught:
        asyncio.run(listed(None))
    with pytest.raises(ValueError, match="is for an http"):
        asyncio.run(kernelgate.mcp.connect("python x.py", headers={}).__aenter__())
    # The guard's JSON-RPC error reaches the user through the SDK's client as it is.
    assert "refused: no token; send the header 'Authorization: Bearer <token>'" in str(caught.value)


# The second look at the class: Host and Origin spellings, each with the right token.
def _host_cases(s: Served) -> list[tuple[str, int]]:
    other = "127.0.0.1" if s.host != "127.0.0.1" else "127.0.0.2"
    return [
        (f"{s.host}:{s.port}", 200),
        (f"localhost:{s.port}", 200),
        (f"LOCALHOST:{s.port}", 200),  # a host name is case-insensitive; still loopback
        (f"localhost.:{s.port}", 421),  # a FQDN goes to DNS, which a page can rebind
        (f"localhost:{s.port + 1}", 421),
        (f"{s.host}:{s.port + 1}", 421),
        (f"{s.host}", 421),  # port 80 implied
        (f"{s.host}.:{s.port}", 421),
        (f"{other}:{s.port}", 421),  # another loopback address is not this server
        (f"[::ffff:{other}]:{s.port}", 421),
        (f"attacker.example:{s.port}", 421),
        (f"{s.host}:{s.port}@attacker.example", 421),
        (f"attacker.example:{s.port}#{s.host}:{s.port}", 421),
        ("", 421),
    ]


@pytest.mark.timeout(120)
def test_host_spellings(served: Served) -> None:
    got = []
    with httpx.Client(timeout=30) as http:
        for host, _ in _host_cases(served):
            r = http.post(
                served.url, headers={**MCP_JSON, **_headers(served, Host=host)}, json=INIT
            )
            got.append((host, r.status_code))
    assert got == _host_cases(served)
    with httpx.Client(timeout=30) as http:
        r = http.post(
            served.url, headers={**MCP_JSON, **_headers(served, Host="evil:1")}, json=INIT
        )
    assert r.status_code == 421 and "Host 'evil:1' is not this server's address" in r.text
    assert "mcp-session-id" not in r.headers


@pytest.mark.timeout(120)
def test_origin_spellings(served: Served) -> None:
    p = served.port
    cases = [
        (f"http://{served.host}:{p}", 200),
        (f"http://localhost:{p}", 200),
        (f"https://{served.host}:{p}", 403),
        (f"http://{served.host}:{p + 1}", 403),
        (f"http://localhost.:{p}", 403),
        (f"http://attacker.example:{p}", 403),
        (f"http://{served.host}:{p}.attacker.example", 403),
        ("null", 403),
        ("file://", 403),
    ]
    got = []
    with httpx.Client(timeout=30) as http:
        for origin, _ in cases:
            r = http.post(
                served.url, headers={**MCP_JSON, **_headers(served, Origin=origin)}, json=INIT
            )
            got.append((origin, r.status_code))
    assert got == cases


def _raw(served: Served, head: str, version: str = "HTTP/1.1") -> bytes:
    """One request written by hand (what httpx will not send), the answer's bytes."""
    body = json.dumps(INIT).encode()
    family = socket.AF_INET6 if served.host.startswith("[") else socket.AF_INET
    with socket.socket(family) as s:
        s.settimeout(30)
        s.connect((served.host.strip("[]"), served.port))
        s.sendall(
            (
                f"POST /mcp {version}\r\n{head}Accept: application/json, text/event-stream\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
            ).encode("latin-1")
            + body
        )
        out = b""
        while b"\r\n" not in out:
            chunk = s.recv(4096)
            if not chunk:
                break
            out += chunk
    return out


@pytest.mark.timeout(120)
def test_forwarded_and_duplicate_headers_do_not_help(served: Served) -> None:
    good = f"{served.host}:{served.port}"
    auth = f"Authorization: Bearer {TOKEN}\r\n"
    # A forwarding header does not stand in for Host (nothing reads X-Forwarded-*).
    forwarded = _raw(
        served,
        f"Host: attacker.example:{served.port}\r\nX-Forwarded-Host: {good}\r\n"
        f"Forwarded: host={good}\r\n{auth}",
    )
    assert forwarded.startswith(b"HTTP/1.1 421"), forwarded
    # Two Host headers (or two tokens) are refused, whatever their order.
    for head in (
        f"Host: {good}\r\nHost: attacker.example\r\n{auth}",
        f"Host: attacker.example\r\nHost: {good}\r\n{auth}",
    ):
        answer = _raw(served, head)
        assert answer.startswith((b"HTTP/1.1 421", b"HTTP/1.1 400")), answer
    two_tokens = _raw(
        served, f"Host: {good}\r\nAuthorization: Bearer nope-nope-nope-nope\r\n{auth}"
    )
    assert two_tokens.startswith(b"HTTP/1.1 401"), two_tokens
    # No Host at all (HTTP/1.0 allows that).
    assert _raw(served, auth, "HTTP/1.0").startswith(b"HTTP/1.1 421")


def _env(**more: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "KERNELGATE_MCP_TOKEN")}
    return {**env, **more}


def _init_status(url: str, token: str | None) -> int:
    auth = {"Authorization": f"Bearer {token}"} if token else {}
    with httpx.Client(timeout=30) as http:
        return http.post(url, headers={**MCP_JSON, **auth}, json=INIT).status_code


@pytest.mark.timeout(120)
def test_without_a_token_given_one_is_made_and_printed_once(tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    proc, url, said = _start("127.0.0.1", tmp_path, _env(KG_TEST_MARKER=str(marker)))
    try:
        prefix = "kernelgate mcp: clients send the header: Authorization: Bearer "
        assert said.startswith(prefix), said
        token = said[len(prefix) :]
        assert len(token) >= 40
        assert _init_status(url, None) == 401
        assert _init_status(url, token) == 200

        async def main() -> None:
            async with http_client(url, token) as client:
                r = await client.call_tool("run_code", {"code": "return await tools.touch('made')"})
                assert r.is_error is False, r.content

        asyncio.run(main())
        assert marker.read_text() == "made\n"
    finally:
        stop(proc)


@pytest.mark.timeout(120)
def test_token_file_is_made_private_then_reused(tmp_path: Path) -> None:
    path = tmp_path / "token"
    tokens = []
    for _ in range(2):
        proc, url, said = _start("127.0.0.1", tmp_path, _env(), "--token-file", str(path))
        try:
            assert str(path) in said and "Bearer" in said and path.read_text().strip() not in said
            token = path.read_text().strip()
            assert _init_status(url, token) == 200 and _init_status(url, token + "x") == 401
            tokens.append((token, said.split(": ", 1)[1].split(" ")[0]))
        finally:
            stop(proc)
    assert path.stat().st_mode & 0o777 == 0o600
    assert tokens[0][0] == tokens[1][0]
    assert [said for _, said in tokens] == ["wrote", "the"]


def _usage(tmp: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    cmd = kernelgate_cmd("mcp", "--bindings", "kernelgate.demo:BINDINGS", *args)
    return subprocess.run(
        cmd, capture_output=True, text=True, timeout=60, env=env, cwd=tmp, stdin=subprocess.DEVNULL
    )


@pytest.mark.timeout(120)
def test_token_usage_errors(tmp_path: Path) -> None:
    http = ("--http", "127.0.0.1:0")
    shared = tmp_path / "shared"
    shared.write_text("a" * 43 + "\n")
    shared.chmod(0o644)
    r = _usage(tmp_path, _env(), *http, "--token-file", str(shared))
    assert r.returncode == 2 and "is open to other users (mode 0644); chmod 600 it" in r.stderr
    (tmp_path / "link").symlink_to(shared)
    r = _usage(tmp_path, _env(), *http, "--token-file", str(tmp_path / "link"))
    assert r.returncode == 2 and "cannot read it" in r.stderr
    short = tmp_path / "short"
    short.write_text("abc\n")
    short.chmod(0o600)
    r = _usage(tmp_path, _env(), *http, "--token-file", str(short))
    assert r.returncode == 2 and "at least 16 visible ASCII characters" in r.stderr
    if os.geteuid() == 0:  # only root can give a file away
        planted = tmp_path / "planted"
        planted.write_text("b" * 43 + "\n")
        planted.chmod(0o600)
        os.chown(planted, 65534, 65534)  # another user's file, as one left in /tmp would be
        r = _usage(tmp_path, _env(), *http, "--token-file", str(planted))
        assert r.returncode == 2 and "belongs to uid 65534, not to you" in r.stderr
    r = _usage(tmp_path, _env(KERNELGATE_MCP_TOKEN="short"), *http)
    assert r.returncode == 2 and "$KERNELGATE_MCP_TOKEN: a token must be at least 16" in r.stderr
    r = _usage(tmp_path, _env(KERNELGATE_MCP_TOKEN=TOKEN), *http, "--token-file", str(short))
    assert r.returncode == 2 and "keep one of them" in r.stderr
    r = _usage(tmp_path, _env(), "--token-file", str(short))
    assert r.returncode == 2 and "--token-file goes with --http" in r.stderr
