"""Sweeps: play a scenario over every combination of a grid and a number of seeds, one row per run.

    >>> from islands.analysis.sweep.runner import run_sweep
    >>> table = run_sweep("worked-example", {"schedule.inner_steps": [100, 500], "schedule.fragments": [1, 10]})

The table is tidy: column ``run``, one column per grid key (named as the key, e.g.
``schedule.inner_steps``), ``seed``, ``valid`` and ``error``, then every scalar of the run's summary
(``compute_utilisation``, ``wall_time_s``, ...; each island's figures as ``islands.<name>.<key>``).
A combination that breaks a rule tying keys together (H not divisible by P, tau >= H / P), or that
the simulator's resource guard refuses (more than ``max_events`` events), is not run: its row has
``valid`` False, the message in ``error`` and empty figures. A run that churn cut short has
``complete`` False, the reason in ``incomplete_reason`` and no utilisation; ``best_rows`` leaves it out.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from islands.errors import UserError
from islands.numbers import is_whole_number
from islands.scenarios import Scenario, ScenarioError, ScenarioSource, as_source
from islands.simulator import DEFAULT_MAX_EVENTS, guard, simulate

from ..parallel import Progress, default_jobs, run_tasks
from .grid import Axis, combinations, make_axes

# Chunks per process: enough for a smooth progress bar and load balance, few enough to keep
# inter-process overhead small next to a 10-50 ms run.
CHUNKS_PER_JOB = 8
MAX_CHUNK_RUNS = 16
MAX_RUNS = (
    100_000  # a sweep's combinations x seeds: about a day of runs at a second each on one core
)


@dataclass(frozen=True)
class PlannedRun:
    """One row of the sweep before it runs: its parameters and its scenario, or why it cannot run."""

    params: dict[str, Any]
    scenario: Scenario | None
    error: str = ""


def is_scalar(value: Any) -> bool:
    return value is None or isinstance(value, (bool, int, float, str, np.generic))


def flatten_summary(summary: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Scalars as they are; nested dicts as ``key.sub``; lists of named dicts (``islands``) as
    ``key.<name>.sub``. Other lists have no column and are dropped."""
    flat: dict[str, Any] = {}
    for key, value in summary.items():
        name = f"{prefix}{key}"
        if is_scalar(value):
            flat[name] = value
        elif isinstance(value, Mapping):
            flat.update(flatten_summary(value, f"{name}."))
        elif isinstance(value, list) and all(
            isinstance(item, Mapping) and "name" in item for item in value
        ):
            for item in value:
                rest = {k: v for k, v in item.items() if k != "name"}
                flat.update(flatten_summary(rest, f"{name}.{item['name']}."))
    return flat


def simulate_chunk(scenarios: Sequence[Scenario], max_events: float) -> list[dict[str, Any]]:
    """Run scenarios one after another (one task of the pool); return their flattened summaries."""
    return [flatten_summary(simulate(scenario, max_events).summary) for scenario in scenarios]


def seed_values(source: ScenarioSource, axes: Sequence[Axis], seeds: int) -> list[int]:
    """``seeds`` consecutive seeds from the scenario's own seed."""
    if seeds < 1:
        raise UserError(f"--seeds must be >= 1 (got {seeds})")
    if seeds > 1 and any(axis.key == "seed" for axis in axes):
        raise UserError(
            "--grid seed and --seeds cannot be combined: list the seeds in --grid seed=... instead"
        )
    if any(axis.key == "seed" for axis in axes):
        return []
    first = source.scenario.seed
    return list(range(first, first + seeds))


