"""The planner against closed forms of the worked example (10B params, bf16, 8 workers, 1.5 s/step).

One all-reduce moves 2 * 7/8 * 20 GB = 35 GB per worker: 280 s at 1 Gbit/s, 280 / bw s at bw Gbit/s.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest

from islands.analysis.planner import search
from islands.analysis.planner.plan import Question, make_utilisation_plan, placement, plan_to_dict
from islands.analysis.planner.plan_tables import plan_tables
from islands.analysis.planner.search import least_bandwidth, least_inner_steps, utilisation
from islands.cli import main
from islands.errors import UserError
from islands.scenarios import ScenarioSource

SYNC_GBIT = 35 * 8  # Gbit each worker moves per full all-reduce
STEP_S = 1.5
H = 500
OVERHEAD_95 = 1 / 0.95 - 1  # stall seconds allowed per compute second at 95%


@pytest.fixture(scope="module")
def source() -> ScenarioSource:
    return ScenarioSource.read("worked-example", ["schedule.outer_steps=3"])


def test_diloco_95_percent_bandwidth_is_the_worked_example_within_2_percent(source):
    # 750 / (750 + 280 / bw) = 0.95  ->  bw = 280 / (750 * (1/0.95 - 1)) = 7.093 Gbit/s
    expected = SYNC_GBIT / (H * STEP_S * OVERHEAD_95)
    found = least_bandwidth(source, 0.95, "schedule.algorithm=diloco")
    assert expected == pytest.approx(7.0933, rel=1e-4)
    assert found.value == pytest.approx(expected, rel=0.02)
    assert found.value == pytest.approx(expected, rel=1e-3)  # the search's own precision
    assert found.utilisation >= 0.95 - 1e-9


def test_ddp_bandwidth_for_95_percent(source):
    # one step: 1.5 / (1.5 + 280 / bw) = 0.95
    found = least_bandwidth(source, 0.95, "schedule.algorithm=ddp")
    assert found.value == pytest.approx(SYNC_GBIT / (STEP_S * OVERHEAD_95), rel=1e-3)


def test_streaming_bandwidth_for_95_percent(source):
    # P = 10 fragments of 28 / bw s each, launched tau = 20 steps (30 s) early: each stalls 28/bw - 30 s,
    # 10 per 750 s of compute: 10 * (28 / bw - 30) = 750 * (1/0.95 - 1)  ->  bw = 0.8248 Gbit/s
    expected = (SYNC_GBIT / 10) / (30 + H * STEP_S * OVERHEAD_95 / 10)
    found = least_bandwidth(source, 0.95, "schedule.algorithm=streaming")
    assert found.value == pytest.approx(expected, rel=1e-3)


def test_smallest_h_for_95_percent_at_1_gbps(source):
    # H * 1.5 / (H * 1.5 + 280) >= 0.95  ->  H >= 280 * 0.95 / 0.05 / 1.5 = 3546.7
    found = least_inner_steps(source, 0.95, "schedule.algorithm=diloco")
    assert found.value == math.ceil(280 * 0.95 / 0.05 / STEP_S) == 3547
    assert found.utilisation >= 0.95


def test_smallest_streaming_h_is_the_first_valid_one_when_overlap_hides_everything(source):
    # 28 s per fragment < 30 s of overlap: every valid H (multiple of P = 10, H / P > tau = 20) hides it all.
    found = least_inner_steps(source, 0.95, "schedule.algorithm=streaming")
    assert found.value == 10 * 21
    assert found.utilisation == pytest.approx(1.0)


def test_a_latency_bound_target_is_unreachable(source):
    # 1 s one-way latency: 2(M-1) = 14 ring steps of 2 s each = 28 s per sync, at any bandwidth;
    # H = 10 gives 15 s of compute, so utilisation stays below 15 / 43 = 35%.
    slow = source.with_overrides("schedule.inner_steps=10", "island.*.latency_ms=1000")
    found = least_bandwidth(slow, 0.5, "schedule.algorithm=diloco")
    assert found.value is None
    assert found.utilisation < 15 / 43


def test_seeds_average_utilisation_over_runs(source):
    jittery = source.with_overrides("island.*.jitter_cv=0.2")
    one, two = utilisation(jittery, seeds=(0,)), utilisation(jittery, seeds=(1,))
    assert one != two  # jitter draws differ by seed
    assert utilisation(jittery, seeds=(0, 1)) == pytest.approx((one + two) / 2)


def test_h_search_stops_when_utilisation_falls(source, monkeypatch):
    # A made-up churn-like curve: utilisation peaks at 90% at H = 1000 and falls beyond it.
    asked = []

    def curve(_source, *overrides, seeds=()):
        h = int(overrides[-1].split("=")[1])
        asked.append(h)
        return 0.9 - abs(math.log2(h / 1000)) / 10

    monkeypatch.setattr(search, "utilisation", curve)
    found = least_inner_steps(source, 0.95, "schedule.algorithm=diloco")
    assert (found.value, found.tried, found.utilisation) == (None, 1000, pytest.approx(0.9))
    # the overhead 1/U - 1 on a line in 1/H through H = 500 (0.25) and 1000 (1/9) meets 1/0.95 - 1 at
    # H = 1727.3 (within the doubling's 2000); utilisation falls there and the search stops
    slope = (0.25 - 1 / 9) / (1 / 500 - 1 / 1000)
    assert (
        asked
        == [500, 1000, math.ceil(slope / (OVERHEAD_95 - (0.25 - slope / 500)))]
        == [500, 1000, 1728]
    )
    assert not found.monotone  # the curve fell: flagged


def test_bandwidth_search_stops_at_its_lower_bound(source, monkeypatch):
    monkeypatch.setattr(search, "utilisation", lambda *_args, **_kwargs: 1.0)
    found = least_bandwidth(source, 0.95)
    # from 1 Gbit/s down by factors of 10 to 1 kbit/s: 1, 0.1, ..., 1e-6 is 7 runs
    assert found.runs == 7
    assert found.value == pytest.approx(search.MIN_GBPS)


@pytest.fixture(scope="module")
def plan():
    one_interval = ScenarioSource.read("worked-example", ["schedule.outer_steps=1"])
    return make_utilisation_plan(one_interval, target=0.95, targets=(0.5,), jobs=1)


def test_plan_has_each_schedule_at_each_target(plan):
    assert plan.targets == (0.5, 0.95)
    # DiLoCo at 50%: 280 / bw = 750  ->  bw = 0.3733 Gbit/s
    assert plan.bandwidth["diloco"][0.5].value == pytest.approx(SYNC_GBIT / (H * STEP_S), rel=1e-3)
    assert plan.now["diloco"] == pytest.approx(750 / 1030)
    assert plan.inner_steps["diloco"].value == 3547


def test_a_schedule_the_scenario_cannot_run_is_named_in_the_plan_not_searched(plan):
    # one outer step: eager updates apply a round's average one outer step later, so they need two
    assert "eager" not in plan.bandwidth and "eager" not in plan.now
    reason = "Eager DiLoCo not run: schedule.outer_steps: eager needs at least 2"
    assert plan.left_out[0].startswith(reason)
    assert reason in plan_tables(plan)[0].text()


def test_halving_the_bits_halves_the_bandwidth_and_the_best_is_most_fragments_fewest_bits(plan):
    # P must divide 500 with 500 / P > 20: 1, 2, 4, 5, 10, 20; bits at most the model's 16.
    assert sorted({p for p, _ in plan.fragments}) == [1, 2, 4, 5, 10, 20]
    assert sorted({b for _, b in plan.fragments}) == [4, 8, 16]
    for p in (1, 10, 20):
        assert plan.fragments[(p, 8)].value == pytest.approx(
            plan.fragments[(p, 16)].value / 2, rel=2e-3
        )
    assert plan.best_fragments() == (20, 4)


def test_plan_tables_print_the_searched_numbers(plan):
    text = "\n".join(table.text() for table in plan_tables(plan))
    assert f"{SYNC_GBIT / (H * STEP_S * OVERHEAD_95):.3g} Gbit/s" in text  # 7.09 Gbit/s
    assert "3547" in text
    assert "~" not in text  # every curve rose with the value searched


def test_the_plan_counts_the_runs_it_simulated(source, monkeypatch):
    simulated = []
    real = search.simulate
    monkeypatch.setattr(
        search,
        "simulate",
        lambda scenario, *args: simulated.append(scenario) or real(scenario, *args),
    )
    plan = make_utilisation_plan(source, target=0.95, targets=(0.5,), jobs=1)
    assert plan.runs == len(simulated)
    # within a task, the schedule's run as it stands also opens its bandwidth curve and its H search:
    # remembered, not rerun (a task remembers its own runs only: a scenario two tasks meet runs in each)
    evaluated = sum(found.runs for row in plan.bandwidth.values() for found in row.values())
    evaluated += sum(
        found.runs for found in [*plan.inner_steps.values(), *plan.fragments.values()]
    ) + len(plan.now)
    assert len(simulated) < evaluated


def test_a_curve_that_falls_marks_its_answers(plan):
    assert search.rises({1.0: 0.5, 2.0: 0.5 - 1e-9, 3.0: 0.7})  # rounding is not a fall
    assert not search.rises({1.0: 0.5, 2.0: 0.4, 3.0: 0.7})
    assert not search.rises({1.0: 0.5, 2.0: None})  # a run cut short ranks below every finished one
    fallen = replace(plan.bandwidth["diloco"][0.95], monotone=False)
    marked = replace(
        plan, bandwidth={**plan.bandwidth, "diloco": {**plan.bandwidth["diloco"], 0.95: fallen}}
    )
    text = plan_tables(marked)[0].text()
    assert f"{SYNC_GBIT / (H * STEP_S * OVERHEAD_95):.3g} Gbit/s~" in text
    assert "~: utilisation fell between two runs as bandwidth grew" in text
    assert plan_to_dict(marked)["bandwidth_gbps"]["diloco"]["0.95"]["monotone"] is False


@pytest.mark.parametrize("target", [0.0, 1.5])
def test_targets_outside_0_1_are_rejected(source, target):
    with pytest.raises(UserError, match="target utilisation must be in"):
        make_utilisation_plan(source, target=target, jobs=1)


def test_cli_plan_json(capsys):
    code = main(
        [
            "plan",
            "worked-example",
            "--set",
            "schedule.outer_steps=2",
            "--targets",
            "0.95",
            "--no-fragments",
            "--jobs",
            "1",
            "--json",
        ]
    )
    plan = json.loads(capsys.readouterr().out)
    assert code == 0
    assert plan["bandwidth_gbps"]["diloco"]["0.95"]["value"] == pytest.approx(7.0933, rel=1e-3)
    assert plan["fragments_bits_gbps"] == []


def test_a_schedule_with_a_syncer_is_searched_with_it_where_the_comparisons_place_it():
    """intellect-1 has regions and no syncer.region (it is DiLoCo): Decoupled DiLoCo's searches place
    the syncer where most workers are, as the notes say, instead of failing on the missing key."""
    source = ScenarioSource.read("intellect-1")
    decoupled = Question("schedule", "decoupled", 0.95)
    assert placement(source, decoupled) == ("syncer.region=us",)
    assert placement(source, Question("schedule", "diloco", 0.95)) == ()
    assert source.variant(*decoupled.overrides, *placement(source, decoupled)).syncer.region == "us"
