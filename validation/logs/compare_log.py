"""A prediction beside a run of any stack, over the steps its log holds (``islands compare SCENARIO LOG``).

The log (``steps``: per-step rows, a Chrome trace or a torchtitan log) covers a window of the run's
steps, first to last, which need not be whole outer steps. Both sides are reduced to the same rates
over that window: the mean step time (wall seconds per step), the compute utilisation (compute
seconds over wall seconds), the blocked seconds per step, the mean sync (the blocked seconds of a
step that ends in a sync), the bytes per step and the syncs. The prediction is the scenario's
simulation over the very same steps: an outer step of H steps computes for the trace's compute
seconds of it, a share 1/H on each step, and its stall and idle (the sync, and the wait for it) fall
on its last step, the one that ends in the sync. Only schedules with one blocking sync at the end of
each outer step (DDP, DiLoCo) are laid out so.

Compute that slows while the sync moves bytes is told from the steps that end in a sync against
the others (``slowdown.py``): the figure "slowdown while exchanging", the scenario's
``compute.slowdown_while_exchanging`` beside it.

The first sync of a process also sets its communicator up: where the window holds the run's first
sync (step H) and later ones, that sync's excess over the median of the later ones is the figure
"first sync set-up", and the mean sync is the later syncs' mean ("steady"), on both sides.

Refused in one line: a scenario of another kind of schedule, a log that runs past the scenario's
steps or names a rank it has not, a log whose syncs fall on other steps than the scenario's (its H
contradicts the scenario's), and a window that holds no sync (nothing of the network to compare).
"""

from __future__ import annotations

import csv
import io
import re
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path

import pandas as pd

from islands.errors import UserError
from islands.io import read_bounded_text
from islands.scenarios import Scenario
from islands.schedules import SCHEDULES
from islands.simulator import SimResult, simulate
from islands.tables import render
from islands.trace import WASTED

from ..compare import Comparison, Figure, error_text, relative_error, value_text
from .profiler import COMM_EVENTS, read_chrome
from .slowdown import Slowdown, measured_slowdown, slowdown_note
from .steps import LOG_LIMIT_BYTES, StepLog, read_steps
from .torchtitan import STEP_LINE, read_torchtitan

BLOCKED_KINDS = ("stall", "idle")
SENT_KINDS = ("comm", WASTED)  # every byte a stack's counters see, thrown away or not
SYNC_ROWS_SHOWN = 12


def detect(path: Path) -> str:
    """The format of the log at ``path`` from its first bytes: a Chrome trace (a JSON object with
    traceEvents, or a JSON array), JSON lines, a torchtitan log (a line with ``step: N  loss:``), or
    CSV with a step column."""
    text = read_bounded_text(path, "log", LOG_LIMIT_BYTES)
    if not text.strip():
        raise UserError(f"{path}: is empty: the run logged nothing")
    head = text.lstrip()[:4096]
    if re.match(r"\[\s*[{\]]", head) or (head.startswith("{") and '"traceEvents"' in head):
        return "chrome"
    if head.startswith("{"):
        return "steps"
    if any(STEP_LINE.search(line) for line in text.splitlines()[:10_000]):
        return "torchtitan"
    if "step" in csv_header(head):
        return "steps"
    raise UserError(
        f"{path}: is a file, not a run folder, nor a log in a format islands reads (a per-step CSV or "
        "JSON lines log, a Chrome trace, a torchtitan log): see docs/how-to/compare-any-stack.md, "
        "or give --format"
    )


def csv_header(head: str) -> list[str]:
    """The first row of ``head`` read as CSV; none where it is no CSV (a bare carriage return in it)."""
    try:
        return next(csv.reader(io.StringIO(head)), [])
    except csv.Error:
        return []


def read_log(
    path: Path, log_format: str | None = None, comm_events: tuple[str, ...] | None = None
) -> StepLog:
    """The log at ``path`` in ``log_format`` ("steps", "chrome" or "torchtitan"; None: told from its
    content)."""
    log_format = log_format or detect(path)
    if log_format == "chrome":
        return read_chrome(path, comm_events or COMM_EVENTS)
    return read_torchtitan(path) if log_format == "torchtitan" else read_steps(path)


