"""Scenario loading and validation: every rule gives one line naming the file, the key and the rule."""

from __future__ import annotations

import subprocess
import sys

import pytest
from helpers.scenarios import make_scenario

from islands.cli import main
from islands.scenarios import ScenarioError, bundled_names, load
from islands.schedules import SCHEDULES

GOOD = """
name = "two"
[model]
parameters = 1e9
[schedule]
algorithm = "streaming"
inner_steps = 100
outer_steps = 2
fragments = 4
overlap_steps = 5
[[island]]
name = "eu"
step_time_s = 1.0
bandwidth_gbps = 1.0
[[island]]
name = "us"
step_time_s = 2.0
bandwidth_gbps = 10
latency_ms = 40
"""


def test_good_file_loads_with_defaults(scenario_file):
    scenario = load(scenario_file(GOOD))
    assert scenario.model.bytes_per_param == 2.0
    assert scenario.schedule.bits == 16  # default: bytes_per_param * 8
    assert scenario.payload_bytes == 1e9 * 16 / 8
    assert scenario.network.model == "auto"
    workers = scenario.workers()
    assert [w.name for w in workers] == ["eu", "us"]
    assert workers[1].upload_bytes_per_s == 10e9 / 8
    assert workers[1].latency_s == pytest.approx(0.040)


def test_replicas_expand_into_named_workers():
    workers = make_scenario().workers()
    assert [w.name for w in workers] == ["a-0", "a-1", "a-2", "a-3"]
    assert [w.rank for w in workers] == [0, 1, 2, 3]


def test_bundled_worked_example_is_listed_and_loads():
    assert "worked-example" in bundled_names()
    scenario = load("worked-example")
    assert scenario.worker_count == 8
    assert scenario.payload_bytes == 20e9


@pytest.mark.parametrize(
    "override, key, rule",
    [
        (
            "island.0.bandwidth_gbps=-1",
            "island.0.bandwidth_gbps",
            "must be >= 1e-06 Gbit/s (see docs/limits.md)",
        ),
        ("island.0.bandwidth_gbps=0", "island.0.bandwidth_gbps", "must be >= 1e-06 Gbit/s"),
        ('island.0.step_time_s="fast"', "island.0.step_time_s", "must be a finite number"),
        ("schedule.inner_steps=0", "schedule.inner_steps", "must be >= 1"),
        ("schedule.inner_steps=2.5", "schedule.inner_steps", "must be an integer"),
        (
            "schedule.algorithm=sgd",
            "schedule.algorithm",
            "must be one of 'ddp', 'diloco', 'streaming'",
        ),
        ("schedule.bits=12", "schedule.bits", "must be one of 32, 16, 8, 4"),
        ("island.0.replicas=1", "island", "a sync needs at least 2 workers"),
        (
            "schedule.inner_stepz=3",
            "schedule.inner_stepz",
            "unknown key (did you mean 'inner_steps'?)",
        ),
        (
            "island.0.bandwith_gbps=3",
            "island.0.bandwith_gbps",
            "unknown key (did you mean 'bandwidth_gbps'?)",
        ),
        ("island.0.latency_ms=-5", "island.0.latency_ms", "must be >= 0"),
    ],
)
def test_rule_violations_name_key_and_rule(override, key, rule):
    with pytest.raises(ScenarioError) as caught:
        make_scenario([override])
    assert caught.value.key == key
    assert rule in caught.value.rule
    assert str(caught.value).startswith(f"test.toml: {key}: ")


