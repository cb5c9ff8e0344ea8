"""Decoupled DiLoCo with one simulated learner, played without events.

A planner's Decoupled DiLoCo candidates are one island of identical replicas (``replicas.py``): one
simulated learner standing for all of them, whose reports the syncer merges as soon as they arrive
(every live learner then has a report waiting: ``no_report_can_arrive``). Its exchanges run one at a
time (the trainer's single exchange thread, ``Syncer.join``), so one transfer at most is ever on
the network, alone on its links: the flow model moves it at its rate alone. The event model's run is
then a recursion that Python plays directly, operation for operation as the engine, the syncer and
``FlowNetwork`` compute it (SimPy's clock adds each timeout's delay to now; the flow model moves a
transfer's bytes forward at each wake-up and ends it within its completion tolerance):

* compute: the learner's clock advances by each span's steps x its step time (no jitter: the
  replicas are alike);
* a launch: the report is sent once the previous round trip is back; its upload starts after the
  hop's latency and takes its bytes over the rate alone; the syncer merges it on arrival and the
  download takes the same way back;
* an apply: the learner waits for the download's end, ``stall`` (the merge is immediate: no idle).

The rows (through a ``TraceLog``), transfers and counts are the event model's, added in its order,
and the summary is made from them as for an event run (``result.result_of``): the same result,
``events`` aside (0 here; ``tests/test_simulator_one_learner.py`` plays every Decoupled candidate of
the worked example's plan both ways). Anything else (several learners, churn, failures, exchange
work, token buckets, a hand-set network model) runs event by event.
"""

from __future__ import annotations

import math
from collections import deque
from typing import TYPE_CHECKING

from islands.trace import NO_FRAGMENT

from .links import Transfer
from .network import COMPLETION_TOLERANCE
from .tracelog import TraceLog
from .workers import LAUNCH, sync_actions

if TYPE_CHECKING:
    from islands.trace import Row

    from .engine import Simulation


class NotAlone(Exception):
    """A transfer did not end at its first wake-up: leave the run to the event model."""


def applies(sim: Simulation) -> bool:
    """Whether ``sim`` is a Decoupled DiLoCo run of one simulated learner that nothing but its own
    compute and round trips moves (see the module's docstring)."""
    scenario = sim.scenario
    return (not sim.schedule.coupled and len(sim.states) == 1 and sim.network_model == "flow"
            and not sim.network.tracks_links and not scenario.has_churn() and not scenario.has_failures()
            and scenario.schedule.barrier == "wait" and scenario.network.exchange_cpu_s_per_value == 0
            and sim.states[0].steps_scale == 1 and sim.states[0].clock.jitter_cv == 0)


def play(sim: Simulation) -> bool:
    """Fill ``sim``'s rows, transfers and counts as its event run would; False (``sim`` untouched)
    where a transfer would not end at its first wake-up."""
    try:
        rows, transfers, merged_steps = OneLearner(sim).play()
    except NotAlone:
        return False
    state = sim.states[0]
    sim.trace.rows.extend(rows)
    sim.network.carried.extend(transfers)
    state.merged_steps = merged_steps
    syncer = sim.exchanges
    syncer.counts["merges"] = len(transfers) // 2  # one per report; none below the quorum (K <= the learners)
    syncer.finished.add(state.worker.rank)
    outer = sim.progress.synced_outer_steps
    sim.progress.learner_outer[state.worker.rank] = outer
    sim.progress.reach(outer)
    return True


