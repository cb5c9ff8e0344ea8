"""The run plan: a validated scenario plus the command line, reduced to what every process needs.

Numbers follow the schedule's declaration (``islands.schedules``), which the simulator plays too:
``outer_steps`` outer steps of ``period_steps`` inner steps each (H for DiLoCo and Streaming DiLoCo,
1 for DDP). Evaluation (and so the console line and checkpoints) happens every H inner steps for
every algorithm, so runs of different algorithms with the same token budget are evaluated at the
same token counts.

``--workers N`` keeps the first N workers of ``scenario.workers()`` (islands expanded into their
replicas, in rank order: the islands by name): a quick run of a big scenario on a small machine.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from collections import defaultdict
from dataclasses import dataclass

from islands.errors import UserError
from islands.scenarios import Scenario, Worker
from islands.scenarios.trainer_keys import TrainerSpec
from islands.schedules import GRADIENT, Schedule, SyncPoint, schedule_of


@dataclass(frozen=True)
class RunPlan:
    scenario: Scenario
    workers: tuple[Worker, ...]
    data_path: str

    @property
    def spec(self) -> TrainerSpec:
        return self.scenario.trainer

    @property
    def algorithm(self) -> str:
        return self.scenario.schedule.algorithm

    @property
    def schedule(self) -> Schedule:
        """The declaration this run executes."""
        return schedule_of(self.scenario)

    @property
    def islands(self) -> int:
        return len(self.workers)

    @property
    def ranks_per_island(self) -> int:
        return self.spec.ranks_per_island

    @property
    def world_size(self) -> int:
        return self.islands * self.ranks_per_island

    @property
    def eval_every_steps(self) -> int:
        """H: inner steps between evaluations, console lines and checkpoints, whatever the schedule
        (its own period, ``Schedule.period_steps``, is one step for DDP)."""
        return self.scenario.schedule.inner_steps

    @property
    def total_steps(self) -> int:
        return self.schedule.total_steps(self.scenario.schedule)

    @property
    def periods(self) -> int:
        return -(-self.total_steps // self.eval_every_steps)

    @property
    def fragments(self) -> int:
        return self.schedule.fragments(self.scenario.schedule)

    @property
    def alpha(self) -> float:
        return self.schedule.merge_alpha(self.scenario)

    @property
    def syncs_gradient(self) -> bool:
        """The schedule averages the gradient inside the step (DDP), not fragments after it."""
        return self.schedule.exchanged == GRADIENT

    @property
    def tokens_per_step(self) -> int:
        """Tokens (bytes) that all ranks together train on in one inner step."""
        return self.world_size * self.spec.batch_size * self.spec.block_size

    def outer_step(self, step: int) -> int:
        """The outer step (DDP: the step) that 0-based inner step ``step`` belongs to."""
        return self.schedule.outer_step_of(step, self.scenario.schedule)

    def outer_steps_done(self, steps: int) -> int:
        return steps // self.schedule.period_steps(self.scenario.schedule)

    def pace_s(self, island: int) -> float:
        """Target seconds per inner step for this island (0: no pacing)."""
        if self.spec.pace_step_time_s > 0:
            return self.spec.pace_step_time_s
        return self.workers[island].step_time_s if self.spec.pace_islands else 0.0

    @property
    def elastic(self) -> bool:
        """Islands may leave and join: asked for, or implied by the scenario's churn."""
        return (
            self.spec.elastic
            or bool(self.events())
            or not all(worker.present for worker in self.workers)
        )

    def events(self) -> list[tuple[float, int, str]]:
        """The scenario's churn events on the kept workers: (at_s, worker index, kind), in time order."""
        return [
            (event.at_s, index, event.kind)
            for event in self.scenario.events
            for index, worker in enumerate(self.workers)
            if event.island in (worker.name, worker.island)
        ]

    def initial_members(self) -> list[int]:
        return [index for index, worker in enumerate(self.workers) if worker.present]

    def data_source(self) -> str:
        return self.data_path or self.spec.data_path

    def fingerprint(self) -> str:
        """What must not change between a checkpoint and its resumption."""
        document = dataclasses.asdict(self.scenario)
        document.pop("source")
        document["workers"] = [w.name for w in self.workers]
        document["data"] = self.data_source()
        return hashlib.sha256(
            json.dumps(document, sort_keys=True, default=str).encode()
        ).hexdigest()[:16]


def gpt_tensors(n_layer: int) -> int:
    """The parameter tensors of the trainer's GPT (``core/model.py``): the token and position
    embeddings, 12 per block (two LayerNorms, the attention's two and the MLP's two linear layers,
    a weight and a bias each) and the final LayerNorm's weight and bias."""
    return 2 + 12 * n_layer + 2


