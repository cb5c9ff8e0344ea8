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
from typing import TYPE_CHECKING, Any, Generator

import simpy

from islands.scenarios import Scenario, Worker
from islands.schedules import SyncPoint
from islands.trace import NO_FRAGMENT, Row

from .collectives import PendingCollective, copy_leg

if TYPE_CHECKING:
    from .engine import Simulation
    from .workers import WorkerState

LATE = object()  # interrupt cause: the deadline passed before this worker reached the barrier


def steps_scales(scenario: Scenario, workers: list[Worker]) -> list[float]:
    """Per worker, inner steps done per scheduled step: 1, or under adaptive H floor(H*slowest/own)/H."""
    if scenario.schedule.barrier != "adaptive":
        return [1.0] * len(workers)
    h = scenario.schedule.inner_steps
    slowest_s = max(worker.step_time_s for worker in workers)
    return [max(1, math.floor(h * slowest_s / worker.step_time_s + 1e-9)) / h for worker in workers]


def on_arrival(sim: Simulation, collective: PendingCollective) -> None:
    """Under a deadline barrier, set the deadline once half the expected workers have arrived."""
    schedule = sim.scenario.schedule
    if schedule.barrier != "deadline" or collective.deadline_s is not None:
        return
    if len(collective.arrived) < math.ceil(len(collective.expected) / 2):
        return
    start_s = sim.interval_start_s
    collective.deadline_s = start_s + (1 + schedule.deadline_slack) * (sim.env.now - start_s)
    timer = sim.env.timeout(collective.deadline_s - sim.env.now)
    timer.callbacks.append(lambda _event: on_deadline(sim, collective))


def on_deadline(sim: Simulation, collective: PendingCollective) -> None:
    """Cut off the workers that have not launched the collective by its deadline. One computing its
    interval stops there (``LATE``: the engine drops the work). One not computing yet (still waiting
    for its previous exchange, or catching up on a sync it missed) is marked late and skips the
    interval when it gets to it. One that has launched but is still screening its tensor (exchange
    work) is there: the collective waits for it."""
    if collective.in_flight or collective.first_started_s is not None or collective.key not in sim.pending:
        return
    launched = {rank for rank in collective.expected if sim.state_of[rank].exchanging is collective}
    late = sorted(collective.expected - collective.arrived - launched)
    collective.expected = set(collective.arrived) | launched
    for rank in late:
        state = sim.state_of[rank]
        if state.present and state.process is not None and state.process.is_alive:
            state.late = collective
            sim.counts["dropped_deltas"] += 1
            if state.activity is not None and state.activity[0] == "compute":
                state.process.interrupt(LATE)
    sim.maybe_start(collective)


def catch_up(sim: Simulation, state: WorkerState, point: SyncPoint) -> Generator[simpy.Event, Any, None]:
    """A late worker waits for the sync it missed, then downloads the averaged pseudo-gradient."""
    collective, state.late = state.late, None
    since_s = sim.env.now
    rank, island = state.worker.rank, state.worker.island
    if not collective.done.processed:
        state.activity = ("stall", since_s, point.fragment, point.outer_step)
        yield collective.done
        sim.close_activity(state)
    download = sim.launch(copy_leg(collective.participants[0], rank, point.payload_bytes, sim.topology,
                                   sim.scenario.network))
    fetch_start_s = sim.env.now
    state.activity = ("stall", fetch_start_s, point.fragment, point.outer_step)
    yield from sim.churn.fetch(state, download)
    sim.rows.append(Row(fetch_start_s, sim.env.now, rank, island, "comm", point.payload_bytes, NO_FRAGMENT,
                     point.outer_step))
    sim.close_activity(state)
    state.position_at_apply = point.apply_step * state.steps_scale
