"""Failures the property tests (``test_properties.py``) found, shrunk, each written out as the scenario
hypothesis reported and named for what broke."""

from __future__ import annotations

import copy

import pytest
from helpers.scenarios import make_scenario

from islands.simulator import simulate
from islands.simulator.budget import estimate

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
        "island": [
            {
                "name": "i0",
                "replicas": 2,
                "step_time_s": 0.01,
                "bandwidth_gbps": 0.05,
                "region": "us",
            }
        ],
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
        "schedule": {
            "algorithm": "diloco",
            "inner_steps": 1,
            "outer_steps": 2,
            "barrier": "deadline",
            "deadline_slack": 0.0,
            "bits": 32,
        },
        "network": {"exchange_end_spread_s": 0.05},
        "island": [{"name": "i0", "replicas": 3, "step_time_s": 0.01, "bandwidth_gbps": 0.05}],
    }
    result = simulate(make_scenario(document=document))
    summary = result.summary
    assert summary["complete"] and summary["outer_steps"] == 2
    assert summary["dropped_deltas"] == 1
    assert summary["dropped_compute_s"] == 0.0  # it was cut before it computed anything
    # round 0: a ring of 3, 2(3-1)/3 S each; round 1: a ring of 2 (S each) and the cut worker fetches S
    assert summary["bytes_per_worker"] == pytest.approx(
        (3 * 4 / 3 * PAYLOAD_BYTES + 3 * PAYLOAD_BYTES) / 3
    )
    compute = (
        result.trace[result.trace["kind"] == "compute"].groupby("worker")["time_end_s"].count()
    )
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
        "schedule": {
            "algorithm": "eager",
            "inner_steps": 1,
            "outer_steps": 3,
            "fragments": 1,
            "bits": 32,
        },
        "network": {"collective": "hierarchical", "detection_timeout_s": 0.0},
        "island": [{"name": "i0", "replicas": 2, "step_time_s": 1.0, "bandwidth_gbps": 0.05}],
        "event": [
            {"at_s": 0.1, "island": "i0-0", "kind": "leave"},
            {"at_s": 0.6, "island": "i0-0", "kind": "join"},
        ],
    }
    summary = simulate(make_scenario(document=document)).summary
    assert summary["complete"] and summary["outer_steps"] == 3
    rate = 0.05e9 / 8
    exchange_s = (
        2 * PAYLOAD_BYTES / rate
    )  # a chain of two: reduce S into the first, broadcast S back
    # round 0: the member computes 1 s and exchanges (the joiner, back at 0.6 s, passive in it); round
    # 1: the joiner computes its step and launches, the member waiting for it; nothing after
    assert summary["wall_time_s"] == pytest.approx(2 * (1.0 + exchange_s))
    weights_bytes = 1e6 * 1
    assert summary["bytes_per_worker"] == pytest.approx((2 * 2 * PAYLOAD_BYTES + weights_bytes) / 2)


def test_a_worker_cut_off_from_two_syncs_while_catching_up_skips_both():
    """Deadline barrier, slack 0, a slow worker behind a slow link: cut from round 0, it is still
    fetching round 0's average when rounds 1 and 2 pass their deadlines. A worker held one missed
    sync: round 2's overwrote round 1's, the worker caught up on round 2 in round 1's place, then
    computed round 2 and waited for a collective that had long ended (the run stalled). Now it holds
    every sync it missed and skips each."""
    document = {
        "name": "drawn",
        "model": {"parameters": 1e6, "bytes_per_param": 1},
        "schedule": {
            "algorithm": "diloco",
            "inner_steps": 1,
            "outer_steps": 3,
            "barrier": "deadline",
            "deadline_slack": 0.0,
        },
        "network": {"detection_timeout_s": 0.0},
        "island": [
            {"name": "fast", "replicas": 2, "step_time_s": 0.01, "bandwidth_gbps": 0.05},
            {"name": "slow", "step_time_s": 0.05, "bandwidth_gbps": 0.01},
        ],
    }
    result = simulate(make_scenario(document=document))
    summary = result.summary
    assert summary["complete"] and summary["outer_steps"] == 3
    assert summary["dropped_deltas"] == 3  # the slow worker, from every round
    assert summary["dropped_compute_s"] == pytest.approx(
        0.01
    )  # round 0's, cut at the fast pair's arrival
    payload_bytes = 1e6 * 8 / 8
    # the fast pair: a ring of 2 (S each) per round; the slow worker: S fetched per round
    assert summary["bytes_per_worker"] == pytest.approx(3 * payload_bytes)
    slow = result.trace[result.trace["worker"] == 2]
    assert (slow["kind"] == "compute").sum() == 1  # it never began rounds 1 and 2


