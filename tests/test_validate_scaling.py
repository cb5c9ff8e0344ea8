"""Scaling a scenario to a real run: what is kept, what changes, what is reported as not validated."""

from __future__ import annotations

import tomllib

import pytest

from islands.scenarios import load
from islands.schedules import SCHEDULES
from islands.schedules.buckets import layout_of
from islands.trainer.exchange.quantize import encoded_bytes, padded_length
from islands.validation.case import (
    MAX_OVERLAP,
    buckets_note,
    case_calls,
    measured_overlap_overrides,
)
from islands.validation.scaling import (
    ScaleOptions,
    ring_volume_bytes,
    scale,
    scaled_schedule,
    to_toml,
    trainer_model_values,
    wire_payload_bytes,
)

BITS_PER_BYTE = 8


def transfer_over_compute(document: dict) -> float:
    """Closed form for a homogeneous blocking schedule: ring volume / rate over H * step."""
    islands = document["island"]
    payload_bytes = document["model"]["parameters"] * document["schedule"]["bits"] / BITS_PER_BYTE
    rate_bytes_per_s = islands[0]["upload_gbps"] * 1e9 / BITS_PER_BYTE
    h = document["schedule"]["inner_steps"] if document["schedule"]["algorithm"] != "ddp" else 1
    return (
        ring_volume_bytes(len(islands), payload_bytes)
        / rate_bytes_per_s
        / (h * islands[0]["step_time_s"])
    )


def test_worked_example_keeps_the_brief_ratio_of_transfer_to_compute():
    case = scale(load("worked-example"), ScaleOptions(max_workers=4))
    # BRIEF: 280 s of transfer per 750 s of compute; kept at M = 4 by a rate for the smaller ring volume
    assert transfer_over_compute(case.document) == pytest.approx(280 / 750, rel=1e-9)
    assert case.document["schedule"]["inner_steps"] == 20
    assert case.time_factor == pytest.approx(20 * 0.2 / (500 * 1.5))
    assert "M 8 -> 4 (first workers; ring volume rescaled)" in case.notes


def test_the_simulator_payload_is_what_the_trainer_puts_on_the_wire():
    layers, _ = trainer_model_values(2)
    ddp = SCHEDULES["ddp"]
    values = wire_payload_bytes(layers, ddp, 1, 2, 32) // 4  # fp32: 4 bytes per (padded) value
    int8_bytes = wire_payload_bytes(layers, ddp, 1, 2, 8)
    assert int8_bytes == encoded_bytes(padded_length(values, 2), 8)
    assert int8_bytes == values + values // 128 * 4  # codes plus one fp32 scale per 128-value block


def test_streaming_keeps_p_and_a_valid_tau():
    scenario = load("worked-example", ["schedule.algorithm=streaming"])  # H 500, P 10, tau 20
    assert scaled_schedule(scenario.schedule, SCHEDULES["streaming"], 20)[:3] == (20, 10, 1)
    case = scale(scenario)
    assert case.document["trainer"]["n_layer"] == 10
    assert case.scenario().schedule.fragments == 10


DDP_BUCKETS = [
    "schedule.algorithm=ddp",
    "exchange.calls=buckets",
    "exchange.bucket_cap_mb=3000",
    "schedule.backward_overlap=0.6",
]


