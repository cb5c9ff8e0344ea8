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

The run's clock (``membership.run_time_s``) is published with the trace clock's pauses: a joiner's
request and the launcher's events are timed on the same clock as the trace.
"""

from __future__ import annotations

import io
import json
import math
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any, Callable, TypeVar

import torch

from islands.errors import UserError
from islands.io import write_text
from islands.schedules import SyncPoint
from islands.trace import NO_FRAGMENT, Row

from . import checkpoint
from .checkpoint import PeerFailed
from .comm import Group, broadcast_bytes
from .config import RunPlan
from .faults import kill_point, killable
from .island import IslandRanks
from .joining import Fetcher, Server
from .loop import Groups, Trainer, shapes_of
from .membership import History, LeftOut, Membership, run_time_s
from .paced import paced_from_environment
from .sync import Exchange, Exchanger
from .tracing import build_summary, write_outputs

ROWS_FOLDER = "islands"
T = TypeVar("T")


class RunOver(Exception):
    """A joiner arrived after the last outer boundary: nothing left to train."""


# What a leader tells its followers instead of a value, and what they raise then: the island was left
# out or the run is over (they go the leader's way), or the leader refused the run with one line
# (they exit 2 quietly).
OUTCOMES: dict[type[Exception], type[Exception]] = {LeftOut: LeftOut, RunOver: RunOver, UserError: PeerFailed}


def join_seconds(joins: list[dict[str, Any]], rows: list[Row]) -> list[dict[str, Any]]:
    """Each join with ``join_s``: from the join request to the island's first compute after it."""
    measured = []
    for join in joins:
        starts = [row.time_start_s for row in rows if row.worker == join["island"] and row.kind == "compute"
                  and row.time_start_s >= join["requested_s"] and row.time_start_s >= join["admitted_s"]]
        measured.append({**join, "join_s": min(starts) - join["requested_s"] if starts else None})
    return measured


