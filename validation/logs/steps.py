"""A run of any training stack as islands reads it: one row per step (``islands compare SCENARIO LOG``).

The per-step format (docs/how-to/compare-any-stack.md) is CSV with a header, or JSON lines (one object
a line), each row one step of one rank:

* ``step``: the run's step, counting its first step as 1 (a whole number, 1 or more);
* ``wall_s``: seconds the step took, or instead ``time_s``: a clock reading in seconds at the step's
  end (then each rank's first row only opens the window: its duration is not known);
* ``compute_s``: seconds of it spent computing; ``blocked_s``: seconds of it spent waiting on
  communication; ``synced``: whether the step ended in a sync (0/1 or false/true);
* optional ``bytes`` (sent by the rank during the step) and ``rank`` (0 when absent).

Other columns (a loss, a learning rate) are read past. Every row holds every column its first row
holds; a rank's steps follow one another, one row each; every rank logs the same steps. Whatever
breaks a rule is refused in one line naming the file, the line and the rule.

Each reader (this one, ``profiler``, ``torchtitan``) gives a ``StepLog``: rows of
``LOG_COLUMNS``, a row standing for ``steps`` steps that end at ``step`` (one, but for a torchtitan
log, which times the steps between two logged ones), with NaN where the format does not say.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from islands.errors import UserError
from islands.io import parse_json, read_bounded_text
from islands.numbers import is_finite_number, is_number, is_whole_number
from islands.scenarios.spec import shown_value

LOG_LIMIT_BYTES = 2**30
LOG_COLUMNS = (
    "rank",
    "step",
    "steps",
    "wall_s",
    "compute_s",
    "blocked_s",
    "synced",
    "bytes",
    "where",
)
REQUIRED = ("step", "compute_s", "blocked_s", "synced")
OPTIONAL = ("bytes", "rank")
FORMAT_TEXT = "step, wall_s or time_s, compute_s, blocked_s, synced; bytes and rank optional"
MAX_STEP = 2**53  # beyond this a float no longer holds every whole number
MAX_RANK = 2**31 - 1
MAX_STEP_S = 1e6  # about 11.6 days: no step of a training run is longer
MAX_CLOCK_S = 1e12  # a Unix time in seconds is about 1.8e9
MAX_BYTES = 1e18  # an exabyte in one step
SUM_TOLERANCE = 1e-6  # compute_s + blocked_s may pass wall_s by a rounding's worth (relative and s)


@dataclass(frozen=True)
class StepLog:
    path: Path
    format: str  # "steps", "chrome" or "torchtitan"
    rows: pd.DataFrame  # LOG_COLUMNS
    names_ranks: bool  # whether the log says which rank wrote each row
    notes: list[str] = field(default_factory=list)  # what the reader read, for the printed notes

    @property
    def first_step(self) -> int:
        return int((self.rows["step"] - self.rows["steps"] + 1).min())

    @property
    def last_step(self) -> int:
        return int(self.rows["step"].max())

    @property
    def ranks(self) -> list[int]:
        return sorted(int(r) for r in self.rows["rank"].unique())


def log_frame(records: list[dict[str, Any]]) -> pd.DataFrame:
    frame = pd.DataFrame.from_records(records, columns=list(LOG_COLUMNS))
    return frame.astype(
        {
            column: float
            for column in LOG_COLUMNS
            if column not in ("rank", "step", "steps", "where")
        }
    )


def read_text(path: Path) -> str:
    """The log's text, refused when missing, empty or cut mid-line (every format this reads ends each
    line with a line end, so a last line without one was cut short, even where it still parses)."""
    text = read_bounded_text(path, "log", LOG_LIMIT_BYTES)
    if not text.strip():
        raise UserError(f"{path}: is empty: the run logged nothing")
    if not text.endswith("\n"):
        raise UserError(f"{path}: its last line has no line end: the file is cut short")
    return text


# one cell, by kind: each takes the value as read (CSV: text; JSON: its type) and a prefix for messages


def number(value: Any, where: str, key: str, low: float, high: float) -> float:
    if not is_finite_number(value):
        raise UserError(f"{where}: {key} must be a finite number (got {shown_value(value)})")
    if not low <= value <= high:
        raise UserError(f"{where}: {key} must be {low:g} to {high:g} (got {value:g})")
    return float(value)


def whole(value: Any, where: str, key: str, low: int, high: int) -> int:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not is_whole_number(value):
        raise UserError(f"{where}: {key} must be a whole number (got {value!r})")
    if not low <= value <= high:
        raise UserError(f"{where}: {key} must be {low} to {high} (got {value})")
    return value


def flag(value: Any, where: str, key: str) -> bool:
    if isinstance(value, bool) or (is_whole_number(value) and value in (0, 1)):
        return bool(value)
    raise UserError(f"{where}: {key} must be 0 or 1, false or true (got {value!r})")


def csv_value(text: str) -> Any:
    """A CSV cell as JSON would hold it: true/false, a whole number, a number, else the text."""
    text = text.strip()
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def step_number(value: Any, where: str) -> int:
    if is_number(value) and value == 0:
        raise UserError(
            f"{where}: step must be 1 to {MAX_STEP} (got 0): the format counts the run's first step as 1"
        )
    return whole(value, where, "step", 1, MAX_STEP)


def step_record(cells: dict[str, Any], keys: tuple[str, ...], where: str) -> dict[str, Any]:
    """One row of the per-step format, each cell checked; ``keys``: the optional and clock columns
    the log's first row holds, which every row must hold."""
    missing = [key for key in (*REQUIRED, *keys) if key not in cells or cells[key] in ("", None)]
    if missing:
        raise UserError(
            f"{where}: no {', '.join(missing)} (every row holds {', '.join((*REQUIRED, *keys))})"
        )
    record = {
        "rank": whole(cells["rank"], where, "rank", 0, MAX_RANK) if "rank" in keys else 0,
        "step": step_number(cells["step"], where),
        "steps": 1,
        "compute_s": number(cells["compute_s"], where, "compute_s", 0, MAX_STEP_S),
        "blocked_s": number(cells["blocked_s"], where, "blocked_s", 0, MAX_STEP_S),
        "synced": float(flag(cells["synced"], where, "synced")),
        "bytes": number(cells["bytes"], where, "bytes", 0, MAX_BYTES)
        if "bytes" in keys
        else math.nan,
        "where": where,
    }
    if "wall_s" in keys:
        record["wall_s"] = number(cells["wall_s"], where, "wall_s", 0, MAX_STEP_S)
    else:
        record["time_s"] = number(cells["time_s"], where, "time_s", 0, MAX_CLOCK_S)
    return record


