"""``islands trace FILE -o trace.json``: the simulated run as Chrome Trace Event JSON, one track per
worker and one per link, to open in Perfetto (ui.perfetto.dev) or chrome://tracing."""

from __future__ import annotations

import argparse
import sys

from .common import (
    add_max_events_argument,
    add_scenario_arguments,
    check_max_events,
    path_text,
    read_source,
)


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "trace", help="export a simulated run as Chrome trace JSON (Perfetto)", description=__doc__
    )
    add_scenario_arguments(parser)
    parser.add_argument(
        "-o",
        "--output",
        default="trace.json",
        metavar="JSON",
        type=path_text,
        help="file to write, .json; - for stdout (default trace.json)",
    )
    add_max_events_argument(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from islands.analysis.report.chrome_trace import TRACE_FORMATS, chrome_trace, write_chrome_trace
    from islands.io import check_output, is_stdout, refuse_shared_paths, shown
    from islands.simulator import simulate

    refuse_shared_paths({"--output": args.output}, {"the scenario": args.scenario})
    check_output(args.output, TRACE_FORMATS)
    check_max_events(args.max_events)
    scenario = read_source(args).scenario
    document = chrome_trace(simulate(scenario, args.max_events), scenario)
    path = write_chrome_trace(document, args.output)
    print(
        f"wrote {shown(path)}: {len(document['traceEvents'])} events; open it in https://ui.perfetto.dev "
        "or chrome://tracing",
        file=sys.stderr if is_stdout(path) else sys.stdout,
    )
    return 0
