"""Predicted beside measured: the figures, their relative errors, each sync's duration, as text and JSON.

Relative error = (predicted - measured) / measured. Stall and idle are also compared summed
("blocked"): the members of a real exchange finish a few ms apart, so the first one done starts
its next interval early and waits for the others at the next barrier, which the trace books as
idle; the simulator ends every member's transfer at the same instant. A figure whose measured value is below
``NEGLIGIBLE_FRACTION`` of the measured wall time (seconds) gets no relative error (a stall of 3 ms
against a predicted 0 is not a 100% miss); its absolute values are still shown.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from islands.numbers import is_finite_number
from islands.schedules import SCHEDULES
from islands.summary import sync_durations
from islands.tables import duration, render, size

NEGLIGIBLE_FRACTION = 0.01
SYNC_ROWS_SHOWN = 12
ERROR_DIGITS_BELOW = 10.0  # relative errors below this (1000%) are shown to 0.1%


@dataclass(frozen=True)
class Figure:
    name: str
    unit: str  # "s", "fraction", "bytes", "count"
    predicted: float | None
    measured: float | None
    error: float | None


@dataclass
class Comparison:
    case: str
    figures: list[Figure]
    syncs: list[dict[str, Any]]
    notes: list[str] = field(default_factory=list)

    def error(self, name: str) -> float | None:
        return next(f.error for f in self.figures if f.name == name)


def relative_error(
    predicted: float | None, measured: float | None, scale: float | None = None
) -> float | None:
    """None where either side has no value (an incomplete run gives no utilisation) or the
    measurement is negligible, or so small that the ratio overflows (a measured 1e-320 s)."""
    if predicted is None or measured is None or measured == 0:
        return None
    if abs(measured) <= (scale or 0.0) * NEGLIGIBLE_FRACTION:
        return None
    error = (predicted - measured) / measured
    return error if is_finite_number(error) else None


def figures(predicted: dict, measured: dict, interface_bytes: float | None) -> list[Figure]:
    wall_s = measured["wall_time_s"]
    rows = [
        ("wall time", "s", predicted["wall_time_s"], wall_s, None),
        (
            "compute utilisation",
            "fraction",
            predicted["compute_utilisation"],
            measured["compute_utilisation"],
            None,
        ),
        ("stall per worker", "s", predicted["stall_s"], measured["stall_s"], wall_s),
        ("idle per worker", "s", predicted["idle_s"], measured["idle_s"], wall_s),
        (
            "blocked per worker (stall + idle)",
            "s",
            predicted["stall_s"] + predicted["idle_s"],
            measured["stall_s"] + measured["idle_s"],
            wall_s,
        ),
        (
            "bytes per worker (interface)",
            "bytes",
            predicted["bytes_per_worker"],
            interface_bytes,
            None,
        ),
        (
            "bytes per worker (trainer)",
            "bytes",
            predicted["bytes_per_worker"],
            measured["bytes_per_worker"],
            None,
        ),
        ("mean sync", "s", predicted["mean_sync_s"], measured["mean_sync_s"], None),
    ]
    return [
        Figure(name, unit, p, m, relative_error(p, m, scale)) for name, unit, p, m, scale in rows
    ]


def sync_seconds(trace: pd.DataFrame, per_worker: bool) -> pd.Series:
    """Each sync's seconds by (outer step, fragment): its span over the workers, or (learners on
    their own clocks, ``per_worker``) the mean of the learners' own exchanges of it; a sync played
    again after a rollback, the mean of its plays."""
    return sync_durations(trace, per_worker).groupby(level=["outer_step", "fragment"]).mean()


def sync_rows(
    predicted_trace: pd.DataFrame, measured_trace: pd.DataFrame, per_worker: bool = False
) -> list[dict[str, Any]]:
    """Each sync (outer step, fragment) present in both traces, in order."""
    both = pd.concat(
        {
            "predicted_s": sync_seconds(predicted_trace, per_worker),
            "measured_s": sync_seconds(measured_trace, per_worker),
        },
        axis=1,
    ).dropna()
    return [
        {
            "outer_step": int(outer),
            "fragment": int(fragment),
            "predicted_s": float(row.predicted_s),
            "measured_s": float(row.measured_s),
            "error": relative_error(row.predicted_s, row.measured_s),
        }
        for (outer, fragment), row in both.iterrows()
    ]


def compare(
    case: str,
    predicted: dict,
    predicted_trace: pd.DataFrame,
    measured: dict,
    measured_trace: pd.DataFrame,
    interface_bytes: float | None,
    notes: list[str],
) -> Comparison:
    per_worker = not SCHEDULES[predicted["algorithm"]].coupled
    cut_short = [
        f"{side} run did not finish: {summary['incomplete_reason']}"
        for side, summary in (("predicted", predicted), ("measured", measured))
        if summary.get("complete") is False
    ]
    return Comparison(
        case,
        figures(predicted, measured, interface_bytes),
        sync_rows(predicted_trace, measured_trace, per_worker),
        [*cut_short, *notes],
    )


def value_text(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "fraction":
        return f"{100 * value:.1f}%"
    if unit == "bytes":
        return size(value)
    if unit == "count":
        return f"{value:g}"
    return f"{value:.3f} s" if value < 10 else duration(value)


def error_text(error: float | None) -> str:
    """``+12.3%``; beyond +-1000% in three figures (``+2.4e+17%``), so that a tiny measured value
    cannot widen the table by hundreds of digits."""
    if error is None:
        return "-"
    return f"{100 * error:+.1f}%" if abs(error) < ERROR_DIGITS_BELOW else f"{100 * error:+.3g}%"


def figures_table(comparison: Comparison) -> str:
    rows = [
        [
            f.name,
            value_text(f.predicted, f.unit),
            value_text(f.measured, f.unit),
            error_text(f.error),
        ]
        for f in comparison.figures
    ]
    return render(rows, ["", "predicted", "measured", "error"])


def syncs_table(comparison: Comparison) -> str:
    shown = comparison.syncs[:SYNC_ROWS_SHOWN]
    rows = [
        [
            f"{s['outer_step']}/{s['fragment']}",
            value_text(s["predicted_s"], "s"),
            value_text(s["measured_s"], "s"),
            error_text(s["error"]),
        ]
        for s in shown
    ]
    table = render(rows, ["sync (outer/fragment)", "predicted", "measured", "error"])
    hidden = len(comparison.syncs) - len(shown)
    errors = [abs(s["error"]) for s in comparison.syncs if s["error"] is not None]
    lines = [table] + ([f"... {hidden} more in the JSON"] if hidden else [])
    if errors:
        lines.append(f"worst |error| {100 * max(errors):.1f}% over {len(errors)} syncs")
    return "\n".join(lines)
