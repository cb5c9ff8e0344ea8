"""Honest numbers and hard input (issue 12): no silent truncation, a resource guard, bounds on every
key, strict JSON, and one line with exit 2 for every absurd input."""

from __future__ import annotations

import copy
import json
import math

import pytest
from helpers.scenarios import BASE_DOCUMENT, make_scenario

from islands.cli import main
from islands.scenarios import ScenarioError, load
from islands.scenarios.spec import ARRAYS, EVENT_KEYS, SECTIONS, TOP_KEYS
from islands.simulator import BudgetExceeded, RunSetup, guard, simulate
from islands.simulator.budget import estimate
from islands.simulator.events.engine import Simulation

LIMITS_DOC = "docs/limits.md"


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# --- 1. no silent truncation ---------------------------------------------------------------------


def test_window_limited_ring_matches_the_closed_form():
    """Worked example, 50 ms one way, 64 KiB window, one stream: every hop's RTT is 2 * (50 + 50) ms,
    so the ring moves at window / RTT and U = 750 / (750 + 14 hops * 0.1 s + 35 GB / rate)."""
    summary = simulate(
        load("worked-example", ["island.0.latency_ms=50", "network.tcp_window_bytes=65536"])
    ).summary
    rate_bytes_per_s = 65536 / 0.2
    sync_s = 2 * 7 * 0.1 + 2 * 7 / 8 * 20e9 / rate_bytes_per_s
    expected = 750 / (750 + sync_s)
    assert summary["complete"] and summary["incomplete_reason"] is None
    assert summary["outer_steps"] == 20
    assert summary["compute_utilisation"] == pytest.approx(expected, rel=1e-9)
    assert round(100 * expected, 2) == 0.70


def test_a_run_without_endless_churn_has_no_horizon():
    scenario = load("worked-example", ["island.0.mtbf_s=5000"])
    assert estimate(scenario).horizon_s is None
    assert estimate(load("worked-example")).horizon_s is None
    assert (
        estimate(load("worked-example", ["island.0.mtbf_s=5000", "island.0.mttr_s=100"])).horizon_s
        > 0
    )


def test_the_bound_covers_a_slow_window_and_latency():
    """The run-length bound holds every sync at its true (window-capped) rate."""
    scenario = load("worked-example", ["island.0.latency_ms=50", "network.tcp_window_bytes=65536"])
    summary = simulate(scenario).summary
    assert estimate(scenario).run_length_s >= summary["wall_time_s"] * (1 - 1e-9)


def test_endless_churn_that_never_lets_the_run_finish_is_a_marked_partial_result(capsys):
    overrides = ["island.0.mtbf_s=20", "island.0.mttr_s=5", "schedule.outer_steps=2"]
    summary = simulate(make_scenario(overrides)).summary
    assert summary["complete"] is False and summary["horizon_reached"]
    assert (
        "horizon" in summary["incomplete_reason"]
        and "island.0.mtbf_s" in summary["incomplete_reason"]
    )
    assert summary["compute_utilisation"] is None and summary["compute_utilisation_run"] is None
    assert all(island["compute_utilisation"] is None for island in summary["islands"])
    assert list(summary)[:2] == ["complete", "incomplete_reason"]


def test_everyone_leaving_is_not_utilisation_100_percent(capsys, scenario_file):
    code, out, _ = run_cli(capsys, "simulate", "worked-example", "--set", "island.0.mtbf_s=1")
    assert code == 0
    assert "PARTIAL RESULT" in out and "every worker had left" in out
    assert "100.0%" not in out and "cut short" in out
    code, out, _ = run_cli(
        capsys, "simulate", "worked-example", "--set", "island.0.mtbf_s=1", "--json"
    )
    summary = json.loads(out)
    assert summary["complete"] is False and summary["compute_utilisation"] is None


