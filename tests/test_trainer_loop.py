"""The training loop with islands as threads of one process (no sockets): DiLoCo against DDP,
identical global weights, the streaming schedule, the bytes in the trace, the summary's keys."""

import json

import pytest
import torch
from helpers.inprocess import finish_all, global_weights, in_threads, plan_for, trainers_for

from islands.simulator import simulate
from islands.trainer.exchange.quantize import encoded_bytes, padded_length
from islands.trainer.exchange.sync import share


def weights(trainer):
    return torch.cat([p.detach().flatten() for p in trainer.params])


def test_diloco_with_h1_plain_averaging_equals_ddp():
    # With a linear inner optimizer (SGD, no clipping), averaging the islands' one-step weights equals
    # one step with the averaged gradient: mean(theta - lr g_i) = theta - lr mean(g_i).
    common = dict(inner_optimizer="sgd", lr=0.1, grad_clip=0.0)
    ddp = trainers_for(plan_for({"algorithm": "ddp", "outer_steps": 6, "bits": 32}, **common))
    diloco = trainers_for(
        plan_for(
            {"algorithm": "diloco", "inner_steps": 1, "outer_steps": 6, "bits": 32},
            outer_optimizer="nesterov",
            outer_lr=1.0,
            outer_momentum=0.0,
            **common,
        )
    )
    in_threads(ddp, lambda t: t.run())
    in_threads(diloco, lambda t: t.run())
    start = weights(trainers_for(plan_for({"algorithm": "ddp", "bits": 32}, **common))[0])
    assert not torch.allclose(weights(ddp[0]), start, atol=1e-3)  # it trained
    for a, b in zip(ddp, diloco):
        torch.testing.assert_close(weights(a), weights(b), rtol=0, atol=2e-6)
    finish_all(ddp), finish_all(diloco)


def test_islands_hold_identical_global_weights_after_every_sync():
    plan = plan_for(
        {"algorithm": "streaming", "inner_steps": 4, "fragments": 2, "overlap_steps": 1, "bits": 8},
        ranks_per_island=2,
        fragment_alpha=0.5,
    )
    trainers = trainers_for(plan)
    for _ in range(plan.total_steps):
        in_threads(trainers, lambda t: t.run_steps(1))
        first = global_weights(trainers[0])
        assert all(torch.equal(first, global_weights(t)) for t in trainers[1:])
        assert all(
            torch.equal(weights(trainers[0]), weights(t)) for t in trainers[:2]
        )  # one island's ranks
    assert not torch.equal(
        weights(trainers[0]), weights(trainers[2])
    )  # islands differ between syncs
    finish_all(trainers)


def test_streaming_applies_each_fragment_once_per_period_at_its_due_step():
    # H = 6, P = 3, tau = 1: fragment p is launched at step 2(p + 1) - 1 and applied at 2(p + 1).
    plan = plan_for(
        {
            "algorithm": "streaming",
            "inner_steps": 6,
            "outer_steps": 2,
            "fragments": 3,
            "overlap_steps": 1,
            "bits": 16,
        },
        n_layer=3,
    )
    trainers = trainers_for(plan)
    applied_at = {p: [] for p in range(3)}
    for step in range(1, plan.total_steps + 1):
        before = [f.applied for f in trainers[0].fragments]
        in_threads(trainers, lambda t: t.run_steps(1))
        for p, fragment in enumerate(trainers[0].fragments):
            if fragment.applied != before[p]:
                applied_at[p].append(step)
    assert applied_at == {0: [2, 8], 1: [4, 10], 2: [6, 12]}
    finish_all(trainers)


def test_trace_bytes_are_the_quantised_exchange_and_summary_keys_match_the_simulator():
    plan = plan_for(
        {"algorithm": "diloco", "inner_steps": 3, "outer_steps": 2, "bits": 8}, ranks_per_island=2
    )
    trainers = trainers_for(plan)
    in_threads(trainers, lambda t: t.run())
    summary = finish_all(trainers)
    parameters = sum(p.numel() for p in trainers[0].params)
    share_values = share(torch.zeros(parameters), 0, 2).numel()
    per_rank = 2 * (2 - 1) * encoded_bytes(padded_length(share_values, 2) // 2, 8)
    assert summary["bytes_per_worker"] == 2 * 2 * per_rank  # 2 syncs x 2 ranks per island
    assert summary["syncs"] == 2 and summary["outer_steps"] == 2 and summary["inner_steps"] == 6
    assert set(summary) == set(simulate(plan.scenario).summary)
    assert summary["bytes_per_worker"] < 2 * parameters * 2  # less than 2 syncs of bf16 would be


def test_eval_uses_the_same_batches_and_trains_down():
    plan = plan_for(
        {"algorithm": "diloco", "inner_steps": 5, "outer_steps": 3, "bits": 16}, lr=1e-2
    )
    trainers = trainers_for(plan)
    in_threads(trainers, lambda t: t.run())
    losses = [loss for _, loss in trainers[0].eval_losses]
    assert [step for step, _ in trainers[0].eval_losses] == [5, 10, 15]
    assert trainers[1].eval_losses == trainers[0].eval_losses
    assert losses[-1] < losses[0]
    finish_all(trainers)


@pytest.mark.parametrize("bad,rule", [({"n_embd": 15}, "n_head"), ({"n_layer": 1}, "fragments")])
def test_plans_that_cannot_train_are_refused(bad, rule):
    from islands.errors import UserError

    with pytest.raises(UserError, match=rule):
        plan_for({"algorithm": "streaming", "inner_steps": 4, "fragments": 2}, n_head=2, **bad)


def test_ddp_keeps_every_rank_of_every_island_identical():
    plan = plan_for({"algorithm": "ddp", "outer_steps": 3, "bits": 16}, ranks_per_island=2)
    trainers = trainers_for(plan)
    for _ in range(plan.total_steps):
        in_threads(trainers, lambda t: t.run_steps(1))
        assert all(torch.equal(weights(trainers[0]), weights(t)) for t in trainers[1:])
    summary = finish_all(trainers)
    assert summary["syncs"] == 3 and summary["outer_steps"] == 3


def test_pacing_pads_each_step_and_the_trace_shows_it():
    plan = plan_for(
        {"algorithm": "diloco", "inner_steps": 4, "outer_steps": 1, "bits": 16},
        pace_step_time_s=0.05,
    )
    trainers = trainers_for(plan)
    in_threads(trainers, lambda t: t.run())
    summary = finish_all(trainers)
    assert 4 * 0.05 <= summary["compute_s"] < 4 * 0.05 + 0.1


def test_ddp_counts_the_optimizer_step_and_pacing_after_the_last_sync_as_compute(tmp_path):
    plan = plan_for({"algorithm": "ddp", "outer_steps": 4, "bits": 16}, pace_step_time_s=0.05)
    trainers = trainers_for(plan, out_dir=tmp_path)
    in_threads(trainers, lambda t: t.run())
    summary = finish_all(trainers)
    assert (
        4 * 0.05 <= summary["compute_s"] < 4 * 0.05 + 0.1
    )  # all four paced steps, the last included
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert len(records) == 4 and all(0 < r["paced_s"] <= 0.05 for r in records)
