"""A Jupyter Kernel Gateway's REST API, as :class:`~.gatewayruntime.GatewayRuntime` uses it.

Kernel Gateway and Enterprise Gateway serve the same API: ``POST /api/kernels`` starts a
kernel, ``GET /api/kernels/<id>`` says whether it is still there, ``DELETE`` shuts it down,
and ``/api/kernels/<id>/channels`` is its websocket. A gateway that wants a token is sent it
as ``Authorization: token <token>`` (never in the URL, where logs would keep it).

Every failure is a :class:`GatewayError` that names the gateway and what to do.

>>> GatewayEndpoint("http://127.0.0.1:8888/").ws_url("abc", "s1")
'ws://127.0.0.1:8888/api/kernels/abc/channels?session_id=s1'
>>> GatewayEndpoint("ftp://x")
Traceback (most recent call last):
...
ValueError: a gateway URL is http:// or https:// (host and port), got 'ftp://x'
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Mapping
from typing import Any

from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest

__all__ = ["GatewayEndpoint", "GatewayError", "GatewayTimeout"]


class GatewayError(RuntimeError):
    """A kernel gateway could not be reached, refused a request, or lost a kernel."""


class GatewayTimeout(GatewayError):
    """A kernel gateway took the request and did not answer it in time (it may still act on
    it: a kernel started late is one nobody knows of)."""


class GatewayEndpoint:
    """One gateway's base URL and token, and the REST calls made to it."""

    def __init__(
        self,
        url: str,
        auth_token: str | None = None,
        *,
        request_timeout: float = 60.0,
        shutdown_timeout: float = 20.0,
    ) -> None:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"a gateway URL is http:// or https:// (host and port), got {url!r}")
        self.url = url.rstrip("/")
        self.auth_token = auth_token
        self.request_timeout = request_timeout
        #: How long a ``DELETE`` may take. A gateway shuts a kernel that does not answer
        #: (stopped, wedged) down by killing it after a wait of its own (jupyter_client's
        #: ``shutdown_wait_time``, 5 s); past this the runtime goes on, the gateway finishes.
        self.shutdown_timeout = shutdown_timeout

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"token {self.auth_token}"} if self.auth_token else {}

    def ws_url(self, kernel_id: str, session_id: str) -> str:
        """The kernel's channels websocket; ``session_id`` lets the gateway replay what it
        buffered while this client was away (jupyter_server keeps it per session)."""
        base = "ws" + self.url[len("http") :]
        kid = urllib.parse.quote(kernel_id, safe="")
        return f"{base}/api/kernels/{kid}/channels?session_id={urllib.parse.quote(session_id)}"

    async def _request(
        self, method: str, path: str, body: Any = None, timeout: float | None = None
    ) -> Any:
        timeout = self.request_timeout if timeout is None else timeout
        request = HTTPRequest(
            self.url + path,
            method=method,
            headers={**self.headers(), "Content-Type": "application/json"},
            body=None if body is None else json.dumps(body),
            request_timeout=timeout,
            connect_timeout=min(10.0, timeout),
            allow_nonstandard_methods=True,
            # A gateway's API does not redirect; following one would send the token on
            # (older tornado keeps the Authorization header even to another host).
            follow_redirects=False,
        )
        try:
            response = await AsyncHTTPClient().fetch(request)
        except HTTPClientError as exc:
            if exc.code == 599 and exc.response is None:  # tornado's own: no HTTP answer
                raise GatewayTimeout(
                    f"the kernel gateway at {self.url} did not answer {method} {path} "
                    f"within {timeout:g} s ({exc.message})"
                ) from None
            raise self.refused(method, path, exc.code, _reason(exc)) from None
        except OSError as exc:
            raise GatewayError(
                f"could not reach the kernel gateway at {self.url} ({method} {path}: {exc}); "
                "is it running, and is the URL right?"
            ) from None
        return json.loads(response.body) if response.body else None

    def refused(self, method: str, path: str, code: int, reason: str) -> GatewayError:
        """The error for a gateway's HTTP refusal (the REST API's or the websocket's)."""
        if code in (401, 403):
            why = "no auth token was sent" if not self.auth_token else "the auth token is wrong"
            return GatewayError(
                f"the kernel gateway at {self.url} refused {method} {path}: HTTP {code} "
                f"{reason} ({why}; pass the gateway's token as auth_token=)"
            )
        return GatewayError(
            f"the kernel gateway at {self.url} refused {method} {path}: HTTP {code} {reason}"
        )

    async def start_kernel(self, kernel_name: str, env: Mapping[str, str] | None = None) -> str:
        """Start a kernel of ``kernel_name`` (``env``: the request's ``env``, which
        Enterprise Gateway reads ``KERNEL_USERNAME`` and the like from); its id."""
        body: dict[str, Any] = {"name": kernel_name}
        if env:
            body["env"] = dict(env)
        try:
            model = await self._request("POST", "/api/kernels", body)
        except GatewayError as exc:
            raise GatewayError(f"{exc} (starting a {kernel_name!r} kernel)") from None
        if not isinstance(model, dict) or not isinstance(model.get("id"), str):
            raise GatewayError(f"the kernel gateway at {self.url} answered {model!r}, not a kernel")
        if model.get("name") not in (None, kernel_name):
            # A gateway with force_kernel_name starts its own kernel whatever is asked.
            await self.shutdown_kernel(model["id"])
            raise GatewayError(
                f"the kernel gateway at {self.url} started a {model.get('name')!r} kernel "
                f"when asked for {kernel_name!r} (is its force_kernel_name set?)"
            )
        return str(model["id"])

    async def kernel_exists(self, kernel_id: str) -> bool:
        """Whether the gateway still has the kernel (it forgets one that died for good)."""
        try:
            await self._request("GET", f"/api/kernels/{urllib.parse.quote(kernel_id, safe='')}")
        except GatewayError as exc:
            if "HTTP 404" in str(exc):
                return False
            raise
        return True

    async def shutdown_kernel(self, kernel_id: str) -> None:
        """Shut the kernel down (``DELETE``, waiting ``shutdown_timeout`` at most); one
        already gone is no error."""
        path = f"/api/kernels/{urllib.parse.quote(kernel_id, safe='')}"
        try:
            await self._request("DELETE", path, timeout=self.shutdown_timeout)
        except GatewayError as exc:
            if "HTTP 404" not in str(exc):
                raise

    async def list_kernels(self) -> list[dict[str, Any]]:
        found = await self._request("GET", "/api/kernels")
        return list(found) if isinstance(found, list) else []


def _reason(exc: HTTPClientError) -> str:
    """The gateway's own words for a refusal (its JSON ``message``), else the HTTP reason."""
    response = exc.response
    if response is not None and response.body:
        try:
            body = json.loads(response.body)
        except ValueError:
            body = None
        if isinstance(body, dict) and isinstance(body.get("message"), str) and body["message"]:
            return f"({body['message'][:300]})"
    return str(getattr(response, "reason", "") or exc.message or "")