def test_ddps_overlapped_buckets_are_laid_out_from_the_trainers_own_tensors():
    # 10B bf16 values, 2e10 B, in 3,000 MiB buckets (the first too: bucket_cap_mb is given). The scaled
    # run's gradient is the trainer's GPT, 2,553,600 fp32 values = 10,214,400 B, 5.1072e-4 of the
    # original's: caps of 3,000 x 5.1072e-4 = 1.53216 MiB, over the GPT's 28 tensors (registration
    # order, the token embedding of 256 x 320 values first). Taken in reverse, each bucket closes at
    # 1.53216 x 2**20 / 4 = 401,646.6 values or more: three per block (its MLP's two 409,600-value
    # matrices each close one), and the last holds what is left: the first block's first LayerNorm,
    # the position embedding (16 x 320) and the token embedding, 640 + 5,120 + 81,920 = 87,680 values: 7 calls.
    original = load("worked-example", DDP_BUCKETS)
    case = scale(original, ScaleOptions(max_workers=2))
    scaled = case.scenario()
    assert scaled.schedule.backward_overlap == 0.6
    exchange = scaled.exchange
    assert exchange.calls == "buckets"
    assert (
        exchange.bucket_cap_mb
        == exchange.first_bucket_mb
        == pytest.approx(3000 * 10_214_400 / 2e10)
    )
    assert exchange.tensor_values is not None and len(exchange.tensor_values) == 28
    assert exchange.tensor_values[:2] == (256 * 320, 16 * 320)
    assert sum(exchange.tensor_values) == scaled.model.parameters == 2_553_600
    layout = layout_of(exchange, scaled.model.parameters, 4)
    assert layout.calls == 7 and layout.sizes()[-1] == 87_680
    assert all(size >= 1.53216 * 2**20 / 4 for size in layout.sizes()[:-1])
    assert not any("backward overlap" in note or "buckets" in note for note in case.notes)
    assert case_calls(scaled) == 7  # the calibration times the exchange in as many calls
    # unpaced (validate --compute measured) the buckets go as the real backward pass produces them:
    # the same overlap and layout; a per-tensor exchange's would wait for the embeddings, produced
    # last, so it is left out with a note
    unpaced = scale(original, ScaleOptions(max_workers=2, pace=False))
    assert unpaced.scenario().schedule.backward_overlap == 0.6
    assert unpaced.document["exchange"] == case.document["exchange"]
    assert not any("backward overlap" in note or "buckets" in note for note in unpaced.notes)
    per_tensor = load(
        "worked-example",
        [
            "schedule.algorithm=ddp",
            "exchange.calls=per_tensor",
            "exchange.tensors=28",
            "schedule.backward_overlap=0.6",
        ],
    )
    unpaced = scale(per_tensor, ScaleOptions(max_workers=2, pace=False))
    assert unpaced.scenario().schedule.backward_overlap == 0
    assert (
        "backward overlap 0.6: not validated (unpaced, the trainer overlaps only buckets); run "
        "without it" in unpaced.notes
    )
    assert (
        scale(per_tensor, ScaleOptions(max_workers=2)).scenario().schedule.backward_overlap == 0.6
    )


def test_a_measured_runs_bucket_ready_times_are_shown_beside_the_simulators():
    scaled = scale(load("worked-example", DDP_BUCKETS), ScaleOptions(max_workers=2)).scenario()
    # the 7 buckets of the test above: 6 of the blocks' (about 401,647 values or more each) and the
    # embeddings' 87,680 last, ready once the values of buckets 2..k are produced
    sizes = layout_of(scaled.exchange, scaled.model.parameters, 4).sizes()
    done = [sum(sizes[1:k]) / sum(sizes[1:]) for k in range(1, 8)]
    measured = {
        "ready_fractions": [0, 0.1, 0.2, 0.3, 0.4, 0.5, 1],
        "first_ready_to_end_s": 0.05,
        "started_in_backward": 0.75,
    }
    assert buckets_note(scaled, measured, 0.125) == (
        "buckets ready at 0.00, 0.10, 0.20, 0.30, 0.40, 0.50, 1.00 of the first-to-last bucket "
        f"window (simulated: {', '.join(f'{x:.2f}' for x in done)}), the first 0.40 of a step "
        "before its compute's end (the scenario's 0.6: priced at the measured); 75% of calls "
        "started inside their backward pass"
    )
    # the prediction after the run takes that overlap: 0.05 s of a 0.125 s step
    run_info = {"backward_buckets": measured, "mean_step_compute_s": 0.125}
    assert measured_overlap_overrides(run_info) == ["schedule.backward_overlap=0.4"]
    # a first bucket ready longer before the end than a mean step (a slow step of the mean's) is
    # held below 1, the key's range; no buckets, no override
    late = {**measured, "first_ready_to_end_s": 0.2}
    assert measured_overlap_overrides({**run_info, "backward_buckets": late}) == [
        f"schedule.backward_overlap={MAX_OVERLAP!r}"
    ]
    assert measured_overlap_overrides({"mean_step_compute_s": 0.125}) == []


def test_a_straggler_stays_as_slow_relative_to_the_others():
    original = {worker.name: worker.step_time_s for worker in load("mixed-fleet").workers()[:3]}
    case = scale(load("mixed-fleet"), ScaleOptions(max_workers=3))
    steps = {island["name"]: island["step_time_s"] for island in case.document["island"]}
    fastest = min(original, key=original.__getitem__)
    assert steps[fastest] == pytest.approx(0.2)
    for name, step_s in steps.items():
        assert step_s / steps[fastest] == pytest.approx(original[name] / original[fastest])


