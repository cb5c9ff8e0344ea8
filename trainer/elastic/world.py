"""DiLoCo whose islands may die and join mid-run without stopping the others (``trainer.elastic``).

One process per island, or an island of several ranks led by its local rank 0, which alone takes
part in the membership and tells the others what it decided (``island.py``, ``shared``). Every
cross-island collective goes through ``membership.Membership.run``: if an island dies (SIGKILL at
any moment) the survivors finish their interval, their exchange fails or is voted down, they wait
out the detection timeout, re-form the group among themselves and redo the exchange: training goes on with a smaller M, the dead island's work since its last applied sync is
lost. A new or returning island asks to join and at once for the global state, which the members'
leader sends in the background while everyone trains on (``joining.py``); from the next outer
boundary the joiner takes part in the exchanges, contributing nothing and keeping the averages, and
once its download is in it replays them onto the downloaded state and trains. Its trace shows the
wait (``idle``), the download (``comm``, fragment -1, the bytes received) and its exchanges, as the
simulator's does. (A member without state at the start of a resumed run adopts it from the member
with the most progress before anyone trains: ``sync_state``.)

Outputs (written by member 0 of the last epoch): the usual files, with ``lost_compute_s``, ``leaves``
and ``joins`` measured in ``summary.json``, and ``churn.json`` (every leave with its lost compute,
every join with its join time, every epoch's members). Each island's trace rows also go to
``islands/island-I.rows.jsonl`` as they happen, so a dead island's rows reach the trace;
``metrics.jsonl`` is written by member 0 of the current epoch, whoever that is. The churn history is
part of every checkpoint and goes on in a resumed run.

The run's clock (``runtime.store.run_time_s``) is published with the trace clock's pauses: a joiner's
request and the launcher's events are timed on the same clock as the trace.
"""

from __future__ import annotations

import io
import json
import math
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, TypeVar

import torch

from islands.errors import UserError
from islands.io import write_text
from islands.trace import NO_FRAGMENT

from ..core import checkpoint
from ..core.checkpoint import PeerFailed
from ..core.comm import broadcast_bytes
from ..core.group import Group
from ..config import RunPlan
from .rows import all_rows, join_seconds, lost_rows, open_rows_sink
from .transport import ElasticTransport
from ..core.faults import killable
from ..runtime.island import IslandRanks
from .joining import Fetcher, Server
from .membership import History, LeftOut, Membership
from ..runtime.store import publish_run_clock, run_time_s
from ..runtime.paced import paced_from_environment
from ..core.sync import Exchanger
from ..core.tracing import build_summary, write_outputs
from ..core.outer import Fragment
from ..core.tracing import Recorder
from ..core.world import Ending, EvaluateOn, Groups

if TYPE_CHECKING:
    from ..core.loop import Trainer

T = TypeVar("T")


class RunOver(Exception):
    """A joiner arrived after the last outer boundary: nothing left to train."""


# What a leader tells its followers instead of a value, and what they raise then: the island was left
# out or the run is over (they go the leader's way), or the leader refused the run with one line
# (they exit 2 quietly).
OUTCOMES: dict[type[Exception], type[Exception]] = {LeftOut: LeftOut, RunOver: RunOver, UserError: PeerFailed}