def planned_runs(
    source: ScenarioSource, axes: Sequence[Axis], seeds: int, max_events: float = DEFAULT_MAX_EVENTS
) -> list[PlannedRun]:
    """Every combination of the grid and the seeds, validated and within the resource guard; invalid
    ones carry their reason."""
    runs = []
    check_run_count(axes, seeds)
    seed_list: list[int | None] = [*seed_values(source, axes, seeds)] or [None]
    for params, overrides in combinations(axes):
        for seed in seed_list:
            row = dict(params) if seed is None else {**params, "seed": seed}
            extra = overrides if seed is None else [*overrides, f"seed={seed}"]
            try:
                scenario = source.variant(*extra)
                guard(scenario, max_events)
                runs.append(PlannedRun(row, scenario))
            except ScenarioError as exc:
                runs.append(PlannedRun(row, None, str(exc)))
    return runs


def check_run_count(axes: Sequence[Axis], seeds: int) -> None:
    """Refuse, before any run is planned, a grid whose combinations x seeds pass ``MAX_RUNS``."""
    runs = math.prod(len(axis.values) for axis in axes) * seeds
    if runs > MAX_RUNS:
        sizes = " x ".join(
            [*(str(len(axis.values)) for axis in axes), *([f"{seeds} seeds"] if seeds > 1 else [])]
        )
        raise UserError(
            f"--grid: {sizes} = {runs:,} runs, above the {MAX_RUNS:,} a sweep runs: "
            "fewer values or seeds, or several sweeps"
        )


def chunked(items: list[Any], jobs: int) -> list[list[Any]]:
    size = max(1, min(MAX_CHUNK_RUNS, math.ceil(len(items) / (jobs * CHUNKS_PER_JOB))))
    return [items[i : i + size] for i in range(0, len(items), size)]


def run_sweep(
    scenario: str | Path | ScenarioSource,
    grid: Mapping[str, Sequence[Any]] | Sequence[str],
    seeds: int = 1,
    overrides: Sequence[str] = (),
    executor: Executor | None = None,
    jobs: int | None = None,
    progress: Progress | None = None,
    max_events: float = DEFAULT_MAX_EVENTS,
) -> pd.DataFrame:
    """Simulate every combination of ``grid`` (``{key: values}`` or ``["key=v1,v2", ...]``) and seed.

    Runs go to ``executor`` (any ``concurrent.futures`` executor) or a local pool of ``jobs``
    processes; ``progress(done, total)`` counts runs. Raises ``UserError`` for a bad key or value, or
    when no combination is valid; ``max_events`` is the simulator's resource guard for every run.
    """
    source = as_source(scenario, overrides)
    axes = make_axes(source, grid)
    runs = planned_runs(source, axes, seeds, max_events)
    valid = [run for run in runs if run.scenario is not None]
    if not valid:
        raise UserError(f"no combination of the grid is a valid scenario, e.g. {runs[0].error}")
    batches = chunked([run.scenario for run in valid], jobs or default_jobs())
    results = run_tasks(
        simulate_chunk,
        [(batch, max_events) for batch in batches],
        [len(b) for b in batches],
        executor=executor,
        jobs=jobs,
        progress=progress,
    )
    summaries = [summary for batch in results for summary in batch]
    return tidy_table(runs, summaries)


def tidy_table(runs: Sequence[PlannedRun], summaries: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """One row per planned run; integer figures stay integers even where invalid rows leave gaps."""
    figures = iter(summaries)
    rows = []
    for index, run in enumerate(runs):
        found = next(figures) if run.scenario is not None else {}
        rows.append(
            {
                "run": index,
                **run.params,
                "valid": run.scenario is not None,
                "error": run.error,
                **found,
            }
        )
    table = pd.DataFrame.from_records(rows)
    integers = [
        key for key in summaries[0] if all(is_integer(summary.get(key)) for summary in summaries)
    ]
    floats = [
        key
        for key in summaries[0]
        if all(is_float_or_null(summary.get(key)) for summary in summaries)
    ]
    return table.astype(
        {**{key: "float64" for key in floats}, **{key: "Int64" for key in integers}}
    )


def is_float_or_null(value: Any) -> bool:
    """A figure that is a float, or null where a run was cut short (utilisation)."""
    return value is None or (isinstance(value, (float, np.floating)))


def is_integer(value: Any) -> bool:
    return is_whole_number(value) or isinstance(value, np.integer)
