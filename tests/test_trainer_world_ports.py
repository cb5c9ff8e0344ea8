"""The trainer calls out to its world's four ports (``trainer/core/world.py``) and no world holds the
trainer: the in-process fakes of ``helpers/world_fakes.py`` record each call and hand back what a real world
would. One island, one process (``Echo`` groups), no sockets."""

import pytest
import torch
from helpers.inprocess import TINY, corpus_for
from helpers.world_fakes import FakeWorld, reaches

from islands.scenarios import from_dict
from islands.trace import NO_FRAGMENT
from islands.trainer.core.loop import Trainer
from islands.trainer.core.world import Downloaded, Entry, FixedWorld, Groups, Passive, Start
from islands.trainer.exchange.comm import Echo
from islands.trainer.kinds import make_run_plan


def plan(outer_steps=2, inner_steps=3):
    document = {
        "name": "one",
        "model": {"parameters": 1e5},
        "schedule": {"algorithm": "diloco", "outer_steps": outer_steps, "inner_steps": inner_steps},
        "island": [{"name": "a", "replicas": 2, "step_time_s": 0.01, "bandwidth_gbps": 1.0}],
        "trainer": TINY,
    }
    return make_run_plan(from_dict(document), workers=2)


def holds_trainer(world, trainer) -> bool:
    return reaches(world, trainer)


def test_the_trainer_hands_its_world_the_state_and_the_end_and_the_world_keeps_no_trainer(tmp_path):
    run_plan = plan()
    world = FakeWorld()
    trainer = Trainer(run_plan, 0, world, out_dir=tmp_path, corpus=corpus_for(run_plan))
    trainer.run()
    summary = trainer.finish()
    assert not holds_trainer(world, trainer)
    assert world.evaluations == run_plan.periods == 2
    assert [period for period, _ in world.saved] == [
        2
    ]  # the last period's checkpoint (checkpoint_every 0)
    assert world.saved[0][1]["step"] == run_plan.total_steps == 6
    assert summary == {"steps": 6} and world.ending.step == 6 and world.ending.out_dir == tmp_path
    assert world.ending.rows is trainer.recorder.rows and world.ending.run_info["steps"] == 6
    assert len(world.sink) == len(trainer.recorder.rows)  # every row went to the world's sink too


def test_a_world_that_hands_over_the_global_model_starts_the_trainer_from_it():
    run_plan = plan(outer_steps=3)
    trainer = Trainer(run_plan, 0, FakeWorld(), corpus=corpus_for(run_plan))
    numel = sum(fragment.numel for fragment in trainer.fragments)
    weights = torch.arange(numel, dtype=torch.float32) / numel
    world = FakeWorld(Start(catch_up=Entry(weights, outer_step=2, download_s=(0.0, 0.25))))
    joiner = Trainer(run_plan, 0, world, corpus=corpus_for(run_plan))
    joiner.optimizer.state[joiner.params[0]] = {"step": torch.tensor(5.0)}
    joiner.run(
        stop_after=2
    )  # it enters at outer step 2 (step 6), past the stop: nothing left to train
    assert joiner.step == 2 * run_plan.eval_every_steps == 6
    assert not joiner.optimizer.state  # a fresh inner optimizer
    assert [fragment.applied for fragment in joiner.fragments] == [2]
    assert torch.equal(torch.cat([g.flatten() for g in joiner.fragments[0].global_params]), weights)
    assert torch.equal(
        torch.cat([p.detach().flatten() for p in joiner.params]), weights
    )  # local = global
    comm = [row for row in joiner.recorder.rows if row.kind == "comm"]
    assert [(row.time_start_s, row.time_end_s, row.outer_step, row.fragment) for row in comm] == [
        (0.0, 0.25, 2, NO_FRAGMENT)
    ]


