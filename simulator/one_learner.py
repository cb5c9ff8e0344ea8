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

from collections import deque
from typing import TYPE_CHECKING, Sequence

from islands.trace import NO_FRAGMENT, Row

from .links import Transfer
from .network import COMPLETION_TOLERANCE
from .result import SimResult, played_result
from .timeline import timeline_of

if TYPE_CHECKING:
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


def play(sim: Simulation) -> SimResult | None:
    """``sim``'s result as its event run would give it; None (``sim`` untouched) where a transfer
    would not end at its first wake-up."""
    try:
        run = OneLearner(sim)
        run.play()
    except NotAlone:
        return None
    state = sim.states[0]
    state.merged_steps = run.merged_steps
    syncer = sim.exchanges
    syncer.counts["merges"] = len(run.round_trips)  # one per report; none below the quorum (K <= the learners)
    syncer.finished.add(state.worker.rank)
    outer = sim.progress.synced_outer_steps
    sim.progress.learner_outer[state.worker.rank] = outer
    sim.progress.reach(outer)
    return played_result(sim, run)


class OneLearner:
    """One play of the recursion over the schedule's ``Timeline``: the learner's clock, its round trips
    and the rows they leave, kept as plain tuples (a trace row without its worker and island) until
    the trace or the links table asks for them."""

    def __init__(self, sim: Simulation):
        self.sim = sim
        state = sim.states[0]
        self.rank, self.island = state.worker.rank, state.worker.island
        syncer = sim.exchanges  # ``syncer.Syncer``
        self.latency_s = syncer.hop_latency_s(self.rank)
        self.up = self.first(syncer.path_to_syncer(self.rank))
        self.down = self.first(syncer.path_from_syncer(self.rank))
        self.timeline = timeline_of(sim.schedule, sim.scenario.schedule)
        self.payloads = sim.schedule.priced_fragments(sim.scenario)[1]
        self.rows: list[tuple] = []  # (start, end, kind, bytes, fragment, outer step), in the engine's order
        self.round_trips: list[tuple[float, float]] = []  # each launch's (sent, arrived at the syncer)
        self.merged_steps = 0.0

    def play(self) -> None:
        timeline, rows, latency_s = self.timeline, self.rows, self.latency_s
        add, round_trips = rows.append, self.round_trips
        step_time_s = self.sim.states[0].worker.step_time_s
        up_rate, down_rate = self.up.alone_bytes_per_s, self.down.alone_bytes_per_s
        now = 0.0
        back_s = -1.0  # when the previous round trip is back
        backs: list[float] = [0.0] * len(timeline.fragments)
        comm_rows: deque[tuple] = deque()  # rows of round trips back, added at their ends
        for action, steps in zip(timeline.actions, timeline.steps):
            launch = action if action >= 0 else ~action
            fragment, outer_step = timeline.fragments[launch], timeline.outer_steps[launch]
            if steps:
                since, now = now, now + steps * step_time_s
                if now > since:  # at one instant the engine appends a compute row first
                    while comm_rows and comm_rows[0][1] < now:
                        add(comm_rows.popleft())
                    add((since, now, "compute", 0.0, NO_FRAGMENT, outer_step))
            if action >= 0:
                payload_bytes = self.payloads[fragment]
                sent_s = now if now >= back_s else back_s
                arrived_s = moved(sent_s, latency_s, payload_bytes, up_rate)[1]
                back_s = backs[launch] = moved(arrived_s, latency_s, payload_bytes, down_rate)[1]
                round_trips.append((sent_s, arrived_s))
                comm_rows.append((sent_s, back_s, "comm", payload_bytes, fragment, outer_step))
                continue
            since, done_s = now, backs[launch]
            now = now if now >= done_s else done_s
            while comm_rows and comm_rows[0][1] <= now:
                add(comm_rows.popleft())
            self.record_wait(since, now, round_trips[launch][1], fragment, outer_step)
        rows.extend(comm_rows)
        self.merged_steps = timeline.merged_steps

    def record_wait(self, since_s: float, now: float, arrived_s: float, fragment: int, outer_step: int) -> None:
        """``Syncer.record_wait``: the report merged on arrival (its first start is its arrival)."""
        idle_from = min(max(since_s, arrived_s), now)
        idle_to = min(max(idle_from, arrived_s), now)
        for start, end, kind in ((since_s, idle_from, "stall"), (idle_from, idle_to, "idle"), (idle_to, now, "stall")):
            if end > start:
                self.rows.append((start, end, kind, 0.0, fragment, outer_step))

    def trace_rows(self) -> list[Row]:
        rank, island = self.rank, self.island
        return [Row(start, end, rank, island, kind, sent, fragment, outer_step)
                for start, end, kind, sent, fragment, outer_step in self.rows]

    def columns(self) -> list[Sequence]:
        """The rows as one sequence per trace column (``trace.COLUMNS``)."""
        count = len(self.rows)
        start, end, kind, sent, fragment, outer_step = zip(*self.rows) if count else [()] * 6
        return [start, end, [self.rank] * count, [self.island] * count, kind, sent, fragment, outer_step]

    def transfers(self, round_trips: int | None = None) -> list[Transfer]:
        """The uploads and downloads (of the first ``round_trips``), as ``FlowNetwork`` leaves them: copies
        of the first over their links (their counted links included), moving from the latency's end at
        their rate alone."""
        made = []
        for (sent_s, arrived_s), fragment in zip(self.round_trips[:round_trips], self.timeline.fragments):
            payload_bytes = self.payloads[fragment]
            made.append(self.transfer(self.up, sent_s, payload_bytes))
            made.append(self.transfer(self.down, arrived_s, payload_bytes))
        return made

    def peak_transfers(self) -> list[Transfer]:
        """Transfers with every upload's and every download's peak (all move at their rate alone)."""
        return self.transfers(1)

    def transfer(self, first: Transfer, at_s: float, payload_bytes: float) -> Transfer:
        start_s, wake_s, remaining = moved(at_s, self.latency_s, payload_bytes, first.alone_bytes_per_s)
        transfer = object.__new__(Transfer)  # a copy of the first over its links, its counted links included
        transfer.__dict__.update(first.__dict__)
        transfer.remaining_bytes = remaining
        rate = first.alone_bytes_per_s
        transfer.segments = [(start_s, wake_s, rate)] if wake_s > start_s else []  # ``Transfer.set_rate`` twice
        transfer.rate_since_s = wake_s
        transfer.peak_bytes_per_s = rate
        return transfer

    def first(self, links: tuple) -> Transfer:
        """A transfer over ``links`` whose rate alone and crossings every later one copies."""
        transfer = Transfer(links, 0.0, self.sim.env.event())
        transfer.most_access_crossings()
        return transfer


def moved(at_s: float, latency_s: float, payload_bytes: float, rate: float) -> tuple[float, float, float]:
    """One transfer alone on the flow network from ``at_s``, as ``FlowNetwork`` times it (added after the
    latency, its wake-up at its bytes over its rate alone, its bytes moved then): its start, its end and
    the bytes left (within the completion tolerance, else ``NotAlone``)."""
    start_s = at_s + latency_s if latency_s > 0 else at_s  # SimPy: now + the timeout's delay
    remaining = payload_bytes
    wake_s = start_s + max(remaining / rate, 0.0)
    if wake_s - start_s > 0:
        remaining -= rate * (wake_s - start_s)
    if remaining > rate * (COMPLETION_TOLERANCE * max(1.0, wake_s)):  # ``FlowNetwork.on_wakeup``
        raise NotAlone
    return start_s, wake_s, remaining
