"""Two regions joined by a backbone, as the region and network tests build them."""

from __future__ import annotations

import copy


def document(regions: list[str], backbones: list[dict], **network) -> dict:
    """One worker per entry of ``regions``, 1 Gbit/s access links with 10 ms of latency."""
    return {
        "name": "regions",
        "model": {"parameters": 1e9, "bytes_per_param": 2},
        "schedule": {"algorithm": "diloco", "inner_steps": 100, "outer_steps": 2},
        "network": network,
        "region": [{"name": name} for name in dict.fromkeys(regions)],
        "backbone": copy.deepcopy(backbones),
        "island": [
            {
                "name": f"w{i}",
                "step_time_s": 1.0,
                "bandwidth_gbps": 1.0,
                "latency_ms": 10,
                "region": r,
            }
            for i, r in enumerate(regions)
        ],
    }


US_EU = [{"between": ["us", "eu"], "bandwidth_gbps": 0.5, "latency_ms": 40}]
