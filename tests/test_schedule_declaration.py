"""One schedule declaration, two executors.

Toy schedules that exist only in this file ("sync every other period", "apply two periods late") are
registered and run through the loader, the simulator and the trainer with nothing else changed;
fragments are sized from the real layer split on both sides; the simulator's payloads are the
trainer's."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from islands.scenarios import ScenarioError, from_dict, load
from islands.schedules import SCHEDULES, Schedule, SyncStep, schedule_of
from islands.simulator import simulate
from islands.trainer.core.inprocess import run_threads, thread_groups
from islands.trainer.core.loop import Trainer
from islands.trainer.core.model import GPTConfig, build_model
from islands.trainer.core.outer import split_fragments
from islands.trainer.exchange.quantize import encoded_bytes, padded_length
from islands.trainer.kinds import make_run_plan
from islands.validation.scaling import scale

BITS_PER_BYTE = 8
TINY = {
    "n_layer": 2,
    "n_head": 1,
    "n_embd": 16,
    "block_size": 16,
    "batch_size": 2,
    "corpus_bytes": 60_000,
    "eval_batches": 2,
    "warmup_steps": 2,
}


class EveryOtherPeriod(Schedule):
    """DiLoCo that skips every other sync: outer step o of H inner steps syncs only when o is odd."""

    name = "every-other"
    label = "Every other period"
    reads = ("inner_steps",)

    def sync_steps(self, schedule, first_outer: int = 0) -> Iterator[SyncStep]:
        h = schedule.inner_steps
        for outer in range(first_outer | 1, schedule.outer_steps, 2):
            boundary = (outer + 1) * h
            yield SyncStep(outer_step=outer, fragment=0, launch_step=boundary, apply_step=boundary)

    def period_steps(self, schedule) -> int:
        return schedule.inner_steps


class TwoPeriodsLate(Schedule):
    """DiLoCo whose average is applied two periods after it is launched (the last ones at the run's
    end): every exchange stays in flight over the next launch."""

    name = "two-periods-late"
    label = "Two periods late"
    reads = ("inner_steps",)

    def sync_steps(self, schedule, first_outer: int = 0) -> Iterator[SyncStep]:
        h, end = schedule.inner_steps, schedule.outer_steps * schedule.inner_steps
        for outer in range(first_outer, schedule.outer_steps):
            yield SyncStep(
                outer_step=outer,
                fragment=0,
                launch_step=(outer + 1) * h,
                apply_step=min((outer + 3) * h, end),
            )

    def period_steps(self, schedule) -> int:
        return schedule.inner_steps

    def transfers_may_overlap(self, schedule) -> bool:
        return True


@pytest.fixture
def toy(monkeypatch):
    monkeypatch.setitem(SCHEDULES, EveryOtherPeriod.name, EveryOtherPeriod())
    monkeypatch.setitem(SCHEDULES, TwoPeriodsLate.name, TwoPeriodsLate())


def toy_document(**trainer):
    return {
        "name": "toy",
        "model": {"parameters": 1e9, "bytes_per_param": 2},
        "schedule": {"algorithm": "every-other", "inner_steps": 4, "outer_steps": 4},
        "island": [{"name": "a", "replicas": 2, "step_time_s": 1.0, "bandwidth_gbps": 1.0}],
        "trainer": {**TINY, **trainer},
    }


def test_an_unregistered_algorithm_is_one_line_naming_the_registered_ones():
    with pytest.raises(
        ScenarioError, match=r"schedule.algorithm: must be one of 'ddp', 'diloco', 'streaming'"
    ):
        from_dict(toy_document(), "toy.toml")


def test_the_toy_schedule_runs_in_the_simulator(toy):
    result = simulate(from_dict(toy_document(), "toy.toml"))
    # 16 steps of 1 s; two syncs (after outer steps 1 and 3), each a 2-worker ring of 2 GB at
    # 1 Gbit/s: 2(M-1)/M * S = 2e9 B per worker = 16 s.
    sync_s = 2 * (2 - 1) / 2 * 1e9 * 2 / (1e9 / BITS_PER_BYTE)
    assert sync_s == 16.0
    assert result.summary["wall_time_s"] == pytest.approx(16 * 1.0 + 2 * sync_s)
    comm = result.trace[result.trace["kind"] == "comm"]
    assert sorted(set(comm["outer_step"])) == [1, 3]
    assert result.summary["outer_steps"] == 4


def test_the_toy_schedule_runs_in_the_trainer(toy):
    plan = make_run_plan(from_dict(toy_document(), "toy.toml"))
    assert plan.total_steps == 16 and plan.fragments == 1
    groups = thread_groups(plan.islands, plan.ranks_per_island)
    trainers = run_threads(plan.world_size, lambda rank: Trainer(plan, rank, groups[rank]))
    run_threads(plan.world_size, lambda rank: trainers[rank].run())
    summary = run_threads(plan.world_size, lambda rank: trainers[rank].finish())[0]
    comm_outer = sorted({row.outer_step for row in trainers[0].recorder.rows if row.kind == "comm"})
    assert comm_outer == [1, 3]
    assert [fragment.applied for fragment in trainers[0].fragments] == [2]
    globals_ = [torch.cat([g.flatten() for g in t.fragments[0].global_params]) for t in trainers]
    assert torch.equal(globals_[0], globals_[1]) and torch.isfinite(globals_[0]).all()
    assert summary["outer_steps"] == 4


def late_document():
    document = toy_document()
    document["model"]["parameters"] = (
        1.25e8  # 2.5e8 B at bf16: a 2-worker ring moves S per worker, 2 s
    )
    document["schedule"]["algorithm"] = "two-periods-late"
    return document


def test_an_exchange_in_flight_over_the_next_launch_is_simulated(toy):
    summary = simulate(from_dict(late_document(), "late.toml")).summary
    # Launches at 4, 8, 12, 16 s, each sync 2 s on its own; applies due at 12, 16, 16, 16 s. Only the
    # last sync, launched at the run's end, stalls. (Joined only at its apply, each exchange would start
    # late and the last two would share the link: 20 s.)
    assert summary["wall_time_s"] == pytest.approx(16 + 2)
    assert summary["stall_s"] == pytest.approx(2) and summary["syncs"] == 4


def test_an_exchange_in_flight_over_the_next_launch_is_trained(toy):
    """Keyed by fragment alone, the next launch would overwrite an exchange in flight."""
    plan = make_run_plan(from_dict(late_document(), "late.toml"))
    groups = thread_groups(plan.islands, plan.ranks_per_island)
    trainers = run_threads(plan.world_size, lambda rank: Trainer(plan, rank, groups[rank]))
    run_threads(plan.world_size, lambda rank: trainers[rank].run())
    run_threads(plan.world_size, lambda rank: trainers[rank].finish())
    assert sorted(row.outer_step for row in trainers[0].recorder.rows if row.kind == "comm") == [
        0,
        1,
        2,
        3,
    ]
    assert [fragment.applied for fragment in trainers[0].fragments] == [4] and not trainers[
        0
    ].diloco.pending
    globals_ = [torch.cat([g.flatten() for g in t.fragments[0].global_params]) for t in trainers]
    assert torch.equal(globals_[0], globals_[1])


def test_a_planned_models_fragments_follow_its_layers():
    # 10 blocks of 1e8 and 1e8 of embeddings, P = 4: fragment 0 holds the embeddings and blocks 0, 4
    # and 8; fragment 1 blocks 1, 5, 9; fragments 2 and 3 two blocks each.
    scenario = load(
        "worked-example",
        [
            "schedule.algorithm=streaming",
            "schedule.fragments=4",
            "schedule.overlap_steps=0",
            "model.parameters=1.1e9",
            "model.layers=10",
            "model.embedding_parameters=1e8",
        ],
    )
    points = [p for p in schedule_of(scenario).sync_points(scenario) if p.outer_step == 0]
    assert [p.values for p in points] == pytest.approx([4e8, 3e8, 2e8, 2e8])
    assert [p.payload_bytes for p in points] == pytest.approx(
        [v * scenario.schedule.bits / 8 for v in (4e8, 3e8, 2e8, 2e8)]
    )


def test_fragments_need_layers_and_the_embeddings_fit():
    with pytest.raises(
        ScenarioError,
        match=r"schedule.fragments: fragments are layer groups: P = 10 needs "
        r"model.layers >= 10 \(got 4\)",
    ):
        load("worked-example", ["schedule.algorithm=streaming", "model.layers=4"])
    with pytest.raises(
        ScenarioError, match=r"model.embedding_parameters: must be below model.parameters"
    ):
        load("worked-example", ["model.embedding_parameters=2e10"])


def test_the_scaled_streaming_case_prices_each_fragment_the_trainer_sends():
    """The simulator's bytes per fragment are the trainer's encoded fragments (embeddings in fragment 0),
    to the final LayerNorm's 2 x n_embd values that the planned layout spreads over the blocks."""
    case = scale(load("worked-example", ["schedule.algorithm=streaming", "schedule.bits=8"]))
    scenario = case.scenario()
    trainer, workers = scenario.trainer, len(scenario.workers())
    model = build_model(
        GPTConfig(
            block_size=trainer.block_size,
            n_layer=trainer.n_layer,
            n_head=trainer.n_head,
            n_embd=trainer.n_embd,
        ),
        0,
    )
    declared = schedule_of(scenario)
    groups = split_fragments(
        model, trainer.n_layer, declared.fragments(scenario.schedule), declared
    )
    sent = [
        encoded_bytes(padded_length(sum(p.numel() for p in group), workers), 8) for group in groups
    ]
    priced = [p.payload_bytes for p in declared.sync_points(scenario) if p.outer_step == 0]
    assert (
        sent[0] > 1.05 * sent[1]
    )  # the embeddings make fragment 0 the largest: an equal split is wrong
    assert priced == pytest.approx(sent, rel=2e-3)


def test_time_to_barrier_is_compute_per_sync_on_both_sides():
    # Streaming, H = 4, P = 2, tau = 1, 1 s steps: a sync every H / P = 2 steps of compute, though
    # each is launched 1 step after the previous one was applied.
    document = toy_document()
    document["schedule"] = {
        "algorithm": "streaming",
        "inner_steps": 4,
        "outer_steps": 3,
        "fragments": 2,
        "overlap_steps": 1,
    }
    summary = simulate(from_dict(document, "s.toml")).summary
    assert [island["time_to_barrier_s"] for island in summary["islands"]] == [pytest.approx(2.0)]


def test_the_planner_tries_no_more_fragments_than_the_model_has_layers():
    from islands.analysis.planner.plan import fragment_candidates

    scenario = load("worked-example", ["model.layers=4", "schedule.overlap_steps=0"])  # H = 500
    assert sorted({p for p, _ in fragment_candidates(scenario)}) == [1, 2, 4]
