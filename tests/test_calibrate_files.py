"""``islands calibrate`` from a user's own tool files (iperf3 -J, ping, nccl-tests): the profile the
samples in tests/data/calibrate make, computed by hand from what the files say, and the refusals of
files that do not fit together.

The samples: hosts a (10.0.0.1), b (10.0.0.2 privately, 198.51.100.2 publicly) and c (10.0.0.3);

* iperf3-a-b-P2.json: client a to b, two streams received at 24.5 + 23.5 Mbit/s, TCP min_rtt 20.5 and
  21 ms; iperf3-a-b-R.json: client a, -R: b sent, a received 45 Mbit/s; iperf3-a-c-bidir.json: a to
  c 47.5 Mbit/s and c to a 95 at once, min_rtt 30 ms; iperf3-b-c.json: b to c 49 Mbit/s, 40.1 ms;
  iperf3-c-b.json: c to b ("::ffff:" addresses, the server given by name) 96 Mbit/s, 40.3 ms;
* ping-a-b.txt: replies of 20.1, 20.3, 20.2, 20.9, 20.2 ms; ping-a-c-quiet.txt: ping -q (macOS), avg
  30.150 ms;
* nccl-all-reduce-3.txt: 3 ranks on 3 hosts, sizes 8 x 4^k to 32 MiB, each time 100000 + S / 4
  microseconds (out-of-place 3 more, in-place 3 less); nccl-all-gather-3.txt: no Rank lines, no start
  line, sizes 24 x 4^k, each time 90000 + S / 8 microseconds.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest

from islands.cli import main
from islands.errors import UserError
from islands.scenarios import ScenarioSource
from islands.scenarios.fifo import fitted_k_u
from islands.scenarios.model import PairLatency
from islands.scenarios.profile import (
    BusRate,
    CollectiveCost,
    FifoEgress,
    Host,
    NetworkProfile,
    apply_profile,
    read_profile,
    ring_terms,
)
from islands.validation.toolfiles.readers import read_iperf3, read_nccl_tests, read_ping

SAMPLES = Path(__file__).parent / "data" / "calibrate"
HOSTS = ["--host", "a=10.0.0.1", "--host", "b=10.0.0.2,198.51.100.2", "--host", "c=10.0.0.3"]
IPERF3 = ["--iperf3", *sorted(str(path.name) for path in SAMPLES.glob("iperf3-*.json"))]
PINGS = ["--ping", "a:b=ping-a-b.txt", "--ping", "a:c=ping-a-c-quiet.txt"]
MBIT = 1e-3  # Gbit/s
ALL_REDUCE_SIZES = [8 * 4**k for k in range(12)]
ALL_GATHER_SIZES = [24 * 4**k for k in range(11)]


@pytest.fixture
def samples(tmp_path, monkeypatch):
    folder = tmp_path / "tools"
    shutil.copytree(SAMPLES, folder)
    monkeypatch.chdir(folder)
    return folder


def calibrate(*extra: str) -> NetworkProfile:
    assert main(["calibrate", "--out", "profile.json", *HOSTS, *IPERF3, *extra]) == 0
    return read_profile("profile.json")


def test_each_iperf3_file_reads_as_its_directions():
    p2, reverse, bidir = (
        read_iperf3(SAMPLES / name)
        for name in ("iperf3-a-b-P2.json", "iperf3-a-b-R.json", "iperf3-a-c-bidir.json")
    )
    # -P 2: the streams' sum; -R: only the server's copy, and no round trip (the client did not send)
    assert (p2.sent_bits_per_s, p2.received_bits_per_s, p2.min_rtt_s) == (48e6, None, 0.0205)
    assert (reverse.sent_bits_per_s, reverse.received_bits_per_s, reverse.min_rtt_s) == (
        None,
        45e6,
        None,
    )
    assert (bidir.sent_bits_per_s, bidir.received_bits_per_s, bidir.min_rtt_s) == (
        47.5e6,
        95e6,
        0.030,
    )
    assert (p2.local_host, p2.remote_host) == ("10.0.0.1", "198.51.100.2")


def test_the_samples_make_the_profile_by_hand(samples, capsys):
    profile = calibrate(*PINGS, "--nccl-tests", "nccl-all-reduce-3.txt")
    # uplink: the fastest each sent; downlink: the fastest each received
    # a sent 48 (to b) and 47.5 (to c), received 45 (from b) and 95 (from c)
    # b sent 45 and 49, received 48 and 96; c sent 95 and 96, received 47.5 and 49
    assert [(h.name, h.upload_gbps, h.download_gbps) for h in profile.hosts] == [
        ("a", pytest.approx(48 * MBIT), pytest.approx(95 * MBIT)),
        ("b", pytest.approx(49 * MBIT), pytest.approx(96 * MBIT)),
        ("c", pytest.approx(96 * MBIT), pytest.approx(49 * MBIT)),
    ]
    # a-b: the median of 20.1, 20.2, 20.2, 20.3, 20.9; a-c: ping -q's average; b-c: no ping, so the
    # smaller of the two b-c files' TCP min_rtt (40.1 and 40.3 ms)
    assert {pair.between: pair.rtt_ms for pair in profile.rtt_ms} == {
        ("a", "b"): pytest.approx(20.2),
        ("a", "c"): pytest.approx(30.15),
        ("b", "c"): pytest.approx(40.1),
    }
    assert profile.exchange is None
    collective = profile.collective
    assert (collective.test, collective.members, collective.ranks) == ("all_reduce", 3, 3)
    # every time is 100000 + S/4 microseconds: the line through the sizes up to 1 MiB meets 0 at 0.1 s
    assert collective.call_latency_s == pytest.approx(0.1, abs=1e-9)
    # bus bandwidth = S x 2(n-1)/n / t = S x 4/3 x 8 bits / t
    assert [row.size_bytes for row in collective.bus_gbps] == ALL_REDUCE_SIZES
    assert [row.bus_gbps for row in collective.bus_gbps] == pytest.approx(
        [size * 4 / 3 * 8 / 1e9 / ((100000 + size / 4) / 1e6) for size in ALL_REDUCE_SIZES]
    )
    # call overhead: 0.1 s less 2(M-1) = 4 one-way hops of the slowest pair (b-c, 40.1 ms / 2);
    # efficiency: the data's bus rate, 4/3 x 8 bits per 0.25 microseconds, over the slowest host's 48 Mbit/s
    terms = ring_terms(profile, "p")
    assert terms.call_overhead_s == pytest.approx(0.1 - 4 * 0.02005)
    assert terms.ring_efficiency == pytest.approx(4 / 3 * 8 / 0.25e-6 / 48e6)
    out = capsys.readouterr().out
    assert (
        "exchange.call_overhead_s = 0.0198 " in out and "network.ring_efficiency = 0.888889 " in out
    )
    assert (
        "b-c: 40.1 ms (iperf3's smallest TCP round trip, under load" in out and "clamped" not in out
    )


def test_an_all_gather_takes_its_ranks_from_the_flag_and_its_own_bus_factor(samples):
    profile = calibrate(*PINGS, "--nccl-tests", "nccl-all-gather-3.txt", "--nccl-ranks", "3")
    collective = profile.collective
    assert (collective.test, collective.members, collective.ranks) == ("all_gather", 3, 3)
    assert collective.call_latency_s == pytest.approx(0.09, abs=1e-9)
    # all-gather: (n-1)/n = 2/3 of the gathered size crosses each link
    assert [row.bus_gbps for row in collective.bus_gbps] == pytest.approx(
        [size * 2 / 3 * 8 / 1e9 / ((90000 + size / 8) / 1e6) for size in ALL_GATHER_SIZES]
    )
    assert ring_terms(profile, "p").ring_efficiency == pytest.approx(2 / 3 * 8 / 0.125e-6 / 48e6)


def test_a_collective_faster_than_the_slowest_host_is_clamped_and_said(samples, capsys):
    # without the b-c and c-b files the slowest host reads c's downlink 47.5 and a's uplink 47.5:
    # the data's bus rate, 42.67 Mbit/s, is still below; so lower every rate by a user's own file
    path = samples / "iperf3-a-c-bidir.json"
    path.write_text(path.read_text().replace("47500000.0", "40000000.0"))
    for name in ("iperf3-a-b-P2.json", "iperf3-b-c.json"):
        (samples / name).write_text(
            (samples / name).read_text().replace('"reverse":\t0', '"reverse":\t1')
        )
    profile = calibrate(*PINGS, "--nccl-tests", "nccl-all-reduce-3.txt")
    # a's uplink is now its only send, 40 Mbit/s to c; the data moved at 4/3 x 8 / 0.25e-6 = 42.67
    assert min(min(h.upload_gbps, h.download_gbps) for h in profile.hosts) == pytest.approx(
        40 * MBIT
    )
    terms = ring_terms(profile, "p")
    assert terms.ring_efficiency == 1.0
    assert terms.measured_efficiency == pytest.approx(4 / 3 * 8 / 0.25e-6 / 40e6)
    assert (
        "clamped to 1: the collective moved 1.067 x the slowest host's iperf3 rate"
        in capsys.readouterr().out
    )


def test_a_profile_from_files_leaves_the_scenario_s_exchange_costs_and_buckets():
    profile = NetworkProfile(
        "x", (Host("a", 1.0, 2.0), Host("b", 3.0, 4.0)), (PairLatency(("a", "b"), 10.0),)
    )
    document = {
        "island": [{"name": "a", "upload_burst_bytes": 5e5}, {"name": "b"}],
        "network": {"exchange_cpu_s_per_value": 1e-9},
    }
    applied = apply_profile(document, profile, "p.json")
    assert applied["island"][0] == {
        "name": "a",
        "upload_burst_bytes": 5e5,
        "upload_gbps": 1.0,
        "download_gbps": 2.0,
    }
    assert applied["network"] == {"exchange_cpu_s_per_value": 1e-9}
    assert applied["latency"] == [{"between": ["a", "b"], "rtt_ms": 10.0}]


def test_a_profile_with_a_collective_reads_back_the_same(tmp_path):
    profile = NetworkProfile(
        "x",
        (Host("a", 1.0, 2.0), Host("b", 3.0, 4.0)),
        (PairLatency(("a", "b"), 10.0),),
        collective=CollectiveCost("all_gather", 2, 4, 0.05, (BusRate(8, 1e-6), BusRate(64, 1e-5))),
    )
    profile.save(tmp_path / "p.json")
    assert read_profile(tmp_path / "p.json") == profile
    text = (tmp_path / "p.json").read_text()
    assert "exchange" not in json.loads(text)
    for edit, message in (
        (
            lambda t: t.replace('"all_gather"', '"broadcast"'),
            "is not one of all_reduce, all_gather",
        ),
        (
            lambda t: t.replace('"members": 2', '"members": 5'),
            r"collective.members: must be a whole number, 2 to the 2 hosts \(got 5\)",
        ),
        (lambda t: t.replace('"size_bytes": 64', '"size_bytes": 8'), "smallest first, each once"),
        (
            lambda t: t.replace('"ranks": 4', '"ranks": 4.0'),
            r"collective.ranks: must be a whole number, the 2 "
            r"members to 1048576 \(got 4.0\)",
        ),
    ):
        (tmp_path / "bad.json").write_text(edit(text))
        with pytest.raises(UserError, match=message):
            read_profile(tmp_path / "bad.json")


def test_a_collective_prices_ring_collectives_only():
    collective = CollectiveCost("all_reduce", 2, 2, 0.05, (BusRate(8, 1e-6), BusRate(1e8, 0.5)))
    profile = NetworkProfile(
        "x",
        (Host("a", 1.0, 1.0), Host("b", 1.0, 1.0)),
        (PairLatency(("a", "b"), 10.0),),
        collective=collective,
    )
    islands = [{"name": "a"}, {"name": "b"}]
    ring = apply_profile(
        {"schedule": {"algorithm": "diloco"}, "island": islands}, profile, "p.json"
    )
    assert ring["exchange"]["call_overhead_s"] == pytest.approx(0.05 - 2 * 0.005)
    for other in (
        {"schedule": {"algorithm": "decoupled"}, "island": islands},
        {"schedule": {"algorithm": "diloco"}, "network": {"collective": "tree"}, "island": islands},
    ):
        applied = apply_profile(
            other, profile, "p.json"
        )  # a learner's round trips, a tree: not a ring's calls
        assert "exchange" not in applied and "ring_efficiency" not in applied["network"]


def test_a_profile_s_fifo_prices_rings_only_and_replaces_the_scenario_s_own():
    profile = NetworkProfile(
        "x",
        (Host("a", 1.0, 1.0), Host("b", 1.0, 1.0)),
        (PairLatency(("a", "b"), 10.0),),
        fifo=FifoEgress(20.0, 4, "bbr"),
    )
    islands = [{"name": "a"}, {"name": "b"}]
    own = {"egress_queue": "fifo", "fifo_queue_ms": 500.0, "fifo_k_so": 0.3}
    ring = apply_profile(
        {"schedule": {"algorithm": "diloco"}, "network": own, "island": islands},
        profile,
        "p.json",
    )
    assert ring["network"] == {
        "egress_queue": "fifo",
        "fifo_queue_ms": 20.0,
        "streams": 4,
        "tcp_congestion_control": "bbr",
    }
    for other in (
        {"schedule": {"algorithm": "decoupled"}, "island": islands},
        {"schedule": {"algorithm": "diloco"}, "network": {"collective": "tree"}, "island": islands},
        {"schedule": {"algorithm": "diloco"}, "network": {"gather": "store"}, "island": islands},
    ):
        assert "egress_queue" not in apply_profile(other, profile, "p.json")["network"]


def three_islands(parameters: float) -> str:
    """A DiLoCo scenario of islands a, b and c (the samples' hosts) with fp32 values."""
    return f"""name = "three"
[model]
parameters = {parameters}
bytes_per_param = 4
[schedule]
algorithm = "diloco"
inner_steps = 10
outer_steps = 2
""" + "".join(
        f'[[island]]\nname = "{name}"\nstep_time_s = 1\nbandwidth_gbps = 1\n' for name in "abc"
    )


def test_a_scenario_takes_a_profile_from_files(samples):
    calibrate(*PINGS)
    (samples / "three.toml").write_text(three_islands(1e6))
    scenario = (
        ScenarioSource.read(samples / "three.toml")
        .with_network_profile(samples / "profile.json")
        .scenario
    )
    assert [island.upload_gbps for island in scenario.islands] == pytest.approx(
        [0.048, 0.049, 0.096]
    )


@pytest.mark.parametrize(
    "argv, edit, message",
    [
        (
            ["--host", "a=10.0.0.9", "--host", "b=10.0.0.2,198.51.100.2", "--host", "c=10.0.0.3"],
            None,
            "iperf3-a-b-P2.json: start.connected.0.local_host: 10.0.0.1 (the client) is no --host's address",
        ),
        (
            ["--host", "a=10.0.0.1", "--host", "b=10.0.0.2", "--host", "c=10.0.0.3"],
            None,
            "iperf3-a-b-P2.json: start.connected.0.remote_host: 198.51.100.2 (the server) is no --host's address",
        ),
        (
            ["--host", "a=10.0.0.1,10.0.0.3", "--host", "b=10.0.0.2,198.51.100.2"],
            None,
            "iperf3-a-c-bidir.json: start.connected: both ends are --host a",
        ),
        (HOSTS, ("iperf3-a-b-R.json", "iperf3-b-c.json"), "--iperf3: no file has host b sending"),
        (
            HOSTS,
            ("iperf3-b-c.json", "iperf3-c-b.json"),
            "--ping: no round trip between b and c: give --ping b:c=FILE",
        ),
    ],
)
def test_files_that_do_not_fit_the_hosts_are_refused_in_one_line(
    samples, capsys, argv, edit, message
):
    files = [name for name in IPERF3[1:] if edit is None or name not in edit]
    assert main(["calibrate", "--out", "p.json", *argv, "--iperf3", *files]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and message in err, err
    assert not (samples / "p.json").exists()


@pytest.mark.parametrize(
    "extra, message",
    [
        (
            ["--nccl-tests", "nccl-all-gather-3.txt"],
            "nccl-all-gather-3.txt: ranks: no '#  Rank N ... on HOST' or NCCL "
            "'nranks N' line: give --nccl-ranks N",
        ),
        (
            ["--nccl-tests", "nccl-all-reduce-3.txt", "--nccl-ranks", "4"],
            "ranks: the file says 3, --nccl-ranks 4",
        ),
        (
            ["--nccl-tests", "nccl-all-gather-3.txt", "--nccl-ranks", "2"],
            "the run was among 2 hosts (one host per rank",
        ),
    ],
)
def test_a_ping_or_nccl_file_that_does_not_fit_is_refused(samples, capsys, extra, message):
    assert (
        main(
            [
                "calibrate",
                "--out",
                "p.json",
                *HOSTS,
                *IPERF3,
                "--ping",
                "a:c=ping-a-c-quiet.txt",
                *extra,
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and message in err, err


def test_a_ping_of_a_third_host_is_refused(samples, capsys):
    assert (
        main(["calibrate", "--out", "p.json", *HOSTS, *IPERF3, "--ping", "a:c=ping-a-b.txt"]) == 2
    )
    assert (
        "ping-a-b.txt: PING line: it pinged 198.51.100.2, --host b's address, not a's or c's"
        in capsys.readouterr().err
    )


def test_the_text_readers_say_what_they_used():
    assert read_ping(SAMPLES / "ping-a-b.txt").replies == 5
    assert read_ping(SAMPLES / "ping-a-c-quiet.txt").replies == 0
    table = read_nccl_tests(SAMPLES / "nccl-all-reduce-3.txt")
    assert (table.ranks, table.members, len(table.rows)) == (3, 3, 12)
    # each row's time is the mean of the out-of-place and in-place columns: 100005 and 99999 at 8 bytes
    assert table.rows[0].time_s == pytest.approx(0.100002)
    gather = read_nccl_tests(SAMPLES / "nccl-all-gather-3.txt")
    assert (gather.test, gather.test_from, gather.ranks) == (
        "all_gather",
        "its rows reduce nothing",
        None,
    )


def test_the_simulator_remakes_the_largest_all_reduce_from_the_profile(samples):
    """A flat exchange of the largest size among the three islands, priced with the profile's call
    overhead and ring efficiency, takes what nccl-tests measured: c + 2(M-1) alpha is the per-call
    latency, and the bytes move at e x the slowest link, the data's bus rate."""
    from islands.simulator import simulate

    calibrate(*PINGS, "--nccl-tests", "nccl-all-reduce-3.txt")
    size = ALL_REDUCE_SIZES[-1]
    (samples / "three.toml").write_text(three_islands(size // 4))
    scenario = (
        ScenarioSource.read(samples / "three.toml")
        .with_network_profile(samples / "profile.json")
        .scenario
    )
    assert scenario.exchange.call_overhead_s == pytest.approx(0.1 - 4 * 0.02005)
    assert scenario.network.ring_efficiency == pytest.approx(4 / 3 * 8 / 0.25e-6 / 48e6)
    # the row: (8488611 + 8488605) / 2 microseconds
    assert simulate(scenario).summary["mean_sync_s"] == pytest.approx(8.488608, rel=1e-9)


def test_behind_one_fifo_the_collective_calibrates_k_s_and_the_scenario_extrapolates(
    samples, capsys
):
    """--egress-queue fifo: the profile's FIFO becomes the scenario's egress, and the collective sets
    fifo_k_s in place of the ring efficiency. At the slowest uplink (a's 48 Mbit/s) the efficiency is
    the same 0.888889, so the largest all-reduce takes what nccl-tests measured; at other rates the
    model takes over. By hand: T_fifo / T_fair - 1 = 1 / 0.888889 - 1 = 0.125; s = sqrt(10 / 48); a
    GSO packet of 4 ms of 48 Mbit/s is 24,000 bytes, below 64 KiB (c = 1), and one flow keeps two of
    them, 8 ms, in a 200 ms FIFO (o = 0): k_s = 0.125 / sqrt(10 / 48)."""
    from islands.simulator import simulate

    calibrate(*PINGS, "--nccl-tests", "nccl-all-reduce-3.txt", "--egress-queue", "fifo")
    k_s = 0.125 / math.sqrt(10 / 48)
    assert f"network.fifo_k_s = {k_s:.6g} in its place" in capsys.readouterr().out
    size = ALL_REDUCE_SIZES[-1]
    (samples / "three.toml").write_text(three_islands(size // 4))
    source = ScenarioSource.read(samples / "three.toml").with_network_profile(
        samples / "profile.json"
    )
    network = source.scenario.network
    assert (network.egress_queue, network.streams, network.fifo_queue_ms) == ("fifo", 1, 200)
    assert network.ring_efficiency == 1.0 and network.fifo_k_s == pytest.approx(k_s, rel=1e-12)
    assert simulate(source.scenario).summary["mean_sync_s"] == pytest.approx(8.488608, rel=1e-9)
    # every link at 200 Mbit/s: c = 65,536 / (0.004 x 25e6); the bytes at 1 / (1 + k_s s c) of it
    faster = source.with_overrides("island.*.upload_gbps=0.2", "island.*.download_gbps=0.2")
    efficiency = 1 / (1 + k_s * math.sqrt(10 / 200) * 65536 / (0.004 * 25e6))
    assert efficiency == pytest.approx(0.961416, abs=1e-6)
    assert simulate(faster.scenario).summary["mean_sync_s"] == pytest.approx(
        0.1 + 4 / 3 * size * 8 / (efficiency * 200e6), rel=1e-9
    )


def test_behind_one_fifo_unequal_hosts_calibrate_the_k_u_their_ring_carried(samples):
    """The same collective over hosts of 192, 96 and 48 Mbit/s each way (a, b, c): around the ring
    a -> b -> c, c's download is fed by b's upload and b's by a's (rho 2 each, u = 1). The fit's k_u
    (0.175) would carry the ring at 48 / 1.175 = 40.9 Mbit/s, below the 42.6667 it moved; the largest
    k_u that carries it: (48 / 42.6667 - 1) / 1 = 0.125. The largest all-reduce takes what nccl-tests
    measured."""
    from islands.simulator import simulate

    calibrate(*PINGS, "--nccl-tests", "nccl-all-reduce-3.txt", "--egress-queue", "fifo")
    profile = json.loads((samples / "profile.json").read_text())
    for host, gbps in zip(profile["hosts"], (0.192, 0.096, 0.048)):
        host["upload_gbps"] = host["download_gbps"] = gbps
    (samples / "profile.json").write_text(json.dumps(profile))
    size = ALL_REDUCE_SIZES[-1]
    (samples / "three.toml").write_text(three_islands(size // 4))
    source = ScenarioSource.read(samples / "three.toml").with_network_profile(
        samples / "profile.json"
    )
    assert source.scenario.network.fifo_k_u == pytest.approx(0.125, rel=1e-9)
    assert simulate(source.scenario).summary["mean_sync_s"] == pytest.approx(8.488608, rel=1e-9)


def test_the_k_u_a_ring_carried_by_hand():
    # 4:2:1 at 0.9 of the slowest: (1 / 0.9 - 1) = 0.111111; at 0.8 the fit's 0.175 carries it (None)
    up = np.array([4.0, 2.0, 1.0])
    assert fitted_k_u(up, up, 0.9) == pytest.approx(1 / 0.9 - 1, rel=1e-12)
    assert fitted_k_u(up, up, 0.8) is None
    assert fitted_k_u(np.ones(3), np.ones(3), 0.5) is None  # equal links: none charged
    assert fitted_k_u(up[:2], up[:2], 0.9) is None  # two members: not charged
    # 1.5:1.2:1 at 0.99 of the slowest: c fed by b (rho 1.2, u = 0.263034), (1 / 0.99 - 1) / u
    rates = np.array([1.5, 1.2, 1.0])
    assert fitted_k_u(rates, rates, 0.99) == pytest.approx(0.0101010 / 0.2630344, rel=1e-5)


def test_calibrate_from_files_is_refused_under_torchrun(samples, capsys, monkeypatch):
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "3")
    assert main(["calibrate", "--out", "p.json", *HOSTS, *IPERF3]) == 2
    assert "run it once, not under torchrun" in capsys.readouterr().err


OLD_ALL_GATHER = """# nThread 1 nGpus 1 minBytes 64 maxBytes 4194304 step: 64(factor) warmup iters: 5 iters: 20
#
# Using devices
#   Rank  0 Pid  20311 on     west device  0 [0x3b] Tesla V100-SXM2-16GB
#   Rank  1 Pid  18302 on     east device  0 [0x3b] Tesla V100-SXM2-16GB
#
#                                             out-of-place                       in-place
#       size         count    type     time   algbw   busbw  error     time   algbw   busbw  error
#        (B)    (elements)             (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
          64             8   float    20010    0.00    0.00  0e+00    20010    0.00    0.00  0e+00
        4096           512   float    20640    0.00    0.00  0e+00    20640    0.00    0.00  0e+00
      262144         32768   float    60320    0.00    0.00  0e+00    60320    0.00    0.00  0e+00
     4194304        524288   float   660000    0.01    0.00  0e+00   660000    0.01    0.00  0e+00
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 0.00142
"""


def test_an_old_all_gather_table_without_redop_or_root_reads(tmp_path):
    """nccl-tests before 2.10: no start line, no redop and root columns, an 'error' column of the
    largest deviation (0e+00) where newer ones count '#wrong'; Rank lines 'Pid N on HOST device'."""
    (tmp_path / "old.txt").write_text(OLD_ALL_GATHER)
    table = read_nccl_tests(tmp_path / "old.txt")
    assert (table.test, table.ranks, table.members) == ("all_gather", 2, 2)
    assert [row.time_s for row in table.rows] == [0.02001, 0.02064, 0.06032, 0.66]
    (tmp_path / "old.txt").write_text(OLD_ALL_GATHER.replace(": 0 OK", ": 2 FAILED"))
    with pytest.raises(
        UserError, match="'Out of bounds values : 2 FAILED': the collective gave wrong results"
    ):
        read_nccl_tests(tmp_path / "old.txt")
