"""One process's training loop: inner steps, the schedule's syncs, evaluation, checkpoints.

The loop is an ordinary loop over inner steps that executes the schedule's declaration
(``islands.schedules``, the one the simulator plays, ``config.sync_plan``). A schedule that
exchanges the gradient (DDP) averages it inside each step it launches a sync at, before the inner
optimizer steps; one that exchanges pseudo-gradients (DiLoCo, Streaming DiLoCo) checks after each
step whether a fragment's exchange is launched here (pseudo-gradient computed now, averaged on the
background thread while training goes on) or applied (wait if it has not arrived, outer step, merge):
``diloco.DiLoCo``, over the transport the trainer is built with. DiLoCo is the one-fragment,
zero-overlap case of the same code.

Inside an island with several ranks the gradient is averaged over the intra-island group after every
backward pass (plain data parallel), so the island's ranks hold identical replicas.
"""

from __future__ import annotations

import contextlib
import json
import math
import time
from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import torch

from islands.errors import UserError
from islands.schedules import SyncPoint
from islands.schedules.compression import TopK
from islands.tables import size
from islands.trace import NO_FRAGMENT, WASTED

from ..config import RunPlan, sync_plan
from ..exchange.gathering import gathering_of
from ..exchange.group import Group, Summing
from ..exchange.robust import JOINING, NOT_FINITE, AggregationRule, Verdict
from ..exchange.sync import Backward, Exchanger, call_layouts, exchange_calls
from . import checkpoint
from .checkpoint import PeerFailed
from .data import BatchSampler, Corpus, load_corpus, sampler_seed, validation_batches
from .diloco import DiLoCo, Synced
from .faults import kill_point, poisoned
from .model import GPTConfig, build_model, decay_groups
from .outer import Fragment, build_fragments
from .produced import BackwardCalls, ProducedGradients, measured_buckets
from .tracing import Clock, MetricsLog, Recorder
from .world import (
    Downloaded,
    Ending,
    Entry,
    FixedWorld,
    Groups,
    Local,
    Passive,
    Rejoin,
    Start,
    World,
    flatten,
    unflatten_into,
)

ADAMW_BETAS = (0.9, 0.95)


def learning_rate(
    step: int, total_steps: int, peak: float, warmup_steps: int, min_ratio: float
) -> float:
    """Linear warmup over ``warmup_steps``, then cosine decay to ``min_ratio * peak`` at the last step."""
    if step < warmup_steps:
        return peak * (step + 1) / warmup_steps
    progress = (step - warmup_steps) / max(1, total_steps - warmup_steps)
    return peak * (min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * min(progress, 1.0))))


def make_inner_optimizer(model: torch.nn.Module, plan: RunPlan) -> torch.optim.Optimizer:
    spec = plan.spec
    groups = decay_groups(model, spec.weight_decay)
    if spec.inner_optimizer == "sgd":
        return torch.optim.SGD(groups, lr=spec.lr)
    return torch.optim.AdamW(groups, lr=spec.lr, betas=ADAMW_BETAS)


def model_config(plan: RunPlan) -> GPTConfig:
    spec = plan.spec
    return GPTConfig(
        block_size=spec.block_size, n_layer=spec.n_layer, n_head=spec.n_head, n_embd=spec.n_embd
    )


def shapes_of(model: torch.nn.Module) -> dict[str, tuple[int, ...]]:
    return {name: tuple(tensor.shape) for name, tensor in model.state_dict().items()}


def aggregation_rule(plan: RunPlan) -> AggregationRule:
    spec = plan.spec
    return AggregationRule(
        spec.screen_norm_factor, spec.aggregation, spec.trim_fraction, spec.topk_mean
    )


def default_corpus(plan: RunPlan) -> Corpus:
    spec = plan.spec
    return load_corpus(
        plan.data_source(),
        spec.data_split,
        plan.islands,
        spec.block_size,
        spec.corpus_bytes,
        spec.val_fraction,
        spec.seed,
    )


