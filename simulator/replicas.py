"""Identical replicas simulated once, standing for all of them.

An island's replicas are indistinguishable when nothing is drawn or happens per worker: no step-time
jitter (``jitter_cv`` = 0: every replica computes the same seconds), no churn, chip failures or
deadline barrier (each moves or cuts single workers), no end spread (each ring position has its own
end), a coupled schedule (decoupled learners report to the syncer one by one) and a ring (a
hierarchical collective's leader, or a tree's parent, sends more than the others). Then every replica
computes, joins and ends each collective at the same instants, and its own access link carries the
same flows as the others'. The engine runs one of them, the island's *lead* (its first rank), which
stands for ``count`` workers:

* a ring over the leads is priced at the full membership M = the sum of their counts (2(M-1)/M x S
  bytes per worker, 2(M-1) hops); its slowest hop includes the hop between two replicas of one island
  (``Topology.hop_latency_s(lead, lead)``); and it crosses each backbone as often as the full ring,
  since an island's replicas are consecutive in it (``collectives.RingCollective``);
* the trace and the link table hold the leads' rows; ``expand`` gives every replica its lead's rows
  under its own rank, and the summary weights each lead by its count (``summary.summarise``), so that
  10,000 identical islands cost what one costs and report what 10,000 would.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from islands.scenarios import Scenario, Worker
from islands.schedules import schedule_of


def groupable(scenario: Scenario) -> bool:
    """Whether nothing in the scenario tells one replica of an island from another, jitter aside."""
    return (schedule_of(scenario).coupled and not scenario.has_churn() and not scenario.has_failures()
            and scenario.schedule.barrier != "deadline" and scenario.network.exchange_end_spread_s == 0
            and scenario.network.collective == "ring")


def groups(scenario: Scenario, workers: list[Worker], enabled: bool = True) -> list[tuple[Worker, int]]:
    """Each simulated worker with the number of workers it stands for: an island's first replica for
    all of them where ``groupable`` and the island has no jitter, else every worker for itself."""
    if not enabled or not groupable(scenario):
        return [(worker, 1) for worker in workers]
    replicas = {island.name: island.replicas for island in scenario.islands}
    jitter = {island.name: island.jitter_cv for island in scenario.islands}
    result: list[tuple[Worker, int]] = []
    for worker in workers:
        if jitter[worker.island] != 0:
            result.append((worker, 1))
        elif not result or result[-1][0].island != worker.island:
            result.append((worker, replicas[worker.island]))
    return result


def expand(frame: pd.DataFrame, counts: dict[int, int], order: list[str]) -> pd.DataFrame:
    """Every lead's rows repeated for each replica it stands for, under ranks lead .. lead + count - 1
    (rows of other workers, such as backbones, unchanged), sorted by ``order`` as the frame was."""
    if all(count == 1 for count in counts.values()):
        return frame
    repeats = frame["worker"].map(counts).fillna(1).astype("int64").to_numpy()
    expanded = frame.loc[frame.index.repeat(repeats)].reset_index(drop=True)
    starts = np.repeat(np.cumsum(repeats) - repeats, repeats)
    expanded["worker"] = expanded["worker"].to_numpy() + (np.arange(len(expanded)) - starts)
    return expanded.sort_values(order, kind="stable").reset_index(drop=True)
