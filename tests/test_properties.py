"""Invariants of the simulator over drawn scenarios (hypothesis, ``helpers/strategies.py``).

Each property holds for every valid scenario of its kind, whatever the schedule, collective, network
model, barrier, churn or failures. `make test` runs a few derandomized examples of each (profile
"ci", ``conftest.py``); `make fuzz` runs thousands. A failure found here becomes a named test in
``test_properties_regressions.py`` once fixed.
"""

from __future__ import annotations

import copy
import math
from collections import Counter
from typing import Any

import pytest
from helpers.strategies import COUPLED, Drawn, decoupled_learners_differ, load_document, scenarios
from hypothesis import given
from hypothesis import strategies as st

from islands.schedules import ALL_GATHER, SYNCER, schedule_of
from islands.simulator import SimResult, simulate
from islands.simulator.budget import estimate
from islands.simulator.network.links import Link, burst_at, take_bursts

RELATIVE = 1e-9  # summation of many rows may be off by rounding, not by more


def run(drawn: Drawn, **options: Any) -> SimResult:
    return simulate(drawn.scenario(), **options)


def closed_form_bytes_per_worker(drawn: Drawn) -> float:
    """What each worker sends in a run where no one leaves, joins or is cut off, S being
    parameters x bits / 8 (the fragments together hold every parameter once, so each round moves S
    whatever the fragment count) and R the rounds the schedule exchanges (DDP: its steps; eager:
    outer_steps - 1, its last round's average is never used; the others: outer_steps):

    * ring all-reduce of the mean (``collectives.RingAllReduce``): R x 2(M-1)/M x S. The hierarchical
      and tree all-reduces move the same on average: every worker but one sends S towards the root
      and receives S back, 2(M-1) S in all (``staged.py``);
    * all-gather for a robust aggregation (median, trimmed mean): R x (M-1) x S;
    * Decoupled DiLoCo: each learner uploads each fragment once per outer step, R x S.
    """
    scenario = drawn.scenario()
    schedule = schedule_of(scenario)
    m, payload_bytes = scenario.worker_count, scenario.payload_bytes
    rounds = schedule.synced_outer_steps(scenario.schedule)
    collective = schedule.collective(scenario)
    if collective == SYNCER:
        return rounds * payload_bytes
    if collective == ALL_GATHER:
        return rounds * (m - 1) * payload_bytes
    return rounds * 2 * (m - 1) / m * payload_bytes


def with_bandwidth(document: dict[str, Any], factor: float) -> dict[str, Any]:
    """The document with every link (access links both ways, backbones, the syncer's) ``factor`` times wider."""
    wider = copy.deepcopy(document)
    tables = [*wider["island"], *wider.get("backbone", []), wider.get("syncer", {})]
    for table in tables:
        for key in ("bandwidth_gbps", "upload_gbps", "download_gbps"):
            if key in table:
                table[key] *= factor
    return wider


def assert_summaries_match(grouped: dict[str, Any], each: dict[str, Any]) -> None:
    for key, value in each.items():
        if key in ("events", "player"):  # the work and who did it differ; the figures may not
            continue
        if key == "islands":
            for island_grouped, island_each in zip(grouped[key], value, strict=True):
                assert_summaries_match(island_grouped, island_each)
        elif isinstance(value, float):
            assert grouped[key] == pytest.approx(value, rel=RELATIVE, abs=1e-9), key
        else:
            assert grouped[key] == value, key


def jitters(drawn: Drawn) -> bool:
    return any(island.get("jitter_cv", 0) for island in drawn.document["island"])


# --- every schedule ---------------------------------------------------------------------------------


@given(scenarios(permanent=False))
def test_a_run_without_permanent_departures_completes_every_outer_step(drawn):
    summary = run(drawn).summary
    assert summary["complete"], summary["incomplete_reason"]
    assert summary["outer_steps"] == drawn.document["schedule"]["outer_steps"]


@given(scenarios(moves=False).filter(lambda drawn: not jitters(drawn)))
def test_the_churn_free_bound_is_never_below_the_run(drawn):
    """``budget.run_length_s`` bounds a run without random churn: the horizon and the property
    strategies' churn (drawn in multiples of it) both lean on it. It prices the mean step time, so a
    jittered worker's draws above the mean may pass it (by far less than the horizon's ten times)."""
    assert estimate(drawn.scenario()).run_length_s >= run(drawn).summary["wall_time_s"] * (
        1 - RELATIVE
    )


