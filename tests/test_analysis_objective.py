"""Plans that count loss: time and cost to DDP's loss, by hand on the worked example, and the planner
preferring a smaller H than the utilisation target once loss is priced."""

from __future__ import annotations

import json
import math

import pytest

from islands.analysis.planner.objective import (
    Candidate,
    ObjectivePlan,
    Outcome,
    candidates,
    make_objective_plan,
    price,
)
from islands.analysis.planner.objective_tables import objective_table, why
from islands.analysis.quality.loss_prior import H_PENALTY_PER_LOG_H, estimate, extra_tokens_factor
from islands.analysis.quality.quality_profile import ProfilePoint, QualityProfile
from islands.cli import main
from islands.scenarios import ScenarioSource, load

# The worked example: 10B parameters, bf16 (S = 20 GB), 8 workers at 1 Gbit/s, 1.5 s per step,
# H = 500 x 20 outer steps = 10,000 inner steps. A ring all-reduce moves 2 * 7/8 * 20 GB = 35 GB: 280 s.
BUDGET_STEPS = 10_000
RING_S = 280.0
N = 10e9


def test_diloco_at_h_500_costs_its_seconds_per_step_times_its_tokens_factor():
    source = ScenarioSource.read("worked-example")
    outcome = price(source, Candidate("diloco", 500, 16), BUDGET_STEPS, 0.0, None)
    s_per_step = (500 * 1.5 + RING_S) / 500  # 750 s of compute and 280 s of stall per sync
    relative = estimate(load("worked-example"), "diloco").relative_to_dp
    factor = extra_tokens_factor(N, relative)
    assert outcome.s_per_step == pytest.approx(s_per_step)
    assert outcome.utilisation == pytest.approx(750 / 1030)
    assert outcome.tokens_factor == pytest.approx(factor) and factor > 1
    assert outcome.time_s == pytest.approx(BUDGET_STEPS * factor * s_per_step)
    assert outcome.cost is None  # no island has a price


def test_ddp_is_the_reference_and_pays_the_all_reduce_every_step_at_its_precision():
    source = ScenarioSource.read("worked-example", ["schedule.outer_steps=2"])  # 1,000 steps: fast
    outcome = price(source, Candidate("ddp", None, 8), 1000, 0.0, None)
    assert outcome.tokens_factor == 1.0 and outcome.relative_to_dp == 0.0
    assert outcome.s_per_step == pytest.approx(1.5 + RING_S / 2)  # 8-bit: half of bf16's bytes
    assert outcome.time_s == pytest.approx(1000 * (1.5 + RING_S / 2))


def test_candidates_span_h_bits_and_fragments_where_a_schedule_reads_them():
    scenario = load("worked-example")  # H = 500, P = 10, bf16 values; 10,000 inner steps
    found = candidates(scenario, ("ddp", "diloco", "streaming"), BUDGET_STEPS, {"diloco": 3547})
    assert [c for c in found if c.algorithm == "ddp"] == [Candidate("ddp", None, 16)]
    diloco = {(c.inner_steps, c.bits, c.fragments) for c in found if c.algorithm == "diloco"}
    assert (
        (3547, 16, None) in diloco and (500, 4, None) in diloco and (20000, 16, None) not in diloco
    )
    streaming = {(c.inner_steps, c.bits, c.fragments) for c in found if c.algorithm == "streaming"}
    assert {(500, 8, p) for p in (1, 2, 5, 10, 20)} <= streaming
    assert {c.bits for c in found} == {16, 8, 4}  # no wider than the model's bf16 values


def test_a_measured_schedule_keeps_to_the_bits_and_fragments_it_was_measured_at():
    points = tuple(ProfilePoint("streaming", h, 2, 16, 2, 300, 2.2, 2.0) for h in (10, 100))
    profile = QualityProfile("worked-example", 120_576, points)
    scenario = load("worked-example")
    found = candidates(scenario, ("diloco", "streaming"), BUDGET_STEPS, {}, profile)
    assert {(c.bits, c.fragments) for c in found if c.algorithm == "streaming"} == {(16, 2)}
    assert {c.bits for c in found if c.algorithm == "diloco"} == {
        16,
        8,
        4,
    }  # not measured: the prior's
    outcome = price(
        ScenarioSource.read("worked-example"),
        Candidate("streaming", 100, 16, 2),
        BUDGET_STEPS,
        0.0,
        profile,
    )
    assert outcome.measured and outcome.relative_to_dp == pytest.approx(
        0.1
    )  # 2.2 / 2.0 - 1 at H = 100


def test_cost_is_the_time_times_every_worker_s_price():
    source = ScenarioSource.read("worked-example", ["island.0.cost_per_hour=25"])
    outcome = price(source, Candidate("diloco", 1000, 16), BUDGET_STEPS, 8 * 25.0, None)
    assert outcome.cost == pytest.approx(outcome.time_s / 3600 * 8 * 25)


def test_cost_objective_without_prices_is_one_line_naming_the_key(capsys):
    assert main(["plan", "worked-example", "--objective", "cost", "--no-fragments"]) == 2
    err = capsys.readouterr().err.strip()
    assert (
        "island.0.cost_per_hour" in err and "--objective cost" in err and len(err.splitlines()) == 1
    )


def test_a_profile_without_a_loss_objective_is_one_line(capsys):
    assert main(["plan", "worked-example", "--profile", "p.json"]) == 2
    assert "--profile prices loss: it goes with --objective" in capsys.readouterr().err