def test_a_returning_worker_is_dropped_from_the_ring_until_it_is_admitted():
    """A worker back within the detection timeout waits for the next boundary: the ring must not wait for it."""
    summary = simulate(
        load(
            "worked-example",
            ["island.0.mtbf_s=3000", "island.0.mttr_s=10", "schedule.outer_steps=5"],
        )
    ).summary
    assert summary["complete"]


# --- 3. resource guard and bounds ----------------------------------------------------------------


@pytest.mark.parametrize(
    "override, key, rule",
    [
        ("seed=-1", "seed", "must be >= 0"),
        ("model.parameters=1e30", "model.parameters", "must be <= 1e+14"),
        ("island.0.step_time_s=1e-7", "island.0.step_time_s", "must be >= 1e-06 s"),
        ("island.0.latency_ms=61000", "island.0.latency_ms", "must be <= 60000 ms"),
        ("island.0.bandwidth_gbps=1e-12", "island.0.bandwidth_gbps", "must be >= 1e-06 Gbit/s"),
        ("island.0.jitter_cv=1e6", "island.0.jitter_cv", "must be <= 10"),
        ("island.0.replicas=1000000", "island.0.replicas", "must be <= 100000"),
        ("island.0.replicas=1000000000", "island.0.replicas", "must be <= 100000"),
        ("island.0.mtbf_s=1e-6", "island.0.mtbf_s", "must be >= 1 s"),
        (
            "network.tcp_window_bytes=10",
            "network.tcp_window_bytes",
            "must be 0 or in [1024, 1.07374e+09] bytes",
        ),
        ("network.streams=100000", "network.streams", "must be <= 1024"),
        ("schedule.inner_steps=100000000", "schedule.inner_steps", "must be <= 1e+07"),
    ],
)
def test_absurd_values_are_refused_by_key(override, key, rule):
    with pytest.raises(ScenarioError) as caught:
        make_scenario(
            [override, "island.0.replicas=4"] if key != "island.0.replicas" else [override]
        )
    assert caught.value.key == key
    assert caught.value.rule.startswith(rule)


def test_every_numeric_key_has_a_bound_and_a_line_in_the_limits_doc():
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[1] / LIMITS_DOC).read_text()
    tables = {
        "": TOP_KEYS,
        "event.": EVENT_KEYS,
        **{f"{name}.": keys for name, keys in ARRAYS.items()},
        **{f"{name}.": keys for name, keys in SECTIONS.items()},
    }
    for prefix, keys in tables.items():
        for name, key in keys.items():
            if key.kind in ("int", "float"):
                assert key.check is not None, prefix + name
                assert f"`{prefix}{name}`" in doc, prefix + name


def test_derived_step_times_obey_the_same_bounds():
    doc = copy.deepcopy(BASE_DOCUMENT)
    doc["model"]["tokens_per_step"] = 1.0
    doc["island"][0] = {
        "name": "a",
        "replicas": 4,
        "gpu": "H100",
        "mfu": 1.0,
        "bandwidth_gbps": 1.0,
    }
    with pytest.raises(
        ScenarioError, match=r"island.0.step_time_s: derived from gpu, gpus and mfu as 6.07e-14 s"
    ):
        make_scenario(["model.parameters=10"], document=doc)


def test_nobody_present_and_nothing_joining_is_refused():
    with pytest.raises(
        ScenarioError, match=r"island: no island is present at the start and nothing joins"
    ):
        make_scenario(["island.0.present=false"])
    doc = copy.deepcopy(BASE_DOCUMENT)
    doc["island"][0]["present"] = False
    doc["event"] = [{"at_s": 10.0, "island": "a", "kind": "join"}]
    summary = simulate(make_scenario(document=doc)).summary
    assert summary["complete"] and not math.isnan(summary["wall_time_s"])


