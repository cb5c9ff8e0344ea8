"""Goodput under chip failures at fleet scale, beside the table Decoupled DiLoCo published.

Douillard et al. 2026 (arXiv 2604.21428) simulate a fleet of 150k to 2.4M chips, each interrupted
once a year, under data parallelism (non-elastic: a failure stops the job; elastic: the survivors
shrink) and Decoupled DiLoCo with M = 2, 4, 8, 16 learners, and report goodput. ``goodput_table``
plays the same grid through the simulator from one scenario (``chaos`` by default): DP as
``DP_WORKERS`` data-parallel workers of chips / DP_WORKERS chips each, Decoupled as M learners of
chips / M; every cell runs long enough for about ``failures`` failures (its compute seconds x its
failure rate), so the cells are equally precise.
"""

from __future__ import annotations

import math
import re
from concurrent.futures import Executor
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from islands.errors import UserError
from islands.scenarios import ScenarioSource, as_source
from islands.schedules import DDP, SCHEDULES, Decoupled, switch_to
from islands.tables import CUT_SHORT

from ..parallel import Progress, run_tasks

CHIPS = (150_000, 300_000, 600_000, 1_200_000, 2_400_000)
DP_WORKERS = 8
LEARNERS = (2, 4, 8, 16)
DEFAULT_FAILURES = 300
MAX_FAILURES = (
    10_000  # per cell: about +-0.3 points, if the grid's events allow it (MAX_GRID_EVENTS)
)
MAX_CELL_EVENTS = (
    1e8  # the simulator's estimate for one cell (the default grid's largest: about 3e6)
)
# The simulator's estimate for the whole grid: the default (chaos, 300 failures) is about 1.8e7, some
# CPU-minutes; chaos at 10,000 failures would be 6e8, hours. This allows chaos about 1,000 failures.
MAX_GRID_EVENTS = 6e7

# Table 1 of the paper: goodput (%) with one interruption per chip-year, by method and fleet size, as
# transcribed in public notes on it (the grid from one; the 1.2M and 2.4M columns confirmed by others)
PAPER_GOODPUT_PERCENT = {
    "DP, non-elastic": (72, 57, 38, 27, 18),
    "DP, elastic": (88, 80, 69, 58, 40),
    "Decoupled, M=2": (94, 88, 80, 70, 54),
    "Decoupled, M=4": (96, 93, 89, 82, 73),
    "Decoupled, M=8": (98, 96, 94, 88, 80),
    "Decoupled, M=16": (99, 98, 96, 93, 86),
}


@dataclass(frozen=True)
class Method:
    label: str
    algorithm: str
    workers: int
    elastic: bool = False


METHODS = (
    Method("DP, non-elastic", DDP.name, DP_WORKERS),
    Method("DP, elastic", DDP.name, DP_WORKERS, elastic=True),
    *(Method(f"Decoupled, M={m}", Decoupled.name, m) for m in LEARNERS),
)


def cell_overrides(
    source: ScenarioSource, method: Method, chips: int, failures: int
) -> tuple[str, ...]:
    """The scenario as ``method`` on a fleet of ``chips``, run for about ``failures`` failures."""
    base = source.scenario
    island = base.islands[0]
    assert island.chip_mtbf_s is not None, "the grid's fleet has chip failures (check_fleet)"
    rate_per_s = chips / island.chip_mtbf_s
    steps = math.ceil(failures / rate_per_s / island.step_time_s)
    period = SCHEDULES[method.algorithm].period_steps(base.schedule)
    per_step_checkpoint = ("schedule.inner_steps=1",) if method.algorithm == DDP.name else ()
    return (
        *per_step_checkpoint,
        *switch_to(method.algorithm),
        f"schedule.elastic={str(method.elastic).lower()}",
        f"island.0.replicas={method.workers}",
        f"island.0.chips={chips // method.workers}",
        f"schedule.outer_steps={math.ceil(steps / period)}",
    )


def check_fleet(source: ScenarioSource) -> None:
    """The grid splits one island's chips among its workers, at that island's failure rate."""
    islands = source.scenario.islands
    if len(islands) != 1:
        raise UserError(
            f"{source.source}: island: the goodput grid splits one island's fleet among its "
            f"workers; this scenario has {len(islands)} islands"
        )
    if islands[0].chip_mtbf_s is None:
        raise UserError(
            f"{source.source}: island.0.chip_mtbf_s: is required for the goodput grid "
            "(one chip's mean time between interruptions)"
        )


GRID_KEYS = re.compile(
    r"(island\.[^.=]+\.(chips|replicas)|schedule\.(algorithm|elastic|outer_steps))$"
)


def check_grid_keys(source: ScenarioSource) -> None:
    """Refuse, in one line, a ``--set`` of a key every cell sets itself (the fleet's split, the method,
    the run's length): it would be overwritten, silently."""
    for override in source.overrides:
        key = override.split("=", 1)[0].strip()
        if GRID_KEYS.match(key):
            raise UserError(
                f"--set {override}: the goodput grid sets {key} itself in every cell (chips split "
                "among the method's workers, its schedule, a run of about --failures failures); "
                "leave it out"
            )


