"""DiLoCo whose islands may die and join mid-run without stopping the others (``trainer.elastic``).

One process per island, or an island of several ranks led by its local rank 0, which alone takes
part in the membership and tells the others what it decided (``island.py``, ``shared``). Every
cross-island collective goes through ``membership.Membership.run``: if an island dies (SIGKILL at
any moment) the survivors finish their interval, their exchange fails or is voted down, they wait
out the detection timeout, re-form the group among themselves and redo the exchange: training goes
on with a smaller M, the dead island's work since its last applied sync is lost. A new or returning
island asks to join and at once for the global state, which the holder the members' leader picks
(the fastest for it, ``network.weights_from``) sends in the background while everyone trains on
(``joining.py``); from the next outer boundary the joiner takes
part in the exchanges, contributing nothing and keeping the averages, and once its download is in it
replays them onto the downloaded state and trains. Its trace shows the wait (``idle``), the download
(``comm``, fragment -1, the bytes received) and its exchanges, as the simulator's does. (A member
without state at the start of a resumed run adopts it from the member with the most progress before
anyone trains: ``sync_state``.)

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

import contextlib
import io
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any, TypeVar, cast

import torch

from islands.errors import UserError
from islands.io import write_text

from ..config import RunPlan
from ..core import checkpoint
from ..core.checkpoint import PeerFailed
from ..core.faults import killable
from ..core.outer import Fragment
from ..core.tracing import PAUSE_MARGIN_S, Recorder, build_summary, write_outputs
from ..core.world import Downloaded, Ending, EvaluateOn, Groups, Local, Passive, Start
from ..exchange.comm import broadcast_bytes
from ..exchange.group import Group
from ..exchange.sync import Exchanger
from ..runtime.island import IslandRanks
from ..runtime.paced import paced
from ..runtime.store import publish_run_clock, run_time_s
from .joining import Fetcher, Server
from .membership import History, LeftOut, Membership
from .rows import all_rows, join_seconds, lost_rows, open_rows_sink
from .transport import ElasticTransport

T = TypeVar("T")


class RunOver(Exception):
    """A joiner arrived after the last outer boundary: nothing left to train."""


# What a leader tells its followers instead of a value, and what they raise then: the island was left
# out or the run is over (they go the leader's way), or the leader refused the run with one line
# (they exit 2 quietly).
OUTCOMES: dict[type[Exception], type[Exception]] = {
    LeftOut: LeftOut,
    RunOver: RunOver,
    UserError: PeerFailed,
}


class ElasticWorld:
    """The world (``world.World``) of one rank of an elastic run: its island's membership, and the
    island's group when it has several ranks (``ranks``, ``island.py``; None with one).

    Every decision with the other islands goes through the membership: the exchanges (over an
    ``ElasticTransport``: votes, admissions, the leader's word to its followers), the start (there
    is no world group: the store agrees, and an island absent from the checkpoint takes the state
    from a live one), joining and rejoining when left out, serving downloads, evaluation, the
    checkpoint's commit and the end (among the members that hold the state; the run's clock for
    joiners; the dead islands' rows). The churn history goes into every checkpoint. It keeps the
    trace's recorder (``transport``) and reads the trainer's state only through the ``Local`` each
    call is given."""

    def __init__(
        self,
        plan: RunPlan,
        rank: int,
        membership: Membership,
        join_at_s: float | None = None,
        ranks: IslandRanks | None = None,
        out_dir: Path | None = None,
        wan_pacer: str | None = None,
    ):
        """``join_at_s``: it joins once the run's clock reads this (None: it starts with the run);
        ``wan_pacer``: the emulated WAN's (the launch spec's)."""
        self.plan = plan
        self.rank = rank
        self.island = rank // plan.ranks_per_island
        self.membership = membership
        self.join_at_s = join_at_s
        self.has_state = join_at_s is None
        self.ranks = ranks
        self.out_dir = out_dir
        self.wan_pacer = wan_pacer
        # no world or cross group until the first epoch forms (installed sets both): the trainer's
        # exchanger is built before and warms up on echoes, nothing reads them before (a Groups of
        # groups that may be missing would cost every fixed run a check)
        self.groups = Groups(world=None, cross=None, intra_grad=ranks)  # type: ignore[arg-type]
        self.resumed_s = 0.0
        self.entered = False
        self.fetcher: Fetcher | None = None

    # ---------------------------------------------------------------- the start
    def share_initial_weights(self, model: torch.nn.Module) -> None:
        """Nothing to share: every island builds the model from the same seed (joiners download)."""

    def holds_checkpoint(self, resume_dir: Path) -> bool:
        """Whether all of the island's ranks' files are there; an island absent at that checkpoint (it
        died while writing) gets the state from a live one."""
        folder = checkpoint.latest_dir(resume_dir)
        holds = all(
            checkpoint.rank_file(folder, rank).is_file() for rank in self.ranks_of(self.island)
        )
        self.has_state = holds and self.join_at_s is None
        return holds

    def start_s(self, state: dict | None) -> float:
        """Time 0 is read at the start barrier in ``entering`` (a joiner takes the peer's clock)."""
        self.resumed_s = state["clock_s"] if state else 0.0
        return self.resumed_s

    def transport(
        self, exchanger: Exchanger, recorder: Recorder, fragments: list[Fragment]
    ) -> ElasticTransport:
        """The exchanges through the membership; the exchanger's cross-island group is replaced at every
        new epoch (``installed``), and the membership times its epochs on the trace clock."""
        self.recorder = recorder
        self.membership.on_install = self.installed
        self.membership.now_s = recorder.clock.now
        self.server = Server(self.membership, self.wan_pacer, self.plan.workers)
        self.elastic = ElasticTransport(self.membership, exchanger, self.shared, self.island)
        return self.elastic

    def rows_sink(self) -> None:
        """The rows file opens in ``entering``, once the start has shown that every island passed its checks."""

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
        verdicts = [
            json.loads(membership.get(membership.key("resume", "verdict", rank)))
            for island in self.plan.initial_members()
            for rank in self.ranks_of(island)
        ]
        membership.first_epoch = max(verdict["next_epoch"] for verdict in verdicts)
        return [verdict["error"] for verdict in verdicts]

    def ranks_of(self, island: int) -> range:
        return range(island * self.plan.ranks_per_island, (island + 1) * self.plan.ranks_per_island)

    def installed(self) -> None:
        group = self.membership.group
        assert group is not None, "installed once the membership formed an epoch's group"
        cross = paced(killable(group, self.island), self.wan_pacer, self.membership.members)
        self.groups = Groups(world=group, cross=cross, intra_grad=self.ranks)
        self.elastic.cross_group(cross)

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
            return self.hear()
        with self.speaking():
            value = decide()
        ranks.tell((None, value))
        return value

    def hear(self) -> Any:
        """A follower: the value its leader decided, or the outcome it raised, raised here."""
        outcome, value = self.island_ranks().hear()
        if outcome is not None:
            raise list(OUTCOMES.values())[outcome](value)
        return value

    def island_ranks(self) -> IslandRanks:
        """The island's group, which an island of several ranks has: only there does its leader
        speak and its followers hear."""
        assert self.ranks is not None, "an island of one rank neither speaks nor hears"
        return self.ranks

    @contextlib.contextmanager
    def speaking(self) -> Iterator[None]:
        """The leader decides (what it calls inside is its alone); an outcome of ``OUTCOMES`` raised
        inside is told to its followers."""
        ranks = self.island_ranks()
        ranks.speaking = True
        try:
            yield
        except tuple(OUTCOMES) as raised:
            ranks.tell(
                (
                    next(i for i, cause in enumerate(OUTCOMES) if isinstance(raised, cause)),
                    str(raised),
                )
            )
            raise
        finally:
            ranks.speaking = False

    # ---------------------------------------------------------------- entering
    @contextlib.contextmanager
    def entering(self, local: Local) -> Iterator[Start]:
        """Form the first epoch, or join (an island left out of a new epoch joins again, without
        state); the block is the trainer's side (adopting, a joiner's passive phase). An island's
        leader then tells its followers the clock and the state it holds, which they adopt."""
        if self.entered:
            self.has_state, self.join_at_s = False, 0.0
        self.entered = True
        if self.follows:
            clock_s, state = self.hear()
            adopted = (
                self.adopt(torch.load(io.BytesIO(state), weights_only=True))
                if state is not None
                else None
            )
            self.recorder.clock.restart(clock_s)
            yield Start(adopt=adopted)
            return
        with self.speaking() if self.ranks is not None else contextlib.nullcontext():
            joining = self.join_at_s is not None
            start, told = self.join() if joining else self.form_first_epoch(local)
            yield start
            if joining:
                told = (
                    self.recorder.clock.now(),
                    self.state_payload(local) if self.ranks else None,
                )
        if self.ranks is not None:
            self.ranks.tell((None, told))

    def form_first_epoch(self, local: Local) -> tuple[Start, tuple[float, bytes | None]]:
        """Form the first epoch; the rows file opens only then, once the run's start has shown that
        every island present passed its checks. Returns the start and what the island's followers are
        told: the clock and the state adopted (or None)."""
        self.membership.start(self.plan.initial_members())
        self.open_rows_sink(append=False)
        adopted = self.membership.run(lambda group: self.sync_state(group, local))
        state = (
            self.adopt(torch.load(io.BytesIO(adopted), weights_only=True))
            if adopted is not None
            else None
        )
        self.membership.stateful = set(self.membership.members)
        self.recorder.clock.restart(self.resumed_s)
        self.publish_clock()
        return Start(adopt=state), (self.resumed_s, adopted)

    def join(self) -> tuple[Start, None]:
        """Wait for the join time, ask to join and for the state (downloaded in the background), and
        enter as a passive member (the trainer takes part in the boundaries until the state is in)."""
        clock = self.recorder.clock
        self.open_rows_sink(append=True)
        assert self.join_at_s is not None, "only a joiner joins (entering)"
        requested_s = self.wait_for_run_time(self.join_at_s)
        clock.restart(requested_s)
        self.has_state = False
        self.fetcher = Fetcher(self.membership, clock.now, self.wan_pacer)
        self.fetcher.start()
        step = self.membership.request_join(requested_s)
        if step is None:
            raise RunOver(f"island {self.island}: the run ended before it could join")
        self.recorder.add("idle", requested_s, clock.now(), self.plan.outer_step(step))
        self.elastic.admitted_at = step
        return Start(passive=Passive(step, self.arrived)), None

    def arrived(self) -> Downloaded | None:
        """The joiner's download, once it is in (from then on the island holds the state)."""
        fetcher = self.fetcher
        assert fetcher is not None, "a joiner's download starts as it joins (join)"
        if not fetcher.done.is_set():
            return None
        download = fetcher.result
        assert download is not None, "the fetcher is done once its download is in (Fetcher.fetch)"
        self.has_state = True
        return Downloaded(
            torch.load(io.BytesIO(download.data), weights_only=True),
            len(download.data),
            download.started_s,
            download.done_s,
        )

    def wait_for_run_time(self, at_s: float) -> float:
        """Sleep until the run's clock (published in the store) reads ``at_s``; returns the reading."""
        while True:
            now_s = run_time_s(self.membership.store)
            if now_s is not None and now_s >= at_s:
                return now_s
            time.sleep(0.05)

    def between_steps(self, local: Local) -> None:
        """Publish progress; while no sync is in flight, a holder serves the downloads it was picked
        for, and the leader picks the holders of the new ones first (``joining.Server``)."""
        self.membership.progress.now_s = self.recorder.clock.now()
        if self.has_state and not self.follows and local.quiet():
            leads = self.membership.leader == self.island
            self.server.poll(lambda: self.state_payload(local), leads)

    # ---------------------------------------------------------------- state transfer
    def sync_state(self, group: Group, local: Local) -> bytes | None:
        """Members without the current state (a resumed run's islands that have no checkpoint file)
        get it from the member that has the most progress, before anyone trains: the state this
        member must adopt, or None."""
        mine = local.global_state()["step"] if self.has_state else -1
        progress = [
            int(t.item()) for t in group.all_gather(torch.tensor([mine], dtype=torch.int64))
        ]
        best = max(progress)
        if best < 0:
            raise UserError(
                "no live island holds the global weights; resume from the last checkpoint (--resume)"
            )
        if min(progress) == best:
            return None
        src = progress.index(best)
        data = broadcast_bytes(
            group, self.state_payload(local) if group.rank == src else None, src, self.island
        )
        return data if mine < best else None

    def state_payload(self, local: Local) -> bytes:
        """The global state as another member adopts it: the trainer's, with the churn history."""
        history = self.membership.history
        state = {
            **local.global_state(),
            "admitted_joins": self.membership.admitted_joins,
            "leaves": history.leaves,
            "joins": history.joins,
            "epochs": history.epochs,
        }
        buffer = io.BytesIO()
        torch.save(state, buffer)
        return buffer.getvalue()

    def adopt(self, state: dict[str, Any]) -> dict[str, Any]:
        """A member without the state takes another's (and its clock, and the churn history); returns
        what the trainer adopts."""
        self.membership.admitted_joins = state["admitted_joins"]
        self.membership.history = History(
            state["leaves"], state["joins"], self.membership.history.epochs
        )
        self.resumed_s = state["clock_s"]
        self.has_state = True
        return state

    # ---------------------------------------------------------------- collectives of the period end
    def evaluate(self, evaluate_on: EvaluateOn) -> float:
        return self.shared(
            lambda: self.membership.run(lambda group: self.evaluate_holders(group, evaluate_on))
        )

    def evaluate_holders(self, group: Group, evaluate_on: EvaluateOn) -> float:
        """Evaluation shared out over the members that hold the state; a passive joiner, which has
        none, takes the members' churn history here instead."""
        history = vars(self.membership.history) if self.has_state else None
        views = group.all_gather_object(history)
        if not self.has_state:
            self.membership.adopt_history(list(zip(self.membership.members, views)))
        holders = [member for member, view in enumerate(views) if view is not None]
        return evaluate_on(group, holders)

    def pause_s(self, paused_s: float) -> float:
        """The members' longest pause (an island's leader speaks for its ranks) and the margin."""
        longest_s = self.shared(
            lambda: self.membership.run(lambda group: max(group.all_gather_object(paused_s)))
        )
        return longest_s + PAUSE_MARGIN_S

    def publish_clock(self, paused: bool = False) -> None:
        """The run's clock for the launcher and joiners: (wall time, trace seconds) now, and whether
        the trace clock is about to stand still (evaluation, checkpoint)."""
        if self.reports():
            publish_run_clock(self.membership.store, self.recorder.clock.now(), paused)

    def state_dict(self) -> dict[str, Any]:
        history = self.membership.history
        return {
            "churn": {"leaves": history.leaves, "joins": history.joins, "epochs": history.epochs}
        }

    def load_state(self, state: dict[str, Any]) -> None:
        churn = state.get("churn", {})
        self.membership.history = History(
            list(churn.get("leaves", [])),
            list(churn.get("joins", [])),
            list(churn.get("epochs", [])),
        )

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
        if self.out_dir:
            open_rows_sink(self.recorder, self.out_dir, self.island, append)

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
        out_dir = ending.out_dir
        gathered = self.membership.run(
            lambda group: group.all_gather_object((self.island, ending.rows))
        )
        leader = self.reports()
        self.membership.close()
        if self.recorder.sink:
            cast(IO[str], self.recorder.sink).close()  # the rows file rows.open_rows_sink opened
        if not leader:
            return None
        self.membership.store.set(self.membership.key("run", "finished"), "1")
        history = self.membership.history
        rows = all_rows(out_dir, self.plan.islands, dict(gathered))
        rows += lost_rows(history.leaves, rows, self.plan.workers)
        joins = join_seconds(history.joins, rows)
        churn = {
            "lost_compute_s": sum(leave["lost_compute_s"] for leave in history.leaves),
            "leaves": len(history.leaves),
            "joins": len(joins),
        }
        trace, summary = build_summary(self.plan, ending.step, rows, churn)
        if out_dir:
            write_outputs(
                out_dir,
                trace,
                {
                    "summary": summary,
                    "run": ending.run_info,
                    "churn": {"leaves": history.leaves, "joins": joins, "epochs": history.epochs},
                },
            )
        return summary
