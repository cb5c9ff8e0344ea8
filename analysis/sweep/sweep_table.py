"""Sweep tables on disk and the questions asked of them: which columns are parameters, which rows win.

A column is a parameter when it is a key ``--set`` takes: a top-level scenario key (``seed``), or a
dotted key whose first part is a section (``schedule.inner_steps``) or ``island``
(``island.*.bandwidth_gbps``). Summary figures never look like that (per-island figures are
``islands.<name>.<key>``).
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from islands.errors import UserError
from islands.io import read_bounded_bytes, write_table
from islands.scenarios.spec import TOP_KEYS

from .grid import SECTION_KEYS

REQUIRED_COLUMNS = ("valid",)
MAXIMISED_SUFFIX = "utilisation"
TIE_BREAKERS = ("peak_bandwidth_gbps", "bandwidth_needed_gbps")
NOT_FIGURES = ("seed", "run", "valid", "complete")
TEXT_COLUMNS = ("error", "incomplete_reason")
SPREAD_SUFFIX = "_sd"  # a figure's sample standard deviation over seeds, beside its mean


def parquet_available() -> bool:
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        return False
    return True


def sweep_paths(path: str | Path) -> list[Path]:
    """The files ``write_sweep`` writes for ``path``: its CSV and, where pyarrow imports, its Parquet."""
    path = Path(path)
    csv_path = (
        path
        if path.suffix == ".csv"
        else path.with_name(path.name.removesuffix(".parquet") + ".csv")
    )
    return [csv_path, csv_path.with_suffix(".parquet")] if parquet_available() else [csv_path]


def write_sweep(table: pd.DataFrame, path: str | Path) -> list[Path]:
    """Write ``path`` as CSV and, where pyarrow imports, the same name with ``.parquet``; atomically."""
    written = sweep_paths(path)
    for target in written:
        write_table(table, target)
    return written


def read_sweep(path: str | Path) -> pd.DataFrame:
    """A sweep table from ``.csv`` or ``.parquet``; anything unreadable is a one-line UserError."""
    path = Path(path)
    data = io.BytesIO(read_bounded_bytes(path, "sweep table"))
    try:
        table = pd.read_parquet(data) if path.suffix == ".parquet" else pd.read_csv(data)
    except (OSError, ValueError, ImportError) as exc:
        raise UserError(
            f"{path}: cannot be read as a sweep table ({str(exc).splitlines()[0]})"
        ) from None
    missing = [column for column in REQUIRED_COLUMNS if column not in table.columns]
    if missing or not parameter_columns(table):
        raise UserError(
            f"{path}: not a sweep table (no {'valid' if missing else 'parameter'} column); "
            "write one with `islands sweep`"
        )
    return table


def check_sweep_of(table: pd.DataFrame, scenario: str, path: str | Path) -> None:
    """Refuse, in one line, a sweep table whose runs name another scenario than ``scenario`` (its
    ``scenario`` column, as ``islands sweep`` writes it; a table without one is not checked)."""
    if "scenario" not in table.columns:
        return
    names = sorted({str(name) for name in table["scenario"].dropna()})
    if names and names != [scenario]:
        raise UserError(
            f"{path}: a sweep of {', '.join(map(repr, names))}, not of {scenario!r} (the scenario "
            "given): sweep this one with `islands sweep`"
        )


def is_parameter(column: str) -> bool:
    first = column.split(".")[0]
    return (
        column in TOP_KEYS
        or first in SECTION_KEYS
        or (first == "island" and column.count(".") == 2)
    )


def parameter_columns(table: pd.DataFrame) -> list[str]:
    return [column for column in table.columns if is_parameter(column)]


def maximised(column: str) -> bool:
    """Utilisation is better high; every other figure (time, bytes, bandwidth) is better low."""
    return column.endswith(MAXIMISED_SUFFIX)


def numeric_column(table: pd.DataFrame, column: str, what: str) -> None:
    """Refuse a ``column`` that is not a summary figure: missing, a flag, or text (``error`` and
    ``incomplete_reason`` read back as empty numbers where no run had one)."""
    if column not in figure_columns(table):
        raise UserError(
            f"{what} {column}: not a numeric column of the sweep table "
            f"(e.g. {', '.join(figure_columns(table)[:6])})"
        )


def figure_columns(table: pd.DataFrame) -> list[str]:
    return [
        c
        for c in table.columns
        if c not in (*NOT_FIGURES, *TEXT_COLUMNS)
        and not is_parameter(c)
        and pd.api.types.is_numeric_dtype(table[c])
        and not pd.api.types.is_bool_dtype(table[c])
    ]


def cut_short(table: pd.DataFrame) -> pd.Series:
    """Rows of runs that ran but did not finish (``complete`` False); tables without the column have none."""
    if "complete" not in table.columns:
        return pd.Series(False, index=table.index)
    return table["valid"].astype(bool) & table["complete"].eq(False)


def finished_rows(table: pd.DataFrame) -> pd.DataFrame:
    """Valid rows of the combinations whose every run finished: one cut-short seed removes its combination,
    so no mean over seeds is taken over the runs that happened to finish."""
    valid = table["valid"].astype(bool)
    keys = [column for column in parameter_columns(table) if column != "seed"]
    short = cut_short(table)
    if not short.any():
        return table[valid]
    if not keys:
        return table.iloc[0:0]
    spoiled = set(table.loc[short, keys].astype(str).itertuples(index=False))
    whole = ~pd.Series(
        [row in spoiled for row in table[keys].astype(str).itertuples(index=False)],
        index=table.index,
    )
    return table[valid & whole]


def mean_over_seeds(table: pd.DataFrame, spread: Sequence[str] = ()) -> pd.DataFrame:
    """Finished rows averaged over seeds: one row per combination of the other parameters, with ``seeds``
    and, for each column of ``spread``, ``<column>_sd``: its sample standard deviation over the seeds
    (n - 1 in the denominator; empty for one seed). Combinations with a run cut short are left out (see
    ``finished_rows``)."""
    valid = finished_rows(table)
    keys = [column for column in parameter_columns(table) if column != "seed"]
    numeric = [
        c
        for c in valid.columns
        if pd.api.types.is_numeric_dtype(valid[c]) and c not in keys and c not in NOT_FIGURES
    ]
    if not keys:
        if not len(valid):
            return valid[numeric]
        spreads = valid[list(spread)].std(ddof=1).add_suffix(SPREAD_SUFFIX)
        return pd.concat([valid[numeric].mean(), spreads]).to_frame().T.assign(seeds=len(valid))
    grouped = valid.groupby(keys, sort=False, dropna=False)
    means = (
        grouped[numeric].mean().join(grouped[list(spread)].std(ddof=1).add_suffix(SPREAD_SUFFIX))
    )
    return means.join(grouped.size().rename("seeds")).reset_index()


def best_rows(
    table: pd.DataFrame, rank_by: str = "compute_utilisation", top: int = 5
) -> pd.DataFrame:
    """The ``top`` combinations by ``rank_by`` (highest utilisation, else lowest), averaged over seeds,
    with ``<rank_by>_sd``, its standard deviation over the seeds (``mean_over_seeds``).

    Ties go to the cheaper network: lower peak bandwidth, then lower bandwidth needed.
    """
    numeric_column(table, rank_by, "--rank-by")
    means = mean_over_seeds(table, [rank_by])
    order = [rank_by, *(key for key in TIE_BREAKERS if key in means and key != rank_by)]
    ascending = [not maximised(rank_by)] + [True] * (len(order) - 1)
    return (
        means.sort_values(order, ascending=ascending, kind="stable")
        .head(top)
        .reset_index(drop=True)
    )
