"""The demo's real run is one validation case: its scaling, its small calibration, its verdict, and
what `islands demo` prints and writes around it (the run itself replaced by fakes here; the real
runs are in test_demo_real.py)."""

from __future__ import annotations

import json

import pytest
from helpers.scenarios import make_scenario

from islands.cli import main
from islands.errors import UserError
from islands.scenarios import load
from islands.validation import demo
from islands.validation.calibration import Calibration, simulator_overrides
from islands.validation.compare import Comparison, figures

CALIBRATION = Calibration("in-process", "test", 1.0, (), {2: 0.004}, {2: {27.36e6: 0.9}}, {2: 1e-8})
SMALL = (
    'name = "small"\n[model]\nparameters = 1e9\n[schedule]\nalgorithm = "diloco"\ninner_steps = 100\n'
    'outer_steps = 2\n[[island]]\nname = "a"\nreplicas = 2\nstep_time_s = 1.0\nbandwidth_gbps = 1.0\n'
)


def summary(wall_s: float, utilisation: float) -> dict:
    return {
        "wall_time_s": wall_s,
        "compute_utilisation": utilisation,
        "stall_s": 1.0,
        "idle_s": 0.0,
        "bytes_per_worker": 1e7,
        "mean_sync_s": 0.5,
    }


def comparison_of(predicted: dict, measured: dict) -> Comparison:
    return Comparison("test", figures(predicted, measured, None), [], ["WAN: fake"])


def test_the_demo_scales_to_two_islands_and_calibrates_only_them_at_their_slowest_rate(monkeypatch):
    calls = []
    monkeypatch.setattr(
        demo, "measure", lambda *args, **kwargs: calls.append((args, kwargs)) or CALIBRATION
    )
    case = demo.demo_case(load("worked-example"))
    assert demo.islands_of(case) == 2 and case.document["schedule"]["algorithm"] == "diloco"
    assert demo.calibrate_for(case, False) is CALIBRATION
    [(args, kwargs)] = calls
    assert args == (2, False, (case.document["island"][0]["upload_gbps"] * 1e9,))
    assert kwargs == {
        "min_islands": 2,
        "stem": "isdemo",
        "wire_bits": (case.scenario().schedule.bits,),
    }


def test_the_slowest_rate_is_the_slowest_direction_of_any_island():
    scenario = make_scenario(
        document={
            "name": "asymmetric",
            "model": {"parameters": 1e9},
            "schedule": {"algorithm": "diloco", "inner_steps": 100, "outer_steps": 3},
            "island": [
                {"name": "a", "step_time_s": 1.0, "upload_gbps": 0.2, "download_gbps": 1.0},
                {"name": "b", "step_time_s": 1.0, "upload_gbps": 1.0, "download_gbps": 0.5},
            ],
        }
    )
    case = demo.demo_case(scenario)
    a, b = case.document["island"]
    assert a["upload_gbps"] < b["download_gbps"] < a["download_gbps"]
    assert case.slowest_bits_per_s == a["upload_gbps"] * 1e9


def test_a_calibration_at_one_rate_gives_the_simulator_that_rate_s_ratio():
    islands = [{"upload_gbps": 0.02736, "download_gbps": 0.02736, "latency_ms": 0.0}] * 2
    overrides = simulator_overrides(CALIBRATION, islands)
    assert f"island.0.upload_gbps={0.02736 * 0.9!r}" in overrides
    assert f"island.1.download_gbps={0.02736 * 0.9!r}" in overrides


def test_a_calibration_names_the_islands_it_covers():
    partial = Calibration("in-process", "test", 1.0, (), {3: 0.01}, {3: {1e7: 0.9}}, {3: 1e-8})
    with pytest.raises(UserError, match="the calibration covers 3 islands, not 2"):
        partial.check_covers(2)


@pytest.mark.parametrize(
    "measured, expected",
    [
        (summary(10.0, 0.70), "wall time +2.0%, compute utilisation -2.9%: within 5% of measured"),
        (
            summary(9.0, 0.70),
            "wall time +13.3%, compute utilisation -2.9%: NOT within 5% of measured",
        ),
    ],
)
def test_the_verdict_holds_wall_time_and_utilisation_to_five_percent(measured, expected):
    assert demo.verdict(comparison_of(summary(10.2, 0.68), measured)) == expected


def test_demo_prints_the_calibration_the_comparison_and_the_verdict(
    tmp_path, scenario_file, monkeypatch, capsys
):
    runs = []

    def fake_validate(name, case, paced, calibration, out_dir, kernel, stem):
        runs.append((name, demo.islands_of(case), paced, calibration, kernel, stem))
        return comparison_of(summary(10.2, 0.68), summary(10.0, 0.70))

    monkeypatch.setattr(
        demo, "calibrate_for", lambda case, kernel: runs.append(kernel) or CALIBRATION
    )
    monkeypatch.setattr("islands.validation.case.validate_scaled", fake_validate)
    out_dir = tmp_path / "out"
    assert main(["demo", str(scenario_file(SMALL)), "--in-process", "--out", str(out_dir)]) == 0
    assert runs == [False, ("small", 2, True, CALIBRATION, False, "isdemo")]
    lines = capsys.readouterr().out.splitlines()
    start = lines.index(
        "A short real run of small, scaled down, over emulated WAN links, beside its prediction:"
    )
    rate_mbit_s = demo.demo_case(load(str(scenario_file(SMALL)))).slowest_bits_per_s / 1e6
    assert (
        lines[start + 1]
        == f"calibrating: the trainer's exchange among 2 islands at {rate_mbit_s:.3g} Mbit/s ..."
    )
    assert lines[start + 2].startswith("calibration (in-process): no TCP probe")
    assert lines[start + 3].startswith("training: diloco, 2 islands, H = 20, ")
    assert "wall time +2.0%, compute utilisation -2.9%: within 5% of measured" in lines
    assert "WAN: fake" in lines
    written = json.loads((out_dir / "real-run" / "calibration.json").read_text())
    assert written["exchange_ratio"] == {"2": {"27360000.0": 0.9}}