@pytest.mark.parametrize(
    "events, message",
    [
        (
            [{"at_s": 5.0, "island": "a-1", "kind": "join"}],
            r"event.0: join of 'a-1' at 5 s would be ignored: "
            r"'a-1' is already present then",
        ),
        (
            [
                {"at_s": 50.0, "island": "a", "kind": "leave"},
                {"at_s": 5.0, "island": "a-2", "kind": "leave"},
            ],
            r"event.0: leave of 'a' at 50 s would be ignored: 'a-2' is already gone then",
        ),
    ],
)
def test_events_that_would_change_nothing_are_refused(events, message):
    doc = copy.deepcopy(BASE_DOCUMENT)
    doc["event"] = events
    with pytest.raises(ScenarioError, match=message):
        make_scenario(document=doc)


def test_events_after_the_end_are_counted_and_shown(capsys, scenario_file):
    path = scenario_file("""
name = "late"
[model]
parameters = 1e9
[schedule]
algorithm = "diloco"
inner_steps = 100
outer_steps = 2
[[island]]
name = "a"
replicas = 4
step_time_s = 1.0
bandwidth_gbps = 1.0
[[event]]
at_s = 1e6
island = "a-3"
kind = "leave"
""")
    result = simulate(load(path))
    assert result.events_after_end == 1 and result.summary["ignored_events"] == 1
    code, out, _ = run_cli(capsys, "simulate", str(path))
    assert code == 0 and "1 scheduled event actions were not applied: 1 after the run ended" in out


def test_the_guard_refuses_before_running_and_names_the_budgets_flag():
    scenario = load("worked-example", ["schedule.outer_steps=1000000000"])
    # the 8 identical replicas run as one worker: 2 events per worker-sync and 3.5 per collective, 1e9 syncs
    with pytest.raises(
        BudgetExceeded,
        match=r"--max-events: the run would need about 5.5e\+09 simulator "
        r"events.*above the budget of 2e\+06 events: raise --max-events",
    ):
        guard(scenario)
    assert guard(load("worked-example"), max_events=1000).events <= 1000


def test_the_guard_says_when_churn_dominates_and_names_the_flag_not_the_physics():
    scenario = load("worked-example", ["island.0.mtbf_s=1.5", "island.0.mttr_s=1"])
    with pytest.raises(
        BudgetExceeded,
        match=r"--max-events: the run would need about .* simulator events, .* of "
        r"them for .* joins and leaves",
    ) as refused:
        guard(scenario)
    assert "mtbf_s" not in str(refused.value)


def test_float64_time_is_guarded():
    scenario = load("worked-example", ["model.parameters=1e14", "island.0.step_time_s=1e-6"])
    with pytest.raises(
        BudgetExceeded, match=r"island.0.step_time_s: .*float64 time resolves a step only"
    ):
        guard(scenario)


def test_a_run_that_passes_max_events_stops_with_one_line():
    scenario = load("worked-example")
    simulation = Simulation(
        RunSetup.of(scenario, max_events=40), estimate(scenario)
    )  # as if the estimate were too low
    with pytest.raises(
        BudgetExceeded,
        match=r"--max-events: the run passed the limit of 40 simulator "
        r"events at .* outer steps done .* raise --max-events",
    ):
        simulation.play()


