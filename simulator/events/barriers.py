"""Barrier policies at DiLoCo's outer step: what happens to stragglers.

* ``wait`` (default): the sync starts when the slowest worker arrives; the others' wait is ``idle``.
* ``deadline``: once half the expected workers have arrived (at time t_med), the sync is due at
  interval_start + (1 + deadline_slack) * (t_med - interval_start). Workers not there by then are
  cut off: their interval's work is dropped (not merged next round), they wait for the sync, fetch
  the averaged pseudo-gradient (S bytes) from a participant, and start the next interval with
  everyone else's model. A worker that has launched (it is screening its tensor) is there; one that
  has not begun the interval (still finishing the previous sync) skips it. The summary counts
  ``dropped_deltas`` and ``dropped_compute_s``.
* ``adaptive``: heterogeneity-aware H. Each island does floor(H * slowest step time / its step time)
  inner steps per interval, so everyone reaches the barrier at about the same time and fast islands
  process more tokens (reported per island).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator
from typing import Any

import simpy

from islands.schedules import SyncPoint
from islands.trace import NO_FRAGMENT

from ..network.collectives import PendingCollective, copy_leg, launch
from ..workers import WorkerState
from .context import RunContext
from .exchanges import Exchanges, collectives_of

LATE = object()  # interrupt cause: the deadline passed before this worker reached the barrier
Fetch = Callable[[WorkerState, Any, int], Generator[simpy.Event, Any, None]]


class Barrier:
    """The outer step's barrier of one run: the deadline, and the work it drops."""

    def __init__(self, context: RunContext, exchanges: Exchanges, fetch: Fetch):
        self.env, self.scenario, self.network, self.topology = (
            context.env,
            context.scenario,
            context.network,
            context.topology,
        )
        self.fleet, self.progress, self.trace = context.fleet, context.progress, context.trace
        self.exchanges = exchanges
        self.fetch = (
            fetch  # a download to a worker that its departure cancels (``churn.Churn.fetch``)
        )
        self.counts = {"dropped_deltas": 0}
        self.dropped_compute_s = 0.0

    def on_arrival(self, collective: PendingCollective) -> None:
        """Under a deadline barrier, set the deadline once half the expected workers have arrived."""
        schedule = self.scenario.schedule
        if schedule.barrier != "deadline" or collective.deadline_s is not None:
            return
        if len(collective.arrived) < math.ceil(len(collective.expected) / 2):
            return
        start_s = self.progress.interval_start_s
        collective.deadline_s = start_s + (1 + schedule.deadline_slack) * (self.env.now - start_s)
        timer = self.env.timeout(collective.deadline_s - self.env.now)
        timer.callbacks.append(lambda _event: self.on_deadline(collective))

    def on_deadline(self, collective: PendingCollective) -> None:
        """Cut off the workers that have not launched the collective by its deadline. One computing its
        interval stops there (``LATE``: the engine drops the work, ``drop``). One not computing yet
        (still waiting for its previous exchange, or catching up on a sync it missed) is marked late
        and skips the interval when it gets to it. One that has launched but is still screening its
        tensor (exchange work) is there: the collective waits for it."""
        if (
            collective.in_flight
            or collective.first_started_s is not None
            or collective.key not in self.exchanges.pending
        ):
            return
        state_of = self.fleet.state_of
        launched = {rank for rank in collective.expected if state_of[rank].exchanging is collective}
        late = sorted(collective.expected - collective.arrived - launched)
        collective.expected = set(collective.arrived) | launched
        for rank in late:
            state = state_of[rank]
            if state.present and state.process is not None and state.process.is_alive:
                state.late[collective.key[0]] = collective
                self.counts["dropped_deltas"] += 1
                if state.activity is not None and state.activity[0] == "compute":
                    state.process.interrupt(LATE)
        collectives_of(self.exchanges).maybe_start(collective)

    def drop(self, state: WorkerState) -> None:
        """The worker was cut off computing: its work since its last applied sync is dropped."""
        self.dropped_compute_s += state.unsynced_compute_s
        state.unsynced_compute_s = 0.0

    def catch_up(self, state: WorkerState, point: SyncPoint) -> Generator[simpy.Event, Any, None]:
        """A late worker waits for the sync it missed, then downloads the averaged pseudo-gradient."""
        collective = state.late.pop(point.outer_step)
        trace = self.trace
        rank, island = state.worker.rank, state.worker.island
        if not collective.done.processed:
            trace.open(state, "stall", point.fragment, point.outer_step)
            yield collective.done
            trace.close(state)
        download = launch(
            self.network,
            copy_leg(
                collective.participants[0],
                rank,
                point.payload_bytes,
                self.topology,
                self.scenario.network,
            ),
        )
        fetch_start_s = self.env.now
        trace.open(state, "stall", point.fragment, point.outer_step)
        yield from self.fetch(state, download, point.outer_step)
        trace.add(
            fetch_start_s,
            self.env.now,
            rank,
            island,
            "comm",
            point.payload_bytes,
            NO_FRAGMENT,
            point.outer_step,
        )
        trace.close(state)
        state.position_at_apply = point.apply_step * state.steps_scale
