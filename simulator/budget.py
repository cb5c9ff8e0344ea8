"""What a run will cost, and how long it may take, worked out from the scenario's physics before it runs.

* ``run_length_s`` is an upper bound on a run without random churn: every outer step's compute at
  the slowest worker, plus every collective in series (no overlap; compute that an exchange of c
  seconds slows, ``compute.slowdown_while_exchanging``, ends at most c later), each at the ring's
  own rate:
  the exchange work before it (``network.exchange_cpu_s_per_value`` x the values exchanged), then
  its hop latencies (ring all-reduce 2(M-1), all-gather M-1) plus its bytes per worker (2(M-1)/M * S,
  or (M-1) * S) at min(slowest link, streams * window / RTT), with the hop latency and the RTT of the
  two farthest workers (``Scenario.farthest_hop_latency_s``: backbones and measured round trips
  included); plus, for each scheduled event, the worst a membership change costs (detection, a
  weights download, a lost interval, a re-run sync).
* A run provably ends unless some worker has both ``mtbf_s`` and ``mttr_s``, or chip failures
  (``chip_mtbf_s``): only those make events forever. Then the run stops at ``horizon_s`` =
  ``HORIZON_FACTOR`` x run_length_s and is reported cut short: churn that slows a run to more than
  ten times its churn-free bound is churn the schedule does not survive (every interval broken
  before its sync), not a figure to rank.
* ``events``, ``trace_rows`` and ``memory_bytes`` grow with worker-syncs (every simulated worker
  taking part in every collective: one per island of identical replicas, ``replicas.py``) and
  membership changes, and events also with collectives; the per-unit costs were measured on this
  simulator (events 1.2-2 per worker-sync, one more with ``network.exchange_cpu_s_per_value``, one
  more with ``network.exchange_end_spread_s`` and two more with ``compute.slowdown_while_exchanging``,
  and 3 per collective; trace rows 3-4, peak memory
  about 1.8 kB per worker-sync) and rounded up. Memory also counts the topology's arrays
  (``topology_bytes``): per worker, per pair of regions, and per pair of islands where any round trip
  is measured (a matrix: 3.2 GB at 20,000 islands). A run whose memory passes ``BYTES_PER_EVENT``
  x ``max_events`` (2 GB by default) is refused like one with too many events.
* float64 time: a run ``MAX_CLOCK_RANGE`` times longer than its shortest step would resolve that
  step only to 2e-6 of its length (the clock's relative precision is 2.2e-16), so it is refused.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from islands.limits import DEFAULT_MAX_EVENTS
from islands.numbers import is_finite_number
from islands.scenarios import Scenario, ScenarioError, Worker
from islands.scenarios.fifo import FIFO
from islands.schedules import schedule_of
from islands.units import BITS_PER_BYTE, BITS_PER_GBIT, BYTES_PER_GB, MS_PER_S

from .fleet import steps_scales
from .network.collectives import collective_for
from .network.gather_rounds import store_extra_s
from .network.ring_caps import fifo_cap_bytes_per_s
from .replicas import groups

EVENTS_PER_WORKER_SYNC = 2.0
# Decoupled DiLoCo: a report's preparation, upload, merge, download and wait (measured 8.8-9)
EVENTS_PER_LEARNER_SYNC = 10
EVENTS_PER_EXCHANGE_WORK = 1  # the timeout of a member's work before it joins a collective
EVENTS_PER_OWN_END = 1  # a member's own end before the last's (network.exchange_end_spread_s)
# compute.slowdown_while_exchanging: each compute span's own end, and its re-timings as exchanges start
# and end (measured 0.25-2 per worker-sync over DiLoCo, DDP, Streaming, eager and Decoupled)
EVENTS_PER_SLOWED_SYNC = 2
# its latency, its transfer's end, the end's callbacks (measured 3-5): however many take part
EVENTS_PER_COLLECTIVE = 3.5
EVENTS_PER_STAGED_RUN = (
    4  # a staged collective's process: its start, a wait per stage (and per tree level)
)
ROWS_PER_WORKER_SYNC = 4
BYTES_PER_WORKER_SYNC = 2000
# a departure, a return (its download) or a chip's stop and restart: measured 3.6-11 (median about 5)
# over fleets drawn by the property tests' strategies and the worked example's churning fleets of
# 100-1,000 islands; a change that breaks a collective also plays it again (``events_per_change``)
EVENTS_PER_CHANGE = 6
ROWS_PER_CHANGE = 3
HORIZON_FACTOR = 10
LENGTH_ROUNDS = 3  # rounds of ``expected_length_s``'s fixed point
MAX_ATTEMPTS = 100_000  # ``restarted_s``: attempts summed at most
REACH_LEFT = 1e-6  # ``restarted_s``: stops once the chance of another attempt is below this
BYTES_PER_EVENT = 1000  # the memory a run may take per event of --max-events: 2 GB by default
BYTES_PER_MATRIX_CELL = 8  # a float64 latency between two regions, or two islands
BYTES_PER_RANK = (
    200  # a worker's entries in the topology's arrays, lists and dicts (measured, rounded up)
)
MAX_CLOCK_RANGE = 1e10


class BudgetExceeded(ScenarioError):
    """A run beyond ``max_events`` or float64 time: refused before it runs, or stopped when it passes."""


@dataclass(frozen=True)
class Budget:
    run_length_s: float  # upper bound of the run without random churn
    horizon_s: float | None  # where a run with endless churn stops; None: the run provably ends
    worker_syncs: float
    membership_changes: float
    events: float
    trace_rows: float
    memory_bytes: float  # the run's rows and events, and topology_bytes
    topology_bytes: float = 0.0
    events_per_change: float = EVENTS_PER_CHANGE  # of ``events``, each membership change's


def endless_churn(scenario: Scenario) -> bool:
    """Workers that leave and come back forever (churn that returns, chip failures): the only
    sources of events without end."""
    return (
        any(island.mtbf_s is not None and island.mttr_s is not None for island in scenario.islands)
        or scenario.has_failures()
    )


def ring_rate_bytes_per_s(scenario: Scenario, workers: list[Worker]) -> float:
    """The slowest link, capped by the TCP window at the farthest pair's RTT, under one FIFO per
    egress by a ring's share of the slowest egress (``network/ring_caps.py``), and by the slowest backbone
    shared by every worker's flow (an upper bound's rate: no ring puts more on it)."""
    slowest = min(min(w.upload_bytes_per_s, w.download_bytes_per_s) for w in workers)
    network = scenario.network
    rate = min(slowest, network.tcp_cap_bytes_per_s(scenario.farthest_hop_latency_s))
    if network.egress_queue == FIFO:  # the slowest egress's share, and the ACKs' wait in each RTT
        egress = min(w.upload_bytes_per_s for w in workers)
        rate = min(rate, fifo_cap_bytes_per_s(network, egress, scenario.farthest_hop_latency_s))
    return min(rate, slowest_backbone_bytes_per_s(scenario) / len(workers))


def slowest_backbone_bytes_per_s(scenario: Scenario) -> float:
    """The slowest backbone between regions (infinite without backbones)."""
    return min(
        (
            backbone.bandwidth_gbps * BITS_PER_GBIT / BITS_PER_BYTE
            for backbone in scenario.backbones
        ),
        default=math.inf,
    )


def collectives_per_outer(scenario: Scenario) -> int:
    """At most one collective per fragment and outer step."""
    return schedule_of(scenario).fragments(scenario.schedule)


def sync_s_per_outer(scenario: Scenario, workers: list[Worker], worst: bool = True) -> float:
    """Every collective of one outer step in series, alone on its links, each after its exchange work
    (one outer step exchanges every parameter once; a Decoupled learner's S up to the syncer and S back
    down, in series), plus the late workers' downloads of the averaged pseudo-gradient under a
    deadline barrier (every worker but one late, each fetching from one member, in the worst case;
    none with ``worst`` False)."""
    m, collective = len(workers), collective_for(scenario)
    work_s = scenario.network.exchange_cpu_s_per_value * scenario.model.parameters
    rate = ring_rate_bytes_per_s(scenario, workers)
    latency_s = (
        collectives_per_outer(scenario) * collective.hops(m) * scenario.farthest_hop_latency_s
    )
    transfer_s = collective.volume_bytes(m, scenario.payload_bytes) / rate
    if (
        scenario.network.collective == "hierarchical"
    ):  # a chain's reduce and broadcast (S each) around it
        transfer_s += 2 * scenario.payload_bytes / rate
        latency_s *= 2
    elif scenario.network.collective == "tree":  # each level a hop and 2S through a parent's link
        levels = tree_levels(m)
        latency_s = collectives_per_outer(scenario) * levels * scenario.farthest_hop_latency_s
        transfer_s = levels * 2 * scenario.payload_bytes / rate
    if not schedule_of(
        scenario
    ).coupled:  # a learner sends its fragments up, then takes the merge back down
        transfer_s = max(transfer_s, 2 * scenario.payload_bytes / rate)
    # up to m - 1 late workers, whose downloads may all come through one member's uplink, beside the ring
    deadline = worst and scenario.schedule.barrier == "deadline"
    late_s = (m - 1) * scenario.payload_bytes / rate if deadline else 0.0
    store_s = collectives_per_outer(scenario) * store_extra_s(scenario, m, rate)
    return work_s + latency_s + transfer_s + late_s + store_s + syncer_s_per_outer(scenario, m)


def syncer_s_per_outer(scenario: Scenario, learners: int) -> float:
    """Decoupled DiLoCo: every learner's fragments in and out through the syncer's own link and the
    slowest backbone, in series, and its latency twice per exchange (0 on a non-blocking core with no
    backbone, or for a ring)."""
    syncer = scenario.syncer
    if schedule_of(scenario).coupled:
        return 0.0
    latency_s = 2 * collectives_per_outer(scenario) * syncer.latency_ms / MS_PER_S
    syncer_bytes_per_s = (
        math.inf
        if syncer.bandwidth_gbps is None
        else syncer.bandwidth_gbps * BITS_PER_GBIT / BITS_PER_BYTE
    )
    bottleneck_bytes_per_s = min(syncer_bytes_per_s, slowest_backbone_bytes_per_s(scenario))
    return latency_s + 2 * learners * scenario.payload_bytes / bottleneck_bytes_per_s


def period_compute_s(scenario: Scenario, workers: list[Worker]) -> list[float]:
    """Each worker's compute of one outer step (adaptive H included)."""
    period = schedule_of(scenario).period_steps(scenario.schedule)
    scales = steps_scales(scenario, workers)
    return [w.step_time_s * scale * period for w, scale in zip(workers, scales, strict=True)]


