"""Decoupled DiLoCo's learners, many of them, under churn that leaves and returns: a heap of timers
instead of SimPy.

Where every learner's round trips run one at a time on its own access links (no ``[syncer]``
bandwidth: the syncer sits on a non-blocking core; no backbone between a learner and the syncer; no
token bucket), no two transfers ever share a link: a learner's exchanges run one at a time
(``Syncer.join``), its upload crosses its uplink alone and its download its downlink alone, and a
returning learner's download of the model comes after its departure cancelled its transfers. The
flow model then moves every transfer at its rate alone, from the end of its latency: it takes
latency + bytes / rate. The learners meet only at the syncer's merges (``events/syncer.py``,
``docs/decoupled.md``), so the event model's run is this module's loop over a heap of timers in
time order (time, then the order they were set, as SimPy's queue orders them), each doing what
the event model's callback at that instant does:

* a learner's compute spans (its own ``StepClock``, the same spans in the same order: the same
  draws), its launches and applies (``workers.sync_actions`` of the schedule's sync points, from the
  outer step it (re)starts at) and the wait at an apply (``idle`` while its report waited for
  others, ``stall`` the rest: ``Syncer.record_wait``);
* its reports: exchange work after the previous round trip, the upload, the syncer's rules (a
  round's quorum and grace window, late reports answered at once, every fragment merged once no
  report can arrive, late pseudo-gradients merged when no learner is live), the download back;
* churn (``events/churn.py``): each churning learner's leave and return times from its own
  generator (``compute.CHURN``), the work since its last apply lost, its departure noticed after
  ``network.detection_timeout_s``, and on its return the model fetched from the syncer, then its
  own next outer step; the run stops at the budget's horizon as the event model's does.

The syncer's test "every live learner has a report waiting" is kept as two counts (live learners,
live learners with a report waiting), and the run's completed outer steps (the laggard's) as a
histogram, so that each event costs the same whatever the fleet's size.

The result is the event model's rank for rank: the same rows and counts, and figures equal to about
1e-12 relative: the flow model moves every flow's bytes forward whenever any flow starts or ends and
ends a flow within ``COMPLETION_TOLERANCE`` x now of its end, where this loop takes each end in closed
form (``tests/test_simulator_learners.py`` plays generated fleets both ways and compares them to
1e-9). Instants that tie exactly (learners without jitter, alike) are taken in the order their
timers were set, not in SimPy's finer order (a callback's event after the timers already due); the
syncer's rules give the same merges either way in the cases tested. A run whose event model is
short stays with it (``FAST_FROM_EVENTS``): its figures to the last bit.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from islands.scenarios import Worker
from islands.schedules.decoupled import grace_window_s
from islands.summary import Workers
from islands.trace import NO_FRAGMENT, WASTED, Row
from islands.units import BITS_PER_BYTE, BITS_PER_GBIT

from .. import budget
from ..budget import Budget
from ..compute import CHURN, worker_generator
from ..network.links import UNCLOCKED, Transfer
from ..network.syncer_paths import SyncerPaths
from ..played import Played, counts_for
from ..setup import RunSetup
from ..workers import LAUNCH, sync_actions
from .lockstep import check_rows

# The event model's estimated events up to which it plays the run itself (an event run of 2-10 s):
# this player's figures equal its own to about 1e-12, not to the last bit.
FAST_FROM_EVENTS = 200_000
# This loop's timers per learner's exchange (the compute before its launch and before its apply, the
# upload's end, the download's end, the grace window's timer), and per membership change (the leave,
# its notice, the return, the model's download, and the exchanges redone: ``estimated_events``).
EVENTS_PER_EXCHANGE = 5.0
EVENTS_PER_CHANGE = 2.0
# What one of its timers costs in events of the event model's time (a timer here about 3 us, an
# event of the event model 10-30 us): ``--max-events`` bounds its time as it bounds an event run's.
EVENT_MODEL_EVENTS_PER_EVENT = 0.2
BYTES_PER_LEARNER = 4000  # a learner's state, its reports and round trips in flight (rounded up)
BYTES_PER_SPAN = 200  # a round trip's span, kept by (outer step, fragment, learner)


def why_not(setup: RunSetup) -> str | None:
    """Why ``setup`` is not Decoupled DiLoCo whose learners meet only at the syncer's merges (see the
    module's docstring), with churn, if any, that leaves and returns at random, or None."""
    scenario = setup.scenario
    if setup.schedule.coupled:
        return "not Decoupled DiLoCo"
    syncer = SyncerPaths.of(scenario)
    topology = setup.topology
    own_links = all(
        syncer.to_syncer(topology, w.rank) == (topology.uplinks[w.rank],)
        and syncer.from_syncer(topology, w.rank) == (topology.downlinks[w.rank],)
        for w, _ in setup.groups
    )
    reasons = (
        (
            scenario.syncer.bandwidth_gbps is not None,
            "the syncer's own link ([syncer] bandwidth) is shared",
        ),
        (not own_links, "the learners' way to the syncer crosses a shared backbone"),
        (setup.tracks_links, "token buckets fill and drain between exchanges"),
        (scenario.has_failures(), "chips fail"),
        (bool(scenario.events), "workers join or leave by scheduled events"),
        (
            not all(island.present for island in scenario.islands),
            "an island joins later (present = false)",
        ),
        (
            any(island.mtbf_s is not None and island.mttr_s is None for island in scenario.islands),
            "learners leave and do not return (mtbf_s without mttr_s)",
        ),
        (scenario.schedule.barrier != "wait", f"the {scenario.schedule.barrier} barrier"),
        (
            scenario.compute.slowdown_while_exchanging != 0,
            "compute slows while the learners' round trips move bytes",
        ),
    )
    return next((why for failed, why in reasons if failed), None)


