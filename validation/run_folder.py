"""A run folder read back, every file checked to be what ``islands train --out DIR`` writes.

``islands compare`` reads a folder made anywhere, ``islands validate`` the one its own scaled run just
wrote; both go through here, so a damaged folder (a file missing, empty or cut short, JSON with NaN,
a trace with missing columns or cells, a figure outside its physical range) is refused in one line
naming the file and what is wrong, never compared into a silent wrong number or a traceback.

``islands train`` writes every file atomically and whole: JSON without NaN (``io.json_text`` writes
null), a trace that ends with a line end. So a trace whose last line has no end was cut short, even
where the cut left a line that parses (``...,1`` of ``...,12``).
"""

from __future__ import annotations

import io
import math
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from islands.errors import UserError
from islands.io import parse_json, read_bounded_text
from islands.numbers import is_finite_number, is_whole_number
from islands.scenarios.spec import MAX_FRAGMENTS, MAX_REPLICAS, shown_value
from islands.trace import COLUMNS, DTYPES, KINDS, NO_FRAGMENT, check_frame, to_frame

RUN_FILES = ("summary.json", "run.json", "trace.csv")
TRACE_LIMIT_BYTES = 2**30  # about 25 million rows: a long run of many workers
FIGURE_KEYS = (
    "wall_time_s",
    "compute_utilisation",
    "stall_s",
    "idle_s",
    "bytes_per_worker",
    "mean_sync_s",
)
WITHIN_WALL_KEYS = (
    "stall_s",
    "idle_s",
    "mean_sync_s",
)  # seconds per worker or per sync: 0 to the wall time
NON_NEGATIVE_TRACE_COLUMNS = ("time_start_s", "time_end_s", "bytes", "worker")
# the indices' ranges: a scenario's workers and fragments (docs/limits.md), and outer steps far beyond
# any run's, each worker's syncs keyed by the three together within an int64 (``summary.sync_spans``)
INDEX_RANGES = {
    "worker": (0, MAX_REPLICAS - 1),
    "fragment": (NO_FRAGMENT, MAX_FRAGMENTS - 1),
    "outer_step": (0, 2**32),
}
MAX_WHOLE = (
    2**53
)  # a whole-number column's cells: exact as the floats the CSV's numbers are read as
SPAN_TOLERANCE = (
    1e-6  # relative (and seconds): the CSV keeps every digit, so only a rounding's worth
)


@dataclass(frozen=True)
class RunRecord:
    """What ``islands train`` wrote: its summary (the simulator's keys), its run facts and its trace."""

    directory: Path
    summary: dict[str, Any]
    run_info: dict[str, Any]
    trace: pd.DataFrame


def read_run(directory: Path) -> RunRecord:
    """The three files of a run folder, each checked (see the module's docstring)."""
    if not directory.exists():
        raise UserError(f"{directory}: no such run folder")
    if not directory.is_dir():
        raise UserError(
            f"{directory}: is a file, not a run folder: give the folder `islands train --out` wrote"
        )
    missing = [name for name in RUN_FILES if not (directory / name).exists()]
    if missing:
        raise UserError(
            f"{directory}: no {', '.join(missing)}: not a folder `islands train --out` wrote "
            "(or the run did not finish writing it)"
        )
    summary = read_json(directory / "summary.json")
    if summary.get(
        "complete"
    ):  # a run cut short has no utilisation; compare refuses it, naming why
        check_figures(summary, directory / "summary.json")
    trace = read_trace(directory / "trace.csv")
    if summary.get("complete"):
        check_span(trace, summary["wall_time_s"], directory / "trace.csv")
    return RunRecord(directory, summary, read_json(directory / "run.json"), trace)


def check_span(trace: pd.DataFrame, wall_s: float, path: Path) -> None:
    """The trace spans the summary's wall time (``summary.summarise`` computes it so, from this very
    trace): one cut at a line end, losing the run's last rows, is refused too."""
    span_s = float(trace["time_end_s"].max() - trace["time_start_s"].min())
    if not math.isclose(span_s, wall_s, rel_tol=SPAN_TOLERANCE, abs_tol=SPAN_TOLERANCE):
        raise UserError(
            f"{path}: spans {span_s:g} s, summary.json's wall_time_s {wall_s:g} s: the trace is cut "
            "short or from another run"
        )


def read_json(path: Path) -> dict[str, Any]:
    text = read_bounded_text(path, "run file")
    if not text.strip():
        raise UserError(f"{path}: is empty: the run did not finish writing it")
    document = parse_json(text, path, "run file", " (islands train writes null)")
    if not isinstance(document, dict):
        raise UserError(f"{path}: must hold one JSON object")
    return document


def required(document: dict[str, Any], key: str, path: Path) -> Any:
    if key not in document:
        raise UserError(f"{path}: no '{key}': not a file `islands train` wrote")
    return document[key]


