"""``kernelgate replay`` and ``kernelgate timeline``: registered into the ``kernelgate`` CLI."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from .common import (
    UsageError,
    add_bindings_path_argument,
    add_limit_arguments,
    bindings_search,
    limits_from_args,
    load_bindings,
    run_stoppable,
)

__all__ = ["register"]


def register(subparsers: Any) -> None:
    """Add the ``replay`` and ``timeline`` subcommands to ``kernelgate``'s subparsers."""
    rp = subparsers.add_parser(
        "replay",
        help="re-run a recorded run (.ipynb) with binding calls answered from the recording; "
        "exit 1 if it diverges",
        description="Re-run the program of a recorded run in a fresh child. Binding calls are "
        "answered from the recording (matched by binding, arguments and occurrence, not by "
        "arrival order); a call the recording lacks raises ToolError in the program. Prints "
        "what matched and what diverged; exits 0 when the replay matches, 1 when it diverges.",
    )
    rp.add_argument("notebook", help="a run saved by kernelgate (.ipynb), or a session log")
    rp.add_argument(
        "--cell", type=int, metavar="N", help="run N of a session log (from 1; -1 is the last)"
    )
    rp.add_argument(
        "--program", metavar="FILE", help="replay this (edited) program against the recording"
    )
    rp.add_argument(
        "--live",
        action="store_true",
        help="call real bindings (--bindings) and report where their answers differ from "
        "the recorded ones; only calls the recording holds (same binding and arguments) "
        "reach them, any other raises ToolError NotRecorded in the program",
    )
    rp.add_argument(
        "--live-any",
        action="store_true",
        help="with --live: let the program call any real binding with any arguments, "
        "including calls the recording never made",
    )
    rp.add_argument(
        "--bindings", metavar="MODULE:ATTR", help="the real bindings for --live (as for run)"
    )
    add_bindings_path_argument(rp)
    # The replay's limits are the defaults and these, never the recording's.
    add_limit_arguments(rp, "replay")
    rp.add_argument("--python", metavar="PATH", help="interpreter for the child")
    rp.add_argument("--json", action="store_true", help="print the report as JSON")
    rp.set_defaults(func=_cmd_replay)

    tl = subparsers.add_parser(
        "timeline",
        help="draw a recorded run's binding calls on a timeline (SVG)",
        description="One bar per binding call, from its start to its end; calls that ran at "
        "the same time sit on separate lanes; the axis is the run's whole duration.",
    )
    tl.add_argument("notebook", help="a run saved by kernelgate (.ipynb), or a session log")
    tl.add_argument(
        "--cell", type=int, metavar="N", help="run N of a session log (from 1; -1 is the last)"
    )
    tl.add_argument(
        "-o",
        "--output",
        metavar="PATH",
        help="where to write the SVG ('-' for stdout; default: next to the notebook)",
    )
    tl.set_defaults(func=_cmd_timeline)


def _load(path: str, cell: int | None) -> Any:

    from kernelgate.notebooks.store import NotARunError, load_run

    try:
        return load_run(path, cell)
    except NotARunError as exc:
        raise UsageError(str(exc)) from None
    except OSError as exc:
        raise UsageError(f"cannot read {path!r}: {exc.strerror or exc}") from None


def _cmd_replay(args: argparse.Namespace) -> int:
    from kernelgate.model.limits import Limits
    from kernelgate.notebooks.replay import replay_async

    if args.live_any and not args.live:
        raise UsageError("--live-any goes with --live (and --bindings)")
    if args.live and not args.bindings:
        raise UsageError("--live needs --bindings MODULE:ATTR: the real bindings to call")
    if args.bindings and not args.live:
        raise UsageError(
            "--bindings is only used with --live; without --live, calls are answered from "
            "the recording"
        )
    recorded = _load(args.notebook, args.cell)
    program = None
    if args.program:
        try:
            program = Path(args.program).read_text(encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"cannot read program {args.program!r}: {exc.strerror}") from None
        except UnicodeDecodeError:
            raise UsageError(f"program {args.program!r} is not UTF-8 text") from None
    live = (
        load_bindings(args.bindings, bindings_search(args), fallback=[os.getcwd()])
        if args.live
        else None
    )
    limits = limits_from_args(args) or Limits()
    try:
        report = run_stoppable(
            lambda: replay_async(
                recorded,
                program=program,
                live=live,
                python=args.python,
                limits=limits,
                live_any=args.live_any,
            )
        )
    except (TypeError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    if args.json:
        print(json.dumps(report.to_dict(), indent=2, ensure_ascii=False))
    else:
        print(report.format())
    return 1 if report.diverged else 0


def _cmd_timeline(args: argparse.Namespace) -> int:

    from kernelgate.notebooks.store import atomic_write
    from kernelgate.notebooks.timeline import timeline_summary, timeline_svg

    run = _load(args.notebook, args.cell)
    svg = timeline_svg(run)
    if args.output == "-":
        sys.stdout.write(svg)
        return 0
    if args.output:
        out = Path(args.output)
    else:
        src = Path(args.notebook)
        suffix = f"-run{run.run_number}" if args.cell is not None else ""
        out = src.with_name(f"{src.stem}{suffix}.svg")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(out, svg.encode("utf-8"))
    except OSError as exc:
        raise UsageError(f"cannot write {os.fspath(out)!r}: {exc.strerror or exc}") from None
    print(f"wrote {out}: {timeline_summary(run)}")
    return 0
