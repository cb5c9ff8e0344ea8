"""Decoupled DiLoCo with one simulated learner, played without events.

A planner's Decoupled DiLoCo candidates are one island of identical replicas (``replicas.py``): one
simulated learner standing for all of them, whose reports the syncer merges as soon as they arrive
(every live learner then has a report waiting: ``no_report_can_arrive``). Its exchanges run one at a
time (the trainer's single exchange thread, ``Syncer.join``), so one transfer at most is ever on
the network, alone on its links: the flow model moves it at its rate alone. The event model's run is
then a recursion that Python plays directly over the schedule's ``Timeline``, operation for operation
as the engine, the syncer and ``FlowNetwork`` compute it (SimPy's clock adds each timeout's delay to
now; the flow model moves a transfer's bytes forward at each wake-up and ends it within its
completion tolerance):

* compute: the learner's clock advances by each span's steps x its step time (no jitter: the
  replicas are alike);
* a launch: the report is sent once the previous round trip is back; its upload starts after the
  hop's latency and takes its bytes over the rate alone; the syncer merges it on arrival and the
  download takes the same way back;
* an apply: the learner waits for the download's end, ``stall`` (the merge is immediate: no idle).

The summary is gathered as the run goes (``Totals``): each sum the one ``summary.summarise_columns``
takes over the event run's rows, added in the order it adds them (the rows sorted by start, a comm
row before the learner's own row at one instant). The rows, in the event model's order, and the
transfers are made when they are asked for, by playing the run again. The same result, ``events``
aside (0 here; ``tests/test_simulator_one_learner.py`` plays every Decoupled candidate of the worked
example's plan both ways). Anything else (several learners, churn, failures, exchange work, token
buckets, a hand-set network model, compute that slows while round trips move bytes) runs event by
event.
"""

from __future__ import annotations

import math
from collections import deque

import numpy as np

from islands.summary import Workers
from islands.trace import NO_FRAGMENT, Row

from .. import budget
from ..budget import Budget
from ..network.flows import COMPLETION_TOLERANCE
from ..network.links import UNCLOCKED, Transfer
from ..network.syncer_paths import SyncerPaths
from ..played import Played, counts_for, peak_gbps
from ..setup import RunSetup
from .timeline import timeline_of


class NotAlone(Exception):
    """A transfer did not end at its first wake-up: leave the run to the event model."""


def why_not(setup: RunSetup) -> str | None:
    """Why ``setup`` is not a Decoupled DiLoCo run of one simulated learner that nothing but its own
    compute and round trips moves (see the module's docstring), or None."""
    scenario = setup.scenario
    worker = setup.groups[0][0]
    reasons = (
        (setup.schedule.coupled, "not Decoupled DiLoCo"),
        (len(setup.groups) != 1, f"{len(setup.groups)} learners are simulated"),
        (setup.network_model != "flow", f"network.model = {setup.network_model!r} given by hand"),
        (setup.tracks_links, "token buckets fill and drain between exchanges"),
        (scenario.has_churn(), "workers join or leave"),
        (scenario.has_failures(), "chips fail"),
        (scenario.schedule.barrier != "wait", f"the {scenario.schedule.barrier} barrier"),
        (scenario.network.exchange_cpu_s_per_value != 0, "exchange work"),
        (setup.steps_scales[worker.rank] != 1, "adaptive H"),
        (worker.jitter_cv != 0, "its step times are jittered"),
        (
            scenario.compute.slowdown_while_exchanging != 0,
            "its compute slows while its round trips move bytes",
        ),
    )
    return next((why for failed, why in reasons if failed), None)