class ElasticTrainer(Trainer):
    """A ``Trainer`` (one rank of one island) whose collectives survive members that die or join.
    ``ranks``: the island's group when it has several ranks (``island.py``); None with one.

    The exchanges go through ``diloco.DiLoCo`` as in a plain run, over an ``ElasticTransport``
    (the membership's votes, admissions, the leader's word to its followers). What it still
    overrides, and why: ``share_initial_weights``, ``agreed_start_s``, ``agree_on_resume`` and
    ``load_checkpoint`` (there is no world group at the start: the store agrees, and an island
    absent from the checkpoint takes the state from a live one); ``run`` and ``run_step`` (join or
    form the first epoch, rejoin when left out; serve downloads, publish progress); ``cross_islands``
    and ``reports`` (the epoch's members and leader, not fixed ranks); ``evaluate``, ``end_period``,
    ``save_checkpoint`` and ``finish`` (collectives through the membership, among the members that
    hold the state; the run's clock for joiners; the dead islands' rows); ``state_dict`` and
    ``load_state`` (the churn history)."""

    def __init__(self, plan: RunPlan, rank: int, membership: Membership, device: torch.device | str,
                 out_dir: Path | None, resume_dir: Path | None, join_at_s: float | None = None,
                 ranks: IslandRanks | None = None):
        self.membership = membership
        self.join_at_s = join_at_s
        self.has_state = join_at_s is None
        self.ranks = ranks
        super().__init__(plan, rank, Groups(world=None, cross=None, intra_grad=ranks), device, out_dir, resume_dir,
                         transport=lambda exchanger: ElasticTransport(membership, exchanger, self.shared, self.island))
        membership.on_install = self.installed
        membership.now_s = self.clock.now
        self.server = Server(membership, self.state_payload)
        self.fetcher: Fetcher | None = None

    # ---------------------------------------------------------------- the parts that differ
    def share_initial_weights(self) -> None:
        """Nothing to share: every island builds the model from the same seed (joiners download)."""

    def load_checkpoint(self, resume_dir: Path) -> dict[str, Any] | None:
        """This rank's file; an island absent at that checkpoint (any of its ranks' files missing: it
        died while writing) gets the state from a live one."""
        folder = checkpoint.latest_dir(resume_dir)
        if not all(checkpoint.rank_file(folder, rank).is_file() for rank in self.ranks_of(self.island)):
            self.has_state = False
            return None
        self.has_state = self.join_at_s is None
        return checkpoint.load(resume_dir, self.rank, self.plan.world_size, self.plan.fingerprint(),
                               shapes_of(self.model))

    def agreed_start_s(self, state: dict | None) -> float:
        """Time 0 is read at the start barrier in ``run`` (a joiner takes the peer's clock)."""
        self.resumed_s = state["clock_s"] if state else 0.0
        return self.resumed_s

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

    def cross_islands(self) -> list[int]:
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
    def run(self, stop_after: int | None = None) -> None:
        """Start (or join), then train; an island left out of a new epoch (even while it was joining)
        joins again, without state."""
        while True:
            try:
                self.enter()
                super().run(stop_after)
                return
            except LeftOut as left_out:
                if not self.follows:
                    print(left_out, flush=True)
                self.has_state, self.join_at_s = False, 0.0

    def enter(self) -> None:
        """Join, or form the first epoch (the leader); its followers then take the state the leader
        adopted, if it adopted one, and its clock."""
        clock_s, adopted = self.shared(self.join if self.join_at_s is not None else self.form_first_epoch)
        if self.follows:
            if adopted is not None:
                self.adopt(torch.load(io.BytesIO(adopted), weights_only=True))
            self.clock.restart(clock_s)
            self.recorder.start_compute()

    def form_first_epoch(self) -> tuple[float, bytes | None]:
        """Form the first epoch; the rows file opens only then, once the run's start has shown that
        every island present passed its checks. Returns the clock and the state adopted (or None)."""
        self.membership.start(self.plan.initial_members())
        self.open_rows_sink(append=False)
        adopted = self.membership.run(self.sync_state)
        if adopted is not None:
            self.adopt(torch.load(io.BytesIO(adopted), weights_only=True))
        self.membership.stateful = set(self.membership.members)
        self.clock.restart(self.resumed_s)
        self.recorder.start_compute()
        self.publish_clock()
        return self.resumed_s, adopted

    def join(self) -> tuple[float, bytes | None]:
        """Wait for the join time, ask to join and for the state (downloaded in the background), take
        part in the boundaries as a passive member until the state is in, then train. Returns the
        clock and the state the island's followers adopt (None: it has none)."""
        self.open_rows_sink(append=True)
        requested_s = self.wait_for_run_time(self.join_at_s)
        self.clock.restart(requested_s)
        self.has_state = False
        self.fetcher = Fetcher(self.membership, self.clock.now)
        self.fetcher.start()
        step = self.membership.request_join(requested_s)
        if step is None:
            raise RunOver(f"island {self.island}: the run ended before it could join")
        self.recorder.add("idle", requested_s, self.clock.now(), self.plan.outer_step(step))
        self.follow(step)
        self.recorder.start_compute()
        return self.clock.now(), self.state_payload() if self.ranks else None

    def follow(self, step: int) -> None:
        """Passive member from inner step ``step`` (where it was admitted) on: every exchange of the
        schedule with a zero contribution (the averages kept, ``DiLoCo.kept``), every evaluation and
        checkpoint; at the first outer boundary after its download is in, adopt it and replay the
        averages it missed."""
        self.diloco.kept = {}
        self.diloco.transport.admitted_at = step
        for sync_step in self.diloco.sync_steps(step):
            self.step = sync_step
            self.record_exchanges(self.diloco.after_step(sync_step))
            if sync_step % self.plan.eval_every_steps == 0 or sync_step == self.plan.total_steps:
                self.recorder.start_compute()
                self.end_period({"step": sync_step, "outer_step": self.plan.outer_step(sync_step - 1),
                                 "train_loss": math.nan, "tokens": sync_step * self.plan.tokens_per_step})
                if self.fetcher.done.is_set():
                    self.adopt_download()
                    return

    def adopt_download(self) -> None:
        """The downloaded snapshot, then every kept average of the syncs after it, in order."""
        download = self.fragment_download()
        self.diloco.replay_kept()
        self.diloco.transport.admitted_at = None
        self.period_records = []
        self.has_state = True
        self.recorder.add("comm", download.started_s, download.done_s, self.plan.outer_step(self.step - 1),
                          NO_FRAGMENT, len(download.data))

    def fragment_download(self) -> Any:
        """Load the downloaded snapshot's fragments (global weights, outer optimizer, syncs applied)."""
        download = self.fetcher.result
        state = torch.load(io.BytesIO(download.data), weights_only=True)
        for fragment, saved in zip(self.fragments, state["fragments"]):
            fragment.load_state_dict(saved)
        return download

    def wait_for_run_time(self, at_s: float) -> float:
        """Sleep until the run's clock (published in the store) reads ``at_s``; returns the reading."""
        while True:
            now_s = run_time_s(self.membership.store)
            if now_s is not None and now_s >= at_s:
                return now_s
            time.sleep(0.05)

    def run_step(self) -> None:
        if self.membership.leader == self.island and self.quiet_until_admission():
            self.server.poll()
        super().run_step()
        self.membership.progress.now_s = self.clock.now()

    def quiet_until_admission(self) -> bool:
        """Whether a snapshot taken now holds every average applied before the next admission (the
        next launch of fragment 0): no exchange in flight and none due before it. Always under DiLoCo;
        under Streaming DiLoCo from an outer boundary to the next period's first launch."""
        diloco = self.diloco
        if diloco.pending:
            return False
        admission = min((step for step, points in diloco.launches.items()
                         if step > self.step and any(point.fragment == 0 for point in points)), default=None)
        return admission is None or not any(self.step < step < admission for step in diloco.applies)

    # ---------------------------------------------------------------- state transfer
    def sync_state(self, group: Group) -> bytes | None:
        """Members without the current state (a resumed run's islands that have no checkpoint file)
        get it from the member that has the most progress, before anyone trains: the state this
        member must adopt, or None."""
        mine = self.step if self.has_state else -1
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
        state = {"step": self.step, "fragments": [f.state_dict() for f in self.fragments],
                 "clock_s": self.clock.now(), "admitted_joins": self.membership.admitted_joins,
                 "leaves": history.leaves, "joins": history.joins, "epochs": history.epochs}
        buffer = io.BytesIO()
        torch.save(state, buffer)
        return buffer.getvalue()

    def adopt(self, state: dict[str, Any]) -> None:
        """A resumed run's member without a checkpoint file takes the global state of the member with
        the most progress (and its clock): local weights = global, a fresh inner optimizer."""
        self.step = state["step"]
        for fragment, saved in zip(self.fragments, state["fragments"]):
            fragment.load_state_dict(saved)
        self.diloco.restart_from_global()
        self.period_records = []
        self.membership.admitted_joins = state["admitted_joins"]
        self.membership.history = History(state["leaves"], state["joins"], self.membership.history.epochs)
        self.resumed_s = state["clock_s"]
        self.has_state = True

    # ---------------------------------------------------------------- collectives of the period end
    def evaluate(self) -> float:
        return self.shared(lambda: self.membership.run(self.evaluate_holders))

    def evaluate_holders(self, group: Group) -> float:
        """Evaluation shared out over the members that hold the state; a passive joiner, which has
        none, takes the members' churn history here instead."""
        history = vars(self.membership.history) if self.has_state else None
        views = group.all_gather_object(history)
        if not self.has_state:
            self.membership.adopt_history(list(zip(self.membership.members, views)))
        holders = [member for member, view in enumerate(views) if view is not None]
        return self.evaluate_on(group, holders)

    def end_period(self, record: dict[str, Any]) -> None:
        self.publish_clock(paused=True)
        super().end_period(record)
        self.publish_clock()

    def publish_clock(self, paused: bool = False) -> None:
        """The run's clock for the launcher and joiners: (wall time, trace seconds) now, and whether
        the trace clock is about to stand still (evaluation, checkpoint)."""
        if self.reports():
            self.membership.store.set(self.membership.key("run", "clock"), json.dumps(
                {"wall": time.time(), "trace_s": self.clock.now(), "paused": paused}))

    def state_dict(self) -> dict[str, Any]:
        history = self.membership.history
        return {**super().state_dict(), "churn": {"leaves": history.leaves, "joins": history.joins,
                                                  "epochs": history.epochs}}

    def load_state(self, state: dict[str, Any]) -> None:
        super().load_state(state)
        churn = state.get("churn", {})
        self.membership.history = History(list(churn.get("leaves", [])), list(churn.get("joins", [])),
                                          list(churn.get("epochs", [])))

    def save_checkpoint(self, period: int) -> None:
        """This rank's file; ``LATEST`` moves once every rank of every member of the epoch has written."""
        folder = checkpoint.period_dir(self.out_dir, period)
        if self.has_state:  # a passive joiner has nothing to save yet; a resume gives it the state
            checkpoint.write_rank_file(folder, self.rank, self.island, self.state_dict())
        if self.ranks is not None and not self.ranks.speaking:
            self.ranks.barrier()  # the island's files are all written
        self.shared(lambda: self.commit_checkpoint(folder))
        checkpoint.remove_older(self.out_dir / checkpoint.FOLDER, folder.name, self.rank)

    def commit_checkpoint(self, folder: Path) -> None:
        self.membership.run(lambda group: group.barrier())
        if self.reports():
            write_text(self.out_dir / checkpoint.FOLDER / checkpoint.LATEST, folder.name + "\n")
        self.membership.run(lambda group: group.barrier())

    # ---------------------------------------------------------------- the end
    def open_rows_sink(self, append: bool) -> None:
        if not self.out_dir or self.recorder.sink:
            return
        path = rows_path(self.out_dir, self.island)
        path.parent.mkdir(parents=True, exist_ok=True)
        self.recorder.sink = open(path, "a" if append else "w", encoding="utf-8")
        if not append:
            for row in self.recorder.rows:
                self.recorder.sink.write(json.dumps(row) + "\n")

    def finish(self) -> dict[str, Any] | None:
        self.exchanger.close()
        if self.metrics:
            self.metrics.close()
            self.metrics = None
        if self.follows:  # its leader's rows are the island's
            return None
        gathered = self.membership.run(lambda group: group.all_gather_object((self.island, self.recorder.rows)))
        leader = self.reports()
        self.membership.close()
        if self.recorder.sink:
            self.recorder.sink.close()
        if not leader:
            return None
        self.membership.store.set(self.membership.key("run", "finished"), "1")
        rows = self.all_rows(dict(gathered))
        rows += self.lost_rows(rows)
        history = self.membership.history
        joins = join_seconds(history.joins, rows)
        churn = {"lost_compute_s": sum(leave["lost_compute_s"] for leave in history.leaves),
                 "leaves": len(history.leaves), "joins": len(joins)}
        trace, summary = build_summary(self.plan, self.step, rows, churn)
        if self.out_dir:
            write_outputs(self.out_dir, trace, {
                "summary": summary, "run": self.run_info(),
                "churn": {"leaves": history.leaves, "joins": joins, "epochs": history.epochs}})
        return summary

    def all_rows(self, gathered: dict[int, list[Row]]) -> list[Row]:
        """Every island's rows: from its rows file when there is one (it outlives the island), else
        as gathered from the live members."""
        rows: list[Row] = []
        for island in range(self.plan.islands):
            path = rows_path(self.out_dir, island) if self.out_dir else None
            if path and path.is_file():
                rows.extend(Row(*json.loads(line)) for line in path.read_text(encoding="utf-8").splitlines())
            else:
                rows.extend(Row(*row) for row in gathered.get(island, []))
        return rows

    def lost_rows(self, rows: list[Row]) -> list[Row]:
        """The departed islands' last compute, from their last applied sync to their last heartbeat,
        unless a row of theirs holds it (an island that was only late recorded it itself)."""
        lost = []
        for leave in self.membership.history.leaves:
            island, start_s, end_s = leave["island"], leave["last_sync_s"], leave["last_seen_s"]
            recorded = any(row.worker == island and row.kind == "compute" and row.time_start_s < end_s
                           and row.time_end_s > start_s for row in rows)
            if end_s > start_s and not recorded:
                lost.append(Row(start_s, end_s, island, self.plan.workers[island].island, "compute", 0.0,
                                NO_FRAGMENT, leave["outer_step"]))
        return lost