class OneLearner:
    """One play of the recursion: the learner's clock, its round trips and the rows they leave."""

    def __init__(self, sim: Simulation):
        self.sim = sim
        state = sim.states[0]
        self.rank, self.island = state.worker.rank, state.worker.island
        self.step_time_s = state.worker.step_time_s
        syncer = sim.exchanges  # ``syncer.Syncer``
        self.latency_s = syncer.hop_latency_s(self.rank)
        self.up = self.first(syncer.path_to_syncer(self.rank))
        self.down = self.first(syncer.path_from_syncer(self.rank))
        self.log = TraceLog(sim.env)  # the run's rows, handed to its own TraceLog once the play is through
        self.comm_rows: deque[tuple] = deque()  # rows of round trips back, added at their ends
        self.transfers: list[Transfer] = []

    def play(self) -> tuple[list[Row], list[Transfer], float]:
        sim = self.sim
        rank, island, step_time_s = self.rank, self.island, self.step_time_s
        now = position = applied_position = merged_steps = 0.0
        back_s = -1.0  # when the previous round trip is back
        reports: dict[tuple[int, int], tuple[float, float]] = {}  # (arrived, back)
        for action, point in sync_actions(sim.schedule.sync_points(sim.scenario, 0)):
            target = float(point.launch_step if action is LAUNCH else point.apply_step)
            if target - position > 0:
                since, now = now, now + (target - position) * step_time_s
                if now > since:
                    self.flush(now, inclusive=False)  # at one instant the engine appends a compute row first
                    self.log.add(since, now, rank, island, "compute", 0.0, NO_FRAGMENT, point.outer_step)
                position = target
            if action is LAUNCH:
                sent_s = now if now >= back_s else back_s
                arrived_s = self.carry(self.up, point.payload_bytes, sent_s)
                back_s = self.carry(self.down, point.payload_bytes, arrived_s)
                reports[point.outer_step, point.fragment] = arrived_s, back_s
                self.comm_rows.append((sent_s, back_s, rank, island, "comm", point.payload_bytes, point.fragment,
                                       point.outer_step))
                continue
            arrived_s, done_s = reports.pop((point.outer_step, point.fragment))
            since = now
            now = now if now >= done_s else done_s
            self.flush(now, inclusive=True)
            self.record_wait(since, now, arrived_s, point.fragment, point.outer_step)
            merged_steps += position - applied_position
            applied_position = position
        self.flush(math.inf, inclusive=True)
        return self.log.rows, self.transfers, merged_steps

    def flush(self, at_s: float, inclusive: bool) -> None:
        """Append the rows of the round trips back before ``at_s`` (or at it), in the engine's order."""
        comm_rows = self.comm_rows
        while comm_rows and (comm_rows[0][1] < at_s or inclusive and comm_rows[0][1] == at_s):  # its end
            self.log.add(*comm_rows.popleft())

    def carry(self, first: Transfer, payload_bytes: float, at_s: float) -> float:
        """One transfer alone on the flow network from ``at_s``: its end, as ``FlowNetwork`` times it
        (added after the latency, its wake-up at its bytes over its rate alone, its bytes moved then)."""
        start_s = at_s + self.latency_s if self.latency_s > 0 else at_s  # SimPy: now + the timeout's delay
        rate = first.alone_bytes_per_s
        remaining = payload_bytes
        wake_s = start_s + max(remaining / rate, 0.0)
        if wake_s - start_s > 0:
            remaining -= rate * (wake_s - start_s)
        if remaining > rate * (COMPLETION_TOLERANCE * max(1.0, wake_s)):  # ``FlowNetwork.on_wakeup``
            raise NotAlone
        transfer = object.__new__(Transfer)  # a copy of the first over its links, its counted links included
        transfer.__dict__.update(first.__dict__)
        transfer.remaining_bytes = remaining
        transfer.segments = [(start_s, wake_s, rate)] if wake_s > start_s else []  # ``Transfer.set_rate`` twice
        transfer.rate_since_s = wake_s
        transfer.peak_bytes_per_s = rate
        self.transfers.append(transfer)
        return wake_s

    def first(self, links: tuple) -> Transfer:
        """A transfer over ``links`` whose rate alone and crossings every later one copies."""
        transfer = Transfer(links, 0.0, self.sim.env.event())
        transfer.most_access_crossings()
        return transfer

    def record_wait(self, since_s: float, now: float, arrived_s: float, fragment: int, outer_step: int) -> None:
        """``Syncer.record_wait``: the report merged on arrival (its first start is its arrival)."""
        idle_from = min(max(since_s, arrived_s), now)
        idle_to = min(max(idle_from, arrived_s), now)
        for start, end, kind in ((since_s, idle_from, "stall"), (idle_from, idle_to, "idle"), (idle_to, now, "stall")):
            if end > start:
                self.log.add(start, end, self.rank, self.island, kind, 0.0, fragment, outer_step)
