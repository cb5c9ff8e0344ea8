"""Decoupled DiLoCo's learners on a heap of timers (``simulator/fast/learners.py``): the event model's
run rank for rank, on generated fleets (jitter, islands of different speeds and links, quorum and
grace window, exchange work, churn that leaves and returns), a fleet without jitter (instants that
tie), a run stopped at its horizon, a case worked by hand, and when the player is chosen.

Every draw is the event model's (each learner's step-time and churn generators), so the comparison
is draw for draw: figures to 1e-9 relative (the flow model's clock arithmetic aside, they agree to
the last bit on these fleets), the same counts, and the same trace rows and link segments."""

from __future__ import annotations

import math

import pytest
from helpers.scenarios import make_scenario
from hypothesis import given
from hypothesis import strategies as st

from islands.scenarios import ScenarioError, load
from islands.simulator import RunSetup, budget, chosen, simulate
from islands.simulator.events.engine import Simulation
from islands.simulator.fast.learners import (
    FAST_FROM_EVENTS,
    LEARNERS,
    Learners,
    estimated_events,
    why_not,
)
from islands.simulator.result import result_of

IGNORED = ("player", "events")


def document(islands: list[dict], schedule: dict, network: dict | None = None) -> dict:
    return {
        "name": "learners",
        "model": {"parameters": 1e9, "bytes_per_param": 2},
        "schedule": {"algorithm": "decoupled", **schedule},
        "network": network or {},
        "island": islands,
    }


def played_both(scenario):
    """The event model's result and this player's, on one setup (the event model's horizon)."""
    setup = RunSetup.of(scenario, max_events=math.inf)
    assert why_not(setup) is None
    estimate = budget.estimate(scenario)
    events = result_of(setup, Simulation(setup, estimate).play())
    learners = result_of(setup, LEARNERS.play(setup, LEARNERS.budget(setup)))
    return events, learners


def assert_same(events, learners) -> None:
    expected, got = events.summary, learners.summary
    assert set(expected) == set(got)
    assert got["player"] == "learners" and got["events"] > 0
    for key in set(expected) - set(IGNORED):
        assert close(expected[key], got[key]), (key, expected[key], got[key])

    def rows(result):
        return sorted(result.lead_rows)

    assert all(close(tuple(a), tuple(b)) for a, b in zip(rows(events), rows(learners), strict=True))

    def links(result):
        return result.lead_links.sort_values(list(result.lead_links.columns)).to_numpy().tolist()

    assert all(
        close(tuple(a), tuple(b)) for a, b in zip(links(events), links(learners), strict=True)
    )


def close(expected, got) -> bool:
    if isinstance(expected, float) and isinstance(got, float):
        return math.isclose(expected, got, rel_tol=1e-9, abs_tol=1e-9)
    if isinstance(expected, (list, tuple)):
        return len(expected) == len(got) and all(close(a, b) for a, b in zip(expected, got))
    if isinstance(expected, dict):
        return expected.keys() == got.keys() and all(close(expected[k], got[k]) for k in expected)
    return expected == got


@st.composite
def islands(draw) -> list[dict]:
    made = []
    for index in range(draw(st.integers(1, 3))):
        island = {
            "name": f"i{index}",
            "replicas": draw(st.integers(1 if index else 2, 3)),
            "step_time_s": draw(st.sampled_from([0.5, 1.0, 2.0, 3.0])),
            "jitter_cv": draw(st.floats(0.01, 0.3)),
            "upload_gbps": draw(st.sampled_from([0.5, 1.0, 10.0])),
            "download_gbps": draw(st.sampled_from([0.5, 2.0, 10.0])),
            "latency_ms": draw(st.sampled_from([0.0, 5.0, 30.0])),
        }
        if draw(st.booleans()):
            island["mtbf_s"] = draw(st.floats(100.0, 3000.0))
            island["mttr_s"] = draw(st.floats(10.0, 600.0))
        made.append(island)
    return made