def test_what_the_trainer_cannot_run_is_reported_not_validated():
    case = scale(load("home-lab"), ScaleOptions(max_workers=3))
    assert any(note.startswith("churn: not validated") for note in case.notes)
    assert any(note.startswith("step-time jitter: not validated") for note in case.notes)
    assert not case.scenario().has_churn()
    overlapped = scale(load("streaming-diloco-10b"), ScaleOptions(max_workers=2))
    assert any(
        note.startswith("backward overlap 0.667: not validated") for note in overlapped.notes
    )
    assert overlapped.scenario().schedule.backward_overlap == 0
    staged = scale(
        load("worked-example", ["network.collective=hierarchical"]), ScaleOptions(max_workers=2)
    )
    assert (
        "collective 'hierarchical': not validated (the trainer runs a ring); validated as a ring"
        in staged.notes
    )
    assert staged.scenario().network.collective == "ring"
    partial = scale(
        load("worked-example", ["network.on_departure=partial"]), ScaleOptions(max_workers=2)
    )
    assert (
        "on_departure 'partial': not validated (the trainer restarts a broken collective); validated restarting"
        in partial.notes
    )
    assert partial.scenario().network.on_departure == "restart"
    fifo = scale(
        load("worked-example", ["network.egress_queue=fifo", "network.fifo_k_s=0.5"]),
        ScaleOptions(max_workers=2),
    )
    assert any(
        note.startswith("egress_queue 'fifo': its cost on equal links is not validated")
        and note.endswith("only unequal links' share is priced by the model")
        for note in fifo.notes
    )
    ringed = scale(
        load("worked-example", ["network.reduce_scatter=ring"]), ScaleOptions(max_workers=2)
    )
    assert (
        "reduce_scatter 'ring': not validated (the trainer's all-reduce makes its first pass as an "
        "all-to-all); validated as an all-to-all" in ringed.notes
    )
    assert ringed.scenario().network.reduce_scatter == "all_to_all"
    # priced once: by the calibration's rates, measured through the emulation's shaper
    assert fifo.scenario().network.egress_queue == "fair"


def test_a_slowdown_of_compute_while_exchanging_is_left_at_zero_in_the_scaled_run():
    """A paced step sleeps, and a sleep does not slow; a measured run's mean step time holds its own."""
    case = scale(
        load("worked-example", ["compute.slowdown_while_exchanging=0.04"]),
        ScaleOptions(max_workers=2),
    )
    assert case.scenario().compute.slowdown_while_exchanging == 0
    assert "compute" not in case.document
    assert (
        "compute.slowdown_while_exchanging 0.04: not validated (a paced step sleeps, and a sleep does "
        "not slow; a measured one's mean step time holds its own slowdown); the scaled scenario "
        "leaves it at 0" in case.notes
    )


def test_a_clamped_link_says_how_far_the_ratio_moved():
    case = scale(
        load(
            "worked-example",
            ["schedule.algorithm=ddp", "schedule.bits=32", "island.*.bandwidth_gbps=400"],
        ),
        ScaleOptions(max_workers=3),
    )
    assert case.document["island"][0]["upload_gbps"] == 0.5
    assert case.ratio_change > 1
    assert any("clamped" in note for note in case.notes)


def test_the_scaled_scenario_round_trips_through_toml():
    case = scale(load("home-lab"), ScaleOptions(max_workers=3))
    assert tomllib.loads(to_toml(case.document)) == case.document


def test_chip_failures_are_named_as_left_out():
    case = scale(load("worked-example", ["island.*.chip_mtbf_s=1e6", "island.*.recovery_s=5"]))
    assert (
        "chip failures (chip_mtbf_s): not validated (simulated only); run without them"
        in case.notes
    )
    assert all("chip_mtbf_s" not in island for island in case.document["island"])