def test_time_to_loss_prefers_a_smaller_h_than_the_utilisation_target_and_says_why():
    source = ScenarioSource.read("worked-example")
    smallest_h = math.ceil(0.95 * RING_S / (0.05 * 1.5))  # 1.5 H / (1.5 H + 280) >= 0.95
    assert smallest_h == 3547
    utilisation_h = {"diloco": smallest_h}  # what the utilisation plan answers for 95%
    plan = make_objective_plan(source, "time-to-loss", ("ddp", "diloco"), utilisation_h, jobs=1)
    best, target = plan.best(), plan.at("diloco", 3547, 16)
    assert target.utilisation == pytest.approx(0.95, abs=1e-3)
    assert best.candidate.algorithm == "diloco" and best.candidate.inner_steps < 3547
    assert best.time_s < target.time_s
    # why: the extra H costs loss per token, +0.352% per e-fold of H above 30, more than utilisation gains
    h_factor = {
        h: 1 + H_PENALTY_PER_LOG_H * math.log(h / 30) for h in (3547, best.candidate.inner_steps)
    }
    assert (1 + target.relative_to_dp) / (1 + best.relative_to_dp) == pytest.approx(
        h_factor[3547] / h_factor[best.candidate.inner_steps]
    )
    assert target.tokens_factor > best.tokens_factor and target.utilisation > best.utilisation
    for (
        outcome
    ) in plan.outcomes:  # every candidate priced from its own run of the same 10,000 steps
        if outcome.time_s is not None:
            assert outcome.time_s == pytest.approx(
                BUDGET_STEPS * outcome.tokens_factor * outcome.s_per_step
            )
    text = why(plan, utilisation_h)
    assert (
        "H=3547 16-bit computes 95% of the time" in text
        and f"H={best.candidate.inner_steps}" in text
    )
    table = objective_table(plan, utilisation_h)
    marked = [row[0] for row in table.rows if "(utilisation plan)" in row[0]]
    assert marked == ["DiLoCo H=3547 16-bit (utilisation plan)"]  # DDP has no H: never marked
    ddp = plan.best("ddp")
    assert (
        ddp.candidate.bits == 16 and ddp.time_s > best.time_s
    )  # DDP keeps its precision, and is slowest
    assert [o.candidate.bits for o in plan.outcomes if o.candidate.algorithm == "ddp"] == [16]


def test_only_the_utilisation_plan_s_own_candidate_is_marked_as_its_answer():
    scenario = load("worked-example")  # P = 10, bf16

    def outcome(fragments: int, time_s: float) -> Outcome:
        return Outcome(
            Candidate("streaming", 210, 16, fragments), 1.0, 1.0, 0.003, 1.08, time_s, None
        )

    plan = ObjectivePlan(
        scenario, "time-to-loss", BUDGET_STEPS, 0.0, [outcome(2, 10.0), outcome(10, 20.0)]
    )
    rows = [row[0] for row in objective_table(plan, {"streaming": 210}).rows]
    # the same H and bits at another P is the schedule's best, not the utilisation plan's answer
    assert rows == [
        "Streaming DiLoCo H=210 P=2 16-bit",
        "Streaming DiLoCo H=210 P=10 16-bit (utilisation plan)",
    ]


def test_plan_cli_prints_the_objective_in_json(capsys):
    assert (
        main(
            [
                "plan",
                "worked-example",
                "--objective",
                "time-to-loss",
                "--no-fragments",
                "--json",
                "--set",
                "schedule.outer_steps=2",
                "--targets",
                "0.9",
            ]
        )
        == 0
    )
    printed = json.loads(capsys.readouterr().out)
    objective = printed["objective"]
    assert objective["objective"] == "time-to-loss" and objective["budget_inner_steps"] == 1000
    times = [
        c["time_to_ddp_loss_s"]
        for c in objective["candidates"]
        if c["time_to_ddp_loss_s"] is not None
    ]
    assert times == sorted(times) and objective["best"]["time_to_ddp_loss_s"] == times[0]


def test_an_h_above_the_run_s_steps_is_not_priced_and_the_plan_says_so():
    """The utilisation plan's H = 3,547 for the worked example, in a run of 2 x 500 = 1,000 inner steps:
    priced, it would have run one interval of 3,547 steps, more work than every other candidate."""
    source = ScenarioSource.read("worked-example", ["schedule.outer_steps=2"])
    plan = make_objective_plan(source, "time-to-loss", ("diloco",), {"diloco": 3547}, jobs=1)
    assert plan.budget_steps == 1000
    assert max(o.candidate.inner_steps for o in plan.outcomes) == 1000
    assert plan.left_out[0] == (
        "diloco at H=3547 (the utilisation plan's answer) not priced: above the run's "
        "1,000 inner steps"
    )
    assert plan.left_out[0] in objective_table(plan, {"diloco": 3547}).notes


@pytest.mark.parametrize(
    ("cost", "text"), [(0.001, "0.001"), (0.0123, "0.0123"), (12.345, "12.3"), (12345.6, "12,346")]
)
def test_a_small_cost_is_printed_with_its_digits_not_as_0(cost, text):
    outcome = Outcome(Candidate("diloco", 500, 16), 0.7, 1.0, 0.01, 1.1, 3.6, cost)
    plan = ObjectivePlan(load("worked-example"), "cost", BUDGET_STEPS, 0.001, [outcome])
    assert objective_table(plan, {}).rows[0][-1] == text
