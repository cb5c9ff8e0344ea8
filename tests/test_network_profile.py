"""A measured network profile (``--network-profile``): how a scenario takes it, by closed form, and
the one-line refusals of a profile that does not fit or cannot be read."""

from __future__ import annotations

import json
import re

import pytest

from islands.cli import main
from islands.scenarios import ScenarioError, ScenarioSource
from islands.scenarios.model import PairLatency
from islands.scenarios.profile import (
    ExchangeCost,
    Host,
    NetworkProfile,
    apply_profile,
    read_profile,
)
from islands.simulator import simulate

GBPS = 1e9 / 8
SCENARIO = """name = "three"
[model]
parameters = 1e8
bytes_per_param = 2
[schedule]
algorithm = "diloco"
inner_steps = 100
outer_steps = 2
[[island]]
name = "a"
step_time_s = 1.0
bandwidth_gbps = 10
latency_ms = 1
[[island]]
name = "b"
step_time_s = 1.0
bandwidth_gbps = 10
latency_ms = 1
[[island]]
name = "c"
step_time_s = 1.0
bandwidth_gbps = 10
latency_ms = 1
"""
PROFILE = NetworkProfile(
    label="three hosts",
    hosts=(Host("a", 0.5, 0.8), Host("b", 0.4, 0.9), Host("c", 1.0, 1.0)),
    rtt_ms=(
        PairLatency(("a", "b"), 20.0),
        PairLatency(("a", "c"), 30.0),
        PairLatency(("b", "c"), 50.0),
    ),
    exchange=ExchangeCost(members=3, cpu_s_per_value=1e-8, hop_overhead_s=0.002, end_spread_s=0.0),
)


@pytest.fixture
def files(tmp_path):
    scenario = tmp_path / "three.toml"
    scenario.write_text(SCENARIO)
    profile = tmp_path / "profile.json"
    PROFILE.save(profile)
    return scenario, profile


def test_a_profile_sets_the_links_the_round_trips_and_the_exchange_costs(files):
    scenario_path, profile_path = files
    scenario = ScenarioSource.read(scenario_path).with_network_profile(profile_path).scenario
    assert [(i.upload_gbps, i.download_gbps) for i in scenario.islands] == [
        (0.5, 0.8),
        (0.4, 0.9),
        (1.0, 1.0),
    ]
    assert scenario.network.exchange_cpu_s_per_value == 1e-8
    summary = simulate(scenario).summary
    # ring a, b, c: the slowest one-way hop is b-c, 25 ms + 2 ms of overhead; 2(M-1) = 4 hops; the
    # slowest link is b's 0.4 Gbit/s uplink; 2(M-1)/M * S = 4/3 * 2e8 bytes
    sync_s = 4 * (0.025 + 0.002) + 4 / 3 * 2e8 / (0.4 * GBPS)
    assert summary["mean_sync_s"] == pytest.approx(sync_s)
    # each member screens its 1e8 values (1 s) before the bytes move: idle, not stall
    assert summary["idle_s"] == pytest.approx(2 * 1e8 * 1e-8)


def test_the_cli_takes_it_and_set_applies_on_top(files, capsys):
    scenario_path, profile_path = files
    assert (
        main(
            [
                "simulate",
                str(scenario_path),
                "--network-profile",
                str(profile_path),
                "--json",
                "--set",
                "network.exchange_cpu_s_per_value=0",
            ]
        )
        == 0
    )
    summary = json.loads(capsys.readouterr().out)
    assert summary["idle_s"] == 0
    assert summary["mean_sync_s"] == pytest.approx(4 * 0.027 + 4 / 3 * 2e8 / (0.4 * GBPS))
    assert (
        main(
            [
                "sweep",
                str(scenario_path),
                "--network-profile",
                str(profile_path),
                "--grid",
                "schedule.inner_steps=100,200",
                "-o",
                str(scenario_path.parent / "sweep.csv"),
                "--jobs",
                "1",
            ]
        )
        == 0
    )


@pytest.mark.parametrize(
    "edit, message",
    [
        (
            lambda p: p.replace('"c"', '"z"'),
            r"hosts: no host named 'c' \(it measured 'a', 'b', 'z'\)",
        ),
        (
            lambda p: p.replace('"rtt_ms": 50.0', '"rtt_ms": -1'),
            r"rtt_ms.2.rtt_ms: must be >= 0 ms \(got -1\)",
        ),
        (
            lambda p: p.replace('"upload_gbps": 0.5', '"upload_gbps": 0'),
            r"hosts.0.upload_gbps: must be >= 1e-06 Gbit/s "
            r"\(see docs/limits.md\) \(got 0\)",
        ),
        (lambda p: p.replace('"kind"', '"sort"'), r"kind: not a network profile"),
        (lambda p: p[: len(p) // 2], r"not valid JSON"),
        (
            lambda p: p.replace('"members": 3,', ""),
            r"exchange: no members: the profile is incomplete",
        ),
    ],
)
def test_a_profile_that_does_not_fit_or_is_broken_is_refused_in_one_line(
    files, capsys, edit, message
):
    scenario_path, profile_path = files
    profile_path.write_text(edit(profile_path.read_text()))
    assert main(["simulate", str(scenario_path), "--network-profile", str(profile_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(profile_path) in err
    assert re.search(message, err), err


def test_a_missing_pair_is_named():
    broken = NetworkProfile("x", PROFILE.hosts, PROFILE.rtt_ms[:2], PROFILE.exchange)
    with pytest.raises(ScenarioError, match=r"p.json: rtt_ms: no round trip between 'b' and 'c'"):
        apply_profile({"island": [{"name": n} for n in "abc"]}, broken, "p.json")


def test_a_saved_profile_reads_back_the_same(files):
    assert read_profile(files[1]) == PROFILE