@given(scenarios())
def test_utilisation_lies_in_zero_to_one(drawn):
    summary = run(drawn).summary
    if not summary["complete"]:
        assert summary["compute_utilisation"] is None and summary["incomplete_reason"]
        return
    assert 0 < summary["compute_utilisation"] <= 1
    assert 0 < summary["compute_utilisation_run"] <= 1
    for island in summary[
        "islands"
    ]:  # 0 for an island that joined and never computed before the end
        assert 0 <= island["compute_utilisation"] <= 1


@given(scenarios())
def test_every_worker_is_there_at_least_as_long_as_it_computes(drawn):
    result = run(drawn)
    trace = result.lead_trace
    for worker, rows in trace.groupby("worker"):
        compute_s = (
            rows.loc[rows["kind"] == "compute", "time_end_s"]
            .sub(rows.loc[rows["kind"] == "compute", "time_start_s"])
            .sum()
        )
        span_s = rows["time_end_s"].max() - rows["time_start_s"].min()
        assert span_s >= compute_s * (1 - RELATIVE), worker
    summary = result.summary
    assert summary["wall_time_s"] >= summary["compute_s"] * (1 - RELATIVE)


@given(scenarios(moves=False))
def test_bytes_sent_are_the_closed_form_of_the_collective(drawn):
    """Without departures or cut-offs every worker sends exactly what its collective moves; a
    deadline barrier cuts late workers out of a ring (they fetch S instead), so it is left out."""
    summary = run(drawn).summary
    if drawn.document["schedule"].get("barrier") == "deadline":
        return
    expected = closed_form_bytes_per_worker(drawn)
    assert summary["bytes_per_worker"] == pytest.approx(expected, rel=RELATIVE)


@given(scenarios())
def test_grouped_replicas_give_the_summary_of_every_replica_run_alone(drawn):
    scenario = drawn.scenario()
    assert_summaries_match(
        simulate(scenario).summary, simulate(scenario, group_replicas=False).summary
    )


@given(scenarios())
def test_the_same_seed_gives_the_same_run(drawn):
    first, second = run(drawn), run(drawn)
    assert first.summary == second.summary
    assert first.lead_rows == second.lead_rows


@given(scenarios(algorithms=COUPLED, moves=False), st.sampled_from((2.0, 10.0)))
def test_more_bandwidth_is_never_slower_for_coupled_schedules(drawn, factor):
    narrow = run(drawn).summary["wall_time_s"]
    wide = simulate(load_document(with_bandwidth(drawn.document, factor))).summary["wall_time_s"]
    assert wide <= narrow * (1 + RELATIVE)


# --- Decoupled DiLoCo's quorum ----------------------------------------------------------------------


def utilisation_by_quorum(drawn: Drawn, quorums: range) -> list[float]:
    """The fastest island's compute utilisation with each quorum K."""
    fastest = min(
        range(len(drawn.document["island"])),
        key=lambda i: drawn.document["island"][i]["step_time_s"],
    )
    shares = []
    for quorum in quorums:
        document = copy.deepcopy(drawn.document)
        document["schedule"]["quorum"] = quorum
        shares.append(
            simulate(load_document(document)).summary["islands"][fastest]["compute_utilisation"]
        )
    return shares


@given(scenarios(algorithms=("decoupled",), moves=False, equal_learners=True))
def test_a_larger_quorum_never_raises_equal_learners_utilisation(drawn):
    workers = sum(island["replicas"] for island in drawn.document["island"])
    shares = utilisation_by_quorum(drawn, range(1, workers + 1))
    for smaller, larger in zip(shares, shares[1:]):
        assert larger <= smaller * (1 + RELATIVE)


def decoupled_quorum_scenarios() -> st.SearchStrategy[Drawn]:
    """Decoupled DiLoCo with a quorum 1 < K <= M and learners that differ or come and go (without
    departures for good): the case that once completed no outer step (tests/test_decoupled_quorum.py)."""
    return (
        scenarios(algorithms=("decoupled",), permanent=False)
        .map(with_quorum_above_one)
        .filter(lambda drawn: decoupled_learners_differ(drawn) or drawn.moves_membership)
    )


def with_quorum_above_one(drawn: Drawn) -> Drawn:
    document = copy.deepcopy(drawn.document)
    workers = sum(island["replicas"] for island in document["island"])
    document["schedule"]["quorum"] = max(2, math.ceil(workers / 2))
    return Drawn(document, drawn.permanent_departures, drawn.churn, drawn.failures)


@given(decoupled_quorum_scenarios())
def test_decoupled_with_a_quorum_and_unequal_or_moving_learners_completes_every_outer_step(drawn):
    summary = run(drawn).summary
    assert summary["complete"], summary["incomplete_reason"]
    assert summary["outer_steps"] == drawn.document["schedule"]["outer_steps"]


