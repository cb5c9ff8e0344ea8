"""The multi-stream model against PCCL's published curve of all-reduce bandwidth by connection count
(arXiv:2505.14065, section 6.2: six western-European peers, 1 GiB each): the bundled scenario, by
hand and by simulation, within 25% of every published point."""

from __future__ import annotations

import pytest

from islands.scenarios import load
from islands.simulator import simulate

PUBLISHED_GBPS = {8: 11.25, 16: 18.17, 32: 34.29, 64: 44.47, 100: 44.55, 128: 45.74}
M, S = 6, 2.0**30  # six peers, 2^28 fp32 values: 1 GiB each
HOP_S, RTT_S = 0.005, 0.010  # 2.5 ms to the core from each peer
WINDOW, NIC = 800e3, 25e9 / 8  # bytes per connection per round trip; bytes per second each way


def utilisation_gbps(streams: int) -> float:
    """What PCCL reports: bytes sent plus received per peer per second of the ring all-reduce."""
    volume = 2 * (M - 1) / M * S
    seconds = 2 * (M - 1) * HOP_S + volume / min(streams * WINDOW / RTT_S, NIC)
    return 2 * volume * 8 / seconds / 1e9


@pytest.mark.parametrize("streams", PUBLISHED_GBPS)
def test_the_pccl_scenario_gives_its_closed_form_within_25_percent_of_the_published_curve(streams):
    summary = simulate(load("pccl-europe-west", [f"network.streams={streams}"])).summary
    bytes_per_sync = summary["bytes_per_worker"] / summary["syncs"]
    simulated = 2 * bytes_per_sync * 8 / summary["mean_sync_s"] / 1e9
    assert simulated == pytest.approx(utilisation_gbps(streams), rel=1e-9)
    assert abs(simulated / PUBLISHED_GBPS[streams] - 1) < 0.25


def test_the_curve_rises_with_the_streams_until_the_nic_caps_it():
    assert utilisation_gbps(8) == pytest.approx(10.06, abs=0.01)  # 8 x 0.64 Gbit/s each way
    assert utilisation_gbps(64) == pytest.approx(utilisation_gbps(128))  # both at the 25 Gbit/s NIC
    assert utilisation_gbps(128) == pytest.approx(45.98, abs=0.01)
