"""Arguments that several subcommands share."""

from __future__ import annotations

import argparse

from islands.errors import UserError
from islands.simulator import DEFAULT_MAX_EVENTS


def add_scenario_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("scenario", metavar="FILE",
                        help="scenario TOML file, or the name of a bundled scenario (e.g. worked-example)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a scenario key, e.g. schedule.inner_steps=100 or "
                             "island.0.bandwidth_gbps=10 (island.* sets every island); repeatable")


def add_max_events_argument(parser: argparse.ArgumentParser) -> None:
    """``--max-events``, shared by simulate, sweep and plan."""
    parser.add_argument("--max-events", type=float, default=DEFAULT_MAX_EVENTS, metavar="N",
                        help="refuse a run estimated to need more simulator events than this, and stop one "
                             f"that passes it (default {DEFAULT_MAX_EVENTS:.0e}; memory grows about 1 kB "
                             "per event; see docs/limits.md)")


def check_max_events(max_events: float) -> float:
    if not max_events >= 1:
        raise UserError(f"--max-events must be >= 1 (got {max_events:g})")
    return max_events


def print_table(label: str, build, text, output: str | None) -> None:
    """Build a table with a progress bar (``build(progress)``), print ``text(table)``, and write it to
    ``output`` (.csv, .parquet or .json) when given: the published-table commands' common ending."""
    from islands.analysis.progress import ProgressBar
    from islands.io import write_table

    bar = ProgressBar(label)
    try:
        table = build(bar)
    finally:
        bar.close()
    print(text(table))
    if output:
        write_table(table, output)
        print(f"wrote {output}")
