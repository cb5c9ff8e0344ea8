"""Where each worker's time goes, per schedule: a stacked bar of compute, stall and idle.

Bars are shares of a worker's time (compute + stall + idle, means per worker); each bar is labelled
with its compute utilisation, the inner steps per worker it ran and its wall time, so runs of equal
work (``side_by_side.simulate_schedules``) compare their wall times directly.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from matplotlib.figure import Figure
from matplotlib.patches import Patch

from islands.tables import duration

from ..display_units import percent_text
from .style import DEFAULT_SIZE_PX, KIND_COLOURS, KIND_LABELS, new_figure, schedule_label

PARTS = ("compute", "stall", "idle")
BAR_WIDTH = 0.6


def shares(summary: Mapping[str, Any]) -> dict[str, float]:
    """Each part's share (0-1) of a worker's compute + stall + idle seconds."""
    seconds = {part: float(summary[f"{part}_s"]) for part in PARTS}
    total = sum(seconds.values())
    return {part: value / total if total > 0 else 0.0 for part, value in seconds.items()}


def utilisation_label(summary: Mapping[str, Any]) -> str:
    """``72.8% utilisation``, or ``cut short`` for a run whose utilisation is null (not complete)."""
    utilisation = summary["compute_utilisation"]
    return "cut short" if utilisation is None else f"{percent_text(utilisation)} utilisation"


def breakdown_figure(
    summaries: Mapping[str, Mapping[str, Any]],
    scenario_name: str,
    size_px: tuple[int, int] = DEFAULT_SIZE_PX,
) -> Figure:
    """One stacked bar per labelled summary (e.g. per schedule)."""
    figure = new_figure(size_px)
    ax = figure.subplots()
    names = list(summaries)
    positions = range(len(names))
    bottoms = [0.0] * len(names)
    for part in PARTS:
        heights = [100 * shares(summaries[name])[part] for name in names]
        ax.bar(positions, heights, BAR_WIDTH, bottom=bottoms, color=KIND_COLOURS[part])
        bottoms = [b + h for b, h in zip(bottoms, heights)]
    for position, name in zip(positions, names):
        summary = summaries[name]
        ax.annotate(
            f"{utilisation_label(summary)}\n"
            f"{int(summary['inner_steps']):,} inner steps in {duration(summary['wall_time_s'])}",
            (position, 100),
            xytext=(0, 4),
            textcoords="offset points",
            ha="center",
            va="bottom",
        )
    ax.set_xticks(list(positions), [schedule_label(name) for name in names])
    ax.set_ylim(0, 118)
    ax.set_yticks(range(0, 101, 20))
    ax.set_ylabel("share of each worker's time (%)")
    ax.set_xlabel("schedule")
    ax.set_title(f"{scenario_name}: where each worker's time goes")
    ax.legend(
        handles=[Patch(color=KIND_COLOURS[p], label=KIND_LABELS[p]) for p in reversed(PARTS)],
        loc="upper left",
        bbox_to_anchor=(1.01, 1.0),
        frameon=False,
    )
    ax.grid(axis="y", alpha=0.3)
    return figure
