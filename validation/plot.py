"""The overlay plot of a validation: predicted timeline above, measured below, on one time axis, and
each sync's duration, predicted beside measured.

Each timeline is one row per worker: compute, stall and idle tile the row, transfers in flight are a
thin band along its bottom (the colours of ``plot_style``, as in ``plot_timeline``).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from matplotlib.patches import Patch

from islands.analysis.plots.style import KIND_COLOURS, KIND_LABELS, new_figure, save_png

from .compare import Comparison

SIZE_PX = (1400, 1000)
ROW_HEIGHT = 0.8
COMM_BAND = (0.22, 0.16)  # offset below the row centre, height


def draw_timeline(ax, trace: pd.DataFrame, title: str) -> None:
    workers = sorted(trace["worker"].unique())
    for row, worker in enumerate(workers):
        mine = trace[trace["worker"] == worker]
        for kind, group in mine.groupby("kind"):
            spans = list(zip(group["time_start_s"], group["time_end_s"] - group["time_start_s"]))
            band = (
                (row + COMM_BAND[0], COMM_BAND[1])
                if kind == "comm"
                else (row - ROW_HEIGHT / 2, ROW_HEIGHT)
            )
            ax.broken_barh(
                spans, band, facecolors=KIND_COLOURS[kind], zorder=3 if kind == "comm" else 2
            )
    ax.set_yticks(range(len(workers)), [str(w) for w in workers])
    ax.set_ylim(len(workers) - 0.5, -0.5)
    ax.set_ylabel("worker")
    ax.set_title(title)
    ax.grid(axis="x", alpha=0.3)


def draw_syncs(ax, comparison: Comparison) -> None:
    positions = range(len(comparison.syncs))
    ax.plot(positions, [s["predicted_s"] for s in comparison.syncs], "o-", label="predicted")
    ax.plot(positions, [s["measured_s"] for s in comparison.syncs], "s--", label="measured")
    ax.set_xlabel("sync (in order of outer step, fragment)")
    ax.set_ylabel("duration (s)")
    ax.set_ylim(bottom=0)
    ax.legend(frameon=False)
    ax.grid(alpha=0.3)


def write_overlay(
    path: Path,
    comparison: Comparison,
    predicted: pd.DataFrame,
    measured: pd.DataFrame,
    titles: tuple[str, str] = (
        "predicted (simulator, calibrated)",
        "measured (real run over the emulated WAN)",
    ),
) -> Path:
    figure = new_figure(SIZE_PX)
    top, middle, bottom = figure.subplots(3, 1, height_ratios=(2, 2, 1.4))
    middle.sharex(top)
    draw_timeline(top, predicted, f"{comparison.case}: {titles[0]}")
    draw_timeline(middle, measured, titles[1])
    middle.set_xlabel("time since start (s)")
    draw_syncs(bottom, comparison)
    kinds = [k for k in KIND_COLOURS if k in set(predicted["kind"]) | set(measured["kind"])]
    figure.legend(
        handles=[Patch(color=KIND_COLOURS[k], label=KIND_LABELS[k]) for k in kinds],
        loc="outside upper center",
        ncols=len(kinds),
        frameon=False,
    )
    return save_png(figure, path)
