"""Failures the property tests (``test_properties.py``) found, shrunk, each written out as the scenario
hypothesis reported and named for what broke."""

from __future__ import annotations

import copy

import pytest

from islands.simulator import simulate

from conftest import make_scenario

PAYLOAD_BYTES = 1e6 * 32 / 8  # parameters x bits / 8


def test_a_declared_region_without_islands_is_on_no_hop():
    """A backbone to a region no worker is in made the topology's arrays look up a region code that
    does not exist (KeyError). Such a region carries nothing between workers: the run is the one
    without regions."""
    document = {
        "name": "drawn",
        "model": {"parameters": 1e6, "bytes_per_param": 1},
        "schedule": {"algorithm": "ddp", "outer_steps": 1, "bits": 32},
        "network": {"collective": "hierarchical", "detection_timeout_s": 0.0, "loss_rate": 0.0001},
        "island": [{"name": "i0", "replicas": 2, "step_time_s": 0.01, "bandwidth_gbps": 0.05, "region": "us"}],
        "region": [{"name": "us"}, {"name": "eu"}],
        "backbone": [{"between": ["us", "eu"], "bandwidth_gbps": 0.05, "latency_ms": 0.0}],
    }
    with_empty_region = simulate(make_scenario(document=document)).summary
    flat = copy.deepcopy(document)
    for key in ("region", "backbone"):
        del flat[key]
    del flat["island"][0]["region"]
    without = simulate(make_scenario(document=flat)).summary
    assert with_empty_region["complete"]
    # hierarchical over one chain of 2: reduce S into the first, broadcast S back: S each on average
    assert with_empty_region["bytes_per_worker"] == pytest.approx(PAYLOAD_BYTES)
    for key in ("wall_time_s", "bytes_per_worker", "compute_s", "stall_s", "mean_sync_s"):
        assert with_empty_region[key] == pytest.approx(without[key], rel=1e-12)


def test_a_deadline_cuts_a_worker_still_finishing_the_previous_sync_without_crashing():
    """Deadline barrier with an end spread: a member that finishes the previous sync first computes,
    arrives, and with slack 0 sets the next deadline at once, while another member is still waiting
    for its own end of the previous sync. The deadline interrupted that waiting worker, which only a
    computing one handles (the run raised ``simpy.Interrupt``). Now it is marked late, skips the
    interval it had not begun, and fetches the averaged pseudo-gradient after the sync."""
    document = {
        "name": "drawn",
        "model": {"parameters": 1e6, "bytes_per_param": 1},
        "schedule": {"algorithm": "diloco", "inner_steps": 1, "outer_steps": 2, "barrier": "deadline",
                     "deadline_slack": 0.0, "bits": 32},
        "network": {"exchange_end_spread_s": 0.05},
        "island": [{"name": "i0", "replicas": 3, "step_time_s": 0.01, "bandwidth_gbps": 0.05}],
    }
    result = simulate(make_scenario(document=document))
    summary = result.summary
    assert summary["complete"] and summary["outer_steps"] == 2
    assert summary["dropped_deltas"] == 1
    assert summary["dropped_compute_s"] == 0.0  # it was cut before it computed anything
    # round 0: a ring of 3, 2(3-1)/3 S each; round 1: a ring of 2 (S each) and the cut worker fetches S
    assert summary["bytes_per_worker"] == pytest.approx((3 * 4 / 3 * PAYLOAD_BYTES + 3 * PAYLOAD_BYTES) / 3)
    compute = result.trace[result.trace["kind"] == "compute"].groupby("worker")["time_end_s"].count()
    assert sorted(compute.tolist()) == [1, 2, 2]  # the cut worker computed round 0 only


def test_a_joiner_is_expected_in_the_exchange_that_eager_launched_before_it_was_admitted():
    """Eager updates launch round t + 1's exchange before round t's ends. A joiner admitted at round
    t's end (its download in) became a member only when its own process resumed, after the member had
    formed round t + 1's collective without it; the joiner then formed a second one of the same round
    that nobody else would join, and the run stalled ("every worker had left"). Now it is made a member
    at the boundary itself and added to the collectives already formed."""
    document = {
        "name": "drawn",
        "model": {"parameters": 1e6, "bytes_per_param": 1},
        "schedule": {"algorithm": "eager", "inner_steps": 1, "outer_steps": 3, "fragments": 1, "bits": 32},
        "network": {"collective": "hierarchical", "detection_timeout_s": 0.0},
        "island": [{"name": "i0", "replicas": 2, "step_time_s": 1.0, "bandwidth_gbps": 0.05}],
        "event": [{"at_s": 0.1, "island": "i0-0", "kind": "leave"}, {"at_s": 0.6, "island": "i0-0", "kind": "join"}],
    }
    summary = simulate(make_scenario(document=document)).summary
    assert summary["complete"] and summary["outer_steps"] == 3
    rate = 0.05e9 / 8
    exchange_s = 2 * PAYLOAD_BYTES / rate  # a chain of two: reduce S into the first, broadcast S back
    # round 0: the member computes 1 s and exchanges (the joiner, back at 0.6 s, passive in it); round
    # 1: the joiner computes its step and launches, the member waiting for it; nothing after
    assert summary["wall_time_s"] == pytest.approx(2 * (1.0 + exchange_s))
    weights_bytes = 1e6 * 1
    assert summary["bytes_per_worker"] == pytest.approx((2 * 2 * PAYLOAD_BYTES + weights_bytes) / 2)