@dataclass(frozen=True)
class Window:
    """Steps ``first_step`` to ``last_step`` of a run that syncs after every ``period``-th step."""

    first_step: int
    last_step: int
    period: int

    @property
    def steps(self) -> int:
        return self.last_step - self.first_step + 1

    @property
    def sync_steps(self) -> list[int]:
        first = -(-self.first_step // self.period) * self.period
        return list(range(first, self.last_step + 1, self.period))

    @property
    def holds_first_sync(self) -> bool:
        return self.first_step <= self.period

    def text(self) -> str:
        syncs = self.sync_steps
        shown = ", ".join(map(str, syncs[:6])) + (", ..." if len(syncs) > 6 else "")
        return (
            f"steps {self.first_step}-{self.last_step} of the run ({self.steps} steps; {len(syncs)} "
            f"sync{'s' if len(syncs) != 1 else ''}, after step {shown})"
        )


@dataclass
class Rates:
    """One side's figures over the window (None where its source does not give them)."""

    mean_step_s: float
    utilisation: float | None
    blocked_per_step_s: float | None
    bytes_per_step: float | None
    syncs: dict[int, float] = field(
        default_factory=dict
    )  # step -> mean seconds blocked at it over workers


def check_schedule(scenario: Scenario) -> int:
    """The scenario's steps per outer step, for a schedule with one blocking sync at its end."""
    schedule = SCHEDULES[scenario.schedule.algorithm]
    period = schedule.period_steps(scenario.schedule)
    first_syncs = islice(
        schedule.sync_steps(scenario.schedule), 2
    )  # every outer step is laid out alike
    one_sync = (
        schedule.coupled
        and schedule.fragments(scenario.schedule) == 1
        and all(sync.apply_step == (sync.outer_step + 1) * period for sync in first_syncs)
    )
    if not one_sync:
        raise UserError(
            f"{scenario.source}: schedule.algorithm is {scenario.schedule.algorithm}: a step log is "
            "compared with schedules of one blocking sync per outer step only (ddp, diloco)"
        )
    return period


def check_window(log: StepLog, scenario: Scenario, window: Window, workers: int) -> None:
    """Refuse a log of other work than the scenario's: past its steps, of ranks it has not, or with
    syncs on other steps; and a window with no sync in it."""
    total = scenario.schedule.outer_steps * window.period
    if window.last_step > total:
        raise UserError(
            f"{log.path}: runs to step {window.last_step}, the scenario's {scenario.schedule.outer_steps} "
            f"outer steps of {window.period} make {total}: --set schedule.outer_steps="
            f"{-(-window.last_step // window.period)}"
        )
    if log.ranks[-1] >= workers:
        raise UserError(
            f"{log.path}: rank {log.ranks[-1]} logged, the scenario has {workers} workers (ranks 0-"
            f"{workers - 1}): compare a run of the same workers"
        )
    if not window.sync_steps:
        raise UserError(
            f"{log.path}: the window, steps {window.first_step}-{window.last_step}, holds no sync: the "
            f"scenario syncs after every {window.period}th step; log a window that holds one"
        )
    check_sync_steps(log, window)


def check_sync_steps(log: StepLog, window: Window) -> None:
    """The steps the log says end in a sync are the scenario's: after every H-th step."""
    known = log.rows.dropna(subset=["synced"])
    wrong = known[(known["synced"] == 1) != (known["step"] % window.period == 0)]
    if wrong.empty:
        return
    row = wrong.iloc[0]
    synced = sorted(int(s) for s in known.loc[known["synced"] == 1, "step"].unique())
    spacing = {b - a for a, b in zip(synced, synced[1:])}
    if synced and all(s % window.period == window.period - 1 for s in synced):
        hint = ": its steps look counted from 0 (the format counts the run's first step as 1)"
    elif len(spacing) == 1:
        hint = f": the log syncs every {spacing.pop()} steps (--set schedule.inner_steps to it)"
    else:
        hint = ""
    said = "ends in a sync" if row["synced"] == 1 else "ends in no sync"
    raise UserError(
        f"{row['where']}: step {int(row['step'])} {said}, the scenario syncs after every "
        f"{window.period}th step{hint}"
    )


def predicted_rounds(trace: pd.DataFrame) -> pd.DataFrame:
    """Each worker's compute seconds, blocked seconds (stall and idle) and bytes sent in each outer
    step, indexed by (worker, outer_step)."""
    seconds = trace["time_end_s"] - trace["time_start_s"]
    columns = pd.DataFrame(
        {
            "worker": trace["worker"],
            "outer_step": trace["outer_step"],
            "compute_s": seconds.where(trace["kind"] == "compute", 0.0),
            "blocked_s": seconds.where(trace["kind"].isin(BLOCKED_KINDS), 0.0),
            "bytes": trace["bytes"].where(trace["kind"].isin(SENT_KINDS), 0.0),
        }
    )
    return columns.groupby(["worker", "outer_step"]).sum()


def predicted_rates(trace: pd.DataFrame, window: Window) -> Rates:
    """The prediction over the window's steps: each outer step's compute spread evenly over its H
    steps, its blocked seconds and bytes on its last."""
    rounds = predicted_rounds(trace).reset_index()
    h = window.period
    first = rounds["outer_step"] * h + 1
    inside = (first + h - 1).clip(upper=window.last_step) - first.clip(lower=window.first_step) + 1
    share = inside.clip(lower=0) / h
    synced = (first + h - 1).between(window.first_step, window.last_step)
    compute_s = (rounds["compute_s"] * share).sum()
    blocked_s = rounds["blocked_s"].where(synced, 0.0).sum()
    workers = rounds["worker"].nunique()
    per_step = window.steps * workers
    syncs = rounds[synced].groupby("outer_step")["blocked_s"].mean()
    busy_s = compute_s + blocked_s
    return Rates(
        busy_s / per_step,
        compute_s / busy_s if busy_s > 0 else None,
        blocked_s / per_step,
        rounds["bytes"].where(synced, 0.0).sum() / per_step,
        {int((outer + 1) * h): float(seconds) for outer, seconds in syncs.items()},
    )


def measured_rates(log: StepLog) -> Rates:
    rows = log.rows
    steps, wall_s = rows["steps"].sum(), rows["wall_s"].sum()
    known = rows["compute_s"].notna().all()
    syncs = rows[rows["synced"] == 1].groupby("step")["blocked_s"].mean()
    return Rates(
        wall_s / steps,
        rows["compute_s"].sum() / wall_s if known and wall_s > 0 else None,
        rows["blocked_s"].sum() / steps if known else None,
        rows["bytes"].sum() / steps if rows["bytes"].notna().all() else None,
        {int(step): float(seconds) for step, seconds in syncs.items()},
    )


def sync_split(syncs: dict[int, float], window: Window) -> tuple[float | None, float | None]:
    """(steady mean sync, first sync set-up): where the window holds the run's first sync and later
    ones, the first's excess over the later ones' median, and the later ones' mean."""
    ordered = [syncs[step] for step in sorted(syncs)]
    if not ordered:
        return None, None
    if window.holds_first_sync and len(ordered) > 1:
        later = ordered[1:]
        return statistics.fmean(later), ordered[0] - statistics.median(later)
    return statistics.fmean(ordered), None


def figures(
    predicted: Rates, measured: Rates, window: Window, slowdown: Slowdown, predicted_s: float
) -> list[Figure]:
    (p_sync, p_setup), (m_sync, m_setup) = (
        sync_split(predicted.syncs, window),
        sync_split(measured.syncs, window),
    )
    m_syncs = float(len(measured.syncs)) if measured.utilisation is not None else None
    rows = [
        ("mean step time", "s", predicted.mean_step_s, measured.mean_step_s, None),
        ("compute utilisation", "fraction", predicted.utilisation, measured.utilisation, None),
        (
            "blocked per step",
            "s",
            predicted.blocked_per_step_s,
            measured.blocked_per_step_s,
            measured.mean_step_s,
        ),
        ("mean sync (steady)", "s", p_sync, m_sync, None),
        ("first sync set-up", "s", p_setup, m_setup, m_sync),
        ("bytes per step", "bytes", predicted.bytes_per_step, measured.bytes_per_step, None),
        ("syncs in the window", "count", float(len(predicted.syncs)), m_syncs, None),
        ("slowdown while exchanging", "fraction", predicted_s, slowdown.s, None),
    ]
    return [
        Figure(name, unit, p, m, relative_error(p, m, scale)) for name, unit, p, m, scale in rows
    ]


def sync_rows(predicted: Rates, measured: Rates) -> list[dict]:
    return [
        {
            "step": step,
            "predicted_s": predicted.syncs[step],
            "measured_s": seconds,
            "error": relative_error(predicted.syncs[step], seconds),
        }
        for step, seconds in sorted(measured.syncs.items())
        if step in predicted.syncs
    ]


def syncs_table(syncs: list[dict]) -> str:
    """The first syncs of the window, predicted beside measured, and the worst error of them all."""
    rows = [
        [
            str(s["step"]),
            value_text(s["predicted_s"], "s"),
            value_text(s["measured_s"], "s"),
            error_text(s["error"]),
        ]
        for s in syncs[:SYNC_ROWS_SHOWN]
    ]
    lines = [render(rows, ["sync after step", "predicted", "measured", "error"])]
    if len(syncs) > SYNC_ROWS_SHOWN:
        lines.append(f"... {len(syncs) - SYNC_ROWS_SHOWN} more in the JSON")
    errors = [abs(s["error"]) for s in syncs if s["error"] is not None]
    if errors:
        lines.append(
            f"worst |error| {100 * max(errors):.1f}% over {len(errors)} sync{'s' if len(errors) > 1 else ''}"
        )
    return "\n".join(lines)


def rank_assumption(log: StepLog, workers: int) -> str | None:
    """What the comparison assumes of the workers the log does not speak for, or None (every one)."""
    ranks = log.ranks
    if not log.names_ranks:
        return (
            f"the log names no rank: its times are taken as one worker's, standing for every one of the "
            f"scenario's {workers} workers (the prediction is their mean)"
        )
    if len(ranks) == workers:
        return None
    if ranks == [0]:
        return (
            f"only rank 0 logged: its times stand for every worker (the prediction is the mean of the "
            f"scenario's {workers} workers)"
        )
    return (
        f"ranks {', '.join(map(str, ranks))} of the scenario's {workers} workers logged: their times stand "
        "for every worker (the prediction is the mean of all)"
    )


def setup_note(window: Window) -> str:
    if not window.holds_first_sync:
        return (
            f"first sync set-up: the window starts after the run's first sync (step {window.period}): every "
            "sync in it is counted steady"
        )
    if len(window.sync_steps) == 1:
        return (
            "first sync set-up: the window's one sync is the run's first, so its set-up cannot be told from "
            "its steady time: log a window with two syncs or more"
        )
    return (
        f"first sync set-up: the sync after step {window.period} (the run's first) less the median of the "
        "later ones; the steady mean sync leaves it out"
    )


def measured_step_overrides(log: StepLog, scenario: Scenario) -> tuple[list[str], str]:
    """Every island given the log's mean compute seconds per step (over its ranks)."""
    rows = log.rows
    if rows["compute_s"].isna().any():
        raise UserError(
            f"{log.path}: a {log.format} log gives no compute seconds per step: compare without "
            "--measured-steps"
        )
    compute_s = float(rows["compute_s"].sum() / rows["steps"].sum())
    if compute_s <= 0:
        raise UserError(
            f"{log.path}: its steps computed for 0 s: no step time to measure; compare without "
            "--measured-steps"
        )
    overrides = [
        f"island.{index}.step_time_s={compute_s!r}" for index in range(len(scenario.islands))
    ]
    return (
        overrides,
        f"every island given the log's mean compute, {compute_s:.4g} s per step (--measured-steps)",
    )


@dataclass(frozen=True)
class LogComparison:
    comparison: Comparison
    predicted: SimResult
    log: StepLog
    window: Window
    assumptions: list[str]
    overrides: list[str]  # what --measured-steps added to the scenario
    slowdown: Slowdown


def compare_log(
    load_scenario: Callable[[list[str]], Scenario], log: StepLog, measured_steps: bool
) -> LogComparison:
    """Simulate the scenario (``load_scenario(extra overrides)``) and compare it with the log over
    the log's window of steps; refuse what cannot be compared."""
    scenario = load_scenario([])
    window = Window(log.first_step, log.last_step, check_schedule(scenario))
    workers = sum(island.replicas for island in scenario.islands)
    check_window(log, scenario, window, workers)
    overrides: list[str] = []
    compute = "the scenario's step times (--measured-steps gives every island the log's)"
    if measured_steps:
        overrides, compute = measured_step_overrides(log, scenario)
        scenario = load_scenario(overrides)
    predicted = simulate(scenario)
    if not predicted.summary["complete"]:
        raise UserError(
            f"{scenario.source}: the prediction stopped short ({predicted.summary['incomplete_reason']}): "
            "nothing to compare the log with"
        )
    predicted_side, measured_side = predicted_rates(predicted.trace, window), measured_rates(log)
    slowdown, predicted_s = (
        measured_slowdown(log, scenario),
        scenario.compute.slowdown_while_exchanging,
    )
    assumption = rank_assumption(log, workers)
    assumptions = [assumption] if assumption else []
    notes = [
        *assumptions,
        f"window: {window.text()}; the prediction over the same steps",
        *([setup_note(window)] if measured_side.utilisation is not None else []),
        *log.notes,
        f"compute: {compute}",
        slowdown_note(slowdown, predicted_s),
    ]
    comparison = Comparison(
        scenario.name,
        figures(predicted_side, measured_side, window, slowdown, predicted_s),
        sync_rows(predicted_side, measured_side),
        notes,
    )
    return LogComparison(comparison, predicted, log, window, assumptions, overrides, slowdown)