def test_decoupled_keeps_upload_over_compute_and_scales_the_syncer_link():
    """A learner moves its payload S once each way whatever M: its rate scales with S, not with
    the ring volume; the syncer's link and latency scale as the islands' do, a grace window in
    seconds by k."""
    overrides = [
        "schedule.algorithm=decoupled",
        "schedule.fragments=2",
        "schedule.overlap_steps=2",
        "schedule.bits=8",
        "schedule.grace_window=30",
        "syncer.bandwidth_gbps=4",
        "syncer.latency_ms=100",
    ]
    original = load("worked-example", overrides)
    case = scale(original, ScaleOptions(max_workers=3))
    document, k = case.document, case.time_factor
    layers, _ = trainer_model_values(2)
    payload = wire_payload_bytes(layers, SCHEDULES["decoupled"], 2, 1, 8)
    assert document["model"]["parameters"] * 8 / BITS_PER_BYTE == pytest.approx(payload, rel=0.02)
    upload_s = payload / (document["island"][0]["upload_gbps"] * 1e9 / BITS_PER_BYTE)
    original_upload_s = original.payload_bytes / (original.workers()[0].upload_bytes_per_s)
    assert upload_s / (20 * 0.2) == pytest.approx(original_upload_s / (500 * 1.5), rel=1e-9)
    assert document["syncer"]["bandwidth_gbps"] == pytest.approx(
        4 * document["island"][0]["upload_gbps"]
    )
    assert document["syncer"]["latency_ms"] == pytest.approx(100 * k)
    assert (
        document["schedule"]["grace_window"] == pytest.approx(30 * k)
        and document["schedule"]["quorum"] == 1
    )
    assert "M 8 -> 3 (first workers; payload rescaled)" in case.notes
    assert tomllib.loads(to_toml(document)) == document


def test_the_scaled_run_makes_the_originals_calls_per_exchange():
    # 10B bf16 in PyTorch's default buckets of unencoded bf16 values, 1 MiB first and 25 MiB after:
    # 1 + ceil((2e10 - 1,048,576) / 26,214,400) = 764 calls per sync
    case = scale(
        load("worked-example", ['exchange.calls="buckets"', "exchange.call_overhead_s=0.01"])
    )
    assert case.document["exchange"] == {"calls": "per_tensor", "tensors": 764}
    assert (
        "buckets: validated as their 764 calls per whole-model exchange, each fragment its share"
        in case.notes
    )
    assert (
        "exchange.call_overhead_s: the trainer's own are measured, not the scenario's" in case.notes
    )
    flat = scale(load("worked-example"))
    assert "exchange" not in flat.document


def test_a_case_is_calibrated_at_its_own_rate_too():
    from islands.commands.validate import probe_rates

    case = scale(load("worked-example"), ScaleOptions(max_workers=4))
    # the slowest scaled link, where the exchange runs: the rate the calibration probes beside 10 and 100 Mbit/s
    assert case.slowest_bits_per_s == min(i["upload_gbps"] for i in case.document["island"]) * 1e9
    assert probe_rates({case.slowest_bits_per_s}) == (10e6, round(case.slowest_bits_per_s), 100e6)
    assert probe_rates({10e6, 100e6}) == (10e6, 100e6)
    # within 10% of a probed rate: read there (41 and 41.1 Mbit/s probe once, 10.5 at 10)
    assert probe_rates({41e6, 41.1e6, 10.5e6, 60e6}) == (10e6, 41e6, 60e6, 100e6)


def test_validate_builds_the_links_the_scenario_declares_unless_a_flag_says_otherwise():
    """A scenario of one FIFO per egress is emulated as one (its depth and TCP too); the suite's
    cases, which declare none, get fair queues and CUBIC; each flag replaces its own part only."""
    import argparse

    from helpers.scenarios import make_scenario

    from islands.commands.validate import chosen_shaper
    from islands.emulation.link_specs import Shaper

    def flags(**given) -> argparse.Namespace:
        values = {"shaper": None, "queue_ms": None, "tcp_congestion_control": None}
        return argparse.Namespace(in_process=False, **{**values, **given})

    fifo = make_scenario(
        [
            'network.egress_queue="fifo"',
            "network.fifo_queue_ms=50",
            'network.tcp_congestion_control="bbr"',
        ]
    )
    assert chosen_shaper(flags(), fifo) == Shaper("fifo", 50, "bbr")
    assert chosen_shaper(flags(queue_ms=120.0), fifo) == Shaper("fifo", 120, "bbr")
    assert chosen_shaper(flags(tcp_congestion_control="cubic"), fifo) == Shaper("fifo", 50)
    assert chosen_shaper(flags(shaper="fair"), fifo) == Shaper("fair", tcp="bbr")
    assert chosen_shaper(flags(), make_scenario()) == Shaper() == chosen_shaper(flags(), None)
    assert chosen_shaper(flags(shaper="fifo"), None) == Shaper("fifo", 200)
