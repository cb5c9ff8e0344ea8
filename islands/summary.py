"""The run summary, computed from a trace: one definition for the simulator and the trainer.

Because both sides derive their summary from the same trace schema with this one function, a
prediction (``islands simulate --json``) and a measurement (the trainer's ``summary.json``) have the
same keys with the same meaning and can be diffed directly.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from islands.units import BITS_PER_BYTE, BITS_PER_GBIT

from .trace import COLUMNS, DTYPES, NO_FRAGMENT, WASTED, check_frame, sorted_columns

if TYPE_CHECKING:
    import pandas as pd


def gbps(byte_count: float, seconds: float) -> float:
    """Bytes moved in a time, as Gbit/s (1 Gbit/s = 1e9 bit/s)."""
    return byte_count * BITS_PER_BYTE / BITS_PER_GBIT / seconds if seconds > 0 else 0.0


@dataclass(frozen=True)
class Columns:
    """A trace's columns as arrays, with each row's worker as an index into ``ranks`` (sorted)."""

    start: np.ndarray
    end: np.ndarray
    ranks: np.ndarray
    worker: np.ndarray  # index into ranks
    island: np.ndarray
    kind: np.ndarray
    bytes: np.ndarray
    fragment: np.ndarray
    outer_step: np.ndarray

    @classmethod
    def of(cls, trace: pd.DataFrame) -> Columns:
        return cls.from_arrays({name: trace[name].to_numpy(dtype=DTYPES[name]) for name in COLUMNS})

    @classmethod
    def of_rows(cls, rows: Iterable[tuple]) -> Columns:
        """Straight from trace rows, as ``to_frame`` would order them, without a DataFrame."""
        return cls.from_arrays(sorted_columns(rows))

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray]) -> Columns:
        ranks, worker = np.unique(arrays["worker"], return_inverse=True)
        return cls(
            arrays["time_start_s"],
            arrays["time_end_s"],
            ranks,
            worker.reshape(-1),
            arrays["island"],
            arrays["kind"],
            arrays["bytes"],
            arrays["fragment"],
            arrays["outer_step"],
        )

    def per_worker_sum(self, values: np.ndarray) -> np.ndarray:
        return np.bincount(self.worker, weights=values, minlength=len(self.ranks))

    def syncs(self) -> np.ndarray:
        """Which rows are a collective's (comm rows of a fragment; a joiner's download is not a sync)."""
        return (self.kind == "comm") & (self.fragment != NO_FRAGMENT)

    def broken_attempts(self) -> np.ndarray:
        """Which rows are a collective's attempts that broke (wasted rows of a fragment)."""
        return (self.kind == WASTED) & (self.fragment != NO_FRAGMENT)