class Trainer:
    """Trains one rank of one island. Build it in every process (or thread), then ``run()``."""

    def __init__(
        self,
        plan: RunPlan,
        rank: int,
        world: World | Groups,
        device: torch.device | str = "cpu",
        out_dir: Path | None = None,
        resume_dir: Path | None = None,
        corpus: Corpus | None = None,
    ):
        """``world``: the processes it trains with (``world.py``; plain ``Groups``: a ``FixedWorld``)."""
        spec = plan.spec
        self.plan, self.rank, self.device, self.out_dir = plan, rank, device, out_dir
        self.world = FixedWorld(world, plan, rank) if isinstance(world, Groups) else world
        self.island, self.local_rank = divmod(rank, plan.ranks_per_island)
        if out_dir:
            out_dir.mkdir(parents=True, exist_ok=True)
        self.model = build_model(model_config(plan), spec.seed, device)
        self.world.share_initial_weights(self.model)
        self.params = list(self.model.parameters())
        self.optimizer = make_inner_optimizer(self.model, plan)
        corpus = corpus or default_corpus(plan)
        self.sampler = BatchSampler(
            corpus.shards[self.island],
            spec.batch_size,
            spec.block_size,
            sampler_seed(spec.seed, self.island),
            device,
            self.local_rank,
            plan.ranks_per_island,
        )
        self.eval_batches = validation_batches(
            corpus.validation,
            spec.eval_batches,
            spec.batch_size,
            spec.block_size,
            spec.seed,
            device,
        )
        # A gradient exchange happens inside the step that launches it; fragments' after their step.
        self.gradient_syncs = sync_plan(plan)[0] if plan.syncs_gradient else {}
        self.step = 0
        self.stop_after: int | None = None
        self.eval_losses: list[tuple[int, float]] = []
        self.period_records: list[dict[str, Any]] = []
        self.metrics: MetricsLog | None = None
        self.paced_from_s, self.paced_steps = math.nan, 0
        state = self.verified_resume(resume_dir) if resume_dir else None
        groups, bits, rule = self.groups, plan.scenario.schedule.bits, aggregation_rule(plan)
        self.clock = Clock()
        total_values = sum(p.numel() for p in self.params)
        self.exchanger = Exchanger(
            groups.cross,
            groups.intra_sync,
            bits,
            self.clock,
            rule,
            device,
            exchange_calls(plan.scenario, total_values),
            TopK.of(plan.scenario.schedule),
            gathering_of(plan.scenario, groups.store),
            call_layouts(plan.scenario, total_values),
        )
        self.exchanger.warm_up(total_values, plan.islands)
        self.produced = ProducedGradients(self.params, self.clock)
        self.backward_calls: list[BackwardCalls] = []
        self.start_clock(state)
        self.excluded: list[dict[str, Any]] = []
        self.diloco = None if plan.syncs_gradient else self.build_diloco()
        self.local = Local(self.global_state, self.quiet_until_admission)  # what the world may read
        if state:
            self.load_state(state)

    def build_diloco(self) -> DiLoCo:
        plan, world = self.plan, self.world
        schedule = plan.scenario.schedule
        fragments = build_fragments(
            self.model,
            plan.spec.n_layer,
            plan.fragments,
            plan.schedule,
            plan.spec,
            schedule.error_feedback,
        )
        return DiLoCo(
            self.optimizer,
            fragments,
            world.transport(self.exchanger, self.recorder, fragments),
            schedule=sync_plan(plan),
            alpha=plan.alpha,
            island=self.island,
            now=self.clock.now,
            update=plan.schedule.update,
            members=lambda: len(world.members()),
            compressed=TopK.of(schedule) is not None,
        )

    @property
    def groups(self) -> Groups:
        return self.world.groups

    @property
    def fragments(self) -> list[Fragment]:
        """The DiLoCo fragments (none under DDP)."""
        return self.diloco.fragments if self.diloco else []

    def verified_resume(self, resume_dir: Path) -> dict[str, Any] | None:
        """This rank's checkpoint, verified; no process goes on (or writes anything) unless every
        process's file passed. The one that failed says why in one line; the others exit quietly."""
        state, error = None, None
        try:
            if self.world.holds_checkpoint(resume_dir):
                state = checkpoint.load(
                    resume_dir,
                    self.rank,
                    self.plan.world_size,
                    self.plan.fingerprint(),
                    shapes_of(self.model),
                )
        except UserError as exc:
            error = str(exc)
        failed = [reason for reason in self.world.agree_on_resume(error, state) if reason]
        if error:
            raise UserError(error)
        if failed:
            raise PeerFailed(failed[0])
        return state

    def start_clock(self, state: dict | None) -> None:
        self.clock.restart(self.world.start_s(state))
        rows = state["trace_rows"] if state else []
        worker = self.plan.workers[self.island]
        self.recorder = Recorder(self.clock, self.island, worker.island, rows)

    # ---------------------------------------------------------------- the loop
    def run(self, stop_after: int | None = None) -> None:
        """Enter the run (again, without state, whenever the world leaves this rank out), then train to
        the end, or until ``stop_after`` periods (of H steps) are done, then checkpoint."""
        self.stop_after = stop_after
        while True:
            try:
                with self.world.entering(self.local) as start:
                    if start is not None:
                        self.begin(start)
                self.open_rows_sink()
                self.train()
                return
            except Rejoin as left_out:
                if self.local_rank == 0:
                    print(left_out, flush=True)

    def open_rows_sink(self) -> None:
        """The world's sink for the trace rows, if it has one: the rows so far, then each as recorded."""
        if self.recorder.sink is not None:
            return
        sink = self.world.rows_sink()
        if sink is not None:
            self.recorder.sink = sink
            for row in self.recorder.rows:
                sink.write(json.dumps(row) + "\n")

    def begin(self, start: Start) -> None:
        """Enter a run as the world decided: adopt a global state, catch up (a returning learner), or
        take part as a passive member until the download is in; compute starts from here."""
        if start.adopt is not None:
            self.adopt(start.adopt)
        if start.catch_up is not None:
            self.catch_up(start.catch_up)
        if start.passive is not None:
            self.follow(start.passive)
        self.recorder.start_compute()

    def elastic_outer(self) -> DiLoCo:
        """The outer loop, which a run whose islands leave and join has: it trains DiLoCo or Streaming
        DiLoCo (``kinds.check_elastic``)."""
        assert self.diloco is not None, (
            "an elastic run exchanges pseudo-gradients (kinds.check_elastic)"
        )
        return self.diloco

    def adopt(self, state: dict[str, Any]) -> None:
        """Take another member's global state (``global_state``'s form) at its step: local = global, a
        fresh inner optimizer."""
        self.step = state["step"]
        self.load_global(state)
        self.elastic_outer().restart_from_global()

    def catch_up(self, entry: Entry) -> None:
        """Enter a run under way (a returning learner): the global model its world handed over, local =
        global, a fresh inner optimizer, from the outer step it trains next."""
        offset = 0
        for fragment in self.fragments:
            fragment.adopt(entry.weights[offset : offset + fragment.numel])
            fragment.applied = entry.outer_step
            offset += fragment.numel
        self.optimizer.state.clear()
        self.step = entry.outer_step * self.plan.eval_every_steps
        self.recorder.add("comm", *entry.download_s, entry.outer_step, NO_FRAGMENT)

    def follow(self, passive: Passive) -> None:
        """A joiner's passive phase (``elastic/joining.py``), from the inner step it was admitted at:
        every exchange of the schedule with a zero contribution (DiLoCo keeps the averages), every
        evaluation and checkpoint; at the first outer boundary after its download is in, it adopts the
        download and replays the averages it missed."""
        diloco = self.elastic_outer()
        diloco.become_passive()
        for step in diloco.sync_steps(passive.step):
            self.step = step
            self.record_exchanges(diloco.after_step(step))
            if step % self.plan.eval_every_steps == 0 or step == self.plan.total_steps:
                self.recorder.start_compute()
                self.end_period(
                    {
                        "step": step,
                        "outer_step": self.plan.outer_step(step - 1),
                        "train_loss": math.nan,
                        "tokens": step * self.plan.tokens_per_step,
                    }
                )
                download = passive.arrived()
                if download is not None:
                    self.adopt_download(download)
                    return

    def adopt_download(self, download: Downloaded) -> None:
        """The downloaded snapshot, then every kept average of the syncs after it, in order."""
        self.load_global(download.state)
        self.elastic_outer().replay_kept()
        self.recorder.add(
            "comm",
            download.started_s,
            download.done_s,
            self.plan.outer_step(self.step - 1),
            NO_FRAGMENT,
            download.size_bytes,
        )

    def load_global(self, state: dict[str, Any]) -> None:
        """The fragments of another member's ``global_state`` (global weights, outer optimizers); this
        period's step records were not trained from them and go."""
        for fragment, saved in zip(self.fragments, state["fragments"]):
            fragment.load_state_dict(saved)
        self.period_records = []

    def global_state(self) -> dict[str, Any]:
        """The state another member adopts from this one: the step, the fragments' global weights and
        outer optimizers, the trace clock."""
        return {
            "step": self.step,
            "fragments": [fragment.state_dict() for fragment in self.fragments],
            "clock_s": self.clock.now(),
        }

    def quiet_until_admission(self) -> bool:
        return self.diloco is None or self.diloco.quiet_until_admission(self.step)

    def train(self) -> None:
        while self.step < self.plan.total_steps and not self.stopped():
            self.run_step()

    def stopped(self) -> bool:
        return (
            self.stop_after is not None
            and self.step >= self.stop_after * self.plan.eval_every_steps
        )

    def run_steps(self, count: int) -> None:
        for _ in range(count):
            self.run_step()

    def run_step(self) -> None:
        start_s = self.clock.now()
        loss, grad_blocked_s, grad_comm_s, paced_s = self.inner_step()
        self.step += 1
        kill_point("inner-step", self.island)
        sync_blocked_s, sync_comm_s = self.sync_fragments()
        outer_step = self.plan.outer_step(self.step - 1)
        record = {
            "step": self.step,
            "outer_step": outer_step,
            "train_loss": loss,
            "eval_loss": None,
            "tokens": self.step * self.plan.tokens_per_step,
            "step_time_s": self.clock.now() - start_s,
            "allreduce_s": grad_comm_s + sync_comm_s,
            "blocked_s": grad_blocked_s + sync_blocked_s,
            "paced_s": paced_s,
        }
        if self.step % self.plan.eval_every_steps == 0 or self.step == self.plan.total_steps:
            # DDP's optimizer step and pacing come after the step's sync: close that compute before
            # the clock pauses, or a run's last step (and a checkpoint's trace) would leave it out.
            self.recorder.end_compute(outer_step)
            self.end_period(record)
        else:
            self.log_metrics(record)
        self.world.between_steps(self.local)

    def log_metrics(self, record: dict[str, Any]) -> None:
        """Keep the period's step records; the reporting process (a live one: member 0 of an elastic
        run's epoch) writes them. A process that takes over reporting mid-period first drops what its
        predecessor wrote of this period and writes its own records of it, so every step is there once."""
        self.period_records.append({**record, "island": self.island})
        if not (self.out_dir and self.reports()):
            if self.metrics:
                self.metrics.close()
                self.metrics = None
            return
        if self.metrics is None:
            first_step = self.period_records[0]["step"]
            self.metrics = MetricsLog(
                self.out_dir / "metrics.jsonl", keep_through_step=first_step - 1
            )
            for earlier in self.period_records[:-1]:
                self.metrics.write(earlier)
        self.metrics.write(self.period_records[-1])

    def inner_step(self) -> tuple[float, float, float, float]:
        """Forward, backward, gradient averaging, clip, optimizer step, pacing;
        (loss, blocked s, comm s, paced s: the part of the step's compute that was pacing sleep).
        A gradient exchanged during the backward pass (``backward_overlap``) is paced there
        (``sync_during_backward``), or, unpaced, goes bucket by bucket as the real backward pass
        produces it (``sync_while_produced``)."""
        busy_start = time.monotonic()
        spec = self.plan.spec
        x, y = self.sampler.next_batch()
        lr = learning_rate(
            self.step, self.plan.total_steps, spec.lr, spec.warmup_steps, spec.min_lr_ratio
        )
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        points = self.gradient_syncs.get(self.step + 1, [])
        produced = self.launch_while_produced(points)
        loss = self.model(x, y)
        backward_s = self.clock.now()
        loss.backward()
        grads = [p.grad for p in self.params]
        blocked_s = comm_s = sync_wall_s = paced_s = 0.0
        if produced is not None:
            self.produced.finished()
            blocked_s, comm_s = self.sync_while_produced(
                present(grads), points[0], produced, backward_s
            )
            points = []
        intra = self.groups.intra_grad
        if intra is not None and produced is None:
            self.average_inside_island(present(grads), intra)
        overlapped = self.overlaps_backward()
        for point in points:
            sync_start = time.monotonic()
            if overlapped:
                blocked_s, comm_s, paced_s = self.sync_during_backward(present(grads), point)
            else:
                blocked_s, comm_s = self.sync_gradients(present(grads), point)
            sync_wall_s = time.monotonic() - sync_start
        if spec.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(self.params, spec.grad_clip)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        if not (overlapped and sync_wall_s):
            paced_s = self.pace(
                time.monotonic() - busy_start - sync_wall_s, synced_inside=bool(sync_wall_s)
            )
        return loss.item(), blocked_s, comm_s, paced_s

    def overlaps_backward(self) -> bool:
        """Whether the gradient is exchanged during a paced backward pass, its calls held to the
        paced pass (``sync_during_backward``)."""
        return (
            self.plan.scenario.schedule.backward_overlap > 0 and self.plan.pace_s(self.island) > 0
        )

    def launch_while_produced(self, points: list[SyncPoint]) -> Future | None:
        """Under ``backward_overlap`` on an unpaced step with a gradient exchange (DDP's one), the
        exchange launched before the backward pass, its calls each waiting for its bucket's
        gradients (``ProducedGradients``); None otherwise."""
        if not (points and self.plan.scenario.schedule.backward_overlap > 0):
            return None
        if self.plan.pace_s(self.island) > 0:
            return None
        assert len(points) == 1, "DDP exchanges its gradient once a step"
        self.produced.arm()
        outer_step = points[0].outer_step
        return self.exchanger.launch_during(
            self.produced, lambda piece: poisoned(piece, self.island, outer_step)
        )

    def pace(self, busy_s: float, synced_inside: bool) -> float:
        """Sleep out the rest of the island's target step time (the sleep is part of the compute row,
        as the simulator's compute is the paced step); returns the seconds slept.

        Between syncs the steps are paced against the compute interval's start: step k of the
        interval ends at start + k x target (trace seconds), so a slow step (the first one's warm-up,
        a busy core) is made up by shorter sleeps after it and H steps take H x target, as the
        simulator has them. A step with a sync inside (DDP) pads its own compute to the target."""
        target_s = self.plan.pace_s(self.island)
        if target_s <= 0:
            return 0.0
        if synced_inside:
            sleep_s = max(0.0, target_s - busy_s)
        else:
            if self.recorder.segment_start_s != self.paced_from_s:
                self.paced_from_s, self.paced_steps = self.recorder.segment_start_s, 0
            self.paced_steps += 1
            sleep_s = max(0.0, self.paced_from_s + self.paced_steps * target_s - self.clock.now())
        if sleep_s:
            time.sleep(sleep_s)
        return sleep_s

    def average_inside_island(self, grads: list[torch.Tensor], intra: Summing) -> None:
        flat = flatten(grads)
        intra.all_reduce_sum_(flat)
        unflatten_into(flat / intra.size, grads)

    # ---------------------------------------------------------------- syncs
    def sync_gradients(self, grads: list[torch.Tensor], point: SyncPoint) -> tuple[float, float]:
        """Average the gradient over the islands (blocking), before the inner optimizer steps."""
        self.recorder.end_compute(point.outer_step)
        arrived_s = self.clock.now()
        exchange = self.exchanger.launch(
            poisoned(flatten(grads), self.island, point.outer_step)
        ).result()
        blocked_s, comm_s = self.record_exchanges(
            [Synced(point, exchange, arrived_s, self.clock.now())]
        )
        unflatten_into(exchange.mean, grads)
        self.recorder.start_compute()
        return blocked_s, comm_s

    def sync_during_backward(
        self, grads: list[torch.Tensor], point: SyncPoint
    ) -> tuple[float, float, float]:
        """Average the gradient in buckets during the step's paced backward pass, as PyTorch DDP does
        (``schedule.backward_overlap`` = f): the real backward pass is over, so each bucket's call is
        held until the paced pass would have produced it (``Backward``: over the last f of the step's
        target, which ends the target after its compute began: after the previous step's wait, so the
        previous optimizer step is in it, as the simulator's step holds its optimizer step), while
        this thread sleeps out the compute; then it waits for the last call, the exposed part (a
        ``stall`` row). (blocked s, comm s, paced s)."""
        target_s = self.plan.pace_s(self.island)
        end_s = self.recorder.segment_start_s + target_s
        window_s = self.plan.scenario.schedule.backward_overlap * target_s
        exchange = self.exchanger.launch(
            poisoned(flatten(grads), self.island, point.outer_step),
            backward=Backward(end_s - window_s, end_s),
        )
        sleep_from = self.clock.now()
        self.clock.sleep_until(end_s)
        paced_s = max(0.0, end_s - sleep_from)
        _, blocked_s, comm_s = self.wait_after_backward(grads, point, exchange)
        return blocked_s, comm_s, paced_s

    def sync_while_produced(
        self, grads: list[torch.Tensor], point: SyncPoint, exchange: Future, backward_s: float
    ) -> tuple[float, float]:
        """The backward pass (from ``backward_s``) is over and its compute closes here; wait for the
        calls still in flight, the exposed part (a ``stall`` row), then take the mean before the clip
        and the optimizer step, as DDP's optimizer sees the averaged gradient. The calls' times are
        kept (``backward_calls``). (blocked s, comm s)."""
        synced, blocked_s, comm_s = self.wait_after_backward(grads, point, exchange)
        self.backward_calls.append(
            BackwardCalls(self.step + 1, backward_s, synced.arrived_s, synced.exchange.calls)
        )
        return blocked_s, comm_s

    def wait_after_backward(
        self, grads: list[torch.Tensor], point: SyncPoint, exchange: Future
    ) -> tuple[Synced, float, float]:
        """The step's compute closes here; wait for the exchange during its backward pass, record
        it (the exposed part a ``stall`` row) and put its mean into ``grads``. (synced, blocked s,
        comm s)."""
        self.recorder.end_compute(point.outer_step)
        arrived_s = self.clock.now()
        synced = Synced(point, exchange.result(), arrived_s, self.clock.now())
        blocked_s, comm_s = self.record_exchanges([synced])
        unflatten_into(synced.exchange.mean, grads)
        self.recorder.start_compute()
        return synced, blocked_s, comm_s

    def sync_fragments(self) -> tuple[float, float]:
        """Launch and apply the fragments the schedule puts after this step (``DiLoCo.after_step``);
        (blocked s, comm s)."""
        if self.diloco is None:
            return 0.0, 0.0
        points = self.diloco.points(self.step)
        if not points:
            return 0.0, 0.0
        self.recorder.end_compute(points[0].outer_step)
        blocked_s, comm_s = self.record_exchanges(self.diloco.after_step(self.step))
        self.recorder.start_compute()
        return blocked_s, comm_s

    def record_exchanges(self, performed: list[Synced]) -> tuple[float, float]:
        """Each exchange's comm row (and a wasted row per attempt it abandoned), exclusions, idle and
        stall rows; (blocked s, comm s)."""
        blocked_s = comm_s = 0.0
        for point, exchange, arrived_s, received_s in performed:
            outer_step, fragment = point.outer_step, point.fragment
            for attempt in exchange.abandoned:  # a member died in it: redone among the others
                self.recorder.add(
                    WASTED,
                    attempt.started_s,
                    attempt.ended_s,
                    outer_step,
                    fragment,
                    attempt.sent_bytes,
                )
            self.recorder.add(
                "comm",
                exchange.started_s,
                exchange.done_s,
                outer_step,
                fragment,
                exchange.sent_bytes,
            )
            self.note_exclusions(exchange.verdict, outer_step, fragment)
            if exchange.queued is not None:
                blocked_s += self.recorder.waited_at_syncer(
                    arrived_s, exchange.queued, received_s, outer_step, fragment
                )
            else:
                blocked_s += self.recorder.waited(
                    arrived_s, exchange.started_s, received_s, outer_step, fragment
                )
            comm_s += exchange.done_s - exchange.started_s
        return blocked_s, comm_s

    def note_exclusions(self, verdict: Verdict, outer_step: int, fragment: int) -> None:
        """Log the islands left out of this average; an island whose own delta was not finite also
        drops its inner optimizer state (its moments are poisoned too) and the fragment's
        error-feedback buffer, and restarts from the merge."""
        islands = self.world.members()
        for member, reason in verdict.reasons.items():
            if reason == JOINING:
                continue
            entry = {
                "outer_step": outer_step,
                "fragment": fragment,
                "island": islands[member],
                "reason": reason,
            }
            self.excluded.append(entry)
            if self.reports():
                print(
                    f"outer step {outer_step}: island {islands[member]} excluded from the average ({reason})",
                    flush=True,
                )
        if verdict.reasons.get(islands.index(self.island)) == NOT_FINITE:
            self.optimizer.state.clear()
            if self.diloco is not None:
                self.fragments[fragment].drop_error()

    # ---------------------------------------------------------------- evaluation, checkpoints
    def end_period(self, record: dict[str, Any]) -> None:
        """Evaluate the global model, report, checkpoint; the trace clock is paused meanwhile."""
        self.world.publish_clock(paused=True)
        self.clock.pause()
        record["eval_loss"] = self.world.evaluate(self.evaluate_on)
        self.eval_losses.append((self.step, record["eval_loss"]))
        period = -(-self.step // self.plan.eval_every_steps)
        if self.reports():
            self.report(period, record)
        self.log_metrics(
            record
        )  # written before the checkpoint, so a resume finds every line up to it
        if self.out_dir and self.checkpoint_due(period):
            self.world.save_checkpoint(period, self.out_dir, self.state_dict())
        self.period_records = []
        self.clock.resume_after(self.world.pause_s(self.clock.paused_for_s()))
        self.world.publish_clock()

    @contextlib.contextmanager
    def global_weights(self) -> Iterator[None]:
        """The model holds the global weights inside the block (they differ from the local ones only
        in Streaming DiLoCo, mid-period, or with alpha > 0)."""
        if not self.fragments:
            yield
            return
        saved = [p.detach().clone() for p in self.params]
        with torch.no_grad():
            for fragment in self.fragments:
                for p, g in zip(fragment.params, fragment.global_params):
                    p.copy_(g)
        try:
            yield
        finally:
            unflatten_into(flatten(saved), self.params)

    def reports(self) -> bool:
        """Whether this process prints the console line and writes the metrics."""
        return self.world.reports()

    def evaluate_on(self, world: Group, evaluators: list[int] | None = None) -> float:
        """Mean validation loss of the global model; the batches are shared out over ``evaluators``
        (the members of ``world`` that hold the model; default all)."""
        evaluators = list(range(world.size)) if evaluators is None else evaluators
        totals = torch.zeros(2, dtype=torch.float64, device=self.device)
        mine = (
            self.eval_batches[evaluators.index(world.rank) :: len(evaluators)]
            if world.rank in evaluators
            else []
        )
        with torch.no_grad(), self.global_weights():
            for x, y in mine:
                totals[0] += self.model(x, y).item()
                totals[1] += 1
        kill_point("evaluate", self.island)
        world.all_reduce_sum_(totals)
        return (totals[0] / totals[1]).item()

    def report(self, period: int, record: dict[str, Any]) -> None:
        plan = self.plan
        print(
            f"{plan.algorithm} period {period}/{plan.periods}  step {self.step}/{plan.total_steps}  "
            f"tokens {record['tokens']:,}  train {record['train_loss']:.3f}  eval {record['eval_loss']:.3f}  "
            f"utilisation {100 * self.recorder.utilisation():.1f}%  "
            f"sent/rank {size(self.recorder.sent_bytes())}",
            flush=True,
        )

    def checkpoint_due(self, period: int) -> bool:
        every = self.plan.spec.checkpoint_every
        return (
            self.step == self.plan.total_steps
            or self.stopped()
            or bool(every and period % every == 0)
        )

    def state_dict(self) -> dict[str, Any]:
        return {
            "fingerprint": self.plan.fingerprint(),
            "world_size": self.plan.world_size,
            "rank": self.rank,
            "step": self.step,
            "model": self.model.state_dict(),
            "inner_optimizer": self.optimizer.state_dict(),
            "fragments": [fragment.state_dict() for fragment in self.fragments],
            "diloco": self.diloco.state_dict() if self.diloco else {},
            "sampler": self.sampler.state_dict(),
            "torch_rng": torch.get_rng_state(),
            "cuda_rng": checkpoint.cuda_rng_state(),
            "clock_s": self.clock.now(),
            "trace_rows": [list(row) for row in self.recorder.rows],
            "eval_losses": [list(pair) for pair in self.eval_losses],
            "excluded": self.excluded,
            **self.world.state_dict(),
        }

    def load_state(self, state: dict[str, Any]) -> None:
        self.step = state["step"]
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["inner_optimizer"])
        for fragment, saved in zip(self.fragments, state["fragments"]):
            fragment.load_state_dict(saved)
        if self.diloco:
            self.diloco.load_state_dict(state.get("diloco", {}))
        self.sampler.load_state_dict(state["sampler"])
        checkpoint.restore_rng(state)
        self.eval_losses = [(int(step), float(loss)) for step, loss in state["eval_losses"]]
        self.excluded = list(state["excluded"])
        self.world.load_state(state)

    # ---------------------------------------------------------------- the end
    def finish(self) -> dict[str, Any] | None:
        """Stop the exchange thread, gather the trace; the reporting process writes the outputs and
        returns the summary."""
        self.exchanger.close()
        if self.metrics:
            self.metrics.close()
            self.metrics = None
        return self.world.finish(
            Ending(self.step, self.recorder.rows, self.run_info(), self.out_dir)
        )

    def run_info(self) -> dict[str, Any]:
        plan = self.plan
        return {
            "scenario": plan.scenario.name,
            "algorithm": plan.algorithm,
            "islands": plan.islands,
            "ranks_per_island": plan.ranks_per_island,
            "world_size": plan.world_size,
            "parameters": sum(p.numel() for p in self.params),
            "bits": plan.scenario.schedule.bits,
            "steps": self.step,
            "tokens": self.step * plan.tokens_per_step,
            "final_eval_loss": self.eval_losses[-1][1] if self.eval_losses else None,
            "eval_losses": self.eval_losses,
            "device": str(self.device),
            "mean_step_compute_s": self.recorder.seconds("compute") / self.step
            if self.step
            else 0.0,
            "excluded_contributions": self.excluded,
            **(
                {"backward_buckets": measured_buckets(self.backward_calls)}
                if self.backward_calls
                else {}
            ),
        }


def present(grads: list[torch.Tensor | None]) -> list[torch.Tensor]:
    """The gradients of a backward pass that are averaged or exchanged, every one there (flattening
    them needs each): the model's loss depends on every parameter."""
    kept = [grad for grad in grads if grad is not None]
    assert len(kept) == len(grads), "a parameter has no gradient after the backward pass"
    return kept