def interval_s(scenario: Scenario, workers: list[Worker]) -> float:
    """Compute of one outer step at the slowest worker (adaptive H included)."""
    return max(period_compute_s(scenario, workers))


def change_cost_s(
    scenario: Scenario, workers: list[Worker], outer_s: float, sync_s: float
) -> float:
    """The most one departure or join can delay the run: detection, a weights download, a lost
    interval and its sync."""
    download_s = scenario.weights_bytes / ring_rate_bytes_per_s(scenario, workers)
    return scenario.network.detection_timeout_s + download_s + outer_s + sync_s


def scheduled_changes(scenario: Scenario, workers: list[Worker]) -> int:
    """Workers moved by the scheduled events, plus one departure per worker of random churn."""
    return moved_by_events(scenario, workers) + sum(1 for w in workers if w.mtbf_s is not None)


def moved_by_events(scenario: Scenario, workers: list[Worker]) -> int:
    """Workers moved by the scheduled events (an island's event moves all its replicas)."""
    targets = {island.name: island.replicas for island in scenario.islands}
    targets.update({w.name: 1 for w in workers})
    return sum(targets[event.island] for event in scenario.events)


def estimate(scenario: Scenario) -> Budget:
    """The run's budget: ``run_length_s`` and ``horizon_s`` bound it (the worst case), the events,
    rows and memory are what it is expected to spend (within 2x either way:
    ``tests/test_budget_estimates.py``), its random churn counted over its expected length."""
    workers = scenario.workers()
    outer_s, sync_s = interval_s(scenario, workers), sync_s_per_outer(scenario, workers)
    change_s = change_cost_s(scenario, workers, outer_s, sync_s)
    changes: float = scheduled_changes(scenario, workers)
    length_s = scenario.schedule.outer_steps * (outer_s + sync_s) + changes * change_s
    length_s += max((event.at_s for event in scenario.events), default=0.0)
    horizon_s = None
    if endless_churn(scenario):
        horizon_s = HORIZON_FACTOR * length_s
        left_for_good = sum(1 for w in workers if w.mtbf_s is not None and w.mttr_s is None)
        changes = (
            moved_by_events(scenario, workers)
            + left_for_good
            + random_changes(scenario, workers, expected_length_s(scenario, workers, horizon_s))
        )
    collectives = float(scenario.schedule.outer_steps * collectives_per_outer(scenario))
    worker_syncs = len(groups(scenario, workers)) * collectives
    topology = topology_bytes(scenario)
    per_change = events_per_change(scenario, outer_s, sync_s)
    return Budget(
        run_length_s=length_s,
        horizon_s=horizon_s,
        worker_syncs=worker_syncs,
        membership_changes=changes,
        events=(
            events_per_worker_sync(scenario) * worker_syncs
            + events_per_collective(scenario) * collectives
            + per_change * changes
        ),
        trace_rows=ROWS_PER_WORKER_SYNC * worker_syncs + ROWS_PER_CHANGE * changes,
        memory_bytes=BYTES_PER_WORKER_SYNC * (worker_syncs + changes) + topology,
        topology_bytes=topology,
        events_per_change=per_change,
    )