def goodput_cell(source: ScenarioSource, overrides: tuple[str, ...]) -> dict:
    from islands.simulator import simulate

    summary = simulate(source.variant(*overrides), max_events=MAX_CELL_EVENTS).summary
    return {
        "goodput": summary["goodput"],
        "failures": summary["failures"],
        "wall_time_s": summary["wall_time_s"],
        "incomplete_reason": summary["incomplete_reason"],
    }


def check_cell_events(source: ScenarioSource, overrides: tuple[str, ...], cell: str) -> float:
    """Price a cell before any runs: refuse, in one line, one the simulator estimates beyond
    ``MAX_CELL_EVENTS``; else its estimated events."""
    from islands.simulator.budget import estimate

    events = estimate(source.variant(*overrides)).events
    if events > MAX_CELL_EVENTS:
        raise UserError(
            f"{source.source}: the goodput cell {cell} would need about {events:.3g} simulator events, "
            f"above {MAX_CELL_EVENTS:g}: lower --failures, or lengthen island.0.step_time_s"
        )
    return events


def check_grid_events(source: ScenarioSource, failures: int, events: float) -> None:
    """Refuse, in one line, a grid the simulator estimates beyond ``MAX_GRID_EVENTS`` in all (hours of
    CPU), naming the --failures that fits (the events grow in proportion to the failures)."""
    if events > MAX_GRID_EVENTS:
        fits = math.floor(failures * MAX_GRID_EVENTS / events)
        advice = f"use --failures {fits} or fewer" if fits >= 1 else "lengthen island.0.step_time_s"
        raise UserError(
            f"{source.source}: --failures {failures}: the goodput grid would need about {events:.3g} "
            f"simulator events in all, above the {MAX_GRID_EVENTS:g} (about an hour of CPU) it "
            f"allows: {advice}"
        )


def check_failures(failures: int) -> None:
    if not 1 <= failures <= MAX_FAILURES:
        raise UserError(
            f"--failures must be in [1, {MAX_FAILURES}] (got {failures}): each cell runs for about "
            "that many failures"
        )


def goodput_table(
    scenario: str | Path | ScenarioSource = "chaos",
    failures: int = DEFAULT_FAILURES,
    chips: tuple[int, ...] = CHIPS,
    methods: tuple[Method, ...] = METHODS,
    executor: Executor | None = None,
    jobs: int | None = None,
    progress: Progress | None = None,
) -> pd.DataFrame:
    """One row per (method, chips): simulated goodput, the paper's, their difference in points."""
    check_failures(failures)
    source = as_source(scenario)
    check_grid_keys(source)
    check_fleet(source)
    cells = [(method, n) for method in methods for n in chips]
    tasks = [(source, cell_overrides(source, method, n, failures)) for method, n in cells]
    events = [
        check_cell_events(source, overrides, f"{method.label}, {n / 1e6:g}M chips")
        for (method, n), (_, overrides) in zip(cells, tasks)
    ]
    check_grid_events(source, failures, sum(events))
    results = run_tasks(goodput_cell, tasks, executor=executor, jobs=jobs, progress=progress)
    rows = []
    for (method, n), result in zip(cells, results):
        paper = PAPER_GOODPUT_PERCENT[method.label][CHIPS.index(n)] if n in CHIPS else None
        simulated = None if result["goodput"] is None else 100 * result["goodput"]
        rows.append(
            {
                "method": method.label,
                "chips": n,
                "simulated_percent": simulated,
                "paper_percent": paper,
                "difference_points": None
                if paper is None or simulated is None
                else simulated - paper,
                "failures": result["failures"],
                "wall_time_s": result["wall_time_s"],
                "incomplete_reason": result["incomplete_reason"],
            }
        )
    return pd.DataFrame(rows)


def table_text(table: pd.DataFrame) -> str:
    """Methods down, fleet sizes across: "simulated (paper)" in each cell, then the worst difference."""
    columns = sorted(table["chips"].unique())
    lines = [
        "| method | " + " | ".join(f"{n / 1e6:g}M chips" for n in columns) + " |",
        "| --- |" + " --- |" * len(columns),
    ]
    for label, rows in table.groupby("method", sort=False):
        by_chips = rows.set_index("chips")
        cells = [
            f"{percent(by_chips.at[n, 'simulated_percent'])} ({percent(by_chips.at[n, 'paper_percent'])})"
            for n in columns
        ]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    complete = table[table["simulated_percent"].notna()]
    worst = complete["difference_points"].abs().max()
    lines.append(
        f"\nsimulated (paper); worst difference {percent_points(worst)} over {len(complete)} "
        f"complete cells"
    )
    for row in table[table["simulated_percent"].isna()].itertuples():
        lines.append(
            f"{row.method}, {row.chips / 1e6:g}M chips: {CUT_SHORT} ({row.incomplete_reason}), "
            "so no goodput"
        )
    return "\n".join(lines)


def percent(value: float | None) -> str:
    return CUT_SHORT if value is None or pd.isna(value) else f"{value:.0f}%"


def percent_points(value: float) -> str:
    return "none" if pd.isna(value) else f"{value:.1f} points"
