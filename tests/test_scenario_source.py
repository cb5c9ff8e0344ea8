"""The one door every command reads a scenario through: validated once when read, again only after a change."""

from __future__ import annotations

import pytest

import islands.scenarios.source as source_module
from islands.scenarios import ScenarioError, ScenarioSource, load


@pytest.fixture
def validations(monkeypatch) -> list[str]:
    """The source of every scenario ``ScenarioSource`` validates from here on."""
    seen: list[str] = []
    validate = source_module.from_dict

    def counted(document, source="<scenario>", overrides=()):
        seen.append(source)
        return validate(document, source, overrides)

    monkeypatch.setattr(source_module, "from_dict", counted)
    return seen


def test_reading_validates_once_and_gives_what_load_gives(validations):
    source = ScenarioSource.read("worked-example", ["schedule.inner_steps=100"])
    first, second = source.scenario, source.scenario
    assert validations == ["worked-example"]  # read validated it; .scenario did not again
    assert first is second
    assert first == load("worked-example", ["schedule.inner_steps=100"])


def test_a_change_is_validated_again(validations):
    source = ScenarioSource.read("worked-example")
    assert source.scenario.schedule.inner_steps == 500
    changed = source.with_overrides("schedule.inner_steps=100")
    assert changed.scenario.schedule.inner_steps == 100
    assert source.scenario.schedule.inner_steps == 500  # the original keeps its own
    assert len(validations) == 2
    assert source.with_overrides().scenario is source.scenario  # no override, no change


def test_symmetric_links_are_validated_from_the_new_document():
    source = ScenarioSource.read("home-lab")
    assert [(i.upload_gbps, i.download_gbps) for i in source.scenario.islands] == [
        (0.1, 1.0),
        (0.02, 0.1),
    ]
    symmetric = source.with_symmetric_links().scenario
    assert [island.bandwidth_gbps for island in symmetric.islands] == [
        0.1,
        0.02,
    ]  # each link's slower way
    assert all(
        island.upload_gbps == island.download_gbps == island.bandwidth_gbps
        for island in symmetric.islands
    )


def test_a_decoupled_quorum_goes_back_to_one_on_the_schedules_that_sync_everyone():
    """The loader refuses a quorum above 1 on a coupled schedule (it would do nothing); comparing a
    Decoupled scenario with the other schedules runs those at quorum 1 and keeps Decoupled's."""
    source = ScenarioSource.read("decoupled-fleet", ["schedule.quorum=2"])
    variants = (
        source.schedules()
    )  # Streaming refuses its 24 fragments of one step each, not the quorum
    assert list(variants.refused) == ["streaming"]
    assert {name: scenario.schedule.quorum for name, scenario in variants.scenarios.items()} == {
        "ddp": 1,
        "diloco": 1,
        "eager": 1,
        "decoupled": 2,
    }
    with pytest.raises(ScenarioError, match=r'schedule.quorum: 2 has no effect: algorithm = "ddp"'):
        source.variant("schedule.algorithm=ddp")


def test_a_compared_syncer_is_placed_where_most_workers_are_and_said_so():
    # intellect-1 declares three regions and a coupled schedule: us holds 8 workers, europe 4 + 1, asia 2
    variants = ScenarioSource.read("intellect-1").schedules()
    assert variants.scenarios["decoupled"].syncer.region == "us"
    assert variants.syncer_regions == {"decoupled": "us"}
    assert variants.notes() == [
        "Decoupled DiLoCo: its syncer placed in region 'us', where most workers are (the scenario gives no "
        "syncer.region)"
    ]
    given = ScenarioSource.read(
        "intellect-1", ["schedule.algorithm=decoupled", "syncer.region=asia"]
    ).schedules()
    assert given.scenarios["decoupled"].syncer.region == "asia" and given.syncer_regions == {}


def test_the_syncer_goes_to_the_first_region_by_name_among_equals_whatever_the_tables_order(
    scenario_file,
):
    document = """
name = "two-regions"
[model]
parameters = 1e9
[schedule]
algorithm = "diloco"
outer_steps = 2
inner_steps = 10
[[region]]
name = "west"
[[region]]
name = "east"
[[backbone]]
between = ["west", "east"]
bandwidth_gbps = 10
[[island]]
name = "e"
region = "east"
step_time_s = 1.0
bandwidth_gbps = 1.0
[[island]]
name = "w"
region = "west"
step_time_s = 1.0
bandwidth_gbps = 1.0
"""
    variants = ScenarioSource.read(scenario_file(document)).schedules()
    # one worker each: east comes first by name, though west is declared first
    assert variants.syncer_regions == {"decoupled": "east"}