class ElasticWorld:
    """The world (``world.World``) of one rank of an elastic run: its island's membership, and the
    island's group when it has several ranks (``ranks``, ``island.py``; None with one).

    Every decision with the other islands goes through the membership: the exchanges (over an
    ``ElasticTransport``: votes, admissions, the leader's word to its followers), the start (there
    is no world group: the store agrees, and an island absent from the checkpoint takes the state
    from a live one), joining and rejoining when left out, serving downloads, evaluation, the
    checkpoint's commit and the end (among the members that hold the state; the run's clock for
    joiners; the dead islands' rows). The churn history goes into every checkpoint."""

    def __init__(self, plan: RunPlan, rank: int, membership: Membership, join_at_s: float | None = None,
                 ranks: IslandRanks | None = None):
        self.plan = plan
        self.rank = rank
        self.island = rank // plan.ranks_per_island
        self.membership = membership
        self.join_at_s = join_at_s
        self.has_state = join_at_s is None
        self.ranks = ranks
        self.groups = Groups(world=None, cross=None, intra_grad=ranks)
        self.resumed_s = 0.0
        self.fetcher: Fetcher | None = None

    def attach(self, trainer: Trainer) -> None:
        """The trainer this world drives (its start, a joiner's passive phase, the state it serves and
        adopts); called once the trainer is built. The one world left that holds its trainer."""
        self.trainer = trainer

    # ---------------------------------------------------------------- the start
    def share_initial_weights(self, model: torch.nn.Module) -> None:
        """Nothing to share: every island builds the model from the same seed (joiners download)."""

    def holds_checkpoint(self, resume_dir: Path) -> bool:
        """Whether all of the island's ranks' files are there; an island absent at that checkpoint (it
        died while writing) gets the state from a live one."""
        folder = checkpoint.latest_dir(resume_dir)
        holds = all(checkpoint.rank_file(folder, rank).is_file() for rank in self.ranks_of(self.island))
        self.has_state = holds and self.join_at_s is None
        return holds

    def start_s(self, state: dict | None) -> float:
        """Time 0 is read at the start barrier in ``run`` (a joiner takes the peer's clock)."""
        self.resumed_s = state["clock_s"] if state else 0.0
        return self.resumed_s

    def transport(self, exchanger: Exchanger, recorder: Recorder, fragments: list[Fragment]) -> ElasticTransport:
        """The exchanges through the membership; the exchanger's cross-island group is replaced at every
        new epoch (``installed``), and the membership times its epochs on the trace clock."""
        self.exchanger = exchanger
        self.membership.on_install = self.installed
        self.membership.now_s = recorder.clock.now
        self.server = Server(self.membership, self.state_payload)
        return ElasticTransport(self.membership, exchanger, self.shared, self.island)

    def enter(self) -> None:
        """Entering is part of ``run`` (the start barrier, or joining), which an island left out repeats."""

    def rows_sink(self) -> None:
        """The rows file opens in ``run``, once the start has shown that every island passed its checks."""

    def agree_on_resume(self, error: str | None, state: dict[str, Any] | None) -> list[str | None]:
        """Through the store (there is no group yet): every rank of the islands started with the run
        publishes its verdict and the epoch its history ends at; all read all, so they also agree on
        the first epoch of this run. A joiner only answers for itself: it takes its state from a live
        island."""
        if self.join_at_s is not None:
            return [error]
        membership = self.membership
        epochs = state.get("churn", {}).get("epochs", []) if state else []
        verdict = {"error": error, "next_epoch": epochs[-1]["epoch"] + 1 if epochs else 0}
        membership.store.set(membership.key("resume", "verdict", self.rank), json.dumps(verdict))
        verdicts = [json.loads(membership.get(membership.key("resume", "verdict", rank)))
                    for island in self.plan.initial_members() for rank in self.ranks_of(island)]
        membership.first_epoch = max(verdict["next_epoch"] for verdict in verdicts)
        return [verdict["error"] for verdict in verdicts]

    def ranks_of(self, island: int) -> range:
        return range(island * self.plan.ranks_per_island, (island + 1) * self.plan.ranks_per_island)

    def installed(self) -> None:
        group = self.membership.group
        cross = paced_from_environment(killable(group, self.island), self.membership.members)
        self.groups = Groups(world=group, cross=cross, intra_grad=self.ranks)
        self.exchanger.cross = cross

    def members(self) -> list[int]:
        return self.membership.members

    def reports(self) -> bool:
        """The leader (the lowest member holding the state) prints and writes metrics."""
        return self.membership.group is not None and self.membership.leader == self.island

    @property
    def follows(self) -> bool:
        """Whether this rank follows its island's leader (local rank > 0) instead of taking part in
        the membership."""
        return self.ranks is not None and not self.ranks.leads

    def shared(self, decide: Callable[[], T]) -> T:
        """What the island's leader decides with the other islands, on every rank of the island: the
        leader runs ``decide()`` and tells its followers the outcome: a value, or which of
        ``OUTCOMES`` it raised and its message, which they raise in turn; a follower only hears it.
        Calls nested in the leader's ``decide`` (a joiner's passive boundaries) are the leader's alone."""
        ranks = self.ranks
        if ranks is None or ranks.speaking:
            return decide()
        if not ranks.leads:
            outcome, value = ranks.hear()
            if outcome is not None:
                raise list(OUTCOMES.values())[outcome](value)
            return value
        ranks.speaking = True
        try:
            value = decide()
        except tuple(OUTCOMES) as raised:
            ranks.tell((next(i for i, cause in enumerate(OUTCOMES) if isinstance(raised, cause)), str(raised)))
            raise
        finally:
            ranks.speaking = False
        ranks.tell((None, value))
        return value

    # ---------------------------------------------------------------- the loop
    def run(self, train: Callable[[], None]) -> None:
        """Start (or join), then train; an island left out of a new epoch (even while it was joining)
        joins again, without state."""
        while True:
            try:
                self.start_or_join()
                train()
                return
            except LeftOut as left_out:
                if not self.follows:
                    print(left_out, flush=True)
                self.has_state, self.join_at_s = False, 0.0

    def start_or_join(self) -> None:
        """Join, or form the first epoch (the leader); its followers then take the state the leader
        adopted, if it adopted one, and its clock."""
        clock_s, adopted = self.shared(self.join if self.join_at_s is not None else self.form_first_epoch)
        if self.follows:
            if adopted is not None:
                self.adopt(torch.load(io.BytesIO(adopted), weights_only=True))
            self.trainer.clock.restart(clock_s)
            self.trainer.recorder.start_compute()

    def form_first_epoch(self) -> tuple[float, bytes | None]:
        """Form the first epoch; the rows file opens only then, once the run's start has shown that
        every island present passed its checks. Returns the clock and the state adopted (or None)."""
        self.membership.start(self.plan.initial_members())
        self.open_rows_sink(append=False)
        adopted = self.membership.run(self.sync_state)
        if adopted is not None:
            self.adopt(torch.load(io.BytesIO(adopted), weights_only=True))
        self.membership.stateful = set(self.membership.members)
        self.trainer.clock.restart(self.resumed_s)
        self.trainer.recorder.start_compute()
        self.publish_clock()
        return self.resumed_s, adopted

    def join(self) -> tuple[float, bytes | None]:
        """Wait for the join time, ask to join and for the state (downloaded in the background), take
        part in the boundaries as a passive member until the state is in, then train. Returns the
        clock and the state the island's followers adopt (None: it has none)."""
        trainer = self.trainer
        self.open_rows_sink(append=True)
        requested_s = self.wait_for_run_time(self.join_at_s)
        trainer.clock.restart(requested_s)
        self.has_state = False
        self.fetcher = Fetcher(self.membership, trainer.clock.now)
        self.fetcher.start()
        step = self.membership.request_join(requested_s)
        if step is None:
            raise RunOver(f"island {self.island}: the run ended before it could join")
        trainer.recorder.add("idle", requested_s, trainer.clock.now(), self.plan.outer_step(step))
        self.follow(step)
        trainer.recorder.start_compute()
        return trainer.clock.now(), self.state_payload() if self.ranks else None

    def follow(self, step: int) -> None:
        """Passive member from inner step ``step`` (where it was admitted) on: every exchange of the
        schedule with a zero contribution (the averages kept, ``DiLoCo.kept``), every evaluation and
        checkpoint; at the first outer boundary after its download is in, adopt it and replay the
        averages it missed."""
        trainer, diloco = self.trainer, self.trainer.diloco
        diloco.kept = {}
        diloco.transport.admitted_at = step
        for sync_step in diloco.sync_steps(step):
            trainer.step = sync_step
            trainer.record_exchanges(diloco.after_step(sync_step))
            if sync_step % self.plan.eval_every_steps == 0 or sync_step == self.plan.total_steps:
                trainer.recorder.start_compute()
                trainer.end_period({"step": sync_step, "outer_step": self.plan.outer_step(sync_step - 1),
                                    "train_loss": math.nan, "tokens": sync_step * self.plan.tokens_per_step})
                if self.fetcher.done.is_set():
                    self.adopt_download()
                    return

    def adopt_download(self) -> None:
        """The downloaded snapshot, then every kept average of the syncs after it, in order."""
        trainer = self.trainer
        download = self.fragment_download()
        trainer.diloco.replay_kept()
        trainer.diloco.transport.admitted_at = None
        trainer.period_records = []
        self.has_state = True
        trainer.recorder.add("comm", download.started_s, download.done_s, self.plan.outer_step(trainer.step - 1),
                             NO_FRAGMENT, len(download.data))

    def fragment_download(self) -> Any:
        """Load the downloaded snapshot's fragments (global weights, outer optimizer, syncs applied)."""
        download = self.fetcher.result
        state = torch.load(io.BytesIO(download.data), weights_only=True)
        for fragment, saved in zip(self.trainer.fragments, state["fragments"]):
            fragment.load_state_dict(saved)
        return download

    def wait_for_run_time(self, at_s: float) -> float:
        """Sleep until the run's clock (published in the store) reads ``at_s``; returns the reading."""
        while True:
            now_s = run_time_s(self.membership.store)
            if now_s is not None and now_s >= at_s:
                return now_s
            time.sleep(0.05)

    def between_steps(self) -> None:
        """Publish progress; the leader serves a waiting download while no sync is in flight."""
        self.membership.progress.now_s = self.trainer.clock.now()
        if self.membership.leader == self.island and self.quiet_until_admission():
            self.server.poll()

    def quiet_until_admission(self) -> bool:
        """Whether a snapshot taken now holds every average applied before the next admission (the
        next launch of fragment 0): no exchange in flight and none due before it. Always under DiLoCo;
        under Streaming DiLoCo from an outer boundary to the next period's first launch."""
        diloco, now = self.trainer.diloco, self.trainer.step
        if diloco.pending:
            return False
        admission = min((step for step, points in diloco.launches.items()
                         if step > now and any(point.fragment == 0 for point in points)), default=None)
        return admission is None or not any(now < step < admission for step in diloco.applies)

    # ---------------------------------------------------------------- state transfer
    def sync_state(self, group: Group) -> bytes | None:
        """Members without the current state (a resumed run's islands that have no checkpoint file)
        get it from the member that has the most progress, before anyone trains: the state this
        member must adopt, or None."""
        mine = self.trainer.step if self.has_state else -1
        progress = [int(t.item()) for t in group.all_gather(torch.tensor([mine], dtype=torch.int64))]
        best = max(progress)
        if best < 0:
            raise UserError("no live island holds the global weights; resume from the last checkpoint (--resume)")
        if min(progress) == best:
            return None
        src = progress.index(best)
        data = broadcast_bytes(group, self.state_payload() if group.rank == src else None, src, self.island)
        return data if mine < best else None

    def state_payload(self) -> bytes:
        history = self.membership.history
        trainer = self.trainer
        state = {"step": trainer.step, "fragments": [f.state_dict() for f in trainer.fragments],
                 "clock_s": trainer.clock.now(), "admitted_joins": self.membership.admitted_joins,
                 "leaves": history.leaves, "joins": history.joins, "epochs": history.epochs}
        buffer = io.BytesIO()
        torch.save(state, buffer)
        return buffer.getvalue()

    def adopt(self, state: dict[str, Any]) -> None:
        """A resumed run's member without a checkpoint file takes the global state of the member with
        the most progress (and its clock): local weights = global, a fresh inner optimizer."""
        trainer = self.trainer
        trainer.step = state["step"]
        for fragment, saved in zip(trainer.fragments, state["fragments"]):
            fragment.load_state_dict(saved)
        trainer.diloco.restart_from_global()
        trainer.period_records = []
        self.membership.admitted_joins = state["admitted_joins"]
        self.membership.history = History(state["leaves"], state["joins"], self.membership.history.epochs)
        self.resumed_s = state["clock_s"]
        self.has_state = True

    # ---------------------------------------------------------------- collectives of the period end
    def evaluate(self, evaluate_on: EvaluateOn) -> float:
        return self.shared(lambda: self.membership.run(lambda group: self.evaluate_holders(group, evaluate_on)))

    def evaluate_holders(self, group: Group, evaluate_on: EvaluateOn) -> float:
        """Evaluation shared out over the members that hold the state; a passive joiner, which has
        none, takes the members' churn history here instead."""
        history = vars(self.membership.history) if self.has_state else None
        views = group.all_gather_object(history)
        if not self.has_state:
            self.membership.adopt_history(list(zip(self.membership.members, views)))
        holders = [member for member, view in enumerate(views) if view is not None]
        return evaluate_on(group, holders)

    def publish_clock(self, paused: bool = False) -> None:
        """The run's clock for the launcher and joiners: (wall time, trace seconds) now, and whether
        the trace clock is about to stand still (evaluation, checkpoint)."""
        if self.reports():
            publish_run_clock(self.membership.store, self.trainer.clock.now(), paused)

    def state_dict(self) -> dict[str, Any]:
        history = self.membership.history
        return {"churn": {"leaves": history.leaves, "joins": history.joins, "epochs": history.epochs}}

    def load_state(self, state: dict[str, Any]) -> None:
        churn = state.get("churn", {})
        self.membership.history = History(list(churn.get("leaves", [])), list(churn.get("joins", [])),
                                          list(churn.get("epochs", [])))

    def save_checkpoint(self, period: int, out_dir: Path, state: dict[str, Any]) -> None:
        """This rank's file; ``LATEST`` moves once every rank of every member of the epoch has written."""
        folder = checkpoint.period_dir(out_dir, period)
        if self.has_state:  # a passive joiner has nothing to save yet; a resume gives it the state
            checkpoint.write_rank_file(folder, self.rank, self.island, state)
        if self.ranks is not None and not self.ranks.speaking:
            self.ranks.barrier()  # the island's files are all written
        self.shared(lambda: self.commit_checkpoint(out_dir, folder))
        checkpoint.remove_older(out_dir / checkpoint.FOLDER, folder.name, self.rank)

    def commit_checkpoint(self, out_dir: Path, folder: Path) -> None:
        self.membership.run(lambda group: group.barrier())
        if self.reports():
            write_text(out_dir / checkpoint.FOLDER / checkpoint.LATEST, folder.name + "\n")
        self.membership.run(lambda group: group.barrier())

    # ---------------------------------------------------------------- the end
    def open_rows_sink(self, append: bool) -> None:
        if self.trainer.out_dir:
            open_rows_sink(self.trainer.recorder, self.trainer.out_dir, self.island, append)

    def finish(self, ending: Ending) -> dict[str, Any] | None:
        """The summary, on the rank that wrote the outputs (None elsewhere). An island ends as one: its
        followers, whose rows are their leader's, wait for the leader's word that it is done, so that a
        follower dying on its way out (by a signal: the launcher then kills the whole island) cannot take
        the leader down before it wrote the outputs."""
        summary = self.shared(lambda: self.gather_and_write(ending))
        return None if self.follows else summary

    def gather_and_write(self, ending: Ending) -> dict[str, Any] | None:
        """The live members gather their rows; the leader adds every island's rows file and the lost
        compute of the departed, and writes the outputs with the churn."""
        trainer, out_dir = self.trainer, ending.out_dir
        gathered = self.membership.run(lambda group: group.all_gather_object((self.island, ending.rows)))
        leader = self.reports()
        self.membership.close()
        if trainer.recorder.sink:
            trainer.recorder.sink.close()
        if not leader:
            return None
        self.membership.store.set(self.membership.key("run", "finished"), "1")
        history = self.membership.history
        rows = all_rows(out_dir, self.plan.islands, dict(gathered))
        rows += lost_rows(history.leaves, rows, self.plan.workers)
        joins = join_seconds(history.joins, rows)
        churn = {"lost_compute_s": sum(leave["lost_compute_s"] for leave in history.leaves),
                 "leaves": len(history.leaves), "joins": len(joins)}
        trace, summary = build_summary(self.plan, ending.step, rows, churn)
        if out_dir:
            write_outputs(out_dir, trace, {
                "summary": summary, "run": ending.run_info,
                "churn": {"leaves": history.leaves, "joins": joins, "epochs": history.epochs}})
        return summary