def shares_no_link(drawn: Drawn) -> bool:
    """No link carries two learners' reports: a syncer on a non-blocking core, no backbone. Where they
    share one, a learner held back by a larger quorum leaves its share of the link to the others, and
    the fastest can gain a little (0.065248 at K = 1, 0.065327 at K = 2 on a 0.5 Gbit/s syncer link:
    ``test_properties_regressions.py``)."""
    return (
        "bandwidth_gbps" not in drawn.document.get("syncer", {})
        and "backbone" not in drawn.document
    )


def fixed_grace_window(drawn: Drawn) -> bool:
    """A grace window of given seconds. The adaptive one is half the *first* reporter's slack (the
    paper's eq. 3, as the trainer's syncer applies it): a larger quorum can change which learner
    reports first, and a fast first reporter (no slack) ends the window sooner than a slow one would
    have, so the fastest can gain a little (0.017239 at K = 2, 0.017386 at K = 3:
    ``test_properties_regressions.py``)."""
    return drawn.document["schedule"].get("grace_window", "adaptive") != "adaptive"


@given(
    scenarios(algorithms=("decoupled",), moves=False, equal_learners=False).filter(
        lambda drawn: (
            decoupled_learners_differ(drawn) and shares_no_link(drawn) and fixed_grace_window(drawn)
        )
    )
)
def test_a_larger_quorum_never_raises_the_fast_learners_utilisation_beside_a_straggler(drawn):
    workers = sum(island["replicas"] for island in drawn.document["island"])
    shares = utilisation_by_quorum(drawn, range(1, workers + 1))
    for smaller, larger in zip(shares, shares[1:]):
        assert larger <= smaller * (1 + RELATIVE)


@st.composite
def bursts_drawn(draw) -> tuple[list[float], list[list[int]], list[float]]:
    """Token buckets (their depths; 0: no bucket) and transfers starting together: the buckets each
    crosses (a bucket may be crossed twice) and the bytes each wants."""
    depths = draw(
        st.lists(
            st.sampled_from((0.0, 5.0, 40.0, 100.0)) | st.floats(1.0, 1e3), min_size=1, max_size=4
        )
    )
    crossing = st.lists(st.integers(0, len(depths) - 1), min_size=1, max_size=3)
    transfers = draw(st.lists(st.tuples(crossing, st.floats(0.0, 300.0)), min_size=1, max_size=5))
    return depths, [links for links, _ in transfers], [wanted for _, wanted in transfers]


def shared_bursts(
    depths: list[float], crossed: list[list[int]], wanted: list[float]
) -> list[float]:
    """``take_bursts`` from full buckets of these depths."""
    links = [Link(index, "down", 10.0, burst_bytes=depth) for index, depth in enumerate(depths)]
    return take_bursts([Counter(links[i] for i in route) for route in crossed], 0.0, wanted)


@given(bursts_drawn())
def test_transfers_starting_together_share_the_buckets_max_min_fairly_whatever_their_order(drawn):
    """The bursts fit the buckets and the wants; each transfer short of what it wants crosses a bucket
    that ran dry and on which no one got more (max-min fairness); the split follows the transfers,
    not their order; alone, a transfer gets what ``burst_at`` says."""
    depths, crossed, wanted = drawn
    bursts = shared_bursts(depths, crossed, wanted)
    tolerance = 1e-9 * max(1.0, *depths, *wanted)
    taken = [
        sum(bursts[t] * route.count(i) for t, route in enumerate(crossed))
        for i in range(len(depths))
    ]
    assert all(0.0 <= burst <= want + tolerance for burst, want in zip(bursts, wanted))
    assert all(used <= depth + tolerance for used, depth in zip(taken, depths))
    for t, route in enumerate(crossed):
        if bursts[t] < wanted[t] - tolerance:
            assert any(
                taken[i] >= depths[i] - tolerance
                and all(
                    bursts[t] >= bursts[u] - tolerance
                    for u, other in enumerate(crossed)
                    if i in other
                )
                for i in route
            )
    reversed_bursts = shared_bursts(depths, crossed[::-1], wanted[::-1])
    assert reversed_bursts[::-1] == pytest.approx(bursts, rel=1e-12, abs=tolerance)
    alone = shared_bursts(depths, crossed[:1], wanted[:1])
    fresh = [Link(index, "down", 10.0, burst_bytes=depth) for index, depth in enumerate(depths)]
    assert alone[0] == pytest.approx(
        burst_at(Counter(fresh[i] for i in crossed[0]), 0.0, wanted[0]), abs=tolerance
    )