def estimated_events(setup: RunSetup) -> float:
    """This loop's timers: ``EVENTS_PER_EXCHANGE`` per learner's exchange, and per membership change
    ``EVENTS_PER_CHANGE`` and the exchanges of the half outer step it loses on average. The changes
    are those of the run's expected length (``budget.expected_length_s``: the slowest learner's
    compute over the share of its time it is there, mtbf / (mtbf + mttr), and its exchanges)."""
    scenario, schedule = setup.scenario, setup.schedule
    fragments = schedule.fragments(scenario.schedule)
    exchanges = sum(count for _, count in setup.groups) * scenario.schedule.outer_steps * fragments
    length_s = budget.expected_length_s(scenario, setup.workers)
    changes = sum(2 * length_s / churn_cycle_s(w) for w in setup.workers if w.mtbf_s is not None)
    return EVENTS_PER_EXCHANGE * (exchanges + changes * fragments / 2) + EVENTS_PER_CHANGE * changes


def churn_cycle_s(worker: Worker) -> float:
    """A churning learner's mean time there and away: mtbf_s + mttr_s, both given where this loop
    plays (``why_not``)."""
    assert worker.mtbf_s is not None and worker.mttr_s is not None, (
        "a learner that leaves returns (why_not)"
    )
    return worker.mtbf_s + worker.mttr_s


class LearnersPlayer:
    """Decoupled DiLoCo's learners on a heap of timers (see the module's docstring)."""

    name = "learners"

    def fits(self, setup: RunSetup) -> str | None:
        why = why_not(setup)
        if why is None and (events := budget.estimate(setup.scenario).events) <= FAST_FROM_EVENTS:
            why = f"the event model's run is short (about {events:.3g} events): it plays it to the last bit"
        return why

    def budget(self, setup: RunSetup) -> Budget:
        """Its timers (``estimated_events``), refused in one line past ``--max-events`` at what they
        cost in the event model's events; memory for the learners and their spans, not for rows."""
        scenario, max_events = setup.scenario, setup.max_events
        estimate = budget.estimate(scenario)
        events = estimated_events(setup)
        cost = EVENT_MODEL_EVENTS_PER_EVENT * events
        if cost > max_events:
            raise budget.BudgetExceeded(
                scenario.source,
                "--max-events",
                f"the run would take as long as about {cost:.3g} simulator events "
                f"({events:.3g} timers of its learners), above the budget of "
                f"{max_events:g} events: raise --max-events",
            )
        memory = (
            estimate.topology_bytes
            + BYTES_PER_LEARNER * len(setup.groups)
            + BYTES_PER_SPAN * estimate.worker_syncs
        )
        held = dataclasses.replace(estimate, events=events, memory_bytes=memory)
        budget.check(scenario, dataclasses.replace(held, events=cost), max_events)
        return held

    def check_outputs(self, setup: RunSetup, budget_: Budget, trace: bool, links: bool) -> None:
        """The rows and transfers are the run's, played again with the same draws: refused when the
        rows would not fit (``lockstep.check_rows``)."""
        if trace or links:
            check_rows(setup, budget_)

    def play(self, setup: RunSetup, budget_: Budget) -> Played:
        run = Learners(setup, budget_.horizon_s)
        run.play()
        return run.played(
            lambda: replayed(setup, budget_).kept_rows(), lambda: replayed(setup, budget_).transfers
        )


def replayed(setup: RunSetup, budget_: Budget) -> Learners:
    check_rows(setup, budget_)
    run = Learners(setup, budget_.horizon_s, keep_rows=True)
    run.play()
    return run


