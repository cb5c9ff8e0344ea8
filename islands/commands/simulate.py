"""``islands simulate FILE``: play a scenario through the simulator and print its summary."""

from __future__ import annotations

import argparse
import json

from islands.io import TABLE_FORMATS, write_table
from islands.simulator import PLAYER_NAMES, RunSetup, chosen, play
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
    parser = subparsers.add_parser(
        "simulate", help="simulate a scenario and print its summary", description=__doc__
    )
    add_scenario_arguments(parser)
    add_network_profile_argument(parser)
    parser.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    parser.add_argument(
        "--trace", metavar="PATH", help="also write the trace (.csv, or .parquet with pyarrow)"
    )
    parser.add_argument(
        "--links", metavar="PATH", help="also write each link's rate over time (.csv/.parquet)"
    )
    add_max_events_argument(parser)
    parser.add_argument(
        "--player",
        choices=PLAYER_NAMES,
        help="who plays the run: by default the first that fits (fast paths first, then events); "
        "'events' plays any run event by event",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    check_max_events(args.max_events)
    source = read_source(args)
    check_outputs({"--trace": args.trace, "--links": args.links}, TABLE_FORMATS, source.inputs)
    setup = RunSetup.of(source.scenario, max_events=args.max_events)
    player = chosen(setup, args.player)
    budget = player.budget(setup)
    player.check_outputs(
        setup, budget, bool(args.trace), bool(args.links)
    )  # refused before the run
    result = play(setup, player, budget)
    if args.trace:
        write_table(result.trace, args.trace)
    if args.links:
        write_table(result.links, args.links)
    if args.json:
        print(json.dumps(result.summary, indent=2, allow_nan=False))
        return 0
    summary = result.summary
    print(
        f"{source.scenario.name}: {summary['algorithm']}, {summary['workers']} workers, "
        f"{summary['outer_steps']} outer steps, {summary['inner_steps']} inner steps each, "
        f"network model {summary['network_model']}, played by {player_line(summary['player'])}"
    )
    notes = [
        partial_line(summary),
        churn_line(summary),
        ignored_line(summary, result.events_after_end),
    ]
    print(comparison({summary["algorithm"]: summary}))
    for note in notes:
        if note:
            print(note)
    print()
    print(islands_table(summary))
    return 0


def player_line(player: str) -> str:
    """The player that ran, and for the one that draws its own way, what its figures are."""
    if player == "counts":
        return "counts (a statistical fast path: the event model's rules, drawn in another order; docs/performance.md)"
    return player