def expected_length_s(
    scenario: Scenario, workers: list[Worker], horizon_s: float = math.inf
) -> float:
    """The run's expected length under churn that returns, up to ``horizon_s`` (the bound,
    ``run_length_s``, takes the worst of every change): the one model of a churning run's length that
    every player's budget reads.

    Decoupled DiLoCo: the slowest learner's compute over the share of its time it is there. A coupled
    schedule: each outer step's compute, then its collectives, which departures break
    (``restarted_s``), or under partial participation end no sooner than the notice of the last drop:
    r + detection (1 - exp(-lambda r)). Returning workers download the weights from the holders
    (``network.weights_from``), spread over them, whose uplinks they share with the ring: a share
    ``busy`` of the present workers' uplinks together, which stretches every
    outer step by 1 / (1 - busy); at ``busy`` >= 1 the downloads outpace the uplinks and the run is as
    long as its horizon allows. Who is there depends on how long the run is (all present at 0:
    ``presence``), and the length on who is there: a fixed point over ``LENGTH_ROUNDS`` rounds from
    the length without churn."""
    coupled = schedule_of(scenario).coupled
    compute_s, sync_s = (
        interval_s(scenario, workers),
        sync_s_per_outer(scenario, workers, worst=False),
    )
    length_s = scenario.schedule.outer_steps * (compute_s + sync_s)
    for _ in range(LENGTH_ROUNDS):
        shares = [presence(w, length_s) for w in workers]
        if coupled:
            outer_s = compute_s + churned_sync_s(scenario, workers, shares, sync_s, horizon_s)
        else:
            outer_s = decoupled_compute_s(scenario, workers, shares) + sync_s
        returns_per_s = sum(
            (1 - share) / w.mttr_s for w, share in zip(workers, shares) if w.mttr_s is not None
        )
        serving = sum(share * w.upload_bytes_per_s for w, share in zip(workers, shares))
        busy = returns_per_s * scenario.weights_bytes / serving
        if busy >= 1:
            return horizon_s
        length_s = min(horizon_s, scenario.schedule.outer_steps * outer_s / (1 - busy))
    return length_s


