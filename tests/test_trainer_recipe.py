"""The trainer's DiLoCo against the papers' recipe (Douillard et al. 2023, alg. 1; Charles et al.
2025): data read without repeats, each optimizer's own outer defaults."""

import pytest
import torch

from islands.scenarios import from_dict
from islands.scenarios.errors import ScenarioError
from islands.scenarios.trainer_keys import trainer_spec
from islands.trainer.core.data import BatchSampler


def test_an_epoch_deals_every_whole_window_once_and_the_ranks_share_it_out():
    shard = torch.arange(8 * 10 + 1) % 256  # 10 windows of 8 (+1 target byte) at phase 0
    ranks = [
        BatchSampler(shard, batch_size=1, block_size=8, seed=3, rank=r, ranks=2) for r in range(2)
    ]
    starts = []
    for _ in range(4):
        for sampler in ranks:
            x, y = sampler.next_batch()
            assert torch.equal(y[0, :-1], x[0, 1:])
            starts.append(int(x[0, 0]))
    assert len(set(starts)) == 8  # random windows (the old sampler) repeat or overlap
    assert all((start - starts[0]) % 8 == 0 for start in starts)  # whole windows of one phase


def test_the_sampler_resumes_where_its_state_says():
    shard = torch.arange(1000) % 256
    first = BatchSampler(shard, batch_size=4, block_size=16, seed=1)
    for _ in range(20):
        first.next_batch()
    second = BatchSampler(shard, batch_size=4, block_size=16, seed=99)
    second.load_state_dict(first.state_dict())
    for _ in range(30):  # across epoch ends (61 windows an epoch)
        assert torch.equal(first.next_batch()[0], second.next_batch()[0])


def scenario(**trainer):
    return from_dict(
        {
            "name": "t",
            "model": {"parameters": 1e5},
            "schedule": {"algorithm": "diloco", "inner_steps": 2, "outer_steps": 2},
            "island": [{"name": "a", "replicas": 2, "step_time_s": 0.01, "bandwidth_gbps": 1.0}],
            "trainer": trainer,
        }
    )


@pytest.mark.parametrize(
    "optimizer, lr, momentum", [("nesterov", 0.7, 0.9), ("average", 1.0, 0.0), ("adamw", 1e-3, 0.0)]
)
def test_each_outer_optimizer_gets_its_own_default_learning_rate(optimizer, lr, momentum):
    spec = scenario(outer_optimizer=optimizer).trainer
    assert (spec.outer_lr, spec.outer_momentum) == (lr, momentum)
    assert (trainer_spec(outer_optimizer=optimizer).outer_lr) == lr


def test_a_set_outer_lr_is_kept_and_averaging_refuses_one():
    assert scenario(outer_optimizer="adamw", outer_lr=0.01).trainer.outer_lr == 0.01
    with pytest.raises(
        ScenarioError, match='trainer.outer_lr: "average" sets the global weights to the mean'
    ):
        scenario(outer_optimizer="average", outer_lr=0.7)


def tiny_trainers(**trainer):
    from islands.trainer.core.inprocess import run_threads, thread_groups
    from islands.trainer.core.loop import Trainer, default_corpus
    from islands.trainer.kinds import make_run_plan

    document = {
        "name": "tiny",
        "model": {"parameters": 1e5},
        "schedule": {"algorithm": "diloco", "inner_steps": 3, "outer_steps": 3, "bits": 32},
        "island": [{"name": "a", "replicas": 2, "step_time_s": 0.01, "bandwidth_gbps": 1.0}],
        "trainer": {
            "n_layer": 1,
            "n_head": 1,
            "n_embd": 8,
            "block_size": 8,
            "batch_size": 2,
            "corpus_bytes": 30_000,
            "eval_batches": 1,
            "warmup_steps": 2,
            **trainer,
        },
    }
    plan = make_run_plan(from_dict(document))
    groups, corpus = thread_groups(2, 1), default_corpus(plan)
    return plan, run_threads(2, lambda rank: Trainer(plan, rank, groups[rank], corpus=corpus))


def test_across_an_outer_step_the_inner_adamw_keeps_its_state_and_the_schedule_runs_on():
    """Warm-up once and one cosine over the whole run (not restarted per inner phase); the inner
    optimizer's moments survive the outer step; every island starts from the one new global."""
    from islands.trainer.core.inprocess import run_threads
    from islands.trainer.core.loop import learning_rate

    plan, trainers = tiny_trainers()
    run_threads(2, lambda rank: trainers[rank].run_steps(3))  # one inner phase, then the outer step
    first = trainers[0]
    steps_before = [state["step"].item() for state in first.optimizer.state.values()]
    assert steps_before and set(steps_before) == {3.0}
    run_threads(2, lambda rank: trainers[rank].run_steps(1))
    assert {state["step"].item() for state in first.optimizer.state.values()} == {4.0}  # not reset
    spec = plan.spec
    assert first.optimizer.param_groups[0]["lr"] == learning_rate(
        3, 9, spec.lr, 2, spec.min_lr_ratio
    )
    assert (
        learning_rate(3, 9, spec.lr, 2, spec.min_lr_ratio) < spec.lr
    )  # no second warm-up at the phase start
    for a, b in zip(trainers[0].fragments[0].global_params, trainers[1].fragments[0].global_params):
        assert torch.equal(a, b)
    run_threads(2, lambda rank: trainers[rank].finish())