class OneLearnerPlayer:
    """Decoupled DiLoCo with one simulated learner, without events (see the module's docstring)."""

    name = "one learner"

    def fits(self, setup: RunSetup) -> str | None:
        return why_not(setup)

    def budget(self, setup: RunSetup) -> Budget:
        return budget.guard(setup.scenario, setup.max_events)

    def check_outputs(self, setup: RunSetup, budget_: Budget, trace: bool, links: bool) -> None:
        """Its rows and transfers are the event run's, played again: as many as the budget admits."""

    def play(self, setup: RunSetup, budget_: Budget) -> Played | None:
        """The run as its event run would give it; None where a transfer would not end at its first
        wake-up (the event model then plays it)."""
        try:
            run = OneLearner(setup)
            run.play()
        except NotAlone:
            return None
        totals, count = run.totals, setup.replica_counts[run.rank]
        durations = np.array(run.sync_durations_s())
        workers = Workers(
            island=np.array([run.island], dtype=object),
            count=np.array([count], dtype=np.int64),
            compute=np.array([totals.seconds["compute"]]),
            stall=np.array([totals.seconds["stall"]]),
            idle=np.array([totals.seconds["idle"]]),
            present_s=np.array([totals.present_s]),
            bytes_sent=np.array([totals.bytes_sent]),
            wasted_bytes=np.zeros(1),  # no churn, nothing thrown away
            syncs=np.array([float(len(durations))]),
        )
        return Played(
            player=self.name,
            totals=workers,
            wall_time_s=totals.wall_time_s,
            sync_durations_s=durations,
            sync_counts=np.repeat(np.array([count], dtype=np.int64), len(durations)),
            outer_steps=setup.scenario.schedule.outer_steps,
            peak_gbps=peak_gbps(run.peak_transfers(), setup.topology),
            merged_steps={run.rank: run.timeline.merged_steps},
            # one merge per report; none below the quorum (K <= the learners)
            counts=counts_for(False, merges=len(run.sent_s)),
            row_source=run.trace_rows,
            transfer_source=run.transfers,
        )


class Totals:
    """The summary's sums over the run's rows, each added in the order ``summary.summarise_columns``
    adds it: the rows sorted by start (a comm row first at one instant: kinds in name order). The
    learner's own rows (compute, stall, idle) tile its clock and come in that order; a comm row starts
    at or after the learner's clock when it is made, so it waits in ``pending`` for the first own row
    that starts no sooner. ``present_s`` is ``summary.worker_presence``: each row adds what it covers
    past the latest end before it."""

    def __init__(self) -> None:
        self.seconds = {"compute": 0.0, "stall": 0.0, "idle": 0.0}
        self.bytes_sent = self.present_s = 0.0
        self.first_start_s: float | None = None
        self.latest_end_s = -math.inf
        self.pending: deque[tuple[float, float, float]] = deque()  # comm rows (start, end, bytes)

    def own(
        self,
        start_s: float,
        end_s: float,
        kind: str,
        fragment: int = NO_FRAGMENT,
        outer_step: int = 0,
    ) -> None:
        """One of the learner's own rows (its length > 0; no sum reads its fragment and outer step)."""
        if self.pending and self.pending[0][0] <= start_s:
            self.comm_before(start_s)
        self.cover(start_s, end_s)
        self.seconds[kind] += end_s - start_s

    def comm_before(self, at_s: float) -> None:
        """Add the comm rows that start no later than ``at_s``."""
        pending = self.pending
        while pending and pending[0][0] <= at_s:
            start_s, end_s, sent_bytes = pending.popleft()
            self.cover(start_s, end_s)
            self.bytes_sent += sent_bytes

    def cover(self, start_s: float, end_s: float) -> None:
        """A row from ``start_s`` to ``end_s`` adds to the time present what no earlier row covered
        (rows come by start: ``summary.worker_presence``'s running maximum of the ends)."""
        latest_s = self.latest_end_s
        if self.first_start_s is None:
            self.first_start_s = start_s
        covered = end_s - (start_s if start_s >= latest_s else latest_s)
        self.present_s += covered if covered > 0.0 else 0.0
        self.latest_end_s = end_s if end_s > latest_s else latest_s

    def close(self) -> None:
        self.comm_before(math.inf)

    @property
    def wall_time_s(self) -> float:
        """The latest end less the earliest start (0 for no rows)."""
        return 0.0 if self.first_start_s is None else self.latest_end_s - self.first_start_s


