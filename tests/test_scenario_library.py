"""The bundled scenarios load, cite their sources, and land where the reports they model say."""

from __future__ import annotations

from importlib import resources

import pytest

from islands.scenarios import bundled_names, load
from islands.simulator import simulate


@pytest.mark.parametrize("name", bundled_names())
def test_each_bundled_scenario_runs_and_documents_itself(name):
    text = (resources.files("islands.scenarios") / "library" / f"{name}.toml").read_text()
    assert text.startswith("#"), "each bundled scenario opens with a comment citing its numbers"
    summary = simulate(load(name)).summary
    assert 0 < summary["compute_utilisation"] <= 1
    assert summary["outer_steps"] == load(name).schedule.outer_steps


def test_intellect_1_lands_in_the_reported_band():
    scenario = load("intellect-1")
    assert scenario.regions == ("us", "europe", "asia") and len(scenario.backbones) == 3
    summary = simulate(scenario).summary
    assert 0.83 <= summary["compute_utilisation"] <= 0.96
    assert summary["leaves"] >= 1 and summary["joins"] >= 1
    assert summary["lost_compute_s"] > 0


def test_opendiloco_lands_in_the_reported_band():
    assert 0.90 <= simulate(load("opendiloco")).summary["compute_utilisation"] <= 0.95


def test_mixed_fleet_shows_the_straggler_cost_and_adaptive_h_recovers_it():
    waiting = simulate(load("mixed-fleet")).summary
    adaptive = simulate(load("mixed-fleet", ["schedule.barrier=adaptive"])).summary
    fast_waiting = next(island for island in waiting["islands"] if island["name"] == "h100-dc")
    fast_adaptive = next(island for island in adaptive["islands"] if island["name"] == "h100-dc")
    assert fast_waiting["compute_utilisation"] < 0.5
    assert fast_adaptive["compute_utilisation"] > 0.9
    assert fast_adaptive["tokens"] > 2 * fast_waiting["tokens"]
