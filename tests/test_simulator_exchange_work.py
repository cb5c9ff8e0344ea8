"""The work on the exchange path (``network.exchange_cpu_s_per_value``), computed by hand.

Every member spends k x values seconds on its tensor (screening) before the collective's bytes move;
the collective starts when the last member is done. Blocking, that is ``idle``; launched tau steps
early (Streaming), it hides behind the compute that continues meanwhile.
"""

from __future__ import annotations

import copy

import pytest
from helpers.scenarios import BASE_DOCUMENT, make_scenario

from islands.simulator import simulate
from islands.simulator.budget import estimate

# BASE: 1e9 params, bf16 -> S = 2e9 B; 4 workers at 1 Gbit/s; 1 s per step; H = 100; 3 outer steps.
PARAMETERS = 1e9
M = 4
H = 100
OUTER = 3
RING_S = 2 * (M - 1) / M * 2e9 / (1e9 / 8)  # 24 s
CPU_S_PER_VALUE = 1e-8
WORK_S = CPU_S_PER_VALUE * PARAMETERS  # 10 s of screening per full exchange
KEY = f"network.exchange_cpu_s_per_value={CPU_S_PER_VALUE}"


def test_diloco_pays_the_work_before_every_sync_as_idle():
    summary = simulate(make_scenario([KEY])).summary
    assert summary["mean_sync_s"] == pytest.approx(RING_S)  # the bytes take as long as before
    assert summary["idle_s"] == pytest.approx(OUTER * WORK_S)
    assert summary["stall_s"] == pytest.approx(OUTER * RING_S)
    assert summary["wall_time_s"] == pytest.approx(OUTER * (H * 1.0 + WORK_S + RING_S))


def test_ddp_pays_it_every_step():
    summary = simulate(make_scenario([KEY, "schedule.algorithm=ddp"])).summary
    assert summary["wall_time_s"] == pytest.approx(OUTER * (1.0 + WORK_S + RING_S))
    assert summary["idle_s"] == pytest.approx(OUTER * WORK_S)


def test_ddp_backward_overlap_starts_the_work_during_the_step():
    summary = simulate(
        make_scenario([KEY, "schedule.algorithm=ddp", "schedule.backward_overlap=0.5"])
    ).summary
    assert summary["wall_time_s"] == pytest.approx(
        OUTER * (0.5 + WORK_S + RING_S)
    )  # (1 - f) step + work + comm


@pytest.mark.parametrize(
    "tau, stall_per_fragment_s, idle_per_fragment_s",
    [
        (0, RING_S / 4, WORK_S / 4),  # blocking: the work is idle, then the fragment's bytes
        (
            5,
            WORK_S / 4 + RING_S / 4 - 5,
            0.0,
        ),  # launched 5 s early: 2.5 s of work + 6 s of bytes - 5 s
        (10, 0.0, 0.0),  # 10 s of compute covers both: nothing shows
    ],
)
def test_streaming_hides_the_work_of_a_fragment_behind_its_overlap(
    tau, stall_per_fragment_s, idle_per_fragment_s
):
    overrides = [
        KEY,
        "schedule.algorithm=streaming",
        "schedule.fragments=4",
        f"schedule.overlap_steps={tau}",
    ]
    summary = simulate(make_scenario(overrides)).summary
    syncs = OUTER * 4
    assert summary["mean_sync_s"] == pytest.approx(RING_S / 4)
    assert summary["stall_s"] == pytest.approx(syncs * stall_per_fragment_s)
    assert summary["idle_s"] == pytest.approx(syncs * idle_per_fragment_s)
    assert summary["wall_time_s"] == pytest.approx(
        OUTER * H + syncs * (stall_per_fragment_s + idle_per_fragment_s)
    )


def test_a_straggler_s_work_is_idle_for_the_others_too():
    document = copy.deepcopy(BASE_DOCUMENT)
    document["island"] = [
        {"name": "a", "replicas": 3, "step_time_s": 1.0, "bandwidth_gbps": 1.0},
        {"name": "slow", "step_time_s": 1.2, "bandwidth_gbps": 1.0},
    ]
    summary = simulate(make_scenario([KEY], document)).summary
    idle_s = {entry["name"]: entry["idle_s"] for entry in summary["islands"]}
    assert summary["wall_time_s"] == pytest.approx(OUTER * (H * 1.2 + WORK_S + RING_S))
    assert idle_s["a"] == pytest.approx(
        OUTER * (H * 0.2 + WORK_S)
    )  # the straggler, then its screening
    assert idle_s["slow"] == pytest.approx(OUTER * WORK_S)


def test_a_worker_that_departs_during_its_work_never_joins_the_ring():
    document = copy.deepcopy(BASE_DOCUMENT)
    document["event"] = [
        {"at_s": H + 5.0, "island": "a-3", "kind": "leave"}
    ]  # 5 s into the first screening
    document["schedule"]["outer_steps"] = 1
    result = simulate(make_scenario([KEY], document))
    comm = result.trace[result.trace["kind"] == "comm"]
    ring_of_3_s = 2 * 2 / 3 * 2e9 / (1e9 / 8)
    assert sorted(comm["worker"]) == [0, 1, 2]
    assert comm["time_start_s"].min() == pytest.approx(
        H + 5.0 + 30.0
    )  # re-formed once the leave is detected
    assert result.summary["wall_time_s"] == pytest.approx(H + 35.0 + ring_of_3_s)


def test_zero_costs_nothing_and_the_run_is_deterministic():
    assert (
        simulate(make_scenario(["network.exchange_cpu_s_per_value=0"])).summary
        == simulate(make_scenario()).summary
    )
    first, second = (simulate(make_scenario([KEY, "island.*.jitter_cv=0.2"])) for _ in range(2))
    assert first.summary == second.summary
    assert first.trace.equals(second.trace)


def test_the_resource_guard_counts_the_work_s_events_and_time():
    for algorithm in ("ddp", "diloco", "streaming"):
        scenario = make_scenario([KEY, f"schedule.algorithm={algorithm}", "schedule.fragments=4"])
        result = simulate(scenario)
        budget = estimate(scenario)
        assert result.summary["events"] <= budget.events
        assert result.summary["wall_time_s"] <= budget.run_length_s