def check_figures(summary: dict[str, Any], path: Path) -> None:
    """Refuse a compared figure that is not a finite number within its physical range."""
    for key in FIGURE_KEYS:
        value = required(summary, key, path)
        if not is_finite_number(value):
            raise UserError(f"{path}: '{key}' must be a finite number (got {shown_value(value)})")
    wall_s = summary["wall_time_s"]
    if wall_s <= 0:
        raise UserError(f"{path}: 'wall_time_s' must be above 0 s (got {wall_s!r})")
    if not 0 <= summary["compute_utilisation"] <= 1:
        raise UserError(
            f"{path}: 'compute_utilisation' is a fraction, 0 to 1 (got {summary['compute_utilisation']!r})"
        )
    for key in WITHIN_WALL_KEYS:
        if not 0 <= summary[key] <= wall_s:
            raise UserError(
                f"{path}: '{key}' must be 0 to the run's wall_time_s, {wall_s:g} s (got {summary[key]!r})"
            )
    if summary["bytes_per_worker"] < 0:
        raise UserError(
            f"{path}: 'bytes_per_worker' must be 0 or more (got {summary['bytes_per_worker']!r})"
        )


def read_trace(path: Path) -> pd.DataFrame:
    text = read_bounded_text(path, "trace", TRACE_LIMIT_BYTES)
    if not text.strip():
        raise UserError(f"{path}: is empty: the run did not finish writing it")
    if not text.endswith("\n"):
        raise UserError(f"{path}: its last line has no line end: the file is cut short")
    try:
        with (
            warnings.catch_warnings()
        ):  # a first row longer than the header: an error, not a lost cell
            warnings.simplefilter("error", pd.errors.ParserWarning)
            frame = pd.read_csv(
                io.StringIO(text), index_col=False, dtype={"island": str, "kind": str}
            )
    except (
        ValueError,
        pd.errors.ParserError,
        pd.errors.ParserWarning,
    ) as error:  # EmptyDataError: a ValueError
        raise UserError(
            f"{path}: not a trace in the islands schema ({' '.join(str(error).split())})"
        ) from None
    missing = [column for column in COLUMNS if column not in frame.columns]
    if missing:
        raise UserError(
            f"{path}: no column {', '.join(missing)}: not a trace in the islands schema"
        )
    if frame.empty:
        raise UserError(f"{path}: has no rows: the run recorded nothing")
    check_cells(frame, path)
    frame = typed(frame, path)
    try:
        check_frame(frame)
        trace = to_frame(frame[list(COLUMNS)].itertuples(index=False, name=None))
    except ValueError as error:
        raise UserError(f"{path}: not a trace in the islands schema ({error})") from None
    check_values(trace, path)
    return trace


def check_cells(frame: pd.DataFrame, path: Path) -> None:
    """Refuse an empty cell, naming its line (the header is line 1)."""
    empty = frame[list(COLUMNS)].isna()
    if empty.to_numpy().any():
        row = int(empty.any(axis=1).to_numpy().argmax())
        column = empty.columns[empty.iloc[row].to_numpy().argmax()]
        raise UserError(f"{path}: line {row + 2} has no {column}: the file is damaged or cut short")


def typed(frame: pd.DataFrame, path: Path) -> pd.DataFrame:
    """The trace's numeric columns as numbers of their type (``trace.DTYPES``): a kind that is not
    one of ``trace.KINDS``, a cell that is no number, or a whole-number column's cell that is not a
    whole number within +-2**53, is refused naming its line (the header is line 1)."""
    unknown = ~frame["kind"].isin(KINDS).to_numpy()
    if unknown.any():
        row = int(unknown.argmax())
        raise UserError(
            f"{path}: line {row + 2}: kind must be one of {', '.join(KINDS)} (got "
            f"{shown_value(frame['kind'].iloc[row])})"
        )
    frame = frame.copy()
    for column in COLUMNS:
        if DTYPES[column] == "object":
            continue
        values = numbers(frame[column])
        bad = np.isnan(values)
        rule = "a number"
        if DTYPES[column] == "int64":
            known = np.where(np.isfinite(values), values, np.nan)
            bad = ~(np.abs(known) <= MAX_WHOLE) | (np.nan_to_num(known) % 1 != 0)
            rule = "a whole number"
        if bad.any():
            row = int(bad.argmax())
            cell = frame[column].iloc[row]
            cell = shown_value(cell.item() if isinstance(cell, np.generic) else cell)
            raise UserError(f"{path}: line {row + 2}: {column} must be {rule} (got {cell})")
        frame[column] = values.astype(DTYPES[column])
    return frame


def numbers(column: pd.Series) -> np.ndarray:
    """The column's cells as floats, NaN for a cell that is no number; an integer past float's range
    (read as a Python int) as an infinity."""
    try:
        return pd.to_numeric(column, errors="coerce").to_numpy(dtype="float64", copy=True)
    except OverflowError:
        return np.array([number(cell) for cell in column], dtype="float64")


def number(cell: Any) -> float:
    try:
        return float(pd.to_numeric(pd.Series([cell]), errors="coerce").iloc[0])
    except OverflowError:
        return -math.inf if is_whole_number(cell) and cell < 0 else math.inf


def check_values(trace: pd.DataFrame, path: Path) -> None:
    """Refuse a time or byte count that is not finite, or is negative, and an index outside its range."""
    for column in NON_NEGATIVE_TRACE_COLUMNS:
        values = trace[column].to_numpy()
        bad = ~np.isfinite(values) | (values < 0)
        if bad.any():
            raise UserError(
                f"{path}: {column} must be finite and 0 or more (got {float(values[bad.argmax()]):g})"
            )
    for column, (low, high) in INDEX_RANGES.items():
        values = trace[column].to_numpy()
        bad = (values < low) | (values > high)
        if bad.any():
            raise UserError(
                f"{path}: {column} must be {low} to {high} (got {values[bad.argmax()]})"
            )
