"""The run summary, computed from a trace: one definition for the simulator and the trainer.

Because both sides derive their summary from the same trace schema with this one function, a
prediction (``islands simulate --json``) and a measurement (the trainer's ``summary.json``) have the
same keys with the same meaning and can be diffed directly.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from islands.units import BITS_PER_BYTE, BITS_PER_GBIT

from .trace import NO_FRAGMENT, check_frame



def gbps(byte_count: float, seconds: float) -> float:
    """Bytes moved in a time, as Gbit/s (1 Gbit/s = 1e9 bit/s)."""
    return byte_count * BITS_PER_BYTE / BITS_PER_GBIT / seconds if seconds > 0 else 0.0


def sync_durations(trace: pd.DataFrame, per_worker: bool = False) -> pd.Series:
    """Duration of each collective, indexed by (outer_step, fragment): first start to last end.
    Comm rows without a fragment (weight downloads of joiners and late workers) are not syncs.
    ``per_worker``: each worker's exchange on its own (learners on their own clocks, whose outer
    steps do not line up), indexed by (outer_step, fragment, worker)."""
    comm = trace[(trace["kind"] == "comm") & (trace["fragment"] != NO_FRAGMENT)]
    grouped = comm.groupby(["outer_step", "fragment", *(["worker"] if per_worker else [])])
    return grouped["time_end_s"].max() - grouped["time_start_s"].min()


def present_seconds(trace: pd.DataFrame) -> pd.Series:
    """Per worker, the length of the union of its rows' intervals: the time it was there.

    With rows sorted by start, row i adds max(0, end_i - max(start_i, E)), where E is the latest end
    among the worker's earlier rows; gaps (a worker away between a departure and a return) add nothing.
    """
    ordered = trace.sort_values(["worker", "time_start_s"], kind="stable")
    latest_end = ordered.groupby("worker")["time_end_s"].cummax()
    previous_end = latest_end.groupby(ordered["worker"]).shift(1).fillna(-float("inf"))
    covered = (ordered["time_end_s"] - ordered["time_start_s"].combine(previous_end, max)).clip(lower=0.0)
    return covered.groupby(ordered["worker"]).sum()


def per_worker(trace: pd.DataFrame, weights: dict[int, int] | None = None) -> pd.DataFrame:
    """Seconds of each kind, bytes sent, syncs taken part in and presence (union of its intervals)
    per worker, and how many workers each row stands for (``weights``: a simulator's lead of
    identical replicas, ``simulator/replicas.py``; 1 elsewhere)."""
    seconds = (trace["time_end_s"] - trace["time_start_s"]).rename("seconds")
    by_kind = seconds.groupby([trace["worker"], trace["kind"]]).sum().unstack(fill_value=0.0)
    for kind in ("compute", "stall", "idle"):
        if kind not in by_kind:
            by_kind[kind] = 0.0
    grouped = trace.groupby("worker")
    is_sync = (trace["kind"] == "comm") & (trace["fragment"] != NO_FRAGMENT)
    table = pd.DataFrame({
        "island": grouped["island"].first(),
        "present_s": present_seconds(trace),
        "bytes_sent": grouped["bytes"].sum(),
        "syncs": is_sync.groupby(trace["worker"]).sum(),
    })
    table["count"] = table.index.map(weights).fillna(1).astype("int64") if weights else 1
    return table.join(by_kind[["compute", "stall", "idle"]]).fillna(0.0)


def weighted_sum(workers: pd.DataFrame, column: str) -> float:
    """``column`` summed over the workers the rows stand for."""
    return float((workers[column] * workers["count"]).sum())


def weighted_mean(workers: pd.DataFrame, column: str) -> float:
    """The mean of ``column`` over the workers the rows stand for; 0.0 for none (a run in which no
    worker ever computed)."""
    count = int(workers["count"].sum())
    return weighted_sum(workers, column) / count if count else 0.0


def mean_or_zero(values: pd.Series) -> float:
    """The mean, or 0.0 for no values (a run in which no worker ever computed)."""
    return float(values.mean()) if len(values) else 0.0


def island_rows(workers: pd.DataFrame, island_extra: dict[str, dict[str, Any]],
                complete: bool) -> list[dict[str, Any]]:
    """Per island; ``time_to_barrier_s`` is its workers' compute seconds over the syncs they took part
    in: the compute between two syncs (not per compute row: evaluation and late arrivals split those)."""
    rows = []
    for island, group in workers.groupby("island", sort=False):
        compute = weighted_sum(group, "compute")
        utilisation = share(compute, weighted_sum(group, "present_s"))
        syncs = weighted_sum(group, "syncs")
        rows.append({
            "name": island,
            "workers": int(group["count"].sum()),
            "compute_utilisation": utilisation if complete else None,
            "compute_s": weighted_mean(group, "compute"),
            "stall_s": weighted_mean(group, "stall"),
            "idle_s": weighted_mean(group, "idle"),
            "bytes_per_worker": weighted_mean(group, "bytes_sent"),
            "time_to_barrier_s": compute / syncs if syncs else 0.0,
            **island_extra.get(island, {}),
        })
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


def utilisations(workers: pd.DataFrame, wall_time_s: float) -> tuple[float, float]:
    """Compute seconds over seconds present, and over workers * wall time."""
    compute = weighted_sum(workers, "compute")
    return (share(compute, weighted_sum(workers, "present_s")),
            share(compute, int(workers["count"].sum()) * wall_time_s))


def summarise(trace: pd.DataFrame, outer_steps: int, peak_bandwidth_gbps: float | None = None,
              extra: dict[str, Any] | None = None,
              island_extra: dict[str, dict[str, Any]] | None = None, syncs_per_worker: bool = False,
              weights: dict[int, int] | None = None) -> dict[str, Any]:
    """The summary of a run from its trace.

    compute_utilisation = total compute seconds / sum over workers of seconds present; goodput (where
    ``extra`` gives ``useful_chip_s`` and ``chips``, see ``goodput``);
    (compute_utilisation_run: over workers * wall time, which counts absent workers as unused);
    avg_bandwidth_gbps = bytes_per_worker * 8 / wall_time_s; bandwidth_needed_gbps =
    bytes_per_worker * 8 / compute seconds per worker (the average rate the schedule needs to keep
    every transfer within the compute it has); peak_bandwidth_gbps, when not given by a link-level
    model, is the highest mean rate of any single collective as seen by one worker.

    A run cut short (``extra["incomplete_reason"]`` set: churn stopped it before its last outer step)
    has ``complete`` False, the reason, and null utilisations: what it did is not the schedule's
    utilisation. Every other figure covers the part that ran.

    ``weights``: how many workers a worker's rows stand for (a simulator's lead of identical replicas);
    every mean and total counts each of them.
    """
    check_frame(trace)
    extra = extra or {}
    reason = extra.get("incomplete_reason")
    workers = per_worker(trace, weights)
    wall_time_s = float(trace["time_end_s"].max() - trace["time_start_s"].min()) if len(trace) else 0.0
    compute_s = weighted_mean(workers, "compute")
    bytes_per_worker = weighted_mean(workers, "bytes_sent")
    durations = sync_durations(trace, syncs_per_worker)
    if peak_bandwidth_gbps is None:
        comm = trace[(trace["kind"] == "comm") & (trace["time_end_s"] > trace["time_start_s"])]
        rates = comm["bytes"] * BITS_PER_BYTE / BITS_PER_GBIT / (comm["time_end_s"] - comm["time_start_s"])
        peak_bandwidth_gbps = float(rates.max()) if len(rates) else 0.0
    over_present, over_run = utilisations(workers, wall_time_s)
    summary = {
        "complete": reason is None,
        "incomplete_reason": reason,
        "wall_time_s": wall_time_s,
        "compute_utilisation": over_present if reason is None else None,
        "compute_utilisation_run": over_run if reason is None else None,
        "compute_s": compute_s,
        "stall_s": weighted_mean(workers, "stall"),
        "idle_s": weighted_mean(workers, "idle"),
        "outer_steps": int(outer_steps),
        "workers": int(workers["count"].sum()),
        "bytes_per_worker": bytes_per_worker,
        "avg_bandwidth_gbps": gbps(bytes_per_worker, wall_time_s),
        "bandwidth_needed_gbps": gbps(bytes_per_worker, compute_s),
        "peak_bandwidth_gbps": float(peak_bandwidth_gbps),
        "mean_sync_s": mean_or_zero(durations),
        "syncs": int(len(durations)),
        "islands": island_rows(workers, island_extra or {}, reason is None),
    }
    summary.update(extra)
    if "useful_chip_s" in extra:
        summary["goodput"] = goodput(extra["useful_chip_s"], extra["chips"], wall_time_s) if reason is None else None
    return summary


def goodput(useful_chip_s: float, chips: int, wall_time_s: float) -> float:
    """Useful compute over (wall time x chips): the chip-seconds whose work reached the global model
    (merged inner steps x step time x chips, per worker) over every chip of the fleet for the whole
    run, present or failed."""
    return useful_chip_s / (wall_time_s * chips) if wall_time_s > 0 and chips > 0 else 0.0
