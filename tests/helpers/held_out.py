"""Issue 44's held-out GPU runs as a closed-form fleet: 30.8M fp32 parameters over 4 workers at
50 Mbit/s, 1 ms one way each; a sync's ring latency is 2(M - 1) hops of 2 ms."""

from __future__ import annotations

PARAMETERS = 30.8e6
S = PARAMETERS * 4  # 123.2 MB on the wire
M = 4
RATE = 50e6 / 8  # bytes/s
HOP_S = 0.002  # sender's 1 ms + receiver's 1 ms
BASE = [
    f"model.parameters={PARAMETERS}",
    "model.bytes_per_param=4",
    "island.0.bandwidth_gbps=0.05",
    "island.0.latency_ms=1",
    "schedule.inner_steps=8",
    "schedule.outer_steps=5",
    "island.0.step_time_s=0.3",
]
