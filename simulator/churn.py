"""Workers that leave and join mid-run: scheduled ``[[event]]`` entries and random churn.

* Leaving: the worker stops at once. Its work since the last sync it applied is lost (counted in
  ``lost_compute_s``). It also leaves any collective it had joined; a ring in flight through it breaks
  (the transfer stops). The others notice only after ``network.detection_timeout_s``: until then
  they wait for it at the next collective (under DDP that stalls the step); on detection the ring is
  re-formed among the survivors and a broken collective restarts from scratch.
* Joining: the worker first downloads the current global weights (parameters * bytes_per_param)
  from a present peer, over the peer's uplink and its own downlink at their fair share, then waits
  for the next outer boundary (the end of a sync of the last fragment) and enters the next outer
  step. With no peer present it starts at once from the last completed outer step.
* Random churn: each worker of an island with ``mtbf_s`` stays for an exponential time of that mean,
  leaves, and returns after an exponential time of mean ``mttr_s`` (never, without ``mttr_s``). The
  draws come from the worker's own generator, seeded from the scenario's seed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Generator

import simpy

from islands.trace import NO_FRAGMENT

from .collectives import tcp_cap_bytes_per_s
from .compute import CHURN, worker_generators

if TYPE_CHECKING:
    from .engine import Simulation, WorkerState

DEPARTURE = object()  # interrupt cause: the worker left


class Churn:
    """Membership changes of one simulation."""

    def __init__(self, sim: Simulation):
        self.sim = sim
        self.waiting: list[tuple[WorkerState, simpy.Event]] = []
        self.downloads: dict[int, Any] = {}
        self.lost_compute_s = 0.0
        self.counts = {"joins": 0, "leaves": 0, "ignored_events": 0}
        self.unfired = 0  # scheduled event actions still to come
        self.last_leave_s = 0.0

    def schedule(self) -> None:
        sim = self.sim
        for event in sim.scenario.events:
            targets = [s for s in sim.states if event.island in (s.worker.name, s.worker.island)]
            action = self.leave if event.kind == "leave" else self.join
            for state in targets:
                self.unfired += 1
                timer = sim.env.timeout(event.at_s)
                timer.callbacks.append(lambda _event, state=state, action=action: self.fire(action, state))
        generators = worker_generators(sim.scenario.seed, len(sim.states), CHURN)
        for state, rng in zip(sim.states, generators):
            if state.worker.mtbf_s is not None:
                sim.env.process(self.random_churn(state, rng))

    def fire(self, action: Callable[[WorkerState], None], state: WorkerState) -> None:
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
                yield self.sim.env.timeout(rng.exponential(worker.mtbf_s))
                self.leave(state)
            elif worker.mttr_s is None:
                return
            else:
                yield self.sim.env.timeout(rng.exponential(worker.mttr_s))
                self.join(state)

    # --- leaving ---------------------------------------------------------------------------------

    def leave(self, state: WorkerState) -> None:
        sim = self.sim
        if not state.present or sim.finished.triggered:
            self.counts["ignored_events"] += 1
            return
        self.counts["leaves"] += 1
        self.last_leave_s = sim.env.now
        state.present = False
        rank = state.worker.rank
        if state.process is not None and state.process.is_alive:
            state.process.interrupt(DEPARTURE)
        for collective in list(sim.pending.values()):
            collective.arrived.discard(rank)
            if collective.in_flight and rank in collective.participants:
                sim.break_ring(collective)
        timer = sim.env.timeout(sim.scenario.network.detection_timeout_s)
        timer.callbacks.append(lambda _event: self.detected(state))

    def departed(self, state: WorkerState) -> None:
        """Called in the departing worker's process: close its trace and count the lost work."""
        sim = self.sim
        sim.close_activity(state)
        download = self.downloads.pop(state.worker.rank, None)
        if download is not None and not download.done.triggered:
            sim.network.cancel(download)
        self.waiting = [(s, admitted) for s, admitted in self.waiting if s is not state]
        self.lost_compute_s += state.unsynced_compute_s
        state.unsynced_compute_s = 0.0
        state.late = None

    def detected(self, state: WorkerState) -> None:
        """The others notice the departure: the ring re-forms without it. A worker that has returned
        meanwhile but is still fetching the weights or waiting for the next outer boundary is not in
        the ring either (waiting for it would deadlock: it waits for that ring's sync to enter)."""
        sim = self.sim
        if state.worker.rank in sim.running:
            return  # it is back and computing again
        sim.members.discard(state.worker.rank)
        for collective in list(sim.pending.values()):
            collective.expected.discard(state.worker.rank)
            sim.maybe_start(collective)

    # --- joining ---------------------------------------------------------------------------------

    def join(self, state: WorkerState) -> None:
        sim = self.sim
        if state.present or sim.finished.triggered:
            self.counts["ignored_events"] += 1
            return
        self.counts["joins"] += 1
        state.present = True
        state.process = sim.env.process(self.joiner(state))

    def joiner(self, state: WorkerState) -> Generator[simpy.Event, Any, None]:
        sim = self.sim
        try:
            peers = sorted(r for r in sim.members if sim.states[r].present)
            if peers:
                yield from self.download_weights(state, peers[0])
                admitted = sim.env.event()
                self.waiting.append((state, admitted))
                state.activity = ("idle", sim.env.now, NO_FRAGMENT, sim.completed_outer)
                yield admitted
                sim.close_activity(state)
            sim.members.add(state.worker.rank)
            sim.start_worker(state, first_outer=sim.completed_outer)
        except simpy.Interrupt as interrupt:
            if interrupt.cause is not DEPARTURE:
                raise
            self.departed(state)

    def download_weights(self, state: WorkerState, peer: int) -> Generator[simpy.Event, Any, None]:
        sim = self.sim
        rank = state.worker.rank
        latency_s = sim.latency_s[peer] + sim.latency_s[rank]
        network = sim.scenario.network
        cap = tcp_cap_bytes_per_s(network.tcp_window_bytes, network.streams, latency_s)
        weights_bytes = sim.scenario.weights_bytes
        started_s = sim.env.now
        download = sim.network.transfer((sim.uplinks[peer], sim.downlinks[rank]), weights_bytes, latency_s, cap)
        state.activity = ("stall", started_s, NO_FRAGMENT, sim.completed_outer)
        yield from self.fetch(state, download)
        sim.rows.append((started_s, sim.env.now, rank, state.worker.island, "comm", weights_bytes, NO_FRAGMENT,
                         sim.completed_outer))
        sim.close_activity(state)

    def fetch(self, state: WorkerState, download: Any) -> Generator[simpy.Event, Any, None]:
        """Wait for a download to a worker; a departure meanwhile cancels it (see ``departed``)."""
        self.downloads[state.worker.rank] = download
        yield download.done
        del self.downloads[state.worker.rank]

    def admit_joiners(self) -> None:
        """At an outer boundary, joiners that have the weights enter the next outer step."""
        sim = self.sim
        for state, admitted in self.waiting:
            sim.members.add(state.worker.rank)
            admitted.succeed()
        self.waiting = []
