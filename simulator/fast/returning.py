"""Coupled DiLoCo under churn that returns, played with counts instead of workers: a statistical fast path.

A fleet of identical workers that leave and come back (``mtbf_s`` and ``mttr_s``) makes the event
model's work grow faster than the fleet: every departure breaks the ring (or, under ``on_departure =
"partial"``, drops a member), so an outer step lasts until a ring gets through without one
(exp(-M x ring time / mtbf_s) per try: 2.5% at 1,000 workers of the worked example) and the leaves,
returns and downloads during it grow with M x its length. Nothing in such a run tells one worker
from another but what it is doing, so this module plays the same rules on counts (``why_not`` says
where):

* **who is where**: members (computing, or in the collective), the departed that the others have
  not noticed yet (only their notice times matter), joiners by download (not begun, in flight from
  a holder, in) and whether the collective forming took them in, and the absent;
* **when things happen**: every present worker leaves at rate 1 / ``mtbf_s`` and every absent one
  returns at rate 1 / ``mttr_s``, so the next change is one draw from their sum and its kind a second
  draw in proportion (a continuous-time Markov chain over the counts, the same law as the event
  model's per-worker exponential clocks, drawn in another order); compute periods, notices after
  ``network.detection_timeout_s``, ring ends and download ends are timers, as in the event model;
* **the network**: a ring crosses every participant's links; joiners download the weights from a
  present member (a *holder*) over its uplink, the one ``network.weights_from = "fastest"`` picks
  (``schedules/serving.py``; on links alike, the member sending the fewest downloads, ties to the
  one that became a holder first: ``holders.assign``), so the ring and the downloads of a holder share
  its uplink; the rates are the flow model's max-min fair shares over the few kinds of link that
  carry more than one flow, in closed form (``holders.fill_closed``, checked against progressive
  filling, ``holders.fill``), recomputed when a flow starts or ends. Downloads begun together from
  one holder are one group; a holder is followed on its own while it sends, and one that leaves takes
  its downloads with it: they begin again from the others at once while the members compute, else
  at the next outer boundary (``Counts.holder_left``);
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
  or the first departure of a holder.

The summary is gathered as the run goes (each worker's seconds of compute, idle, stall and presence
as its rows would add them, the bytes, of them those thrown away with a broken ring or a cut download,
each collective from its first try to its end). It draws differently from the event model (one
generator for the run, not one per worker), so it is checked against it over many seeds with a
statistical test (``tests/test_simulator_returning.py``, docs/performance.md); without
departures it is the event model's run. Approximated: a holder's rank is the order it became one in
(the rank breaks ties only, and workers alike are drawn alike whatever their ranks), and a departing
joiner's download row past the collective's forming is the average of theirs.

**Error bars.** One counted run is one draw of the run, as one event run is: its figures scatter over
seeds as the event model's do. Their means over seeds agree with the event model's within its sampling
error: every figure of the summary (wall, compute, stall, idle, bytes per worker, mean sync, lost
compute, joins, leaves, dropped members, goodput) within 3.5 standard errors of the difference over
80-300 seeds, on mild and heavy churn, restart and partial, 10 workers away five times longer than
present, and 200 workers away 16 times longer (``tests/test_simulator_returning.py``); over 300 seeds of
the issue's fleet (1,000 workers, MTBF 2,000 s, MTTR 50,000 s, 10 syncs) every figure within 2.5 standard
errors, the means within 1.4% (goodput, the noisiest, 4.7%). The tables of docs/performance.md (1,000
seeds) were measured before downloads spread over the holders (every joiner then downloaded from the
lowest holder).

**No member left** (``Changes.emptied``, ``Counts.orphan``): the counts play on, as ``churn.py`` does. A
worker back while no member is present starts at once, the only member; a ring in flight breaks
(partial too: no member holding the state is left in it), the collective stays formed with its joiners,
and the members compute again; the joiners waiting start alone at the first departure noticed from
then on, those in the collective at the notice of the last member's departure if no member is back
(a worker that started alone meanwhile holds the state: the collective expects it, ``Churn.expect``).
No download is in flight then (every holder has left, taking its downloads with it), and none begins
for those that start alone. So ``play`` finishes every run it is given, and whether it is admitted
depends on the scenario alone.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from islands.scenarios import Scenario
from islands.schedules import Schedule
from islands.summary import Workers
from islands.units import BITS_PER_BYTE, BITS_PER_GBIT

from .. import budget
from ..budget import Budget
from ..played import Played, counts_for
from ..setup import RunSetup
from .changes import churn_times
from .counts import Counts
from .timeline import timeline_of

# The event model's estimated events above which the counts play the run: an eightieth of the default
# budget, an event run of about 0.5-1 s (an event of a fleet of thousands costs 20-40 us: 2,000 islands
# x 5 syncs spent 24,680 events in 0.97 s); below, the event model is fast enough and draws worker by
# worker; above, the counts play in a tenth of a second what the event model plays in seconds.
FAST_FROM_EVENTS = 25_000
# A counted change costs about 5 us (an event of the event model 10-30 us) and may change rates
EVENTS_PER_CHANGE = 0.5


def why_not(setup: RunSetup) -> str | None:
    """Why the scenario is not a coupled run of one island of identical workers, all there from the
    start, that leave and return at random, with one blocking exchange per outer step over a ring on
    links without latency, and nothing else that moves a worker (see the module's docstring), or None."""
    scenario, schedule = setup.scenario, setup.schedule
    if len(scenario.islands) != 1 or not schedule.coupled:
        return "not a coupled schedule over one island"
    island, network = scenario.islands[0], scenario.network
    reasons = (
        (
            island.mtbf_s is None or island.mttr_s is None,
            "its workers do not leave and return at random",
        ),
        (not island.present or scenario.events, "workers join by scheduled events"),
        (island.jitter_cv != 0, "its step times are jittered"),
        (
            island.latency_ms != 0
            or scenario.regions
            or scenario.backbones
            or scenario.latencies
            or network.rtt_csv,
            "its links have latency or regions",
        ),
        (island.upload_gbps != island.download_gbps, "its uplink and downlink differ"),
        (
            bool(island.upload_burst_bytes or island.download_burst_bytes),
            "its links have token buckets",
        ),
        (scenario.has_failures(), "chips fail"),
        (setup.network_model != "flow", f"network.model = {setup.network_model!r}"),
        (network.collective != "ring", f"a {network.collective} collective"),
        (network.gather != "ring", f'network.gather = "{network.gather}"'),
        (
            network.exchange_cpu_s_per_value != 0 or network.exchange_end_spread_s != 0,
            "exchange work or an end spread",
        ),
        (
            network.ring_efficiency != 1 or not scenario.exchange.is_default,
            "an [exchange] or ring efficiency",
        ),
        (network.egress_queue != "fair", f'network.egress_queue = "{network.egress_queue}"'),
        (scenario.schedule.barrier != "wait", f"the {scenario.schedule.barrier} barrier"),
        (
            network.on_departure not in ("restart", "partial"),
            f"network.on_departure = {network.on_departure!r}",
        ),
        (network.weights_from != "fastest", f"network.weights_from = {network.weights_from!r}"),
        (
            blocking_period_steps(scenario, schedule) is None,
            "not one blocking exchange per outer step",
        ),
    )
    return next((why for failed, why in reasons if failed), None)


def period_steps(setup: RunSetup) -> float:
    """``blocking_period_steps`` of a run the counts play (``why_not`` saw it is one)."""
    steps = blocking_period_steps(setup.scenario, setup.schedule)
    assert steps is not None, "the counts play one blocking exchange per outer step"
    return steps


def blocking_period_steps(scenario: Scenario, schedule: Schedule) -> float | None:
    """The inner steps between two exchanges where every outer step is one exchange that the workers
    launch after computing them and wait for at once (DiLoCo); None for any other timeline."""
    timeline = timeline_of(schedule, scenario.schedule)
    actions, steps = timeline.actions, timeline.steps
    if not actions or len(actions) != 2 * len(timeline.fragments) or set(timeline.fragments) != {0}:
        return None
    period = steps[0]
    for index in range(0, len(actions), 2):
        if (
            actions[index] != index // 2
            or actions[index + 1] != ~(index // 2)
            or steps[index] != period
            or steps[index + 1] != 0
        ):
            return None
    return period if period > 0 else None


class ReturningPlayer:
    """Coupled DiLoCo under churn that returns, on counts: a statistical fast path (see the module's
    docstring)."""

    name = "counts"

    def fits(self, setup: RunSetup) -> str | None:
        """It fits where it applies and the event model's run would be long (lockstep, which needs no
        churn, never fits then)."""
        why = why_not(setup)
        if why is None and (events := budget.estimate(setup.scenario).events) <= FAST_FROM_EVENTS:
            why = f"the event model's run is short (about {events:.3g} events): it draws worker by worker"
        return why

    def budget(self, setup: RunSetup) -> budget.Budget:
        """The counts hold no rows and a few numbers per flow, and cost about ``EVENTS_PER_CHANGE``
        events of the event model per membership change, of which the run is expected to make
        ``expected_changes``; refused in one line past ``--max-events`` (or float64 time)."""
        scenario, max_events = setup.scenario, setup.max_events
        estimate = budget.estimate(scenario)
        changes = expected_changes(setup, estimate.horizon_s)
        cost = EVENTS_PER_CHANGE * changes
        if cost > max_events:
            raise budget.BudgetExceeded(
                scenario.source,
                "--max-events",
                f"the run on counts would cost about {cost:.3g} simulator events (about "
                f"{changes:.3g} joins and leaves expected, {EVENTS_PER_CHANGE:g} events "
                f"each), above the limit of {max_events:g} events: raise --max-events",
            )
        held = dataclasses.replace(
            estimate,
            events=cost,
            membership_changes=changes,
            trace_rows=0.0,
            memory_bytes=estimate.topology_bytes + budget.BYTES_PER_WORKER_SYNC,
        )
        budget.check(scenario, held, max_events)
        return held

    def check_outputs(self, setup: RunSetup, budget_: Budget, trace: bool, links: bool) -> None:
        if trace or links:
            no_rows(setup.scenario)

    def play(self, setup: RunSetup, budget_: Budget) -> Played:
        """The run on counts, to its end or its horizon, whatever it meets (an empty fleet included)."""
        counts = Counts(setup, period_steps(setup), budget_.horizon_s)
        counts.play()
        return played_of(setup, counts)


def expected_changes(setup: RunSetup, horizon_s: float | None) -> float:
    """The joins and leaves a run is expected to make: those of the fleet's two-state chains (away at
    rate 1 / mtbf_s, back at 1 / mttr_s, all present at 0) over the run's expected length
    (``budget.expected_length_s``, the one every player's budget reads). Each present
    worker leaves at lam P(t), each absent one returns at mu (1 - P(t)), where P(t) = p + (1 - p)
    exp(-(lam + mu) t) and p = mu / (lam + mu); integrated over [0, T]: 2 lam mu / (lam + mu) T +
    (lam - mu) (1 - p) (1 - exp(-(lam + mu) T)) / (lam + mu), per worker."""
    mtbf_s, mttr_s = churn_times(setup.scenario.islands[0])
    lam, mu = 1.0 / mtbf_s, 1.0 / mttr_s
    wall_s = budget.expected_length_s(
        setup.scenario, setup.workers, math.inf if horizon_s is None else horizon_s
    )
    rate, p = lam + mu, mu / (lam + mu)
    per_worker = (
        2 * lam * mu / rate * wall_s + (lam - mu) * (1 - p) * -math.expm1(-rate * wall_s) / rate
    )
    return setup.scenario.worker_count * per_worker


def played_of(setup: RunSetup, counts: Counts) -> Played:
    """The totals of the counts, as an event run's rows would give them (``summary.summary_of``)."""
    scenario = setup.scenario
    size = counts.fleet_size
    complete = not counts.horizon_reached
    island = scenario.islands[0].name
    workers = Workers(
        island=np.array([island], dtype=object),
        count=np.array([size], dtype=np.int64),
        compute=np.array([counts.compute / size]),
        stall=np.array([counts.stall / size]),
        idle=np.array([counts.idle / size]),
        present_s=np.array([counts.present / size]),
        bytes_sent=np.array([counts.bytes_sent / size]),
        wasted_bytes=np.array([counts.wasted / size]),
        syncs=np.array([counts.sync_rows / size]),
    )
    durations = np.array(counts.durations)
    completed = counts.completed if complete else len(counts.durations)
    refuse = lambda: no_rows(scenario)  # noqa: E731
    return Played(
        player=RETURNING.name,
        totals=workers,
        wall_time_s=counts.now,
        sync_durations_s=durations,
        sync_counts=np.ones(len(durations), dtype=np.int64),
        outer_steps=scenario.schedule.outer_steps if complete else len(durations),
        peak_gbps=counts.capacity * BITS_PER_BYTE / BITS_PER_GBIT,
        merged_steps={worker.rank: counts.merged_steps / size for worker, _ in setup.groups},
        counts=counts_for(
            True, joins=counts.joins, leaves=counts.leaves, dropped_members=counts.dropped_members
        ),
        row_source=refuse,
        transfer_source=refuse,
        lost_compute_s=counts.lost_s,
        horizon_reached=not complete,
        incomplete_reason=None
        if complete
        else budget.horizon_reason(completed, scenario, counts.horizon_s),
    )


def no_rows(scenario: Scenario) -> list:
    """A counted run has a summary and nothing per worker: refuse its trace and links in one line."""
    raise budget.BudgetExceeded(
        scenario.source,
        "island.0.replicas",
        "a run of this many churning workers is played on counts (simulator/fast/returning.py) and keeps no "
        "rows per worker: its summary only; for a trace or links, simulate fewer workers or outer steps "
        "(docs/performance.md)",
    )


RETURNING = ReturningPlayer()