def test_a_run_ends_when_its_last_collective_does_after_every_worker_has_stopped():
    """With an end spread the members of a collective finish before its last member does. Two joiners
    (absent at the start, back at 40 s while their weights were still downloading) took part in the
    last collective passively and were its last to finish: both computing workers had applied it and
    stopped before it completed, and only a worker stopping checked whether the run was over, so the
    run never ended ("every worker had left"). The last outer step's completion checks it too."""
    document = {
        "name": "drawn",
        "model": {"parameters": 2e8, "bytes_per_param": 4},
        "schedule": {"algorithm": "diloco", "inner_steps": 1, "outer_steps": 3, "bits": 8},
        "network": {"detection_timeout_s": 0.0, "exchange_end_spread_s": 0.01},
        "island": [
            {"name": "i0", "step_time_s": 0.01, "bandwidth_gbps": 0.05},
            {"name": "i1", "step_time_s": 0.01, "bandwidth_gbps": 0.05},
            {
                "name": "i2",
                "replicas": 2,
                "step_time_s": 0.01,
                "bandwidth_gbps": 0.05,
                "present": False,
            },
        ],
        "event": [{"at_s": 40.0, "island": "i2", "kind": "join"}],
    }
    result = simulate(make_scenario(document=document))
    summary = result.summary
    assert summary["complete"] and summary["outer_steps"] == 3 and summary["joins"] == 2
    last_sync = result.trace[
        (result.trace["kind"] == "comm")
        & (result.trace["outer_step"] == 2)
        & (result.trace["fragment"] == 0)
    ]
    assert sorted(last_sync["worker"]) == [0, 1, 2, 3]  # the joiners in it, passive
    assert summary["wall_time_s"] == pytest.approx(result.trace["time_end_s"].max())


def test_the_churn_free_bound_prices_the_backbone_between_learners_and_the_syncer():
    """Two learners in one region reported through a 0.05 Gbit/s backbone to the syncer's region. The
    bound ignored backbones: 0.074 s against a calm run of 2.57 s, so churn drawn in multiples of it,
    and the horizon at ten times it, cut the run short. Each learner's 4 MB goes up and comes back
    through the backbone, the two sharing it: 2 x 2 x 4e6 x 8 / 0.05e9 = 2.56 s, plus the steps."""
    document = {
        "name": "drawn",
        "model": {"parameters": 1e6, "bytes_per_param": 1},
        "schedule": {
            "algorithm": "decoupled",
            "inner_steps": 1,
            "outer_steps": 1,
            "overlap_steps": 0,
            "quorum": 2,
            "bits": 32,
        },
        "network": {"detection_timeout_s": 0.0, "loss_rate": 0.0001},
        "island": [
            {
                "name": "i0",
                "replicas": 2,
                "step_time_s": 0.01,
                "bandwidth_gbps": 0.5,
                "region": "us",
            }
        ],
        "syncer": {"region": "eu"},
        "region": [{"name": "us"}, {"name": "eu"}],
        "backbone": [{"between": ["us", "eu"], "bandwidth_gbps": 0.05, "latency_ms": 0.0}],
    }
    scenario = make_scenario(document=document)
    wall_time_s = simulate(scenario).summary["wall_time_s"]
    assert wall_time_s == pytest.approx(2 * 2 * PAYLOAD_BYTES * 8 / 0.05e9 + 0.01, rel=0.01)
    assert estimate(scenario).run_length_s >= wall_time_s


def test_a_larger_quorum_holds_back_the_fastest_learner_only_through_a_shared_syncer_link():
    """Shrunk from the quorum property: learners of equal step time on unequal links. Through a 0.5
    Gbit/s syncer link the fastest island's utilisation rose by 0.1% from K = 1 to K = 2 (a learner
    held back leaves the link to the others); on a non-blocking syncer it falls or stays level with
    every K, and K = M (lockstep) is the lowest."""
    document = {
        "name": "drawn",
        "model": {"parameters": 1e6, "bytes_per_param": 1},
        "schedule": {
            "algorithm": "decoupled",
            "inner_steps": 2,
            "outer_steps": 3,
            "fragments": 2,
            "overlap_steps": 1,
            "quorum": 1,
            "bits": 32,
        },
        "network": {"detection_timeout_s": 0.0, "loss_rate": 0.0001},
        "island": [
            {
                "name": "i0",
                "replicas": 2,
                "step_time_s": 0.01,
                "bandwidth_gbps": 0.5,
                "latency_ms": 1.0,
            },
            {"name": "i1", "step_time_s": 0.01, "upload_gbps": 0.05, "download_gbps": 0.05},
            {"name": "i2", "step_time_s": 0.01, "upload_gbps": 0.5, "download_gbps": 0.05},
        ],
    }
    shares = []
    for quorum in range(1, 5):
        document["schedule"]["quorum"] = quorum
        shares.append(
            simulate(make_scenario(document=copy.deepcopy(document))).summary["islands"][0][
                "compute_utilisation"
            ]
        )
    assert all(larger <= smaller for smaller, larger in zip(shares, shares[1:]))
    assert shares[-1] < shares[0] / 5  # lockstep waits for the 0.05 Gbit/s learner every round


