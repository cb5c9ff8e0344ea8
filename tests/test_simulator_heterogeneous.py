"""Islands that differ: derived step times, jitter, split links, TCP windows, barrier policies."""

from __future__ import annotations

import copy
import math

import pytest
from helpers.scenarios import BASE_DOCUMENT, make_scenario

from islands.scenarios import ScenarioError
from islands.simulator import simulate

S = 2e9  # 1e9 params in bf16
RING4_S = 1.5 * S / 1.25e8  # 24 s over four 1 Gbit/s workers
RING3_S = 4 / 3 * S / 1.25e8  # 21.33 s over three


def document(*islands: dict, **schedule) -> dict:
    doc = copy.deepcopy(BASE_DOCUMENT)
    doc["island"] = list(islands)
    doc["schedule"].update(schedule)
    return doc


def test_step_time_derived_from_gpus_gpu_and_mfu():
    doc = document(
        {"name": "a", "replicas": 2, "gpus": 8, "gpu": "H100", "mfu": 0.4, "bandwidth_gbps": 1.0}
    )
    doc["model"]["tokens_per_step"] = 1e6
    scenario = make_scenario(document=doc)
    expected = 6 * 1e9 * 1e6 / (8 * 989e12 * 0.4)  # 6 N T / (gpus * peak * MFU) = 1.896 s
    assert scenario.islands[0].step_time_s == pytest.approx(expected)
    summary = simulate(scenario).summary
    assert summary["islands"][0]["tokens"] == pytest.approx(3 * 100 * 1e6)


def test_accelerator_table_is_overridable_and_checked():
    doc = document({"name": "a", "replicas": 2, "gpu": "TPUv9", "mfu": 0.5, "bandwidth_gbps": 1.0})
    doc["model"]["tokens_per_step"] = 1e6
    with pytest.raises(
        ScenarioError,
        match=r"island.0.gpu: unknown accelerator 'TPUv9' \(add it to \[accelerators\]\)",
    ):
        make_scenario(document=doc)
    doc["accelerators"] = {"TPUv9": 1e15}
    assert make_scenario(document=doc).islands[0].step_time_s == pytest.approx(
        6 * 1e9 * 1e6 / (1e15 * 0.5)
    )


def test_step_time_and_gpu_are_exclusive_and_one_is_needed():
    with pytest.raises(
        ScenarioError, match="island.0.gpu: give either step_time_s or gpu/gpus/mfu"
    ):
        make_scenario(['island.0.gpu="A100"'])
    doc = document({"name": "a", "replicas": 2, "bandwidth_gbps": 1.0})
    with pytest.raises(ScenarioError, match=r"island.0.step_time_s: is required \(or derive it"):
        make_scenario(document=doc)


def test_separate_uplink_and_downlink():
    doc = document(
        {"name": "a", "replicas": 3, "step_time_s": 1.0, "bandwidth_gbps": 1.0},
        {"name": "b", "step_time_s": 1.0, "upload_gbps": 0.25, "download_gbps": 10.0},
    )
    summary = simulate(make_scenario(document=doc)).summary
    assert summary["mean_sync_s"] == pytest.approx(
        1.5 * S / (0.25e9 / 8)
    )  # the slow uplink paces the ring
    with pytest.raises(ScenarioError, match=r"island.0.bandwidth_gbps: is required \(or give both"):
        make_scenario(
            document=document({"name": "a", "replicas": 2, "step_time_s": 1.0, "upload_gbps": 1.0})
        )


def test_a_shaped_uplink_sends_its_burst_at_once_every_sync():
    doc = document(
        {"name": "a", "replicas": 3, "step_time_s": 1.0, "bandwidth_gbps": 1.0, "burst_bytes": 1e8},
        {
            "name": "b",
            "step_time_s": 1.0,
            "upload_gbps": 0.25,
            "download_gbps": 10.0,
            "burst_bytes": 1e8,
            "upload_burst_bytes": 2e7,
        },
    )
    scenario = make_scenario(document=doc)
    assert (scenario.islands[1].upload_burst_bytes, scenario.islands[1].download_burst_bytes) == (
        2e7,
        1e8,
    )
    # every link sends 2e7 B at once (the smallest bucket on the ring), the rest at the slow uplink's
    # rate; 100 s of compute refill that bucket (0.64 s at 31.25 MB/s) before every sync.
    summary = simulate(scenario).summary
    assert summary["mean_sync_s"] == pytest.approx((1.5 * S - 2e7) / (0.25e9 / 8))
    with pytest.raises(
        ScenarioError, match=r"island.1.upload_burst_bytes: must be >= 0 B \(got -1.0\)"
    ):
        make_scenario(["island.1.upload_burst_bytes=-1"], document=doc)


def test_tcp_window_caps_a_long_path():
    # 50 ms each end: RTT per hop 200 ms; one stream of a 4 MB window carries 4e6 / 0.2 = 20 MB/s.
    summary = simulate(
        make_scenario(["island.0.latency_ms=50", "network.tcp_window_bytes=4e6"])
    ).summary
    assert summary["peak_bandwidth_gbps"] == pytest.approx(0.16)
    assert summary["mean_sync_s"] == pytest.approx(6 * 0.1 + 1.5 * S / 20e6)
    four_streams = simulate(
        make_scenario(
            ["island.0.latency_ms=50", "network.tcp_window_bytes=4e6", "network.streams=4"]
        )
    ).summary
    assert four_streams["peak_bandwidth_gbps"] == pytest.approx(0.64)