class Report:
    """One learner's round trip for one fragment of one of its outer steps (``syncer.Report``)."""

    __slots__ = (
        "learner",
        "outer_step",
        "fragment",
        "payload_bytes",
        "launched_s",
        "lead_steps",
        "sent_s",
        "arrived_s",
        "first_started_s",
        "transfer",
        "done",
        "on_done",
    )

    def __init__(
        self,
        learner: Learner,
        outer_step: int,
        fragment: int,
        payload_bytes: float,
        launched_s: float,
        lead_steps: float,
    ):
        self.learner, self.outer_step, self.fragment = learner, outer_step, fragment
        self.payload_bytes, self.launched_s, self.lead_steps = payload_bytes, launched_s, lead_steps
        self.sent_s = self.arrived_s = self.first_started_s = 0.0
        self.transfer: list | None = None  # [start moving, end, rate, up]: the transfer in flight
        self.done = False
        self.on_done: list[
            tuple
        ] = []  # what waits for its end: its learner, its learner's next report

    def moving(self) -> list:
        """Its transfer, which a report in its learner's ``in_flight`` has."""
        assert self.transfer is not None, "a report in flight has its transfer (Learners.transfer)"
        return self.transfer


class Learner:
    """What the loop knows of one simulated learner (``WorkerState`` and its process)."""

    def __init__(self, state: Any, index: int):
        worker = state.worker
        self.index, self.rank, self.island, self.count = (
            index,
            worker.rank,
            worker.island,
            state.count,
        )
        self.worker, self.clock, self.steps_scale = worker, state.clock, state.steps_scale
        self.present = self.running = self.member = self.finished = False
        self.generation = 0  # its process: a timer set by an earlier one is stale
        self.cursor = 0  # its next action
        self.first_outer = 0
        self.computed = False  # the compute before the action at ``cursor`` is done
        self.position = self.position_at_apply = self.unsynced_s = self.merged_steps = 0.0
        self.activity: tuple | None = None  # (kind, since_s, fragment, outer_step) of the open row
        self.joined: dict[tuple[int, int], Report] = {}
        self.exchanging: Report | None = None
        self.waiting_for: Report | None = None  # the report its apply waits for
        self.in_flight: set[Report] = set()
        self.queued = 0  # its reports waiting at the syncer
        self.catching_up: list | None = (
            None  # the model's download on its return: [started_s, transfer]
        )
        self.leaves_next = True
        self.churn_rng: np.random.Generator | None = None
        self.learner_outer = 0
        self.seconds = {"compute": 0.0, "stall": 0.0, "idle": 0.0}
        self.present_s = self.bytes_sent = self.wasted_bytes = 0.0
        self.syncs = 0
        self.has_rows = False


