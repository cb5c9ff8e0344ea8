"""Small scenarios built in code, so each test states its numbers."""

from __future__ import annotations

import copy
from typing import Any

from islands.scenarios import Scenario, from_dict

BASE_DOCUMENT: dict[str, Any] = {
    "name": "test",
    "model": {"parameters": 1e9, "bytes_per_param": 2},
    "schedule": {"algorithm": "diloco", "inner_steps": 100, "outer_steps": 3},
    "island": [{"name": "a", "replicas": 4, "step_time_s": 1.0, "bandwidth_gbps": 1.0}],
}
# the same scenario as a file's text
SCENARIO = """name = "test"
[model]
parameters = 1e9
bytes_per_param = 2
[schedule]
algorithm = "diloco"
inner_steps = 100
outer_steps = 3
[[island]]
name = "a"
replicas = 4
step_time_s = 1.0
bandwidth_gbps = 1.0
"""


def make_scenario(
    overrides: list[str] | None = None, document: dict[str, Any] | None = None
) -> Scenario:
    """BASE_DOCUMENT (or ``document``) with ``--set``-style overrides applied."""
    return from_dict(copy.deepcopy(document or BASE_DOCUMENT), "test.toml", overrides or [])
