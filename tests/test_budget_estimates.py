"""The event model's budget (``simulator/budget.py``) estimates the events a run then spends within 2x
either way, for the runs users bring: coupled and Decoupled, jittered, churning both ways, many
workers; and it refuses by naming the budget and its flag, never a physics key."""

from __future__ import annotations

import math

import pytest

from islands.scenarios import load
from islands.simulator import BudgetExceeded, RunSetup, chosen, simulate
from islands.simulator.budget import estimate, guard, horizon_reason, restarted_s
from islands.simulator.result import result_of

CHURN = ["island.0.mtbf_s=86400", "island.0.mttr_s=3600"]
RUNS = {
    "worked example": ("worked-example", []),
    "jittered": ("worked-example", ["island.0.jitter_cv=0.05"]),
    "streaming": ("worked-example", ["schedule.algorithm=streaming"]),
    "streaming, compute slowed while exchanging": (
        "worked-example",
        ["schedule.algorithm=streaming", "compute.slowdown_while_exchanging=0.04"],
    ),
    "decoupled, compute slowed while exchanging": (
        "worked-example",
        ["schedule.algorithm=decoupled", "compute.slowdown_while_exchanging=0.04"],
    ),
    "ddp": ("worked-example", ["schedule.algorithm=ddp", "schedule.outer_steps=200"]),
    "decoupled, jittered": (
        "worked-example",
        ["schedule.algorithm=decoupled", "island.0.jitter_cv=0.05"],
    ),
    "decoupled, 50 learners, quorum": (
        "worked-example",
        [
            "schedule.algorithm=decoupled",
            "island.0.jitter_cv=0.05",
            "island.0.replicas=50",
            "schedule.quorum=10",
        ],
    ),
    "decoupled fleet": ("decoupled-fleet", ["schedule.outer_steps=30"]),
    "300 that return": ("worked-example", ["island.0.replicas=300", *CHURN]),
    "300 that return, jitter, deadline": (
        "worked-example",
        ["island.0.replicas=300", *CHURN, "island.0.jitter_cv=0.05", "schedule.barrier=deadline"],
    ),
    "300 that return, latency": (
        "worked-example",
        ["island.0.replicas=300", *CHURN, "island.0.latency_ms=1"],
    ),
    "home lab": ("home-lab", []),
    "mixed fleet": ("mixed-fleet", []),
    "intellect-1": ("intellect-1", []),
}


@pytest.mark.parametrize("run", RUNS)
def test_the_estimate_is_within_twice_the_events_spent(run):
    name, overrides = RUNS[run]
    scenario = load(name, overrides)
    spent = simulate(scenario, max_events=math.inf, player="events").summary["events"]
    estimated = estimate(scenario).events
    assert 0.5 <= estimated / spent <= 2, (estimated, spent)


def test_where_returns_outpace_the_holders_uplink_the_estimate_errs_high():
    """The known limit (docs/limits.md): 1,000 workers mostly away, whose returns would need the holder's
    uplink more than all the time (``budget.expected_length_s``: busy >= 1), are estimated up to their
    horizon: far more events than the run then spends as the fleet empties, never fewer."""
    scenario = load(
        "worked-example",
        [
            "island.0.replicas=1000",
            "island.0.mtbf_s=2000",
            "island.0.mttr_s=50000",
            "schedule.outer_steps=10",
        ],
    )
    spent = simulate(scenario, max_events=math.inf, player="events").summary["events"]
    assert estimate(scenario).events > 2 * spent


def test_admission_is_the_same_for_every_seed():
    scenario = [
        "island.0.replicas=1000",
        "island.0.mtbf_s=2000",
        "island.0.mttr_s=50000",
        "schedule.outer_steps=10",
    ]
    budgets = {
        estimate(load("worked-example", [*scenario, f"seed={seed}"])).events for seed in range(6)
    }
    assert len(budgets) == 1


