"""Compute slowed while the worker's own exchange moves bytes (``compute.slowdown_while_exchanging``).

A compute span is drawn whole (``StepClock.duration_s``: its seconds at full speed) and runs at
1 / (1 + s) of that speed whenever the worker's exchanges move bytes (``Exchanges.moving``: from a
collective's start to the worker's own end of it, or a learner's upload and download to the syncer).
Each time that changes for a worker that computes, the span's work done is brought up to now and its
end re-timed at the new rate (``compute.busy_factor``), as the array players price it in one go
(``compute.slowed_end_s``). Its failure clock runs over the wall seconds it computes, so it is
re-armed with the new end. Without a slowdown a span is the plain timeout it always was: the same
events, the same bits.
"""

from __future__ import annotations

import simpy

from islands.scenarios import Scenario

from ..compute import busy_factor
from ..fleet import Fleet
from .exchanges import Exchanges
from .failures import Failures


class Span:
    """One compute span of ``work_s`` seconds at full speed, run at 1 / ``factor`` of it; ``done``
    fires at its end. A ``retimed`` span's end can move (``retime``); a plain one is a timeout."""

    def __init__(self, env: simpy.Environment, work_s: float, factor: float, retimed: bool):
        self.env, self.work_s, self.factor = env, work_s, factor
        self.done_s = 0.0  # full-speed seconds done by ``since_s``
        self.since_s = env.now
        self.generation = 0
        if retimed:
            self.done = env.event()
            self.arm()
        else:
            self.done = env.timeout(work_s)

    @property
    def wall_left_s(self) -> float:
        """Wall seconds to its end at the rate it runs now."""
        return (self.work_s - self.done_s) * self.factor

    @property
    def done_fraction(self) -> float:
        """The share of its work done by ``since_s``."""
        return self.done_s / self.work_s

    def arm(self) -> None:
        self.generation += 1
        generation = self.generation
        timer = self.env.timeout(self.wall_left_s)
        timer.callbacks.append(lambda _event: self.end(generation))

    def end(self, generation: int) -> None:
        if generation == self.generation and not self.done.triggered:
            self.done.succeed()

    def bring_up(self) -> None:
        """Count the work done since ``since_s`` at the rate it ran."""
        now = self.env.now
        self.done_s = min(self.work_s, self.done_s + (now - self.since_s) / self.factor)
        self.since_s = now

    def retime(self, factor: float) -> None:
        self.bring_up()
        self.factor = factor
        self.arm()

    def stop(self) -> None:
        """Interrupted: its work done is counted and its end will not fire."""
        self.bring_up()
        self.generation += 1


class Busy:
    """The compute spans in progress of one run's workers, re-timed as their exchanges start and end."""

    def __init__(
        self,
        env: simpy.Environment,
        scenario: Scenario,
        exchanges: Exchanges,
        failures: Failures,
        fleet: Fleet,
    ):
        self.env, self.slowdown = env, scenario.compute.slowdown_while_exchanging
        self.exchanges, self.failures, self.fleet = exchanges, failures, fleet
        self.spans: dict[int, Span] = {}  # by rank: each computing worker's span
        if self.slowdown:
            exchanges.watcher = self.moved

    def start(self, rank: int, work_s: float) -> Span:
        """Worker ``rank`` starts computing ``work_s`` full-speed seconds now."""
        if not self.slowdown:
            return Span(self.env, work_s, 1.0, retimed=False)
        factor = busy_factor(self.slowdown, self.exchanges.moving(rank))
        span = self.spans[rank] = Span(self.env, work_s, factor, retimed=True)
        return span

    def stop(self, rank: int) -> None:
        """Worker ``rank`` no longer computes (its span ended or was interrupted)."""
        self.spans.pop(rank, None)

    def moved(self, rank: int) -> None:
        """Worker ``rank``'s exchanges started or stopped moving bytes: its span, if it computes, runs
        on at the rate that holds now."""
        span = self.spans.get(rank)
        if span is None or span.done.triggered or self.failures.struck[rank]:
            return  # not computing, or a chip failure is about to interrupt it
        factor = busy_factor(self.slowdown, self.exchanges.moving(rank))
        if factor == span.factor:
            return
        state = self.fleet.state_of[rank]
        self.failures.disarm(state)
        span.retime(factor)
        self.failures.arm(state, span.wall_left_s)