def test_packet_loss_caps_each_stream_by_mathis_and_streams_add_up_to_the_link():
    # RTT 200 ms, 1% loss: one stream carries sqrt(1.5) x 1448 B / (0.2 s x 0.1) = 88.7 kB/s, below
    # its 4 MB window's 20 MB/s; 1,000 streams 88.7 MB/s. At 0.01% loss 1,000 streams would carry 887
    # MB/s: the 1 Gbit/s link (125 MB/s) is the ceiling
    lossy = ["island.0.latency_ms=50", "network.tcp_window_bytes=4e6", "network.loss_rate=0.01"]
    one_stream_bytes_per_s = math.sqrt(1.5) * 1448 / (0.2 * 0.1)
    summary = simulate(make_scenario(lossy)).summary
    assert summary["mean_sync_s"] == pytest.approx(6 * 0.1 + 1.5 * S / one_stream_bytes_per_s)
    many = simulate(make_scenario([*lossy, "network.streams=1000"])).summary
    assert many["mean_sync_s"] == pytest.approx(6 * 0.1 + 1.5 * S / (1000 * one_stream_bytes_per_s))
    filled = simulate(
        make_scenario([*lossy, "network.loss_rate=0.0001", "network.streams=1000"])
    ).summary
    assert filled["peak_bandwidth_gbps"] == pytest.approx(1.0)
    assert filled["mean_sync_s"] == pytest.approx(6 * 0.1 + 1.5 * S / 125e6)


def test_jitter_same_seed_same_output_other_seed_other_output():
    runs = [
        simulate(make_scenario(["island.0.jitter_cv=0.2", f"seed={seed}"])) for seed in (7, 7, 8)
    ]
    assert runs[0].summary == runs[1].summary
    assert runs[0].trace.equals(runs[1].trace)
    assert runs[0].summary["wall_time_s"] != runs[2].summary["wall_time_s"]
    # the mean interval stays near H * step time: the slowest of 4 draws is above it, so there is idle
    assert runs[0].summary["idle_s"] > 0
    assert 3 * (100 + RING4_S) < runs[0].summary["wall_time_s"] < 3 * (140 + RING4_S)


def test_jitter_sum_has_the_right_mean_and_spread():
    import numpy as np

    from islands.simulator.compute import StepClock

    clock = StepClock(1.5, 0.3, np.random.default_rng(0))
    draws = np.array([clock.duration_s(100) for _ in range(20000)])
    assert draws.mean() == pytest.approx(150.0, rel=0.01)  # n * m
    assert draws.std() == pytest.approx(np.sqrt(100) * 0.45, rel=0.03)  # sqrt(n) * cv * m


def test_deadline_drops_a_straggler_and_counts_its_work():
    doc = document(
        {"name": "fast", "replicas": 3, "step_time_s": 1.0, "bandwidth_gbps": 1.0},
        {"name": "slow", "step_time_s": 1.5, "bandwidth_gbps": 1.0},
        barrier="deadline",
        deadline_slack=0.1,
        outer_steps=2,
    )
    result = simulate(make_scenario(document=doc))
    summary = result.summary
    # half the workers are in at 100 s: the sync is due at 1.1 * 100 = 110 s, among the three on time.
    first_sync_end_s = 110.0 + RING3_S
    # the straggler then fetches the averaged pseudo-gradient (S bytes at 1 Gbit/s, 16 s) and starts
    # late; the next deadline is again 110 s after the interval start, so it is cut off after 94 s.
    fetched_s = first_sync_end_s + 16.0
    second_deadline_s = first_sync_end_s + 110.0
    assert summary["dropped_deltas"] == 2
    assert summary["dropped_compute_s"] == pytest.approx(110.0 + (second_deadline_s - fetched_s))
    fast, slow = summary["islands"]
    assert fast["idle_s"] == pytest.approx(2 * 10.0)
    # the run ends when every worker holds the final model: the straggler's last fetch included
    assert summary["wall_time_s"] == pytest.approx(second_deadline_s + RING3_S + 16.0)
    assert slow["inner_steps"] == 0 and fast["inner_steps"] == 200
    downloads = result.trace[(result.trace["kind"] == "comm") & (result.trace["fragment"] == -1)]
    assert list(downloads["worker"]) == [3, 3]
    assert list(downloads["time_start_s"]) == pytest.approx(
        [first_sync_end_s, second_deadline_s + RING3_S]
    )
    assert list(downloads["time_end_s"]) == pytest.approx([fetched_s, summary["wall_time_s"]])


def test_adaptive_h_lets_fast_islands_do_more_steps():
    doc = document(
        {"name": "fast", "replicas": 3, "step_time_s": 1.0, "bandwidth_gbps": 1.0},
        {"name": "slow", "step_time_s": 1.5, "bandwidth_gbps": 1.0},
        barrier="adaptive",
    )
    summary = simulate(make_scenario(document=doc)).summary
    fast, slow = summary["islands"]
    assert fast["inner_steps"] == 3 * 150 and slow["inner_steps"] == 3 * 100
    assert summary["idle_s"] == 0.0
    assert summary["wall_time_s"] == pytest.approx(3 * (150 + RING4_S))


def test_barrier_policies_other_than_wait_need_diloco():
    with pytest.raises(
        ScenarioError,
        match=r"schedule.barrier: 'deadline' is not run by algorithm = \"ddp\" \(it runs 'wait'\)",
    ):
        make_scenario(["schedule.algorithm=ddp", "schedule.barrier=deadline"])
