"""Who may speak to ``kernelgate mcp --http``: the Host, the Origin and a bearer token.

The server runs programs with the user's bindings for whoever reaches it, so every HTTP
request (any path, any method, the SSE stream and session requests included) passes
:class:`HttpGuard` before the SDK sees it:

* ``Host`` must name the address the server is bound to, with its port: the bound IP (any
  spelling of it) or, for a loopback bind, ``localhost``. A web page the user opens can
  point a name it controls at 127.0.0.x (DNS rebinding), but its requests then carry that
  name: they get 421.
* ``Origin``, when present (browsers send it), must be ``http://`` and one of those hosts:
  a page from anywhere else gets 403.
* ``Authorization: Bearer <token>`` must carry the server's token (compared in constant
  time): 401 without it. This stops what the header checks cannot: another local user, a
  local program, or a browser that reaches loopback without rebinding.

WebSocket connections are refused: the server has none.

>>> guard_hosts("127.0.0.2", 8765)
['127.0.0.2:8765', 'localhost:8765']
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import os
import secrets
import stat
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

__all__ = [
    "TOKEN_ENV",
    "HttpGuard",
    "check_token",
    "guard_hosts",
    "new_token",
    "token_from_file",
]

#: The environment variable ``kernelgate mcp --http`` takes its token from.
TOKEN_ENV = "KERNELGATE_MCP_TOKEN"
#: Shortest token accepted from a user (a generated one has 43 characters).
MIN_TOKEN_CHARS = 16
#: The JSON-RPC error code of a refused request (the range servers define).
_REFUSED = -32001

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

_IP = ipaddress.IPv4Address | ipaddress.IPv6Address


def new_token() -> str:
    """A fresh random token: 256 bits, URL-safe text."""
    return secrets.token_urlsafe(32)


def check_token(token: str, where: str) -> str:
    """``token`` if it can be a bearer token (at least 16 visible ASCII characters, no
    spaces); else ``ValueError`` naming ``where`` it came from."""
    if len(token) < MIN_TOKEN_CHARS or not all("!" <= c <= "~" for c in token):
        raise ValueError(
            f"{where}: a token must be at least {MIN_TOKEN_CHARS} visible ASCII characters "
            f"without spaces (got {len(token)} characters); make one with: python -c "
            "'import secrets; print(secrets.token_urlsafe(32))'"
        )
    return token


def token_from_file(path: str) -> tuple[str, bool]:
    """The token kept in ``path``, and whether it was just created.

    A missing file is created (mode 0600, never following a symlink) holding a new token,
    so the same token serves every start and the client configuration can read it. An
    existing file must be a regular file of this user's that only they can read or write."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        pass
    else:
        token = new_token()
        with os.fdopen(fd, "w") as out:
            out.write(token + "\n")
        return token, True
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as exc:
        raise ValueError(f"--token-file {path!r}: cannot read it: {exc.strerror}") from None
    with os.fdopen(fd) as file:
        info = os.fstat(file.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise ValueError(f"--token-file {path!r} is not a regular file")
        if info.st_uid != os.geteuid():
            # Someone else's file (planted in /tmp, say): they would know the token.
            raise ValueError(
                f"--token-file {path!r} belongs to uid {info.st_uid}, not to you (uid "
                f"{os.geteuid()}); use a file of your own"
            )
        if info.st_mode & 0o077:
            raise ValueError(
                f"--token-file {path!r} is open to other users (mode "
                f"{stat.S_IMODE(info.st_mode):04o}); chmod 600 it, or remove it and a new "
                "one is made"
            )
        text = file.read(4096).strip()
    return check_token(text, f"--token-file {path!r}"), False


def _bound_ip(host: str) -> _IP:
    return ipaddress.ip_address(host.split("%", 1)[0])


def guard_hosts(host: str, port: int) -> list[str]:
    """The ``Host`` values (``name:port``) a server bound to the IP ``host`` accepts, in
    their usual spelling: the address itself and, for a loopback one, ``localhost``."""
    ip = _bound_ip(host)
    shown = f"[{ip.compressed}]" if ip.version == 6 else ip.compressed
    names = [f"{shown}:{port}"]
    if ip.is_loopback:
        names.append(f"localhost:{port}")
    return names


def _split_host(value: str) -> tuple[str, int | None] | None:
    """``(name, port)`` of a Host value (``name``, ``name:port``, ``[v6]``,
    ``[v6]:port``), the name lower-cased; None if it is not one."""
    if value.startswith("["):
        name, sep, rest = value[1:].partition("]")
        if not sep:
            return None
    else:
        name, sep, rest = value.rpartition(":")
        if not sep:
            name, rest = value, ""
        rest = sep + rest
    if rest == "":
        return name.lower(), None
    if not rest.startswith(":") or not rest[1:].isdigit() or not rest[1:].isascii():
        return None
    return name.lower(), int(rest[1:])


class HttpGuard:
    """ASGI middleware around the MCP app: the Host, Origin and token checks (see the
    module); a request that fails one is answered with a JSON-RPC error saying why (with
    the HTTP status 421, 403 or 401) and never reaches the app."""

    def __init__(self, app: App, *, host: str, port: int, token: str) -> None:
        self._app = app
        self._ip = _bound_ip(host)
        self._port = port
        self._hosts = guard_hosts(host, port)
        self._token = check_token(token, "the server's token").encode("ascii")

    def _host_ok(self, value: str) -> bool:
        parts = _split_host(value)
        if parts is None:
            return False
        name, port = parts
        if (port if port is not None else 80) != self._port:
            return False
        if name == "localhost":
            # Not "localhost.": a fully qualified name goes to DNS, which a page can rebind.
            return self._ip.is_loopback
        try:
            return ipaddress.ip_address(name) == self._ip
        except ValueError:
            return False

    def _origin_ok(self, value: str) -> bool:
        scheme, sep, rest = value.partition("://")
        return bool(sep) and scheme.lower() == "http" and "/" not in rest and self._host_ok(rest)

    def _token_ok(self, value: str) -> bool:
        scheme, _, given = value.strip().partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(
            given.strip().encode("utf-8", "replace"), self._token
        )

    def _refusal(self, headers: list[tuple[bytes, bytes]]) -> tuple[int, str] | None:
        def values(name: bytes) -> list[str]:
            return [v.decode("latin-1") for k, v in headers if k.lower() == name]

        allowed = " or ".join(self._hosts)
        hosts = values(b"host")
        if len(hosts) != 1 or not self._host_ok(hosts[0]):
            got = hosts[0][:100] if len(hosts) == 1 else f"{len(hosts)} Host headers"
            return 421, (
                f"kernelgate mcp: refused: Host {got!r} is not this server's address "
                f"(expected {allowed}); a web page reaching loopback under another name "
                "(DNS rebinding) is refused this way"
            )
        origins = values(b"origin")
        if len(origins) > 1 or (origins and not self._origin_ok(origins[0])):
            got = origins[0][:100] if len(origins) == 1 else f"{len(origins)} Origin headers"
            return 403, (
                f"kernelgate mcp: refused: Origin {got!r} is not this server "
                f"(expected none, or http://{' or http://'.join(self._hosts)})"
            )
        auth = values(b"authorization")
        if len(auth) != 1 or not self._token_ok(auth[0]):
            what = "no" if not auth else "a wrong"
            return 401, (
                f"kernelgate mcp: refused: {what} token; send the header 'Authorization: "
                "Bearer <token>' with the token kernelgate mcp printed when it started (or "
                f"the one in its --token-file, or ${TOKEN_ENV})"
            )
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._app(scope, receive, send)
            return
        if scope["type"] != "http":
            await send({"type": "websocket.close", "code": 1008})
            return
        refusal = self._refusal(list(scope["headers"]))
        if refusal is None:
            await self._app(scope, receive, send)
            return
        status, text = refusal
        extra = [(b"www-authenticate", b'Bearer realm="kernelgate"')] if status == 401 else []
        # A JSON-RPC error: MCP clients (the SDK's among them) show its message to the user.
        error = {"jsonrpc": "2.0", "id": None, "error": {"code": _REFUSED, "message": text}}
        body = (json.dumps(error) + "\n").encode("utf-8")
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode("ascii")),
                    (b"x-content-type-options", b"nosniff"),
                    (b"connection", b"close"),
                    *extra,
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})
