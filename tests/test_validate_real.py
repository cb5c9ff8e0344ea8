"""The short validation suite: real scaled runs over the kernel-emulated WAN against the simulator.

Skipped where network namespaces are unavailable (not root, no iproute2): the in-process fallback
would measure only what the trainer declares, which is not what this test checks.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from islands.emulation import available
from islands.validation import suite
from islands.validation.calibration import measure
from islands.validation.scaling import ScaleOptions

KERNEL_OK, WHY_NOT = available()
pytestmark = pytest.mark.skipif(
    not KERNEL_OK, reason=f"kernel WAN emulation unavailable: {WHY_NOT}"
)
QUICK_STEP_S = 0.1  # the model's real work per step is about 30 ms


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    out_dir = tmp_path_factory.mktemp("validate")
    calibration = measure(2, kernel=True)
    cases = suite.select(quick=True)
    options = ScaleOptions(step_time_s=QUICK_STEP_S, target_wall_s=QUICK_STEP_S * 30)
    return (
        out_dir,
        calibration,
        suite.run_suite(
            cases, options, calibration, out_dir, kernel=True, progress=lambda _line: None
        ),
    )


def test_calibration_is_physical(results):
    _, calibration, _ = results
    assert (
        0.90 < calibration.link_ratio < 1.1
    )  # headers (1448 payload bytes per 1514-byte frame), tbf burst
    assert all(0.2 < ratio < 1 for ratio in calibration.exchange_ratio[2].values())
    assert 0 < calibration.overhead_s[2] < 0.1


def test_quick_cases_are_within_ten_percent_on_wall_time_and_utilisation(results):
    _, _, comparisons = results
    for case, comparison in comparisons:
        for column in suite.ERROR_COLUMNS:
            assert abs(comparison.error(column)) < suite.TARGET_WORST, (
                case.name,
                column,
                comparison.figures,
            )


def test_bytes_on_the_interfaces_match_the_prediction(results):
    _, _, comparisons = results
    for _, comparison in comparisons:
        assert (
            abs(comparison.error("bytes per worker (trainer)")) < 1e-9
        )  # the exchange's own bookkeeping
        assert (
            0 <= -comparison.error("bytes per worker (interface)") < 0.15
        )  # headers, retransmissions


def test_outputs_are_written_and_namespaces_removed(results):
    out_dir, _, comparisons = results
    for case, _ in comparisons:
        document = json.loads((out_dir / case.name / "validation.json").read_text())
        assert document["compute"] == "paced"
        assert (out_dir / case.name / "overlay.png").read_bytes()[:4] == b"\x89PNG"
    namespaces = subprocess.run(
        ["ip", "netns", "list"], capture_output=True, text=True, check=True
    ).stdout
    assert "isv" not in namespaces
