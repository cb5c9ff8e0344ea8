"""Decoupled DiLoCo in the simulator against closed forms: round trips to the syncer, the syncer's own
link, and learners that never wait for each other unless the quorum says so."""

from __future__ import annotations

import pytest

from islands.scenarios import ScenarioError, load
from islands.simulator import simulate


def worked(*overrides: str):
    return load(
        "worked-example",
        [
            "schedule.algorithm=decoupled",
            "schedule.fragments=10",
            "schedule.overlap_steps=20",
            "schedule.outer_steps=3",
            *overrides,
        ],
    )


def test_a_round_trip_that_outlasts_tau_stalls_by_the_difference():
    # a fragment is 2 GB (20 GB bf16 / 10): 16 s up and 16 s down at 1 Gbit/s, 32 s against tau = 20
    # steps of 1.5 s = 30 s: 2 s of stall per fragment, 10 fragments per outer step
    summary = simulate(worked()).summary
    assert summary["mean_sync_s"] == pytest.approx(32)
    assert summary["stall_s"] == pytest.approx(3 * 10 * 2)
    assert summary["wall_time_s"] == pytest.approx(3 * 750 + 60)
    assert summary["bytes_per_worker"] == pytest.approx(3 * 20e9)


def test_the_syncers_link_carries_every_learner():
    # 8 learners' 2 GB fragments through a 1 Gbit/s syncer: 128 s in, 128 s out
    summary = simulate(worked("syncer.bandwidth_gbps=1")).summary
    assert summary["mean_sync_s"] == pytest.approx(256)


def straggler(*overrides: str):
    # two learners, 1 s and 3 s per step, H = 10, P = 1, tau = 2, links that cost nothing
    return load(
        "worked-example",
        [
            "schedule.algorithm=decoupled",
            "schedule.fragments=1",
            "schedule.inner_steps=10",
            "schedule.overlap_steps=2",
            "schedule.outer_steps=5",
            "island.0.replicas=2",
            "island.*.bandwidth_gbps=1e5",
            "island.*.step_time_s=1",
            *overrides,
        ],
    )


def slow_second(scenario):
    from dataclasses import replace

    return replace(
        scenario,
        islands=(
            replace(scenario.islands[0], replicas=1, name="fast"),
            replace(scenario.islands[0], replicas=1, name="slow", step_time_s=3.0),
        ),
    )


def test_with_a_quorum_of_one_the_fast_learner_never_waits_for_the_slow_one():
    summary = simulate(slow_second(straggler())).summary
    fast, slow = summary["islands"]
    assert fast["idle_s"] + fast["stall_s"] == pytest.approx(0, abs=0.01)
    assert fast["compute_s"] == pytest.approx(50) and slow["compute_s"] == pytest.approx(150)
    assert summary["wall_time_s"] == pytest.approx(150, abs=0.01)


def test_a_quorum_of_every_learner_makes_the_fast_one_wait():
    summary = simulate(slow_second(straggler("schedule.quorum=2"))).summary
    fast = summary["islands"][0]
    assert fast["idle_s"] > 50


def test_a_fixed_grace_window_holds_the_fast_learner_for_its_length():
    # quorum 1, grace 5 s: the fast learner's report waits 5 s for the slow one, 3 s past its due step
    summary = simulate(slow_second(straggler("schedule.grace_window=5"))).summary
    fast = summary["islands"][0]
    assert 0 < fast["idle_s"] <= 5 * 3 + 0.01


def test_bad_decoupled_keys_get_one_line():
    with pytest.raises(ScenarioError, match='must be "adaptive" or seconds'):
        worked("schedule.grace_window='soon'")
    with pytest.raises(ScenarioError, match="must be below inner_steps"):
        worked("schedule.overlap_steps=500")


def test_the_run_length_bound_covers_a_narrow_syncer():
    from islands.simulator.budget import estimate

    scenario = worked("syncer.bandwidth_gbps=1")
    assert estimate(scenario).run_length_s >= simulate(scenario).summary["wall_time_s"]


def test_learners_drift_apart_on_their_own_clocks():
    # mixed-fleet: H100 learners step about 2.7x faster than the A100s; nobody waits, so each ends
    # its second outer step when its own compute does (the timeline shows them apart)
    run = simulate(load("mixed-fleet", ["schedule.algorithm=decoupled", "schedule.outer_steps=2"]))
    comm = run.trace[(run.trace["kind"] == "comm") & (run.trace["outer_step"] == 1)]
    ends = comm.groupby("island")["time_end_s"].max()
    steps = {island.name: island.step_time_s for island in load("mixed-fleet").islands}
    for name, end_s in ends.items():
        assert end_s == pytest.approx(2 * 250 * steps[name], rel=0.01)
    assert ends["a100-cloud"] > 2.5 * ends["h100-dc"]
    assert run.summary["idle_s"] == pytest.approx(0, abs=0.1)
