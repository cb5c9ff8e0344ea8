"""Closed-form cases computed by hand: latency, a slow link, too little overlap, a straggler."""

from __future__ import annotations

import pytest
from helpers.closed_form import OUTER, RING_S, H, M, S, island, with_islands
from helpers.scenarios import make_scenario

from islands.simulator import simulate


def test_ring_time_is_24_s_here():
    summary = simulate(make_scenario()).summary
    assert RING_S == pytest.approx(24.0)
    assert summary["mean_sync_s"] == pytest.approx(24.0)
    assert summary["wall_time_s"] == pytest.approx(OUTER * (H * 1.0 + 24.0))
    assert summary["bytes_per_worker"] == pytest.approx(OUTER * 1.5 * S)


def test_latency_adds_2_m_minus_1_hops_of_both_ends():
    summary = simulate(make_scenario(["island.0.latency_ms=50"])).summary
    hop_s = 0.050 + 0.050  # sender's plus receiver's one-way latency
    assert summary["mean_sync_s"] == pytest.approx(2 * (M - 1) * hop_s + RING_S)
    assert summary["stall_s"] == pytest.approx(OUTER * (0.6 + RING_S))


def test_heterogeneous_latency_uses_the_slowest_hop():
    document = with_islands(island("near", replicas=3, latency_ms=10), island("far", latency_ms=90))
    summary = simulate(make_scenario(document=document)).summary
    assert summary["mean_sync_s"] == pytest.approx(2 * (M - 1) * (0.010 + 0.090) + RING_S)


def test_slowest_link_paces_the_ring():
    document = with_islands(
        island("fast", replicas=3, bandwidth_gbps=10.0), island("slow", bandwidth_gbps=0.5)
    )
    summary = simulate(make_scenario(document=document)).summary
    slow_ring_s = 2 * (M - 1) / M * S / (0.5e9 / 8)  # 48 s: the 0.5 Gbit/s link sets the pace
    assert summary["mean_sync_s"] == pytest.approx(slow_ring_s)
    assert summary["peak_bandwidth_gbps"] == pytest.approx(0.5)
    assert summary["compute_utilisation"] == pytest.approx(H / (H + slow_ring_s))


def test_streaming_with_too_little_overlap_stalls_the_difference():
    # P = 4 fragments of S/4: each ring takes 6 s; tau = 2 steps = 2 s of overlap -> 4 s stall each.
    scenario = make_scenario(
        ["schedule.algorithm=streaming", "schedule.fragments=4", "schedule.overlap_steps=2"]
    )
    summary = simulate(scenario).summary
    fragment_s = RING_S / 4
    assert summary["mean_sync_s"] == pytest.approx(fragment_s)
    assert summary["stall_s"] == pytest.approx(OUTER * 4 * (fragment_s - 2.0))
    assert summary["wall_time_s"] == pytest.approx(OUTER * H + OUTER * 4 * (fragment_s - 2.0))


@pytest.mark.parametrize("model", ["alpha-beta", "flow"])
@pytest.mark.parametrize("gbps", [1.0, 0.1])
def test_streaming_fragments_are_never_on_the_wire_together_so_both_network_models_give_the_closed_form(
    model, gbps
):
    # P = 4 fragments of S/4, tau = 2 steps: a worker applies fragment p 2 s after launching it, waiting
    # for its ring if need be, and launches p + 1 H/P = 25 steps later: never two fragments on a link
    # at once, so alpha-beta (each transfer alone) prices what flow (sharing) does. At 0.1 Gbit/s a
    # fragment's ring takes 60 s, longer than the 25 s between launches: still one at a time.
    fragment_s = RING_S / 4 * (1.0 / gbps)
    scenario = make_scenario(
        [
            "schedule.algorithm=streaming",
            "schedule.fragments=4",
            "schedule.overlap_steps=2",
            f"island.0.bandwidth_gbps={gbps}",
            f"network.model={model}",
        ]
    )
    summary = simulate(scenario).summary
    assert summary["mean_sync_s"] == pytest.approx(fragment_s)
    assert summary["wall_time_s"] == pytest.approx(OUTER * H + OUTER * 4 * (fragment_s - 2.0))


def test_streaming_without_overlap_blocks_on_every_fragment():
    scenario = make_scenario(
        ["schedule.algorithm=streaming", "schedule.fragments=4", "schedule.overlap_steps=0"]
    )
    summary = simulate(scenario).summary
    assert summary["stall_s"] == pytest.approx(OUTER * RING_S)  # the same bytes, in four pieces


def test_streaming_launch_and_apply_positions_in_the_trace():
    scenario = make_scenario(
        [
            "schedule.algorithm=streaming",
            "schedule.fragments=4",
            "schedule.overlap_steps=10",
            "schedule.outer_steps=1",
        ]
    )
    trace = simulate(scenario).trace
    comm = trace[(trace["kind"] == "comm") & (trace["worker"] == 0)]
    # fragment p is due at step 25 (p + 1) and launched 10 steps (10 s) earlier; 6 s rings hide fully.
    assert list(comm["fragment"]) == [0, 1, 2, 3]
    assert list(comm["time_start_s"]) == pytest.approx([15.0, 40.0, 65.0, 90.0])
    assert list(comm["time_end_s"]) == pytest.approx([21.0, 46.0, 71.0, 96.0])
    assert (trace["kind"] != "stall").all()