def clock_keys(first: dict[str, Any], path: Path) -> tuple[str, ...]:
    """The optional columns and the clock (``wall_s``, else ``time_s``) of the log's first row."""
    clock = "wall_s" if "wall_s" in first else "time_s" if "time_s" in first else None
    missing = [key for key in REQUIRED if key not in first] + (
        [] if clock else ["wall_s (or time_s)"]
    )
    if missing or clock is None:
        raise UserError(
            f"{path}: no column {', '.join(missing)}: not a per-step log ({FORMAT_TEXT})"
        )
    return (clock, *(key for key in OPTIONAL if key in first))


def csv_rows(text: str, path: Path) -> Iterator[tuple[dict[str, Any], str]]:
    """Each row of a CSV log as {column: text}, with "PATH: line N" (the header is line 1)."""
    reader = csv.reader(io.StringIO(text))
    try:
        header = next(reader)
        if len(set(header)) < len(header):
            raise UserError(f"{path}: line 1 names a column twice: {', '.join(header)}")
        clock_keys(dict.fromkeys(header), path)  # the columns, before any row
        for cells in reader:
            where = f"{path}: line {reader.line_num}"
            if not cells or cells == [""]:
                continue
            if len(cells) != len(header):
                raise UserError(
                    f"{where}: {len(cells)} cells, the header names {len(header)} columns"
                )
            yield dict(zip(header, map(csv_value, cells))), where
    except csv.Error as error:
        raise UserError(f"{path}: line {reader.line_num}: not CSV ({error})") from None


