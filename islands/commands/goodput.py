"""``islands goodput [FILE]``: goodput under chip failures at fleet scale, beside the published table.

Plays the grid of Decoupled DiLoCo's chaos simulation (Douillard et al. 2026): 150k to 2.4M chips,
one interruption per chip-year, data parallelism non-elastic and elastic, Decoupled DiLoCo with
M = 2, 4, 8, 16 learners, from one scenario (default: the bundled ``chaos``, whose comments give the
recovery times assumed). Prints simulated goodput with the paper's beside it, and the worst
difference; ``--output`` writes the table (.csv, .parquet or .json).
"""

from __future__ import annotations

import argparse

from islands.errors import UserError
from islands.io import TABLE_FORMATS

from .common import check_outputs, print_table


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "goodput",
        help="goodput under chip failures, beside the Decoupled DiLoCo table",
        description=__doc__,
    )
    parser.add_argument(
        "scenario",
        nargs="?",
        default="chaos",
        metavar="FILE",
        help="scenario file or bundled name (default: chaos)",
    )
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a scenario key before the grid's own, e.g. island.*.recovery_s=120",
    )
    parser.add_argument(
        "--failures",
        type=int,
        default=300,
        metavar="N",
        help="run each cell for about N failures (default 300: about +-2 points)",
    )
    parser.add_argument(
        "--jobs", type=int, default=None, metavar="N", help="worker processes (default: every core)"
    )
    parser.add_argument(
        "--output", metavar="PATH", help="also write the table (.csv, .parquet, .json)"
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from islands.analysis.sweep.goodput import check_failures, goodput_table, table_text
    from islands.scenarios import ScenarioSource

    check_failures(args.failures)
    if args.jobs is not None and args.jobs < 1:
        raise UserError(f"--jobs must be >= 1 (got {args.jobs})")
    source = ScenarioSource.read(args.scenario, args.overrides)
    check_outputs({"--output": args.output}, TABLE_FORMATS, source.inputs)
    print_table(
        "goodput",
        lambda bar: goodput_table(source, failures=args.failures, jobs=args.jobs, progress=bar),
        table_text,
        args.output,
    )
    return 0