def test_twice_the_bandwidth_is_not_slower_through_token_buckets_under_a_loss_cap():
    """Shrunk by ``make fuzz`` from the bandwidth property: a tree all-reduce over 4 workers whose
    links have a 10 MB token bucket, the TCP loss cap (Mathis, 1e-4 at 40 ms RTT) below every link.
    Without the buckets the run takes 36.43 s at any bandwidth (the cap rules); with them, 16.41 s,
    and 18.38 s once every link is twice as wide."""
    document = {
        "name": "drawn",
        "model": {"parameters": 1e7, "bytes_per_param": 1},
        "schedule": {"algorithm": "diloco", "inner_steps": 1, "outer_steps": 2},
        "network": {"collective": "tree", "detection_timeout_s": 0.0, "loss_rate": 0.0001},
        "island": [
            {
                "name": "i0",
                "step_time_s": 0.01,
                "upload_gbps": 0.5,
                "download_gbps": 0.05,
                "latency_ms": 20.0,
                "burst_bytes": 1e7,
            },
            {
                "name": "i1",
                "replicas": 3,
                "step_time_s": 0.01,
                "upload_gbps": 0.5,
                "download_gbps": 0.05,
                "latency_ms": 20.0,
                "burst_bytes": 1e7,
            },
        ],
    }
    narrow = simulate(make_scenario(document=document)).summary["wall_time_s"]
    wide = simulate(
        make_scenario(["island.*.upload_gbps=1.0", "island.*.download_gbps=0.1"], document=document)
    ).summary["wall_time_s"]
    assert wide <= narrow


def test_the_churn_free_bound_counts_a_decoupled_learner_s_fragment_up_and_back_down():
    """Shrunk by ``make fuzz`` from the churn-free bound: 2 learners, S = 4 MB (1e6 parameters at 32
    bits) over 0.05 Gbit/s (6.25 MB/s) links, a syncer with no link of its own. Each learner uploads S
    (0.64 s) and then downloads the merge (0.64 s): 0.01 + 2 x 0.64 = 1.29 s. The bound priced the
    exchange as a ring all-reduce of 2 learners (S each way at once: 0.65 s), below the run."""
    document = {
        "name": "drawn",
        "model": {"parameters": 1e6, "bytes_per_param": 1},
        "schedule": {"algorithm": "decoupled", "inner_steps": 1, "outer_steps": 1, "bits": 32},
        "network": {"detection_timeout_s": 0.0},
        "island": [{"name": "i0", "replicas": 2, "step_time_s": 0.01, "bandwidth_gbps": 0.05}],
    }
    scenario = make_scenario(document=document)
    wall_s = 0.01 + 2 * 4e6 / 6.25e6
    assert simulate(scenario).summary["wall_time_s"] == pytest.approx(wall_s)
    assert estimate(scenario).run_length_s >= wall_s * (1 - 1e-9)
    burst = copy.deepcopy(
        document
    )  # as drawn: a 100 kB bucket, and the TCP loss cap above the link
    burst["island"][0]["burst_bytes"] = 1e5
    burst["network"]["loss_rate"] = 1e-4
    bursting = make_scenario(document=burst)
    assert estimate(bursting).run_length_s >= simulate(bursting).summary["wall_time_s"]


