"""pytest's settings for every test: the fixtures below and the hypothesis profiles. What test files
share is in tests/helpers/."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings


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
settings.register_profile(
    "ci",
    max_examples=25,
    derandomize=True,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "fuzz",
    max_examples=2000,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
