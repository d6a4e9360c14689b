"""``kernelgate replay`` and ``kernelgate timeline``: registered into the ``kernelgate`` CLI."""

from __future__ import annotations

import argparse
import functools
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
    shown,
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
    _add_run_choice(rp, "replay every run of the notebook, with one summary")
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
    rp.add_argument(
        "--debug",
        action="store_true",
        help="step through the replay in a terminal debugger (pdb's commands: n, s, r, c, "
        "p EXPR, locals, bt, l, b LINE, q; 'help' lists them), reading commands from stdin; "
        "it stops at each --break LINE, or at the first statement without one",
    )
    rp.add_argument(
        "--break",
        dest="breaks",
        action="append",
        default=[],
        metavar="LINE",
        help="with --debug: stop before this program line (repeat for more)",
    )
    rp.set_defaults(func=_cmd_replay)

    tl = subparsers.add_parser(
        "timeline",
        help="draw a recorded run's binding calls on a timeline (SVG)",
        description="One bar per binding call, from its start to its end; calls that ran at "
        "the same time sit on separate lanes; the axis is the run's whole duration.",
    )
    tl.add_argument("notebook", help="a run saved by kernelgate (.ipynb), or a session log")
    _add_run_choice(tl, "the notebook must hold one run")
    tl.add_argument(
        "-o",
        "--output",
        metavar="PATH",
        help="where to write the SVG ('-' for stdout; default: next to the notebook)",
    )
    tl.set_defaults(func=_cmd_timeline)


def _add_run_choice(parser: argparse.ArgumentParser, without: str) -> None:
    """--cell, --cell-id and --position: three ways to name one run (one at most)."""
    choice = parser.add_mutually_exclusive_group()
    choice.add_argument(
        "--cell",
        type=int,
        metavar="N",
        help="the run numbered N: run N of a session log, or the cell shown as [N] "
        f"(-1 is the last run); without a choice, {without}",
    )
    choice.add_argument("--cell-id", metavar="ID", help="the run in the cell with this id")
    choice.add_argument(
        "--position",
        type=int,
        metavar="P",
        help="the run in the notebook's P-th cell, counting every cell from 1",
    )


def _chosen(args: argparse.Namespace) -> bool:
    return args.cell is not None or args.cell_id is not None or args.position is not None


def _load(args: argparse.Namespace) -> Any:

    from kernelgate.notebooks.store import NotARunError, load_run

    try:
        return load_run(args.notebook, args.cell, cell_id=args.cell_id, position=args.position)
    except NotARunError as exc:
        raise UsageError(f"{exc} (--cell N, --cell-id ID, --position P)") from None
    except OSError as exc:
        raise UsageError(f"cannot read {args.notebook!r}: {exc.strerror or exc}") from None


def _load_all(path: str) -> list[Any]:

    from kernelgate.notebooks.store import NotARunError, load_runs

    try:
        return load_runs(path)
    except NotARunError as exc:
        raise UsageError(str(exc)) from None
    except OSError as exc:
        raise UsageError(f"cannot read {path!r}: {exc.strerror or exc}") from None