def group_spans(
    keys: np.ndarray, start: np.ndarray, end: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Rows grouped by their integer ``keys``: each key once, ascending, and its span, the latest end
    less the earliest start among its rows."""
    if not len(keys):
        return keys, np.zeros(0)
    order = np.argsort(keys, kind="stable")
    sorted_keys = keys[order]
    firsts = np.flatnonzero(np.r_[True, sorted_keys[1:] != sorted_keys[:-1]])
    spans = np.maximum.reduceat(end[order], firsts) - np.minimum.reduceat(start[order], firsts)
    return sorted_keys[firsts], spans


def plays(columns: Columns) -> np.ndarray:
    """For each row, how many times its worker's compute had gone back to an earlier outer step
    before it: a failure that rolls the run back to its last outer step makes the syncs after it
    again, with the same (outer step, fragment), and each play is a sync of its own. Only compute
    rows count (an exchange of outer step k may run beside the compute of k + 1)."""
    computing = columns.kind == "compute"
    if not len(computing):
        return np.zeros(0, dtype=np.int64)
    order = np.lexsort((~computing, columns.start, columns.worker))
    worker, outer_step, computed = (
        columns.worker[order],
        columns.outer_step[order],
        computing[order],
    )
    steps = np.flatnonzero(computed)  # the compute rows, in each worker's time order
    went_back = np.zeros(len(order), dtype=np.int64)
    went_back[steps[1:]] = (worker[steps[1:]] == worker[steps[:-1]]) & (
        outer_step[steps[1:]] < outer_step[steps[:-1]]
    )
    counted = np.cumsum(went_back)
    first_of_worker = np.flatnonzero(np.r_[True, worker[1:] != worker[:-1]])
    sizes = np.diff(np.r_[first_of_worker, len(worker)])
    before_worker = np.repeat(counted[first_of_worker] - went_back[first_of_worker], sizes)
    result = np.empty(len(order), dtype=np.int64)
    result[order] = counted - before_worker
    return result


def sync_spans(columns: Columns, per_worker: bool) -> tuple[np.ndarray, np.ndarray]:
    """Each collective's (outer step, fragment[, worker index]) as rows of a key array, and its
    duration: first start to last end (``group_spans``). A collective that broke and restarted
    spans every attempt, from its first (the wasted rows of its key: what its members waited); one
    played again after a rollback (``plays``) is another sync; a learner's exchange (``per_worker``)
    has no attempts, and its round trip cut by its departure is no sync."""
    synced = columns.syncs()
    rows = np.flatnonzero(synced if per_worker else synced | columns.broken_attempts())
    parts = [columns.outer_step[rows], columns.fragment[rows] - NO_FRAGMENT]
    if per_worker:
        parts.append(columns.worker[rows].astype(np.int64))
    parts.append(plays(columns)[rows])
    bounds = [int(part.max()) + 1 if len(part) else 1 for part in parts]
    keys = np.ravel_multi_index(parts, bounds) if len(rows) else np.zeros(0, dtype=np.int64)
    unique, spans = group_spans(keys, columns.start[rows], columns.end[rows])
    completed = np.isin(unique, keys[synced[rows]])  # not the attempts of one never completed
    unique, spans = unique[completed], spans[completed]
    split = (
        np.stack(np.unravel_index(unique, bounds), axis=1)[:, :-1]
        if len(unique)
        else np.zeros((0, len(parts) - 1), int)
    )
    split[:, 1] += NO_FRAGMENT
    return split, spans


def sync_durations(trace: pd.DataFrame, per_worker: bool = False) -> pd.Series:
    """Duration of each collective, indexed by (outer_step, fragment): first start to last end.
    Comm rows without a fragment (weight downloads of joiners and late workers) are not syncs.
    ``per_worker``: each worker's exchange on its own (learners on their own clocks, whose outer
    steps do not line up), indexed by (outer_step, fragment, worker)."""
    import pandas as pd

    columns = Columns.of(trace)
    keys, spans = sync_spans(columns, per_worker)
    if per_worker:
        keys[:, 2] = columns.ranks[keys[:, 2]]
    names = ["outer_step", "fragment", *(["worker"] if per_worker else [])]
    index = pd.MultiIndex.from_arrays([keys[:, i] for i in range(len(names))], names=names)
    return pd.Series(spans, index=index, name="time_end_s")


def worker_presence(columns: Columns) -> np.ndarray:
    """Per worker, the length of the union of its rows' intervals: the time it was there. Wasted rows
    are left out: a transfer thrown away adds bytes, not time there (a member's own rows cover its
    wait for a broken attempt; a joiner's cut download would count for some joiners and not others).

    With a worker's rows sorted by start, row i adds max(0, end_i - max(start_i, E)), where E is the
    latest end among its earlier rows; gaps (a worker away between a departure and a return) add
    nothing. E is a running maximum within each worker, taken over the ends' ranks offset by the
    worker's index, so that one pass serves every worker.
    """
    kept = columns.kind != WASTED
    if not kept.any():
        return np.zeros(len(columns.ranks))
    order = np.flatnonzero(kept)[np.lexsort((columns.start[kept], columns.worker[kept]))]
    worker, start, end = columns.worker[order], columns.start[order], columns.end[order]
    by_end = np.argsort(end, kind="stable")
    end_rank = np.empty(len(end), dtype=np.int64)
    end_rank[by_end] = np.arange(len(end))
    latest = np.maximum.accumulate(worker.astype(np.int64) * len(end) + end_rank) - worker * len(
        end
    )
    latest_end = end[by_end[latest]]
    first = np.r_[True, worker[1:] != worker[:-1]]
    previous_end = np.where(first, -np.inf, np.r_[-np.inf, latest_end[:-1]])
    covered = np.clip(end - np.maximum(start, previous_end), 0.0, None)
    return np.bincount(worker, weights=covered, minlength=len(columns.ranks))


def present_seconds(trace: pd.DataFrame) -> pd.Series:
    """Per worker (indexed by rank), the time it was there (``worker_presence``)."""
    import pandas as pd

    columns = Columns.of(trace)
    return pd.Series(worker_presence(columns), index=pd.Index(columns.ranks, name="worker"))


@dataclass(frozen=True)
class Workers:
    """Per worker (in rank order): its island, the workers its rows stand for (``count``: a
    simulator's lead of identical replicas, ``simulator/replicas.py``; 1 elsewhere), seconds of each
    kind, seconds present (union of its intervals), bytes sent (every byte its links carried for
    it, thrown away or not), of them the bytes thrown away (``wasted_bytes``: its wasted rows') and
    syncs taken part in."""

    island: np.ndarray
    count: np.ndarray
    compute: np.ndarray
    stall: np.ndarray
    idle: np.ndarray
    present_s: np.ndarray
    bytes_sent: np.ndarray
    wasted_bytes: np.ndarray
    syncs: np.ndarray

    @classmethod
    def of(cls, columns: Columns, weights: dict[int, int] | None = None) -> Workers:
        seconds = columns.end - columns.start
        first_rows = (
            np.unique(columns.worker, return_index=True)[1]
            if len(columns.worker)
            else np.array([], int)
        )
        weight = weights or {}
        kinds = {
            kind: columns.per_worker_sum(np.where(columns.kind == kind, seconds, 0.0))
            for kind in ("compute", "stall", "idle")
        }
        return cls(
            island=columns.island[first_rows],
            count=np.array([weight.get(int(rank), 1) for rank in columns.ranks], dtype=np.int64),
            present_s=worker_presence(columns),
            bytes_sent=columns.per_worker_sum(columns.bytes),
            wasted_bytes=columns.per_worker_sum(
                np.where(columns.kind == WASTED, columns.bytes, 0.0)
            ),
            syncs=columns.per_worker_sum(columns.syncs().astype(float)),
            **kinds,
        )

    def subset(self, chosen: np.ndarray) -> Workers:
        return Workers(**{name: getattr(self, name)[chosen] for name in self.__dataclass_fields__})

    @property
    def total(self) -> int:
        return int(self.count.sum())

    def weighted_sum(self, column: str) -> float:
        """``column`` summed over the workers the rows stand for."""
        return float((getattr(self, column) * self.count).sum())

    def weighted_mean(self, column: str) -> float:
        """The mean of ``column`` over the workers the rows stand for; 0.0 for none (a run in which no
        worker ever computed)."""
        return self.weighted_sum(column) / self.total if self.total else 0.0


def island_rows(
    workers: Workers, island_extra: dict[str, dict[str, Any]], complete: bool
) -> list[dict[str, Any]]:
    """Per island, in order of its first worker; ``time_to_barrier_s`` is its workers' compute
    seconds over the syncs they took part in: the compute between two syncs (not per compute row:
    evaluation and late arrivals split those)."""
    rows = []
    for island in dict.fromkeys(workers.island):
        group = workers.subset(workers.island == island)
        compute = group.weighted_sum("compute")
        syncs = group.weighted_sum("syncs")
        rows.append(
            {
                "name": island,
                "workers": group.total,
                "compute_utilisation": share(compute, group.weighted_sum("present_s"))
                if complete
                else None,
                "compute_s": group.weighted_mean("compute"),
                "stall_s": group.weighted_mean("stall"),
                "idle_s": group.weighted_mean("idle"),
                "bytes_per_worker": group.weighted_mean("bytes_sent"),
                "wasted_bytes_per_worker": group.weighted_mean("wasted_bytes"),
                "time_to_barrier_s": compute / syncs if syncs else 0.0,
                **island_extra.get(island, {}),
            }
        )
    return rows


# Summing thousands of compute rows (steps cut at fractional launch points) can overshoot the seconds
# they fill by a few ulps; a share above 1 by less than this is 1, one above it a bug left in sight.
ROUNDING_SLACK = 1e-9


def share(part: float, whole: float) -> float:
    """``part / whole`` for part <= whole, with summation rounding above 1 read as 1 (0 for no whole)."""
    if whole <= 0:
        return 0.0
    value = part / whole
    return 1.0 if 1.0 < value <= 1.0 + ROUNDING_SLACK else value


def utilisations(workers: Workers, wall_time_s: float) -> tuple[float, float]:
    """Compute seconds over seconds present, and over workers * wall time."""
    compute = workers.weighted_sum("compute")
    return share(compute, workers.weighted_sum("present_s")), share(
        compute, workers.total * wall_time_s
    )


def peak_collective_gbps(columns: Columns) -> float:
    """The highest mean rate of any single comm row (a collective as one worker saw it)."""
    seconds = columns.end - columns.start
    moving = (columns.kind == "comm") & (seconds > 0)
    rates = columns.bytes[moving] * BITS_PER_BYTE / BITS_PER_GBIT / seconds[moving]
    return float(rates.max()) if len(rates) else 0.0


def summarise(
    trace: pd.DataFrame,
    outer_steps: int,
    peak_bandwidth_gbps: float | None = None,
    extra: dict[str, Any] | None = None,
    island_extra: dict[str, dict[str, Any]] | None = None,
    syncs_per_worker: bool = False,
    weights: dict[int, int] | None = None,
) -> dict[str, Any]:
    """The summary of a run from its trace.

    compute_utilisation = total compute seconds / sum over workers of seconds present; goodput (where
    ``extra`` gives ``useful_chip_s`` and ``chips``, see ``goodput``);
    (compute_utilisation_run: over workers * wall time, which counts absent workers as unused);
    bytes_per_worker: the bytes of every row (comm and wasted), wasted_bytes_per_worker: of the
    wasted rows (transfers thrown away); avg_bandwidth_gbps = bytes_per_worker * 8 / wall_time_s;
    bandwidth_needed_gbps = bytes_per_worker * 8 / compute seconds per worker (the average rate the
    schedule needs to keep every transfer within the compute it has); peak_bandwidth_gbps, when not
    given by a link-level model, is the highest mean rate of any single collective as seen by one
    worker; mean_sync_s: each collective from its first attempt's start to its end
    (``sync_spans``).

    A run cut short (``extra["incomplete_reason"]`` set: churn stopped it before its last outer step)
    has ``complete`` False, the reason, and null utilisations: what it did is not the schedule's
    utilisation. Every other figure covers the part that ran.

    ``weights``: how many workers a worker's rows stand for (a simulator's lead of identical replicas);
    every mean and total counts each of them (and each of their exchanges, for ``syncs_per_worker``).
    """
    check_frame(trace)
    return summarise_columns(
        Columns.of(trace),
        outer_steps,
        peak_bandwidth_gbps,
        extra,
        island_extra,
        syncs_per_worker,
        weights,
    )


def summarise_columns(
    columns: Columns,
    outer_steps: int,
    peak_bandwidth_gbps: float | None = None,
    extra: dict[str, Any] | None = None,
    island_extra: dict[str, dict[str, Any]] | None = None,
    syncs_per_worker: bool = False,
    weights: dict[int, int] | None = None,
) -> dict[str, Any]:
    """``summarise`` of a trace's columns (``Columns.of_rows``: a simulation's rows, no DataFrame)."""
    workers, wall_time_s, durations, span_counts = totals_of_columns(
        columns, syncs_per_worker, weights
    )
    if peak_bandwidth_gbps is None:
        peak_bandwidth_gbps = peak_collective_gbps(columns)
    return summary_of(
        workers,
        wall_time_s,
        durations,
        span_counts,
        outer_steps,
        peak_bandwidth_gbps,
        extra,
        island_extra,
    )


def totals_of_columns(
    columns: Columns, syncs_per_worker: bool = False, weights: dict[int, int] | None = None
) -> tuple[Workers, float, np.ndarray, np.ndarray]:
    """What ``summary_of`` takes, from a trace's columns: the per-worker totals, the wall time, each
    sync span's duration and the exchanges it counts for (one, or the worker's replicas when every
    worker's syncs are its own: ``syncs_per_worker``)."""
    workers = Workers.of(columns, weights)
    wall_time_s = float(columns.end.max() - columns.start.min()) if len(columns.start) else 0.0
    keys, durations = sync_spans(columns, syncs_per_worker)
    span_counts = (
        workers.count[keys[:, 2]] if syncs_per_worker else np.ones(len(durations), dtype=np.int64)
    )
    return workers, wall_time_s, durations, span_counts


def summary_of(
    workers: Workers,
    wall_time_s: float,
    durations: np.ndarray,
    span_counts: np.ndarray,
    outer_steps: int,
    peak_bandwidth_gbps: float,
    extra: dict[str, Any] | None = None,
    island_extra: dict[str, dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The summary from its parts, however they were gathered (from a trace's rows, or as a run
    goes): per-worker totals, the wall time, each collective's duration and the exchanges it counts for."""
    extra = extra or {}
    reason = extra.get("incomplete_reason")
    compute_s = workers.weighted_mean("compute")
    bytes_per_worker = workers.weighted_mean("bytes_sent")
    over_present, over_run = utilisations(workers, wall_time_s)
    summary = {
        "complete": reason is None,
        "incomplete_reason": reason,
        "wall_time_s": wall_time_s,
        "compute_utilisation": over_present if reason is None else None,
        "compute_utilisation_run": over_run if reason is None else None,
        "compute_s": compute_s,
        "stall_s": workers.weighted_mean("stall"),
        "idle_s": workers.weighted_mean("idle"),
        "outer_steps": int(outer_steps),
        "workers": workers.total,
        "bytes_per_worker": bytes_per_worker,
        "wasted_bytes_per_worker": workers.weighted_mean("wasted_bytes"),
        "avg_bandwidth_gbps": gbps(bytes_per_worker, wall_time_s),
        "bandwidth_needed_gbps": gbps(bytes_per_worker, compute_s),
        "peak_bandwidth_gbps": float(peak_bandwidth_gbps),
        "mean_sync_s": float(durations @ span_counts / span_counts.sum())
        if len(durations)
        else 0.0,
        "syncs": int(span_counts.sum()),
        "islands": island_rows(workers, island_extra or {}, reason is None),
    }
    summary.update(extra)
    if "useful_chip_s" in extra:
        summary["goodput"] = (
            goodput(extra["useful_chip_s"], extra["chips"], wall_time_s) if reason is None else None
        )
    return summary


def goodput(useful_chip_s: float, chips: int, wall_time_s: float) -> float:
    """Useful compute over (wall time x chips): the chip-seconds whose work reached the global model
    (merged inner steps x step time x chips, per worker) over every chip of the fleet for the whole
    run, present or failed."""
    return useful_chip_s / (wall_time_s * chips) if wall_time_s > 0 and chips > 0 else 0.0
