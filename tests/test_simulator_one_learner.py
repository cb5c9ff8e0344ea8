"""Decoupled DiLoCo with one simulated learner, played without events (``simulator/fast/one_learner.py``),
gives the event model's run: the same summary to the last bit, the same trace and link table."""

from __future__ import annotations

import pandas as pd
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from islands.analysis.planner.objective import candidates
from islands.scenarios import ScenarioError, ScenarioSource, load
from islands.schedules import schedule_of
from islands.simulator import RunSetup, chosen, simulate
from islands.simulator.fast import one_learner

DECOUPLED = ["schedule.algorithm=decoupled"]
CASES = {
    "the worked example": [],
    "latencies to the syncer": ["island.0.latency_ms=35", "syncer.latency_ms=12"],
    "quorum of every learner, a grace window": ["schedule.quorum=8", "schedule.grace_window=5"],
    "backward overlap, one fragment": [
        "schedule.backward_overlap=0.5",
        "schedule.fragments=1",
        "schedule.overlap_steps=5",
    ],
    "transfers longer than the overlap": [
        "island.0.bandwidth_gbps=0.2",
        "schedule.fragments=2",
        "schedule.overlap_steps=2",
        "schedule.inner_steps=50",
    ],
}


def assert_same_run(fast, events) -> None:
    assert fast.summary["events"] == 0 and events.summary["events"] > 0
    assert {k: v for k, v in fast.summary.items() if k not in ("events", "player")} == {
        k: v for k, v in events.summary.items() if k not in ("events", "player")
    }  # to the last bit
    pd.testing.assert_frame_equal(fast.trace, events.trace, rtol=0, atol=0)
    pd.testing.assert_frame_equal(fast.links, events.links, rtol=0, atol=0)


@pytest.mark.parametrize("case", CASES)
def test_one_learner_without_events_gives_the_event_models_run(case):
    scenario = load("worked-example", [*DECOUPLED, *CASES[case]])
    assert chosen(RunSetup.of(scenario)).name == "one learner"
    assert_same_run(simulate(scenario), simulate(scenario, player="events"))


def test_every_decoupled_candidate_of_the_worked_examples_plan_gives_the_event_models_summary():
    source = ScenarioSource.read("worked-example")
    budget_steps = schedule_of(source.scenario).total_steps(source.scenario.schedule)
    played = 0
    for candidate in candidates(source.scenario, ["decoupled"], budget_steps, {}):
        try:
            scenario = source.variant(*candidate.overrides(budget_steps))
        except ScenarioError:
            continue  # refused by the schedule's rules, as the plan refuses it
        fast, events = simulate(scenario).summary, simulate(scenario, player="events").summary
        assert {k: v for k, v in fast.items() if k not in ("events", "player")} == {
            k: v for k, v in events.items() if k not in ("events", "player")
        }, candidate
        played += 1
    assert played == 165


def test_a_transfer_not_over_at_its_first_wake_up_leaves_the_run_to_the_event_model(monkeypatch):
    scenario = load("worked-example", DECOUPLED)
    expected = simulate(scenario, player="events").summary
    monkeypatch.setattr(one_learner, "COMPLETION_TOLERANCE", -1.0)  # no transfer is ever within it
    summary = simulate(scenario).summary
    assert summary == expected  # played event by event, its events counted


@pytest.mark.parametrize(
    "overrides",
    [
        ["island.0.jitter_cv=0.05"],
        ["island.0.mtbf_s=1e5"],
        ["syncer.bandwidth_gbps=1"],
        ["network.exchange_cpu_s_per_value=1e-9"],
        ["network.model=alpha-beta"],
        ["island.0.chip_mtbf_s=1e6", "island.0.recovery_s=60"],
    ],
)
def test_what_the_recursion_does_not_hold_is_played_event_by_event(overrides):
    scenario = load("worked-example", [*DECOUPLED, *overrides])
    assert chosen(RunSetup.of(scenario)).name != "one learner"


@settings(max_examples=12, deadline=None, derandomize=True)
@given(
    st.sampled_from([(10, 1), (20, 5), (24, 24), (50, 2)]),
    st.integers(0, 8),
    st.floats(0.02, 4.0),
    st.floats(0.0, 90.0),
    st.floats(0.0, 30.0),
    st.sampled_from([0.0, 0.5]),
)
def test_drawn_single_learner_runs_give_the_event_models_summary(
    shape, tau, gbps, latency_ms, syncer_ms, lead
):
    # slow links make a learner wait mid-compute, latencies and odd rates make ends that fall between
    # rows: the sums (``one_learner.Totals``) must add the rows in the event run's order to the last bit
    h, fragments = shape
    scenario = load(
        "worked-example",
        [
            *DECOUPLED,
            f"schedule.inner_steps={h}",
            f"schedule.fragments={fragments}",
            f"schedule.overlap_steps={min(tau, h - 1)}",
            "schedule.outer_steps=4",
            f"schedule.backward_overlap={lead}",
            f"island.0.bandwidth_gbps={gbps}",
            f"island.0.latency_ms={latency_ms}",
            f"syncer.latency_ms={syncer_ms}",
        ],
    )
    assume(chosen(RunSetup.of(scenario)).name == "one learner")
    fast, events = simulate(scenario), simulate(scenario, player="events")
    if fast.summary[
        "events"
    ]:  # a transfer not over at its first wake-up: both played event by event
        assert fast.summary == events.summary
        return
    assert_same_run(fast, events)