class OneLearner:
    """One play of the recursion over the schedule's ``Timeline``: the learner's clock, its round trips,
    the summary's sums (``Totals``) and, when ``keep_rows``, the rows in the event model's order."""

    def __init__(self, setup: RunSetup, keep_rows: bool = False):
        self.setup = setup
        worker = setup.groups[0][0]
        self.rank, self.island = worker.rank, worker.island
        self.step_time_s = worker.step_time_s
        syncer = SyncerPaths.of(setup.scenario)
        topology = setup.topology
        self.latency_s = syncer.hop_latency_s(topology, self.rank)
        self.up = self.first(syncer.to_syncer(topology, self.rank))
        self.down = self.first(syncer.from_syncer(topology, self.rank))
        self.timeline = timeline_of(setup.schedule, setup.scenario.schedule)
        self.payloads = setup.schedule.priced_fragments(setup.scenario)[1]
        self.totals = Totals()
        self.log: list[Row] | None = (
            [] if keep_rows else None
        )  # the rows, in the event model's order
        self.own = (
            self.totals.own if not keep_rows else self.own_kept
        )  # a row of the learner's own clock
        self.comm_rows: deque[tuple] = (
            deque()
        )  # with ``keep_rows``: rows of round trips back, added at their ends
        count = len(self.timeline.fragments)
        self.sent_s, self.arrived_s, self.back_s = (
            [0.0] * count,
            [0.0] * count,
            [0.0] * count,
        )  # by launch

    def play(self) -> None:
        timeline, totals, latency_s, payloads = (
            self.timeline,
            self.totals,
            self.latency_s,
            self.payloads,
        )
        sent, arrived, back = self.sent_s, self.arrived_s, self.back_s
        step_time_s = self.step_time_s
        up_rate, down_rate = self.up.alone_bytes_per_s, self.down.alone_bytes_per_s
        now = 0.0
        back_s = -1.0  # when the previous round trip is back
        for action, steps in zip(timeline.actions, timeline.steps):
            launch = action if action >= 0 else ~action
            if steps:
                since, now = now, now + steps * step_time_s
                if now > since:  # at one instant the engine appends a compute row first
                    if self.log is not None:
                        self.flush(now, inclusive=False)
                    self.own(since, now, "compute", NO_FRAGMENT, timeline.outer_steps[launch])
            if action >= 0:
                payload_bytes = payloads[timeline.fragments[launch]]
                sent_s = sent[launch] = now if now >= back_s else back_s
                arrived_s = arrived[launch] = moved(sent_s, latency_s, payload_bytes, up_rate)[1]
                back_s = back[launch] = moved(arrived_s, latency_s, payload_bytes, down_rate)[1]
                totals.pending.append((sent_s, back_s, payload_bytes))
                if self.log is not None:
                    self.comm_rows.append(
                        (
                            sent_s,
                            back_s,
                            self.rank,
                            self.island,
                            "comm",
                            payload_bytes,
                            timeline.fragments[launch],
                            timeline.outer_steps[launch],
                        )
                    )
                continue
            since, done_s = now, back[launch]
            now = now if now >= done_s else done_s
            if self.log is not None:
                self.flush(now, inclusive=True)
            if now > since:
                self.waited(
                    since,
                    now,
                    arrived[launch],
                    timeline.fragments[launch],
                    timeline.outer_steps[launch],
                )
        totals.close()
        if self.log is not None:
            self.flush(math.inf, inclusive=True)

    def own_kept(
        self,
        start_s: float,
        end_s: float,
        kind: str,
        fragment: int = NO_FRAGMENT,
        outer_step: int = 0,
    ) -> None:
        """``Totals.own``, the row kept."""
        self.totals.own(start_s, end_s, kind)
        self.kept().append(
            Row(start_s, end_s, self.rank, self.island, kind, 0.0, fragment, outer_step)
        )

    def flush(self, at_s: float, inclusive: bool) -> None:
        """With the rows kept: append the rows of the round trips back before ``at_s`` (or at it), in the
        engine's order."""
        comm_rows, log = self.comm_rows, self.kept()
        while comm_rows and (comm_rows[0][1] < at_s or inclusive and comm_rows[0][1] == at_s):
            log.append(Row(*comm_rows.popleft()))

    def kept(self) -> list[Row]:
        """The rows, which a run made with ``keep_rows`` keeps."""
        assert self.log is not None, "rows are kept only by a run made with keep_rows"
        return self.log

    def waited(
        self, since_s: float, now: float, arrived_s: float, fragment: int, outer_step: int
    ) -> None:
        """``Syncer.record_wait``: the report merged on arrival (its first start is its arrival)."""
        idle_from = min(max(since_s, arrived_s), now)
        idle_to = min(max(idle_from, arrived_s), now)
        if idle_from > since_s:
            self.own(since_s, idle_from, "stall", fragment, outer_step)
        if idle_to > idle_from:
            self.own(idle_from, idle_to, "idle", fragment, outer_step)
        if now > idle_to:
            self.own(idle_to, now, "stall", fragment, outer_step)

    def sync_durations_s(self) -> list[float]:
        """Each round trip's span, by (outer step, fragment) as ``summary.sync_spans`` orders them."""
        outer_steps, fragments = self.timeline.outer_steps, self.timeline.fragments
        order = sorted(
            range(len(fragments)), key=lambda launch: (outer_steps[launch], fragments[launch])
        )
        return [self.back_s[launch] - self.sent_s[launch] for launch in order]

    def trace_rows(self) -> list[Row]:
        """The rows, in the event model's order: the run played again, keeping them."""
        again = OneLearner(self.setup, keep_rows=True)
        again.play()
        return again.kept()

    def transfers(self, round_trips: int | None = None) -> list[Transfer]:
        """The uploads and downloads (of the first ``round_trips``), as ``FlowNetwork`` leaves them: copies
        of the first over their links (their counted links included), moving from the latency's end at
        their rate alone."""
        made = []
        for launch, fragment in enumerate(self.timeline.fragments[:round_trips]):
            payload_bytes = self.payloads[fragment]
            made.append(self.transfer(self.up, self.sent_s[launch], payload_bytes))
            made.append(self.transfer(self.down, self.arrived_s[launch], payload_bytes))
        return made

    def peak_transfers(self) -> list[Transfer]:
        """Transfers with every upload's and every download's peak (all move at their rate alone)."""
        return self.transfers(1)

    def transfer(self, first: Transfer, at_s: float, payload_bytes: float) -> Transfer:
        start_s, wake_s, remaining = moved(
            at_s, self.latency_s, payload_bytes, first.alone_bytes_per_s
        )
        transfer = object.__new__(
            Transfer
        )  # a copy of the first over its links, its counted links included
        transfer.__dict__.update(first.__dict__)
        transfer.remaining_bytes = remaining
        rate = first.alone_bytes_per_s
        transfer.segments = (
            [(start_s, wake_s, rate)] if wake_s > start_s else []
        )  # ``Transfer.set_rate`` twice
        transfer.rate_since_s = wake_s
        transfer.peak_bytes_per_s = rate
        return transfer

    def first(self, links: tuple) -> Transfer:
        """A transfer over ``links`` whose rate alone and crossings every later one copies."""
        transfer = Transfer(links, 0.0, UNCLOCKED)
        transfer.most_access_crossings()
        return transfer


def moved(
    at_s: float, latency_s: float, payload_bytes: float, rate: float
) -> tuple[float, float, float]:
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


ONE_LEARNER = OneLearnerPlayer()