def test_a_straggler_makes_the_others_idle():
    # one worker 25% slower: the others wait 25 s at every barrier, recorded as idle, not stall.
    document = with_islands(island("fast", replicas=3), island("slow", step_time_s=1.25))
    summary = simulate(make_scenario(document=document)).summary
    fast, slow = summary["islands"]
    assert fast["idle_s"] == pytest.approx(OUTER * 25.0)
    assert slow["idle_s"] == 0.0
    assert fast["stall_s"] == slow["stall_s"] == pytest.approx(OUTER * RING_S)
    assert summary["wall_time_s"] == pytest.approx(OUTER * (125.0 + RING_S))
    assert fast["compute_utilisation"] == pytest.approx(100.0 / (125.0 + RING_S))


def test_an_end_spread_moves_stall_into_idle_and_keeps_each_sync_as_long_as_its_last_member():
    """4 members finish 6, 4, 2 and 0 s before the ring's 24 s end (spread 6 s, even, turned every
    sync). A member that finishes first computes first and waits at the next barrier for the last:
    per later sync idle is the mean spread, 3 s; stall is 24 s less each one's own offset."""
    for model in ("alpha-beta", "flow"):
        result = simulate(
            make_scenario(["network.exchange_end_spread_s=6", f"network.model={model}"])
        )
        summary, trace = result.summary, result.trace
        assert summary["mean_sync_s"] == pytest.approx(RING_S)
        assert summary["wall_time_s"] == pytest.approx(OUTER * (H + RING_S))
        assert summary["stall_s"] == pytest.approx(OUTER * (RING_S - 3.0))
        assert summary["idle_s"] == pytest.approx((OUTER - 1) * 3.0)  # none before the first sync
        stall = (
            trace[trace["kind"] == "stall"]
            .eval("time_end_s - time_start_s")
            .groupby(trace["worker"])
            .sum()
        )
        # offsets by sync: worker 0 gets 0, 2, 4 s; worker 1 2, 4, 6; worker 2 4, 6, 0; worker 3 6, 0, 2
        assert list(OUTER * RING_S - stall) == pytest.approx([6.0, 12.0, 10.0, 8.0])


def test_ddp_backward_overlap_hides_part_of_the_allreduce():
    scenario = make_scenario(
        [
            "schedule.algorithm=ddp",
            "schedule.outer_steps=5",
            "schedule.backward_overlap=0.5",
            "island.*.step_time_s=30",
        ]
    )
    summary = simulate(scenario).summary
    # the all-reduce starts with 15 s of the step left: a step takes 15 + 24 = 39 s instead of 54 s.
    assert summary["wall_time_s"] == pytest.approx(5 * 39.0)
    assert summary["stall_s"] == pytest.approx(5 * 9.0)


def test_diloco_backward_overlap_starts_the_sync_during_the_last_backward_pass():
    scenario = make_scenario(["schedule.backward_overlap=0.5", "island.*.step_time_s=10"])
    summary = simulate(scenario).summary
    # the ring (24 s) starts with 5 s of the H-th step left: 19 s of stall per outer step, not 24.
    assert summary["stall_s"] == pytest.approx(OUTER * (RING_S - 5.0))
    assert summary["wall_time_s"] == pytest.approx(OUTER * (H * 10.0 + RING_S - 5.0))


def test_streaming_backward_overlap_adds_to_tau():
    """P = 4 fragments of S / 4 (6 s each on the ring), tau = 0: each blocks 6 s; launched 0.5 of a
    4 s step early it blocks 6 - 2 = 4 s."""
    base = [
        "schedule.algorithm=streaming",
        "schedule.fragments=4",
        "schedule.overlap_steps=0",
        "island.*.step_time_s=4",
        "model.layers=4",
        "model.embedding_parameters=0",
    ]
    blocking = simulate(make_scenario(base)).summary
    overlapped = simulate(make_scenario([*base, "schedule.backward_overlap=0.5"])).summary
    assert blocking["stall_s"] == pytest.approx(OUTER * 4 * RING_S / 4)
    assert overlapped["stall_s"] == pytest.approx(OUTER * 4 * (RING_S / 4 - 2.0))


def test_trace_rows_tile_each_workers_time():
    trace = simulate(make_scenario()).trace
    own = trace[(trace["worker"] == 2) & (trace["kind"] != "comm")]
    assert own["time_start_s"].iloc[0] == 0.0
    assert (own["time_start_s"].iloc[1:].to_numpy() == own["time_end_s"].iloc[:-1].to_numpy()).all()
    assert list(own["kind"]) == ["compute", "stall"] * OUTER
    assert list(own["outer_step"]) == [0, 0, 1, 1, 2, 2]
