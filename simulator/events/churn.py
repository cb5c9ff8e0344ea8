"""Workers that leave and join mid-run: scheduled ``[[event]]`` entries and random churn.

* Leaving: the worker stops at once. Its work since the last sync it applied is lost (counted in
  ``lost_compute_s``). It also leaves any collective it had joined; a ring in flight through it breaks
  (the transfer stops). The others notice only after ``network.detection_timeout_s``: until then
  they wait for it at the next collective (under DDP that stalls the step); on detection the ring is
  re-formed among the survivors and a broken collective restarts from scratch. Under
  ``network.on_departure = "partial"`` (partial participation with a timeout, as fault-tolerant
  averagers such as Hivemind's run it) a ring in flight goes on without it instead: its contribution
  is dropped (``dropped_members``), and the others wait for its part until they notice, so the
  collective ends no sooner than ``detection_timeout_s`` after the departure. Unless no member
  holding the state is left: then it breaks.
* Joining (the trainer's rule, ``trainer/elastic/joining.py``; a Decoupled DiLoCo learner fetches the global
  state from the syncer instead and goes on from its own outer step, ``syncer.py``): the worker
  downloads the global state (parameters * bytes_per_param) in the background, from the first
  moment after it joins with no collective formed since the last outer boundary, from the holders
  (the present members that hold the state) that ``network.weights_from`` picks then
  (``schedules/serving.py``: the fastest holder, or a part from each; ``weights.py``), over their
  uplinks and its own downlink at their fair share. A holder that leaves takes what it was sending
  with it: those parts start again from the fastest holder at the next such moment. Meanwhile the
  joiner takes part in every collective that has not started yet, contributing nothing (it is one
  more member of the ring, so the others' bytes per worker grow to 2M/(M+1)), and once the download
  is in it computes from the outer step after the next outer boundary (the end of a sync of the last
  fragment), a holder from then on. With no peer present it starts at once from the last completed
  outer step.
* Random churn: each worker of an island with ``mtbf_s`` stays for an exponential time of that mean,
  leaves, and returns after an exponential time of mean ``mttr_s`` (never, without ``mttr_s``). The
  draws come from the worker's own generator, seeded from the scenario's seed.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable
from functools import partial
from typing import Any

import simpy

from islands.trace import NO_FRAGMENT, WASTED

from ..compute import CHURN, worker_generator
from ..network.collectives import PendingCollective
from ..workers import WorkerState
from .context import RunContext
from .exchanges import Exchanges, collectives_of
from .weights import Downloads

DEPARTURE = object()  # interrupt cause: the worker left
ORPHANED = object()  # interrupt cause: no member holding the state is left for a passive joiner


class Churn:
    """Membership changes of one simulation."""

    def __init__(self, context: RunContext, exchanges: Exchanges):
        self.env, self.scenario, self.network, self.topology = (
            context.env,
            context.scenario,
            context.network,
            context.topology,
        )
        self.fleet, self.progress, self.trace, self.start = (
            context.fleet,
            context.progress,
            context.trace,
            context.start,
        )
        self.exchanges = exchanges
        self.passive: set[int] = (
            set()
        )  # joiners taking part in collectives before their state is in
        self.waiting: dict[int, simpy.Event] = {}  # passive joiners waiting for the next collective
        self.fetchers: dict[int, simpy.Process] = {}  # each passive joiner's background download
        self.enlisted: set[int] = (
            set()
        )  # passive joiners admitted (from a first fragment's collective on)
        self.admitted: dict[
            int, int
        ] = {}  # joiners made members at an outer boundary: the outer step they start at
        self.quiet = (
            True  # no collective since the last outer boundary: a snapshot now misses nothing
        )
        self.quiet_again: simpy.Event | None = None  # made only when a joiner waits for it
        # a late worker's fetch of a sync in flight (``fetch``): (transfer, start, outer step)
        self.downloads: dict[int, tuple[Any, float, int]] = {}
        self.weights = Downloads(context)  # the joiners' downloads of the global state
        self.lost_compute_s = 0.0
        self.counts = {"joins": 0, "leaves": 0, "dropped_members": 0, "ignored_events": 0}
        self.unfired = 0  # scheduled event actions still to come
        self.last_leave_s = 0.0

    def schedule(self) -> None:
        for event in self.scenario.events:
            targets = [
                s for s in self.fleet.states if event.island in (s.worker.name, s.worker.island)
            ]
            action = self.leave if event.kind == "leave" else self.join
            for state in targets:
                self.unfired += 1
                timer = self.env.timeout(event.at_s)
                timer.callbacks.append(partial(self.fire, action, state))
        for state in self.fleet.states:
            if state.worker.mtbf_s is not None:
                rng = worker_generator(self.scenario.seed, state.worker.rank, CHURN)
                self.env.process(self.random_churn(state, rng))

    def fire(
        self, action: Callable[[WorkerState], None], state: WorkerState, _event: simpy.Event
    ) -> None:
        """A scheduled ``[[event]]`` comes due (``_event``: its timer)."""
        self.unfired -= 1
        action(state)

    def count_unfired(self) -> int:
        """Scheduled event actions after the run's end were not applied: count them as ignored; return them."""
        unfired, self.unfired = self.unfired, 0
        self.counts["ignored_events"] += unfired
        return unfired

    def random_churn(self, state: WorkerState, rng) -> Generator[simpy.Event, Any, None]:
        worker = state.worker
        while True:
            if state.present:
                yield self.env.timeout(rng.exponential(worker.mtbf_s))
                self.leave(state)
            elif worker.mttr_s is None:
                return
            else:
                yield self.env.timeout(rng.exponential(worker.mttr_s))
                self.join(state)

    # --- leaving ---------------------------------------------------------------------------------

    def leave(self, state: WorkerState) -> None:
        if not state.present or self.progress.over:
            self.counts["ignored_events"] += 1
            return
        self.counts["leaves"] += 1
        self.last_leave_s = self.env.now
        state.present = False
        rank = state.worker.rank
        self.weights.holder_left(rank)
        if state.process is not None and state.process.is_alive:
            state.process.interrupt(DEPARTURE)
        for collective in list(self.exchanges.pending.values()):
            collective.arrived.discard(rank)
            if collective.in_flight and rank in collective.participants:
                self.leave_collective(collective, rank)
        timer = self.env.timeout(self.scenario.network.detection_timeout_s)
        timer.callbacks.append(lambda _event: self.detected(state))
        self.exchanges.departed(state)

    def leave_collective(self, collective: PendingCollective, rank: int) -> None:
        """A participant left a collective in flight: the ring breaks, or under ``on_departure =
        "partial"`` the members holding the state go on without it (if any is left)."""
        exchanges = collectives_of(self.exchanges)
        if self.scenario.network.on_departure == "partial" and self.any_holder(
            collective.participants, but=rank
        ):
            self.counts["dropped_members"] += 1
            exchanges.drop_member(collective, rank)
        else:
            exchanges.break_ring(collective)

    def departed(self, state: WorkerState) -> None:
        """Called in the departing worker's process: close its trace and count the lost work."""
        self.trace.close(state)
        fetching = self.downloads.pop(state.worker.rank, None)
        if fetching is not None and not fetching[0].done.triggered:
            self.network.cancel(fetching[0])
            self.waste(state.worker.rank, *fetching)
        self.stop_fetcher(state.worker.rank, DEPARTURE)
        self.lost_compute_s += state.unsynced_compute_s
        state.unsynced_compute_s = 0.0
        state.late.clear()

    def detected(self, state: WorkerState) -> None:
        """The others notice the departure: the ring re-forms without it. A worker that has returned
        meanwhile but is still fetching the weights or waiting for the next outer boundary is not in
        the ring either (waiting for it would deadlock: it waits for that ring's sync to enter)."""
        if state.worker.rank in self.fleet.running:
            return  # it is back and computing again
        self.fleet.forget(state.worker.rank)
        for collective in list(self.exchanges.pending.values()):
            collective.expected.discard(state.worker.rank)
            if collective.expected <= self.passive and collective.arrived <= self.passive:
                self.orphan(collective.arrived & self.passive, collective)
            if collective.expected or collective.arrived:  # an empty collective completes nothing
                collectives_of(self.exchanges).maybe_start(collective)
        if not self.any_holder():
            self.orphan(set(self.waiting))
        self.exchanges.noticed()  # a syncer's merges that waited for its report go ahead

    def orphan(self, ranks: set[int], collective: PendingCollective | None = None) -> None:
        """No member holding the state is left for these passive joiners: nobody can give it to them,
        so they start from the last completed outer step, as a joiner with no peer does (their
        downloads stop: they hold the state now)."""
        for rank in sorted(ranks & self.passive):
            if collective is not None:
                collective.arrived.discard(rank)
                collective.expected.discard(rank)
            self.passive.discard(rank)
            self.waiting.pop(rank, None)
            self.stop_fetcher(rank, ORPHANED)
            process = self.fleet.state_of[rank].process
            assert process is not None, "a passive joiner waits in its own process (join)"
            process.interrupt(ORPHANED)

    # --- joining ---------------------------------------------------------------------------------

    def join(self, state: WorkerState) -> None:
        if state.present or self.progress.over:
            self.counts["ignored_events"] += 1
            return
        self.counts["joins"] += 1
        state.present = True
        state.process = self.env.process(self.exchanges.joiner(state, self.joiner(state)))

    def joiner(self, state: WorkerState) -> Generator[simpy.Event, Any, None]:
        try:
            first_outer = self.progress.completed_outer
            if self.fleet.any_present_member():
                self.passive.add(state.worker.rank)
                download = self.env.process(self.download_when_quiet(state))
                self.fetchers[state.worker.rank] = download
                first_outer = yield from self.follow(state, download)
            if state.worker.rank not in self.fleet.members:  # it starts alone: no peer, or orphaned
                self.expect(state.worker.rank, first_outer)
            self.fleet.admit(state.worker.rank)
            self.start(state, first_outer)
        except simpy.Interrupt as interrupt:
            if interrupt.cause is not DEPARTURE:
                raise
            self.departed(state)

    def expect(self, rank: int, first_outer: int) -> None:
        """A worker that starts alone from ``first_outer`` holds the state: every collective already
        formed from that outer step on expects it, as one formed later does (``Fleet.admit``). Else a
        collective formed before every member left would take its joiners for orphans though members
        hold the state again (two groups at two outer steps, each waiting for the other's members), and
        the first worker back in it would run it alone while the others skip it."""
        for pending in self.exchanges.pending.values():
            if pending.key[0] >= first_outer:
                pending.expected.add(rank)

    def follow(
        self, state: WorkerState, download: simpy.Process
    ) -> Generator[simpy.Event, Any, int]:
        """A passive member of every collective the members start from now on (``enlist``), until
        the download is in at an outer boundary; returns the outer step it computes from. If every
        member holding the state is gone meanwhile, it starts at once from the last completed outer
        step, as a joiner with no peer does."""
        rank, trace, progress = state.worker.rank, self.trace, self.progress
        try:
            while self.any_holder():
                self.waiting[rank] = self.env.event()
                trace.open(state, "idle", NO_FRAGMENT, progress.completed_outer)
                collective = yield self.waiting[rank]
                trace.close(state)
                arrived_s = self.env.now
                yield collective.done
                outer_step, fragment = collective.key
                trace.wait(state, arrived_s, collective.first_started_s, fragment, outer_step)
                if rank in self.admitted:  # at the outer boundary (``outer_boundary``)
                    return self.admitted.pop(rank)
            return progress.completed_outer
        except simpy.Interrupt as interrupt:
            if interrupt.cause is not ORPHANED:
                raise
            trace.close(state)
            return progress.completed_outer
        finally:
            self.waiting.pop(rank, None)
            self.admitted.pop(rank, None)
            self.passive.discard(rank)
            self.enlisted.discard(rank)

    def stop_fetcher(self, rank: int, cause: object) -> None:
        """``rank``'s download of the state is of no use any more (it left, or starts alone): it stops."""
        self.weights.drop(rank)
        fetcher = self.fetchers.pop(rank, None)
        if fetcher is not None and fetcher.is_alive:
            fetcher.interrupt(cause)

    def holders(self) -> list[int]:
        """The present members that hold the state (not passive joiners)."""
        passive, state_of = self.passive, self.fleet.state_of
        return [
            rank for rank in self.fleet.members if rank not in passive and state_of[rank].present
        ]

    def any_holder(self, among: Iterable[int] | None = None, but: int | None = None) -> bool:
        """Whether a present member (of ``among``, ``but`` aside) holds the state; stops at the first."""
        state_of, passive = self.fleet.state_of, self.passive
        return any(
            rank != but and rank not in passive and state_of[rank].present
            for rank in (self.fleet.members if among is None else among)
        )

    def enlist(self, collective: PendingCollective) -> None:
        """A member started ``collective``'s gathering: every passive joiner waiting takes part (one
        not admitted yet only from a first fragment's collective on, as the trainer admits)."""
        self.quiet = False
        for rank, event in list(self.waiting.items()):
            if collective.key[1] != 0 and rank not in self.enlisted:
                continue
            self.enlisted.add(rank)
            del self.waiting[rank]
            collective.expected.add(rank)
            collective.arrived.add(rank)
            event.succeed(collective)

    def download_when_quiet(self, state: WorkerState) -> Generator[simpy.Event, Any, None]:
        """The global state, downloaded once no collective is pending since the last outer boundary
        (the trainer's holders serve at the same moments), from the holders ``network.weights_from``
        picks then (``weights.Downloads.send``); a part whose holder leaves is sent again at the
        next such moment, and with no holder present the download waits for the next outer
        boundary. The joiner's departure, or its start alone, ends it (``stop_fetcher``)."""
        download = self.weights.begin(state)
        try:
            while not download.complete:
                while not self.quiet:
                    yield self.next_quiet()
                changed = self.weights.send(download, self.holders())
                yield self.next_quiet() if changed is None else changed
            self.weights.finish(download)
        except simpy.Interrupt as interrupt:
            if interrupt.cause is not DEPARTURE and interrupt.cause is not ORPHANED:
                raise

    def next_quiet(self) -> simpy.Event:
        """The next outer boundary (``outer_boundary``)."""
        if self.quiet_again is None:
            self.quiet_again = self.env.event()
        return self.quiet_again

    def outer_boundary(self, collective: PendingCollective) -> None:
        """The last fragment of an outer step is applied: quiet until the next collective forms. A
        passive joiner of ``collective`` whose download is in is a member from now on, before any
        member goes on to launch the next collective (which must then wait for it): its own process,
        resumed later, would be too late for a member that launches at once (eager updates do)."""
        for rank in sorted(collective.arrived & self.passive):
            fetcher = self.fetchers.get(rank)
            if fetcher is not None and fetcher.triggered:
                self.admit(rank, collective.key[0] + 1)
        self.quiet = True
        if self.quiet_again is not None:
            self.quiet_again.succeed()
            self.quiet_again = None

    def admit(self, rank: int, first_outer: int) -> None:
        """A joiner becomes a member that computes from ``first_outer``, or past the last outer step
        whose collective has started without it: it is expected in every collective from there on,
        those already formed (a member launches the next exchange before this one ends) included."""
        pending_collectives = self.exchanges.pending.values()
        started = [
            pending.key[0] + 1
            for pending in pending_collectives
            if pending.first_started_s is not None
        ]
        first_outer = max([first_outer, *started])
        self.fleet.admit(rank)
        self.passive.discard(rank)  # it holds the state: a holder from now on
        for pending in pending_collectives:
            if pending.key[0] >= first_outer:
                pending.expected.add(rank)
        self.admitted[rank] = first_outer

    def fetch(
        self, state: WorkerState, download: Any, outer_step: int
    ) -> Generator[simpy.Event, Any, None]:
        """Wait for a download to a worker, begun now; a departure meanwhile cancels it (see
        ``departed``)."""
        self.downloads[state.worker.rank] = (download, self.env.now, outer_step)
        yield download.done
        del self.downloads[state.worker.rank]

    def waste(self, rank: int, download: Any, started_s: float, outer_step: int) -> None:
        """A fetch to ``rank`` that stops now is thrown away: a wasted row with what it moved
        (counted as its comm row would be: the bytes the worker received)."""
        now = self.env.now
        island = self.fleet.workers[rank].island
        moved = download.moved_bytes(now)
        self.trace.add(started_s, now, rank, island, WASTED, moved, NO_FRAGMENT, outer_step)

    def close(self) -> None:
        """The run is over: a fetch or a download of the state still in flight is never used."""
        for rank, fetching in self.downloads.items():
            if not fetching[0].done.triggered:
                self.waste(rank, *fetching)
        self.weights.close()
