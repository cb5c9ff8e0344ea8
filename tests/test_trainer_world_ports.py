"""The trainer calls out to its world (``trainer/core/world.py``) and no world holds the trainer: an
in-process fake world records each call and hands back what a real one would. One island, one
process (``Echo`` groups), no sockets."""

import contextlib

import pytest
import torch

from islands.scenarios import from_dict
from islands.trainer.core.comm import Echo
from islands.trainer.core.diloco import ExchangerTransport
from islands.trainer.core.loop import Trainer
from islands.trace import NO_FRAGMENT
from islands.trainer.core.world import Ending, Entry, FixedWorld, Groups, Start
from islands.trainer.kinds import make_run_plan
from test_trainer_loop import TINY, corpus_for


class FakeWorld:
    """A world of one process that hands over ``entry`` (None: a run from the start) and keeps every
    call's arguments."""

    def __init__(self, entry=None):
        self.groups = Groups(world=Echo(1), cross=Echo(1))
        self.entry = entry
        self.sink = []
        self.saved: list[tuple[int, dict]] = []
        self.ending: Ending | None = None
        self.evaluations = 0

    def share_initial_weights(self, model):
        pass

    def holds_checkpoint(self, resume_dir):
        return False

    def agree_on_resume(self, error, state):
        return [error]

    def start_s(self, state):
        return 0.0

    def transport(self, exchanger, recorder, fragments):
        return ExchangerTransport(exchanger)

    def entering(self, local):
        return contextlib.nullcontext(self.entry and Start(catch_up=self.entry))

    def rows_sink(self):
        return self

    def write(self, text):
        self.sink.append(text)

    def flush(self):
        pass

    def between_steps(self, local):
        pass

    def members(self):
        return [0]

    def reports(self):
        return False

    def evaluate(self, evaluate_on):
        self.evaluations += 1
        return evaluate_on(self.groups.world, None)

    def publish_clock(self, paused=False):
        pass

    def save_checkpoint(self, period, out_dir, state):
        self.saved.append((period, state))

    def finish(self, ending):
        self.ending = ending
        return {"steps": ending.step}

    def state_dict(self):
        return {}

    def load_state(self, state):
        pass


def plan(outer_steps=2, inner_steps=3):
    document = {"name": "one", "model": {"parameters": 1e5},
                "schedule": {"algorithm": "diloco", "outer_steps": outer_steps, "inner_steps": inner_steps},
                "island": [{"name": "a", "replicas": 2, "step_time_s": 0.01, "bandwidth_gbps": 1.0}],
                "trainer": TINY}
    return make_run_plan(from_dict(document), workers=2)


def holds_trainer(world, trainer) -> bool:
    return any(value is trainer for value in vars(world).values())


def test_the_trainer_hands_its_world_the_state_and_the_end_and_the_world_keeps_no_trainer(tmp_path):
    run_plan = plan()
    world = FakeWorld()
    trainer = Trainer(run_plan, 0, world, out_dir=tmp_path, corpus=corpus_for(run_plan))
    trainer.run()
    summary = trainer.finish()
    assert not holds_trainer(world, trainer)
    assert world.evaluations == run_plan.periods == 2
    assert [period for period, _ in world.saved] == [2]  # the last period's checkpoint (checkpoint_every 0)
    assert world.saved[0][1]["step"] == run_plan.total_steps == 6
    assert summary == {"steps": 6} and world.ending.step == 6 and world.ending.out_dir == tmp_path
    assert world.ending.rows is trainer.recorder.rows and world.ending.run_info["steps"] == 6
    assert len(world.sink) == len(trainer.recorder.rows)  # every row went to the world's sink too


def test_a_world_that_hands_over_the_global_model_starts_the_trainer_from_it():
    run_plan = plan(outer_steps=3)
    trainer = Trainer(run_plan, 0, FakeWorld(), corpus=corpus_for(run_plan))
    numel = sum(fragment.numel for fragment in trainer.fragments)
    weights = torch.arange(numel, dtype=torch.float32) / numel
    world = FakeWorld(Entry(weights, outer_step=2, download_s=(0.0, 0.25)))
    joiner = Trainer(run_plan, 0, world, corpus=corpus_for(run_plan))
    joiner.optimizer.state[joiner.params[0]] = {"step": torch.tensor(5.0)}
    joiner.run(stop_after=2)  # it enters at outer step 2 (step 6), past the stop: nothing left to train
    assert joiner.step == 2 * run_plan.eval_every_steps == 6
    assert not joiner.optimizer.state  # a fresh inner optimizer
    assert [fragment.applied for fragment in joiner.fragments] == [2]
    assert torch.equal(torch.cat([g.flatten() for g in joiner.fragments[0].global_params]), weights)
    assert torch.equal(torch.cat([p.detach().flatten() for p in joiner.params]), weights)  # local = global
    comm = [row for row in joiner.recorder.rows if row.kind == "comm"]
    assert [(row.time_start_s, row.time_end_s, row.outer_step, row.fragment) for row in comm] == [(0.0, 0.25, 2, NO_FRAGMENT)]


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
