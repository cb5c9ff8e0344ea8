"""What one change of the live page computes, in parts sent as each is ready, each from the simulator
and the analyses the commands use, and each cell in the commands' own words (``islands.tables``):

* ``run``: the scenario as edited, played as ``islands simulate --set ...`` plays it: its figures
  (the columns ``islands simulate`` prints, under the names of the summary and of the static report's
  ``data-figure`` attributes), its islands table as printed, and its timeline (``TIMELINE_INTERVALS``);
* ``schedules``: every schedule side by side at equal work, as ``islands report`` compares them
  (``side_by_side``), with each one's uplink over its first ``PLOT_INTERVALS`` x H inner steps;
* ``loss``: each schedule's evaluation loss by the prior, as ``islands quality`` prints it;
* ``plan``: the least bandwidth per island that reaches the target utilisation under each schedule,
  the sentence ``islands plan --target-utilisation T`` opens with.

    >>> parts = {}
    >>> compute_figures(source, 0.95, lambda name, part: parts.update({name: part}))  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pandas as pd

from islands.errors import UserError
from islands.scenarios import Scenario, ScenarioSource
from islands.schedules import SCHEDULES
from islands.simulator import SimResult, simulate
from islands.tables import COLUMNS, churn_line, ignored_line, islands_table, partial_line
from islands.units import BITS_PER_BYTE, BITS_PER_GBIT

from ..link_rates import rate_steps
from ..planner.plan import DEFAULT_TARGETS, make_utilisation_plan
from ..planner.plan_tables import bandwidth_cell, headline
from ..plots.style import (
    KIND_COLOURS,
    KIND_LABELS,
    TRANSFER_KINDS,
    schedule_colour,
    schedule_label,
)
from ..quality.loss_prior import estimate, extra_tokens_factor
from ..report.whatif import json_number
from ..side_by_side import equal_work_schedules, work_line

# Each column ``islands simulate`` prints, by the summary key it shows (a column without one has no
# data-figure: tests/test_serve_api.py checks every column has one)
COLUMN_FIGURES = {
    "wall time": "wall_time_s",
    "utilisation": "compute_utilisation",
    "stall/worker": "stall_s",
    "idle/worker": "idle_s",
    "syncs": "syncs",
    "mean sync": "mean_sync_s",
    "sent/worker": "bytes_per_worker",
    "avg bw": "avg_bandwidth_gbps",
    "bw needed": "bandwidth_needed_gbps",
    "peak bw": "peak_bandwidth_gbps",
}
TIMELINE_INTERVALS = (0, 2)  # outer intervals shown, as the report's timeline
MAX_TIMELINE_WORKERS = 48
PLOT_INTERVALS = 3  # of H inner steps, on every schedule's uplink
UPLINK_COLUMNS = ("time_start_s", "time_end_s", "worker", "direction", "rate_gbps")
MAX_PLOT_POINTS = 4000  # a panel with more steps shows its first ones, and says so
STAGES = {
    "run": "the scenario as edited",
    "schedules": "each schedule at equal work",
    "loss": "the loss estimate",
    "plan": "the least bandwidth for the target",
}

Emit = Callable[[str, dict[str, Any]], None]
Progress = Callable[[str, int, int], None]


def figure_cells(summary: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The columns ``islands simulate`` prints: label, the printed text, the summary key and value."""
    return [
        {
            "label": label,
            "text": cell(summary),
            "key": COLUMN_FIGURES.get(label),
            "value": json_number(summary.get(COLUMN_FIGURES.get(label, ""))),
        }
        for label, cell in COLUMNS
    ]


def timeline_data(trace: pd.DataFrame, scenario: Scenario) -> dict[str, Any] | None:
    """The spans of the first outer intervals, one row per worker (the first ``MAX_TIMELINE_WORKERS``
    of those active), as [row, kind, start s, end s], the transfers' kinds drawn as a band over the
    worker's activity (as ``plots/worker_timeline``); None for a run with no trace in them."""
    start, stop = TIMELINE_INTERVALS
    window = trace[(trace["outer_step"] >= start) & (trace["outer_step"] < stop)]
    if window.empty:
        return None
    names = {worker.rank: worker.name for worker in scenario.workers()}
    active = sorted(int(rank) for rank in window["worker"].unique())
    ranks = active[:MAX_TIMELINE_WORKERS]
    row_of = {rank: row for row, rank in enumerate(ranks)}
    shown = window[window["worker"].isin(ranks)]
    kinds = [kind for kind in KIND_COLOURS if kind in set(window["kind"])]
    return {
        "workers": [names.get(rank, str(rank)) for rank in ranks],
        "left_out": len(active) - len(ranks),
        "begin_s": float(window["time_start_s"].min()),
        "end_s": float(window["time_end_s"].max()),
        "kinds": [
            {
                "kind": k,
                "colour": KIND_COLOURS[k],
                "label": KIND_LABELS[k],
                "band": k in TRANSFER_KINDS,
            }
            for k in kinds
        ],
        "spans": [
            [row_of[int(w)], kind, float(a), float(b)]
            for w, kind, a, b in zip(
                shown["worker"], shown["kind"], shown["time_start_s"], shown["time_end_s"]
            )
        ],
        "last_interval": int(window["outer_step"].max()),
    }


def uplink_rows(result: SimResult, until_s: float) -> pd.DataFrame:
    """The rows of the links table (``SimResult.links``) for worker 0's uplink up to ``until_s``, read
    from the transfers themselves: building the whole table of a long run takes longer than the run."""
    rows = [
        (start, end, 0, "up", rate * count * BITS_PER_BYTE / BITS_PER_GBIT)
        for transfer in result.transfers
        for link, count in transfer.counted.items()
        if link.worker == 0 and link.direction == "up" and link in result.islands
        for start, end, rate in transfer.segments
        if end > start and start <= until_s
    ]
    return pd.DataFrame.from_records(rows, columns=list(UPLINK_COLUMNS))


