"""A heatmap of one summary figure over two parameters of a sweep table.

Cells are means over seeds, each with its sample standard deviation over them ("± sd") where the
sweep ran several; a combination that was not a valid scenario is a grey cell marked
``invalid``. Any other parameter the sweep varies must be pinned with ``where`` (``--where``), so a
cell never silently averages over, say, three bandwidths.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.colors import LogNorm, Normalize
from matplotlib.figure import Figure

from islands.errors import UserError
from islands.numbers import is_finite_number
from islands.scenarios.loader import parse_override_value
from islands.tables import duration, size

from ..display_units import percent_text, rate_text, time_unit
from ..sweep.sweep_table import numeric_column, parameter_columns
from .style import DEFAULT_SIZE_PX, new_figure, parameter_label, schedule_label

METRIC_NAMES = {
    "compute_utilisation": "compute utilisation",
    "peak_bandwidth_gbps": "peak bandwidth per worker",
    "avg_bandwidth_gbps": "average bandwidth per worker",
    "bandwidth_needed_gbps": "bandwidth needed per worker",
    "wall_time_s": "wall time",
    "stall_s": "stall per worker",
    "idle_s": "idle per worker",
    "mean_sync_s": "mean sync time",
    "bytes_per_worker": "bytes sent per worker",
}
LOG_SPREAD = 100.0  # a positive figure spanning more than this factor gets a log colour scale
INVALID_TEXT = "invalid"


def metric_style(metric: str, values: np.ndarray) -> tuple[str, float, Callable[[float], str]]:
    """(colour-bar label, factor from the column's unit to the bar's, cell text) for a figure."""
    name = METRIC_NAMES.get(metric, metric)
    if metric.endswith("utilisation"):
        return f"{name} (%)", 100.0, percent_text
    if metric.endswith("_gbps"):
        return f"{name} (Gbit/s)", 1.0, rate_text
    if metric.endswith("_s"):
        unit, seconds = time_unit(float(np.nanmax(values)) if np.isfinite(values).any() else 0.0)
        return f"{name} ({unit})", 1 / seconds, duration
    if "bytes" in metric:
        return f"{name} (GB)", 1e-9, size
    return name, 1.0, lambda value: f"{value:.3g}"


def value_text(value: object) -> str:
    return f"{value:g}" if isinstance(value, (float, np.floating)) else str(value)


def apply_where(table: pd.DataFrame, where: Sequence[str]) -> pd.DataFrame:
    """Keep rows whose parameter equals each ``key=value`` of ``where``."""
    for condition in where:
        key, _, raw = condition.partition("=")
        if key not in parameter_columns(table) or not raw:
            raise UserError(
                f"--where {condition}: write PARAMETER=VALUE with one of "
                f"{', '.join(parameter_columns(table))}"
            )
        wanted = parse_override_value(raw)
        column = table[key]
        if is_finite_number(wanted) and pd.api.types.is_numeric_dtype(column):
            table = table[np.isclose(column.astype(float), float(wanted))]
        else:
            table = table[column.astype(str) == str(wanted)]
        if table.empty:
            raise UserError(f"--where {condition}: no row of the sweep table has {key} = {raw}")
    return table


def choose_axes(table: pd.DataFrame, x: str | None, y: str | None) -> tuple[str, str]:
    """The two parameters to plot: those given, else the ones the table varies; nothing else may vary."""
    for given in (x, y):
        if given is not None and given not in parameter_columns(table):
            raise UserError(
                f"{given}: not a parameter of the sweep table ({', '.join(parameter_columns(table))})"
            )
    varying = [
        c for c in parameter_columns(table) if c != "seed" and table[c].nunique(dropna=False) > 1
    ]
    rest = [c for c in varying if c not in (x, y)]
    if x is None and rest:
        x = rest.pop(0)
    if y is None and rest:
        y = rest.pop(0)
    if x is not None and x == y:
        raise UserError(f"--x and --y both name {x}: a heatmap needs two different parameters")
    if x is None or y is None:
        raise UserError(
            f"a heatmap needs two parameters that vary; this sweep varies "
            f"{', '.join(varying) or 'none'} (sweep two keys with --grid)"
        )
    if rest:
        pins = " ".join(f"--where {key}={value_text(table[key].iloc[0])}" for key in rest)
        raise UserError(f"the sweep also varies {', '.join(rest)}: pick one value, e.g. {pins}")
    return x, y


def cell_grid(
    table: pd.DataFrame, x: str, y: str, metric: str
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(mean of ``metric`` over seeds per (y, x) cell, whether each cell had only invalid rows)."""
    xs = sorted(table[x].unique(), key=sort_key)
    ys = sorted(table[y].unique(), key=sort_key)
    valid = table[table["valid"].astype(bool)]
    means = valid.pivot_table(index=y, columns=x, values=metric, aggfunc="mean").reindex(
        index=ys, columns=xs
    )
    invalid = table.groupby([y, x])["valid"].apply(lambda v: not v.astype(bool).any()).unstack()
    return means, invalid.reindex(index=ys, columns=xs).fillna(False).astype(bool)


