"""The discrete-event engine: workers compute, schedules call collectives, the network times them.

Each present worker is one SimPy process that walks its schedule's sync points. Between two points it computes
the steps in between as one timeout whose length is drawn for the whole span (a run's cost grows with the number
of syncs and fragments, not with H). At a launch point it joins the collective, after the work on the exchange
path (``network.exchange_cpu_s_per_value`` x the tensor's values: the screening of its tensor before any byte
moves), which starts when every expected participant has arrived (a ring all-reduce, or the all-gather of every
payload that ``trainer.aggregation`` = median or trimmed_mean needs: ``collectives.COLLECTIVES``); at an apply
point it waits for it to finish. Waiting for the collective to start (the members' exchange work, late
participants) is recorded as ``idle``, waiting for the transfer itself as ``stall``; a member may be done up to
``network.exchange_end_spread_s`` before the last (``collectives.end_offsets_s``). Departures and joins live in
``churn.py``; the deadline barrier and adaptive H in ``barriers.py``. An island's identical replicas run as one
worker that stands for all of them (``replicas.py``).

This module holds the process loop alone; its parts each have one job: ``fleet.Fleet`` (who is present, the
workers' states), ``exchanges.Exchanges`` (a collective per sync, staged or not, or Decoupled DiLoCo's syncer:
``syncer.Syncer``), ``tracelog.TraceLog`` (the rows), ``progress.Progress`` (the completed outer steps and the
run's end); churn, failures and the barrier each take the parts they use.
"""

from __future__ import annotations

import math
from collections.abc import Generator
from typing import Any

import simpy

from islands.schedules import SyncPoint
from islands.schedules.gather import RING
from islands.summary import Columns, totals_of_columns
from islands.trace import NO_FRAGMENT

from ..budget import Budget, horizon_reason
from ..network.collectives import PendingCollective, outer_step_s
from ..network.flows import make_network
from ..network.staged import STAGED
from ..played import Played, counts_for, peak_gbps
from ..setup import RunSetup
from ..workers import LAUNCH, WorkerState, sync_actions
from . import barriers
from .busy import Busy
from .churn import DEPARTURE, Churn
from .context import RunContext
from .endings import event_limit_error, everyone_gone_reason
from .environment import CountingEnvironment, EventLimitReached
from .exchanges import Collectives, Exchanges, GatherCollectives, StagedCollectives
from .failures import PAUSE, STOP, Failures
from .progress import Progress
from .syncer import Syncer
from .tracelog import TraceLog

EVENTS = "events"