def test_streaming_fragments_need_a_step_each_and_spread_as_evenly_as_whole_steps_allow():
    """H = 100, P = 16 (Streaming DiLoCo's 10B set-up: fragments of 3 of 48 layers): fragment p is
    due at floor((p + 1) * 100 / 16), 6 or 7 steps apart; P = 101 > H leaves a fragment no step."""
    scenario = make_scenario(
        ["schedule.algorithm=streaming", "schedule.fragments=16", "schedule.outer_steps=1"]
    )
    dues = [step.apply_step for step in SCHEDULES["streaming"].sync_steps(scenario.schedule)]
    assert dues == [(p + 1) * 100 // 16 for p in range(16)] and dues[0] == 6 and dues[-1] == 100
    assert {b - a for a, b in zip(dues, dues[1:])} == {6, 7}
    with pytest.raises(
        ScenarioError, match=r"schedule.fragments: must be at most inner_steps \(H=100\)"
    ):
        make_scenario(["schedule.algorithm=streaming", "schedule.fragments=101"])


def test_streaming_overlap_must_be_below_h_over_p():
    with pytest.raises(
        ScenarioError, match=r"schedule.overlap_steps: must be below inner_steps / fragments = 25"
    ):
        make_scenario(
            ["schedule.algorithm=streaming", "schedule.fragments=4", "schedule.overlap_steps=25"]
        )
    assert (
        make_scenario(
            ["schedule.algorithm=streaming", "schedule.fragments=4", "schedule.overlap_steps=24"]
        ).schedule.overlap_steps
        == 24
    )


def test_streaming_keys_are_ignored_by_diloco():
    scenario = make_scenario(["schedule.fragments=3", "schedule.overlap_steps=50"])
    assert scenario.schedule.algorithm == "diloco"


def test_missing_file_and_bad_toml(scenario_file):
    with pytest.raises(ScenarioError, match="no-such.toml: no such file or bundled scenario"):
        load("no-such.toml")
    with pytest.raises(ScenarioError, match="did you mean the bundled scenario 'worked-example'"):
        load("worked-exampel")
    with pytest.raises(ScenarioError, match="not valid TOML"):
        load(scenario_file("name = \n"))


def test_missing_sections_and_required_keys(scenario_file):
    with pytest.raises(ScenarioError, match=r": \[schedule\]: is required"):
        load(scenario_file('name = "x"\n[model]\nparameters = 1\n'))
    text = GOOD.replace("step_time_s = 2.0\n", "")
    with pytest.raises(ScenarioError, match=r"island.1.step_time_s: is required"):
        load(scenario_file(text))


def test_duplicate_island_names(scenario_file):
    with pytest.raises(
        ScenarioError,
        match=r"island.1.name: 'eu' names both island 0 and island 1: names must be unique",
    ):
        load(scenario_file(GOOD.replace('name = "us"', 'name = "eu"')))


def test_overrides_by_index_name_and_star(scenario_file):
    path = scenario_file(GOOD)
    assert load(path, ["island.1.bandwidth_gbps=5"]).islands[1].bandwidth_gbps == 5.0
    assert load(path, ["island.us.latency_ms=7"]).islands[1].latency_ms == 7.0
    both = load(path, ["island.*.bandwidth_gbps=0.5"])
    assert [island.bandwidth_gbps for island in both.islands] == [0.5, 0.5]
    assert load(path, ["schedule.algorithm=diloco"]).schedule.algorithm == "diloco"
    with pytest.raises(
        ScenarioError, match=r"island.7.bandwidth_gbps: no island 7: the scenario has 2"
    ):
        load(path, ["island.7.bandwidth_gbps=1"])
    with pytest.raises(ScenarioError, match=r"island.asia.latency_ms: no island named 'asia'"):
        load(path, ["island.asia.latency_ms=1"])
    with pytest.raises(ScenarioError, match="an override must look like key=value"):
        load(path, ["schedule.inner_steps"])


def test_cli_prints_one_line_and_exits_2(scenario_file, capsys):
    path = scenario_file(GOOD.replace("bandwidth_gbps = 10", "bandwidth_gbps = -10"))
    assert main(["simulate", str(path)]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"islands simulate: error: {path}: island.1.bandwidth_gbps: must be >= 1e-06 Gbit/s "
        "(see docs/limits.md) (got -10.0)\n"
    )


def test_cli_override_goes_through_the_same_validation(capsys):
    assert main(["simulate", "worked-example", "--set", "schedule.inner_steps=-1"]) == 2
    assert "schedule.inner_steps: must be >= 1 (got -1)" in capsys.readouterr().err


def test_installed_command_has_no_traceback(scenario_file):
    path = scenario_file(GOOD.replace("inner_steps = 100", "inner_steps = 0"))
    done = subprocess.run(
        [sys.executable, "-m", "islands.cli", "simulate", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().endswith("schedule.inner_steps: must be >= 1 (got 0)")
    assert len(done.stderr.strip().splitlines()) == 1
