"""How workers exchange at a sync point: one interface, as the trainer's ``Transport`` is one, with
a collective per sync (``Collectives``: a ring, or ``StagedCollectives``: the stages of a hierarchical
or tree collective) and Decoupled DiLoCo's syncer (``syncer.Syncer``). The engine joins, waits and
applies through it alone.

A collective of (outer step, fragment) forms when its first member joins, expecting every member then
(``fleet.Fleet``); each member screens its tensor first (``network.exchange_cpu_s_per_value`` x its
values, on its single exchange thread, after its previous exchange), then arrives; the collective
starts with the last expected arrival and its transfers go on the network. Churn, the deadline
barrier and failures change a pending collective through ``pending``, ``maybe_start``,
``drop_member`` and ``break_ring``; the engine hears of three moments through hooks (``connect``):
a collective formed, a member arrived, and the last fragment of an outer step is done.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Callable, Generator
from dataclasses import replace
from functools import partial
from typing import Any

import numpy as np
import simpy

from islands.scenarios import Scenario
from islands.schedules import SyncPoint
from islands.schedules.gather import chosen
from islands.schedules.store_round import NOTHING_HELD, Held, held_after
from islands.trace import NO_FRAGMENT, WASTED

from ..network.collectives import (
    COLLECTIVES,
    Leg,
    PendingCollective,
    RingCollective,
    bucket_wait,
    calls_of,
    end_offsets_s,
    launch,
    ring_and_leg,
    waits_for_buckets,
)
from ..network.gather_rounds import StorePaths, gather_stages
from ..network.links import Link
from ..network.staged import STAGED, StagedCollective
from ..workers import WorkerState
from .context import RunContext

RINGS_KEPT = 64  # rings (membership and payload) kept built at once
Hook = Callable[[PendingCollective], None]


def no_hook(_collective: PendingCollective) -> None:
    return None


def with_set_up(leg: Leg, scenario: Scenario) -> Leg:
    """The run's first collective: its calls' latency after the communicator's set-up
    (``exchange.first_call_s``), which the first call of a process pays once."""
    return replace(leg, latency_s=leg.latency_s + scenario.exchange.first_call_s)


class Exchanges(ABC):
    """The exchanges of one run. ``pending`` holds the collectives gathering or in flight, by (outer
    step, fragment): the syncer has none (its learners' round trips are their own)."""

    pending: dict[tuple[int, int], PendingCollective]
    counts: dict[str, int]
    watcher: Callable[[int], None] | None = None  # hears that a worker's bytes start or stop moving

    @abstractmethod
    def moving(self, rank: int) -> bool:
        """Whether ``rank``'s own exchanges move bytes now (its compute slows: ``busy.py``)."""

    def tell_watcher(self, rank: int) -> None:
        """``rank``'s bytes may have started or stopped moving: the watcher hears of it."""
        if self.watcher is not None:
            self.watcher(rank)

    @abstractmethod
    def join(self, state: WorkerState, point: SyncPoint) -> Any:
        """The worker launches its exchange of ``point``; returns what it then waits for."""

    @abstractmethod
    def own_end(self, rank: int, exchange: Any) -> simpy.Event:
        """When ``rank`` holds the result of ``exchange``."""

    @abstractmethod
    def record_wait(
        self, state: WorkerState, since_s: float, exchange: Any, point: SyncPoint
    ) -> None:
        """The worker waited from ``since_s`` to now for ``exchange``: its trace rows."""

    @abstractmethod
    def close(self) -> None:
        """The run is over: an exchange still in flight never completes; its bytes are wasted."""

    def connect(self, on_form: Hook, on_arrival: Hook, on_outer_done: Hook) -> None:  # noqa: B027 (a hook an implementation may leave empty)
        """Who hears that a collective formed (the churn's joiners), that a member arrived (the barrier)
        and that the last fragment of an outer step is done (the engine): none of it, without collectives."""

    def applied(self, state: WorkerState, point: SyncPoint) -> None:  # noqa: B027 (a hook an implementation may leave empty)
        """The worker applied ``point``'s result."""

    def backward_done(self, state: WorkerState, exchange: Any) -> None:  # noqa: B027 (a hook an implementation may leave empty)
        """The worker's compute before it waits for ``exchange`` is over (DDP's buckets need it)."""

    def started_s(self, key: tuple[int, int]) -> float | None:
        """When the collective of ``key`` (outer step, fragment) first started, if it is pending and has."""
        return None

    def departed(self, state: WorkerState) -> None:  # noqa: B027 (a hook an implementation may leave empty)
        """The worker left (after the churn has taken it out of the pending collectives)."""

    def noticed(self) -> None:  # noqa: B027 (a hook an implementation may leave empty)
        """The others noticed a departure: what waited for the departed may go ahead."""

    def joiner(
        self, state: WorkerState, from_peers: Generator[simpy.Event, Any, None]
    ) -> Generator[simpy.Event, Any, None]:
        """How a returning worker gets the global state: from its peers (``churn.Churn.joiner``) by default."""
        return from_peers


class Collectives(Exchanges):
    """One ring collective per (outer step, fragment), every member in it."""

    def __init__(self, context: RunContext):
        self.env, self.network, self.topology = context.env, context.network, context.topology
        self.scenario, self.spec = context.scenario, context.scenario.network
        self.fleet, self.trace, self.last_fragment = (
            context.fleet,
            context.trace,
            context.last_fragment,
        )
        self.set_up = (
            self.scenario.exchange.first_call_s == 0
        )  # the run's first call sets the communicator up
        self.bucketed = waits_for_buckets(self.scenario)
        self.pending: dict[tuple[int, int], PendingCollective] = {}
        self.rings: dict[tuple, tuple[RingCollective, Leg]] = {}
        self.moving_in: dict[
            tuple[int, int], set[int]
        ] = {}  # by collective: its members moving bytes
        self.counts: dict[str, int] = {}
        self.on_form: Hook = no_hook
        self.on_arrival: Hook = no_hook
        self.on_outer_done: Hook = no_hook

    def connect(self, on_form: Hook, on_arrival: Hook, on_outer_done: Hook) -> None:
        self.on_form, self.on_arrival, self.on_outer_done = on_form, on_arrival, on_outer_done

    # --- joining ---------------------------------------------------------------------------------

    def join(self, state: WorkerState, point: SyncPoint) -> PendingCollective:
        key = (point.outer_step, point.fragment)
        collective = self.pending.get(key)
        if collective is None:
            collective = PendingCollective(
                key,
                point.payload_bytes,
                COLLECTIVES[point.collective],
                set(self.fleet.members),
                self.env.event(),
            )
            self.pending[key] = collective
            self.on_form(collective)
        collective.expected.add(state.worker.rank)
        if self.bucketed:  # its calls may wait for the buckets: the member's backward window
            collective.backward_from_s[state.worker.rank] = self.env.now
        if self.spec.exchange_end_spread_s > 0:
            collective.member_ends.setdefault(state.worker.rank, self.env.event())
        work_s = self.spec.exchange_cpu_s_per_value * point.values
        previous, state.exchanging = state.exchanging, collective
        process = state.process
        assert previous is None or isinstance(previous, PendingCollective), (
            "a run exchanges by collectives or none"
        )
        if previous is not None:
            self.after_own_end(
                previous,
                state.worker.rank,
                lambda: self.prepare(state, process, collective, work_s),
            )
        else:
            self.prepare(state, process, collective, work_s)
        return collective

    def after_own_end(
        self, collective: PendingCollective, rank: int, action: Callable[[], None]
    ) -> None:
        """Run ``action`` once ``rank`` is done with ``collective`` (``own_end``)."""
        own_end = self.own_end(rank, collective)
        if own_end.triggered:
            action()
        else:
            own_end.callbacks.append(lambda _event: action())

    def own_end(self, rank: int, exchange: PendingCollective) -> simpy.Event:
        """Under an end spread the member's own event, which fires up to the spread before the transfer
        ends (``collectives.end_offsets_s``); else the collective's end."""
        return exchange.member_ends.get(rank, exchange.done)

    def prepare(
        self,
        state: WorkerState,
        process: simpy.Process | None,
        collective: PendingCollective,
        work_s: float,
    ) -> None:
        """The worker's exchange thread takes up ``collective``: its exchanges run one at a time, in
        launch order, as the trainer's single exchange thread runs them. It screens and encodes the
        tensor (``work_s``), then arrives."""
        if work_s > 0:
            worked = self.env.timeout(work_s)
            worked.callbacks.append(
                lambda _event: self.arrive_after_work(state, process, collective)
            )
        else:
            self.arrive_after_work(state, process, collective)

    def arrive_after_work(
        self, state: WorkerState, process: simpy.Process | None, collective: PendingCollective
    ) -> None:
        """The exchange work is over: arrive, unless the worker departed meanwhile or the collective
        went on without it. The collective starts with the last one in."""
        still_expected = (
            state.worker.rank in collective.expected
            and self.pending.get(collective.key) is collective
        )
        if state.present and state.process is process and still_expected:
            collective.arrived.add(state.worker.rank)
            self.on_arrival(collective)
            self.maybe_start(collective)

    def maybe_start(self, collective: PendingCollective) -> None:
        if collective.ready():
            self.start(collective)

    # --- moving the bytes ------------------------------------------------------------------------

    def start(self, collective: PendingCollective) -> None:
        participants = self.topology.ring(collective.arrived, self.spec.ring_order)
        collective.participants = participants
        collective.attempt += 1
        collective.dropped_s, collective.dropped_bytes, collective.hold_until_s = {}, {}, 0.0
        collective.attempt_transfers = []  # this attempt's own
        collective.started_at_s = self.env.now
        if collective.first_started_s is None:
            collective.first_started_s = self.env.now
        self.transmit(collective, participants, collective.attempt)
        self.move(collective, participants)

    def transmit(
        self, collective: PendingCollective, participants: tuple[int, ...], attempt: int
    ) -> None:
        """The ring as one transfer; under an end spread each member's own end before the last's."""
        ring, leg = self.ring_and_leg(collective.ring, participants, collective.payload_bytes)
        transfer = launch(self.network, leg if self.set_up else with_set_up(leg, self.scenario))
        self.set_up = True
        collective.buckets = bucket_wait(
            self.scenario,
            collective.payload_bytes,
            leg,
            calls_of(self.scenario, collective.payload_bytes),
            transfer.alone_bytes_per_s,
        )
        collective.bytes_end_s, collective.settle = None, None
        collective.transfers = collective.attempt_transfers = [transfer]
        bytes_sent = dict.fromkeys(participants, ring.bytes_per_worker)
        transfer.done.callbacks.append(lambda _event: self.finish(collective, bytes_sent, attempt))
        if self.spec.exchange_end_spread_s <= 0 or collective.buckets is not None:
            return  # calls that wait for their buckets end together, with the last
        outer_step, fragment = collective.key
        offsets = end_offsets_s(
            participants,
            self.spec.exchange_end_spread_s,
            outer_step * (self.last_fragment + 1) + fragment,
        )
        for rank, offset_s in offsets.items():
            if offset_s > 0:
                self.network.before_end(
                    transfer, offset_s, partial(self.member_done, collective, rank, attempt)
                )

    def ring_and_leg(
        self, kind: type[RingCollective], participants: tuple[int, ...], payload_bytes: float
    ) -> tuple[RingCollective, Leg]:
        """The ring over ``participants`` and its transfer, built once per membership and payload (every
        fragment of a schedule has one of a few payloads); under churn, whose memberships seldom
        return, only the last ``RINGS_KEPT`` are kept."""
        key = (kind, participants, payload_bytes)
        if key not in self.rings:
            if len(self.rings) >= RINGS_KEPT:
                self.rings.clear()
            fleet = self.fleet
            self.rings[key] = ring_and_leg(
                self.scenario,
                self.topology,
                fleet.replica_counts,
                fleet.grouped,
                kind,
                participants,
                payload_bytes,
            )
        return self.rings[key]

    def member_done(self, collective: PendingCollective, rank: int, attempt: int) -> None:
        """``rank`` has everything it needs from ``collective`` before the last member has."""
        own_end = collective.member_ends.get(rank)
        if attempt == collective.attempt and own_end is not None and not own_end.triggered:
            collective.member_end_s[rank] = self.env.now
            own_end.succeed()
            self.still(collective, (rank,))

    # --- whose bytes move ------------------------------------------------------------------------

    def moving(self, rank: int) -> bool:
        return any(rank in ranks for ranks in self.moving_in.values())

    def move(self, collective: PendingCollective, ranks: tuple[int, ...]) -> None:
        """``ranks`` move bytes in ``collective`` from now (it started), until ``still``."""
        if self.watcher is None:
            return
        moving = self.moving_in.setdefault(collective.key, set())
        for rank in ranks:
            if rank not in moving:
                moving.add(rank)
                self.tell_watcher(rank)

    def still(self, collective: PendingCollective, ranks: tuple[int, ...]) -> None:
        """``ranks`` move no more bytes in ``collective``: their own end, a departure, a break."""
        moving = self.moving_in.get(collective.key)
        if moving is None:
            return
        for rank in ranks:
            if rank in moving:
                moving.discard(rank)
                self.tell_watcher(rank)
        if not moving:
            del self.moving_in[collective.key]

    def drop_member(self, collective: PendingCollective, rank: int) -> None:
        """``on_departure = "partial"``: ``rank`` left mid-flight; the others go on without its share and
        finish no sooner than they notice that it is missing. What it sent by its (first) departure is
        thrown away with its share, and its links carry nothing of the collective from then on."""
        now = self.env.now
        self.still(collective, (rank,))
        if rank not in collective.dropped_bytes:
            collective.dropped_s[rank] = now
            collective.dropped_bytes[rank] = self.sent_by(rank, self.moved(collective))
            links = self.topology.uplinks[rank], self.topology.downlinks[rank]
            for transfer in collective.transfers:
                transfer.leave(links, now)
        notice_s = now + self.spec.detection_timeout_s
        collective.hold_until_s = max(collective.hold_until_s, notice_s)

    def moved(self, collective: PendingCollective) -> list[tuple[float, Counter[Link]]]:
        """Each transfer of the collective's attempt: the bytes it has pushed through each of its links
        so far, and its crossings of each link (``sent_by``)."""
        now = self.env.now
        return [(t.moved_bytes(now), t.counted) for t in collective.attempt_transfers]

    def sent_by(self, rank: int, moved: list[tuple[float, Counter[Link]]]) -> float:
        """The bytes ``rank`` has sent in an attempt whose transfers ``moved`` so much: what its uplink
        carried of them (a transfer carries its bytes through a link once per crossing)."""
        uplink = self.topology.uplinks[rank]
        return sum(bytes_moved * counted.get(uplink, 0) for bytes_moved, counted in moved)

    def break_ring(self, collective: PendingCollective, restarts: bool = True) -> None:
        """A participant departed mid-transfer (or a failure stopped the run, ``restarts`` False): the
        collective's transfers stop; it restarts once that is detected. What the attempt moved is
        wasted (``waste``)."""
        if collective.in_flight:
            self.waste(collective, restarts)
        for transfer in collective.transfers:
            self.network.cancel(transfer)
        collective.transfers = []
        self.still(collective, collective.participants)

    def waste(self, collective: PendingCollective, restarts: bool = True) -> None:
        """The attempt in flight is thrown away: each participant's bytes sent in it (a dropped member's
        by its departure) join its wasted row of the collective (``PendingCollective.wasted``), which
        runs from its first broken attempt's start to its last one's break: one row per worker and
        collective, however often it breaks, written when it completes (``finish``) or its worker
        leaves (``departed``: a row ends with its worker's stay). When a failure stops the whole run
        (``restarts`` False) every row is written now, and that failure's attempt gets rows of its
        own without a fragment: the whole run restarts from its checkpoint, not the collective, so
        it is no attempt of the collective's sync (``summary.sync_spans``)."""
        started_s = collective.started_at_s
        assert started_s is not None, "a collective in flight was started"
        now, moved = self.env.now, self.moved(collective)
        for rank in collective.participants:
            sent = collective.dropped_bytes.get(rank)
            if sent is None:
                sent = self.sent_by(rank, moved)
            end_s = collective.dropped_s.get(rank, now)
            if not restarts:
                self.write_wasted(collective, rank)
                self.trace.add(
                    started_s,
                    end_s,
                    rank,
                    self.fleet.workers[rank].island,
                    WASTED,
                    sent,
                    NO_FRAGMENT,
                    collective.key[0],
                )
                continue
            row = collective.wasted.setdefault(rank, [started_s, end_s, 0.0])
            row[1], row[2] = end_s, row[2] + sent

    def write_wasted(self, collective: PendingCollective, rank: int) -> None:
        """``rank``'s wasted row of the collective's broken attempts so far, if it has one."""
        row = collective.wasted.pop(rank, None)
        if row is not None:
            start_s, end_s, sent = row
            outer_step, fragment = collective.key
            island = self.fleet.workers[rank].island
            self.trace.add(start_s, end_s, rank, island, WASTED, sent, fragment, outer_step)

    def departed(self, state: WorkerState) -> None:
        """The worker left: its wasted rows end here (it may return to a collective still pending)."""
        for collective in self.pending.values():
            self.write_wasted(collective, state.worker.rank)

    def drop_all(self) -> None:
        """A failure stopped every worker: every collective is dropped."""
        for collective in list(self.pending.values()):
            self.break_ring(collective, restarts=False)
            for rank in list(collective.wasted):
                self.write_wasted(collective, rank)
        self.pending.clear()

    def close(self) -> None:
        """The run is over: a collective still in flight never completes, and its attempt is wasted;
        every wasted row still open is written."""
        for collective in self.pending.values():
            if collective.in_flight:
                self.waste(collective)
            for rank in list(collective.wasted):
                self.write_wasted(collective, rank)

    def finish(
        self, collective: PendingCollective, bytes_sent: dict[int, float], attempt: int
    ) -> None:
        """The collective is done (or, with a dropped member, its bytes are through and it waits for the
        others to notice): a comm row per participant with the bytes it sent; a dropped member's row
        is wasted, from the attempt's start to its (first) departure, with what it had sent by then
        (``drop_member``); the wasted rows of the broken attempts before it are written too."""
        if attempt != collective.attempt or not collective.transfers:
            return
        self.still(collective, collective.participants)
        if collective.hold_until_s > self.env.now:
            timer = self.env.timeout(collective.hold_until_s - self.env.now)
            timer.callbacks.append(lambda _event: self.finish(collective, bytes_sent, attempt))
            return
        if collective.buckets is not None and collective.bytes_end_s is None:
            collective.bytes_end_s = self.env.now
            self.settle_buckets(collective, lambda: self.finish(collective, bytes_sent, attempt))
            return
        outer_step, fragment = collective.key
        started_s = collective.started_at_s
        assert started_s is not None, "a collective that finishes was started"
        workers = self.fleet.workers
        for rank, sent in bytes_sent.items():
            end_s = max(started_s, collective.member_end_s.get(rank, self.env.now))  # a restart
            kind = "comm"
            if rank in collective.dropped_s:
                end_s, sent, kind = (
                    collective.dropped_s[rank],
                    collective.dropped_bytes[rank],
                    WASTED,
                )
            self.trace.add(
                started_s, end_s, rank, workers[rank].island, kind, sent, fragment, outer_step
            )
        for rank in list(collective.wasted):
            self.write_wasted(collective, rank)
        for own_end in collective.member_ends.values():
            if not own_end.triggered:
                own_end.succeed()
        del self.pending[collective.key]
        collective.done.succeed()
        if fragment == self.last_fragment:
            self.on_outer_done(collective)

    def settle_buckets(self, collective: PendingCollective, finish: Callable[[], None]) -> None:
        """The transfer of calls that wait for their buckets is through (``bytes_end_s``): they end
        when the last call ends (``BucketWait.end_s``), which needs every participant's backward
        window; until the last of them has reported (``backward_done``), ``finish`` waits."""
        buckets, bytes_end_s = collective.buckets, collective.bytes_end_s
        assert buckets is not None and bytes_end_s is not None, "settled once the bytes are through"
        members = [rank for rank in collective.participants if rank not in collective.dropped_s]
        if any(rank not in collective.backward_to_s for rank in members):
            collective.settle = finish
            return
        collective.settle = None
        end_s = buckets.end_s(
            bytes_end_s,
            np.array([collective.backward_from_s[rank] for rank in members]),
            np.array([collective.backward_to_s[rank] for rank in members]),
        )
        if end_s > self.env.now:
            timer = self.env.timeout(end_s - self.env.now)
            timer.callbacks.append(lambda _event: finish())
        else:
            finish()

    def backward_done(self, state: WorkerState, exchange: PendingCollective) -> None:
        """The worker's step compute is over: the end of its backward window, which calls that wait
        for their buckets need (``settle_buckets``)."""
        if state.worker.rank not in exchange.backward_from_s:
            return
        exchange.backward_to_s[state.worker.rank] = self.env.now
        if exchange.settle is not None:
            self.settle_buckets(exchange, exchange.settle)

    # --- waiting ---------------------------------------------------------------------------------

    def record_wait(
        self, state: WorkerState, since_s: float, exchange: PendingCollective, point: SyncPoint
    ) -> None:
        self.trace.wait(state, since_s, exchange.first_started_s, point.fragment, point.outer_step)

    def started_s(self, key: tuple[int, int]) -> float | None:
        collective = self.pending.get(key)
        return collective.first_started_s if collective else None


def collectives_of(exchanges: Exchanges) -> Collectives:
    """The run's exchanges as the collectives they are wherever a collective is pending (a syncer,
    ``syncer.Syncer``, never holds one) or a failure stops every worker (a coupled schedule's)."""
    assert isinstance(exchanges, Collectives), "only collectives hold pending collectives"
    return exchanges


class StagedCollectives(Collectives):
    """Hierarchical and tree collectives: their stages in turn, each stage's legs at once (``staged.py``)."""

    def transmit(
        self, collective: PendingCollective, participants: tuple[int, ...], attempt: int
    ) -> None:
        staged = self.staged(collective, participants)
        self.start_stage(collective, staged.stages[0])  # in flight from now, as a ring is
        self.env.process(self.run_stages(collective, staged, attempt))

    def staged(
        self, collective: PendingCollective, participants: tuple[int, ...]
    ) -> StagedCollective:
        """The collective's stages over ``participants`` (``staged.STAGED``)."""
        return STAGED[self.spec.collective](
            participants, collective.payload_bytes, self.topology, self.spec
        )

    def run_stages(
        self, collective: PendingCollective, staged: StagedCollective, attempt: int
    ) -> Generator[simpy.Event, Any, None]:
        """A staged collective's stages in turn (the first already started), each stage's legs at once.
        A cancelled leg never ends, and a stage that ends as its collective is cancelled starts no
        other: the collective restarts as a new attempt."""
        for index, stage in enumerate(staged.stages):
            if index:
                if attempt != collective.attempt or not collective.transfers:
                    return
                self.start_stage(collective, stage)
            yield self.env.all_of([transfer.done for transfer in collective.transfers])
        self.finish(collective, staged.bytes_sent, attempt)

    def start_stage(self, collective: PendingCollective, stage: tuple[Leg, ...]) -> None:
        collective.transfers = [launch(self.network, leg) for leg in stage]
        collective.attempt_transfers.extend(collective.transfers)


class GatherCollectives(StagedCollectives):
    """Top-k payloads gathered peer to peer or through the object store (``network.gather``), their
    stages in turn as a staged collective's (``network/gather_rounds.py``); the round's chosen peers drawn
    from the seed and the outer step among the members there (``schedules.gather.chosen``). ``held``:
    the connections to the store each worker holds open (``schedules/store_round.py``), none before
    its first round; a worker that departs loses its own, a failure that stops every worker all."""

    def __init__(self, context: RunContext):
        super().__init__(context)
        self.store = StorePaths.of(self.scenario)
        self.held: dict[int, Held] = {}

    def staged(
        self, collective: PendingCollective, participants: tuple[int, ...]
    ) -> StagedCollective:
        scenario = self.scenario
        picked = chosen(
            scenario.seed, collective.key[0], participants, scenario.schedule.gather_peers
        )
        held = {rank: self.held.get(rank, NOTHING_HELD) for rank in participants}
        for rank in participants:
            self.held[rank] = held_after(held[rank], len(picked))
        return gather_stages(
            self.spec.gather,
            participants,
            picked,
            collective.payload_bytes,
            self.topology,
            self.store,
            self.spec,
            held,
        )

    def departed(self, state: WorkerState) -> None:
        super().departed(state)
        self.held.pop(state.worker.rank, None)

    def drop_all(self) -> None:
        super().drop_all()
        self.held.clear()
