"""Chip failures and goodput against closed forms.

A run of intervals of T seconds of compute, each restarted from its start by a failure (rate lambda
per second of compute) after a repair of R seconds, takes on average (e^(lambda T) - 1)(1/lambda + R)
per interval (the classic restart-with-repair result: geometric attempts, each failed attempt costing
its time to failure, mean 1/lambda - T/(e^(lambda T) - 1), plus R). Goodput is T over that.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from islands.scenarios import ScenarioError, load
from islands.simulator import simulate
from islands.summary import group_spans

FAST = "island.*.bandwidth_gbps=1e5"  # syncs of the worked example take 0.0028 s: compute dominates


def fleet(*overrides: str):
    return load(
        "worked-example", ["schedule.inner_steps=10", "island.*.step_time_s=1", FAST, *overrides]
    )


def test_goodput_without_failures_is_the_useful_share_of_the_fleet():
    # the worked example: 750 s compute and 280 s sync per interval, every chip idle during the sync
    summary = simulate(
        load("worked-example", ["schedule.outer_steps=2", "island.*.chips=4"])
    ).summary
    assert summary["chips"] == 8 * 4
    assert summary["goodput"] == pytest.approx(750 / 1030)
    assert summary["failures"] == 0


def test_non_elastic_restart_from_the_last_outer_step_matches_the_closed_form():
    # 8 workers of 10 chips, one chip failure per 1,600 s: lambda = 80 / 1600 = 0.05 per second of
    # compute; T = 10 one-second steps per interval (a checkpoint every outer step), R = 5 s
    scenario = fleet(
        "schedule.outer_steps=3000",
        "island.*.chips=10",
        "island.*.chip_mtbf_s=1600",
        "island.*.recovery_s=5",
        "trainer.checkpoint_every=1",
    )
    summary = simulate(scenario).summary
    lam, t, r = 0.05, 10.0, 5.0
    per_interval_s = (math.exp(lam * t) - 1) * (1 / lam + r)
    sync_s = summary["mean_sync_s"]
    assert summary["goodput"] == pytest.approx(t / (per_interval_s + sync_s), rel=0.03)
    assert summary["restarts"] == summary["failures"] > 1000
    assert summary["complete"] and summary["outer_steps"] == 3000


def test_a_checkpoint_every_k_periods_loses_the_work_since_it():
    # the same failures with a checkpoint every 5 intervals: each restart goes back further
    common = (
        "schedule.outer_steps=600",
        "island.*.chips=10",
        "island.*.chip_mtbf_s=16000",
        "island.*.recovery_s=5",
    )
    every_period = fleet(*common, "trainer.checkpoint_every=1")
    every_five = fleet(*common, "trainer.checkpoint_every=5")
    one, five = simulate(every_period).summary, simulate(every_five).summary
    assert five["lost_compute_s"] > 2 * one["lost_compute_s"] > 0
    assert five["goodput"] < one["goodput"]


def test_elastic_a_one_chip_worker_leaves_and_returns_and_the_survivors_go_on():
    common = (
        "schedule.outer_steps=400",
        "island.*.chips=1",
        "island.*.chip_mtbf_s=1600",
        "island.*.recovery_s=5",
        "network.detection_timeout_s=2",
    )
    stopped = simulate(fleet(*common)).summary
    elastic = simulate(fleet(*common, "schedule.elastic=true")).summary
    assert elastic["leaves"] == elastic["failures"] > 0 and elastic["restarts"] == 0
    assert elastic["joins"] >= elastic["leaves"] - 8
    assert elastic["goodput"] > stopped["goodput"]
    # each worker's chip fails once per 1,600 s of its compute (compute_s is per worker)
    expected = elastic["compute_s"] * 8 / 1600
    assert abs(elastic["failures"] - expected) < 4 * math.sqrt(expected)


def test_a_decoupled_learner_of_many_chips_pauses_to_re_form_and_no_one_waits():
    # 4 learners of 100 chips, one chip failure per 200 s of a learner's compute; each costs that
    # learner the 10 s re-form (and 1% of its rate until the chip is back): goodput 1 / (1 + 10 / 200)
    scenario = fleet(
        "schedule.algorithm=decoupled",
        "schedule.overlap_steps=2",
        "schedule.outer_steps=2000",
        "island.0.replicas=4",
        "island.*.chips=100",
        "island.*.chip_mtbf_s=20000",
        "island.*.recovery_s=5",
        "network.detection_timeout_s=10",
    )
    summary = simulate(scenario).summary
    assert summary["leaves"] == 0 and summary["failures"] > 300
    assert summary["goodput"] == pytest.approx(1 / (1 + 10 / 200), abs=0.01)


def test_same_seed_same_failures_another_seed_others():
    args = (
        "schedule.outer_steps=200",
        "island.*.chips=10",
        "island.*.chip_mtbf_s=8000",
        "island.*.recovery_s=5",
    )
    first, again = simulate(fleet(*args)).summary, simulate(fleet(*args)).summary
    other = simulate(fleet(*args, "seed=7")).summary
    assert first == again
    assert other["wall_time_s"] != first["wall_time_s"]


@pytest.mark.parametrize(
    ("overrides", "key", "rule"),
    [
        (["island.*.chip_mtbf_s=1000"], "island.0.recovery_s", "is required with chip_mtbf_s"),
        (
            ["island.*.chip_mtbf_s=1000", "island.*.recovery_s=5", "island.*.mtbf_s=100"],
            "island.0.chip_mtbf_s",
            "either chip failures",
        ),
        (
            ["island.*.chip_mtbf_s=1000", "island.*.recovery_s=5", "island.0.present=false"],
            "schedule.elastic",
            "set elastic = true",
        ),
        (["island.*.chips=0"], "island.0.chips", "must be >= 1"),
    ],
)
def test_bad_failure_keys_get_one_line(overrides, key, rule):
    with pytest.raises(ScenarioError, match=rule) as raised:
        load("worked-example", overrides)
    assert raised.value.key == key


def test_a_sync_played_again_after_a_rollback_is_another_sync_of_its_own_length():
    """A failure without elastic re-forming rolls the run back to its last outer step, and the syncs
    after it are played again with the same (outer step, fragment). Each play is a sync of the
    worked example's 280 s: 2 x 7/8 x 2 GB at 1 Gbit/s. Counted as one span from the first play to
    the replay, the mean sync read 7.55 h (seed 1)."""
    overrides = [
        "island.0.chips=8",
        "island.0.chip_mtbf_s=20000",
        "island.0.recovery_s=60",
        "seed=1",
        "schedule.outer_steps=6",
    ]
    summary = simulate(load("worked-example", overrides)).summary
    assert summary["failures"] > 0 and summary["syncs"] > 6  # syncs played again
    assert summary["mean_sync_s"] == pytest.approx(280.0, rel=1e-9)


def test_a_keys_spans_split_after_a_done_run_and_not_between_an_attempt_and_its_restart():
    """Key 7: an attempt broken at 5 s, restarted at 8 s (after the detection timeout) and done at
    13 s; played again after a rollback: broken at 26 s, restarted at 28 s, done at 30 s. Two syncs
    of 13 s and 10 s; key 3, one of 1 s."""
    keys = np.array([7, 7, 7, 7, 3, 7])
    start = np.array([0.0, 8.0, 20.0, 28.0, 1.0, 8.0])
    end = np.array([5.0, 13.0, 26.0, 30.0, 2.0, 13.0])
    done = np.array([False, True, False, True, True, True])
    unique, spans, completed = group_spans(keys, start, end, done)
    assert unique.tolist() == [3, 7, 7]
    assert spans.tolist() == [1.0, 13.0, 10.0]
    assert completed.tolist() == [True, True, True]
