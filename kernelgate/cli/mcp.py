"""``kernelgate mcp``: serve the ``run_code`` tool to MCP clients, over stdio or HTTP.

``--bindings mod:attr`` names the bindings (as ``kernelgate run`` does); ``--mcp
NAME=COMMAND`` wraps an MCP server as the namespace ``NAME`` (a command line, or an
http(s) URL), so kernelgate sits in front of existing servers and turns their many tools
into one ``run_code`` tool; ``--mcp-env NAME=VAR=VALUE`` (or ``NAME=VAR``, passing on
kernelgate's own ``$VAR``) gives a command server an environment variable: it gets no
other but the few the MCP SDK passes on, never kernelgate's whole environment (which
holds secrets). A server that cannot be started or reached is one line on stderr and
exit status 2, before anything is served. ``--record-to DIR`` keeps the session as one
notebook there. ``--http HOST:PORT`` serves streamable HTTP on a loopback address instead
of stdio (port 0: a free one; the URL is printed on stderr). Over HTTP every request
needs ``Authorization: Bearer <token>``: the token is kept in ``--token-file FILE`` (made,
mode 0600, if missing), else taken from ``$KERNELGATE_MCP_TOKEN``, else made afresh and
printed once on stderr.
"""

from __future__ import annotations

import argparse
import logging
import os
import shlex
import sys
import time
from contextlib import AsyncExitStack
from typing import Any

from kernelgate.gateway.gateway import Gateway
from kernelgate.gateway.launch import NodeUnavailable
from kernelgate.gateway.tools import MAX_CHARS, MIN_CHARS
from kernelgate.notebooks.session import SessionLog

from .common import (
    UsageError,
    add_bindings_path_argument,
    add_limit_arguments,
    bindings_search,
    limits_from_args,
    load_bindings,
    positive_seconds,
    run_stoppable,
)

__all__ = ["register"]


def _mcp_server(text: str) -> tuple[str, str]:
    name, sep, command = text.partition("=")
    if not sep or not name or not command.strip():
        raise argparse.ArgumentTypeError(
            f"expected NAME=COMMAND (e.g. files='python files_server.py' or "
            f"web=http://127.0.0.1:8000/mcp), got {text!r}"
        )
    if not name.isidentifier():
        raise argparse.ArgumentTypeError(
            f"--mcp {text!r}: the namespace {name!r} must be a Python identifier (e.g. files)"
        )
    return name, command.strip()


def _mcp_env(text: str) -> tuple[str, str, str | None]:
    """``NAME=VAR=VALUE``, or ``NAME=VAR`` (the value of kernelgate's own ``$VAR``)."""
    name, sep, assignment = text.partition("=")
    var, has_value, value = assignment.partition("=")
    if not sep or not name or not var or "\0" in text:
        raise argparse.ArgumentTypeError(
            f"expected NAME=VAR=VALUE or NAME=VAR (NAME a --mcp server's name; VAR alone "
            f"passes on kernelgate's own $VAR), e.g. github=GITHUB_TOKEN, got {text!r}"
        )
    return name, var, value if has_value else None


