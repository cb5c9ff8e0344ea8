"""Real elastic runs with islands killed and joining, and the files they write."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from helpers.multiprocess import TINY

RUN_TIMEOUT_S = 150
PERIODS = 6
SCENARIO = f"""
name = "churn"
[model]
parameters = 1e5
[schedule]
algorithm = "diloco"
inner_steps = 10
outer_steps = {PERIODS}
bits = 16
[network]
detection_timeout_s = 1.0
[[island]]
name = "a"
replicas = 3
step_time_s = 0.05
bandwidth_gbps = 1.0
"""
SETS = [
    *TINY,
    "trainer.pace_step_time_s=0.05",
    "trainer.collective_timeout_s=5",
    "trainer.elastic=true",
]
LATE_JOINER = """
[[island]]
name = "late"
present = false
step_time_s = 0.05
bandwidth_gbps = 1.0
[[event]]
at_s = 1.7
island = "late"
kind = "join"
[[event]]
at_s = 1.2
island = "a-1"
kind = "leave"
"""


def train(tmp_path, text, *options, kill_at=None, sets=SETS, expect_ok=True):
    scenario = tmp_path / "churn.toml"
    scenario.write_text(text)
    command = [
        sys.executable,
        "-m",
        "islands.cli",
        "train",
        str(scenario),
        "--out",
        str(tmp_path / "run"),
    ]
    for override in sets:
        command += ["--set", override]
    env = {**os.environ, **({"ISLANDS_KILL_AT": kill_at} if kill_at else {})}
    done = subprocess.run(
        command + list(options), capture_output=True, text=True, timeout=RUN_TIMEOUT_S, env=env
    )
    assert (done.returncode == 0) == expect_ok, done.stdout[-2000:] + done.stderr[-3000:]
    return done.stdout


def outputs(run):
    return (
        json.loads((run / "summary.json").read_text()),
        json.loads((run / "churn.json").read_text()),
        (run / "trace.csv").read_text().splitlines()[1:],
    )
