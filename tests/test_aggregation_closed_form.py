"""Robust aggregation priced by the simulator, computed by hand: ``trainer.aggregation = "median"`` or
``"trimmed_mean"`` all-gathers every whole payload around the ring, M-1 steps of S bytes, so each
worker sends (M-1) * S and a sync takes (M-1) * hop latency + (M-1) * S / slowest link, under both
network models."""

from __future__ import annotations

import pytest
from helpers.closed_form import OUTER, RING_S, H, M, S, island, with_islands
from helpers.scenarios import make_scenario

from islands.scenarios.trainer_keys import AGGREGATIONS
from islands.schedules import ALL_GATHER, ALL_REDUCE, collective_of
from islands.simulator import budget, simulate
from islands.simulator.network.collectives import COLLECTIVES

BYTES_PER_S = 1e9 / 8
GATHER_BYTES = (M - 1) * S  # 6e9 B per worker per sync, against the ring's 1.5 S = 3e9
GATHER_S = GATHER_BYTES / BYTES_PER_S  # 48 s, against the ring's 24 s
MEDIAN = "trainer.aggregation=median"
MODELS = ["network.model=alpha-beta", "network.model=flow"]


def comm_bytes(trace) -> list[float]:
    return trace.loc[trace["kind"] == "comm", "bytes"].tolist()


def test_every_aggregation_has_its_collective():
    assert {collective_of(aggregation) for aggregation in AGGREGATIONS} == set(COLLECTIVES)
    assert collective_of("mean") == ALL_REDUCE and collective_of("median") == ALL_GATHER


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("aggregation", ["median", "trimmed_mean"])
def test_all_gather_sends_m_minus_1_payloads_per_worker(model, aggregation):
    result = simulate(make_scenario([model, f"trainer.aggregation={aggregation}"]))
    summary = result.summary
    assert GATHER_S == pytest.approx(48.0) and RING_S == pytest.approx(24.0)
    assert summary["mean_sync_s"] == pytest.approx(GATHER_S)
    assert comm_bytes(result.trace) == [GATHER_BYTES] * (OUTER * M)
    assert summary["bytes_per_worker"] == pytest.approx(OUTER * GATHER_BYTES)
    assert summary["stall_s"] == pytest.approx(OUTER * GATHER_S)
    assert summary["wall_time_s"] == pytest.approx(OUTER * (H * 1.0 + GATHER_S))


@pytest.mark.parametrize("model", MODELS)
def test_all_gather_pays_m_minus_1_hops_of_latency(model):
    summary = simulate(make_scenario([model, MEDIAN, "island.0.latency_ms=50"])).summary
    hop_s = 0.050 + 0.050  # sender's plus receiver's one-way latency
    assert summary["mean_sync_s"] == pytest.approx((M - 1) * hop_s + GATHER_S)  # 48.3 s


@pytest.mark.parametrize("model", MODELS)
def test_slowest_link_and_farthest_hop_pace_the_all_gather(model):
    document = with_islands(
        island("fast", replicas=3, bandwidth_gbps=10.0, latency_ms=10),
        island("slow", bandwidth_gbps=0.5, latency_ms=90),
    )
    result = simulate(make_scenario([model, MEDIAN], document=document))
    gather_s = (M - 1) * (0.010 + 0.090) + (M - 1) * S / (0.5e9 / 8)  # 0.3 s + 96 s
    assert result.summary["mean_sync_s"] == pytest.approx(gather_s)
    assert result.summary["peak_bandwidth_gbps"] == pytest.approx(0.5)
    slow_up = result.links[(result.links["island"] == "slow") & (result.links["direction"] == "up")]
    moved_bytes = (
        (slow_up["time_end_s"] - slow_up["time_start_s"]) * slow_up["rate_gbps"] * 1e9 / 8
    ).sum()
    assert moved_bytes == pytest.approx(OUTER * GATHER_BYTES)


def test_ddp_all_gathers_the_gradient_every_step():
    summary = simulate(
        make_scenario(["schedule.algorithm=ddp", "schedule.outer_steps=5", MEDIAN])
    ).summary
    assert summary["wall_time_s"] == pytest.approx(5 * (1.0 + GATHER_S))
    assert summary["bytes_per_worker"] == pytest.approx(5 * GATHER_BYTES)


def test_streaming_fragments_are_all_gathered_under_the_flow_model():
    # P = 4 fragments of S/4: each all-gather takes 12 s; tau = 2 steps = 2 s of overlap -> 10 s stall each.
    scenario = make_scenario(
        ["schedule.algorithm=streaming", "schedule.fragments=4", "schedule.overlap_steps=2", MEDIAN]
    )
    summary = simulate(scenario).summary
    fragment_s = GATHER_S / 4
    assert summary["network_model"] == "flow"
    assert summary["mean_sync_s"] == pytest.approx(fragment_s)
    assert summary["stall_s"] == pytest.approx(OUTER * 4 * (fragment_s - 2.0))
    assert summary["bytes_per_worker"] == pytest.approx(OUTER * GATHER_BYTES)


def test_the_run_length_bound_prices_the_all_gather():
    scenario = make_scenario([MEDIAN])
    bound_s = budget.estimate(scenario).run_length_s
    assert bound_s == pytest.approx(
        OUTER * (H * 1.0 + GATHER_S)
    )  # 444 s; the ring's would be 372 s
    assert bound_s >= simulate(scenario).summary["wall_time_s"]


def test_an_all_gather_run_is_deterministic():
    scenario = make_scenario([MEDIAN, "network.model=flow", "island.*.jitter_cv=0.1"])
    assert simulate(scenario).trace.equals(simulate(scenario).trace)
