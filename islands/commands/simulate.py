"""``islands simulate FILE``: play a scenario through the simulator and print its summary."""

from __future__ import annotations

import argparse
import json

from islands.io import write_table
from islands.scenarios import load
from islands.simulator import simulate
from islands.tables import churn_line, comparison, islands_table

from .common import add_scenario_arguments


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("simulate", help="simulate a scenario and print its summary",
                                   description=__doc__)
    add_scenario_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    parser.add_argument("--trace", metavar="PATH", help="also write the trace (.csv, or .parquet with pyarrow)")
    parser.add_argument("--links", metavar="PATH", help="also write each link's rate over time (.csv/.parquet)")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    scenario = load(args.scenario, args.overrides)
    result = simulate(scenario)
    if args.trace:
        write_table(result.trace, args.trace)
    if args.links:
        write_table(result.links, args.links)
    if args.json:
        print(json.dumps(result.summary, indent=2))
        return 0
    summary = result.summary
    print(f"{scenario.name}: {summary['algorithm']}, {summary['workers']} workers, "
          f"{summary['outer_steps']} outer steps, {summary['inner_steps']} inner steps each, "
          f"network model {summary['network_model']}")
    print(comparison({summary["algorithm"]: summary}))
    churn = churn_line(summary)
    if churn:
        print(churn)
    print()
    print(islands_table(summary))
    return 0
