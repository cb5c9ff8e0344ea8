"""The discrete-event engine: workers compute, schedules call collectives, the network times them.

Each present worker is one SimPy process that walks its schedule's sync points. Between two points it
computes the steps in between as one timeout whose length is drawn for the whole span (a run's cost
grows with the number of syncs and fragments, not with H). At a launch point it joins the collective,
after the work on the exchange path (``network.exchange_cpu_s_per_value`` x the tensor's values:
the screening of its tensor before any byte moves), which starts when every expected participant has
arrived (a ring all-reduce, or the all-gather of every payload that ``trainer.aggregation`` = median
or trimmed_mean needs: ``collectives.COLLECTIVES``); at an apply point it waits for it to finish.
Waiting for the collective to start (the members' exchange work, late participants) is recorded as
``idle``, waiting for the transfer itself as ``stall``; a member may be done up to
``network.exchange_end_spread_s`` before the last (``collectives.end_offsets_s``). Departures and
joins live in ``churn.py``; the deadline barrier and adaptive H in ``barriers.py``. An island's
identical replicas run as one worker that stands for all of them (``replicas.py``).
"""

from __future__ import annotations

import gc
import math
from dataclasses import replace
from typing import Any, Callable, Generator

import simpy

from islands.scenarios import Scenario
from islands.schedules import SyncPoint, schedule_of
from islands.trace import NO_FRAGMENT, Row

from . import barriers, budget, lockstep, one_learner, replicas
from .churn import DEPARTURE, Churn
from .collectives import COLLECTIVES, Leg, PendingCollective, RingCollective, end_offsets_s, ring_leg
from .compute import step_clock
from .failures import PAUSE, STOP, Failures
from .links import Transfer
from .network import make_network
from .result import SimResult, lockstep_result, result_of
from .staged import STAGED, StagedCollective
from .syncer import Syncer
from .topology import Topology
from .workers import LAUNCH, WorkerState, sync_actions


RINGS_KEPT = 64  # rings (membership and payload) kept built at once


class EventLimitReached(Exception):
    """The run processed more events than it may (``--max-events``)."""


class CountingEnvironment(simpy.Environment):
    """A SimPy environment that counts the events it processes and stops past ``max_events``."""

    def __init__(self, max_events: float = math.inf) -> None:
        super().__init__()
        self.events_processed = 0
        self.max_events = max_events

    def step(self) -> None:
        self.events_processed += 1
        if self.events_processed > self.max_events:
            raise EventLimitReached
        super().step()


def network_model_for(scenario: Scenario) -> str:
    """The scenario's network model; ``auto`` takes the flow model where transfers may share links."""
    if scenario.network.model != "auto":
        return scenario.network.model
    overlap = (schedule_of(scenario).transfers_may_overlap(scenario.schedule) or scenario.has_churn()
               or scenario.has_failures() or scenario.network.collective == "tree")
    return "flow" if overlap or scenario.schedule.barrier == "deadline" else "alpha-beta"