def _cmd_replay(args: argparse.Namespace) -> int:
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
    _check_debug(args)
    runs = [_load(args)] if _chosen(args) else _load_all(args.notebook)
    if len(runs) == 1 and isinstance(runs[0], Exception):
        raise UsageError(str(runs[0]))  # one run, and it cannot be read back: say why
    for option, given in (("--program", args.program), ("--debug", args.debug)):
        if len(runs) > 1 and given:
            raise UsageError(
                f"{option} replays one run, and {args.notebook} holds {len(runs)}: choose "
                "it with --cell N, --cell-id ID or --position P"
            )
    program = None
    if args.program:
        try:
            program = Path(args.program).read_text(encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"cannot read program {args.program!r}: {exc.strerror}") from None
        except UnicodeDecodeError:
            raise UsageError(f"program {args.program!r} is not UTF-8 text") from None
    if args.debug:
        return _debug(args, runs[0], program)
    live = (
        load_bindings(args.bindings, bindings_search(args), fallback=[os.getcwd()])
        if args.live
        else None
    )
    # None: each replay's budget follows its recording (notebooks.replay.replay_budget).
    limits = limits_from_args(args)
    options: dict[str, Any] = {
        "program": program,
        "live": live,
        "python": args.python,
        "limits": limits,
        "live_any": args.live_any,
    }
    reports: list[Any] = []
    for recorded in runs:
        if isinstance(recorded, Exception):  # this run cell cannot be read back
            reports.append(recorded)
            continue
        try:
            reports.append(run_stoppable(functools.partial(replay_async, recorded, **options)))
        except (TypeError, ValueError) as exc:
            raise UsageError(str(exc)) from None
    if len(reports) == 1 and not isinstance(reports[0], Exception):
        report = reports[0]
        if args.json:
            print(json.dumps(report.to_dict(), indent=2, ensure_ascii=False))
        else:
            # The report quotes the recording (its stdout, a crafted file's anything):
            # what a terminal would act on is shown escaped.
            print(shown(report.format()))
        return 1 if report.diverged else 0
    return _print_all(args, reports)


def _check_debug(args: argparse.Namespace) -> None:
    """--debug and --break: what they go with, said before anything is read."""
    if args.breaks and not args.debug:
        raise UsageError("--break LINE goes with --debug: it is where the debugger stops")
    if not args.debug:
        return
    for option, given in (("--live", args.live), ("--json", args.json)):
        if given:
            raise UsageError(
                f"--debug does not go with {option}: a debugged replay answers every call "
                "from the recording and prints its report as text"
            )


def _debug(args: argparse.Namespace, recorded: Any, program: str | None) -> int:
    from .replaydebug import debug_replay

    try:
        return debug_replay(
            recorded,
            program,
            args.breaks,
            limits=limits_from_args(args),
            python=args.python,
            run=run_stoppable,
        )
    except ValueError as exc:  # a --break that is not a line of the program
        raise UsageError(f"--break: {exc}") from None


def _print_all(args: argparse.Namespace, reports: list[Any]) -> int:
    """Every run's report, then one summary; 1 if any run diverged or could not replay."""
    bad = [r for r in reports if isinstance(r, Exception)]
    diverged = [r for r in reports if not isinstance(r, Exception) and r.diverged]
    matched = len(reports) - len(bad) - len(diverged)
    parts = [f"{matched} matched", f"{len(diverged)} diverged"]
    if bad:
        parts.append(f"{len(bad)} could not be replayed")
    summary = f"replayed {len(reports)} runs of {args.notebook}: {', '.join(parts)}"
    if args.json:
        out = {
            "source": args.notebook,
            "diverged": bool(diverged or bad),
            "summary": summary,
            "runs": [
                {"error": str(r)} if isinstance(r, Exception) else r.to_dict() for r in reports
            ],
        }
        print(json.dumps(out, indent=2, ensure_ascii=False))
    else:
        for r in reports:
            print(shown(f"cannot replay: {r}" if isinstance(r, Exception) else r.format()))
            print()
        print(summary)
    return 1 if diverged or bad else 0


def _cmd_timeline(args: argparse.Namespace) -> int:

    from kernelgate.notebooks.store import atomic_write
    from kernelgate.notebooks.timeline import timeline_summary, timeline_svg

    run = _load(args)
    svg = timeline_svg(run)
    if args.output == "-":
        sys.stdout.write(svg)
        return 0
    if args.output:
        out = Path(args.output)
    else:
        src = Path(args.notebook)
        suffix = f"-run{run.run_number}" if _chosen(args) else ""
        out = src.with_name(f"{src.stem}{suffix}.svg")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(out, svg.encode("utf-8"))
    except OSError as exc:
        raise UsageError(f"cannot write {os.fspath(out)!r}: {exc.strerror or exc}") from None
    print(f"wrote {out}: {timeline_summary(run)}")
    return 0
