"""``islands bandwidth-table``: Streaming DiLoCo's table of Gbit/s per compute utilisation, reproduced.

For the paper's 1B, 10B and 100B set-ups (bundled scenarios ``streaming-diloco-1b``, ``-10b``,
``-100b``) and each of its rows (Data-Parallel, Vanilla DiLoCo, Streaming DiLoCo, with overlapped
communication, with overlapped FP4 communication), finds the least bandwidth per island that reaches
a compute utilisation of 50, 80, 90, 95 and 99%, and prints it beside the paper's (Douillard et al.
2025, arXiv:2501.18512, Table 4), marking cells more than one step of the paper's grid (1.207x) apart.
``--set`` changes an assumption in every cell (e.g. ``schedule.backward_overlap=0``); ``--output``
writes the table (.csv, .parquet or .json).
"""

from __future__ import annotations

import argparse

from islands.errors import UserError
from islands.io import TABLE_FORMATS

from .common import add_max_events_argument, check_max_events, check_outputs, print_table


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "bandwidth-table",
        description=__doc__,
        help="Streaming DiLoCo's Gbit/s per compute utilisation table, reproduced",
    )
    parser.add_argument(
        "--sizes",
        default="1b,10b,100b",
        metavar="S1,S2",
        help="model sizes, from 1b, 10b, 100b (default: all three)",
    )
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a scenario key in every cell, before the row's own",
    )
    parser.add_argument(
        "--jobs", type=int, default=None, metavar="N", help="worker processes (default: every core)"
    )
    parser.add_argument(
        "--output", metavar="PATH", help="also write the table (.csv, .parquet, .json)"
    )
    add_max_events_argument(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from islands.analysis.planner.bandwidth_table import SIZES, bandwidth_table, table_text

    sizes = tuple(size.strip().lower() for size in args.sizes.split(",") if size.strip())
    unknown = [size for size in sizes if size not in SIZES]
    if unknown or not sizes:
        raise UserError(f"--sizes: each must be one of {', '.join(SIZES)} (got {args.sizes!r})")
    twice = sorted({size for size in sizes if sizes.count(size) > 1})
    if twice:
        raise UserError(
            f"--sizes: {', '.join(twice)} is listed twice (got {args.sizes!r}); name each size once"
        )
    if args.jobs is not None and args.jobs < 1:
        raise UserError(f"--jobs must be >= 1 (got {args.jobs})")
    check_max_events(args.max_events)
    check_outputs({"--output": args.output}, TABLE_FORMATS)
    print_table(
        "bandwidth-table",
        lambda bar: bandwidth_table(
            sizes, tuple(args.overrides), jobs=args.jobs, progress=bar, max_events=args.max_events
        ),
        table_text,
        args.output,
    )
    return 0