class Learners:
    """One play of a setup: the learners, the syncer and the heap of timers."""

    def __init__(self, setup: RunSetup, horizon_s: float | None, keep_rows: bool = False):
        self.setup = setup
        self.scenario = scenario = setup.scenario
        self.horizon_s = horizon_s
        spec = scenario.schedule
        self.quorum, self.window = spec.quorum, spec.grace_window
        self.period = setup.schedule.period_steps(spec)
        self.last_outer, self.last_fragment = setup.synced_outer_steps - 1, setup.last_fragment
        self.outer_steps = setup.synced_outer_steps
        self.work_s_per_value = scenario.network.exchange_cpu_s_per_value
        self.detection_s = scenario.network.detection_timeout_s
        self.learners = [Learner(state, index) for index, state in enumerate(setup.fleet().states)]
        paths, topology = SyncerPaths.of(scenario), setup.topology
        self.latency_s = [paths.hop_latency_s(topology, lr.rank) for lr in self.learners]
        self.up_rate = [topology.uplinks[lr.rank].capacity_bytes_per_s for lr in self.learners]
        self.down_rate = [topology.downlinks[lr.rank].capacity_bytes_per_s for lr in self.learners]
        self.actions = self.actions_of_schedule()
        self.first_action = {}  # outer step -> the first action of a learner (re)starting there
        for index in range(len(self.actions) - 1, -1, -1):
            self.first_action[self.actions[index][3]] = index
        self.heap: list[tuple] = []
        self.lognormals: dict[tuple[float, float, float], tuple[float, float]] = {}
        self.seq = 0
        self.now = 0.0
        self.events = 0
        self.over = False
        # the syncer (``Syncer``)
        self.waiting: dict[int, list[Report]] = {}
        self.waiting_weight: dict[int, int] = {}
        self.armed: dict[int, int] = {}
        self.generation = 0
        self.open_round: dict[int, int] = {}
        self.late: dict[int, list[Report]] = {}
        self.live = self.live_queued = 0
        self.counts = {
            "merges": 0,
            "merges_below_quorum": 0,
            "late_reports": 0,
            "joins": 0,
            "leaves": 0,
        }
        # progress: each learner's next outer step, and the laggard's (``Progress``)
        self.at_outer = [0] * (self.outer_steps + 1)
        self.at_outer[0] = len(self.learners)
        self.laggard_outer = 0
        self.running = 0
        self.lost_s = 0.0
        self.horizon_reached = False
        self.incomplete_reason: str | None = None
        self.peak_bytes_per_s = 0.0
        self.spans: dict[tuple[int, int, int], list[float]] = {}
        self.first_start_s, self.last_end_s = math.inf, -math.inf
        self.rows: list[Row] | None = [] if keep_rows else None
        self.moved: list[tuple] | None = (
            [] if keep_rows else None
        )  # (learner, up, start, end, rate)

    def actions_of_schedule(self) -> list[tuple]:
        """Every launch and apply from outer step 0 in the order a learner meets them (``sync_actions``):
        (launch?, target step, fragment, outer step, apply step - launch step, values, payload bytes). A
        learner that restarts from outer step t meets those of outer steps t on in the same order."""
        points = self.setup.schedule.sync_points(self.scenario, 0)
        return [
            (
                action is LAUNCH,
                point.launch_step if action is LAUNCH else point.apply_step,
                point.fragment,
                point.outer_step,
                point.apply_step - point.launch_step,
                point.values,
                point.payload_bytes,
            )
            for action, point in sync_actions(points)
        ]

    # --- the loop --------------------------------------------------------------------------------

    def at(self, time_s: float, action: Callable, *args: Any) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (time_s, self.seq, action, args))

    def play(self) -> None:
        for learner in self.learners:
            learner.present = True
            self.set_member(learner, True)
            self.start(learner, 0)
        for learner in self.learners:
            worker = learner.worker
            if worker.mtbf_s is not None:
                learner.churn_rng = rng = worker_generator(self.scenario.seed, learner.rank, CHURN)
                self.at(float(rng.exponential(worker.mtbf_s)), self.churn, learner)
        if self.horizon_s is not None:
            self.at(self.horizon_s, self.stop_at_horizon)
        heap = self.heap
        while heap and not self.over:
            self.now, _, action, args = heapq.heappop(heap)
            self.events += 1
            action(*args)
        if not self.over:
            raise RuntimeError(
                "the learners' run stalled with nothing left to happen (a simulator bug)"
            )
        for learner in self.learners:
            if learner.present:
                self.close(learner)
            for report in learner.in_flight:  # round trips that never complete (``Syncer.close``)
                self.waste(report)
            self.settle_peaks(learner)
        for reports in self.waiting.values():
            for report in reports:
                self.waste(report)

    def stop_at_horizon(self) -> None:
        self.horizon_reached = True
        assert self.horizon_s is not None, "the horizon is set before it is reached (play)"
        self.incomplete_reason = budget.horizon_reason(
            self.laggard_outer, self.scenario, self.horizon_s
        )
        self.over = True

    # --- a learner's process (``engine.worker_process``) -----------------------------------------

    def start(self, learner: Learner, first_outer: int) -> None:
        learner.position = learner.position_at_apply = (
            first_outer * self.period * learner.steps_scale
        )
        learner.unsynced_s = 0.0
        learner.exchanging = None
        learner.joined = {}
        learner.running = True
        self.running += 1
        learner.generation += 1
        learner.first_outer = first_outer
        learner.cursor = self.first_action.get(first_outer, len(self.actions))
        learner.computed = False
        self.proceed(learner)

    def proceed(self, learner: Learner) -> None:
        """Walk the learner's actions until it computes or waits, or its schedule is done."""
        actions, now = self.actions, self.now
        while learner.cursor < len(actions):
            launch, target, fragment, outer, lead, values, payload = actions[learner.cursor]
            if outer < learner.first_outer:
                learner.cursor += 1
                continue
            target *= learner.steps_scale
            if not learner.computed:
                steps = target - learner.position
                learner.computed = True
                if steps > 0:
                    learner.activity = ("compute", now, NO_FRAGMENT, outer)
                    self.at(
                        now + self.duration_s(learner, steps),
                        self.computed,
                        learner,
                        learner.generation,
                    )
                    return
            learner.computed = False
            if launch:
                learner.joined[(outer, fragment)] = self.join(
                    learner, outer, fragment, lead, values, payload
                )
            elif not self.wait(learner, learner.joined.pop((outer, fragment))):
                return
            else:
                self.applied(learner, fragment, outer)
            learner.cursor += 1
        self.stopped(learner)

    def duration_s(self, learner: Learner, steps: float) -> float:
        """``StepClock.duration_s``: the same draw from the learner's generator, its lognormal's
        parameters kept by step time, jitter and steps (a fleet has few of each)."""
        clock = learner.clock
        if clock.jitter_cv == 0:
            return steps * clock.step_time_s
        key = (clock.step_time_s, clock.jitter_cv, steps)
        parameters = self.lognormals.get(key)
        if parameters is None:
            parameters = self.lognormals[key] = clock.lognormal_parameters(steps)
        return float(clock.rng.lognormal(*parameters))

    def computed(self, learner: Learner, generation: int) -> None:
        if generation != learner.generation:
            return
        self.close(learner)
        target = self.actions[learner.cursor][1] * learner.steps_scale
        learner.position = max(learner.position, target)
        self.proceed(learner)

    def close(self, learner: Learner) -> None:
        """Record the learner's open row up to now (``TraceLog.close``): a wait cut short is idle."""
        if learner.activity is None:
            return
        kind, since_s, fragment, outer = learner.activity
        learner.activity = None
        now = self.now
        if kind == "wait":
            kind = "idle"
        if now > since_s:
            self.own_row(learner, since_s, now, kind, fragment, outer)
        if kind == "compute":
            learner.unsynced_s += now - since_s

    def wait(self, learner: Learner, report: Report) -> bool:
        """``Simulation.wait``: True when the report is back and the learner goes on at once (a
        Decoupled scenario has no ``[exchange]``, so no outer step's share to hold)."""
        if report.done:
            self.record_wait(learner, self.now, report)
            return True
        learner.activity = ("wait", self.now, report.fragment, report.outer_step)
        learner.waiting_for = report
        report.on_done.append((self.resume, learner, learner.generation))
        return False

    def resume(self, learner: Learner, generation: int) -> None:
        """The learner's report is back: it applies it and goes on."""
        if generation != learner.generation:
            return
        report, activity = learner.waiting_for, learner.activity
        assert report is not None and activity is not None, "a learner resumes from its wait (wait)"
        since_s = activity[1]
        learner.activity = learner.waiting_for = None
        self.record_wait(learner, since_s, report)
        self.applied(learner, report.fragment, report.outer_step)
        learner.cursor += 1
        self.proceed(learner)

    def record_wait(self, learner: Learner, since_s: float, report: Report) -> None:
        """``Syncer.record_wait``: idle while the report waited at the syncer, stall the rest."""
        now = self.now
        idle_from = min(max(since_s, report.arrived_s), now)
        idle_to = min(max(idle_from, report.first_started_s), now)
        for start, end, kind in (
            (since_s, idle_from, "stall"),
            (idle_from, idle_to, "idle"),
            (idle_to, now, "stall"),
        ):
            if end > start:
                self.own_row(learner, start, end, kind, report.fragment, report.outer_step)

    def applied(self, learner: Learner, fragment: int, outer: int) -> None:
        learner.merged_steps += learner.position - learner.position_at_apply
        learner.position_at_apply = learner.position
        learner.unsynced_s = 0.0
        if fragment == self.last_fragment:
            self.learner_done(learner, outer)

    def learner_done(self, learner: Learner, outer: int) -> None:
        """``Progress.learner_done``: the run's count is the laggard's."""
        self.at_outer[learner.learner_outer] -= 1
        learner.learner_outer = outer + 1
        self.at_outer[outer + 1] += 1
        while self.laggard_outer < self.outer_steps and not self.at_outer[self.laggard_outer]:
            self.laggard_outer += 1

    def stopped(self, learner: Learner) -> None:
        learner.running = False
        self.running -= 1
        if self.laggard_outer == self.outer_steps and not self.running:
            self.over = True

    # --- a learner's round trip (``Syncer``) ----------------------------------------------------

    def join(
        self,
        learner: Learner,
        outer: int,
        fragment: int,
        lead: float,
        values: float,
        payload: float,
    ) -> Report:
        report = Report(learner, outer, fragment, payload, self.now, lead)
        work_s = self.work_s_per_value * values
        previous, learner.exchanging = learner.exchanging, report
        if previous is not None and not previous.done:
            previous.on_done.append((self.prepare, report, work_s, learner.generation))
        else:
            self.prepare(report, work_s, learner.generation)
        return report

    def prepare(self, report: Report, work_s: float, generation: int) -> None:
        if work_s > 0:
            self.at(self.now + work_s, self.send, report, generation)
        else:
            self.send(report, generation)

    def send(self, report: Report, generation: int) -> None:
        learner = report.learner
        if not learner.present or learner.generation != generation:
            return
        report.sent_s = self.now
        self.transfer(report, True)

    def transfer(self, report: Report, up: bool) -> None:
        """The report's upload or download, alone on its link: its latency, then its bytes at the rate alone."""
        learner = report.learner
        latency_s = self.latency_s[learner.index]
        rate = self.up_rate[learner.index] if up else self.down_rate[learner.index]
        start_s = self.now + latency_s if latency_s > 0 else self.now
        transfer = [start_s, start_s + report.payload_bytes / rate, rate, up]
        report.transfer = transfer
        learner.in_flight.add(report)
        self.at(transfer[1], self.arrived if up else self.returned, report, transfer)

    def arrived(self, report: Report, transfer: list) -> None:
        if report.transfer is not transfer:
            return
        self.transfer_over(report, transfer)
        report.arrived_s = self.now
        fragment = report.fragment
        if report.outer_step < self.open_round.get(fragment, 0):
            self.counts["late_reports"] += report.learner.count
            self.late.setdefault(fragment, []).append(report)
            self.answer([report])
            return
        self.waiting.setdefault(fragment, []).append(report)
        self.waiting_weight[fragment] = self.waiting_weight.get(fragment, 0) + report.learner.count
        self.queue(report.learner, 1)
        self.consider(fragment)

    def transfer_over(self, report: Report, transfer: list) -> None:
        """The report's ``transfer`` ended: its rate was its peak."""
        learner = report.learner
        report.transfer = None
        learner.in_flight.discard(report)
        self.moved_at(learner, transfer, self.now)

    def moved_at(self, learner: Learner, transfer: list, end_s: float) -> None:
        """A transfer that started moving before ``end_s`` (its end, its cancelling, the run's end)
        carried its rate: its peak, and with the rows kept its segment."""
        start_s, _, rate, up = transfer
        if end_s >= start_s:
            self.peak_bytes_per_s = max(self.peak_bytes_per_s, rate)
            if self.moved is not None and end_s > start_s:
                self.moved.append((learner.rank, up, start_s, end_s, rate))

    def returned(self, report: Report, transfer: list) -> None:
        if report.transfer is not transfer:
            return
        self.transfer_over(report, transfer)
        learner = report.learner
        self.comm_row(
            learner,
            report.sent_s,
            self.now,
            report.payload_bytes,
            report.fragment,
            report.outer_step,
        )
        report.done = True
        for action, *args in report.on_done:
            action(*args)

    # --- the syncer's rules ----------------------------------------------------------------------

    def set_member(self, learner: Learner, member: bool) -> None:
        self.set_live(learner, member, learner.finished)

    def set_live(self, learner: Learner, member: bool, finished: bool) -> None:
        """Keep the counts of live learners (members whose last report is not answered) and of those
        with a report waiting (``no_report_can_arrive``)."""
        was = learner.member and not learner.finished
        learner.member, learner.finished = member, finished
        now_live = member and not finished
        if was != now_live:
            step = 1 if now_live else -1
            self.live += step
            if learner.queued:
                self.live_queued += step

    def queue(self, learner: Learner, step: int) -> None:
        before = learner.queued
        learner.queued += step
        if learner.member and not learner.finished and (before == 0) != (learner.queued == 0):
            self.live_queued += 1 if before == 0 else -1

    def no_report_can_arrive(self) -> bool:
        return self.live_queued == self.live

    def consider(self, fragment: int) -> None:
        reports = self.waiting.get(fragment)
        if not reports:
            return
        if self.no_report_can_arrive():
            self.merge_all()
        elif self.waiting_weight[fragment] >= self.quorum and fragment not in self.armed:
            self.generation += 1
            self.armed[fragment] = self.generation
            self.at(self.now + self.grace_s(reports[0]), self.grace_over, fragment, self.generation)

    def grace_s(self, first: Report) -> float:
        learner = first.learner
        due_s = first.launched_s + first.lead_steps * learner.worker.step_time_s
        download_s = (
            self.latency_s[learner.index] + first.payload_bytes / self.down_rate[learner.index]
        )
        return grace_window_s(self.window, due_s - self.now - download_s)

    def grace_over(self, fragment: int, generation: int) -> None:
        if self.armed.get(fragment) == generation:
            self.merge(fragment)

    def merge_all(self) -> None:
        for fragment in sorted(self.waiting):
            self.merge(fragment)

    def merge(self, fragment: int) -> None:
        self.armed.pop(fragment, None)
        reports = self.waiting.pop(fragment, [])
        weight = self.waiting_weight.pop(fragment, 0)
        if not reports:
            return
        for report in reports:
            self.queue(report.learner, -1)
        self.late.pop(fragment, None)
        self.open_round[fragment] = max(r.outer_step for r in reports) + 1
        self.count_merge(weight)
        self.answer(reports)

    def count_merge(self, weight: int) -> None:
        self.counts["merges"] += 1
        if weight < self.quorum:
            self.counts["merges_below_quorum"] += 1

    def answer(self, reports: list[Report]) -> None:
        last = []
        for report in reports:
            report.first_started_s = self.now
            self.transfer(report, False)
            if report.outer_step == self.last_outer and report.fragment == self.last_fragment:
                last.append(report.learner)
        if last:
            for learner in last:
                self.set_live(learner, learner.member, True)
            self.consider_all()

    def consider_all(self) -> None:
        for fragment in sorted(self.waiting):
            self.consider(fragment)
        if not self.live and not any(self.waiting.values()):
            for fragment in sorted(self.late):
                reports = self.late.pop(fragment)
                if reports:
                    self.count_merge(sum(r.learner.count for r in reports))

    # --- churn (``Churn``, ``Syncer.departed``, ``Syncer.catch_up``) -------------------------------

    def churn(self, learner: Learner) -> None:
        worker = learner.worker
        if learner.leaves_next:
            self.leave(learner)
        else:
            self.come_back(learner)
        learner.leaves_next = not learner.leaves_next
        mean_s = worker.mtbf_s if learner.leaves_next else worker.mttr_s
        assert learner.churn_rng is not None, "a learner churns from its own generator (play)"
        self.at(self.now + float(learner.churn_rng.exponential(mean_s)), self.churn, learner)

    def leave(self, learner: Learner) -> None:
        self.counts["leaves"] += 1
        learner.present = False
        self.at(self.now + self.detection_s, self.detected, learner)
        for report in learner.in_flight:
            self.waste(report)
            self.moved_at(learner, report.moving(), self.now)
            report.transfer = None
        learner.in_flight.clear()
        learner.exchanging = None
        if learner.queued:
            for fragment, reports in self.waiting.items():
                for report in reports:
                    if report.learner is learner:
                        self.waste(report)
                kept = [r for r in reports if r.learner is not learner]
                if len(kept) < len(reports):
                    self.waiting_weight[fragment] -= learner.count * (len(reports) - len(kept))
                    self.queue(learner, len(kept) - len(reports))
                    self.waiting[fragment] = kept
        self.consider_all()
        if (
            learner.running
        ):  # its process is interrupted: its open row closes, its work since its last apply is lost
            self.close(learner)
            self.lost_s += learner.unsynced_s
            learner.unsynced_s = 0.0
            self.stopped(learner)
        elif learner.catching_up is not None:
            self.moved_at(learner, learner.catching_up[1], self.now)
            learner.catching_up = None
        learner.generation += 1
        learner.waiting_for = None

    def detected(self, learner: Learner) -> None:
        if learner.running:
            return
        self.set_member(learner, False)
        self.consider_all()

    def come_back(self, learner: Learner) -> None:
        """The learner returns: it fetches the global model from the syncer, then trains from its own
        next outer step."""
        self.counts["joins"] += 1
        learner.present = True
        learner.generation += 1
        index = learner.index
        latency_s = self.latency_s[index]
        start_s = self.now + latency_s if latency_s > 0 else self.now
        rate = self.down_rate[index]
        transfer = [start_s, start_s + self.scenario.weights_bytes / rate, rate, False]
        learner.catching_up = [self.now, transfer]
        self.at(transfer[1], self.caught_up, learner, transfer)

    def caught_up(self, learner: Learner, transfer: list) -> None:
        if learner.catching_up is None or learner.catching_up[1] is not transfer:
            return
        started_s = learner.catching_up[0]
        learner.catching_up = None
        self.moved_at(learner, transfer, self.now)
        self.comm_row(learner, started_s, self.now, 0.0, NO_FRAGMENT, learner.learner_outer)
        self.set_live(learner, True, False)
        self.start(learner, learner.learner_outer)

    def settle_peaks(self, learner: Learner) -> None:
        """The run is over: transfers still in flight carried their rates up to now."""
        for report in learner.in_flight:
            self.moved_at(learner, report.moving(), self.now)
        if learner.catching_up is not None:
            self.moved_at(learner, learner.catching_up[1], self.now)

    # --- the rows and their sums -------------------------------------------------------------------

    def own_row(
        self, learner: Learner, start_s: float, end_s: float, kind: str, fragment: int, outer: int
    ) -> None:
        """A row of the learner's own clock: they tile the time it is there."""
        learner.seconds[kind] += end_s - start_s
        learner.present_s += end_s - start_s
        self.row(learner, start_s, end_s, kind, 0.0, fragment, outer)

    def comm_row(
        self,
        learner: Learner,
        start_s: float,
        end_s: float,
        payload: float,
        fragment: int,
        outer: int,
    ) -> None:
        """A round trip's row (within the learner's own rows), or the model's download on its return
        (before them)."""
        if fragment == NO_FRAGMENT:
            learner.present_s += end_s - start_s
        else:
            learner.syncs += 1
            learner.bytes_sent += payload
            span = self.spans.get((outer, fragment, learner.rank))
            if span is None:
                self.spans[(outer, fragment, learner.rank)] = [start_s, end_s]
            else:
                span[0], span[1] = min(span[0], start_s), max(span[1], end_s)
        self.row(learner, start_s, end_s, "comm", payload, fragment, outer)

    def waste(self, report: Report) -> None:
        """A round trip cut now (``Syncer.waste``): a wasted row from its upload's start with what left
        its learner's uplink (all of it once the upload was in)."""
        learner, sent = report.learner, report.payload_bytes
        transfer = report.transfer
        if transfer is not None and transfer[3]:  # uploading: its rate since it began to move
            start_s, end_s, rate, _ = transfer
            sent = rate * (min(end_s, self.now) - start_s) if self.now > start_s else 0.0
        learner.bytes_sent += sent
        learner.wasted_bytes += sent
        self.row(learner, report.sent_s, self.now, WASTED, sent, report.fragment, report.outer_step)

    def row(
        self,
        learner: Learner,
        start_s: float,
        end_s: float,
        kind: str,
        payload: float,
        fragment: int,
        outer: int,
    ) -> None:
        learner.has_rows = True
        if start_s < self.first_start_s:
            self.first_start_s = start_s
        if end_s > self.last_end_s:
            self.last_end_s = end_s
        if self.rows is not None:
            self.rows.append(
                Row(start_s, end_s, learner.rank, learner.island, kind, payload, fragment, outer)
            )

    # --- what the run gives ----------------------------------------------------------------------

    def played(
        self, rows: Callable[[], list[Row]], transfers: Callable[[], list[Transfer]]
    ) -> Played:
        with_rows = [learner for learner in self.learners if learner.has_rows]
        column = lambda values, dtype=float: np.array(values, dtype=dtype)  # noqa: E731
        workers = Workers(
            island=column([lr.island for lr in with_rows], object),
            count=column([lr.count for lr in with_rows], np.int64),
            compute=column([lr.seconds["compute"] for lr in with_rows]),
            stall=column([lr.seconds["stall"] for lr in with_rows]),
            idle=column([lr.seconds["idle"] for lr in with_rows]),
            present_s=column([lr.present_s for lr in with_rows]),
            bytes_sent=column([lr.bytes_sent for lr in with_rows]),
            wasted_bytes=column([lr.wasted_bytes for lr in with_rows]),
            syncs=column([float(lr.syncs) for lr in with_rows]),
        )
        counts = {learner.rank: learner.count for learner in self.learners}
        keys = sorted(self.spans)
        complete = self.laggard_outer == self.outer_steps
        return Played(
            player=LEARNERS.name,
            totals=workers,
            wall_time_s=self.last_end_s - self.first_start_s if with_rows else 0.0,
            sync_durations_s=column([self.spans[key][1] - self.spans[key][0] for key in keys]),
            sync_counts=column([counts[key[2]] for key in keys], np.int64),
            outer_steps=self.scenario.schedule.outer_steps if complete else self.laggard_outer,
            peak_gbps=self.peak_bytes_per_s * BITS_PER_BYTE / BITS_PER_GBIT,
            merged_steps={learner.rank: learner.merged_steps for learner in self.learners},
            counts=counts_for(False, **self.counts),
            row_source=rows,
            transfer_source=transfers,
            lost_compute_s=self.lost_s,
            horizon_reached=self.horizon_reached,
            incomplete_reason=self.incomplete_reason,
            events=self.events,
        )

    def kept_rows(self) -> list[Row]:
        """The rows, which a run made with ``keep_rows`` keeps."""
        assert self.rows is not None, "rows are kept only by a run made with keep_rows"
        return self.rows

    @property
    def transfers(self) -> list[Transfer]:
        """The transfers as ``FlowNetwork`` leaves them (each at its rate alone over its one link), in the
        order they started moving."""
        topology, moved = self.setup.topology, self.moved
        assert moved is not None, "transfers are kept only by a run made with keep_rows"
        made = []
        for rank, up, start_s, end_s, rate in sorted(moved, key=lambda moved: moved[2]):
            transfer = Transfer(
                ((topology.uplinks if up else topology.downlinks)[rank],), 0.0, UNCLOCKED
            )
            transfer.segments = [(start_s, end_s, rate)]
            transfer.rate_bytes_per_s, transfer.peak_bytes_per_s = 0.0, rate
            made.append(transfer)
        return made


LEARNERS = LearnersPlayer()