def test_the_estimate_bounds_real_runs():
    for name, overrides in [
        ("worked-example", ["schedule.algorithm=streaming"]),
        ("worked-example", ["schedule.algorithm=ddp", "schedule.outer_steps=200"]),
        ("intellect-1", []),
        ("home-lab", []),
        ("mixed-fleet", []),
    ]:
        scenario = load(name, overrides)
        result = simulate(scenario)
        budget = estimate(scenario)
        assert result.summary["events"] <= budget.events, name
        assert len(result.lead_trace) <= budget.trace_rows, (
            name
        )  # the rows the engine keeps (replicas.py)


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["simulate", "worked-example", "--set", "schedule.outer_steps=1000000000"],
            "raise --max-events",
        ),
        (
            ["simulate", "worked-example", "--set", "island.0.replicas=1000000"],
            "island.0.replicas: must be <= 100000",
        ),
        (
            ["simulate", "worked-example", "--set", "island.0.mtbf_s=1e-6"],
            "island.0.mtbf_s: must be >= 1 s",
        ),
        (["simulate", "worked-example", "--set", "seed=-1"], "seed: must be >= 0"),
        (["simulate", "worked-example", "--max-events", "0"], "--max-events must be >= 1"),
        (
            ["sweep", "worked-example", "--grid", "schedule.inner_steps=100,500", "--jobs", "0"],
            "--jobs must be >= 1",
        ),
        (
            ["sweep", "worked-example", "--grid", "schedule.inner_steps=100,500", "--top", "-2"],
            "--top must be >= 1",
        ),
        (["plan", "worked-example", "--jobs", "0"], "--jobs must be >= 1"),
        (
            ["plan", "worked-example", "--set", "schedule.outer_steps=1000000000"],
            "raise --max-events",
        ),
    ],
)
def test_cli_refuses_with_one_line_and_exit_2(capsys, argv, message):
    code, out, err = run_cli(capsys, *argv)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith(f"islands {argv[0]}: error: ") and message in err


# --- 5. strict JSON ------------------------------------------------------------------------------


def test_simulate_json_is_strict_for_partial_runs(capsys):
    code, out, _ = run_cli(
        capsys, "simulate", "worked-example", "--set", "island.0.mtbf_s=1", "--json"
    )
    assert code == 0
    json.loads(out, parse_constant=lambda name: pytest.fail(f"{name} in JSON"))


def test_everyone_leaving_at_once_gives_no_nan():
    doc = copy.deepcopy(BASE_DOCUMENT)
    doc["event"] = [{"at_s": 0.0, "island": "a", "kind": "leave"}]
    summary = simulate(make_scenario(document=doc)).summary
    json.dumps(summary, allow_nan=False)
    assert summary["complete"] is False


# --- sweep and plan never rank a cut-short run ---------------------------------------------------


def test_sweep_flags_and_does_not_rank_cut_short_runs(capsys, tmp_path):
    output = tmp_path / "sweep.csv"
    code, out, _ = run_cli(
        capsys,
        "sweep",
        "worked-example",
        "--set",
        "schedule.outer_steps=2",
        "--grid",
        "island.0.mtbf_s=1,100000",
        "--jobs",
        "1",
        "-o",
        str(output),
    )
    assert code == 0
    assert "1 of 2 runs were cut short by churn" in out
    best = out.split("Best")[1]
    assert "100000" in best and "\n1 " not in best


def test_plan_never_reports_utilisation_from_a_cut_short_run():
    from islands.analysis.planner.plan import make_utilisation_plan, plan_to_dict
    from islands.analysis.planner.plan_tables import bandwidth_table

    plan = make_utilisation_plan(
        "worked-example",
        target=0.5,
        targets=(0.5,),
        fragments=False,
        jobs=1,
        overrides=["island.0.mtbf_s=1", "schedule.outer_steps=2"],
    )
    assert all(value is None for value in plan.now.values())
    assert set(plan.now_cut_short) == {"ddp", "diloco", "streaming", "eager", "decoupled"}
    table = bandwidth_table(plan)
    assert all(row[-1] == "cut short" for row in table.rows)
    assert all(not found.reached for row in plan.bandwidth.values() for found in row.values())
    json.dumps(plan_to_dict(plan), allow_nan=False)


def test_every_numeric_trainer_key_has_an_upper_bound_and_a_line_in_the_limits_doc():
    from pathlib import Path

    from islands.scenarios.trainer_keys import TRAINER_KEYS

    doc = (Path(__file__).resolve().parents[1] / LIMITS_DOC).read_text()
    for name, key in TRAINER_KEYS.items():
        if key.kind in ("int", "float") and name not in (
            "min_lr_ratio",
            "fragment_alpha",
            "val_fraction",
            "trim_fraction",
        ):  # bounded by [0, 1] already
            assert key.check(1e300) is not None, name
            assert f"`trainer.{name}`" in doc, name
