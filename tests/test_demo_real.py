"""`islands demo` end to end with its real run: in-process shaping everywhere, kernel htb between
network namespaces where this machine allows it (root, iproute2); about 30 s each on 2 cores."""

from __future__ import annotations

import json
import subprocess

import pytest

from islands.cli import main
from islands.emulation import available
from islands.validation import demo

KERNEL_OK, WHY_NOT = available()
# one sync of 2 GB moves in 32 s at 0.5 Gbit/s, against 100 s of compute: utilisation about 76%
SMALL = (
    'name = "small"\n[model]\nparameters = 1e9\n[schedule]\nalgorithm = "diloco"\ninner_steps = 100\n'
    'outer_steps = 2\n[[island]]\nname = "a"\nreplicas = 2\nstep_time_s = 1.0\nbandwidth_gbps = 0.5\n'
)
# the demo's own target is 5%; other jobs share this machine's two cores, so the test allows 10%
TOLERANCE = 0.10
PATHS = [
    pytest.param(["--in-process"], "in-process", id="in-process"),
    pytest.param(
        [],
        "kernel-htb-fq-cubic",
        id="kernel-htb-fq-cubic",
        marks=pytest.mark.skipif(
            not KERNEL_OK, reason=f"kernel WAN emulation unavailable: {WHY_NOT}"
        ),
    ),
]


@pytest.mark.parametrize("flags, mode", PATHS)
def test_the_demo_s_real_run_matches_its_calibrated_prediction(
    flags, mode, tmp_path, scenario_file, capsys
):
    out_dir = tmp_path / "out"
    assert main(["demo", str(scenario_file(SMALL)), *flags, "--out", str(out_dir)]) == 0
    printed = capsys.readouterr().out
    run_dir = out_dir / "real-run"
    document = json.loads((run_dir / "validation.json").read_text())
    errors = {f["name"]: f["error"] for f in document["figures"]}
    for name in demo.TARGET_FIGURES:
        assert abs(errors[name]) < TOLERANCE, (name, document["figures"])
    assert f"calibration ({mode})" in printed and "of measured" in printed
    calibration = json.loads((run_dir / "calibration.json").read_text())
    assert calibration["mode"] == mode
    islands = document["scaled_scenario"]["island"]
    rate_bits_per_s = min(min(i["upload_gbps"], i["download_gbps"]) for i in islands) * 1e9
    assert list(calibration["exchange_ratio"]) == ["2"]  # the run's M only, at the run's rate only
    assert [float(r) for r in calibration["exchange_ratio"]["2"]] == [rate_bits_per_s]
    assert (errors["bytes per worker (interface)"] is None) == (mode == "in-process")
    if KERNEL_OK:
        namespaces = subprocess.run(
            ["ip", "netns", "list"], capture_output=True, text=True, check=True
        ).stdout
        assert "isdemo" not in namespaces