def test_a_passive_joiner_keeps_the_averages_until_its_download_then_replays_the_missing_one():
    """Admitted after step 3 of 3 x 4: it exchanges zeros at steps 3 and 6, keeping both averages; the
    download is in at the second boundary and holds outer step 0 (the donor's state after step 3), so
    only outer step 1's kept average is replayed onto it: with a zero mean, Nesterov's step is the
    momentum's alone, theta - lr * mu^2 * b (buf <- mu b + 0; p <- p - lr (0 + mu buf))."""
    run_plan = plan(outer_steps=4)
    donor = Trainer(run_plan, 0, FakeWorld(), corpus=corpus_for(run_plan))
    donor.run(stop_after=1)
    snapshot = donor.global_state()
    (saved,) = snapshot["fragments"]
    buffers = [state["momentum_buffer"].clone() for state in saved["optimizer"]["state"].values()]
    polls = []

    def arrived():
        polls.append(joiner.step)
        return Downloaded(snapshot, 1234, 0.5, 0.75) if len(polls) == 2 else None

    world = FakeWorld(Start(passive=Passive(step=3, arrived=arrived)))
    joiner = Trainer(run_plan, 0, world, corpus=corpus_for(run_plan))
    joiner.run(stop_after=2)
    assert polls == [3, 6] and joiner.step == 6 and world.evaluations == 2
    assert (
        joiner.diloco.kept is None and not joiner.optimizer.state
    )  # active again, a fresh inner optimizer
    group = joiner.fragments[0].optimizer.param_groups[0]
    lr, mu = group["lr"], group["momentum"]
    assert group["nesterov"] and saved["applied"] == 1 and joiner.fragments[0].applied == 2
    expected = [g - lr * mu * mu * b for g, b in zip(saved["global"], buffers)]
    for held, want, local in zip(
        joiner.fragments[0].global_params, expected, joiner.fragments[0].params
    ):
        assert torch.allclose(held, want, atol=1e-6) and torch.equal(
            local.detach(), held.to(local.dtype)
        )
    download = [
        row for row in joiner.recorder.rows if row.kind == "comm" and row.fragment == NO_FRAGMENT
    ]
    assert [(row.time_start_s, row.time_end_s, row.outer_step, row.bytes) for row in download] == [
        (0.5, 0.75, 1, 1234)
    ]


def test_a_world_that_keeps_the_trainer_however_deep_is_caught():
    run_plan = plan()
    world = FakeWorld()
    trainer = Trainer(run_plan, 0, world, corpus=corpus_for(run_plan))
    assert not holds_trainer(world, trainer)
    world.later = [{"serve": lambda: trainer.step}]  # a closure in a dict in a list
    assert holds_trainer(world, trainer)
    world.later = [{"serve": trainer.global_state}]  # a bound method
    assert holds_trainer(world, trainer)


def test_a_fixed_world_keeps_its_groups_and_plan_but_not_the_trainer():
    run_plan = plan()
    groups = Groups(world=Echo(1), cross=Echo(1))
    trainer = Trainer(run_plan, 0, groups, corpus=corpus_for(run_plan))
    assert isinstance(trainer.world, FixedWorld) and trainer.world.groups is groups
    assert not holds_trainer(trainer.world, trainer)
    assert trainer.world.members() == [0, 1] and trainer.world.reports()
    with trainer.world.entering(trainer.local) as start:
        assert start is None
    assert trainer.world.rows_sink() is None


@pytest.mark.parametrize("paced_s, expected", [(0.5, 0.5), (0.0, 0.0)])
def test_a_learners_step_time_is_its_pace_or_its_mean_compute(paced_s, expected):
    from islands.trainer.core.tracing import Clock, Recorder
    from islands.trainer.decoupled.learner import StepTime

    recorder = Recorder(Clock(), 0, "a")
    step_time = StepTime(paced_s, recorder, first_step=10)
    step_time.step = 10
    assert step_time() == expected  # no step trained yet: the pace, or nothing to average
    recorder.add("compute", 0.0, 3.0, 0)
    step_time.step = 16
    assert step_time() == (paced_s if paced_s else 3.0 / 6)