def cell_spread(
    table: pd.DataFrame, means: pd.DataFrame, y: str, x: str, metric: str
) -> pd.DataFrame:
    """The sample standard deviation of ``metric`` over seeds per cell of ``means`` (empty for one seed)."""
    valid = table[table["valid"].astype(bool)]
    spread = valid.pivot_table(index=y, columns=x, values=metric, aggfunc="std")
    return spread.reindex(index=means.index, columns=means.columns)


def seed_count(rows: pd.DataFrame) -> int:
    return int(rows["seed"].nunique()) if "seed" in rows else 1


def sort_key(value: object) -> tuple:
    return (
        (0, float(value), "")
        if isinstance(value, (int, float, np.number))
        else (1, 0.0, str(value))
    )


def heatmap_figure(
    table: pd.DataFrame,
    x: str | None = None,
    y: str | None = None,
    metric: str = "compute_utilisation",
    where: Sequence[str] = (),
    size_px: tuple[int, int] = DEFAULT_SIZE_PX,
) -> Figure:
    """``metric`` over parameters ``x`` (columns) and ``y`` (rows) of a sweep table."""
    numeric_column(table, metric, "--metric")
    rows = apply_where(table, where)
    x, y = choose_axes(rows, x, y)
    means, invalid = cell_grid(rows, x, y, metric)
    values = means.to_numpy(dtype=float)
    spreads = (
        cell_spread(rows, means, y, x, metric).to_numpy(dtype=float)
        if seed_count(rows) > 1
        else None
    )
    label, factor, text = metric_style(metric, values)
    shown = values * factor
    norm = colour_norm(metric, shown)
    cmap = matplotlib.colormaps["viridis"].with_extremes(bad="#dddddd")
    figure = new_figure(size_px)
    ax = figure.subplots()
    image = ax.imshow(
        np.ma.masked_invalid(shown), origin="lower", aspect="auto", cmap=cmap, norm=norm
    )
    for (row, column), value in np.ndenumerate(values):
        if np.isfinite(value):
            dark = sum(cmap(norm(value * factor))[:3]) / 3 < 0.5
            spread = (
                ""
                if spreads is None or not np.isfinite(spreads[row, column])
                else f"\n± {text(spreads[row, column])}"
            )
            ax.text(
                column,
                row,
                text(value) + spread,
                ha="center",
                va="center",
                color="white" if dark else "black",
            )
        elif invalid.iat[row, column]:
            ax.text(column, row, INVALID_TEXT, ha="center", va="center", color="#555555")
    ax.set_xticks(range(len(means.columns)), [value_text(v) for v in means.columns])
    ax.set_yticks(range(len(means.index)), [value_text(v) for v in means.index])
    ax.set_xlabel(parameter_label(x))
    ax.set_ylabel(parameter_label(y))
    figure.colorbar(image, ax=ax, label=label)
    ax.set_title(heatmap_title(rows, label, x, y, where))
    return figure


def colour_norm(metric: str, shown: np.ndarray) -> Normalize:
    """Utilisation on a fixed 0-100% scale; a positive figure spanning decades on a log scale."""
    if metric.endswith("utilisation"):
        return Normalize(0, 100)
    finite = shown[np.isfinite(shown)]
    if finite.size and (finite > 0).all() and finite.max() / finite.min() > LOG_SPREAD:
        return LogNorm(finite.min(), finite.max())
    return Normalize()


def heatmap_title(rows: pd.DataFrame, label: str, x: str, y: str, where: Sequence[str]) -> str:
    facts = [
        str(rows[key].dropna().iloc[0])
        for key in ("scenario", "algorithm")
        if key in rows and rows[key].nunique() == 1
    ]
    scenario = f"{', '.join(schedule_label(fact) for fact in facts)}: " if facts else ""
    seeds = seed_count(rows)
    notes = [*where, *([f"mean ± sample sd over {seeds} seeds"] if seeds > 1 else [])]
    suffix = f" ({', '.join(notes)})" if notes else ""
    return (
        f"{scenario}{label.split(' (')[0]} by {parameter_label(x)} and {parameter_label(y)}{suffix}"
    )
