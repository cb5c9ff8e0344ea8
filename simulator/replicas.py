"""Identical replicas simulated once, standing for all of them.

An island's replicas are indistinguishable when nothing is drawn or happens per worker: no step-time
jitter (``jitter_cv`` = 0: every replica computes the same seconds), no churn, chip failures or
deadline barrier (each moves or cuts single workers), no end spread (each ring position has its own
end), a ring (a hierarchical collective's leader, or a tree's parent, sends more than the others;
a direct gather's chosen peers do, and a store's round is priced over its members one by one) and,
for Decoupled DiLoCo's learners, nothing shared on their way to the syncer (no syncer link, no
backbone: the syncer in every island's region), where the replicas' round trips would share rates.
Then every replica computes, joins and ends each collective (or round trip) at the same instants, and
its own access link carries the same flows as the others'. The engine runs one of them, the island's
*lead* (its first rank), which stands for ``count`` workers:

* a ring over the leads is priced at the full membership M = the sum of their counts (2(M-1)/M x S
  bytes per worker, 2(M-1) hops); its slowest hop includes the hop between two replicas of one island
  (``Topology.hop_latency_s(lead, lead)``); and it crosses each backbone as often as the full ring,
  since an island's replicas are consecutive in it (``collectives.RingCollective``);
* a learner's report counts ``count`` towards the syncer's quorum (``syncer.py``);
* the trace and the link table hold the leads' rows; ``expand`` gives every replica its lead's rows
  under its own rank, and the summary weights each lead by its count (``summary.summarise``), so that
  10,000 identical islands cost what one costs and report what 10,000 would.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from islands.scenarios import IslandSpec, Scenario, Worker
from islands.schedules import schedule_of

if TYPE_CHECKING:
    import pandas as pd


def groupable(scenario: Scenario) -> bool:
    """Whether nothing in the scenario tells one replica of an island from another, the islands' own
    figures aside (``alike``)."""
    return (
        not scenario.has_churn()
        and not scenario.has_failures()
        and scenario.schedule.barrier != "deadline"
        and scenario.network.exchange_end_spread_s == 0
        and scenario.network.collective == "ring"
        and scenario.network.gather == "ring"
    )


def alike(scenario: Scenario, island: IslandSpec) -> bool:
    """Whether an island's replicas are indistinguishable: no jitter, and for learners a way to the
    syncer over their own links alone (the syncer has no link of its own and sits in the island's
    region, so no backbone is crossed)."""
    syncer = scenario.syncer
    return island.jitter_cv == 0 and (
        schedule_of(scenario).coupled
        or (syncer.bandwidth_gbps is None and island.region == syncer.region)
    )


def groups(
    scenario: Scenario, workers: list[Worker], enabled: bool = True
) -> list[tuple[Worker, int]]:
    """Each simulated worker with the number of workers it stands for: an island's first replica for
    all of them where ``groupable`` and the island's replicas are ``alike``, else every worker for itself."""
    if not enabled or not groupable(scenario):
        return [(worker, 1) for worker in workers]
    islands = {island.name: island for island in scenario.islands}
    result: list[tuple[Worker, int]] = []
    for worker in workers:
        island = islands[worker.island]
        if not alike(scenario, island):
            result.append((worker, 1))
        elif not result or result[-1][0].island != worker.island:
            result.append((worker, island.replicas))
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
