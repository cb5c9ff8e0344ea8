"""What every player returns (``players.py``): the run's totals, counts and sources of rows, from
which ``result.result_of`` builds the one summary.

A player gathers the totals its own way (an event run from its rows, a fast path as it goes) but
hands over the same things, named the same, so that no result builder reads a player's state.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

from islands.summary import Workers
from islands.trace import Row
from islands.units import BITS_PER_BYTE, BITS_PER_GBIT

from .network.links import Transfer, peak_access_rate
from .network.topology import Topology

CHURN_COUNTS = ("joins", "leaves", "dropped_members", "ignored_events")
FAILURE_COUNTS = ("failures", "restarts")
SYNCER_COUNTS = ("merges", "merges_below_quorum", "late_reports")  # Decoupled DiLoCo's syncer alone


def no_transfers() -> list[Transfer]:
    return []


@dataclass
class Played:
    """One play of a run, however it was played.

    ``totals``, ``wall_time_s``, ``sync_durations_s`` and ``sync_counts`` are what ``summary.summary_of``
    takes (the exchanges each sync span counts for); ``merged_steps`` the inner steps of each simulated
    worker (by rank) whose work reached the global model; ``counts`` the membership, failure and syncer
    counts, every key of ``counts_for`` present."""

    player: str
    totals: Workers
    wall_time_s: float
    sync_durations_s: np.ndarray
    sync_counts: np.ndarray
    outer_steps: int  # completed (the planned ones when the run is complete)
    peak_gbps: float
    merged_steps: dict[int, float]
    counts: dict[str, int]
    row_source: Callable[[], list[Row]]
    transfer_source: Callable[[], list[Transfer]] = no_transfers
    lost_compute_s: float = 0.0
    dropped_compute_s: float = 0.0
    dropped_deltas: int = 0
    horizon_reached: bool = False
    incomplete_reason: str | None = None
    events: int = 0  # simulator events processed (an event run's; 0 for a fast path)
    events_after_end: int = 0  # scheduled event actions (one per worker moved) after the run's end


def counts_for(coupled: bool, **values: int) -> dict[str, int]:
    """Every count a run reports, in the summary's order, 0 unless given: membership changes, chip
    failures and, for Decoupled DiLoCo (not ``coupled``), the syncer's merges."""
    keys = CHURN_COUNTS + FAILURE_COUNTS + (() if coupled else SYNCER_COUNTS)
    unknown = set(values) - set(keys)
    if unknown:
        raise ValueError(f"no such count: {sorted(unknown)}")
    return {key: values.get(key, 0) for key in keys}


def peak_gbps(transfers: Iterable[Transfer], topology: Topology) -> float:
    """The most any worker's access link carried at once (``links.peak_access_rate``), in Gbit/s."""
    return peak_access_rate(transfers, topology.access_links()) * BITS_PER_BYTE / BITS_PER_GBIT
