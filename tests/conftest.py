"""Shared test helpers: small scenarios built in code, so each test states its numbers."""

from __future__ import annotations

import copy
import os
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

from islands.scenarios import Scenario, from_dict

BASE_DOCUMENT: dict[str, Any] = {
    "name": "test",
    "model": {"parameters": 1e9, "bytes_per_param": 2},
    "schedule": {"algorithm": "diloco", "inner_steps": 100, "outer_steps": 3},
    "island": [{"name": "a", "replicas": 4, "step_time_s": 1.0, "bandwidth_gbps": 1.0}],
}


def make_scenario(overrides: list[str] | None = None, document: dict[str, Any] | None = None) -> Scenario:
    """BASE_DOCUMENT (or ``document``) with ``--set``-style overrides applied."""
    return from_dict(copy.deepcopy(document or BASE_DOCUMENT), "test.toml", overrides or [])


@pytest.fixture
def scenario_file(tmp_path):
    """Write TOML text to a file and return its path."""
    def write(text: str, name: str = "scenario.toml"):
        path = tmp_path / name
        path.write_text(text)
        return path
    return write


# Hypothesis profiles for the property tests (test_properties*.py): "ci", the default, is what `make
# test` runs: few examples, derandomized so every run draws the same ones; "fuzz" is `make fuzz`:
# thousands of random examples per property. HYPOTHESIS_PROFILE picks one.
settings.register_profile("ci", max_examples=25, derandomize=True, deadline=None, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.register_profile("fuzz", max_examples=2000, deadline=None, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
