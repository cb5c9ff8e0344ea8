"""``islands simulate FILE``: play a scenario through the simulator and print its summary."""

from __future__ import annotations

import argparse
import json

from islands.io import TABLE_FORMATS, write_table
from islands.simulator.engine import Simulation
from islands.simulator.lockstep import check_rows
from islands.simulator.returning import no_rows
from islands.tables import churn_line, comparison, ignored_line, islands_table, partial_line

from .common import (
    add_max_events_argument,
    add_network_profile_argument,
    add_scenario_arguments,
    check_max_events,
    check_outputs,
    read_source,
)


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("simulate", help="simulate a scenario and print its summary",
                                   description=__doc__)
    add_scenario_arguments(parser)
    add_network_profile_argument(parser)
    parser.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    parser.add_argument("--trace", metavar="PATH", help="also write the trace (.csv, or .parquet with pyarrow)")
    parser.add_argument("--links", metavar="PATH", help="also write each link's rate over time (.csv/.parquet)")
    add_max_events_argument(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    check_max_events(args.max_events)
    source = read_source(args)
    check_outputs({"--trace": args.trace, "--links": args.links}, TABLE_FORMATS, source.inputs)
    simulation = Simulation(source.scenario, max_events=args.max_events)
    if args.trace and simulation.lockstep:
        check_rows(simulation)  # a trace too large to write is refused before the run
    if (args.trace or args.links) and simulation.counted:
        no_rows(source.scenario)  # a run on counts keeps none: refused before the run
    result = simulation.run()
    if args.trace:
        write_table(result.trace, args.trace)
    if args.links:
        write_table(result.links, args.links)
    if args.json:
        print(json.dumps(result.summary, indent=2, allow_nan=False))
        return 0
    summary = result.summary
    print(f"{source.scenario.name}: {summary['algorithm']}, {summary['workers']} workers, "
          f"{summary['outer_steps']} outer steps, {summary['inner_steps']} inner steps each, "
          f"network model {summary['network_model']}")
    notes = [partial_line(summary), churn_line(summary), ignored_line(summary, result.events_after_end),
             summary.get("played") and f"played on {summary['played']}"]
    print(comparison({summary["algorithm"]: summary}))
    for note in notes:
        if note:
            print(note)
    print()
    print(islands_table(summary))
    return 0