@st.composite
def fleets(draw):
    fleet = draw(islands())
    learners = sum(island["replicas"] for island in fleet)
    inner = draw(st.integers(20, 60))
    schedule = {
        "inner_steps": inner,
        "outer_steps": draw(st.integers(2, 6)),
        "fragments": draw(st.integers(1, 3)),
        "overlap_steps": draw(st.integers(0, 10)),
        "quorum": draw(st.integers(1, learners)),
        "grace_window": draw(st.sampled_from(["adaptive", 0.0, 2.0, 30.0])),
    }
    network = {
        "detection_timeout_s": draw(st.sampled_from([5.0, 30.0])),
        "exchange_cpu_s_per_value": draw(st.sampled_from([0.0, 1e-9])),
    }
    return make_scenario([f"seed={draw(st.integers(0, 1000))}"], document(fleet, schedule, network))


@given(fleets())
def test_generated_fleets_are_the_event_models_run_rank_for_rank(scenario):
    assert_same(*played_both(scenario))


def test_a_fleet_without_jitter_ties_and_still_is_the_event_models_run():
    """Learners alike (no jitter) reach the syncer at the same instants; churn keeps each simulated."""
    fleet = [
        {
            "name": "dc",
            "replicas": 3,
            "step_time_s": 1.0,
            "bandwidth_gbps": 10.0,
            "mtbf_s": 400.0,
            "mttr_s": 60.0,
        },
        {
            "name": "home",
            "replicas": 3,
            "step_time_s": 2.0,
            "bandwidth_gbps": 1.0,
            "latency_ms": 20.0,
        },
    ]
    for quorum in (1, 2, 4, 6):
        scenario = make_scenario(
            [],
            document(
                fleet,
                {
                    "inner_steps": 40,
                    "outer_steps": 5,
                    "fragments": 2,
                    "overlap_steps": 4,
                    "quorum": quorum,
                },
            ),
        )
        assert_same(*played_both(scenario))


def test_replicas_grouped_without_churn_count_for_all_of_them():
    """Without churn or jitter an island's learners are one simulated learner standing for three."""
    fleet = [
        {"name": "dc", "replicas": 3, "step_time_s": 1.0, "bandwidth_gbps": 10.0},
        {"name": "home", "replicas": 2, "step_time_s": 2.0, "bandwidth_gbps": 1.0},
    ]
    scenario = make_scenario(
        [],
        document(
            fleet,
            {"inner_steps": 40, "outer_steps": 4, "fragments": 2, "overlap_steps": 4, "quorum": 4},
        ),
    )
    assert len(RunSetup.of(scenario).groups) == 2
    events, learners = played_both(scenario)
    assert_same(events, learners)
    assert learners.summary["workers"] == 5


def test_a_run_stopped_at_its_horizon_says_so_as_the_event_model_does():
    """Learners away most of the time: the run stops at 10x its churn-free bound, incomplete."""
    fleet = [
        {
            "name": "dc",
            "replicas": 3,
            "step_time_s": 1.0,
            "jitter_cv": 0.1,
            "bandwidth_gbps": 1.0,
            "mtbf_s": 30.0,
            "mttr_s": 3000.0,
        }
    ]
    scenario = make_scenario(
        [], document(fleet, {"inner_steps": 50, "outer_steps": 4, "overlap_steps": 2})
    )
    events, learners = played_both(scenario)
    assert_same(events, learners)
    assert learners.summary["horizon_reached"] and not learners.summary["complete"]
    assert learners.summary["incomplete_reason"].startswith("stopped at the horizon")


def test_two_speeds_with_a_quorum_of_one_worked_by_hand():
    """docs/decoupled.md: with K = 1 nobody waits. Learners of 1 s and 2 s per step, H = 100, 5 outer
    steps, one fragment sent 10 steps early: a round trip (2 x 1e6 bytes at 1 Gbit/s, 16 ms) is
    back long before it is due, so the run is the slower learner's 5 x 100 x 2 s = 1,000 s, its 5
    reports all late (the faster learner's are merged first), and each learner computes its own
    steps: (500 + 1,000) / 2 s on average."""
    fleet = [
        {"name": "fast", "replicas": 1, "step_time_s": 1.0, "bandwidth_gbps": 1.0},
        {"name": "slow", "replicas": 1, "step_time_s": 2.0, "bandwidth_gbps": 1.0},
    ]
    scenario = make_scenario(
        [],
        {
            **document(
                fleet, {"inner_steps": 100, "outer_steps": 5, "overlap_steps": 10, "quorum": 1}
            ),
            "model": {"parameters": 1e6, "bytes_per_param": 2},
        },
    )
    setup = RunSetup.of(scenario)
    summary = result_of(setup, LEARNERS.play(setup, LEARNERS.budget(setup))).summary
    assert summary["wall_time_s"] == pytest.approx(5 * 100 * 2.0)
    assert summary["late_reports"] == 5 and summary["merges_below_quorum"] == 0
    assert summary["compute_s"] == pytest.approx((500 + 1000) / 2)
    assert summary["idle_s"] == 0 and summary["outer_steps"] == 5


