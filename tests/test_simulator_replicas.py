"""An island's identical replicas run as one worker standing for all of them: the same results as
running every replica, at the cost of one, with closed forms at fleet scale."""

from __future__ import annotations

import math

import pandas as pd
import pytest
from helpers.replicas import GBPS, REGIONS, TWO_KINDS, fleet
from helpers.scenarios import make_scenario

from islands.scenarios import load
from islands.simulator import simulate
from islands.simulator.budget import estimate
from islands.simulator.replicas import groups

CASES = {
    "diloco": (TWO_KINDS, {}, []),
    "ddp": (TWO_KINDS, {}, ["schedule.algorithm=ddp", "schedule.outer_steps=6"]),
    "streaming, flow model": (TWO_KINDS, {}, ["schedule.algorithm=streaming"]),
    "eager": (TWO_KINDS, {}, ["schedule.algorithm=eager"]),
    "all-gather (median), exchange work": (
        TWO_KINDS,
        {},
        ["trainer.aggregation=median", "network.exchange_cpu_s_per_value=1e-8"],
    ),
    "adaptive barrier": (TWO_KINDS, {}, ["schedule.barrier=adaptive"]),
    "jitter on one island": (
        TWO_KINDS,
        {},
        ["island.1.jitter_cv=0.1", "schedule.algorithm=streaming"],
    ),
    "regions, listed": (
        [
            {**TWO_KINDS[0], "region": "us"},
            {**TWO_KINDS[1], "region": "eu"},
            {**TWO_KINDS[0], "name": "dc2", "region": "us"},
        ],
        REGIONS,
        [],
    ),
    "regions, optimised": (
        [
            {**TWO_KINDS[0], "region": "us"},
            {**TWO_KINDS[1], "region": "eu"},
            {**TWO_KINDS[0], "name": "dc2", "region": "us"},
        ],
        REGIONS,
        ["network.ring_order=optimised", "schedule.algorithm=streaming"],
    ),
    "token buckets": (TWO_KINDS, {}, ["island.*.burst_bytes=2e6", "schedule.algorithm=streaming"]),
    "decoupled, quorum of 4 and the adaptive grace window": (
        TWO_KINDS,
        {},
        [
            "schedule.algorithm=decoupled",
            "schedule.quorum=4",
            "network.exchange_cpu_s_per_value=1e-8",
        ],
    ),
    "decoupled, a 2 s grace window": (
        TWO_KINDS,
        {},
        ["schedule.algorithm=decoupled", "schedule.quorum=1", "schedule.grace_window=2"],
    ),
    "decoupled, jitter on one island": (
        TWO_KINDS,
        {},
        ["schedule.algorithm=decoupled", "island.1.jitter_cv=0.1"],
    ),
    "decoupled, one island across a backbone": (
        [{**TWO_KINDS[0], "region": "us"}, {**TWO_KINDS[1], "region": "eu"}],
        REGIONS,
        ["schedule.algorithm=decoupled", "syncer.region=us"],
    ),
}


def assert_same(grouped: float | None, each: float | None) -> None:
    if isinstance(each, float):
        assert grouped == pytest.approx(each, rel=1e-9, abs=1e-9)
    else:
        assert grouped == each


@pytest.mark.parametrize("case", CASES)
def test_grouped_replicas_give_what_every_replica_run_on_its_own_gives(case):
    islands, sections, overrides = CASES[case]
    scenario = make_scenario(overrides, document=fleet(islands, **sections))
    grouped, each = (
        simulate(scenario, player="events"),
        simulate(scenario, group_replicas=False, player="events"),
    )
    assert grouped.summary["events"] < each.summary["events"]
    for key, value in each.summary.items():
        if key == "islands":
            for island_grouped, island_each in zip(grouped.summary[key], value):
                for name, figure in island_each.items():
                    assert_same(island_grouped[name], figure)
        elif key != "events":
            assert_same(grouped.summary[key], value)
    pd.testing.assert_frame_equal(grouped.trace, each.trace, rtol=1e-9)
    pd.testing.assert_frame_equal(grouped.links, each.links, rtol=1e-9)


