"""Chip failures at fleet scale: when a worker of many chips fails, and what its failure costs.

* When. A worker of n chips with ``chip_mtbf_s`` fails at n / chip_mtbf_s per second it computes: it
  draws the compute seconds until its next interruption (exponential) from its own generator, and
  the clock runs only while it computes (interruptions strike running work; a stopped job's chips
  are not counted twice). An interruption in the middle of a compute stops it there.
* ``schedule.elastic = true`` (and every learner of a schedule without a global barrier): a worker
  of several chips re-forms without the failed one (it stops for ``network.detection_timeout_s``,
  the time to notice and re-form) and computes on at (n - down) / n of its rate until the chip is
  back ``recovery_s`` later (a compute in progress keeps its rate; the next one takes the new).
  A worker whose last chip fails departs as churn departs (``churn.py``: its work since its last
  applied sync is lost, the others notice after ``detection_timeout_s`` and shrink) and joins again
  ``recovery_s`` later, fetching the global state.
* ``schedule.elastic = false``: one failure stops every worker. The collectives in flight are
  dropped and, once the failed worker has recovered (``recovery_s``), every worker restarts from the
  last checkpoint, as the trainer resumes after a restart: every ``trainer.checkpoint_every``
  periods of ``inner_steps`` steps (0: only at the end, so from the start). The work since that
  checkpoint is lost; the stop is idle time for every worker.
"""

from __future__ import annotations

import math
from collections.abc import Generator
from typing import TYPE_CHECKING, Any

import simpy

from islands.trace import NO_FRAGMENT

from ..compute import FAILURES, worker_generator
from ..workers import WorkerState
from .churn import Churn
from .context import RunContext
from .exchanges import Exchanges, collectives_of

if TYPE_CHECKING:
    import numpy as np

STOP = object()  # interrupt cause: a failure elsewhere stopped the whole (non-elastic) run
PAUSE = object()  # interrupt cause: one of the worker's chips failed; it re-forms without it