def _http_address(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise argparse.ArgumentTypeError(
            f"expected HOST:PORT on loopback (e.g. 127.0.0.1:8765, or port 0 for a free "
            f"one), got {text!r}"
        )
    return host, int(port)


def _positive_chars(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < MIN_CHARS:
        raise argparse.ArgumentTypeError(f"expected an integer >= {MIN_CHARS}, got {text!r}")
    return value


def _session_log(directory: str) -> SessionLog:
    if not os.path.isdir(directory):
        raise UsageError(
            f"--record-to {directory!r} is not a directory; create it first (kernelgate "
            "does not create directories)"
        )
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    path = os.path.join(os.path.abspath(directory), f"session-{stamp}-{os.getpid()}.ipynb")
    return SessionLog(path, title="kernelgate mcp session")


def _say(text: str) -> None:
    # stderr: on stdio, stdout is the MCP connection itself.
    print(f"kernelgate mcp: {text}", file=sys.stderr, flush=True)


class _StrayOutput(logging.Filter):
    """The SDK logs every line a stdio server writes that is not JSON-RPC with a whole
    traceback. While connecting, kernelgate's own error quotes the first such line, so
    they are dropped; later, each is one line of stderr."""

    def __init__(self) -> None:
        super().__init__()
        self.connecting = True

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.getMessage().startswith("Failed to parse JSONRPC message"):
            return True
        if self.connecting:
            return False
        record.msg, record.args = "a --mcp server wrote a line that is not MCP's JSON-RPC", ()
        record.exc_info, record.exc_text = None, None
        return True


def _http_token(args: argparse.Namespace) -> tuple[str, str]:
    """The token ``--http`` requires, and what to tell the user about it on stderr."""
    # Lazy, pointing down: the SDK is slow to import and only serving needs it.
    from kernelgate.mcp.guard import TOKEN_ENV, check_token, new_token, token_from_file

    from_env = os.environ.get(TOKEN_ENV)
    if args.token_file is not None:
        if from_env is not None:
            raise UsageError(f"--token-file and ${TOKEN_ENV} both give a token; keep one of them")
        token, made = token_from_file(args.token_file)
        path = os.path.abspath(args.token_file)
        said = "wrote a new token to" if made else "the token is in"
        return token, f"{said} {path}; clients send the header 'Authorization: Bearer <that token>'"
    if from_env is not None:
        token = check_token(from_env, f"${TOKEN_ENV}")
        return token, f"clients send the header 'Authorization: Bearer <${TOKEN_ENV}>'"
    token = new_token()
    # Printed once, as Jupyter does: nobody but the user reads this stderr.
    return token, f"clients send the header: Authorization: Bearer {token}"


async def _serve(
    args: argparse.Namespace,
    namespaces: dict[str, Any],
    record: Any,
    token: tuple[str, str] | None,
) -> int:
    # Imported here: the SDK is the kernelgate[mcp] extra and slow to import; the rest of
    # the command line needs neither.
    try:
        from kernelgate.mcp.client import McpServerError, connect
        from kernelgate.mcp.server import build_server, listen, serve_http, serve_stdio
    except ImportError as exc:
        raise UsageError(f"kernelgate mcp: {exc} (pip install 'kernelgate[mcp]')") from None

    specs = _mcp_specs(args, namespaces)
    stray = _StrayOutput()
    sdk_log = logging.getLogger("mcp.client.stdio")
    sdk_log.addFilter(stray)
    async with AsyncExitStack() as stack:
        stack.callback(sdk_log.removeFilter, stray)
        for name, (command, env) in specs.items():
            try:
                namespaces[name] = await stack.enter_async_context(
                    connect(
                        command,
                        env=env,
                        call_timeout=args.call_timeout,
                        connect_timeout=args.connect_timeout,
                    )
                )
            except McpServerError as exc:
                raise UsageError(f"--mcp {name}=...: {exc}") from None
        stray.connecting = False
        try:
            gateway = Gateway(
                namespaces=namespaces,
                limits=limits_from_args(args),
                record_to=record,
                language=args.language,
                node=args.node,
                tool_search=args.tool_search,
            )
        except (NodeUnavailable, TypeError) as exc:
            raise UsageError(f"kernelgate mcp --language {args.language}: {exc}") from None
        await stack.enter_async_context(gateway)
        try:
            server = build_server(
                gateway,
                max_chars=args.max_chars,
                max_description_chars=args.max_description_chars,
                tool_search=args.tool_search,
            )
        except ValueError as exc:  # a description budget too small for anything
            raise UsageError(f"kernelgate mcp: {exc}") from None
        if record is not None:
            _say(f"recording the session to {record.path}")
        if args.http is None or token is None:
            await serve_stdio(server)
            return 0
        try:
            sock = listen(*args.http)
        except (ValueError, OSError) as exc:
            raise UsageError(str(exc)) from None
        secret, about = token

        def ready(url: str) -> None:
            _say(f"serving {url}")
            _say(about)

        with sock:
            await serve_http(server, sock, token=secret, on_ready=ready)
    return 0


def _mcp_specs(
    args: argparse.Namespace, namespaces: dict[str, Any]
) -> dict[str, tuple[str, dict[str, str] | None]]:
    """Each --mcp server's command and --mcp-env environment, every misuse of them a
    UsageError before any server is started."""
    specs: dict[str, tuple[str, dict[str, str] | None]] = {}
    for name, command in args.mcp:
        if name in namespaces or name in specs:
            raise UsageError(f"--mcp {name}=...: the namespace {name!r} is already taken")
        specs[name] = (command, None)
    for name, var, value in args.mcp_env:
        if name not in specs:
            known = ", ".join(specs) or "none"
            raise UsageError(
                f"--mcp-env {name}={var}...: no --mcp server is named {name!r} (named: {known})"
            )
        command, env = specs[name]
        if command.startswith(("http://", "https://")):
            raise UsageError(
                f"--mcp-env {name}={var}...: {name!r} is the URL {command}; a server kernelgate "
                "does not start runs with its own environment"
            )
        if value is None:
            value = os.environ.get(var)
            if value is None:
                raise UsageError(
                    f"--mcp-env {name}={var}: ${var} is not set in kernelgate's environment "
                    f"(give {name}={var}=VALUE, or set it)"
                )
        specs[name] = (command, {**(env or {}), var: value})
    for name, (command, _env) in specs.items():
        if not command.startswith(("http://", "https://")):
            try:
                shlex.split(command)
            except ValueError as exc:
                raise UsageError(f"--mcp {name}={command!r}: not a command line: {exc}") from None
    return specs


def _cmd_mcp(args: argparse.Namespace) -> int:
    if args.mcp_env and not args.mcp:
        raise UsageError(
            "--mcp-env goes with --mcp NAME=COMMAND (it sets that server's environment)"
        )
    if not args.bindings and not args.mcp:
        raise UsageError("give --bindings MODULE:ATTR, --mcp NAME=COMMAND, or both")
    if args.http is None and args.token_file is not None:
        raise UsageError("--token-file goes with --http (stdio needs no token)")
    token: tuple[str, str] | None = None
    if args.http is not None:
        try:
            # Lazy, pointing down: the SDK is slow to import and only serving needs it.
            from kernelgate.mcp.server import check_loopback

            check_loopback(args.http[0])
            token = _http_token(args)
        except (ValueError, ImportError) as exc:
            raise UsageError(str(exc)) from None
    namespaces: dict[str, Any] = (
        load_bindings(args.bindings, bindings_search(args), fallback=[os.getcwd()])
        if args.bindings
        else {}
    )
    limits_from_args(args)  # a usage error before anything starts
    record = _session_log(args.record_to) if args.record_to else None
    return run_stoppable(lambda: _serve(args, namespaces, record, token))


def register(subparsers: Any) -> None:
    """Add ``mcp`` to the ``kernelgate`` command."""
    mcp = subparsers.add_parser(
        "mcp",
        help="serve one MCP tool, run_code, that runs programs against your bindings "
        "(stdio, or --http on loopback)",
    )
    mcp.add_argument(
        "--bindings",
        metavar="MODULE:ATTR",
        help="a dict of callables (or of namespaces), or a module: as for kernelgate run",
    )
    add_bindings_path_argument(mcp)
    mcp.add_argument(
        "--language",
        choices=["python", "typescript", "javascript"],
        default="python",
        help="the language of the programs run_code runs (default python)",
    )
    mcp.add_argument("--node", metavar="PATH", help="the Node binary (TypeScript/JavaScript)")
    _add_wrapped_server_arguments(mcp)
    mcp.add_argument(
        "--record-to",
        metavar="DIR",
        help="keep the whole session as one notebook in DIR (a directory that exists)",
    )
    mcp.add_argument(
        "--http",
        type=_http_address,
        metavar="HOST:PORT",
        help="serve streamable HTTP at http://HOST:PORT/mcp (loopback only; port 0 picks a "
        "free one and the URL is printed on stderr) instead of stdio; every request needs "
        "'Authorization: Bearer TOKEN' and a Host naming HOST:PORT (or localhost:PORT)",
    )
    mcp.add_argument(
        "--token-file",
        metavar="FILE",
        help="with --http: the token is kept in FILE (created with a new token, mode 0600, if "
        "missing; it must not be readable by others). Without it the token comes from "
        "$KERNELGATE_MCP_TOKEN, or a new one is printed on stderr at each start",
    )
    mcp.add_argument(
        "--max-chars",
        type=_positive_chars,
        default=MAX_CHARS,
        metavar="N",
        help=f"longest answer text given to the client (default {MAX_CHARS}); the recording "
        "keeps everything",
    )
    mcp.add_argument(
        "--tool-search",
        action="store_true",
        help="also serve the tool search_tools (the bindings that match some words, as a "
        "stub), and let programs call kernelgate.search_tools(...): for more bindings than "
        "one description should hold",
    )
    mcp.add_argument(
        "--max-description-chars",
        type=_positive_chars,
        default=None,
        metavar="N",
        help="longest run_code description (some clients refuse over 1024); past it the "
        "description lists the binding names and points at search_tools",
    )
    add_limit_arguments(mcp, what="each run")
    mcp.set_defaults(func=_cmd_mcp)


def _add_wrapped_server_arguments(mcp: Any) -> None:
    """The --mcp servers kernelgate wraps as namespaces: which, their environment, timeouts."""
    mcp.add_argument(
        "--mcp",
        type=_mcp_server,
        action="append",
        default=[],
        metavar="NAME=COMMAND",
        help="wrap an MCP server as the namespace NAME (repeatable): a command line started "
        "over stdio, or a streamable HTTP URL",
    )
    mcp.add_argument(
        "--mcp-env",
        type=_mcp_env,
        action="append",
        default=[],
        metavar="NAME=VAR=VALUE",
        help="set the environment variable VAR of the --mcp server NAME (repeatable); NAME=VAR "
        "passes on kernelgate's own $VAR (a secret then stays off the command line, which "
        "other users can read). A server gets no other variables but HOME, LOGNAME, PATH, "
        "SHELL, TERM and USER: kernelgate's environment holds secrets it has no business with",
    )
    mcp.add_argument(
        "--call-timeout",
        type=positive_seconds,
        default=60.0,
        metavar="S",
        help="seconds a call to a --mcp server's tool may take (default 60)",
    )
    mcp.add_argument(
        "--connect-timeout",
        type=positive_seconds,
        default=30.0,
        metavar="S",
        help="seconds a --mcp server may take to start, shake hands and list its tools "
        "(default 30)",
    )