def churned_sync_s(
    scenario: Scenario,
    workers: list[Worker],
    shares: list[float],
    sync_s: float,
    horizon_s: float,
) -> float:
    """A coupled outer step's collectives of ``sync_s`` among the workers there (``shares``), as
    departures at the members' rate break them (``restarted_s``, cut at ``horizon_s``) or drop their
    members (partial participation)."""
    churning = [(share, w.mtbf_s) for w, share in zip(workers, shares) if w.mtbf_s is not None]
    rate = sum(share / mtbf_s for share, mtbf_s in churning)
    if rate > 0 and scenario.network.on_departure == "restart":
        members = sum(share for share, _ in churning)
        detect_s = scenario.network.detection_timeout_s
        return restarted_s(sync_s, rate, members / rate, detect_s, horizon_s)
    if rate > 0:
        return sync_s + scenario.network.detection_timeout_s * -math.expm1(-rate * sync_s)
    return sync_s


def decoupled_compute_s(scenario: Scenario, workers: list[Worker], shares: list[float]) -> float:
    """Decoupled DiLoCo's outer step of compute: the slowest learner's over the share of its time it
    is there."""
    return max(
        compute / share
        for compute, share in zip(period_compute_s(scenario, workers), shares, strict=True)
    )


def restarted_s(
    task_s: float, rate: float, mtbf_s: float, detect_s: float, limit_s: float = math.inf
) -> float:
    """The expected time to finish a collective of ``task_s`` seconds that any departure breaks and
    that restarts from scratch ``detect_s`` after it, among the survivors. Departures come at
    ``rate`` at first; each member leaves at 1 / ``mtbf_s`` and is not back before the next outer
    boundary, so the ring thins and the rate falls as exp(-t / mtbf_s). Attempt k succeeds with
    p_k = exp(-rate_k T) and otherwise lasts E[X | X < T] + d, with E[X | X < T] = 1/rate - T p / (1 - p);
    the expected time is the sum over attempts of P(reaching k) x E[attempt k]. Without the thinning
    it is (exp(rate T) - 1)(1 / rate + d), the known closed form, which for a ring of 1,000 workers at
    MTBF 12 h (rate T = 6.8) is five times the run the models play. The sum stops past ``limit_s``
    (the run's horizon: it cannot last longer)."""
    total_s, reach, elapsed_s = 0.0, 1.0, 0.0
    for _ in range(MAX_ATTEMPTS):
        now_rate = rate * math.exp(-elapsed_s / mtbf_s)
        exposure = now_rate * task_s
        success = math.exp(-exposure)
        broken_s = detect_s + (  # E[X | X < T], T / 2 where departures are rare (no cancellation)
            task_s / 2
            if exposure < 1e-6
            else 1 / now_rate - task_s * success / -math.expm1(-exposure)
        )
        total_s += reach * (success * task_s + (1 - success) * broken_s)
        reach *= 1 - success
        elapsed_s += broken_s
        if reach < REACH_LEFT or total_s > limit_s:
            break
    return total_s