def check_model(plan: RunPlan) -> None:
    """The model's shape fits its heads and the schedule's fragments, and a round's K gathered
    peers are among the islands trained."""
    spec, source = plan.spec, plan.scenario.source
    if spec.n_embd % spec.n_head:
        raise UserError(
            f"{source}: trainer.n_embd: must be divisible by trainer.n_head "
            f"({spec.n_embd} % {spec.n_head} != 0)"
        )
    if plan.fragments > spec.n_layer:
        raise UserError(
            f"{source}: schedule.fragments: streaming splits strided layer groups, so P = "
            f"{plan.fragments} needs trainer.n_layer >= {plan.fragments} (got {spec.n_layer})"
        )
    listed = plan.scenario.exchange.tensor_values
    tensors = gpt_tensors(spec.n_layer)
    if listed is not None and len(listed) != tensors:
        raise UserError(
            f"{source}: exchange.tensor_values: lists {len(listed)} tensors, and the trainer's GPT "
            f"of {spec.n_layer} blocks has {tensors} (12 per block, 2 embeddings, the final "
            "LayerNorm's 2): list its own, or leave the key out"
        )
    peers = plan.scenario.schedule.gather_peers
    if peers is not None and peers > plan.islands:
        raise UserError(
            f"{source}: schedule.gather_peers: must be at most the {plan.islands} islands trained "
            f"(got {peers}): lower it, or train more with --workers"
        )


def check_overlap(scenario: Scenario) -> None:
    """Refuse the backward overlap the trainer does not run: a pseudo-gradient's (formed after the
    whole backward pass and the inner optimizer step). DDP's buckets go during the backward pass,
    held to a paced one (``loop.Trainer.sync_during_backward``) or as the real one produces them
    (``loop.Trainer.sync_while_produced``)."""
    source, overlap = scenario.source, scenario.schedule.backward_overlap
    if overlap and schedule_of(scenario).exchanged != GRADIENT:
        raise UserError(
            f"{source}: schedule.backward_overlap: the real trainer sends a pseudo-gradient after "
            f"the whole backward pass, so it trains only 0 (got {overlap:g}); the overlap is "
            "simulated only"
        )


def check_supported(scenario: Scenario) -> None:
    """Refuse what only the simulator plays: other barriers, backward overlap other than DDP's
    (``check_overlap``), a staged collective, a ring's reduce-scatter made around the ring, a
    collective that goes on without a departed member, a joiner's state striped over the holders, a
    ring reordered across regions, and random churn and chip failures."""
    source = scenario.source
    if getattr(scenario.schedule, "barrier", "wait") != "wait":
        raise UserError(
            f'{source}: schedule.barrier: the real trainer only runs "wait" '
            f"(got {scenario.schedule.barrier!r})"
        )
    check_overlap(scenario)
    if scenario.network.collective != "ring":
        raise UserError(
            f"{source}: network.collective: the real trainer runs a ring all-reduce (got "
            f"{scenario.network.collective!r}); the {scenario.network.collective} collective is "
            "simulated only"
        )
    if scenario.network.reduce_scatter != "all_to_all":
        raise UserError(
            f"{source}: network.reduce_scatter: the real trainer's all-reduce makes its first pass as "
            f'an all-to-all (got {scenario.network.reduce_scatter!r}); "ring" is simulated only'
        )
    if scenario.network.on_departure != "restart":
        raise UserError(
            f"{source}: network.on_departure: the real trainer restarts a broken collective among the "
            f'survivors (got {scenario.network.on_departure!r}); "partial" is simulated only'
        )
    if scenario.network.weights_from != "fastest":
        raise UserError(
            f"{source}: network.weights_from: the real trainer sends a joiner the whole state from "
            f'the fastest holder (got {scenario.network.weights_from!r}); "striped" is simulated only'
        )
    if scenario.network.ring_order != "ranked" and scenario.regions:
        raise UserError(
            f"{source}: network.ring_order: the real trainer runs its ring in rank order, the "
            f"islands by name (got {scenario.network.ring_order!r}): name them in the order you want"
        )
    for index, island in enumerate(scenario.islands):
        if getattr(island, "mtbf_s", None):
            raise UserError(
                f"{source}: island.{index}.mtbf_s: random churn is simulated only; "
                f"use [[event]] entries to train with churn"
            )
        if getattr(island, "chip_mtbf_s", None):
            raise UserError(
                f"{source}: island.{index}.chip_mtbf_s: chip failures are simulated only; "
                f"use [[event]] entries to train with islands that leave and return"
            )


def sync_plan(plan: RunPlan) -> tuple[dict[int, list[SyncPoint]], dict[int, list[SyncPoint]]]:
    """The schedule's sync points, the very ones the simulator plays, keyed by inner steps done:
    (launches, applies). A gradient exchange launched at step k happens inside step k (after its
    backward pass); a fractional launch step (DDP's backward overlap) is run inside its step, during
    its backward pass (``loop.Trainer.sync_during_backward``, ``sync_while_produced``)."""
    launches: dict[int, list[SyncPoint]] = defaultdict(list)
    applies: dict[int, list[SyncPoint]] = defaultdict(list)
    for point in plan.schedule.sync_points(plan.scenario):
        launches[math.ceil(point.launch_step)].append(point)
        applies[int(point.apply_step)].append(point)
    return launches, applies