class ElasticTransport:
    """The exchanges of an elastic run (``diloco.Transport``): each one runs on the exchange thread
    through ``Membership.run``, so a death re-forms the group and redoes it among the survivors while
    the training thread goes on. In an island of several ranks only its leader exchanges; the launch
    and the committed average are the leader's decisions (``ElasticTrainer.shared``)."""

    def __init__(self, membership: Membership, exchanger: Exchanger, shared: Callable[[Callable[[], T]], T],
                 island: int):
        self.membership = membership
        self.exchanger = exchanger
        self.shared = shared
        self.island = island
        self.admitted_at: int | None = None  # a passive joiner: the inner step it was admitted at

    def reach(self, step: int) -> None:
        """A passive joiner waits for the members to reach the launch after inner step ``step``,
        outside any collective: they may be a whole interval away, longer than the collective timeout
        (at its admission they are there already)."""
        if self.admitted_at is None or step == self.admitted_at:
            return
        key = self.membership.key("launch")
        while not self.membership.stopping.is_set():
            if self.membership.store.check([key]) and int(self.membership.store.get(key).decode()) >= step:
                return
            time.sleep(0.02)

    def launch(self, step: int, point: SyncPoint, delta: torch.Tensor, contributes: bool) -> Future | None:
        """Start the exchange on the exchange thread (the leader's; its followers get None)."""
        started: list[Future] = []

        def start() -> None:
            self.admit(step, point, contributes)
            started.append(self.exchanger.pool.submit(
                self.membership.run, lambda group: self.exchange_once(delta, contributes)))

        self.shared(start)
        return started[0] if started else None

    def admit(self, step: int, point: SyncPoint, contributes: bool) -> None:
        """The first fragment of an outer step first admits the joiners seen so far (no exchange is in
        flight then: tau < H / P), who take part without contributing. A member publishes the launch
        step, which passive joiners wait for (``reach``) before they enter the op."""
        if contributes:
            self.membership.store.set(self.membership.key("launch"), str(step))
        if point.fragment == 0 and step != self.admitted_at:
            self.membership.admit_joiners(contributes, step)

    def exchange_once(self, delta: torch.Tensor, contributes: bool) -> Exchange:
        kill_point("exchange-screen", self.island)
        exchange = self.exchanger.exchange(delta, contributes)
        kill_point("exchange-vote", self.island)
        return exchange

    def collect(self, point: SyncPoint, handle: Future | None) -> Exchange:
        """The committed exchange (a follower hears it, and the members it came from: its membership
        is only the view its leader gives it)."""
        exchange, members = self.shared(lambda: (handle.result(), self.membership.members))
        self.membership.members = members
        return exchange

    def applied(self, point: SyncPoint) -> None:
        """What the heartbeat publishes: a departure loses the compute since the last applied sync."""
        progress = self.membership.progress
        progress.synced_s = self.membership.now_s()
        progress.outer_step = point.outer_step + 1


def rows_path(out_dir: Path, island: int) -> Path:
    return out_dir / ROWS_FOLDER / f"island-{island}.rows.jsonl"