def presence(worker: Worker, length_s: float = math.inf) -> float:
    """The share of a run of ``length_s`` that a worker which leaves and returns is there, all present
    at 0: the mean over [0, T] of P(t) = p + (1 - p) exp(-(lam + mu) t), p = mu / (lam + mu); its
    steady share p for a long run; 1 for one that stays."""
    if worker.mtbf_s is None or worker.mttr_s is None:
        return 1.0
    rate = 1 / worker.mtbf_s + 1 / worker.mttr_s
    p = (1 / worker.mttr_s) / rate
    if not is_finite_number(length_s):
        return p
    if length_s <= 0:
        return 1.0
    return p + (1 - p) * -math.expm1(-rate * length_s) / (rate * length_s)


def random_changes(scenario: Scenario, workers: list[Worker], length_s: float) -> float:
    """Departures and returns over ``length_s``: two per mtbf + mttr of each worker that returns, and
    a chip failure's stop and restart per failure of the compute it does. Chips fail only while they
    compute: over a worker's outer steps of compute (``period_compute_s``), or the run's length where that is
    shorter (a run cut at its horizon), not over the time it waits for its collectives."""
    returning = sum(
        2 * length_s / (w.mtbf_s + w.mttr_s)
        for w in workers
        if w.mtbf_s is not None and w.mttr_s is not None
    )
    outer_steps = scenario.schedule.outer_steps
    failing = sum(
        2 * min(length_s, outer_steps * compute) * w.failure_rate_per_compute_s
        for w, compute in zip(workers, period_compute_s(scenario, workers), strict=True)
    )
    return returning + failing


