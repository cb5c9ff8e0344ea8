"""benchmarks/bench_learning.py's arguments: which runs they plan, and bad ones refused in one line
before any training (no run is trained here)."""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path

import pytest

from islands.errors import UserError

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_learning.py"


def bench():
    spec = importlib.util.spec_from_file_location("bench_learning", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def args(**values) -> argparse.Namespace:
    defaults = {
        "workers": [4],
        "inner_steps": [15],
        "steps": 2445,
        "outer": ["nesterov"],
        "outer_lr": [None],
        "momentum": [None],
        "n_embd": [64],
        "n_layer": 2,
        "seed": 0,
        "keys": [],
        "topk": [],
        "chunk_values": 4096,
        "bits": [2],
        "error_feedback": [0.95],
        "mean": "senders",
    }
    return argparse.Namespace(**{**defaults, **values})


def test_without_topk_diloco_exchanges_fp32_dense():
    module = bench()
    assert module.compression_keys(args()) == [None]
    [(setting, _, plan)] = module.planned_runs(args())[(64, 4)]
    schedule = plan.scenario.schedule
    assert (setting, schedule.compression, schedule.bits) == ((15, "nesterov", None), "none", 32)
    # 2445 steps at H = 15: 163 outer steps, SparseLoCo's 512M run
    assert (schedule.outer_steps, plan.total_steps) == (163, 2445)
    assert module.exchange_label(None) == "fp32"


def test_every_k_bits_and_beta_is_one_topk_run():
    module = bench()
    keys = module.compression_keys(args(topk=[64, 128], bits=[2, 8], error_feedback=[0.95, 0.0]))
    assert len(keys) == 2 * 2 * 2
    assert keys[0] == {
        "compression": "topk",
        "chunk_values": 4096,
        "topk": 64,
        "bits": 2,
        "error_feedback": 0.95,
    }
    assert [(k["topk"], k["bits"], k["error_feedback"]) for k in keys[-2:]] == [
        (128, 8, 0.95),
        (128, 8, 0.0),
    ]
    # 64 of 4096 = 1.5625%
    assert module.exchange_label(keys[0]) == "top 64/4096 (1.56%) 2b ef 0.95 mean senders"
    assert (
        module.exchange_label(keys[0], "workers") == "top 64/4096 (1.56%) 2b ef 0.95 mean workers"
    )


def test_mean_sets_the_trainers_topk_mean_for_topk_runs():
    module = bench()
    for mean in ("senders", "workers"):
        [(_, _, plan)] = module.planned_runs(args(topk=[64], mean=mean))[(64, 4)]
        assert plan.spec.topk_mean == mean


def test_a_topk_plan_carries_the_keys_and_error_feedback_replaces_the_outer_momentum():
    module = bench()
    runs = module.planned_runs(args(topk=[64], error_feedback=[0.95, 0.0], outer_lr=[1.0]))
    schedules = [plan.scenario.schedule for _, _, plan in runs[(64, 4)]]
    assert [(s.compression, s.chunk_values, s.topk, s.bits) for s in schedules] == [
        ("topk", 4096, 64, 2)
    ] * 2
    assert [s.error_feedback for s in schedules] == [0.95, 0.0]
    specs = [plan.spec for _, _, plan in runs[(64, 4)]]
    # SparseLoCo: theta <- theta - 1 x the mean payload, no momentum; without feedback Nesterov's 0.9
    assert [(s.outer_lr, s.outer_momentum) for s in specs] == [(1.0, 0.0), (1.0, 0.9)]


def test_set_reads_values_as_toml():
    module = bench()
    assert module.trainer_keys(["corpus_bytes=3300000", "lr=1e-3", "outer_optimizer=average"]) == {
        "corpus_bytes": 3_300_000,
        "lr": 0.001,
        "outer_optimizer": "average",
    }


@pytest.mark.parametrize(
    "values, message",
    [
        ({"topk": [0]}, "--topk: 0 must be in 1..--chunk-values (4096)"),
        ({"topk": [4097]}, "--topk: 4097 must be in 1..--chunk-values (4096)"),
        ({"topk": [64], "error_feedback": [1.0]}, "--error-feedback: 1.0 must be in [0, 1)"),
        ({"topk": [64], "bits": [3]}, "scenario: schedule.bits: must be one of"),
        ({"steps": 10}, "scenario: schedule.outer_steps: must be >= 1 (got 0)"),
        ({"keys": ["speed=1"]}, "--set speed=1: 'speed' is not a [trainer] key"),
        ({"keys": ["lr=nan"]}, "scenario: trainer.lr: must be a finite number"),
        ({"mean": "workers"}, "--mean workers: has no effect without --topk"),
    ],
)
def test_a_bad_setting_is_a_user_error(values, message):
    with pytest.raises(UserError) as refused:
        bench().planned_runs(args(**values))
    assert str(refused.value).startswith(message)


def test_main_refuses_in_one_line_with_exit_2_before_training(capsys):
    assert bench().main(["--topk", "64", "--bits", "3"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.splitlines() == [
        "bench_learning: error: scenario: schedule.bits: must be one of 32, 16, 8, 4, 2, 1 (got 3)"
    ]