def json_rows(text: str, path: Path) -> Iterator[tuple[dict[str, Any], str]]:
    """Each line of a JSON lines log as its object, with "PATH: line N"."""
    for number_, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path}: line {number_}"
        document = parse_json(line, where, "per-step log line")
        if not isinstance(document, dict):
            raise UserError(f"{where}: must hold one JSON object (a step)")
        yield document, where


def read_steps(path: Path) -> StepLog:
    """A per-step log (CSV or JSON lines, told apart by its first character), every row checked."""
    text = read_text(path)
    rows = json_rows(text, path) if text.lstrip().startswith("{") else csv_rows(text, path)
    records: list[dict[str, Any]] = []
    keys: tuple[str, ...] = ()
    for cells, where in rows:
        keys = keys or clock_keys(cells, path)
        records.append(step_record(cells, keys, where))
    if not records:
        raise UserError(f"{path}: has no rows: the run logged no step")
    if "time_s" in keys:
        records = durations_from_clock(records)
    return checked(StepLog(path, "steps", log_frame(records), "rank" in keys))


def durations_from_clock(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each step's wall_s as its clock reading less its rank's previous one; each rank's first row
    only opens the window. A clock that goes back is refused."""
    last: dict[int, dict[str, Any]] = {}
    timed = []
    for record in records:
        previous = last.get(record["rank"])
        last[record["rank"]] = record
        if previous is None:
            continue
        if record["time_s"] < previous["time_s"]:
            raise UserError(
                f"{record['where']}: time_s {record['time_s']:g} is before the rank's previous step's "
                f"{previous['time_s']:g}: a clock reading at each step's end goes forward"
            )
        timed.append({**record, "wall_s": record["time_s"] - previous["time_s"]})
    if not timed:
        raise UserError(
            f"{records[0]['where'].split(': line')[0]}: has one row per rank: with time_s, a step's "
            "duration is its time less the previous step's, so log two steps or more"
        )
    return timed


def checked(log: StepLog) -> StepLog:
    """Refuse steps out of order, twice or missing on a rank, ranks that logged other steps, a step
    longer than ``MAX_STEP_S`` (whatever the reader timed it from: a clock, a trace's span) and a step
    whose compute and blocked seconds pass its wall time."""
    for record in log.rows.itertuples(index=False):
        if record.wall_s > MAX_STEP_S * record.steps:
            raise UserError(
                f"{record.where}: a step of {record.wall_s / record.steps:.12g} s: no training step lasts "
                f"more than {MAX_STEP_S:,.0f} s"
            )
        if (
            record.compute_s + record.blocked_s
            > record.wall_s * (1 + SUM_TOLERANCE) + SUM_TOLERANCE
        ):
            raise UserError(
                f"{record.where}: compute_s + blocked_s is {record.compute_s + record.blocked_s:g} s, "
                f"more than the step's wall time {record.wall_s:g} s"
            )
    check_order(log.rows)
    spans = {
        rank: (int(g["step"].iloc[0] - g["steps"].iloc[0] + 1), int(g["step"].iloc[-1]))
        for rank, g in log.rows.groupby("rank", sort=True)
    }
    (rank, span), *others = spans.items()
    for other, other_span in others:
        if other_span != span:
            raise UserError(
                f"{log.path}: rank {other} logged steps {other_span[0]}-{other_span[1]}, rank {rank} "
                f"steps {span[0]}-{span[1]}: log the same steps on every rank"
            )
    return log


def check_order(rows: pd.DataFrame) -> None:
    """Each rank's rows, in the order of the file, follow one another: a row's first step is the one
    after the rank's previous row's last."""
    last: dict[int, int] = {}
    for record in rows.itertuples(index=False):
        first = record.step - record.steps + 1
        previous = last.get(record.rank)
        last[record.rank] = record.step
        if previous is None or first == previous + 1:
            continue
        rank = f" (rank {record.rank})" if rows["rank"].nunique() > 1 else ""
        if first <= previous:
            what = "twice" if record.step == previous else "out of order"
            raise UserError(
                f"{record.where}: step {record.step} after step {previous}{rank}: steps {what}"
            )
        raise UserError(
            f"{record.where}: step {record.step} after step {previous}{rank}: every step is logged "
            f"(step {previous + 1} is missing)"
        )