class Simulation:
    """One event run of one setup (``setup.RunSetup``). Build it, call ``play()`` once."""

    def __init__(self, setup: RunSetup, budget: Budget):
        self.scenario = scenario = setup.scenario
        self.schedule = setup.schedule
        self.network_model = setup.network_model
        self.budget = budget
        self.env = env = CountingEnvironment(setup.max_events)
        self.topology = setup.topology
        self.network = network = make_network(self.network_model, env, setup.tracks_links)
        self.fleet = fleet = setup.fleet()
        self.horizon_reached = False
        self.incomplete_reason: str | None = None
        self.trace = trace = TraceLog(env)
        self.progress = progress = Progress(env, setup.synced_outer_steps, fleet.state_of.keys())
        context = RunContext(
            env,
            scenario,
            self.schedule,
            network,
            setup.topology,
            fleet,
            progress,
            trace,
            self.start_worker,
            setup.last_fragment,
        )
        self.exchanges = exchanges = exchanges_of_schedule(context)
        trace.wait_started_s = exchanges.started_s
        self.churn = Churn(context, exchanges)
        self.failures = Failures(context, exchanges, self.churn)
        self.barrier = barriers.Barrier(context, exchanges, self.churn.fetch)
        exchanges.connect(self.churn.enlist, self.barrier.on_arrival, self.outer_step_done)
        self.busy = Busy(env, scenario, exchanges, self.failures, fleet)

    # --- running ---------------------------------------------------------------------------------

    def play(self) -> Played:
        for state in self.fleet.states:
            if state.worker.present:
                state.present = True
                self.fleet.admit(state.worker.rank)
                self.start_worker(state, 0)
        self.churn.schedule()
        if self.budget.horizon_s is not None:
            self.env.process(self.stop_at_horizon(self.budget.horizon_s))
        try:
            self.env.run(until=self.progress.finished)
        except EventLimitReached:
            raise event_limit_error(
                self.progress, self.scenario, self.env.max_events, self.budget.events
            ) from None
        except RuntimeError:
            if self.env.peek() != math.inf:
                raise
            self.incomplete_reason = everyone_gone_reason(
                self.progress, self.scenario, self.fleet, self.churn.last_leave_s
            )
        after_end = self.churn.count_unfired()
        self.trace.close_all(self.fleet.states)
        self.exchanges.close()
        self.churn.close()
        return self.played(after_end)

    def played(self, events_after_end: int) -> Played:
        """What the run gathered: its totals from its rows (``summary.totals_of_columns``)."""
        self.network.close()
        transfers, rows = self.network.carried, self.trace.rows
        totals, wall_time_s, durations, span_counts = totals_of_columns(
            Columns.of_rows(rows), not self.schedule.coupled, self.fleet.replica_counts
        )
        progress = self.progress
        counts = {**self.churn.counts, **self.failures.counts, **self.exchanges.counts}
        return Played(
            player=EVENTS,
            totals=totals,
            wall_time_s=wall_time_s,
            sync_durations_s=durations,
            sync_counts=span_counts,
            outer_steps=self.scenario.schedule.outer_steps
            if progress.complete
            else progress.completed_outer,
            peak_gbps=peak_gbps(transfers, self.topology),
            merged_steps={state.worker.rank: state.merged_steps for state in self.fleet.states},
            counts=counts_for(self.schedule.coupled, **counts),
            row_source=lambda: rows,
            transfer_source=lambda: transfers,
            lost_compute_s=self.churn.lost_compute_s + self.failures.lost_compute_s,
            dropped_compute_s=self.barrier.dropped_compute_s,
            dropped_deltas=self.barrier.counts["dropped_deltas"],
            horizon_reached=self.horizon_reached,
            incomplete_reason=self.incomplete_reason,
            events=self.env.events_processed,
            events_after_end=events_after_end,
        )

    def stop_at_horizon(self, horizon_s: float) -> Generator[simpy.Event, Any, None]:
        """Endless churn can keep a run from ever finishing: stop at the horizon and say so."""
        yield self.env.timeout(horizon_s)
        if not self.progress.over:
            self.horizon_reached = True
            self.incomplete_reason = horizon_reason(
                self.progress.completed_outer, self.scenario, horizon_s
            )
            self.progress.finish()

    def start_worker(self, state: WorkerState, first_outer: int) -> None:
        position = (
            first_outer * self.schedule.period_steps(self.scenario.schedule) * state.steps_scale
        )
        state.position_at_apply = position
        state.unsynced_compute_s = 0.0
        state.exchanging = None
        self.fleet.running.add(state.worker.rank)
        state.process = self.env.process(self.worker_process(state, first_outer, position))

    def worker_process(
        self, state: WorkerState, first_outer: int, position: float
    ) -> Generator[simpy.Event, Any, None]:
        """Walk the schedule's launches and applies in the order the worker meets them; an exchange may
        stay in flight across later launches (``sync_actions``)."""
        joined: dict[tuple[int, int], Any] = {}
        try:
            for action, point in sync_actions(
                self.schedule.sync_points(self.scenario, first_outer)
            ):
                key = (point.outer_step, point.fragment)
                if action is LAUNCH:
                    launch = point.launch_step * state.steps_scale
                    position = yield from self.compute(state, position, launch, point.outer_step)
                    if point.outer_step in state.late:
                        yield from self.barrier.catch_up(state, point)
                        position = point.apply_step * state.steps_scale
                    else:
                        joined[key] = self.exchanges.join(state, point)
                elif key in joined:
                    apply = point.apply_step * state.steps_scale
                    position = yield from self.compute(state, position, apply, point.outer_step)
                    yield from self.wait(state, joined.pop(key), point)
                    self.applied(state, position)
                    self.exchanges.applied(state, point)
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
        self.fleet.running.discard(state.worker.rank)
        self.maybe_finish()

    def maybe_finish(self) -> None:
        """The run ends once its last outer step is complete and no worker runs, whichever comes last:
        with an end spread every worker may be done with the last collective, and stopped, before it
        completes (its last member to finish being a joiner that does not compute yet)."""
        if self.progress.complete and not self.fleet.running:
            self.progress.finish()

    def outer_step_done(self, collective: PendingCollective) -> None:
        """``collective`` carried the last fragment of its outer step."""
        self.progress.outer_step_done(collective.key[0])
        self.churn.outer_boundary(collective)
        self.maybe_finish()

    def compute(
        self, state: WorkerState, position: float, target: float, outer_step: int
    ) -> Generator[simpy.Event, Any, float]:
        """Compute from step ``position`` to ``target`` in one timeout; return the new position.
        A deadline barrier may cut it short (``barriers.LATE``): the work done so far is dropped. A
        chip failure under an elastic schedule pauses it (``failures.PAUSE``): the worker re-forms
        without the chip, then computes the rest at its reduced rate; its exchanges slow it (``busy``)."""
        steps = target - position
        if (
            outer_step in state.late
        ):  # cut off before it began the interval (``Barrier.on_deadline``)
            return position
        trace, failures, busy, rank = self.trace, self.failures, self.busy, state.worker.rank
        while steps > 0:
            trace.open(state, "compute", NO_FRAGMENT, outer_step)
            span = busy.start(rank, state.clock.duration_s(steps) * failures.slowdown(state))
            failures.arm(state, span.wall_left_s)
            try:
                yield span.done
                steps = 0
            except simpy.Interrupt as interrupt:
                span.stop()
                if interrupt.cause is PAUSE:
                    steps -= steps * span.done_fraction
                elif interrupt.cause is not barriers.LATE:
                    raise
                else:
                    trace.close(state)
                    self.barrier.drop(state)
                    return position
            finally:
                busy.stop(rank)
                failures.disarm(state)
            trace.close(state)
            if steps > 0:
                yield from failures.reform(state, outer_step)
        return max(position, target)

    def wait(
        self, state: WorkerState, exchange: Any, point: SyncPoint
    ) -> Generator[simpy.Event, Any, None]:
        """Wait for the worker's own end of ``exchange`` (calls that wait for their buckets need the end
        of its compute: ``backward_done``), then its outer step (a ``stall``); its exchanges record
        the wait's rows."""
        arrived_s, outer_s = self.env.now, outer_step_s(self.scenario, point.values)
        self.exchanges.backward_done(state, exchange)
        own_end = self.exchanges.own_end(state.worker.rank, exchange)
        if not own_end.processed or outer_s:
            self.trace.open(state, "wait", point.fragment, point.outer_step)
            if not own_end.processed:
                yield own_end
            if outer_s > 0:
                yield self.env.timeout(outer_s)
            self.trace.cancel(state)
        self.exchanges.record_wait(state, arrived_s, exchange, point)

    def applied(self, state: WorkerState, position: float) -> None:
        """The worker's work up to ``position`` is merged into the global model."""
        state.merged_steps += position - state.position_at_apply
        state.position_at_apply = position
        state.unsynced_compute_s = 0.0


def exchanges_of_schedule(context: RunContext) -> Exchanges:
    """A collective per sync (a ring, or staged), or for a schedule without one Decoupled DiLoCo's syncer."""
    if not context.schedule.coupled:
        return Syncer(context)
    network = context.scenario.network
    if network.gather != RING:
        return GatherCollectives(context)
    kind = StagedCollectives if network.collective in STAGED else Collectives
    return kind(context)
