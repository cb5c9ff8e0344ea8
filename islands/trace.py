"""The one trace schema shared by the simulator and the real trainer.

A trace is a table with one row per interval of activity of one worker, so that a prediction and a
measurement of the same scenario can be compared row for row:

=============  =====================================================================================
column         meaning
=============  =====================================================================================
time_start_s   start of the interval, seconds since the run started
time_end_s     end of the interval, seconds since the run started
worker         worker rank (an island's replica), 0-based
island         name of the island the worker belongs to
kind           ``compute`` (inner steps), ``comm`` (a collective the worker takes part in, which may
               overlap its compute), ``stall`` (waiting for a collective to finish), ``idle``
               (waiting for other workers: stragglers, barriers), ``wasted`` (a transfer whose bytes
               were thrown away: a collective's attempts that departures broke before it restarted,
               one row per worker from the first attempt's start to its last break; a member dropped
               from one, a joiner's download or a learner's round trip cut by its departure)
bytes          bytes this worker sent during the interval (comm and wasted rows), else 0
fragment       fragment id of a collective (0 when the whole model is one fragment), else -1
outer_step     outer step (DDP: step) the interval belongs to, 0-based
=============  =====================================================================================
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

COLUMNS = (
    "time_start_s",
    "time_end_s",
    "worker",
    "island",
    "kind",
    "bytes",
    "fragment",
    "outer_step",
)
WASTED = "wasted"  # a transfer whose bytes were thrown away
KINDS = ("compute", "comm", "stall", "idle", WASTED)
DTYPES = {
    "time_start_s": "float64",
    "time_end_s": "float64",
    "worker": "int64",
    "island": "object",
    "kind": "object",
    "bytes": "float64",
    "fragment": "int64",
    "outer_step": "int64",
}
NO_FRAGMENT = -1
TRACE_ORDER = ("time_start_s", "worker", "kind")  # how a trace's rows are sorted


class Row(NamedTuple):
    """One trace row, in ``COLUMNS`` order (a plain tuple of the same order reads the same)."""

    time_start_s: float
    time_end_s: float
    worker: int
    island: str
    kind: str
    bytes: float
    fragment: int = NO_FRAGMENT
    outer_step: int = 0


def sorted_columns(rows: Iterable[tuple]) -> dict[str, np.ndarray]:
    """Rows (tuples in ``COLUMNS`` order) as one array per column, sorted by start time, worker, kind."""
    listed = list(rows)
    values = list(zip(*listed)) if listed else [()] * len(COLUMNS)
    columns = {name: np.array(column, dtype=DTYPES[name]) for name, column in zip(COLUMNS, values)}
    # kinds in sorted order: np.unique's inverse, through a dict (no sort of thousands of str objects)
    kinds = values[COLUMNS.index("kind")]
    code = {kind: index for index, kind in enumerate(sorted(set(kinds)))}
    kind_order = np.fromiter(map(code.__getitem__, kinds), dtype=np.intp, count=len(kinds))
    order = np.lexsort((kind_order, columns["worker"], columns["time_start_s"]))
    return {name: column[order] for name, column in columns.items()}


def to_frame(rows: Iterable[tuple]) -> pd.DataFrame:
    """Build a trace DataFrame from tuples in ``COLUMNS`` order, sorted by start time, worker, kind.
    (pandas is imported here, not with the module: a simulation needs no frame until one is asked
    for, and every command starts faster without it.)"""
    import pandas as pd

    return pd.DataFrame(
        {
            name: pd.Series(column, dtype=DTYPES[name])
            for name, column in sorted_columns(rows).items()
        }
    )


def check_frame(frame: pd.DataFrame) -> None:
    """Raise ``ValueError`` if a table does not follow the trace schema."""
    missing = [column for column in COLUMNS if column not in frame.columns]
    if missing:
        raise ValueError(f"trace is missing columns: {', '.join(missing)}")
    unknown = sorted(set(frame["kind"]) - set(KINDS))
    if unknown:
        raise ValueError(
            f"trace has unknown kinds: {', '.join(unknown)} (allowed: {', '.join(KINDS)})"
        )
    if (frame["time_end_s"] < frame["time_start_s"]).any():
        raise ValueError("trace has rows that end before they start")
