"""What the trainer runs, the simulator prices, or the loader refuses: the bytes of every aggregation
measured against the simulator's, the backward overlap the trainer does not run (a
pseudo-gradient's, an unpaced DDP's) refused for training, and DDP's H (the
trainer's evaluation period, which the simulator's DDP ignores) leaving the compared keys alone.
Islands run as threads of one process (``test_trainer_loop``)."""

from dataclasses import replace

import pytest
from helpers.inprocess import finish_all, in_threads, plan_for, trainers_for

from islands.errors import UserError
from islands.scenarios import from_dict
from islands.simulator import simulate
from islands.trainer.exchange.quantize import padded_length
from islands.trainer.kinds import make_run_plan

ISLANDS = 3


def with_parameters(scenario, parameters: int):
    return replace(scenario, model=replace(scenario.model, parameters=float(parameters)))


@pytest.mark.parametrize(
    "algorithm, aggregation", [("diloco", "median"), ("ddp", "trimmed_mean"), ("diloco", "mean")]
)
def test_measured_bytes_of_every_sync_are_the_simulated_ones(algorithm, aggregation):
    plan = plan_for(
        {"algorithm": algorithm, "inner_steps": 2, "outer_steps": 2, "bits": 32},
        islands=ISLANDS,
        aggregation=aggregation,
        screen_norm_factor=0,
    )
    trainers = trainers_for(plan)
    in_threads(trainers, lambda t: t.run())
    measured = finish_all(trainers)
    values = sum(p.numel() for p in trainers[0].params)
    # the trainer pads the fp32 payload to whole blocks: one block row for an all-gather, M for a ring
    padded = padded_length(values, 1 if aggregation != "mean" else ISLANDS)
    predicted = simulate(with_parameters(plan.scenario, padded))
    sent = sorted(row[5] for t in trainers for row in t.recorder.rows if row[4] == "comm")
    simulated = sorted(predicted.trace.loc[predicted.trace["kind"] == "comm", "bytes"])
    assert sent == pytest.approx(simulated, rel=1e-12)
    assert measured["bytes_per_worker"] == pytest.approx(
        predicted.summary["bytes_per_worker"], rel=1e-12
    )
    ring = 2 * (ISLANDS - 1) / ISLANDS * padded * 4
    assert sent[0] == pytest.approx(ring if aggregation == "mean" else (ISLANDS - 1) * padded * 4)


@pytest.mark.parametrize(
    "algorithm, what",
    [
        ("diloco", "sends a pseudo-gradient"),  # DDP's is run (test_ddp_backward_overlap)
        ("streaming", "sends a pseudo-gradient"),
    ],
)
def test_backward_overlap_is_refused_for_training_in_one_line(algorithm, what):
    document = {
        "name": "t",
        "model": {"parameters": 1e5},
        "schedule": {"algorithm": algorithm, "outer_steps": 2, "backward_overlap": 0.5},
        "island": [{"name": "a", "replicas": 2, "step_time_s": 0.01, "bandwidth_gbps": 1.0}],
    }
    with pytest.raises(UserError) as refused:
        make_run_plan(from_dict(document, "t.toml"))
    message = str(refused.value)
    assert message.startswith("t.toml: schedule.backward_overlap:") and "got 0.5" in message
    assert what in message and "\n" not in message
    document["schedule"]["backward_overlap"] = 0.0
    assert make_run_plan(from_dict(document, "t.toml")).algorithm == algorithm


def test_ddp_h_is_the_evaluation_period_and_changes_no_compared_key():
    plan = plan_for(
        {"algorithm": "ddp", "inner_steps": 3, "outer_steps": 6, "bits": 32}, pace_step_time_s=0.02
    )
    trainers = trainers_for(plan)
    in_threads(trainers, lambda t: t.run())
    measured = finish_all(trainers)
    predicted = simulate(plan.scenario).summary
    assert [step for step, _ in trainers[0].eval_losses] == [3, 6]
    for key in ("outer_steps", "outer_steps_planned", "syncs", "inner_steps"):
        assert measured[key] == predicted[key] == 6, key
    computes = sum(1 for row in trainers[0].recorder.rows if row[4] == "compute")
    assert computes > 6  # each evaluation splits a step's compute in two rows
    island = measured["islands"][0]
    assert island["time_to_barrier_s"] == pytest.approx(
        island["compute_s"] / 6
    )  # per sync, not per row