def test_ten_thousand_replicas_are_one_worker_and_the_ring_is_priced_at_m_ten_thousand():
    m, s, latency_s, h, step_s, outer = 10_000, 20e9, 0.001, 500, 1.5, 3
    scenario = load(
        "worked-example",
        [
            f"island.0.replicas={m}",
            f"schedule.outer_steps={outer}",
            f"island.0.latency_ms={latency_s * 1e3}",
        ],
    )
    result = simulate(scenario)
    # ring all-reduce of S over M at 1 Gbit/s: 2(M-1)/M * S bytes, 2(M-1) hops of sender's + receiver's latency
    sync_s = 2 * (m - 1) / m * s / GBPS + 2 * (m - 1) * 2 * latency_s
    assert result.summary["mean_sync_s"] == pytest.approx(sync_s)
    assert result.summary["wall_time_s"] == pytest.approx(outer * (h * step_s + sync_s))
    assert result.summary["compute_utilisation"] == pytest.approx(
        h * step_s / (h * step_s + sync_s)
    )
    assert result.summary["workers"] == m
    assert result.summary["bytes_per_worker"] == pytest.approx(outer * 2 * (m - 1) / m * s)
    assert result.summary["islands"][0]["workers"] == m
    assert result.summary["events"] < 10 * outer  # one worker ran, not ten thousand
    assert len(result.lead_trace) == 3 * outer  # compute, comm, stall per sync, for the lead alone
    assert len(result.trace) == m * 3 * outer
    assert sorted(result.trace["worker"].unique()) == list(range(m))


def test_only_indistinguishable_replicas_are_grouped():
    scenario = make_scenario(document=fleet(TWO_KINDS))
    assert [(worker.rank, count) for worker, count in groups(scenario, scenario.workers())] == [
        (0, 3),
        (3, 5),
    ]
    assert (
        estimate(scenario).worker_syncs == 2 * 4
    )  # the budget counts two simulated workers, 4 syncs each
    jittered = make_scenario(["island.1.jitter_cv=0.1"], document=fleet(TWO_KINDS))
    assert [count for _, count in groups(jittered, jittered.workers())] == [3, 1, 1, 1, 1, 1]
    assert estimate(jittered).worker_syncs == 6 * 4
    for apart in (
        ["island.0.mtbf_s=1000"],
        ["island.0.chip_mtbf_s=1e6", "island.0.recovery_s=60"],
        ["schedule.barrier=deadline"],
        ["network.exchange_end_spread_s=0.01"],
        ["schedule.algorithm=decoupled", "syncer.bandwidth_gbps=10"],
        ["network.collective=tree"],
    ):
        scenario = make_scenario(apart, document=fleet(TWO_KINDS))
        assert [count for _, count in groups(scenario, scenario.workers())] == [1] * 8, apart
        fragments = 2 if "schedule.algorithm=decoupled" in apart else 1  # DiLoCo exchanges one
        assert estimate(scenario).worker_syncs == 8 * 4 * fragments
    learners = make_scenario(["schedule.algorithm=decoupled"], document=fleet(TWO_KINDS))
    assert [count for _, count in groups(learners, learners.workers())] == [
        3,
        5,
    ]  # the syncer on the core
    apart = make_scenario(
        ["schedule.algorithm=decoupled", "syncer.region=us"],
        document=fleet(
            [{**TWO_KINDS[0], "region": "us"}, {**TWO_KINDS[1], "region": "eu"}], **REGIONS
        ),
    )
    assert [count for _, count in groups(apart, apart.workers())] == [
        3,
        1,
        1,
        1,
        1,
        1,
    ]  # eu's learners share a backbone


def test_the_budget_counts_the_workers_the_engine_runs():
    big = load("worked-example", ["island.0.replicas=10000", "schedule.outer_steps=1000"])
    budget = estimate(big)
    assert budget.worker_syncs == 1000  # one lead, 1,000 syncs
    assert simulate(big).summary["events"] <= budget.events
    assert math.isfinite(budget.run_length_s)
