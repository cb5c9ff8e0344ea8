"""``islands calibrate``: a network profile measured among processes, over the emulated WAN (each
pair's rate and round trip against the links it was given) and under torchrun's environment."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest

from islands.cli import main
from islands.scenarios.profile import host_rates, read_profile
from islands.validation.calibration import probe_volume_bytes
from islands.validation.exchange_probe import medium_values
from islands.validation.hostprobe import SCATTER, fitted_burst_bytes

THREE = """name = "three"
[model]
parameters = 1e6
bytes_per_param = 4
[schedule]
algorithm = "diloco"
inner_steps = 20
outer_steps = 3
[[island]]
name = "a"
step_time_s = 0.1
bandwidth_gbps = 0.02
latency_ms = 5
[[island]]
name = "b"
step_time_s = 0.1
upload_gbps = 0.01
download_gbps = 0.02
latency_ms = 10
[[island]]
name = "c"
step_time_s = 0.1
bandwidth_gbps = 0.04
latency_ms = 15
"""
UP = {"a": 0.02, "b": 0.01, "c": 0.04}
DOWN = {"a": 0.02, "b": 0.02, "c": 0.04}
ONE_WAY_MS = {"a": 5, "b": 10, "c": 15}


def test_a_host_s_links_are_its_fastest_copies_out_and_in():
    # a copy alone moves at min(sender's uplink, receiver's downlink)
    rate = {
        (s, d): min(u, v)
        for s, u in enumerate((2.0, 1.0, 4.0))
        for d, v in enumerate((2.0, 2.0, 4.0))
        if s != d
    }
    # c's 4.0 up and down show as 2.0: no other host sends or receives faster
    assert host_rates(range(3), rate) == [(2.0, 2.0), (1.0, 2.0), (2.0, 2.0)]


def exchange_timings(burst_bytes: float, scatter_s: float, rate_bytes_per_s: float = 25e6) -> dict:
    """A 3-host probe's timings over links that send ``burst_bytes`` at once, then ``rate_bytes_per_s``:
    each exchange's data time is (volume - burst) / rate after a 10 ms fixed cost."""
    large_values = 1 << 22
    volumes = {
        "medium": probe_volume_bytes(3, medium_values(large_values)),
        "large": probe_volume_bytes(3, large_values),
    }
    average = {
        "tiny": 0.01,
        **{
            size: 0.01 + (volume - burst_bytes) / rate_bytes_per_s
            for size, volume in volumes.items()
        },
    }
    average["calls"] = average["medium"] + 15 * 0.001  # the medium tensor in 16 calls
    return {
        "average": {size: {"3": seconds} for size, seconds in average.items()},
        SCATTER: {size: {"3": scatter_s} for size in average},
        "large_values": large_values,
    }


def test_a_burst_the_repeats_resolve_is_kept_and_one_within_their_scatter_is_not():
    medium, large = probe_volume_bytes(3, medium_values(1 << 22)), probe_volume_bytes(3, 1 << 22)
    rate, burst = 25e6, 500e3
    # the medium exchange d slower and the large one d faster fit a burst of
    # L - (L - M)(t_L - d) / (t_L - t_M - 2d), none from d* = (L (t_L - t_M) - (L - M) t_L) / (L + M)
    t_medium, t_large = (medium - burst) / rate, (large - burst) / rate
    threshold_s = (large * (t_large - t_medium) - (large - medium) * t_large) / (large + medium)
    assert threshold_s == pytest.approx(0.0120, abs=1e-4)  # 500 kB at 25 MB/s is 20 ms of data
    for scatter_s, kept in ((0.001, burst), (0.9 * threshold_s, burst), (1.1 * threshold_s, 0.0)):
        timings = exchange_timings(burst, scatter_s, rate)
        assert fitted_burst_bytes(3, timings, rate * 8, medium) == pytest.approx(kept), scatter_s
    assert fitted_burst_bytes(3, exchange_timings(0.0, 0.0), rate * 8, medium) == 0.0


def test_calibrate_measures_the_emulated_links_and_the_profile_drives_the_simulator(
    tmp_path, capsys
):
    scenario = tmp_path / "three.toml"
    scenario.write_text(THREE)
    out = tmp_path / "profile.json"
    assert main(["calibrate", "--emulate", str(scenario), "--in-process", "--out", str(out)]) == 0
    profile = read_profile(out)
    assert [host.name for host in profile.hosts] == ["a", "b", "c"]
    for host in profile.hosts:  # what the other hosts' links let each one show
        others = [name for name in UP if name != host.name]
        assert host.upload_gbps == pytest.approx(
            max(min(UP[host.name], DOWN[o]) for o in others), rel=0.05
        )
        assert host.download_gbps == pytest.approx(
            max(min(UP[o], DOWN[host.name]) for o in others), rel=0.05
        )
    for pair in profile.rtt_ms:
        expected_ms = 2 * sum(ONE_WAY_MS[name] for name in pair.between)
        assert expected_ms - 0.5 <= pair.rtt_ms <= expected_ms + 5
    assert profile.exchange.members == 3 and profile.exchange.cpu_s_per_value > 0
    capsys.readouterr()
    assert main(["simulate", str(scenario), "--network-profile", str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["complete"]


def test_under_torchrun_s_environment_each_named_host_measures(tmp_path):
    out = tmp_path / "profile.json"
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    children = [
        subprocess.Popen(
            [sys.executable, "-m", "islands", "calibrate", "--out", str(out), "--name", name],
            env={
                **os.environ,
                "RANK": str(rank),
                "WORLD_SIZE": "2",
                "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": str(port),
                "OMP_NUM_THREADS": "1",
            },
        )
        for rank, name in enumerate(("left", "right"))
    ]
    assert [child.wait(timeout=240) for child in children] == [0, 0]
    profile = read_profile(out)
    assert [host.name for host in profile.hosts] == ["left", "right"]
    assert profile.rtt_ms[0].between == ("left", "right")


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["calibrate", "--out", "p.json"],
            "run it under torchrun, one process per host, or give --emulate FILE",
        ),
        (
            ["calibrate", "--emulate", "worked-example", "--out", "p.json"],
            "island.0.replicas: calibrate --emulate runs one host per island",
        ),
    ],
)
def test_calibrate_refuses_in_one_line(capsys, monkeypatch, argv, message):
    monkeypatch.delenv("RANK", raising=False)
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err
