"""The sample logs of other stacks (tests/data/) and the scenario they are compared against."""

from __future__ import annotations

from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / "data"
SCENARIO = """name = "test"
[model]
parameters = 1e9
bytes_per_param = 2
[schedule]
algorithm = "diloco"
inner_steps = 4
outer_steps = 3
[[island]]
name = "a"
replicas = 2
step_time_s = 1.0
bandwidth_gbps = 1.0
"""
