"""``kernelgate mcp``: serve the ``run_code`` tool to MCP clients, over stdio or HTTP.

``--bindings mod:attr`` names the bindings (as ``kernelgate run`` does); ``--mcp
NAME=COMMAND`` wraps an MCP server as the namespace ``NAME`` (a command line, or an
http(s) URL), so kernelgate sits in front of existing servers and turns their many tools
into one ``run_code`` tool. ``--record-to DIR`` keeps the session as one notebook there.
``--http HOST:PORT`` serves streamable HTTP on a loopback address instead of stdio (port
0: a free one; the URL is printed on stderr). Over HTTP every request needs
``Authorization: Bearer <token>``: the token is kept in ``--token-file FILE`` (made, mode
0600, if missing), else taken from ``$KERNELGATE_MCP_TOKEN``, else made afresh and printed
once on stderr.
"""

from __future__ import annotations

import argparse
import os
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
        from kernelgate.mcp.client import connect
        from kernelgate.mcp.server import build_server, listen, serve_http, serve_stdio
    except ImportError as exc:
        raise UsageError(f"kernelgate mcp: {exc} (pip install 'kernelgate[mcp]')") from None

    async with AsyncExitStack() as stack:
        for name, command in args.mcp:
            if name in namespaces:
                raise UsageError(f"--mcp {name}=...: the namespace {name!r} is already taken")
            namespaces[name] = await stack.enter_async_context(
                connect(command, call_timeout=args.call_timeout)
            )
        try:
            gateway = Gateway(
                namespaces=namespaces,
                limits=limits_from_args(args),
                record_to=record,
                language=args.language,
                node=args.node,
            )
        except (NodeUnavailable, TypeError) as exc:
            raise UsageError(f"kernelgate mcp --language {args.language}: {exc}") from None
        await stack.enter_async_context(gateway)
        server = build_server(gateway, max_chars=args.max_chars)
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


def _cmd_mcp(args: argparse.Namespace) -> int:
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
        "--call-timeout",
        type=positive_seconds,
        default=60.0,
        metavar="S",
        help="seconds a call to a --mcp server's tool may take (default 60)",
    )
    add_limit_arguments(mcp, what="each run")
    mcp.set_defaults(func=_cmd_mcp)