def test_a_refusal_names_the_budget_and_its_flag_not_a_physics_key():
    scenario = load("worked-example", ["island.0.replicas=300", *CHURN])
    with pytest.raises(
        BudgetExceeded,
        match=r"--max-events: the run would need about .* simulator events, .* joins "
        r"and leaves, .* above the budget of 1000 events: raise --max-events",
    ) as refused:
        guard(scenario, max_events=1000)
    assert "mtbf_s" not in str(refused.value) and "outer_steps" not in str(refused.value)


def test_a_run_cut_at_its_horizon_names_what_keeps_its_workers_away_too():
    failing = load("worked-example", ["island.0.chip_mtbf_s=3600", "island.0.recovery_s=7200"])
    assert horizon_reason(3, failing, 1e6).endswith(
        "3 of 20 outer steps done: churn keeps the run from finishing; raise island.0.chip_mtbf_s or lower "
        "island.0.recovery_s"
    )
    returning = load("worked-example", CHURN)
    assert horizon_reason(0, returning, 1e6).endswith(
        "raise island.0.mtbf_s or lower island.0.mttr_s"
    )


COUNTED = {
    "1,000 at MTBF 12 h, MTTR 1 h": ["island.0.mtbf_s=43200", "island.0.mttr_s=3600"],
    "1,000 at MTBF and MTTR 6 h": ["island.0.mtbf_s=21600", "island.0.mttr_s=21600"],
    "1,000 partial, MTBF 2 h, MTTR 30 min": [
        "island.0.mtbf_s=7200",
        "island.0.mttr_s=1800",
        "network.on_departure=partial",
    ],
}


@pytest.mark.parametrize("run", COUNTED)
def test_the_counts_expect_the_joins_and_leaves_that_come_within_twice(run):
    """Played on counts, these fleets were expected to make 3-8x the joins and leaves that came,
    when each ring's restarts were priced as if its members stayed (the closed form below)."""
    scenario = load(
        "worked-example", ["island.0.replicas=1000", "schedule.outer_steps=20", *COUNTED[run]]
    )
    setup = RunSetup.of(scenario)
    player = chosen(setup)
    held = player.budget(setup)
    summary = result_of(setup, player.play(setup, held)).summary
    assert player.name == "counts"
    assert 0.5 <= held.membership_changes / (summary["joins"] + summary["leaves"]) <= 2


def test_a_restarted_collective_whose_members_stay_takes_the_closed_form():
    """Rate 0.01/s, T = 50 s, d = 10 s and members that never thin (MTBF far beyond the run):
    (exp(0.5) - 1)(100 + 10) = 71.36 s. Members that leave for good thin the ring and shorten it."""
    closed_form_s = math.expm1(0.5) * (1 / 0.01 + 10)
    assert restarted_s(50, 0.01, 1e15, 10) == pytest.approx(closed_form_s, rel=1e-6)
    assert restarted_s(50, 0.01, 1000, 10) < closed_form_s
    assert restarted_s(50, 0.0, 1e15, 10) == 50  # nobody leaves: the collective itself


def test_chips_fail_over_the_compute_not_over_the_wait():
    """A run that waits on its links far longer than it computes: its chips fail only while they
    compute, so the budget expects 2 changes (a stop and a restart) per failure over each worker's
    compute, not over the run's length. By hand: 8 workers x 20 outer steps x 500 steps x 0.01 s =
    100 s of compute each, 8 chips with an MTBF of 8,000 s: 0.1 failures per worker, 1.6 changes in
    all; the run itself lasts about 20 x 280 s of all-reduce at 1 Gbit/s."""
    scenario = load(
        "worked-example",
        [
            "island.0.step_time_s=0.01",
            "island.0.chips=8",
            "island.0.chip_mtbf_s=8000",
            "island.0.recovery_s=60",
            "schedule.algorithm=diloco",
            "schedule.elastic=true",
        ],
    )
    budget = estimate(scenario)
    assert budget.membership_changes == pytest.approx(2 * 8 * 100 * 8 / 8000)
    assert budget.run_length_s > 20 * 280