def topology_bytes(scenario: Scenario) -> float:
    """The topology's arrays (``topology.py``): per worker, a region-by-region latency matrix, and an
    island-by-island one where any round trip is measured."""
    islands = len(scenario.islands) if scenario.latencies else 0
    cells = max(1, len(scenario.regions)) ** 2 + islands**2
    return BYTES_PER_MATRIX_CELL * cells + BYTES_PER_RANK * scenario.worker_count


def tree_levels(members: int) -> int:
    """Stages of a binary tree's reduce and broadcast over ``members`` workers (``staged.py``)."""
    return 2 * math.ceil(math.log2(members + 1)) - 2


def events_per_collective(scenario: Scenario) -> float:
    """A ring is one transfer; a hierarchical collective a reduce and a broadcast per region and the
    leaders' ring; a tree two copies per member; each staged one with the process that runs it."""
    collective = scenario.network.collective
    if collective == "hierarchical":
        legs = 1 + 2 * max(1, len(scenario.regions))
    elif collective == "tree":
        legs = 2 * scenario.worker_count + tree_levels(scenario.worker_count)
    else:
        return EVENTS_PER_COLLECTIVE
    return EVENTS_PER_COLLECTIVE * legs + EVENTS_PER_STAGED_RUN


def events_per_change(scenario: Scenario, outer_s: float, sync_s: float) -> float:
    """A membership change's events (``EVENTS_PER_CHANGE``, a ring's restart included: measured on
    rings), and where it falls in a staged collective of a coupled schedule (the share of an outer
    step spent in collectives) that collective's stages and processes played again among the others:
    a departure mid-way restarts them all."""
    staged_extra = events_per_collective(scenario) - EVENTS_PER_COLLECTIVE
    if not schedule_of(scenario).coupled or outer_s + sync_s <= 0 or staged_extra <= 0:
        return EVENTS_PER_CHANGE
    return EVENTS_PER_CHANGE + staged_extra * sync_s / (outer_s + sync_s)


def events_per_worker_sync(scenario: Scenario) -> float:
    work = scenario.network.exchange_cpu_s_per_value > 0
    spread = scenario.network.exchange_end_spread_s > 0
    slowed = scenario.compute.slowdown_while_exchanging > 0
    own = EVENTS_PER_WORKER_SYNC if schedule_of(scenario).coupled else EVENTS_PER_LEARNER_SYNC
    return (
        own
        + (EVENTS_PER_EXCHANGE_WORK if work else 0)
        + (EVENTS_PER_OWN_END if spread else 0)
        + (EVENTS_PER_SLOWED_SYNC if slowed else 0)
    )


def guard(scenario: Scenario, max_events: float = DEFAULT_MAX_EVENTS) -> Budget:
    """The scenario's budget, or a ``ScenarioError`` when it is beyond ``max_events`` or float64 time."""
    budget = estimate(scenario)
    check(scenario, budget, max_events)
    return budget


