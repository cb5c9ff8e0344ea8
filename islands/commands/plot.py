"""``islands plot KIND FILE -o out.png``: bandwidth, timeline, breakdown (FILE: a scenario) or heatmap
(FILE: a sweep table written by ``islands sweep``). The extension picks PNG, SVG or PDF; ``-o -``
writes PNG to stdout. Bandwidth and breakdown compare the schedules at equal work (inner steps)."""

from __future__ import annotations

import argparse
import difflib
import sys
from dataclasses import replace

from islands.errors import UserError

from .common import add_max_events_argument, add_scenario_arguments, check_max_events

KINDS = {
    "bandwidth": "rate over time on one access link under DDP, DiLoCo and Streaming DiLoCo",
    "timeline": "Gantt chart of some outer intervals, one row per worker",
    "breakdown": "compute / stall / idle share of each worker's time, per schedule",
    "heatmap": "a summary figure over two parameters of a sweep table",
}


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "plot",
        help="draw a plot (PNG, SVG or PDF): " + ", ".join(KINDS),
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="\n".join(f"  {kind:10} {text}" for kind, text in KINDS.items()),
    )
    parser.add_argument("kind", metavar="KIND", help=" | ".join(KINDS))
    add_scenario_arguments(parser)
    parser.add_argument(
        "-o",
        "--output",
        metavar="PATH",
        help="file to write: .png, .svg or .pdf; - for PNG on stdout (default: KIND.png)",
    )
    parser.add_argument(
        "--size", default="1200x800", metavar="WxH", help="image size in pixels (default 1200x800)"
    )
    parser.add_argument(
        "--worker",
        type=int,
        default=0,
        help="bandwidth: the worker whose link is shown (default 0)",
    )
    parser.add_argument("--direction", default="up", help="bandwidth: up or down (default up)")
    parser.add_argument(
        "--intervals",
        default="0:2",
        metavar="START:STOP",
        help="timeline: outer intervals START to STOP-1 (DDP: steps; default 0:2)",
    )
    parser.add_argument(
        "--all-workers",
        action="store_true",
        help="timeline: a row for every worker (default: a large fleet shows its first "
        "workers, and the plot says how many are left out)",
    )
    parser.add_argument(
        "--x", metavar="KEY", help="heatmap: parameter across (default: the first varying one)"
    )
    parser.add_argument(
        "--y", metavar="KEY", help="heatmap: parameter up (default: the second varying one)"
    )
    parser.add_argument(
        "--metric",
        default="compute_utilisation",
        metavar="COLUMN",
        help="heatmap: summary column to colour by (default compute_utilisation; "
        "e.g. peak_bandwidth_gbps)",
    )
    parser.add_argument(
        "--where",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="heatmap: keep rows with this parameter value (for sweeps of more than two keys)",
    )
    add_max_events_argument(parser)
    parser.set_defaults(handler=run)


def check_kind(kind: str) -> None:
    if kind not in KINDS:
        hint = difflib.get_close_matches(kind, list(KINDS), n=1)
        suffix = f" (did you mean '{hint[0]}'?)" if hint else ""
        raise UserError(f"unknown plot kind '{kind}'{suffix}; kinds: {', '.join(KINDS)}")


def figure_for(args: argparse.Namespace, size_px: tuple[int, int], output: str):
    from islands.analysis.plots.bandwidth import bandwidth_figure, check_link
    from islands.analysis.plots.breakdown import breakdown_figure
    from islands.analysis.plots.heatmap import heatmap_figure
    from islands.analysis.plots.worker_timeline import (
        MAX_WORKERS_SHOWN,
        parse_intervals,
        timeline_figure,
    )
    from islands.analysis.side_by_side import left_out_notes, simulate_schedules
    from islands.analysis.sweep.sweep_table import read_sweep
    from islands.io import refuse_shared_paths
    from islands.scenarios import ScenarioSource
    from islands.simulator import simulate

    if args.kind == "heatmap":
        if args.overrides:
            raise UserError("--set applies to scenarios; a heatmap reads a sweep table")
        refuse_shared_paths({"--output": output}, {"the sweep table": args.scenario})
        return heatmap_figure(
            read_sweep(args.scenario), args.x, args.y, args.metric, args.where, size_px
        )
    source = replace(ScenarioSource.read(args.scenario, args.overrides), max_events=args.max_events)
    refuse_shared_paths({"--output": output}, dict(source.inputs))
    scenario = source.scenario
    if args.kind == "bandwidth":
        check_link(scenario, args.worker, args.direction)
    if args.kind == "timeline":
        intervals = parse_intervals(args.intervals)
        max_workers = None if args.all_workers else MAX_WORKERS_SHOWN
        return timeline_figure(
            simulate(scenario, args.max_events).trace, scenario, intervals, size_px, max_workers
        )
    results = simulate_schedules(source)
    for line in left_out_notes(source):
        print(line, file=sys.stderr)
    if args.kind == "bandwidth":
        return bandwidth_figure(results, scenario, args.worker, args.direction, size_px)
    return breakdown_figure(
        {name: result.summary for name, result in results.items()}, scenario.name, size_px
    )


def run(args: argparse.Namespace) -> int:
    from islands.analysis.plots.style import parse_size, save_figure
    from islands.io import PLOT_FORMATS, check_output, is_stdout, shown

    check_kind(args.kind)
    check_max_events(args.max_events)
    output = args.output or f"{args.kind}.png"
    check_output(output, PLOT_FORMATS)
    size_px = parse_size(args.size)
    path = save_figure(figure_for(args, size_px, output), output)
    print(f"wrote {shown(path)}", file=sys.stderr if is_stdout(path) else sys.stdout)
    return 0
