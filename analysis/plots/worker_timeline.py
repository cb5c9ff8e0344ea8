"""A Gantt chart of some outer intervals: one row per worker, what it was doing when.

Compute, stall and idle tile each worker's row; transfers in flight are a thin band along the bottom
of the row, so a transfer hidden behind compute (Streaming DiLoCo) shows as blue under green, and one
that stalls the worker as blue under red. A straggler's peers show orange (idle) while they wait for
it; a worker that has left or not yet joined shows nothing. A fleet larger than ``max_workers``
shows its first workers, and the title says how many are left out.
"""

from __future__ import annotations

import pandas as pd
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from islands.errors import UserError
from islands.scenarios import Scenario
from islands.schedules import schedule_of

from ..display_units import time_unit
from .style import (
    DEFAULT_SIZE_PX,
    KIND_COLOURS,
    KIND_LABELS,
    TRANSFER_KINDS,
    new_figure,
    schedule_label,
)

MAX_WORKERS_SHOWN = 48
ROW_HEIGHT = 0.8
COMM_BAND = (0.22, 0.16)  # offset from the row centre (downwards on screen) and height


def parse_intervals(text: str) -> tuple[int, int]:
    """``START:STOP`` (outer intervals START to STOP-1, as a Python slice) or a single ``N``."""
    try:
        if ":" in text:
            start, stop = (int(part) for part in text.split(":", 1))
        else:
            start = int(text)
            stop = start + 1
    except ValueError:
        raise UserError(
            f"--intervals {text}: write START:STOP, e.g. 0:2 for the first two outer intervals"
        ) from None
    if not 0 <= start < stop:
        raise UserError(f"--intervals {text}: need 0 <= START < STOP")
    return start, stop


def select_window(trace: pd.DataFrame, intervals: tuple[int, int]) -> pd.DataFrame:
    start, stop = intervals
    window = trace[(trace["outer_step"] >= start) & (trace["outer_step"] < stop)]
    if window.empty:
        last = int(trace["outer_step"].max())
        raise UserError(f"--intervals {start}:{stop}: the run has outer intervals 0 to {last}")
    return window


def timeline_figure(
    trace: pd.DataFrame,
    scenario: Scenario,
    intervals: tuple[int, int] = (0, 2),
    size_px: tuple[int, int] = DEFAULT_SIZE_PX,
    max_workers: int | None = MAX_WORKERS_SHOWN,
) -> Figure:
    """The Gantt chart of outer intervals ``intervals`` (START, STOP) of a run's trace: a row for each
    worker with rows in the window, the first ``max_workers`` of them (None: all)."""
    window = select_window(trace, intervals)
    names = {worker.rank: worker.name for worker in scenario.workers()}
    active = sorted(window["worker"].unique())
    ranks = active[:max_workers] if max_workers is not None else active
    begin_s, end_s = window["time_start_s"].min(), window["time_end_s"].max()
    unit, scale = time_unit(end_s - begin_s)
    figure = new_figure(size_px)
    ax = figure.subplots()
    for row, rank in enumerate(ranks):
        mine = window[window["worker"] == rank]
        for kind, group in mine.groupby("kind"):
            spans = list(
                zip(
                    group["time_start_s"] / scale,
                    (group["time_end_s"] - group["time_start_s"]) / scale,
                )
            )
            if kind in TRANSFER_KINDS:
                band = (row + COMM_BAND[0], COMM_BAND[1])
            else:
                band = (row - ROW_HEIGHT / 2, ROW_HEIGHT)
            ax.broken_barh(
                spans,
                band,
                facecolors=KIND_COLOURS[kind],
                zorder=3 if kind in TRANSFER_KINDS else 2,
            )
    ax.set_yticks(range(len(ranks)), [names.get(rank, str(rank)) for rank in ranks])
    ax.set_ylim(len(ranks) - 0.5, -0.5)
    ax.set_xlim(begin_s / scale, end_s / scale)
    ax.set_xlabel(f"time since start ({unit})")
    ax.set_ylabel("worker")
    ax.grid(axis="x", alpha=0.3)
    kinds = [kind for kind in KIND_COLOURS if kind in set(window["kind"])]
    figure.legend(
        handles=[Patch(color=KIND_COLOURS[k], label=KIND_LABELS[k]) for k in kinds],
        loc="outside lower center",
        ncols=len(kinds),
        frameon=False,
    )
    first, last = intervals[0], int(window["outer_step"].max())
    left_out = len(active) - len(ranks)
    shown = (
        f"\nfirst {len(ranks)} of {len(active)} workers shown, {left_out} left out "
        "(islands plot timeline --all-workers shows every one)"
        if left_out
        else ""
    )
    algorithm = schedule_label(scenario.schedule.algorithm)
    what = (
        "step" if schedule_of(scenario).period_steps(scenario.schedule) == 1 else "outer interval"
    )
    span = f"{what} {first}" if first == last else f"{what}s {first} to {last}"
    ax.set_title(f"{scenario.name}: {algorithm}, {span}{shown}")
    return figure
