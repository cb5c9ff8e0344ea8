"""``islands sweep FILE --grid KEY=V1,V2 ...``: simulate every combination, write a tidy table, print the best."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from islands.analysis.display_units import percent_text, rate_text
from islands.analysis.parallel import default_jobs
from islands.analysis.progress_bar import ProgressBar
from islands.errors import UserError
from islands.io import TABLE_FORMATS, check_not_folder, safe_name
from islands.numbers import is_number
from islands.scenarios import ScenarioSource
from islands.simulator import simulate
from islands.tables import duration, render, size

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

if TYPE_CHECKING:  # pandas and the sweep's tables load with the handler (islands/cli.py)
    import pandas as pd

FIGURES = (
    ("utilisation", "compute_utilisation", percent_text),
    ("wall time", "wall_time_s", duration),
    ("stall/worker", "stall_s", duration),
    ("idle/worker", "idle_s", duration),
    ("sent/worker", "bytes_per_worker", size),
    ("avg bw", "avg_bandwidth_gbps", rate_text),
    ("peak bw", "peak_bandwidth_gbps", rate_text),
)
INVALID_EXAMPLES = 3


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "sweep", help="simulate a grid of scenario variants and tabulate them", description=__doc__
    )
    add_scenario_arguments(parser)
    add_network_profile_argument(parser)
    parser.add_argument(
        "--grid",
        action="append",
        required=True,
        metavar="KEY=V1,V2,...",
        help="a key and its values, e.g. schedule.inner_steps=50,100,500 or "
        "island.*.bandwidth_gbps=0.1,1,10; repeatable (every combination runs)",
    )
    parser.add_argument(
        "--seeds",
        type=int,
        default=1,
        metavar="N",
        help="run each combination with N seeds, from the scenario's seed up (default 1)",
    )
    parser.add_argument(
        "-o",
        "--output",
        metavar="PATH",
        help="table to write: PATH.csv, and PATH.parquet where pyarrow is installed "
        "(default: <scenario name>-sweep.csv)",
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=None,
        metavar="N",
        help=f"worker processes (default: every core, here {default_jobs()})",
    )
    parser.add_argument(
        "--rank-by",
        default="compute_utilisation",
        metavar="COLUMN",
        help="summary column that orders the best rows (utilisation: highest first; "
        "anything else: lowest first)",
    )
    parser.add_argument(
        "--top", type=int, default=5, metavar="N", help="best rows to print (default 5)"
    )
    add_dask_argument(parser)
    add_max_events_argument(parser)
    parser.set_defaults(handler=run)


def cell(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def best_table(best: pd.DataFrame, rank_by: str = "compute_utilisation", seeds: int = 1) -> str:
    """The best rows, one column per figure; over several seeds, the spread of ``rank_by`` beside them
    (its sample standard deviation over the seeds: ``best_rows``)."""
    from islands.analysis.sweep.sweep_table import SPREAD_SUFFIX, parameter_columns

    keys = [column for column in parameter_columns(best) if column != "seed"]
    figures: list[tuple[str, str, Callable[[Any], str]]] = [
        (label, column, fmt) for label, column, fmt in FIGURES if column in best
    ]
    if seeds > 1:
        fmt = next((f for _, c, f in FIGURES if c == rank_by), cell)
        figures.append((f"sd of {rank_by} over seeds", rank_by + SPREAD_SUFFIX, fmt))
    header = [*keys, *(label for label, _, _ in figures)]
    rows = [
        [*(cell(row[k]) for k in keys), *(fmt(row[c]) for _, c, fmt in figures)]
        for _, row in best.iterrows()
    ]
    return render(rows, header)


def report_invalid(table: pd.DataFrame) -> None:
    invalid = table[~table["valid"]]
    if invalid.empty:
        return
    examples = list(dict.fromkeys(invalid["error"]))[:INVALID_EXAMPLES]
    print(
        f"{len(invalid)} of {len(table)} combinations are not valid scenarios and did not run "
        f"(rows with valid=False), e.g.:"
    )
    for example in examples:
        print(f"  {example}")


def report_cut_short(table: pd.DataFrame) -> None:
    from islands.analysis.sweep.sweep_table import cut_short

    short = table[cut_short(table)]
    if short.empty:
        return
    print(
        f"{len(short)} of {len(table)} runs were cut short by churn (rows with complete=False): they have no "
        "utilisation and their combinations are not ranked, e.g.:"
    )
    for example in list(dict.fromkeys(short["incomplete_reason"]))[:INVALID_EXAMPLES]:
        print(f"  {example}")


def check_options(args: argparse.Namespace) -> None:
    """One line, exit 2, for counts that cannot be."""
    if args.jobs is not None and args.jobs < 1:
        raise UserError(f"--jobs must be >= 1 (got {args.jobs})")
    if args.top < 1:
        raise UserError(f"--top must be >= 1 (got {args.top})")
    if args.seeds < 1:
        raise UserError(f"--seeds must be >= 1 (got {args.seeds})")
    check_max_events(args.max_events)


def is_figure(value: Any) -> bool:
    """A number, or a utilisation left null because the run was cut short."""
    return value is None or is_number(value)


def check_rank_by(source: ScenarioSource, column: str, max_events: float) -> None:
    """Fail before the sweep, not after it, when --rank-by names no numeric summary figure."""
    from islands.analysis.sweep.runner import flatten_summary

    summary = flatten_summary(simulate(source.scenario, max_events).summary)
    numeric = [
        key for key, value in summary.items() if is_figure(value) and key != "incomplete_reason"
    ]
    if column not in numeric:
        raise UserError(
            f"--rank-by {column}: not a numeric summary figure (e.g. {', '.join(numeric[:6])})"
        )


def run(args: argparse.Namespace) -> int:
    from islands.analysis.sweep.runner import run_sweep
    from islands.analysis.sweep.sweep_table import best_rows, maximised, sweep_paths, write_sweep

    check_options(args)
    source = read_source(args)
    output = args.output or f"{safe_name(source.scenario.name)}-sweep.csv"
    check_not_folder(output)
    check_outputs(
        dict(zip(("--output", "--output's Parquet copy"), map(str, sweep_paths(output)))),
        TABLE_FORMATS,
        source.inputs,
    )
    check_rank_by(source, args.rank_by, args.max_events)
    bar = ProgressBar("sweep")
    try:
        with dask_executor(args.dask) as executor:
            table = run_sweep(
                source,
                args.grid,
                seeds=args.seeds,
                jobs=args.jobs,
                progress=bar,
                max_events=args.max_events,
                executor=executor,
            )
    finally:
        bar.close()
    written = write_sweep(table, output)
    runs = int(table["valid"].sum())
    print(f"{runs} runs in {bar.elapsed_s:.1f} s; wrote {', '.join(map(str, written))}")
    report_invalid(table)
    report_cut_short(table)
    best = best_rows(table, args.rank_by, args.top)
    if best.empty:
        print("\nNo combination finished every run: nothing to rank.")
        return 0
    order = "highest" if maximised(args.rank_by) else "lowest"
    seed_count = table.loc[table["valid"], "seed"].nunique()
    seeds = (
        f", mean over {seed_count} seeds; sd: the sample standard deviation over them"
        if seed_count > 1
        else ""
    )
    print(f"\nBest {len(best)} by {args.rank_by} ({order} first{seeds}):")
    print(best_table(best, args.rank_by, seed_count))
    return 0
