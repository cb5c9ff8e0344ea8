"""Coupled DiLoCo under churn that returns, played with counts instead of workers: a statistical fast path.

A fleet of identical workers that leave and come back (``mtbf_s`` and ``mttr_s``) makes the event
model's work grow faster than the fleet: every departure breaks the ring (or, under ``on_departure =
"partial"``, drops a member), so an outer step lasts until a ring gets through without one
(exp(-M x ring time / mtbf_s) per try: 2.5% at 1,000 workers of the worked example) and the leaves,
returns and downloads during it grow with M x its length. Nothing in such a run tells one worker
from another but what it is doing, so this module plays the same rules on counts (``applies`` says
where):

* **who is where**: members (computing, or in the collective), the departed that the others have
  not noticed yet (only their notice times matter), joiners by download (not begun, in flight from
  a holder, in) and whether the collective forming took them in, and the absent;
* **when things happen**: every present worker leaves at rate 1 / ``mtbf_s`` and every absent one
  returns at rate 1 / ``mttr_s``, so the next change is one draw from their sum and its kind a second
  draw in proportion (a continuous-time Markov chain over the counts, the same law as the event
  model's per-worker exponential clocks, drawn in another order); compute periods, notices after
  ``network.detection_timeout_s``, ring ends and download ends are timers, as in the event model;
* **the network**: a ring crosses every participant's links; joiners download the weights from the
  lowest present member (a *holder*) over its uplink, so the ring and every download from a holder in
  the ring share that uplink; the rates are the flow model's max-min fair shares over the few kinds
  of link that carry more than one flow, in closed form (``holders.fill_closed``, checked against
  progressive filling, ``holders.fill``), recomputed when a flow starts or ends. Downloads begun
  together are one group; a holder is followed on its own (``Holder.place``) while its uplink
  carries downloads, so the ring crosses it again when it is back in it and, back among the
  members, it is the lowest holder again;
* **the rules** of ``churn.py``: a joiner downloads once no collective is pending since the last outer
  boundary, takes part in the next collective that forms, and computes from the outer boundary after
  its download is in; a departure breaks the ring in flight (or drops the member, ``partial``, and a
  dropped member back and leaving again is dropped again), which restarts once every departure is
  noticed; the work since a worker's last sync is lost;
* **grouped**: a worker that leaves while a collective is pending matters to nobody before the next
  outer boundary but by its presence (restart), so their returns and departures are drawn there, for
  all of them at once (``chain.alternate``), not one step each;
* **chained**: while a collective is pending (restart), its participants only leave, so a run of
  departures, restarts and broken rings is drawn at once (``chain.py``: the gaps, who leaves, each
  gap's ring and download progress in closed form) up to the first ring or download that gets through
  or the first departure of a followed holder.

The summary is gathered as the run goes (each worker's seconds of compute, idle, stall and presence
as its rows would add them, the bytes, each collective's last try). It draws differently from the
event model (one generator for the run, not one per worker), so it is checked against it over many
seeds with a statistical test (``tests/test_simulator_returning.py``, docs/performance.md); without
departures it is the event model's run. Approximated: a holder's rank is the order it became one in,
a holder whose uplink carries nothing is no longer followed, and a departing joiner's download row
past the collective's forming is the average of theirs. A state the counts do not cover (no member
left: a joiner would start alone) hands the run back to the event model.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import numpy as np

from islands.summary import Workers, summary_of
from islands.units import BITS_PER_BYTE, BITS_PER_GBIT

from . import budget
from .counts import Counts, Unmodelled
from .endings import horizon_reason
from .timeline import timeline_of

if TYPE_CHECKING:
    from islands.scenarios import Scenario
    from islands.schedules import Schedule

    from .engine import Simulation
    from .result import SimResult

# The event model's estimated events above which the counts play the run: a quarter of the default
# budget, an event run of 5-20 s (below, the event model is fast enough and draws worker by worker).
FAST_FROM_EVENTS = 500_000
# A counted change costs about 5 us (an event of the event model 10-30 us) and may change rates
EVENTS_PER_CHANGE = 0.5


def applies(scenario: Scenario, schedule: Schedule, network_model: str) -> bool:
    """Whether the scenario is a coupled run of one island of identical workers, all there from the
    start, that leave and return at random, with one blocking exchange per outer step over a ring on
    links without latency, and nothing else that moves a worker (see the module's docstring)."""
    if len(scenario.islands) != 1 or not schedule.coupled:
        return False
    island, network = scenario.islands[0], scenario.network
    return (island.mtbf_s is not None and island.mttr_s is not None and island.present and island.jitter_cv == 0
            and island.latency_ms == 0 and island.upload_gbps == island.download_gbps
            and not island.upload_burst_bytes and not island.download_burst_bytes
            and not scenario.events and not scenario.has_failures() and not scenario.regions
            and not scenario.backbones and not scenario.latencies and not network.rtt_csv
            and network_model == "flow" and network.collective == "ring"
            and network.exchange_cpu_s_per_value == 0 and network.exchange_end_spread_s == 0
            and network.ring_efficiency == 1 and scenario.exchange.is_default
            and scenario.schedule.barrier == "wait" and network.on_departure in ("restart", "partial")
            and blocking_period_steps(scenario, schedule) is not None)


def blocking_period_steps(scenario: Scenario, schedule: Schedule) -> float | None:
    """The inner steps between two exchanges where every outer step is one exchange that the workers
    launch after computing them and wait for at once (DiLoCo); None for any other timeline."""
    timeline = timeline_of(schedule, scenario.schedule)
    actions, steps = timeline.actions, timeline.steps
    if not actions or len(actions) != 2 * len(timeline.fragments) or set(timeline.fragments) != {0}:
        return None
    period = steps[0]
    for index in range(0, len(actions), 2):
        if actions[index] != index // 2 or actions[index + 1] != ~(index // 2) or steps[index] != period \
                or steps[index + 1] != 0:
            return None
    return period if period > 0 else None


def chosen(scenario: Scenario, schedule: Schedule, network_model: str) -> bool:
    """Whether the counts play the run: they apply, and the event model's would be long (lockstep,
    which needs no churn, never applies then)."""
    return applies(scenario, schedule, network_model) and budget.estimate(scenario).events > FAST_FROM_EVENTS


def guard(scenario: Scenario, max_events: float) -> budget.Budget:
    """The scenario's budget: the counts hold no rows and a few numbers per flow, and cost about
    ``EVENTS_PER_CHANGE`` events of the event model per membership change; refused in one line past
    ``max_events`` (or float64 time)."""
    estimate = budget.estimate(scenario)
    cost = EVENTS_PER_CHANGE * estimate.membership_changes
    if cost > max_events:
        raise budget.BudgetExceeded(scenario.source, budget.churniest_key(scenario),
                                    f"the run would take as long as about {cost:.3g} simulator events "
                                    f"({estimate.membership_changes:.3g} membership changes counted), above the "
                                    f"limit of {max_events:g} events: raise it, or raise --max-events")
    held = dataclasses.replace(estimate, events=cost, trace_rows=0.0,
                               memory_bytes=estimate.topology_bytes + budget.BYTES_PER_WORKER_SYNC)
    budget.check(scenario, held, max_events)
    return held


def play(sim: Simulation) -> SimResult | None:
    """Play ``sim`` on counts; None where the counts meet a state they do not cover (``Unmodelled``):
    then ``sim`` takes the event model's budget, refused in one line if the event run is beyond it."""
    counts = Counts(sim, blocking_period_steps(sim.scenario, sim.schedule))
    try:
        counts.play()
    except Unmodelled:
        sim.budget = budget.guard(sim.scenario, sim.env.max_events)
        return None
    return result(sim, counts)


def result(sim: Simulation, counts: Counts) -> SimResult:
    """The summary from the counts' totals, as ``summary.summary_of`` takes it from an event run's rows."""
    from .result import SimResult, extra_summary, island_extra, islands_of_links

    scenario, fleet = sim.scenario, sim.fleet
    size = counts.fleet_size
    complete = not counts.horizon_reached
    sim.churn.counts.update(joins=counts.joins, leaves=counts.leaves, dropped_members=counts.dropped_members)
    sim.churn.lost_compute_s = counts.lost_s
    for state in fleet.states:
        state.merged_steps = counts.merged_steps / size
    sim.progress.reach(counts.completed if complete else len(counts.durations))
    if not complete:
        sim.horizon_reached = True
        sim.incomplete_reason = horizon_reason(sim.progress, scenario, counts.horizon_s)
    island = scenario.islands[0].name
    workers = Workers(island=np.array([island], dtype=object), count=np.array([size], dtype=np.int64),
                      compute=np.array([counts.compute / size]), stall=np.array([counts.stall / size]),
                      idle=np.array([counts.idle / size]), present_s=np.array([counts.present / size]),
                      bytes_sent=np.array([counts.bytes_sent / size]), syncs=np.array([counts.sync_rows / size]))
    durations = np.array(counts.durations)
    peak_gbps = counts.capacity * BITS_PER_BYTE / BITS_PER_GBIT
    extra = extra_summary(sim)
    extra["played"] = "counts (simulator/returning.py: a statistical fast path)"
    summary = summary_of(workers, counts.now, durations, np.ones(len(durations), dtype=np.int64),
                         scenario.schedule.outer_steps if complete else len(durations), peak_gbps, extra,
                         island_extra(sim))
    refuse = lambda: no_rows(scenario)  # noqa: E731
    return SimResult(summary=summary, row_source=refuse, transfer_source=refuse, islands=islands_of_links(sim),
                     counts=fleet.replica_counts)


def no_rows(scenario: Scenario) -> list:
    """A counted run has a summary and nothing per worker: refuse its trace and links in one line."""
    raise budget.BudgetExceeded(
        scenario.source, "island.0.replicas",
        "a run of this many churning workers is played on counts (simulator/returning.py) and keeps no rows "
        "per worker: its summary only; for a trace or links, simulate fewer workers or outer steps (docs/performance.md)")