class Simulation:
    """One run of one scenario. Build it, call ``run()`` once."""

    def __init__(self, scenario: Scenario, max_events: float = budget.DEFAULT_MAX_EVENTS,
                 group_replicas: bool = True, arrays: bool = True):
        self.scenario = scenario
        self.schedule = schedule_of(scenario)
        self.lockstep = arrays and lockstep.applies(scenario, self.schedule.coupled)
        self.budget = lockstep.guard(scenario, max_events) if self.lockstep else budget.guard(scenario, max_events)
        self.group_replicas = group_replicas
        self.env = CountingEnvironment(max_events)
        self.workers = scenario.workers()
        self.network_model = network_model_for(scenario)
        groups = replicas.groups(scenario, self.workers, group_replicas)
        self.replica_counts = {worker.rank: count for worker, count in groups}
        self.grouped = len(groups) < len(self.workers)  # some worker stands for several
        self.topology = Topology.of(scenario, [worker for worker, _ in groups])
        self.network = make_network(self.network_model, self.env, self.topology.has_buckets())
        scales = barriers.steps_scales(scenario, self.workers)
        self.states = [WorkerState(w, step_clock(w, scenario.seed), scales[w.rank], count) for w, count in groups]
        self.state_of = {state.worker.rank: state for state in self.states}
        self.members: set[int] = set()
        self.pending: dict[tuple[int, int], PendingCollective] = {}
        self.rings: dict[tuple, tuple[RingCollective, Leg]] = {}
        self.last_fragment = self.schedule.fragments(scenario.schedule) - 1
        self.completed_outer = 0
        self.interval_start_s = 0.0
        self.running: set[int] = set()
        self.finished = self.env.event()
        self.horizon_reached = False
        self.incomplete_reason: str | None = None
        self.rows: list[Row] = []
        self.counts = {"dropped_deltas": 0}
        self.dropped_compute_s = 0.0
        self.churn = Churn(self)
        self.failures = Failures(self)
        self.syncer = None if self.schedule.coupled else Syncer(self)
        self.one_learner = arrays and one_learner.applies(self)  # played without events (``one_learner.py``)

    # --- running ---------------------------------------------------------------------------------

    def run(self) -> SimResult:
        """Play the scenario to its end. Python's cyclic garbage collector is off meanwhile: a run
        allocates millions of events and rows and frees them by reference counting alone, and
        collections scanning the ever larger heap made a run's time grow faster than its size (a
        fleet of 2,000 islands under churn: 25% of the time, the same peak memory without them)."""
        collecting = gc.isenabled()
        gc.disable()
        try:
            return self.play()
        finally:
            if collecting:
                gc.enable()

    def play(self) -> SimResult:
        if self.lockstep:
            return lockstep_result(self, self.replayed_rows)
        if self.one_learner and one_learner.play(self):
            return result_of(self)
        for state in self.states:
            if state.worker.present:
                state.present = True
                self.members.add(state.worker.rank)
                self.start_worker(state, first_outer=0)
        self.churn.schedule()
        if self.budget.horizon_s is not None:
            self.env.process(self.stop_at_horizon(self.budget.horizon_s))
        try:
            self.env.run(until=self.finished)
        except EventLimitReached:
            raise self.event_limit_error() from None
        except RuntimeError:
            if self.env.peek() != math.inf:
                raise
            self.incomplete_reason = self.everyone_gone_reason()
        after_end = self.churn.count_unfired()
        self.close_open_activities()
        return replace(result_of(self), events_after_end=after_end)

    def replayed_rows(self) -> list[Row]:
        """A lockstep run's rows, played again with the same draws (``lockstep.py``)."""
        lockstep.check_rows(self)
        replay = Simulation(self.scenario, self.env.max_events, self.group_replicas)
        run = lockstep.Lockstep(replay, rows=[])
        run.play()
        return run.rows

    def stop_at_horizon(self, horizon_s: float) -> Generator[simpy.Event, Any, None]:
        """Endless churn can keep a run from ever finishing: stop at the horizon and say so."""
        yield self.env.timeout(horizon_s)
        if not self.finished.triggered:
            self.horizon_reached = True
            self.incomplete_reason = (
                f"stopped at the horizon of {horizon_s:.4g} s ({budget.HORIZON_FACTOR}x its churn-free bound) "
                f"with {self.completed_outer} of {self.scenario.schedule.outer_steps} outer steps done: "
                f"churn keeps the run from finishing; raise {budget.churniest_key(self.scenario)}")
            self.finished.succeed()

    def everyone_gone_reason(self) -> str:
        waiting = [self.state_of[rank].worker.name for rank in sorted(self.running)]
        if waiting:
            return (f"the run stalled at {self.env.now:.4g} s after {self.completed_outer} of "
                    f"{self.scenario.schedule.outer_steps} outer steps: nothing was left to happen while "
                    f"{', '.join(waiting)} still waited (a simulator bug: please report it)")
        key = budget.churniest_key(self.scenario)
        advice = f"raise {key} or give that island mttr_s" if key != "event" else "leave someone in the run"
        gone = [state.worker.name for state in self.states if not state.present]
        if len(gone) < len(self.states):
            return (f"{', '.join(gone)} left by {self.churn.last_leave_s:.4g} s and did not return, after "
                    f"{self.completed_outer} of {self.scenario.schedule.outer_steps} outer steps (a run counts "
                    f"its laggard's): {advice}")
        return (f"every worker had left by {self.churn.last_leave_s:.4g} s and none returns, after "
                f"{self.completed_outer} of {self.scenario.schedule.outer_steps} outer steps: {advice}")

    def event_limit_error(self) -> budget.BudgetExceeded:
        return budget.BudgetExceeded(self.scenario.source, "schedule.outer_steps",
                                     f"the run passed the limit of {self.env.max_events:g} simulator events at "
                                     f"{self.env.now:.4g} s with {self.completed_outer} of "
                                     f"{self.scenario.schedule.outer_steps} outer steps done (estimated "
                                     f"{self.budget.events:.3g}): lower it, or raise --max-events")

    def start_worker(self, state: WorkerState, first_outer: int) -> None:
        position = first_outer * self.schedule.period_steps(self.scenario.schedule) * state.steps_scale
        state.position_at_apply = position
        state.unsynced_compute_s = 0.0
        state.exchanging = None
        self.running.add(state.worker.rank)
        state.process = self.env.process(self.worker_process(state, first_outer, position))

    def worker_process(self, state: WorkerState, first_outer: int,
                       position: float) -> Generator[simpy.Event, Any, None]:
        """Walk the schedule's launches and applies in the order the worker meets them; an exchange may
        stay in flight across later launches (``sync_actions``)."""
        joined: dict[tuple[int, int], PendingCollective] = {}
        try:
            for action, point in sync_actions(self.schedule.sync_points(self.scenario, first_outer)):
                key = (point.outer_step, point.fragment)
                if action is LAUNCH:
                    launch = point.launch_step * state.steps_scale
                    position = yield from self.compute(state, position, launch, point.outer_step)
                    if point.outer_step in state.late:
                        yield from barriers.catch_up(self, state, point)
                        position = point.apply_step * state.steps_scale
                    else:
                        joined[key] = self.join(state, point)
                elif key in joined:
                    apply = point.apply_step * state.steps_scale
                    position = yield from self.compute(state, position, apply, point.outer_step)
                    yield from self.wait(state, joined.pop(key), point)
                    self.applied(state, position)
                    if self.syncer is not None and point.fragment == self.last_fragment:
                        self.syncer.learner_done(state, point.outer_step)
        except simpy.Interrupt as interrupt:
            if interrupt.cause is DEPARTURE:
                self.churn.departed(state)
            elif interrupt.cause is STOP:
                self.failures.stopped(state)
            else:
                raise
        self.stopped(state)

    def stopped(self, state: WorkerState) -> None:
        """A worker's process ended (schedule done, or departed): the run ends with the last of them."""
        self.running.discard(state.worker.rank)
        self.maybe_finish()

    def maybe_finish(self) -> None:
        """The run ends once its last outer step is complete and no worker runs, whichever comes last:
        with an end spread every worker may be done with the last collective, and stopped, before it
        completes (its last member to finish being a joiner that does not compute yet)."""
        if self.completed_outer == self.schedule.synced_outer_steps(self.scenario.schedule) and not self.running:
            if not self.finished.triggered:
                self.finished.succeed()

    def compute(self, state: WorkerState, position: float, target: float,
                outer_step: int) -> Generator[simpy.Event, Any, float]:
        """Compute from step ``position`` to ``target`` in one timeout; return the new position.
        A deadline barrier may cut it short (``barriers.LATE``): the work done so far is dropped. A
        chip failure under an elastic schedule pauses it (``failures.PAUSE``): the worker re-forms
        without the chip, then computes the rest at its reduced rate."""
        steps = target - position
        if outer_step in state.late:  # cut off before it began the interval (``barriers.on_deadline``)
            return position
        while steps > 0:
            state.activity = ("compute", self.env.now, NO_FRAGMENT, outer_step)
            started_s, duration_s = self.env.now, state.clock.duration_s(steps) * self.failures.slowdown(state)
            self.failures.arm(state, duration_s)
            try:
                yield self.env.timeout(duration_s)
                steps = 0
            except simpy.Interrupt as interrupt:
                if interrupt.cause is PAUSE:
                    steps -= steps * (self.env.now - started_s) / duration_s
                elif interrupt.cause is not barriers.LATE:
                    raise
                else:
                    self.close_activity(state)
                    self.dropped_compute_s += state.unsynced_compute_s
                    state.unsynced_compute_s = 0.0
                    return position
            finally:
                self.failures.disarm(state)
            self.close_activity(state)
            if steps > 0:
                yield from self.failures.reform(state, outer_step)
        return max(position, target)

    def join(self, state: WorkerState, point: SyncPoint) -> PendingCollective:
        if self.syncer is not None:
            return self.syncer.report(state, point)
        key = (point.outer_step, point.fragment)
        collective = self.pending.get(key)
        if collective is None:
            collective = PendingCollective(key, point.payload_bytes, COLLECTIVES[point.collective], set(self.members),
                                           self.env.event())
            self.pending[key] = collective
            self.churn.enlist(collective)
        collective.expected.add(state.worker.rank)
        if self.scenario.network.exchange_end_spread_s > 0:
            collective.member_ends.setdefault(state.worker.rank, self.env.event())
        work_s = self.scenario.network.exchange_cpu_s_per_value * point.values
        previous, state.exchanging = state.exchanging, collective
        process = state.process
        if previous is not None:
            self.after_own_end(previous, state.worker.rank, lambda: self.prepare(state, process, collective, work_s))
        else:
            self.prepare(state, process, collective, work_s)
        return collective

    def after_own_end(self, collective: PendingCollective, rank: int, action: Callable[[], None]) -> None:
        """Run ``action`` once ``rank`` is done with ``collective`` (``own_end``)."""
        own_end = self.own_end(rank, collective)
        if own_end.triggered:
            action()
        else:
            own_end.callbacks.append(lambda _event: action())

    def own_end(self, rank: int, collective: PendingCollective) -> simpy.Event:
        """When ``rank`` is done with ``collective``: under an end spread its own event, which fires up to
        the spread before the transfer ends (``collectives.end_offsets_s``); else, and always for the
        decoupled syncer's reports, the collective's end."""
        if self.syncer is not None:
            return collective.done
        return collective.member_ends.get(rank, collective.done)

    def prepare(self, state: WorkerState, process: simpy.Process | None, collective: PendingCollective,
                work_s: float) -> None:
        """The worker's exchange thread takes up ``collective``: its exchanges run one at a time, in
        launch order, as the trainer's single exchange thread runs them. It screens and encodes the
        tensor (``work_s``), then arrives."""
        if work_s > 0:
            worked = self.env.timeout(work_s)
            worked.callbacks.append(lambda _event: self.arrive_after_work(state, process, collective))
        else:
            self.arrive_after_work(state, process, collective)

    def arrive(self, state: WorkerState, collective: PendingCollective) -> None:
        """The worker's tensor is ready: it is in the collective, which starts with the last one in."""
        collective.arrived.add(state.worker.rank)
        barriers.on_arrival(self, collective)
        self.maybe_start(collective)

    def arrive_after_work(self, state: WorkerState, process: simpy.Process | None,
                          collective: PendingCollective) -> None:
        """The exchange work (done beside the worker's compute, on the exchange thread) is over:
        arrive, unless the worker departed meanwhile or the collective went on without it."""
        still_expected = state.worker.rank in collective.expected and self.pending.get(collective.key) is collective
        if state.present and state.process is process and still_expected:
            self.arrive(state, collective)

    def maybe_start(self, collective: PendingCollective) -> None:
        if collective.ready():
            self.start(collective)

    def start(self, collective: PendingCollective) -> None:
        network = self.scenario.network
        participants = self.topology.ring(collective.arrived, network.ring_order)
        collective.participants = participants
        collective.attempt += 1
        collective.dropped_s, collective.hold_until_s, collective.moved_s = {}, 0.0, None  # this attempt's own
        collective.started_at_s = self.env.now
        if collective.first_started_s is None:
            collective.first_started_s = self.env.now
        attempt = collective.attempt
        if network.collective in STAGED:
            staged = STAGED[network.collective](participants, collective.payload_bytes, self.topology, network)
            self.start_stage(collective, staged.stages[0])  # in flight from now, as a ring is
            self.env.process(self.run_stages(collective, staged, attempt))
            return
        ring, leg = self.ring_and_leg(collective.ring, participants, collective.payload_bytes)
        transfer = self.launch(leg)
        collective.transfers = [transfer]
        bytes_sent = dict.fromkeys(participants, ring.bytes_per_worker)
        transfer.done.callbacks.append(lambda _event: self.finish(collective, bytes_sent, attempt))
        if network.exchange_end_spread_s <= 0:
            return
        outer_step, fragment = collective.key
        offsets = end_offsets_s(participants, network.exchange_end_spread_s,
                                outer_step * (self.last_fragment + 1) + fragment)
        for rank, offset_s in offsets.items():
            if offset_s > 0:
                self.network.before_end(transfer, offset_s,
                                        lambda rank=rank: self.member_done(collective, rank, attempt))

    def ring_and_leg(self, kind: type[RingCollective], participants: tuple[int, ...],
                     payload_bytes: float) -> tuple[RingCollective, Leg]:
        """The ring over ``participants`` and its transfer, built once per membership and payload (every
        fragment of a schedule has one of a few payloads); under churn, whose memberships seldom
        return, only the last ``RINGS_KEPT`` are kept."""
        key = (kind, participants, payload_bytes)
        if key not in self.rings:
            if len(self.rings) >= RINGS_KEPT:
                self.rings.clear()
            counts = tuple(map(self.replica_counts.__getitem__, participants)) if self.grouped else ()
            ring = kind(participants, payload_bytes, counts if counts and max(counts) > 1 else ())
            self.rings[key] = ring, ring_leg(ring, self.topology, self.scenario.network)
        return self.rings[key]

    def run_stages(self, collective: PendingCollective, staged: StagedCollective,
                   attempt: int) -> Generator[simpy.Event, Any, None]:
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
        collective.transfers = [self.launch(leg) for leg in stage]

    def launch(self, leg: Leg) -> Transfer:
        """Put one transfer on the network."""
        return self.network.transfer(leg.links, leg.bytes_per_link, leg.latency_s, leg.cap_bytes_per_s,
                                     leg.narrowest_bytes_per_s)

    def member_done(self, collective: PendingCollective, rank: int, attempt: int) -> None:
        """``rank`` has everything it needs from ``collective`` before the last member has."""
        own_end = collective.member_ends.get(rank)
        if attempt == collective.attempt and own_end is not None and not own_end.triggered:
            collective.member_end_s[rank] = self.env.now
            own_end.succeed()

    def drop_member(self, collective: PendingCollective, rank: int) -> None:
        """``on_departure = "partial"``: ``rank`` left mid-flight; the others go on without its share and
        finish no sooner than they notice that it is missing."""
        collective.dropped_s[rank] = self.env.now
        notice_s = self.env.now + self.scenario.network.detection_timeout_s
        collective.hold_until_s = max(collective.hold_until_s, notice_s)

    def break_ring(self, collective: PendingCollective) -> None:
        """A participant departed mid-transfer (or a failure stopped the run): the collective's transfers
        stop; it restarts once that is detected."""
        for transfer in collective.transfers:
            self.network.cancel(transfer)
        collective.transfers = []

    def finish(self, collective: PendingCollective, bytes_sent: dict[int, float], attempt: int) -> None:
        """The collective is done (or, with a dropped member, its bytes are through and it waits for the
        others to notice): a comm row per participant with the bytes it sent; a dropped member's row
        ends at its departure, with the share of its bytes sent by then."""
        if attempt != collective.attempt or not collective.transfers:
            return
        if collective.moved_s is None:
            collective.moved_s = self.env.now
        if collective.hold_until_s > self.env.now:
            timer = self.env.timeout(collective.hold_until_s - self.env.now)
            timer.callbacks.append(lambda _event: self.finish(collective, bytes_sent, attempt))
            return
        outer_step, fragment = collective.key
        started_s, moved_s = collective.started_at_s, collective.moved_s
        for rank, sent in bytes_sent.items():
            end_s = max(started_s, collective.member_end_s.get(rank, self.env.now))  # a restart
            if rank in collective.dropped_s:
                end_s = collective.dropped_s[rank]
                sent *= min(1.0, (end_s - started_s) / (moved_s - started_s)) if moved_s > started_s else 1.0
            self.rows.append(Row(started_s, end_s, rank, self.workers[rank].island, "comm", sent, fragment, outer_step))
        for own_end in collective.member_ends.values():
            if not own_end.triggered:
                own_end.succeed()
        del self.pending[collective.key]
        collective.done.succeed()
        if fragment == self.last_fragment:
            self.outer_step_completed(collective)

    def outer_step_completed(self, collective: PendingCollective) -> None:
        """``collective`` carried the last fragment of its outer step."""
        self.completed_outer = collective.key[0] + 1
        self.interval_start_s = self.env.now
        self.churn.outer_boundary(collective)
        self.maybe_finish()

    def wait(self, state: WorkerState, collective: PendingCollective,
             point: SyncPoint) -> Generator[simpy.Event, Any, None]:
        arrived_s = self.env.now
        own_end = self.own_end(state.worker.rank, collective)
        if not own_end.processed:
            state.activity = ("wait", arrived_s, point.fragment, point.outer_step)
            yield own_end
            state.activity = None
        if self.syncer is not None:
            self.syncer.record_wait(state, arrived_s, collective)
        else:
            self.record_wait(state, arrived_s, collective.first_started_s, point.fragment, point.outer_step)

    def record_wait(self, state: WorkerState, since_s: float, started_s: float | None, fragment: int,
                    outer_step: int) -> None:
        """Waiting before the collective started is ``idle`` (others are late), after it ``stall``."""
        rank, island, now = state.worker.rank, state.worker.island, self.env.now
        boundary = now if started_s is None else min(now, max(since_s, started_s))
        if boundary > since_s:
            self.rows.append(Row(since_s, boundary, rank, island, "idle", 0.0, fragment, outer_step))
        if now > boundary:
            self.rows.append(Row(boundary, now, rank, island, "stall", 0.0, fragment, outer_step))

    def applied(self, state: WorkerState, position: float) -> None:
        """The worker's work up to ``position`` is merged into the global model."""
        state.merged_steps += position - state.position_at_apply
        state.position_at_apply = position
        state.unsynced_compute_s = 0.0

    # --- trace -----------------------------------------------------------------------------------

    def close_activity(self, state: WorkerState) -> None:
        """Record the worker's current activity from its start to now, and clear it."""
        if state.activity is None:
            return
        kind, since_s, fragment, outer_step = state.activity
        state.activity = None
        if kind == "wait":
            collective = self.pending.get((outer_step, fragment))
            started_s = collective.first_started_s if collective else None
            self.record_wait(state, since_s, started_s, fragment, outer_step)
            return
        if self.env.now > since_s:
            self.rows.append(Row(since_s, self.env.now, state.worker.rank, state.worker.island, kind, 0.0, fragment,
                              outer_step))
        if kind == "compute":
            state.unsynced_compute_s += self.env.now - since_s

    def close_open_activities(self) -> None:
        for state in self.states:
            if state.present:
                self.close_activity(state)

def simulate(scenario: Scenario, max_events: float = budget.DEFAULT_MAX_EVENTS,
             group_replicas: bool = True, arrays: bool = True) -> SimResult:
    """Play a scenario's schedule through the discrete-event model.

    Raises ``ScenarioError`` before running when the run would need more than ``max_events`` events
    (or more time than float64 resolves), and if it passes ``max_events`` all the same.
    ``group_replicas=False`` runs every replica on its own (``replicas.py``; the same result, slower);
    ``arrays=False`` plays a lockstep run event by event (``lockstep.py``; the same result, slower,
    and its ``events`` counted: a lockstep run has none)."""
    return Simulation(scenario, max_events, group_replicas, arrays).run()
