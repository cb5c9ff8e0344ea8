"""Fleets of identical replicas in regions, as the replica and lockstep tests build them."""

from __future__ import annotations

GBPS = 1e9 / 8  # bytes per second in one Gbit/s


def fleet(islands: list[dict], **sections) -> dict:
    return {
        "name": "fleet",
        "model": {"parameters": 1e8, "bytes_per_param": 2},
        "schedule": {
            "algorithm": "diloco",
            "inner_steps": 20,
            "outer_steps": 4,
            "fragments": 2,
            "overlap_steps": 2,
        },
        "island": islands,
        **sections,
    }


TWO_KINDS = [
    {"name": "dc", "replicas": 3, "step_time_s": 0.5, "bandwidth_gbps": 1.0, "latency_ms": 5},
    {
        "name": "lab",
        "replicas": 5,
        "step_time_s": 0.8,
        "upload_gbps": 0.2,
        "download_gbps": 0.5,
        "latency_ms": 20,
    },
]
REGIONS = {
    "region": [{"name": "us"}, {"name": "eu"}],
    "backbone": [{"between": ["us", "eu"], "bandwidth_gbps": 0.3, "latency_ms": 40}],
}
