"""The same scenario under DDP, DiLoCo and Streaming DiLoCo, simulated side by side at equal work.

DiLoCo and Streaming DiLoCo run ``outer_steps`` intervals of H inner steps each. DDP's
``outer_steps`` are single steps, so it runs H x that many: every schedule computes the same inner
steps (and tokens) per worker, and their wall times compare directly. A scenario written for DDP
(``outer_steps`` = steps) gives the others ceil(steps / H) intervals, and DDP that many times H steps.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from islands.scenarios import Scenario, ScenarioSource, Variants
from islands.schedules import SCHEDULES, schedule_of
from islands.simulator import SimResult, simulate
from islands.tables import COLUMNS, render

from .display_units import count_text
from .plots.style import schedule_label


def intervals_of(scenario: Scenario) -> int:
    """Intervals of H inner steps that carry the scenario's work."""
    return math.ceil(
        schedule_of(scenario).total_steps(scenario.schedule) / scenario.schedule.inner_steps
    )


def equal_work_schedules(source: ScenarioSource) -> Variants:
    """The scenario once per schedule, each computing H x intervals inner steps per worker (in
    outer steps of the schedule's own period: H for the DiLoCo family, one step for DDP); the
    schedules that cannot run that work (eager updates in a single interval) are left out, with why."""
    base = source.scenario
    steps = intervals_of(base) * base.schedule.inner_steps
    return source.schedules(
        lambda algorithm: (
            f"schedule.outer_steps={math.ceil(steps / period_steps(base, algorithm))}",
        )
    )


def period_steps(scenario: Scenario, algorithm: str) -> int:
    """Inner steps per outer step of ``algorithm`` with the scenario's schedule keys."""
    return SCHEDULES[algorithm].period_steps(scenario.schedule)


def simulate_schedules(source: ScenarioSource) -> dict[str, SimResult]:
    """One run per schedule at equal work (see ``equal_work_schedules``), in a fixed order, each held
    to the source's ``max_events``."""
    variants = equal_work_schedules(source).scenarios
    return {
        algorithm: simulate(scenario, source.max_events) for algorithm, scenario in variants.items()
    }


def left_out_notes(source: ScenarioSource) -> list[str]:
    """One line per schedule that ``simulate_schedules`` leaves out, and why."""
    return equal_work_schedules(source).notes()


def work_line(
    summaries: Mapping[str, Mapping[str, Any]], tokens_per_step: float | None = None
) -> str:
    """One sentence saying how much work each run in ``summaries`` was set: equal, or not, and how much."""
    steps = {name: int(summary["inner_steps"]) for name, summary in summaries.items()}
    if len(set(steps.values())) > 1:
        each = ", ".join(f"{schedule_label(name)} {count:,}" for name, count in steps.items())
        return f"Unequal work, compare wall times with care: inner steps per worker: {each}."
    count = next(iter(steps.values()))
    tokens = f" ({count_text(count * tokens_per_step)} tokens)" if tokens_per_step else ""
    return f"Equal work: every schedule runs {count:,} inner steps per worker{tokens}."


def schedule_table(summaries: Mapping[str, Mapping[str, Any]]) -> str:
    """The key figures of each run, one row per run, with the inner steps per worker it was set."""
    header = ["run", "inner steps", *(name for name, _ in COLUMNS)]
    rows = [
        [label, f"{int(summary['inner_steps']):,}", *(cell(summary) for _, cell in COLUMNS)]
        for label, summary in summaries.items()
    ]
    return render(rows, header)