def test_the_fleet_of_the_issue_is_played_here_and_admitted_by_the_default_budget():
    """600 learners in datacentres and 400 at home at half the speed, jittered, that leave and
    return, x 50 outer steps: a long run for the event model (about a million events), played here; a small fleet
    stays with the event model (its figures to the last bit), and the player can be named."""
    scenario = load("benchmarks/fleet-decoupled-two-kinds.toml")
    setup = RunSetup.of(scenario)
    assert budget.estimate(scenario).events > 5 * FAST_FROM_EVENTS
    player = chosen(setup)
    assert player.name == "learners"
    held = player.budget(setup)
    assert (
        held.events == estimated_events(setup)
        and held.horizon_s == budget.estimate(scenario).horizon_s
    )
    small = load(
        "benchmarks/fleet-decoupled-two-kinds.toml", ["island.0.replicas=3", "island.1.replicas=2"]
    )
    assert budget.estimate(small).events <= FAST_FROM_EVENTS
    assert chosen(RunSetup.of(small)).name == "events"
    with pytest.raises(
        ScenarioError,
        match="--player: the learners player cannot play this run: the event model's run is short",
    ):
        chosen(RunSetup.of(small), "learners")
    assert simulate(small, player="events").summary["player"] == "events"


CHURNING = [
    {
        "name": "dc",
        "replicas": 2,
        "step_time_s": 1.0,
        "jitter_cv": 0.1,
        "bandwidth_gbps": 1.0,
        "mtbf_s": 600.0,
        "mttr_s": 60.0,
    }
]


@pytest.mark.parametrize(
    "change, why",
    [
        (
            {"syncer": {"bandwidth_gbps": 10.0}},
            "the syncer's own link ([syncer] bandwidth) is shared",
        ),
        (
            {"island": [{**CHURNING[0], "burst_bytes": 1e6}]},
            "token buckets fill and drain between exchanges",
        ),
        (
            {"island": [{**CHURNING[0], "mttr_s": None}]},
            "learners leave and do not return (mtbf_s without mttr_s)",
        ),
        (
            {
                "island": [{**CHURNING[0], "present": False}],
                "event": [{"at_s": 10.0, "island": "dc", "kind": "join"}],
            },
            "workers join or leave by scheduled events",
        ),
        (
            {"schedule": {"algorithm": "streaming", "inner_steps": 40, "outer_steps": 3}},
            "not Decoupled DiLoCo",
        ),
    ],
)
def test_what_it_does_not_play_it_says_in_words(change, why):
    base = document(CHURNING, {"inner_steps": 40, "outer_steps": 3})
    changed = {**base, **change}
    changed["island"] = [
        {k: v for k, v in island.items() if v is not None} for island in changed["island"]
    ]
    events = budget.estimate(make_scenario([], base)).events
    assert LEARNERS.fits(RunSetup.of(make_scenario([], base))) == (
        f"the event model's run is short (about {events:.3g} events): it plays it to the last bit"
    )
    assert LEARNERS.fits(RunSetup.of(make_scenario([], changed))) == why


def test_the_budget_refuses_in_one_line_naming_the_flag():
    scenario = load("benchmarks/fleet-decoupled-two-kinds.toml")
    setup = RunSetup.of(scenario, max_events=1000)
    with pytest.raises(budget.BudgetExceeded, match="raise --max-events"):
        LEARNERS.budget(setup)


def test_the_estimate_is_within_twice_the_timers_spent():
    """``estimated_events`` against the timers the loop pops, on a churning fleet of two kinds."""
    scenario = load(
        "benchmarks/fleet-decoupled-two-kinds.toml",
        ["island.0.replicas=60", "island.1.replicas=40", "schedule.outer_steps=20"],
    )
    setup = RunSetup.of(scenario)
    run = Learners(setup, budget.estimate(scenario).horizon_s)
    run.play()
    assert 0.5 <= estimated_events(setup) / run.events <= 2.0