def test_the_churn_free_bound_counts_every_late_worker_s_download_under_a_deadline():
    """Shrunk by ``make fuzz`` from the churn-free bound: DiLoCo, deadline barrier with slack 0 and a
    10 ms end spread, 5 workers at 0.05 Gbit/s. The ring's last finishers set no deadline in time and
    are late for the next sync; the two late ones fetch the average (1 MB) through one member's uplink
    while the others' ring uses it too (0.48 s, not the 0.16 s of one download alone). The bound
    priced one late download per outer step (1.278 s against a 1.338 s run); it now prices m - 1."""
    document = {
        "name": "drawn",
        "model": {"parameters": 1e6, "bytes_per_param": 1},
        "schedule": {
            "algorithm": "diloco",
            "inner_steps": 1,
            "outer_steps": 3,
            "barrier": "deadline",
            "deadline_slack": 0.0,
        },
        "network": {
            "detection_timeout_s": 0.0,
            "ring_order": "ranked",
            "exchange_end_spread_s": 0.01,
        },
        "island": [
            {"name": name, "replicas": replicas, "step_time_s": 0.01, "bandwidth_gbps": 0.05}
            for name, replicas in (("i0", 1), ("i1", 1), ("i2", 3))
        ],
    }
    scenario = make_scenario(document=document)
    summary = simulate(scenario).summary
    assert summary["complete"] and summary["wall_time_s"] == pytest.approx(1.3376666666666668)
    assert estimate(scenario).run_length_s >= summary["wall_time_s"]


def test_an_adaptive_grace_window_follows_the_first_reporter_so_a_larger_quorum_may_help_the_fastest():
    """Shrunk by ``make fuzz`` from the quorum property beside a straggler, kept as the paper's rule
    (eq. 3: the window is half the *first* reporter's slack; the trainer's syncer applies the same).
    Two slow learners (1 s steps, 0.5 Gbit/s down) and two fast ones (0.01 s steps, 0.5 Gbit/s up),
    fragment 1. At K = 2 a slow learner reports first, with seconds of slack: its window holds the
    fast learners' merge until the last report (3.6607 s). At K = 3 the slow learners report later
    (one waited for its fragment 0), the fast ones are first, with no slack: the merge comes at the
    quorum (3.6263 s), and the fastest island computes a larger share of a longer run. With a window
    of given seconds the property holds (``test_properties.py``)."""
    document = {
        "name": "drawn",
        "seed": 1,
        "model": {"parameters": 5e7, "bytes_per_param": 1},
        "schedule": {
            "algorithm": "decoupled",
            "inner_steps": 7,
            "outer_steps": 1,
            "fragments": 2,
            "overlap_steps": 3,
            "backward_overlap": 0.66,
            "bits": 32,
        },
        "network": {"detection_timeout_s": 0.0},
        "island": [
            {
                "name": "i0",
                "replicas": 2,
                "step_time_s": 1.0,
                "upload_gbps": 10.0,
                "download_gbps": 0.5,
                "jitter_cv": 0.05,
            },
            {
                "name": "i1",
                "replicas": 2,
                "step_time_s": 0.01,
                "upload_gbps": 0.5,
                "download_gbps": 2.0,
            },
        ],
    }
    fastest = []
    for quorum in (2, 3):
        document["schedule"]["quorum"] = quorum
        fastest.append(
            simulate(make_scenario(document=copy.deepcopy(document))).summary["islands"][1][
                "compute_utilisation"
            ]
        )
    assert fastest == pytest.approx([0.017239, 0.017386], abs=1e-6)


def test_a_lossy_round_trip_of_a_few_ulps_is_no_cap_not_a_division_by_zero():
    """An island 1e-320 ms from the core under a loss rate: its round trip times sqrt(p) underflowed
    to 0 in the Mathis cap, and loading the scenario divided by zero (ZeroDivisionError, a
    traceback), found by the generated changes to a stack's exchange keys. Such a round trip caps
    nothing: the run is the one with the island on the core."""
    document = {
        "name": "drawn",
        "model": {"parameters": 1e6, "bytes_per_param": 1},
        "schedule": {"algorithm": "diloco", "inner_steps": 1, "outer_steps": 1, "bits": 32},
        "network": {"loss_rate": 1e-4, "detection_timeout_s": 0.0},
        "island": [
            {"name": f"i{k}", "step_time_s": 0.01, "bandwidth_gbps": 0.05, "latency_ms": 0.0}
            for k in range(3)
        ],
    }
    on_core = simulate(make_scenario([], copy.deepcopy(document))).summary["wall_time_s"]
    document["island"][0]["latency_ms"] = 1e-320
    scenario = make_scenario([], document)
    assert scenario.network.tcp_cap_bytes_per_s(1e-320 / 1000) == float("inf")
    # 3 workers at 50 Mbit/s: 2 x 2/3 x 4 MB of fp32 values, plus one 0.01 s step
    assert simulate(scenario).summary["wall_time_s"] == pytest.approx(on_core, rel=1e-12)
    assert on_core == pytest.approx(0.01 + 2 * 2 / 3 * PAYLOAD_BYTES / (50e6 / 8), rel=1e-9)