class Failures:
    """The failure clocks of one simulation's workers and the two ways a failure plays out."""

    def __init__(self, context: RunContext, exchanges: Exchanges, churn: Churn):
        self.env, self.scenario, self.schedule, self.fleet = (
            context.env,
            context.scenario,
            context.schedule,
            context.fleet,
        )
        self.progress, self.trace, self.start = context.progress, context.trace, context.start
        self.exchanges, self.churn = exchanges, churn
        workers = self.fleet.workers
        self.rngs: dict[int, np.random.Generator] = {}
        self.chips_down = [0] * len(workers)
        self.to_failure_s = [self.draw(w.rank) for w in workers]
        self.generation = [0] * len(workers)
        self.started_s = [0.0] * len(workers)
        self.struck = [False] * len(workers)
        self.elastic = self.scenario.schedule.elastic or not self.schedule.coupled
        self.counts = {"failures": 0, "restarts": 0}
        self.lost_compute_s = 0.0
        self.stopped_since_s: float | None = None

    def draw(self, rank: int) -> float:
        """Compute seconds until the worker's next interruption, at its chips up now."""
        worker = self.fleet.workers[rank]
        rate = (
            worker.failure_rate_per_compute_s
            * (worker.chips - self.chips_down[rank])
            / worker.chips
        )
        if rate <= 0:
            return math.inf
        if rank not in self.rngs:
            self.rngs[rank] = worker_generator(self.scenario.seed, rank, FAILURES)
        return float(self.rngs[rank].exponential(1 / rate))

    # --- the clock -------------------------------------------------------------------------------

    def arm(self, state: WorkerState, duration_s: float) -> None:
        """A compute of ``duration_s`` starts now: if the worker's next interruption comes first,
        it strikes then."""
        rank = state.worker.rank
        self.generation[rank] += 1
        self.started_s[rank] = self.env.now
        if self.to_failure_s[rank] < duration_s:
            generation, process = self.generation[rank], state.process
            timer = self.env.timeout(self.to_failure_s[rank])
            timer.callbacks.append(lambda _event: self.strike(state, generation, process))

    def disarm(self, state: WorkerState) -> None:
        """The compute ended (done, or interrupted): its seconds come off the clock."""
        rank = state.worker.rank
        self.generation[rank] += 1
        if self.struck[rank]:
            self.struck[rank] = False
            self.to_failure_s[rank] = self.draw(rank)
        else:
            self.to_failure_s[rank] -= self.env.now - self.started_s[rank]

    def strike(self, state: WorkerState, generation: int, process) -> None:
        rank = state.worker.rank
        if (
            generation != self.generation[rank]
            or state.process is not process
            or self.progress.over
        ):
            return
        self.struck[rank] = True
        self.counts["failures"] += 1
        if not self.elastic:
            self.stop_all()
        elif self.chips_down[rank] + 1 < state.worker.chips:
            self.lose_chip(state)
        else:
            self.depart(state)

    # --- elastic: the worker re-forms without the chip, or leaves and returns ---------------------

    def slowdown(self, state: WorkerState) -> float:
        """Compute time per step relative to all chips up: n / (n - down)."""
        chips = state.worker.chips
        return chips / (chips - self.chips_down[state.worker.rank])

    def lose_chip(self, state: WorkerState) -> None:
        rank = state.worker.rank
        self.chips_down[rank] += 1
        assert state.process is not None, (
            "a chip fails while its worker computes, in its process (arm)"
        )
        state.process.interrupt(PAUSE)
        back = self.env.timeout(recovery_s(state))
        back.callbacks.append(lambda _event: self.chip_back(state))

    def chip_back(self, state: WorkerState) -> None:
        self.chips_down[state.worker.rank] -= 1

    def reform(self, state: WorkerState, outer_step: int) -> Generator[simpy.Event, Any, None]:
        """The worker notices the failed chip and re-forms without it (idle in the trace)."""
        self.trace.open(state, "idle", NO_FRAGMENT, outer_step)
        yield self.env.timeout(self.scenario.network.detection_timeout_s)
        self.trace.close(state)

    def depart(self, state: WorkerState) -> None:
        self.churn.leave(state)
        back = self.env.timeout(recovery_s(state))
        back.callbacks.append(lambda _event: None if self.progress.over else self.churn.join(state))

    # --- non-elastic: everyone stops, then restarts from the last checkpoint -----------------------

    def checkpoint_outer(self) -> int:
        """The last checkpointed outer step at or before the last completed one."""
        schedule = self.scenario.schedule
        every = self.scenario.trainer.checkpoint_every
        if every == 0:
            return 0
        outer_per_checkpoint = max(
            1, every * schedule.inner_steps // self.schedule.period_steps(schedule)
        )
        return self.progress.completed_outer // outer_per_checkpoint * outer_per_checkpoint

    def stop_all(self) -> None:
        self.stopped_since_s = self.env.now
        collectives_of(
            self.exchanges
        ).drop_all()  # only a coupled schedule stops everyone (self.elastic)
        restart_outer = self.checkpoint_outer()
        self.progress.roll_back(restart_outer)
        restart_position = restart_outer * self.schedule.period_steps(self.scenario.schedule)
        states = self.fleet.states
        for state in states:
            self.roll_back(state, restart_position * state.steps_scale)
            if state.process is not None and state.process.is_alive:
                state.process.interrupt(STOP)
        recovery_s = max(s.worker.recovery_s or 0.0 for s in states if self.struck[s.worker.rank])
        restart = self.env.timeout(recovery_s)
        restart.callbacks.append(lambda _event: self.restart(restart_outer))

    def roll_back(self, state: WorkerState, position: float) -> None:
        """The worker's merged work past the checkpoint is lost (at its mean step time)."""
        undone_steps = max(0.0, state.position_at_apply - position)
        state.merged_steps -= undone_steps
        self.lost_compute_s += undone_steps * state.worker.step_time_s
        state.position_at_apply = position

    def stopped(self, state: WorkerState) -> None:
        """Called in a stopped worker's process: close its trace; its unsynced work is lost."""
        self.trace.close(state)
        self.lost_compute_s += state.unsynced_compute_s
        state.unsynced_compute_s = 0.0
        state.late.clear()

    def restart(self, outer: int) -> None:
        if self.progress.over:
            return
        self.counts["restarts"] += 1
        assert self.stopped_since_s is not None, "a restart follows the stop (stop_all)"
        for state in self.fleet.states:
            if state.present:
                self.trace.add(
                    self.stopped_since_s,
                    self.env.now,
                    state.worker.rank,
                    state.worker.island,
                    "idle",
                    0.0,
                    NO_FRAGMENT,
                    outer,
                )
                self.start(state, outer)
        self.stopped_since_s = None


def recovery_s(state: WorkerState) -> float:
    """How long the worker's failed chip is down: ``recovery_s``, which a worker that fails has."""
    recovery = state.worker.recovery_s
    assert recovery is not None, "recovery_s is required with chip_mtbf_s (scenarios.loader)"
    return recovery
