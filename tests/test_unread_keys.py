"""Keys that do nothing are refused in one line (``scenarios/unread.py``), as ``schedule.quorum`` is;
names are unique across islands and replicas, and never empty (``loader.check_names``)."""

from __future__ import annotations

import copy

import pytest
from helpers.scenarios import BASE_DOCUMENT, make_scenario

from islands.scenarios import ScenarioError
from islands.scenarios.source import ScenarioSource
from islands.schedules import switch_to


def refusal(overrides: list[str], document: dict | None = None) -> ScenarioError:
    with pytest.raises(ScenarioError) as caught:
        make_scenario(overrides, document)
    assert "\n" not in str(caught.value)
    return caught.value


def with_islands(*islands: dict) -> dict:
    document = copy.deepcopy(BASE_DOCUMENT)
    document["island"] = [
        {"step_time_s": 1.0, "bandwidth_gbps": 1.0, **island} for island in islands
    ]
    return document


def test_mttr_without_mtbf_is_refused():
    error = refusal(["island.0.mttr_s=3600"])
    assert error.key == "island.0.mttr_s" and error.rule.startswith(
        "has no effect without mtbf_s: workers"
    )
    assert (
        make_scenario(["island.0.mttr_s=3600", "island.0.mtbf_s=86400"]).islands[0].mttr_s == 3600
    )


def test_recovery_without_chip_failures_is_refused():
    error = refusal(["island.0.recovery_s=60"])
    assert error.key == "island.0.recovery_s" and error.rule.startswith(
        "has no effect without chip_mtbf_s: workers"
    )
    assert (
        make_scenario(["island.0.recovery_s=60", "island.0.chip_mtbf_s=1e6"]).islands[0].recovery_s
        == 60
    )


def test_chips_without_chip_failures_is_read_by_goodput():
    """``chips`` weighs each worker in goodput and counts the fleet's chips in the summary."""
    assert make_scenario(["island.0.chips=8"]).chips == 4 * 8


def test_a_deadline_slack_under_another_barrier_is_refused():
    error = refusal(["schedule.deadline_slack=0.5"])
    assert error.key == "schedule.deadline_slack"
    assert error.rule.startswith(
        '0.5 has no effect under barrier = "wait": only the "deadline" barrier'
    )
    assert (
        refusal(["schedule.barrier=adaptive", "schedule.deadline_slack=0"]).key
        == "schedule.deadline_slack"
    )
    deadline = make_scenario(["schedule.barrier=deadline", "schedule.deadline_slack=0.5"])
    assert deadline.schedule.deadline_slack == 0.5


@pytest.mark.parametrize("override", ["syncer.latency_ms=5", "syncer.bandwidth_gbps=10"])
@pytest.mark.parametrize("algorithm", ["ddp", "diloco", "streaming", "eager"])
def test_a_syncer_under_a_coupled_schedule_is_refused(override, algorithm):
    overrides = [f"schedule.algorithm={algorithm}", "model.layers=4", override]
    error = refusal(overrides)
    assert error.key == override.split("=")[0]
    assert error.rule.startswith(f'has no effect: algorithm = "{algorithm}" has no syncer')


def test_switching_a_decoupled_scenario_to_a_coupled_schedule_drops_its_syncer():
    decoupled = ["schedule.algorithm=decoupled", "syncer.latency_ms=5", "syncer.bandwidth_gbps=10"]
    assert make_scenario(decoupled).syncer.latency_ms == 5
    assert make_scenario([*decoupled, *switch_to("ddp")]).syncer.bandwidth_gbps is None
    variants = ScenarioSource.read("decoupled-fleet").schedules()
    assert {"ddp", "diloco", "decoupled"} <= set(variants.scenarios)


def test_an_absent_island_nothing_brings_in_is_refused():
    document = with_islands({"name": "a", "replicas": 2}, {"name": "late", "present": False})
    error = refusal([], document)
    assert error.key == "island.1.present"
    assert error.rule.startswith("false, and nothing ever brings worker 'late' in")
    document["event"] = [{"at_s": 10.0, "island": "late", "kind": "join"}]
    assert not make_scenario([], document).islands[1].present
    returns = with_islands(
        {"name": "a", "replicas": 2},
        {"name": "late", "present": False, "mtbf_s": 100.0, "mttr_s": 10.0},
    )
    assert make_scenario([], returns).islands[1].mttr_s == 10.0


def test_each_absent_replica_must_be_brought_in():
    document = with_islands(
        {"name": "a", "replicas": 2}, {"name": "late", "replicas": 2, "present": False}
    )
    document["event"] = [{"at_s": 10.0, "island": "late-0", "kind": "join"}]
    error = refusal([], document)
    assert error.key == "island.1.present"
    assert error.rule.startswith("false, and nothing ever brings worker 'late-1' in")


def test_an_island_named_as_another_islands_replica_is_refused():
    """Island ``a`` of 2 replicas names them a-0 and a-1 (``Scenario.workers``): an island ``a-1``
    beside it would be two workers of one name, and an event on ``a-1`` would move both."""
    names = [
        worker.name
        for worker in make_scenario(
            [], with_islands({"name": "a", "replicas": 2}, {"name": "b"})
        ).workers()
    ]
    assert names == ["a-0", "a-1", "b"]
    error = refusal([], with_islands({"name": "a", "replicas": 2}, {"name": "a-1"}))
    assert error.key == "island.1.name"
    assert error.rule.startswith(
        "'a-1' names both a replica of island 0 ('a') and island 1: names must be unique"
    )
    first = refusal([], with_islands({"name": "a-1"}, {"name": "a", "replicas": 2}))
    assert first.key == "island.1.name"
    assert first.rule.startswith(
        "'a-1' names both island 0 and a replica of island 1 ('a'): names must"
    )
    twice = refusal([], with_islands({"name": "a"}, {"name": "a"}))
    assert twice.rule.startswith("'a' names both island 0 and island 1")


@pytest.mark.parametrize("name", ["", "  "])
def test_empty_island_and_region_names_are_refused(name):
    assert refusal([f'island.0.name="{name}"']).rule == f"must not be empty (got {name!r})"
    document = copy.deepcopy(BASE_DOCUMENT)
    document["region"] = [{"name": name}]
    document["island"][0]["region"] = name
    error = refusal([], document)
    assert (error.key, error.rule) == ("region.0.name", f"must not be empty (got {name!r})")
