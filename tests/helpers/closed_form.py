"""The closed-form simulator tests' fleet: one island of M workers, H inner steps, S bytes a model
and the ring's time."""

from __future__ import annotations

import copy

from helpers.scenarios import BASE_DOCUMENT

# BASE: 1e9 params, bf16 -> S = 2e9 B; 4 workers at 1 Gbit/s; 1 s per step; H = 100; 3 outer steps.
S = 2e9
M = 4
H = 100
OUTER = 3
BYTES_PER_S = 1e9 / 8
RING_S = 2 * (M - 1) / M * S / BYTES_PER_S  # 24 s


def with_islands(*islands: dict, **schedule) -> dict:
    document = copy.deepcopy(BASE_DOCUMENT)
    document["island"] = list(islands)
    document["schedule"].update(schedule)
    return document


def island(
    name: str,
    replicas: int = 1,
    step_time_s: float = 1.0,
    bandwidth_gbps: float = 1.0,
    latency_ms: float = 0.0,
) -> dict:
    return {
        "name": name,
        "replicas": replicas,
        "step_time_s": step_time_s,
        "bandwidth_gbps": bandwidth_gbps,
        "latency_ms": latency_ms,
    }
