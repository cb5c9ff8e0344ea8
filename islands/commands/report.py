"""``islands report FILE -o report.html``: one self-contained HTML page (images, data and script embedded;
it fetches nothing) with the summary under each schedule, a what-if panel of sliders over H, P, bits,
bandwidth and M and any key marked with --axis (every combination simulated when the page is
written), the plots and the plan, for sharing with a team. See docs/report.md."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace

from .common import (
    add_dask_argument,
    add_max_events_argument,
    add_network_profile_argument,
    add_scenario_arguments,
    check_max_events,
    check_outputs,
    dask_executor,
    read_source,
)


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "report", help="write a self-contained HTML report of a scenario", description=__doc__
    )
    add_scenario_arguments(parser)
    add_network_profile_argument(parser)
    parser.add_argument(
        "-o",
        "--output",
        default="report.html",
        metavar="HTML",
        help="file to write, .html; - for stdout (default report.html)",
    )
    parser.add_argument(
        "--target-utilisation",
        type=float,
        default=0.95,
        metavar="FRACTION",
        help="the plan's target compute utilisation (default 0.95)",
    )
    parser.add_argument(
        "--sweep",
        metavar="TABLE",
        help="heatmap from this sweep table (islands sweep) instead of a DiLoCo H x bandwidth sweep",
    )
    parser.add_argument(
        "--where",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="with --sweep: keep the table's rows with this parameter value (for sweeps of "
        "more than two keys); repeatable",
    )
    parser.add_argument(
        "--no-fragments",
        dest="fragments",
        action="store_false",
        help="leave the fragments x precision search out of the plan (faster)",
    )
    parser.add_argument(
        "--seeds",
        type=int,
        default=1,
        metavar="N",
        help="average the plan's utilisations over N seeds (for jitter and churn; default 1)",
    )
    parser.add_argument(
        "--axis",
        action="append",
        default=[],
        metavar="KEY=V1,V2,...",
        help="one more what-if slider: a scenario key (as --set names it) over these values, "
        "e.g. island.0.latency_ms=0,50,100; it replaces the built-in slider of the same key; "
        "repeatable",
    )
    parser.add_argument(
        "--jobs", type=int, default=None, metavar="N", help="worker processes (default: every core)"
    )
    add_max_events_argument(parser)
    add_dask_argument(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from islands.analysis.planner.plan import MAX_SEEDS, check_target
    from islands.analysis.progress_bar import Stages
    from islands.analysis.report.html_report import REPORT_FORMATS, build_report, write_report
    from islands.analysis.report.marked_axes import check_marked, parse_axis
    from islands.analysis.sweep.sweep_table import check_sweep_of, read_sweep
    from islands.errors import UserError
    from islands.io import check_output, is_stdout, shown
    from islands.simulator import guard

    check_output(args.output, REPORT_FORMATS)
    check_target(args.target_utilisation)
    if not 1 <= args.seeds <= MAX_SEEDS:
        raise UserError(f"--seeds must be in [1, {MAX_SEEDS}] (got {args.seeds})")
    if args.jobs is not None and args.jobs < 1:
        raise UserError(f"--jobs must be >= 1 (got {args.jobs})")
    if args.where and not args.sweep:
        raise UserError("--where picks rows of a sweep table: give one with --sweep TABLE")
    check_max_events(args.max_events)
    source = replace(read_source(args), max_events=args.max_events)
    guard(source.scenario, args.max_events)  # the scenario's own run, before the report's many
    marked = [parse_axis(text) for text in args.axis]
    check_marked(source, marked)
    check_outputs(
        {"--output": args.output}, REPORT_FORMATS, [*source.inputs, ("--sweep", args.sweep)]
    )
    sweep_table = read_sweep(args.sweep) if args.sweep else None
    if sweep_table is not None:
        check_sweep_of(sweep_table, source.scenario.name, args.sweep)
    stages = Stages("report")
    try:
        with dask_executor(args.dask) as executor:
            text = build_report(
                source,
                (),
                args.target_utilisation,
                sweep_table=sweep_table,
                fragments=args.fragments,
                seeds=args.seeds,
                jobs=args.jobs,
                progress=stages,
                where=args.where,
                executor=executor,
                marked=marked,
            )
    finally:
        stages.close()
    path = write_report(args.output, text)
    print(
        f"wrote {shown(path)} ({len(text) / 1e6:.2f} MB, {stages.elapsed_s:.1f} s)",
        file=sys.stderr if is_stdout(path) else sys.stdout,
    )
    return 0