def uplink_data(result: SimResult, inner_steps: int) -> dict[str, Any]:
    """Worker 0's uplink rate over the run's first ``PLOT_INTERVALS`` x ``inner_steps`` inner steps
    (at most ``MAX_PLOT_POINTS`` steps of it), as (times, Gbit/s from each time on)."""
    summary = result.summary
    share = min(1.0, PLOT_INTERVALS * inner_steps / max(1, summary["inner_steps"]))
    window_s = summary["wall_time_s"] * share
    times, levels = rate_steps(uplink_rows(result, window_s), 0, "up")
    inside = times <= window_s
    times, levels = times[inside], levels[inside]
    cut = len(times) > MAX_PLOT_POINTS
    if cut:
        times, levels = times[:MAX_PLOT_POINTS], levels[:MAX_PLOT_POINTS]
        window_s = float(times[-1])
    return {
        "window_s": float(window_s),
        "times_s": times.tolist(),
        "rates_gbps": levels.tolist(),
        "peak_gbps": float(levels.max(initial=0.0)),
        "cut": cut,
    }


def run_part(scenario: Scenario, result: SimResult) -> dict[str, Any]:
    summary = result.summary
    notes = [
        partial_line(summary),
        churn_line(summary),
        ignored_line(summary, result.events_after_end),
    ]
    return {
        "headline": (
            f"{scenario.name}: {schedule_label(summary['algorithm'])}, {summary['workers']} workers, "
            f"{summary['outer_steps']} outer steps of {scenario.schedule.inner_steps} inner steps, "
            f"network model {summary['network_model']}, played by {summary['player']}"
        ),
        "algorithm": summary["algorithm"],
        "figures": figure_cells(summary),
        "notes": [note for note in notes if note],
        "islands": islands_table(summary),
        "timeline": timeline_data(result.trace, scenario),
    }


def schedules_part(source: ScenarioSource, own: SimResult, progress: Progress) -> dict[str, Any]:
    """Every schedule at equal work (the scenario's own run reused where it is one of them)."""
    base = source.scenario
    try:
        variants = equal_work_schedules(source)
    except UserError as error:  # no schedule can run the scenario's work
        return {"error": str(error)}
    results: dict[str, SimResult] = {}
    for done, (algorithm, scenario) in enumerate(variants.scenarios.items()):
        progress("schedules", done, len(variants.scenarios))
        results[algorithm] = own if scenario == base else simulate(scenario, source.max_events)
    summaries = {name: result.summary for name, result in results.items()}
    return {
        "work": work_line(summaries, base.model.tokens_per_step),
        "rows": [
            {
                "schedule": name,
                "label": schedule_label(name),
                "colour": schedule_colour(name),
                "inner_steps": f"{int(summary['inner_steps']):,}",
                "figures": figure_cells(summary),
                "uplink": uplink_data(results[name], base.schedule.inner_steps),
            }
            for name, summary in summaries.items()
        ],
        "notes": variants.notes(),
    }


def loss_part(scenario: Scenario) -> dict[str, Any]:
    """Each schedule's loss by the prior, as ``islands quality`` prints it."""
    rows = []
    for name in SCHEDULES:
        found = estimate(scenario, name)
        factor = extra_tokens_factor(scenario.model.parameters, found.relative_to_dp)
        rows.append(
            {
                "schedule": name,
                "label": schedule_label(name),
                "loss": found.loss,
                "loss_text": f"{found.loss:.4f}",
                "relative_to_dp": found.relative_to_dp,
                "relative_text": f"{100 * found.relative_to_dp:+.2f}% vs DDP",
                "tokens_text": f"x{factor:.2f} tokens to DDP's loss"
                if json_number(factor) is not None
                else "unreachable by more tokens",
                "notes": list(found.notes),
            }
        )
    return {
        "title": (
            f"{scenario.model.parameters:.3g} parameters, {scenario.worker_count} workers: evaluation "
            "loss at equal tokens (the papers' C4 set-up), by the published tables"
        ),
        "rows": rows,
    }


def plan_part(source: ScenarioSource, target: float, progress: Progress) -> dict[str, Any]:
    """The least bandwidth per island for ``target`` under each schedule, as ``islands plan`` finds
    it (its default row of targets with ``target``, so the searches and their answers are its own)."""
    try:
        plan = make_utilisation_plan(
            source,
            target,
            DEFAULT_TARGETS,
            fragments=False,
            jobs=1,
            progress=lambda done, total: progress("plan", done, total),
            max_events=source.max_events,
        )
    except UserError as error:
        return {"error": str(error)}
    return {
        "target": target,
        "headline": headline(plan),
        "rows": [
            {
                "schedule": name,
                "label": schedule_label(name),
                "value": answers[target].value,
                "text": bandwidth_cell(answers[target]),
            }
            for name, answers in plan.bandwidth.items()
        ],
        "notes": list(plan.left_out),
        "runs": plan.runs,
    }


def compute_figures(source: ScenarioSource, target: float, emit: Emit, progress: Progress) -> None:
    """Every part of the page for ``source`` (its overrides the page's edits), each passed to
    ``emit(name, part)`` when ready; ``progress(stage, done, total)`` before each step of a stage."""
    scenario = source.scenario
    progress("run", 0, 1)
    own = simulate(scenario, source.max_events)
    emit("run", run_part(scenario, own))
    emit("schedules", schedules_part(source, own, progress))
    emit("loss", loss_part(scenario))
    emit("plan", plan_part(source, target, progress))