def check(scenario: Scenario, budget: Budget, max_events: float) -> None:
    """Refuse, with one line naming the budget and its flag (never a physics key: the physics is what the
    user asked about), a run beyond ``max_events``; and one beyond float64 time, naming what sets it."""
    if budget.events > max_events:
        churn = budget.events_per_change * budget.membership_changes
        cause = (
            f", {churn:.3g} of them for {budget.membership_changes:.3g} joins and leaves"
            if churn
            else ""
        )
        raise BudgetExceeded(
            scenario.source,
            "--max-events",
            f"the run would need about {budget.events:.3g} simulator events{cause}, "
            f"{budget.trace_rows:.3g} trace rows and {budget.memory_bytes / BYTES_PER_GB:.3g} GB "
            f"of memory, above the budget of {max_events:g} events: raise --max-events",
        )
    check_memory(scenario, budget, max_events)
    longest_s = budget.horizon_s if budget.horizon_s is not None else budget.run_length_s
    shortest_step_s = min(island.step_time_s for island in scenario.islands)
    if longest_s / shortest_step_s > MAX_CLOCK_RANGE:
        raise BudgetExceeded(
            scenario.source,
            shortest_step_key(scenario),
            f"the run may last {longest_s:.3g} s, {longest_s / shortest_step_s:.3g} steps of "
            f"{shortest_step_s:g} s; float64 time resolves a step only in runs up to "
            f"{MAX_CLOCK_RANGE:g} steps long: shorten the run (schedule.outer_steps, "
            "model.parameters) or widen the links (see docs/limits.md)",
        )


def check_memory(scenario: Scenario, budget: Budget, max_events: float) -> None:
    """Refuse a run whose memory, the topology's matrices included, passes ``BYTES_PER_EVENT`` x max_events."""
    limit_bytes = BYTES_PER_EVENT * max_events
    if budget.memory_bytes <= limit_bytes:
        return
    if budget.topology_bytes > budget.memory_bytes / 2:
        cause = (
            f"{budget.topology_bytes / BYTES_PER_GB:.3g} GB of it the topology: {len(scenario.islands)} islands "
            "with measured round trips make an islands x islands matrix"
        )
    else:
        cause = "its rows and events"
    raise BudgetExceeded(
        scenario.source,
        "--max-events",
        f"the run would take about {budget.memory_bytes / BYTES_PER_GB:.3g} GB of memory ({cause}), "
        f"above the budget of {limit_bytes / BYTES_PER_GB:.3g} GB ({BYTES_PER_EVENT} B per event of "
        "--max-events): raise --max-events",
    )


def churniest_key(scenario: Scenario) -> str:
    """The mtbf_s or chip_mtbf_s of the island with the most departures per second, or the events
    when none churns."""
    rates: dict[str, float] = {}
    for index, island in enumerate(scenario.islands):
        if island.mtbf_s is not None:
            rates[f"island.{index}.mtbf_s"] = island.replicas / island.mtbf_s
        if island.chip_mtbf_s is not None:
            rates[f"island.{index}.chip_mtbf_s"] = (
                island.replicas * island.chips / island.chip_mtbf_s
            )
    return max(rates, key=rates.__getitem__) if rates else "event"


def shortest_step_key(scenario: Scenario) -> str:
    index = min(range(len(scenario.islands)), key=lambda i: scenario.islands[i].step_time_s)
    return f"island.{index}.step_time_s"


def done_of(completed_outer: int, scenario: Scenario) -> str:
    return f"{completed_outer} of {scenario.schedule.outer_steps} outer steps"


def horizon_reason(completed_outer: int, scenario: Scenario, horizon_s: float) -> str:
    """Why a run stopped at its horizon (``Budget.horizon_s``), in one line naming the key to change."""
    return (
        f"stopped at the horizon of {horizon_s:.4g} s ({HORIZON_FACTOR}x its churn-free bound) "
        f"with {done_of(completed_outer, scenario)} done: churn keeps the run from finishing; "
        f"{churn_remedy(scenario)}"
    )


def churn_remedy(scenario: Scenario) -> str:
    """What to change where churn keeps a run from finishing: the churniest island's time between
    departures (or chip failures), or how long each keeps its worker away (mttr_s, recovery_s)."""
    key = churniest_key(scenario)
    island, _, name = key.rpartition(".")
    away = {"mtbf_s": "mttr_s", "chip_mtbf_s": "recovery_s"}.get(name)
    if away is None or getattr(scenario.islands[int(island.split(".")[1])], away) is None:
        return f"raise {key}"
    return f"raise {key} or lower {island}.{away}"
