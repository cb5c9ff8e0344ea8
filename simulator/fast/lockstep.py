"""Runs in lockstep, played with arrays instead of events.

Where nothing moves a worker's timeline but its own compute and the collectives every worker joins
(``why_not``: a coupled schedule, every worker there from the start and with the same steps per
scheduled step; no churn, chip failures, deadline or adaptive barrier, exchange work, end spread,
token bucket or staged collective), the event model's run is a recursion
over the launches and applies that every worker meets in the same order (``workers.sync_actions``),
which numpy plays for every worker at once:

* a launch: each worker computes up to the launch step (its own draw), then arrives once its
  previous exchange is over; the collective starts at the last arrival and ends after the ring's
  closed form, computed operation for operation as ``AlphaBetaNetwork`` and SimPy's clock do;
* an apply: each worker computes up to the apply step, then waits for the collective's end:
  ``idle`` before it started, ``stall`` after.

A compute span that collectives in flight overlap runs slowed while they move bytes
(``compute.slowdown_while_exchanging``: ``computed``).

The draws are the event model's own (each worker's generator, in the same order:
``StepClock.durations_s``), so the result is the event model's rank for rank
(``tests/test_simulator_lockstep.py``). The summary is gathered as the run goes (per-worker totals,
each collective's span: ``summary.summary_of``), in memory that grows with the workers, not with
worker-syncs; the trace's rows are made only when asked for, by playing the run again with the same
draws, and refused in one line when they would need more memory than an event run the budget admits.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Iterator

import numpy as np

from islands.scenarios import Scenario
from islands.schedules import SyncPoint
from islands.schedules.gather import RING, chosen
from islands.schedules.store_round import NOTHING_HELD, Held, held_after
from islands.summary import Workers
from islands.trace import NO_FRAGMENT, Row

from .. import budget
from ..budget import Budget
from ..compute import slowed_end_s
from ..network.collectives import (
    COLLECTIVES,
    BucketWait,
    Leg,
    bucket_wait,
    calls_of,
    outer_step_s,
    ring_and_leg,
)
from ..network.gather_rounds import StorePaths, gather_stages
from ..network.links import UNCLOCKED, Transfer
from ..played import Played, counts_for, peak_gbps
from ..setup import RunSetup
from ..workers import LAUNCH, sync_actions
from .timeline import Timeline, timeline_of

# What a lockstep run costs, in the event model's events of the same time (measured: a launch and an
# apply in Python about 75 us, a worker's share of the arrays' work about 0.4 us, an event 10-30 us),
# so that ``--max-events`` bounds its time as it bounds an event run's.
EVENTS_PER_COLLECTIVE = 8
EVENTS_PER_WORKER_SYNC = 0.05
ACTIONS_PER_CHUNK = 1024  # launches and applies whose compute spans each worker draws in one call
DRAWS_PER_CHUNK = 32_000_000  # durations held at once, all workers together: 256 MB at most


def why_not(scenario: Scenario, coupled: bool) -> str | None:
    """Why the scenario's run is not a lockstep recursion (see the module's docstring), or None. The
    flow model that ``network.model = "auto"`` takes for exchanges that may overlap gives the closed form
    here: each worker's exchanges run one at a time and every worker is in every ring, so a collective
    starts after the one before it ended and no two transfers ever share a link (``network.model =
    "flow"`` given by hand keeps the event model)."""
    network = scenario.network
    reasons = (
        (not coupled, "its learners exchange on their own (Decoupled DiLoCo)"),
        (network.model == "flow", 'network.model = "flow" given by hand keeps the event model'),
        (scenario.has_churn(), "workers join or leave"),
        (scenario.has_failures(), "chips fail"),
        (
            scenario.schedule.barrier != "wait",
            f"the {scenario.schedule.barrier} barrier moves workers apart",
        ),
        (network.collective != "ring", f"a {network.collective} collective is staged"),
        (network.exchange_cpu_s_per_value != 0, "exchange work moves each member's arrival"),
        (network.exchange_end_spread_s != 0, "members end a collective apart"),
        (
            any(
                island.upload_burst_bytes or island.download_burst_bytes
                for island in scenario.islands
            ),
            "token buckets fill and drain between exchanges",
        ),
    )
    return next((why for failed, why in reasons if failed), None)


def guard(scenario: Scenario, max_events: float) -> Budget:
    """The scenario's budget (float64 time checked), refused in one line when its lockstep run would
    take longer than ``max_events`` events of the event model, or hold more memory than they admit
    (its memory does not grow with the syncs: the topology and one sync's state per worker)."""
    estimate = budget.estimate(scenario)
    collectives = scenario.schedule.outer_steps * budget.collectives_per_outer(scenario)
    cost = EVENTS_PER_COLLECTIVE * collectives + EVENTS_PER_WORKER_SYNC * estimate.worker_syncs
    if cost > max_events:
        raise budget.BudgetExceeded(
            scenario.source,
            "--max-events",
            f"the run would take as long as about {cost:.3g} simulator events ({collectives:.3g} collectives "
            f"played with arrays), above the budget of {max_events:g} events: raise --max-events",
        )
    budget.check(scenario, estimate, math.inf)  # float64 time
    held = dataclasses.replace(
        estimate,
        memory_bytes=estimate.topology_bytes + budget.BYTES_PER_WORKER_SYNC * scenario.worker_count,
    )
    budget.check_memory(scenario, held, max_events)  # one sync's state per worker, and the topology
    return held


class Lockstep:
    """One lockstep play of a setup: its workers' clocks and totals as arrays."""

    def __init__(self, setup: RunSetup, rows: list[Row] | None = None):
        self.setup = setup
        self.fleet = setup.fleet()  # its own states and clocks: a replay draws what the run drew
        self.rows = rows  # filled when the trace is asked for
        self.states = states = self.fleet.states
        count = len(states)
        self.ranks = [state.worker.rank for state in states]
        self.islands = [state.worker.island for state in states]
        self.now = np.zeros(count)  # each worker's clock
        self.compute = np.zeros(count)
        self.idle = np.zeros(count)
        self.stall = np.zeros(count)
        self.bytes_sent = np.zeros(count)
        self.spans: dict[
            tuple[int, int], tuple[float, float]
        ] = {}  # each collective in flight: (start, end)
        self.sync_durations_s: list[float] = []  # each collective's, in launch order
        self.last_end_s = (
            -math.inf
        )  # the latest collective's end: each worker's exchanges run in turn
        self.position = 0.0
        self.merged_steps = 0.0
        self.applied_position = 0.0
        self.syncs = 0
        self.transfers: list[Transfer] = []
        self.one_run: tuple[Timeline, list[float]] | None = (
            None  # ``play_one``'s timeline and collective starts
        )
        self.peak_transfers: list[Transfer] = []  # ``play_one``: each ring's first transfer
        self.participants = setup.topology.ring(
            self.ranks, setup.scenario.network.ring_order
        )  # never changes
        self.rings: dict[
            tuple, tuple
        ] = {}  # (collective, payload) -> its ring, leg and first transfer
        self.set_up_s = setup.scenario.exchange.first_call_s  # paid by the run's first collective
        self.slowdown = setup.scenario.compute.slowdown_while_exchanging
        self.store = StorePaths.of(setup.scenario)  # where ``network.gather = "store"`` sends
        # every worker's connections to the store, the same for all: they start together
        self.held: Held = NOTHING_HELD
        self.rounds: dict[
            tuple, tuple
        ] = {}  # (payload, chosen) -> a gather's bytes sent and stages
        self.waits: dict[tuple, BucketWait | None] = {}  # (collective, payload) -> ``buckets``
        # a collective whose calls wait for buckets: each worker's arrival at its launch, and the
        # bytes each sends (its comm rows are written once its end is known, in ``apply``)
        self.froms: dict[tuple[int, int], tuple[np.ndarray, np.ndarray | float]] = {}

    def play(self) -> None:
        setup = self.setup
        one_transfer = setup.scenario.network.gather == RING  # a gather's stages take the arrays
        if (
            self.rows is None
            and len(self.states) == 1
            and not self.states[0].clock.jitter_cv
            and one_transfer
            and not self.slowdown  # ``computed`` slows compute under the exchanges in flight
        ):
            self.play_one(timeline_of(setup.schedule, setup.scenario.schedule))
            return
        actions = sync_actions(setup.schedule.sync_points(setup.scenario, 0))
        per_chunk = max(2, min(ACTIONS_PER_CHUNK, DRAWS_PER_CHUNK // len(self.states)))
        for chunk in chunks(actions, per_chunk):
            durations = iter(self.draw(chunk).T)
            for action, point in chunk:
                target = point.launch_step if action is LAUNCH else point.apply_step
                if target > self.position:
                    self.computed(next(durations), point.outer_step)
                    self.position = target
                if action is LAUNCH:
                    self.launch(point)
                else:
                    self.apply(point)

    def play_one(self, timeline: Timeline) -> None:
        """``play`` for a run of one simulated worker without jitter (an island's replicas grouped: a
        planner's runs), with Python floats instead of arrays of one, over the schedule's ``Timeline``:
        the same operations in the same order, so the same bits (``tests/test_simulator_lockstep.py``),
        at about a microsecond per launch and apply instead of tens (numpy's cost per call). Each compute
        span takes its steps x the step time, as ``StepClock.durations_s`` does without jitter; each
        collective starts when the worker is there and its previous one is over, and ends after its
        ring's closed form (``launch``). The transfers are made when the links table asks for them
        (``one_transfers``). No trace rows: a trace replays with arrays."""
        step_time_s = self.states[0].clock.step_time_s
        legs = self.legs()
        now = compute = idle = stall = 0.0
        last_end_s = self.last_end_s
        launches = len(timeline.fragments)
        starts, ends = [0.0] * launches, [0.0] * launches
        leg_of = [legs[fragment] for fragment in timeline.fragments]
        set_up_s = self.setup.scenario.exchange.first_call_s
        outer_of = [legs[fragment][4] for fragment in timeline.fragments]
        buckets_of = [legs[fragment][5] for fragment in timeline.fragments]
        froms = [0.0] * launches  # each launch's arrival: a backward window's start (buckets)
        for action, steps in zip(timeline.actions, timeline.steps):
            if steps:
                since, now = now, now + steps * step_time_s
                compute += now - since
            if action >= 0:
                start_s = now if now > last_end_s else last_end_s  # max(): the first when equal
                latency_s, transfer_s = leg_of[action][:2]
                if set_up_s:  # the run's first call sets the communicator up
                    latency_s, set_up_s = latency_s + set_up_s, 0.0
                data_end = start_s + latency_s + transfer_s  # the data starts after the latency
                last_end_s = ends[action] = start_s + (
                    data_end - start_s
                )  # SimPy: now + the timeout's delay
                starts[action], froms[action] = start_s, now
                continue
            end_s, buckets = ends[~action], buckets_of[~action]
            if buckets is not None:  # the calls end with the last bucket's
                one = np.array([now])
                end_s = ends[~action] = after_s(
                    end_s, now, buckets.end_s(end_s, np.array([froms[~action]]), one)
                )
                last_end_s = max(last_end_s, end_s)
            if now < end_s:
                start_s = starts[~action]
                boundary = now if now > start_s else start_s
                idle += boundary - now
                stall += end_s - boundary
                now = end_s
            held_s = outer_of[~action]
            if held_s > 0:
                stall += held_s
                now += held_s
        sent = 0.0
        for leg in leg_of:
            sent += leg[2]
        self.now, self.compute, self.idle, self.stall, self.bytes_sent = (
            np.array([value]) for value in (now, compute, idle, stall, sent)
        )
        self.last_end_s, self.syncs = last_end_s, launches
        self.sync_durations_s = np.array(ends) - np.array(starts)
        self.merged_steps = timeline.merged_steps
        self.one_run = timeline, starts
        self.peak_transfers = [legs[fragment][3] for fragment in sorted(set(timeline.fragments))]

    def legs(self) -> list[tuple[float, float, float, Transfer, float, BucketWait | None]]:
        """Each fragment's collective as ``play_one`` takes it: the latency before its data moves, the
        seconds its bytes take at its ring's rate, the bytes each worker sends, its first transfer, the
        outer step after it (``outer_step_s``) and its calls' wait for their buckets (``buckets``)."""
        values, payloads, collective = self.setup.schedule.priced_fragments(self.setup.scenario)
        legs = []
        for fragment_values, payload_bytes in zip(values, payloads):
            ring, leg, first = self.ring(collective, payload_bytes)
            legs.append(
                (
                    leg.latency_s,
                    leg.bytes_per_link / first.rate_bytes_per_s,
                    ring.bytes_per_worker,
                    first,
                    outer_step_s(self.setup.scenario, fragment_values),
                    self.buckets(collective, payload_bytes),
                )
            )
        return legs

    def one_transfers(self) -> list[Transfer]:
        """``play_one``'s transfers, as ``launch`` makes them: each a copy of its ring's first (its counted
        links included), moving from the latency's end at its rate alone."""
        assert self.one_run is not None, "asked of a run that play_one played (LockstepPlayer.play)"
        timeline, starts = self.one_run
        legs = self.legs()
        transfers = []
        set_up_s = self.setup.scenario.exchange.first_call_s
        for fragment, start_s in zip(timeline.fragments, starts):
            latency_s, transfer_s, _, first, _, _ = legs[fragment]
            latency_s, set_up_s = latency_s + set_up_s, 0.0
            transfer = object.__new__(Transfer)
            transfer.__dict__.update(first.__dict__)
            data_start = start_s + latency_s
            transfer.segments = [(data_start, data_start + transfer_s, transfer.rate_bytes_per_s)]
            transfer.end_s = data_start + transfer_s
            transfers.append(transfer)
        return transfers

    def draw(self, chunk: list[tuple[object, SyncPoint]]) -> np.ndarray:
        """Every worker's durations of the chunk's compute spans (workers x spans), from its own
        generator in the event model's order; an island's lognormal parameters computed once."""
        steps, position = [], self.position
        for action, point in chunk:
            target = point.launch_step if action is LAUNCH else point.apply_step
            if target > position:
                steps.append(target - position)
                position = target
        spans = np.array(steps)
        durations = np.empty((len(self.states), len(spans)))
        shared: dict[tuple[float, float], tuple] = {}
        for row, state in enumerate(self.states):
            clock = state.clock
            parameters = None
            if clock.jitter_cv and len(spans):
                key = (clock.step_time_s, clock.jitter_cv)
                if key not in shared:
                    shared[key] = clock.parameter_arrays(spans)
                parameters = shared[key]
            durations[row] = clock.durations_s(spans, parameters)
        return durations

    def ring(self, collective: str, payload_bytes: float) -> tuple:
        """The collective's ring, its leg and a transfer over it (whose rate, links and crossings every
        later one copies: thousands of links are counted once)."""
        key = (collective, payload_bytes)
        if key not in self.rings:
            setup = self.setup
            ring, leg = ring_and_leg(
                setup.scenario,
                setup.topology,
                setup.replica_counts,
                self.fleet.grouped,
                COLLECTIVES[collective],
                self.participants,
                payload_bytes,
            )
            self.rings[key] = ring, leg, first_transfer(leg)
        return self.rings[key]

    def priced(self, point: SyncPoint) -> tuple[np.ndarray | float, list[tuple[Leg, Transfer]]]:
        """The bytes each worker sends in the exchange of ``point`` and its stages in turn, each a leg
        and a transfer over it that later ones copy: the collective's ring, or a gather's stages
        over the round's chosen peers (``network/gather_rounds.py``), the first opening every worker's
        connections to the store."""
        scenario = self.setup.scenario
        if scenario.network.gather == RING:
            ring, leg, first = self.ring(point.collective, point.payload_bytes)
            return ring.bytes_per_worker, [(leg, first)]
        picked = chosen(scenario.seed, point.outer_step, self.ranks, scenario.schedule.gather_peers)
        held, self.held = self.held, held_after(self.held, len(picked))
        key = (point.payload_bytes, picked, tuple(sorted(held.items())))
        if key not in self.rounds:
            staged = gather_stages(
                scenario.network.gather,
                self.ranks,
                picked,
                point.payload_bytes,
                self.setup.topology,
                self.store,
                scenario.network,
                dict.fromkeys(self.ranks, held),
            )
            sent = np.array([staged.bytes_sent[rank] for rank in self.ranks])
            self.rounds[key] = sent, [(leg, first_transfer(leg)) for (leg,) in staged.stages]
        return self.rounds[key]

    def buckets(self, collective: str, payload_bytes: float) -> BucketWait | None:
        """How the collective's calls wait for their buckets during the backward pass
        (``collectives.bucket_wait``); None for a gather's top-k payloads, and any exchange but DDP's
        buckets."""
        if self.setup.scenario.network.gather != RING:
            return None
        key = (collective, payload_bytes)
        if key not in self.waits:
            ring, leg, first = self.ring(collective, payload_bytes)
            scenario = self.setup.scenario
            self.waits[key] = bucket_wait(
                scenario,
                payload_bytes,
                leg,
                calls_of(scenario, payload_bytes),
                first.rate_bytes_per_s,
            )
        return self.waits[key]

    def computed(self, duration_s: np.ndarray, outer_step: int) -> None:
        """Each worker computes its drawn span from its clock on, slowed while the collectives in
        flight move bytes (``compute.slowed_end_s``: every worker is in each, from its start to its end,
        and they run one after another)."""
        since = self.now
        if self.slowdown:
            self.now = slowed_end_s(since, duration_s, sorted(self.spans.values()), self.slowdown)
        else:
            self.now = since + duration_s
        self.compute += (
            self.now - since
        )  # a row's seconds (0 where the clock absorbs a step: no row)
        if self.rows is not None:
            self.record("compute", since, self.now, NO_FRAGMENT, outer_step)

    def launch(self, point: SyncPoint) -> None:
        """Every worker arrives (after its previous exchange); the ring starts with the last and ends
        after its closed form."""
        start_s = max(float(self.now.max()), self.last_end_s)
        sent, stages = self.priced(point)
        end_s = start_s
        for leg, first in stages:  # a staged gather's stages in turn, as the event model runs them
            transfer = object.__new__(Transfer)  # a copy of the first, its counted links included
            transfer.__dict__.update(first.__dict__)
            rate = transfer.rate_bytes_per_s
            latency_s, self.set_up_s = (
                leg.latency_s + self.set_up_s,
                0.0,
            )  # the first call sets up the communicator
            data_start = end_s + latency_s
            data_end = data_start + leg.bytes_per_link / rate
            transfer.segments = [(data_start, data_end, rate)]
            transfer.end_s = data_end
            self.transfers.append(transfer)
            end_s = end_s + (data_end - end_s)  # SimPy's clock: now + the timeout's delay
        key = (point.outer_step, point.fragment)
        self.spans[key] = (start_s, end_s)
        self.last_end_s = end_s
        self.bytes_sent += sent
        self.syncs += 1
        if self.buckets(point.collective, point.payload_bytes) is not None:
            self.froms[key] = self.now.copy(), sent  # its end and rows wait for the buckets
            return
        self.sync_durations_s.append(end_s - start_s)
        self.comm_rows(point, sent, start_s, end_s)

    def comm_rows(
        self, point: SyncPoint, sent: np.ndarray | float, start_s: float, end_s: float
    ) -> None:
        """Every worker's comm row of the collective of ``point``, when rows are kept."""
        if self.rows is not None:
            each = np.broadcast_to(sent, len(self.ranks)).tolist()
            self.rows.extend(
                Row(
                    start_s,
                    end_s,
                    rank,
                    island,
                    "comm",
                    bytes_sent,
                    point.fragment,
                    point.outer_step,
                )
                for rank, island, bytes_sent in zip(self.ranks, self.islands, each)
            )

    def apply(self, point: SyncPoint) -> None:
        """Every worker waits for the collective's end (``Exchanges.record_wait``; calls that wait for
        their buckets end with the last: ``bucket_end``), then merges."""
        start_s, end_s = self.spans.pop((point.outer_step, point.fragment))
        since = self.now
        buckets = self.buckets(point.collective, point.payload_bytes)
        if buckets is not None:
            end_s = self.bucket_end(point, buckets, start_s, end_s)
        if float(since.max()) < end_s:  # everyone waits (a blocking sync): adding 0.0 is no row
            boundary = np.maximum(since, start_s)
            self.idle += boundary - since
            self.stall += end_s - boundary
            self.now = np.full(len(since), end_s)
        else:
            waiting = end_s > since
            boundary = np.minimum(end_s, np.maximum(since, start_s))
            self.idle += np.where(waiting, boundary - since, 0.0)
            self.stall += np.where(waiting, end_s - boundary, 0.0)
            self.now = np.where(waiting, end_s, since)
        if self.rows is not None:
            self.record_waits(point, since, np.minimum(end_s, np.maximum(since, start_s)), end_s)
        outer_s = outer_step_s(self.setup.scenario, point.values)
        if outer_s:  # the outer step and merge
            waited = self.now
            self.now = waited + outer_s
            self.stall += self.now - waited
            if self.rows is not None:
                self.record("stall", waited, self.now, point.fragment, point.outer_step)
        self.merged_steps += self.position - self.applied_position
        self.applied_position = self.position

    def bucket_end(
        self, point: SyncPoint, buckets: BucketWait, start_s: float, bytes_end_s: float
    ) -> float:
        """When the calls of the collective of ``point`` that wait for their buckets end
        (``BucketWait.end_s``, each worker's backward window from its arrival at the launch to now),
        as the event model's clock has it (``after_s``); its sync duration and comm rows."""
        since = self.now
        froms, sent = self.froms.pop((point.outer_step, point.fragment))
        end_s = after_s(bytes_end_s, float(since.max()), buckets.end_s(bytes_end_s, froms, since))
        self.last_end_s = max(self.last_end_s, end_s)
        self.sync_durations_s.append(end_s - start_s)
        self.comm_rows(point, sent, start_s, end_s)
        return end_s

    def record(
        self, kind: str, since: np.ndarray, until: np.ndarray, fragment: int, outer_step: int
    ) -> None:
        assert self.rows is not None, "rows are recorded only by a run that keeps them"
        self.rows.extend(
            Row(start, end, rank, island, kind, 0.0, fragment, outer_step)
            for start, end, rank, island in zip(
                since.tolist(), until.tolist(), self.ranks, self.islands
            )
            if end > start
        )

    def record_waits(
        self, point: SyncPoint, since: np.ndarray, boundary: np.ndarray, end_s: float
    ) -> None:
        waiting = end_s > since
        until = np.where(waiting, end_s, since)
        self.record(
            "idle", since, np.where(waiting, boundary, since), point.fragment, point.outer_step
        )
        self.record(
            "stall", np.where(waiting, boundary, until), until, point.fragment, point.outer_step
        )

    def workers(self) -> Workers:
        """The per-worker totals ``summary.summary_of`` takes: every worker there from 0 to its last row."""
        states = self.states
        return Workers(
            island=np.array(self.islands, dtype=object),
            count=np.array([state.count for state in states], dtype=np.int64),
            compute=self.compute,
            stall=self.stall,
            idle=self.idle,
            present_s=self.now.copy(),
            bytes_sent=self.bytes_sent,
            wasted_bytes=np.zeros(len(states)),  # no churn, nothing thrown away
            syncs=np.full(len(states), float(self.syncs)),
        )


def after_s(bytes_end_s: float, last_arrival_s: float, end_s: float) -> float:
    """``end_s`` as SimPy's clock reaches it (``events.exchanges.settle_buckets``): from the later of
    the transfer's end and the last member's arrival, plus the time left."""
    from_s = last_arrival_s if last_arrival_s > bytes_end_s else bytes_end_s
    return from_s + (end_s - from_s) if end_s > from_s else from_s


def first_transfer(leg: Leg) -> Transfer:
    """A transfer over ``leg`` at its rate alone, which every later one over it copies (thousands of
    links are counted once)."""
    transfer = Transfer(
        leg.links,
        leg.bytes_per_link,
        UNCLOCKED,
        leg.cap_bytes_per_s,
        leg.narrowest_bytes_per_s,
    )
    transfer.rate_bytes_per_s = transfer.peak_bytes_per_s = transfer.alone_bytes_per_s
    transfer.most_access_crossings()
    return transfer


def chunks(items: Iterable, size: int) -> Iterator[list]:
    chunk: list = []
    for item in items:
        chunk.append(item)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def check_rows(setup: RunSetup, budget_: Budget) -> None:
    """Refuse, in one line, a trace whose rows need more memory than an event run the budget admits."""
    limit = setup.max_events * budget.ROWS_PER_WORKER_SYNC / budget.EVENTS_PER_WORKER_SYNC
    if budget_.trace_rows > limit:
        raise budget.BudgetExceeded(
            setup.scenario.source,
            "--max-events",
            f"the trace would have about {budget_.trace_rows:.3g} rows, above the {limit:.3g} that the budget of "
            f"{setup.max_events:g} events admits (the summary needs no trace): raise --max-events",
        )


class LockstepPlayer:
    """Runs in lockstep, with arrays (see the module's docstring)."""

    name = "lockstep"

    def fits(self, setup: RunSetup) -> str | None:
        return why_not(setup.scenario, setup.schedule.coupled)

    def budget(self, setup: RunSetup) -> Budget:
        return guard(setup.scenario, setup.max_events)

    def check_outputs(self, setup: RunSetup, budget_: Budget, trace: bool, links: bool) -> None:
        """A trace replays the run with its rows: refused when they would not fit (``check_rows``)."""
        if trace:
            check_rows(setup, budget_)

    def play(self, setup: RunSetup, budget_: Budget) -> Played:
        run = Lockstep(setup)
        run.play()
        # a run of one worker makes its transfers when asked for; its rings' first transfers have their peaks
        peak_transfers = run.transfers if run.one_run is None else run.peak_transfers
        durations = np.array(run.sync_durations_s)
        transfers = (lambda: run.transfers) if run.one_run is None else run.one_transfers
        return Played(
            player=self.name,
            totals=run.workers(),
            wall_time_s=float(run.now.max()),
            sync_durations_s=durations,
            sync_counts=np.ones(len(durations), dtype=np.int64),
            outer_steps=setup.scenario.schedule.outer_steps,
            peak_gbps=peak_gbps(peak_transfers, setup.topology),
            merged_steps=dict.fromkeys(run.ranks, run.merged_steps),
            counts=counts_for(True),
            row_source=lambda: replayed_rows(setup, budget_),
            transfer_source=transfers,
        )


def replayed_rows(setup: RunSetup, budget_: Budget) -> list[Row]:
    """A lockstep run's rows, played again with the same draws."""
    check_rows(setup, budget_)
    rows: list[Row] = []
    Lockstep(setup, rows=rows).play()
    return rows


LOCKSTEP = LockstepPlayer()
