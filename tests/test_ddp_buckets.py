"""DDP's buckets during the backward pass, priced call by call (``schedules/buckets.py``,
``collectives.bucket_wait``): each call waits for its bucket from every member, so the collective (its
comm row, its sync) ends with the last call, and every member waits for it from its own compute's end.
Both players give the same numbers."""

import numpy as np
import pytest

from islands.scenarios import from_dict
from islands.simulator import simulate
from islands.simulator.network.collectives import upper_envelope

# 2.5 MiB of fp32 gradient (655,360 values) in 1 MiB buckets: 1 MiB, 1 MiB, 0.5 MiB. Two islands of one
# worker at 1 Gbit/s, no latency, 1 ms a call: a ring of M = 2 sends 2 (M - 1) / M x S = S per worker,
# so a call takes 1 ms + its bucket's bytes / 1.25e8 B/s: 9.389 ms, 9.389 ms, 5.194 ms.
HETEROGENEOUS = {
    "name": "b",
    "model": {"parameters": 655_360, "bytes_per_param": 4},
    "schedule": {"algorithm": "ddp", "outer_steps": 3, "bits": 32, "backward_overlap": 0.6},
    "exchange": {"calls": "buckets", "bucket_cap_mb": 1, "call_overhead_s": 0.001},
    "island": [
        {"name": "a", "step_time_s": 0.3, "bandwidth_gbps": 1, "latency_ms": 0},
        {"name": "b", "step_time_s": 0.5, "bandwidth_gbps": 1, "latency_ms": 0},
    ],
}
LAST_CALL_S = 0.001 + 2**19 / 1.25e8  # 0.5 MiB: 5.194304 ms


@pytest.mark.parametrize("player", [None, "events"])
def test_the_last_bucket_of_the_slowest_member_ends_every_members_exchange(player):
    # a reaches the launch at 0.4 x 0.3 = 0.12 s and ends its compute at 0.3 s; b at 0.2 s and 0.5 s.
    # The ring starts with b at 0.2 s; its buckets are ready at 0.2, 0.35 and 0.5 s (b's window, the
    # later at every bucket), the calls back to back from 0.2 s would end at 0.224 s: the last call
    # ends at 0.5 s + 5.194 ms. Both wait for it from their own compute's end; every step alike.
    result = simulate(from_dict(HETEROGENEOUS, "t.toml"), player=player)
    summary = result.summary
    end_s = 0.5 + LAST_CALL_S
    assert summary["mean_sync_s"] == pytest.approx(end_s - 0.2, rel=1e-12)
    assert summary["wall_time_s"] == pytest.approx(3 * end_s, rel=1e-12)
    a, b = summary["islands"]
    assert a["stall_s"] == pytest.approx(3 * (end_s - 0.3), rel=1e-12)
    assert b["stall_s"] == pytest.approx(3 * LAST_CALL_S, rel=1e-12)
    comms = result.trace[result.trace["kind"] == "comm"]
    assert np.allclose(comms["time_end_s"] - comms["time_start_s"], end_s - 0.2, rtol=1e-12)


def test_the_players_give_the_same_bits_for_buckets_of_unequal_members():
    scenario = from_dict(
        HETEROGENEOUS, "t.toml", ["island.0.jitter_cv=0.2", "island.1.jitter_cv=0.1"]
    )
    lockstep, events = simulate(scenario), simulate(scenario, player="events")
    assert lockstep.summary["player"] == "lockstep"
    drop = ("events", "player")
    assert {k: v for k, v in lockstep.summary.items() if k not in drop} == {
        k: v for k, v in events.summary.items() if k not in drop
    }


def test_the_envelope_is_the_highest_line_everywhere():
    # lines x s + T: (0.25, 3), (0.5, 2), (0.75, 1.5), (1, 0.5). The first is highest up to s = 3,
    # where the third meets it (3.75) above the second (3.5); the third up to 4, then the fourth
    lines = [(0.25, 3.0), (0.5, 2.0), (0.75, 1.5), (1.0, 0.5)]
    wait = upper_envelope(lines)
    spans = np.linspace(0, 10, 101)
    expected = np.max([slope * spans + intercept for slope, intercept in lines], axis=0)
    for span, value in zip(spans, expected):
        assert wait.end_s(0.0, np.array([0.0]), np.array([span])) == pytest.approx(value)
    assert wait.slopes.tolist() == [0.25, 0.75, 1.0]
    assert wait.crossings.tolist() == pytest.approx([3.0, 4.0])
